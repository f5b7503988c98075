/* run.c - `lockstep run`: generate from a prompt or a chat message, streaming. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

static const char *run_help =
    "usage: lockstep run [-m MODEL] (-p PROMPT | --chat MESSAGE [--system S]) [flags]\n"
    "\n"
    "  -m, --model PATH        GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "  -p, --prompt TEXT       raw prompt (special tokens like <|im_start|> are recognised)\n"
    "      --chat MESSAGE      a user message, wrapped in the model's chat template\n"
    "      --system TEXT       system message for --chat\n"
    "      --chat-template NAME  override the template family (chatml, llama2, llama3,\n"
    "                          mistral, gemma, phi3, zephyr, qwen3)\n"
    "      --chat-template-file PATH  a Jinja chat template used in place of the model's\n"
    "  -n, --n-predict N       max new tokens (default 256; -1 = until the context is full)\n"
    "      --temp T            temperature (default 0.8; 0 = greedy)\n"
    "      --top-k K           top-k (default 40; 0 = off)\n"
    "      --top-p P           top-p (default 0.95; 1 = off)\n"
    "      --seed S            seed of the draw; token p uses only (seed, p) (default 0)\n"
    "  -t, --threads N         threads (default: online CPUs)\n"
    "  -c, --ctx-size N        context size in tokens (default min(trained, 4096))\n"
    "      --device D          cpu, or cuda in a CUDA build (default cpu)\n"
    "      --spec KIND         speculative decoding: ngram, draft, layerskip, mtp or off (default off);\n"
    "                          the tokens are the same as without it, only faster or slower\n"
    "      --draft-max K       longest draft (default 8)\n"
    "      --draft-p-min P     --spec mtp: stop a chained draft after a token the module gives less than\n"
    "                          probability P (default 0.5; 0 = never)\n"
    "      --draft-fixed       always draft --draft-max tokens: no adaptive length (benchmarks)\n"
    "      --draft-costs MODE  what the adaptive length takes drafts and verify rows to cost: measured\n"
    "                          (default; timed as the run goes) or static (a fixed prior: 0.15 of a\n"
    "                          step per row, a draft its weight bytes over the model's)\n"
    "      --draft-min N       shorter drafts are not verified (default 1)\n"
    "      --draft-lookup N    --spec mtp, draft, layerskip: where the last N (up to --ngram-max) tokens\n"
    "                          occurred earlier, draft what followed them there instead (as ngram;\n"
    "                          default 2 with mtp, else 0 = never)\n"
    "      --draft-model PATH  the draft model for --spec draft (same vocabulary), or for --spec mtp\n"
    "                          an MTP module fitted to this model (tools/fit_mtp.py; models/mtp/)\n"
    "      --draft-layers L    --spec layerskip drafts with the first L layers (default half)\n"
    "      --ngram-min N, --ngram-max N   n-gram sizes for --spec ngram (default 2, 4)\n"
    "      --allow-inexact     speculate even if the parity probe fails\n"
    "      --no-probe          skip the startup parity probe\n"
    "      --json              print one JSON object instead of streaming text\n"
    "      --no-progress       no progress lines (the probe, a long prefill) on a terminal\n"
    "      --cache-dir DIR     load the prompt's full KV blocks from DIR and write them there (as serve's\n"
    "                          --cache-dir; capped at 1 GiB): a repeated long prompt is not prefilled again\n"
    "  -h, --help              this help\n"
    "\n"
    "Streams the answer to stdout; a summary line and the probe verdict go to stderr.\n"
    "On a terminal (not with --json) stderr also shows the probe running and a long prefill's progress.\n"
    "The probe certifies this configuration (memoized in $LOCKSTEP_CACHE or ~/.cache/lockstep);\n"
    "if it fails the answer is still printed, speculation is declined and the exit status is 1.\n"
    "LOCKSTEP_ISA=scalar|avx2|avxvnni|avx512|amx forces the kernel instruction set.\n";

typedef struct {
    bool json;
} stream_state;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A long prefill's progress on a terminal: "prefill 1200/3000 tokens", rewritten in place
 * and erased when the prompt is in (the answer then streams on a clean line).  A prompt
 * prefilled in one step shows nothing. */
static void on_prefill(void *ud, int32_t done, int32_t total) {
    bool *shown = ud;
    if (done < total) {
        fprintf(stderr, "\rprefill %d/%d tokens", done, total);
        *shown = true;
    } else if (*shown) {
        fputs("\r\033[K", stderr);
        *shown = false;
    }
}

/* Streams the answer as it is decoded (the engine's events carry final text). */
static void on_event(void *ud, const ls_event *ev) {
    stream_state *s = ud;
    if (s->json || !ev->text_len) return;
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
}

int cli_run(int argc, char **argv) {
    const char *cmd = "run";
    const char *model_path = LS_DEFAULT_MODEL, *prompt = NULL, *chat = NULL, *system = NULL, *tmpl = NULL, *tmpl_file = NULL;
    long long n_predict = 256, top_k = 40, threads = 0, ctx_size = 0;
    double temp = 0.8, top_p = 0.95;
    uint64_t seed = 0;
    bool json = false, probe = true, allow_inexact = false, progress = true;
    const char *spec_name = "off", *draft_path = NULL, *device = "cpu", *cache_dir = NULL;
    long long draft_max = 8, draft_min = 1, draft_layers = 0, ngram_min = 2, ngram_max = 4, lookup = -1;
    double p_min = 0.5;
    bool draft_fixed = false, draft_static = false;
    enum { O_CHAT = 256, O_SYSTEM, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_JSON, O_TMPL, O_NOPROBE, O_SPEC, O_DMAX, O_DMIN,
           O_DMODEL, O_DLAYERS, O_NGMIN, O_NGMAX, O_INEXACT, O_DEVICE, O_TMPLFILE, O_NOPROGRESS,
           O_CACHEDIR, O_PMIN, O_DFIXED, O_DCOSTS, O_LOOKUP };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"prompt", required_argument, 0, 'p'},
        {"chat", required_argument, 0, O_CHAT}, {"system", required_argument, 0, O_SYSTEM},
        {"n-predict", required_argument, 0, 'n'}, {"temp", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK}, {"top-p", required_argument, 0, O_TOPP},
        {"seed", required_argument, 0, O_SEED}, {"threads", required_argument, 0, 't'},
        {"ctx-size", required_argument, 0, 'c'}, {"json", no_argument, 0, O_JSON},
        {"chat-template", required_argument, 0, O_TMPL}, {"chat-template-file", required_argument, 0, O_TMPLFILE}, {"no-probe", no_argument, 0, O_NOPROBE},
        {"spec", required_argument, 0, O_SPEC}, {"draft-max", required_argument, 0, O_DMAX},
        {"draft-min", required_argument, 0, O_DMIN}, {"draft-p-min", required_argument, 0, O_PMIN},
        {"draft-fixed", no_argument, 0, O_DFIXED}, {"draft-costs", required_argument, 0, O_DCOSTS}, {"draft-model", required_argument, 0, O_DMODEL},
        {"draft-layers", required_argument, 0, O_DLAYERS}, {"ngram-min", required_argument, 0, O_NGMIN},
        {"ngram-max", required_argument, 0, O_NGMAX}, {"allow-inexact", no_argument, 0, O_INEXACT},
        {"device", required_argument, 0, O_DEVICE}, {"no-progress", no_argument, 0, O_NOPROGRESS},
        {"cache-dir", required_argument, 0, O_CACHEDIR}, {"draft-lookup", required_argument, 0, O_LOOKUP},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:p:n:t:c:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'p': prompt = optarg; break;
        case O_CHAT: chat = optarg; break;
        case O_SYSTEM: system = optarg; break;
        case O_TMPL: tmpl = optarg; break;
        case O_TMPLFILE: tmpl_file = optarg; break;
        case 'n': if (!cli_parse_int(cmd, "--n-predict", optarg, -1, 1 << 24, &n_predict)) return LS_EXIT_USAGE; break;
        case O_TEMP: if (!cli_parse_float(cmd, "--temp", optarg, 0, 1e6, &temp)) return LS_EXIT_USAGE; break;
        case O_TOPK: if (!cli_parse_int(cmd, "--top-k", optarg, 0, 1 << 24, &top_k)) return LS_EXIT_USAGE; break;
        case O_TOPP: if (!cli_parse_float(cmd, "--top-p", optarg, 1e-9, 1, &top_p)) return LS_EXIT_USAGE; break;
        case O_SEED: if (!cli_parse_u64(cmd, "--seed", optarg, &seed)) return LS_EXIT_USAGE; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case 'c': if (!cli_parse_int(cmd, "--ctx-size", optarg, 1, 1 << 24, &ctx_size)) return LS_EXIT_USAGE; break;
        case O_JSON: json = true; break;
        case O_NOPROBE: probe = false; break;
        case O_NOPROGRESS: progress = false; break;
        case O_CACHEDIR:
            if (!*optarg) return cli_usage_error(cmd, "--cache-dir is empty");
            cache_dir = optarg;
            break;
        case O_SPEC: spec_name = optarg; break;
        case O_INEXACT: allow_inexact = true; break;
        case O_DEVICE: device = optarg; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &draft_max)) return LS_EXIT_USAGE; break;
        case O_DFIXED: draft_fixed = true; break;
        case O_DCOSTS:
            if (strcmp(optarg, "measured") && strcmp(optarg, "static"))
                return cli_usage_error(cmd, "--draft-costs must be measured or static, not '%s'", optarg);
            draft_static = !strcmp(optarg, "static");
            break;
        case O_PMIN: if (!cli_parse_float(cmd, "--draft-p-min", optarg, 0.0, 1.0, &p_min)) return LS_EXIT_USAGE; break;
        case O_DMIN: if (!cli_parse_int(cmd, "--draft-min", optarg, 0, 64, &draft_min)) return LS_EXIT_USAGE; break;
        case O_DMODEL: draft_path = optarg; break;
        case O_DLAYERS: if (!cli_parse_int(cmd, "--draft-layers", optarg, 1, 4096, &draft_layers)) return LS_EXIT_USAGE; break;
        case O_NGMIN: if (!cli_parse_int(cmd, "--ngram-min", optarg, 1, 16, &ngram_min)) return LS_EXIT_USAGE; break;
        case O_NGMAX: if (!cli_parse_int(cmd, "--ngram-max", optarg, 1, 16, &ngram_max)) return LS_EXIT_USAGE; break;
        case O_LOOKUP: if (!cli_parse_int(cmd, "--draft-lookup", optarg, 0, 16, &lookup)) return LS_EXIT_USAGE; break;
        case 'h': fputs(run_help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    progress = progress && !json && isatty(STDERR_FILENO); /* never into a file or a pipe */
    if (!prompt == !chat) return cli_usage_error(cmd, "give exactly one of -p PROMPT or --chat MESSAGE");
    if (system && !chat) return cli_usage_error(cmd, "--system needs --chat");
    if (tmpl && tmpl_file) return cli_usage_error(cmd, "give --chat-template or --chat-template-file, not both");
    if (tmpl_file && access(tmpl_file, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read chat template file '%s'", tmpl_file);
    if (access(model_path, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read model file '%s'%s", model_path,
                               strcmp(model_path, LS_DEFAULT_MODEL) ? "" : " (run `make model` to fetch it)");
    if (threads == 0) threads = cli_default_threads();
    ls_err err;
    ls_err_clear(&err);
    ls_spec_params spp = LS_SPEC_PARAMS_INIT;
    spp.draft_max = (int32_t)draft_max;
    spp.draft_min = (int32_t)draft_min;
    spp.p_min = (float)p_min;
    spp.fixed_length = draft_fixed;
    spp.static_costs = draft_static;
    spp.ngram_min = (int32_t)ngram_min;
    spp.ngram_max = (int32_t)ngram_max;
    spp.skip_first = (int32_t)draft_layers;
    if (ls_spec_kind_from_name(spec_name, &spp.kind, &err)) return cli_usage_error(cmd, "%s", err.msg);
    if (lookup < 0) /* mtp: prompt lookup first where the answer repeats itself (docs/mtp.md) */
        lookup = spp.kind == LS_SPEC_MTP ? (ngram_max < 2 ? ngram_max : 2) : 0;
    spp.lookup_min = (int32_t)lookup;
    if (draft_path && spp.kind != LS_SPEC_DRAFT && spp.kind != LS_SPEC_MTP)
        return cli_usage_error(cmd, "--draft-model needs --spec draft or --spec mtp");
    if (spp.kind == LS_SPEC_DRAFT && !draft_path) return cli_usage_error(cmd, "--spec draft needs --draft-model PATH");
    if (draft_path && access(draft_path, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read draft model file '%s'", draft_path);
    if (draft_min > draft_max) return cli_usage_error(cmd, "--draft-min %lld exceeds --draft-max %lld", draft_min, draft_max);
    if (ngram_min > ngram_max) return cli_usage_error(cmd, "--ngram-min %lld exceeds --ngram-max %lld", ngram_min, ngram_max);
    if (lookup && (spp.kind == LS_SPEC_OFF || spp.kind == LS_SPEC_NGRAM))
        return cli_usage_error(cmd, "--draft-lookup applies to --spec mtp, draft and layerskip (--spec ngram always "
                                    "looks up)");
    if (lookup > ngram_max) return cli_usage_error(cmd, "--draft-lookup %lld exceeds --ngram-max %lld", lookup, ngram_max);
    int rc = LS_EXIT_USAGE;
    ls_model *m = NULL, *dm = NULL;
    ls_engine *e = NULL;
    ls_drafter *d = NULL;
    char *text = NULL;
    int32_t *toks = NULL;
    ls_result res = LS_RESULT_INIT;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = model_path;
    mp.chat_template = tmpl;
    mp.chat_template_file = tmpl_file;
    char cdir[4096];
    mp.cache_dir = cli_cache_dir(cdir, sizeof cdir);
    if (spp.kind == LS_SPEC_MTP) mp.mtp_path = draft_path; /* the module loads as part of the model */
    if (!(m = ls_model_load(&mp, &err))) {
        fprintf(stderr, "lockstep run: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    if (draft_path && spp.kind == LS_SPEC_DRAFT) {
        ls_model_params dp = LS_MODEL_PARAMS_INIT;
        dp.path = draft_path;
        if (!(dm = ls_model_load(&dp, &err))) {
            fprintf(stderr, "lockstep run: cannot load draft model '%s': %s\n", draft_path, err.msg);
            goto out;
        }
        spp.draft_model = dm;
    }
    const char *input = prompt;
    if (chat) {
        ls_chat_msg msgs[2];
        size_t nm = 0;
        if (system) msgs[nm++] = (ls_chat_msg){"system", system};
        msgs[nm++] = (ls_chat_msg){"user", chat};
        if (ls_model_apply_chat(m, msgs, nm, true, &text, &err)) {
            fprintf(stderr, "lockstep run: %s\n", err.msg);
            goto out;
        }
        input = text;
    }
    size_t len = strlen(input), n_tok = 0;
    size_t cap = len + 8;
    toks = malloc(cap * sizeof *toks);
    if (!toks || ls_model_tokenize(m, input, len, true, true, toks, cap, &n_tok, &err)) {
        fprintf(stderr, "lockstep run: cannot tokenize the prompt: %s\n", toks ? err.msg : "out of memory");
        goto out;
    }
    /* One request, through the same engine a server would run: 4 sequences wide and
     * verify blocks up to K, so the probe can certify batching and speculation on it. */
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT;
    ep.n_ctx = (int32_t)ctx_size;
    ep.n_seq_max = 4;
    ep.n_threads = (int32_t)threads;
    ep.draft_max = spp.kind != LS_SPEC_OFF ? spp.draft_max : 4;
    ep.allow_inexact = allow_inexact;
    ep.no_prefix_cache = false;
    ep.device = device;
    ep.cache_dir = cache_dir;
    if (!(e = ls_engine_create(m, &ep, &err))) {
        fprintf(stderr, "lockstep run: %s\n", err.msg);
        goto out;
    }
    ls_engine_info ei = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(e, &ei);
    if ((int64_t)n_tok >= ei.n_ctx) {
        fprintf(stderr, "lockstep run: the prompt is %zu tokens but the context holds %d; "
                        "shorten it or raise --ctx-size\n", n_tok, ei.n_ctx);
        goto out;
    }
    if (spp.kind != LS_SPEC_OFF && ls_spec_check(e, &spp, &err)) {
        fprintf(stderr, "lockstep run: %s\n", err.msg);
        goto out;
    }
    rc = 1;
    ls_probe_result pr = LS_PROBE_RESULT_INIT;
    if (probe) {
        char cfg[64], dir[4096];
        snprintf(cfg, sizeof cfg, "spec=%s", ls_spec_kind_name(spp.kind));
        ls_probe_params pp = LS_PROBE_PARAMS_INIT;
        pp.memo_dir = cli_cache_dir(dir, sizeof dir);
        pp.config = cfg;
        double t0 = progress ? now_ms() : 0;
        if (progress) fputs("parity check running ...", stderr);
        if (ls_engine_probe(e, &pp, &pr, &err)) {
            if (progress) fputs("\r\033[K", stderr);
            fprintf(stderr, "lockstep run: the probe could not run: %s\n", err.msg);
            goto out;
        }
        if (progress)
            fprintf(stderr, "\r\033[Kparity check: %.1f s%s\n", (now_ms() - t0) / 1e3, pr.memoized ? " (memoized)" : "");
    } else {
        pr.verdict = LS_VERDICT_UNPROBED;
    }
    bool declined = spp.kind != LS_SPEC_OFF && pr.verdict == LS_VERDICT_FAILED && !allow_inexact;
    stream_state ss = {.json = json};
    ls_request q = LS_REQUEST_INIT;
    q.prompt = toks;
    q.n_prompt = (int32_t)n_tok;
    q.sampling = (ls_sampler_params){.temperature = (float)temp, .top_k = (int32_t)top_k, .top_p = (float)top_p,
                                     .seed = seed};
    q.max_tokens = n_predict < 0 ? -1 : (int32_t)n_predict;
    q.on_event = on_event;
    q.ud = &ss;
    bool prefill_shown = false;
    if (progress) {
        q.on_prefill = on_prefill;
        q.prefill_ud = &prefill_shown;
    }
    if (spp.kind != LS_SPEC_OFF && !declined) { /* its chain is sampled with the request's sampler */
        if (!(d = ls_drafter_create(e, &spp, &q.sampling, &err))) {
            fprintf(stderr, "lockstep run: %s\n", err.msg);
            goto out;
        }
        ls_drafter_attach(d, &q);
    }
    if (n_predict == 0) { /* prefill only (benchmarks): one token is sampled, none printed */
        q.max_tokens = 1;
        ss.json = true;
    }
    if (ls_engine_generate(e, &q, &res, &err)) {
        fprintf(stderr, "lockstep run: %s\n", err.msg);
        rc = err.code == LS_E_RANGE || err.code == LS_E_INVALID ? LS_EXIT_USAGE : 1;
        goto out;
    }
    /* Tokens per second after the first, as llama-bench's tg counts forwards: the token
     * that ended a generation at a stop counts (a forward made it), the last of a length
     * limit does not need one. */
    int32_t n_after = res.n_tokens - 1 + (res.finish == LS_FINISH_STOP);
    double tok_s = res.gen_ms > 0 && n_after > 0 ? n_after / (res.gen_ms / 1e3) : 0.0;
    double per_step = res.n_steps ? (double)n_after / res.n_steps : 1.0;
    ls_drafter_stats ds = LS_DRAFTER_STATS_INIT; /* acceptance per draft position */
    int32_t n_pos = 0;
    if (d) {
        int32_t *hist = malloc(((size_t)n_tok + (size_t)res.n_tokens + 1) * sizeof *hist);
        if (hist) {
            memcpy(hist, toks, n_tok * sizeof *hist);
            if (res.n_tokens > 0) memcpy(hist + n_tok, res.tokens, (size_t)res.n_tokens * sizeof *hist);
        }
        ls_drafter_get_stats(d, hist, hist ? (int32_t)n_tok + res.n_tokens : 0, &ds);
        free(hist);
        while (n_pos < 16 && ds.drafted[n_pos] > 0) n_pos++;
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", n_predict == 0 ? "" : res.text);
        cJSON *ids = cJSON_AddArrayToObject(o, "tokens");
        for (int32_t i = 0; i < res.n_tokens && n_predict != 0; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(res.tokens[i]));
        cJSON_AddNumberToObject(o, "n_prompt", (double)n_tok);
        cJSON_AddNumberToObject(o, "n_gen", n_predict == 0 ? 0 : res.n_tokens);
        if (cache_dir) cJSON_AddNumberToObject(o, "n_cached", res.n_cached); /* prompt positions from DIR */
        cJSON_AddNumberToObject(o, "prefill_ms", res.prompt_ms);
        cJSON_AddNumberToObject(o, "decode_ms", res.gen_ms);
        cJSON_AddNumberToObject(o, "decode_tok_s", tok_s);
        cJSON_AddStringToObject(o, "finish_reason", ls_finish_name(res.finish));
        cJSON_AddStringToObject(o, "parity", !probe ? "skipped" : ls_verdict_name(pr.verdict));
        if (probe) {
            cJSON *ax = cJSON_AddObjectToObject(o, "parity_axes");
            for (int a = 0; a < LS_AXIS_COUNT; a++)
                cJSON_AddStringToObject(ax, ls_axis_name((ls_axis)a), pr.axis[a] == LS_AXIS_PASSED   ? "passed"
                                                                      : pr.axis[a] == LS_AXIS_FAILED ? "failed"
                                                                                                     : "not checked");
            cJSON_AddStringToObject(o, "parity_detail", pr.detail);
            cJSON_AddBoolToObject(o, "parity_memoized", pr.memoized);
        }
        cJSON_AddStringToObject(o, "isa", ls_isa_name(ei.isa));
        cJSON_AddStringToObject(o, "device", ei.device);
        cJSON_AddNumberToObject(o, "threads", (double)threads);
        cJSON_AddStringToObject(o, "spec", ls_spec_kind_name(spp.kind));
        cJSON_AddBoolToObject(o, "spec_declined", declined);
        cJSON_AddNumberToObject(o, "draft_n", res.n_drafted);
        cJSON_AddNumberToObject(o, "draft_accepted", res.n_accepted);
        cJSON_AddNumberToObject(o, "mean_accepted_len", per_step); /* tokens per target step */
        cJSON_AddNumberToObject(o, "target_steps", res.n_steps);   /* the decode steps it took, and the */
        cJSON_AddNumberToObject(o, "step_tokens", n_after);        /* tokens they made (after the first) */
        if (d) {
            cJSON_AddNumberToObject(o, "draft_proposals", ds.n_proposals);
            cJSON_AddNumberToObject(o, "draft_cost", ds.draft_cost); /* in single-row steps */
            cJSON_AddNumberToObject(o, "draft_row_cost", ds.row_cost);
            cJSON_AddStringToObject(o, "draft_costs", spp.static_costs ? "static" : "measured");
            cJSON_AddNumberToObject(o, "draft_ms", ds.draft_ms);
            cJSON_AddNumberToObject(o, "draft_forward_ms", ds.forward_ms);
            if (spp.lookup_min > 0) { /* --draft-lookup: the proposals lookup made, and their tokens */
                cJSON_AddNumberToObject(o, "lookup_proposals", ds.lookup_proposals);
                cJSON_AddNumberToObject(o, "lookup_drafted", ds.lookup_drafted);
                cJSON_AddNumberToObject(o, "lookup_accepted", ds.lookup_accepted);
            }
            cJSON *pd = cJSON_AddArrayToObject(o, "draft_pos_drafted"), *pa = cJSON_AddArrayToObject(o, "draft_pos_accepted");
            for (int32_t j = 0; j < n_pos; j++) {
                cJSON_AddItemToArray(pd, cJSON_CreateNumber(ds.drafted[j]));
                cJSON_AddItemToArray(pa, cJSON_CreateNumber(ds.accepted[j]));
            }
        }
        char *s = cJSON_PrintUnformatted(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("\n");
        fflush(stdout);
        if (cache_dir) fprintf(stderr, "\n[%d prompt tokens from --cache-dir]", res.n_cached);
        fprintf(stderr, "\n[%d prompt + %d generated tokens | prefill %.1f ms (%.1f tok/s) | decode %.1f tok/s | "
                        "%s, %lld threads%s%s | finish: %s]\n",
                (int)n_tok, n_predict == 0 ? 0 : res.n_tokens, res.prompt_ms,
                res.prompt_ms > 0 ? n_tok / (res.prompt_ms / 1e3) : 0.0, tok_s, ls_isa_name(ei.isa), threads,
                strncmp(ei.device, "cpu", 3) ? " | " : "", strncmp(ei.device, "cpu", 3) ? ei.device : "",
                ls_finish_name(res.finish));
        if (declined)
            fprintf(stderr, "[spec %s declined: the probe failed, decoding plainly (--allow-inexact overrides)]\n",
                    ls_spec_kind_name(spp.kind));
        else if (spp.kind != LS_SPEC_OFF)
            fprintf(stderr, "[spec %s: %d drafted, %d accepted (%.0f %%), %.2f tokens per target step, %.0f ms drafting; "
                            "a draft costs %.2f and a verify row %.2f of a step (%s)]\n",
                    ls_spec_kind_name(spp.kind), res.n_drafted, res.n_accepted,
                    res.n_drafted ? 100.0 * res.n_accepted / res.n_drafted : 0.0, per_step, d ? ls_drafter_ms(d) : 0.0,
                    ds.draft_cost, ds.row_cost, spp.static_costs ? "fixed prior" : "measured");
        if (!declined && spp.lookup_min > 0 && d)
            fprintf(stderr, "[spec %s: lookup made %d of %d proposals; %d of their %d tokens accepted]\n",
                    ls_spec_kind_name(spp.kind), ds.lookup_proposals, ds.n_proposals, ds.lookup_accepted,
                    ds.lookup_drafted);
        if (!declined && n_pos > 0) {
            fprintf(stderr, "[spec %s: accepted by draft position:", ls_spec_kind_name(spp.kind));
            for (int32_t j = 0; j < n_pos; j++)
                fprintf(stderr, " %d: %.0f %% of %d%s", j + 1, 100.0 * ds.accepted[j] / ds.drafted[j], ds.drafted[j],
                        j + 1 < n_pos ? "," : "]\n");
        }
    }
    if (probe) cli_print_verdict(&pr, &ei);
    rc = probe && pr.verdict == LS_VERDICT_FAILED ? 1 : 0;
out:
    ls_result_free(&res);
    ls_drafter_free(d);
    ls_engine_free(e);
    free(toks);
    free(text);
    ls_model_free(m);
    ls_model_free(dm);
    return rc;
}
