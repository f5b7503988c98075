/* probe.c - `lockstep probe`: the exactness probe on a serving configuration. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/spec_probe.h"
#include "spec/spec.h"

static const char *help =
    "usage: lockstep probe [-m MODEL] [--spec KIND] [--draft-max K] [--kernels K] [-t THREADS]\n"
    "                      [--draws N] [--allow-inexact] [--no-memo] [--json]\n"
    "\n"
    "Checks, byte for byte, on this machine's serving configuration, that a verify block\n"
    "of width 2..K+1 equals the same tokens one by one (P1), that it does not change when\n"
    "other sequences' rows share its forward (P2), and that chunked prefill equals one\n"
    "chunk (P3), over N random draws.  Verdict: exact, scoped (a non-canonical family was\n"
    "withdrawn for the rows that need parity) or declined (exit 1 unless --allow-inexact).\n"
    "\n"
    "  -m, --model PATH    model (default " LS_DEFAULT_MODEL ")\n"
    "      --spec KIND     the drafter serving would use: ngram, draft, layerskip, mtp (default ngram)\n"
    "      --draft-max K   longest draft (default 8)\n"
    "      --kernels K     auto, wide, narrow, fast, or a registered family name (default auto)\n"
    "  -t, --threads N     threads (default: online CPUs)\n"
    "      --draws N       random draws (default 3, at least 3)\n"
    "      --allow-inexact exit 0 even when the verdict is declined\n"
    "      --no-memo       probe even if this configuration's result is memoized\n"
    "      --json          one JSON object\n";

/* The families a --kernels value selects: (rows without a parity need, rows with one). */
int cli_kernels_families(const char *cmd, const char *name, const ls_mm_family **fam,
                         const ls_mm_family **fam_parity) {
    const ls_mm_family *f = !strcmp(name, "auto") ? &ls_mm_wide : ls_mm_family_builtin(name);
    if (!f)
        return cli_usage_error(cmd, "no kernel family '%s' in this build (available: auto, wide, narrow%s)", name,
                               !strcmp(name, "fast") ? "; this build has no fast CPU family" : "");
    *fam = *fam_parity = f;
    return 0;
}

int cli_probe(int argc, char **argv) {
    const char *cmd = "probe";
    const char *model_path = LS_DEFAULT_MODEL, *spec = "ngram", *kernels = "auto";
    long long draft_max = 8, threads = 0, draws = 3;
    bool json = false, allow_inexact = false, memo = true;
    enum { O_SPEC = 256, O_DMAX, O_KERNELS, O_DRAWS, O_INEXACT, O_NOMEMO, O_JSON };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},       {"spec", required_argument, 0, O_SPEC},
        {"draft-max", required_argument, 0, O_DMAX}, {"kernels", required_argument, 0, O_KERNELS},
        {"threads", required_argument, 0, 't'},     {"draws", required_argument, 0, O_DRAWS},
        {"allow-inexact", no_argument, 0, O_INEXACT}, {"no-memo", no_argument, 0, O_NOMEMO},
        {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case O_SPEC: spec = optarg; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &draft_max)) return LS_EXIT_USAGE; break;
        case O_KERNELS: kernels = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
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
    const ls_mm_family *fam, *famp;
    if (cli_kernels_families(cmd, kernels, &fam, &famp)) return LS_EXIT_USAGE;
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? n : 1;
    }
    ls_model *m = ls_model_load((ls_model_params){.path = model_path}, &err);
    if (!m) {
        fprintf(stderr, "lockstep probe: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    int rc = 1;
    /* The forward serving uses (same ISA selection, threads and families; row and
     * context limits do not change any bits). */
    ls_fwd *f = ls_fwd_create(m, (ls_fwd_params){.n_rows = 512, .n_ctx = 256, .n_threads = (int32_t)threads, .isa = -1,
                                                  .fam = fam, .fam_parity = famp}, &err);
    if (!f) {
        fprintf(stderr, "lockstep probe: %s\n", err.msg);
        ls_model_free(m);
        return 1;
    }
    char cfg[64];
    snprintf(cfg, sizeof cfg, "spec=%s", ls_spec_kind_name(kind));
    ls_spec_probe_result r;
    bool from_memo = false;
    if (ls_spec_probe_cached(m, model_path, memo ? ls_probe_memo_dir() : NULL, cfg, f, (int32_t)draft_max, (int)draws, &r,
                             &from_memo, &err)) {
        fprintf(stderr, "lockstep probe: %s\n", err.msg);
        goto out;
    }
    const ls_mm_family *fb = r.fam_parity_before, *fa = r.fam_parity_after, *ff = r.fam_free;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "verdict", ls_verdict_name(r.verdict));
        cJSON *ax = cJSON_AddObjectToObject(j, "axes"), *fm = cJSON_AddObjectToObject(j, "families");
        cJSON_AddBoolToObject(ax, "block_vs_chain", r.block_vs_chain);
        cJSON_AddBoolToObject(ax, "batch_mix", r.batch_mix);
        cJSON_AddBoolToObject(ax, "chunked_prefill", r.chunked_prefill);
        cJSON *a = cJSON_AddObjectToObject(fm, fa->name);
        cJSON_AddBoolToObject(a, "canonical", fa->canonical);
        cJSON_AddStringToObject(a, "rows", fa == ff ? "all" : "parity");
        if (ff != fa) {
            cJSON *b = cJSON_AddObjectToObject(fm, ff->name);
            cJSON_AddBoolToObject(b, "canonical", ff->canonical);
            cJSON_AddStringToObject(b, "rows", "no parity need");
            if (fb == ff) cJSON_AddStringToObject(b, "withdrawn", "for rows that need parity");
        }
        cJSON_AddNumberToObject(j, "draws", r.draws);
        cJSON_AddNumberToObject(j, "ms", r.ms);
        cJSON_AddBoolToObject(j, "memoized", from_memo);
        cJSON_AddStringToObject(j, "spec", ls_spec_kind_name(kind));
        cJSON_AddNumberToObject(j, "draft_max", (double)draft_max);
        cJSON_AddStringToObject(j, "isa", ls_isa_name(ls_fwd_isa(f)));
        cJSON_AddNumberToObject(j, "threads", (double)threads);
        cJSON_AddStringToObject(j, "detail", r.detail);
        char *s = cJSON_PrintUnformatted(j);
        if (s) puts(s);
        free(s);
        cJSON_Delete(j);
    } else {
        printf("probe: %s (block vs chain %s, batch mix %s, chunked prefill %s; %d draws, widths 2..%lld, %s, "
               "%lld threads, %.0f ms%s)\n",
               ls_verdict_name(r.verdict), r.block_vs_chain ? "ok" : "FAIL", r.batch_mix ? "ok" : "FAIL",
               r.chunked_prefill ? "ok" : "FAIL", r.draws, draft_max + 1, ls_isa_name(ls_fwd_isa(f)), threads, r.ms,
               from_memo ? ", memoized" : "");
        printf("families: rows that need parity run %s (%s)%s; other rows run %s\n", fa->name,
               fa->canonical ? "canonical" : "non-canonical", fb != fa ? " after withdrawing the failing one" : "",
               ff->name);
        if (r.detail[0]) printf("first mismatch: %s\n", r.detail);
    }
    rc = r.verdict == LS_VERDICT_DECLINED && !allow_inexact ? 1 : 0;
    if (r.verdict == LS_VERDICT_DECLINED)
        fprintf(stderr, "lockstep probe: declined: speculation %s\n",
                allow_inexact ? "would run inexact (--allow-inexact)" : "stays off (fail-closed)");
out:
    ls_fwd_free(f);
    ls_model_free(m);
    return rc;
}
