/* probe.c - `lockstep probe`: the parity probe on a serving configuration. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char *help =
    "usage: lockstep probe [-m MODEL] [--spec KIND] [--draft-max K] [--kernels K] [-t THREADS]\n"
    "                      [-np N] [-c N] [--draws N] [--allow-inexact] [--no-memo] [--json]\n"
    "\n"
    "Certifies, byte for byte, the configuration `lockstep serve` would run with these flags:\n"
    "requests go through that engine itself (its kernels, scheduler, paged KV and prefix\n"
    "cache) and their logits are compared with the same requests run alone, in one chunk,\n"
    "without the cache, without drafts, on one thread and on the scalar reference, over N\n"
    "random draws of prompts from the model's vocabulary.  Axes: batch mix, chunked\n"
    "prefill, prefix cache, block vs chain (verify blocks), threads, ISA.  Verdict:\n"
    "verified, scoped (a non-canonical family was withdrawn for the rows that need\n"
    "parity) or failed (speculation is declined; exit 1 unless --allow-inexact).\n"
    "\n"
    "  -m, --model PATH    model (default " LS_DEFAULT_MODEL ")\n"
    "      --spec KIND     the drafter serving would use: ngram, draft, layerskip, mtp, off (default ngram)\n"
    "      --draft-max K   longest draft (default 8)\n"
    "      --kernels K     auto, wide, narrow (default auto)\n"
    "      --device D      cpu, or cuda in a CUDA build (default cpu)\n"
    "  -t, --threads N     threads (default: online CPUs)\n"
    "  -np, --parallel N   sequences decoded together (default 8)\n"
    "  -c, --ctx-size N    context per sequence (default min(trained, 4096))\n"
    "      --draws N       random draws (default 3, at least 3)\n"
    "      --allow-inexact exit 0 even when the verdict is failed\n"
    "      --no-memo       probe even if this configuration's result is memoized (and replace it)\n"
    "      --json          one JSON object\n";

int cli_probe(int argc, char **argv) {
    const char *cmd = "probe";
    const char *model_path = LS_DEFAULT_MODEL, *spec = "ngram", *kernels = "auto", *device = "cpu";
    long long draft_max = 8, threads = 0, draws = 3, par = 8, ctx = 0;
    bool json = false, allow_inexact = false, memo = true;
    for (int i = 1; i < argc; i++) /* llama-server spells it -np */
        if (!strcmp(argv[i], "-np")) argv[i] = "--parallel";
    enum { O_SPEC = 256, O_DMAX, O_KERNELS, O_DRAWS, O_INEXACT, O_NOMEMO, O_JSON, O_PAR, O_DEVICE };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},       {"spec", required_argument, 0, O_SPEC},
        {"draft-max", required_argument, 0, O_DMAX}, {"kernels", required_argument, 0, O_KERNELS},
        {"threads", required_argument, 0, 't'},     {"draws", required_argument, 0, O_DRAWS},
        {"parallel", required_argument, 0, O_PAR},  {"ctx-size", required_argument, 0, 'c'},
        {"allow-inexact", no_argument, 0, O_INEXACT}, {"no-memo", no_argument, 0, O_NOMEMO},
        {"json", no_argument, 0, O_JSON},           {"device", required_argument, 0, O_DEVICE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:c:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case O_SPEC: spec = optarg; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &draft_max)) return LS_EXIT_USAGE; break;
        case O_KERNELS: kernels = optarg; break;
        case O_DEVICE: device = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case O_PAR: if (!cli_parse_int(cmd, "--parallel", optarg, 1, 1024, &par)) return LS_EXIT_USAGE; break;
        case 'c': if (!cli_parse_int(cmd, "--ctx-size", optarg, 2, 1 << 24, &ctx)) return LS_EXIT_USAGE; break;
        case O_DRAWS: if (!cli_parse_int(cmd, "--draws", optarg, 3, 1000, &draws)) return LS_EXIT_USAGE; break;
        case O_INEXACT: allow_inexact = true; break;
        case O_NOMEMO: memo = false; break;
        case O_JSON: json = true; break;
        case 'h': fputs(help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    ls_err err;
    ls_spec_kind kind;
    if (ls_spec_kind_from_name(spec, &kind, &err)) return cli_usage_error(cmd, "%s", err.msg);
    if (strcmp(kernels, "auto") && strcmp(kernels, "wide") && strcmp(kernels, "narrow"))
        return cli_usage_error(cmd, "no kernel family '%s' in this build (available: auto, wide, narrow%s)", kernels,
                               !strcmp(kernels, "fast") ? "; this build has no fast CPU family" : "");
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    if (threads == 0) threads = cli_default_threads();
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = model_path;
    char cdir[4096];
    mp.cache_dir = cli_cache_dir(cdir, sizeof cdir);
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "lockstep probe: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    int rc = 1;
    /* The engine serve would build with these flags (serve.c: the same parameters). */
    const int32_t K = kind != LS_SPEC_OFF ? (int32_t)draft_max : 0;
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT;
    ep.n_ctx = (int32_t)ctx;
    ep.n_seq_max = (int32_t)par;
    ep.step_tokens = (int32_t)(par * (1 + K) > 512 ? par * (1 + K) : 512);
    ep.n_threads = (int32_t)threads;
    ep.kernels = kernels;
    ep.draft_max = K;
    ep.allow_inexact = allow_inexact;
    ep.device = device;
    ls_engine *e = ls_engine_create(m, &ep, &err);
    if (!e) {
        fprintf(stderr, "lockstep probe: %s\n", err.msg);
        ls_model_free(m);
        return LS_EXIT_USAGE;
    }
    char cfg[64], dir[4096];
    snprintf(cfg, sizeof cfg, "spec=%s", ls_spec_kind_name(kind));
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    pp.draws = (int32_t)draws;
    pp.memo_dir = cli_cache_dir(dir, sizeof dir);
    pp.refresh = !memo;
    pp.config = cfg;
    ls_probe_result r = LS_PROBE_RESULT_INIT;
    if (ls_engine_probe(e, &pp, &r, &err)) {
        fprintf(stderr, "lockstep probe: %s\n", err.msg);
        goto out;
    }
    ls_engine_info ei = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(e, &ei);
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "verdict", ls_verdict_name(r.verdict));
        cJSON *ax = cJSON_AddObjectToObject(j, "axes");
        for (int a = 0; a < LS_AXIS_COUNT; a++) {
            cJSON *x = cJSON_AddObjectToObject(ax, ls_axis_name((ls_axis)a));
            cJSON_AddStringToObject(x, "state", r.axis[a] == LS_AXIS_PASSED   ? "passed"
                                                : r.axis[a] == LS_AXIS_FAILED ? "failed"
                                                                              : "not checked");
            if (r.axis[a] == LS_AXIS_NOT_CHECKED) cJSON_AddStringToObject(x, "why", r.why_not[a]);
        }
        cJSON *fm = cJSON_AddObjectToObject(j, "kernels");
        cJSON_AddStringToObject(fm, "parity_rows_before", r.kernels_before);
        cJSON_AddStringToObject(fm, "parity_rows", r.kernels_after);
        cJSON_AddStringToObject(fm, "other_rows", ei.kernels_free);
        cJSON_AddNumberToObject(j, "draws", r.draws);
        cJSON_AddNumberToObject(j, "logits_rows", r.n_rows);
        cJSON_AddNumberToObject(j, "drafted", r.drafted);
        cJSON_AddNumberToObject(j, "accepted", r.accepted);
        cJSON_AddNumberToObject(j, "ms", r.ms);
        cJSON *ph = cJSON_AddObjectToObject(j, "phase_ms");
        cJSON_AddNumberToObject(ph, "setup", r.ms_setup);
        cJSON_AddNumberToObject(ph, "reference", r.ms_ref);
        cJSON_AddNumberToObject(ph, "mix", r.ms_mix);
        cJSON_AddNumberToObject(ph, "threads", r.ms_threads);
        cJSON_AddNumberToObject(ph, "isa", r.ms_isa);
        cJSON_AddBoolToObject(j, "memoized", r.memoized);
        cJSON_AddStringToObject(j, "spec", ls_spec_kind_name(kind));
        cJSON_AddNumberToObject(j, "draft_max", K);
        cJSON_AddNumberToObject(j, "parallel", ei.n_seq_max);
        cJSON_AddStringToObject(j, "isa", ls_isa_name(ei.isa));
        cJSON_AddStringToObject(j, "device", ei.device);
        cJSON_AddNumberToObject(j, "threads", ei.n_threads);
        cJSON_AddStringToObject(j, "detail", r.detail);
        char *s = cJSON_PrintUnformatted(j);
        if (s) puts(s);
        free(s);
        cJSON_Delete(j);
    } else {
        printf("probe: %s (%s, %s, %d threads, %d parallel, verify blocks up to %d; %.0f ms%s)\n",
               ls_verdict_name(r.verdict), ei.device, ls_isa_name(ei.isa), ei.n_threads, ei.n_seq_max, K + 1, r.ms,
               r.memoized ? ", memoized" : "");
        for (int a = 0; a < LS_AXIS_COUNT; a++)
            printf("  %-16s %s%s%s\n", ls_axis_name((ls_axis)a),
                   r.axis[a] == LS_AXIS_PASSED ? "ok" : r.axis[a] == LS_AXIS_FAILED ? "FAILED" : "not checked",
                   r.axis[a] == LS_AXIS_NOT_CHECKED ? ": " : "", r.axis[a] == LS_AXIS_NOT_CHECKED ? r.why_not[a] : "");
        printf("kernels: rows that need parity run %s%s; other rows run %s\n", r.kernels_after,
               strcmp(r.kernels_before, r.kernels_after) ? " (the failing one was withdrawn)" : "", ei.kernels_free);
        if (!r.memoized) {
            printf("compared: %d logits rows over %d draws; %d drafted, %d accepted\n", r.n_rows, r.draws, r.drafted,
                   r.accepted);
            printf("time: setup %.0f ms, references %.0f, mixes %.0f, one thread %.0f, scalar %.0f\n", r.ms_setup,
                   r.ms_ref, r.ms_mix, r.ms_threads, r.ms_isa);
        }
        if (r.detail[0]) printf("first mismatch: %s\n", r.detail);
    }
    rc = r.verdict == LS_VERDICT_FAILED && !allow_inexact ? 1 : 0;
    if (r.verdict == LS_VERDICT_FAILED)
        fprintf(stderr, "lockstep probe: failed: speculation %s\n",
                allow_inexact ? "would run inexact (--allow-inexact)" : "stays off (fail-closed)");
out:
    ls_engine_free(e);
    ls_model_free(m);
    return rc;
}
