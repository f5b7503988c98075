/* bench_batch.c - `lockstep-bench batch`: aggregate decode throughput of the
 * batched engine at B = 1..32 sequences, for shared and unshared prompts, with
 * the canonical kernels (auto: wide/GEMM paths for multi-row steps) and pinned to
 * the single-row kernel (narrow), and time to first token on a prefix-cache hit
 * versus a miss.  A benchmark, not a test: configurations are interleaved and each
 * figure is the median of --reps runs. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/cli/bench.h"
#include "bench/cli/bench_common.h"
#include "cli/cli.h"
#include "util/util.h"
#include "engine/engine.h"

static const char *help =
    "usage: lockstep-bench batch [-m MODEL] [-t THREADS] [--batches LIST] [--gen N] [--prompt-len N]\n"
    "                            [--kernels auto|narrow|both] [--prompts unshared|shared|both] [--reps N]\n"
    "                            [--no-ttft] [--json]\n"
    "\n"
    "  -m, --model PATH     model (default " LS_DEFAULT_MODEL ")\n"
    "  -t, --threads N      threads (default: online CPUs)\n"
    "      --batches LIST   comma-separated batch sizes (default 1,2,4,8,16,32)\n"
    "      --gen N          decode tokens per sequence (default 32)\n"
    "      --prompt-len N   prompt tokens per sequence (default 64)\n"
    "      --kernels K      auto: the canonical kernels; narrow: every row through the\n"
    "                       single-row kernel; both (default): auto at every B and narrow\n"
    "                       at B = 2, 4, 8, interleaved, with the ratio (the narrow-pin tax)\n"
    "      --prompts P      unshared: every sequence its own prompt; shared: the first 3/4\n"
    "                       of every prompt the same (prefix cache); both (default)\n"
    "      --reps N         runs per figure; medians are reported (default 3)\n"
    "      --no-ttft        skip the prefix-cache time-to-first-token section\n"
    "      --json           one JSON object instead of tables\n"
    "  -h, --help           this help\n";

typedef struct {
    int32_t events, first_tokens;
} counter;

static void count_event(void *ud, const ls_event *ev) {
    counter *c = ud;
    if (ev->token >= 0) {
        c->events++;
        if (ev->n_gen == 1) c->first_tokens++;
    }
}

typedef struct {
    double tok_s, step_ms, prefill_ms;
} batch_result;

/* Prompts: `shared` gives every sequence the same first 3/4 of the prompt. */
static void make_prompt(const int32_t *text, int32_t n_text, int32_t len, int32_t i, bool shared, int32_t *out) {
    int32_t head = shared ? len * 3 / 4 : 0;
    for (int32_t k = 0; k < len; k++) {
        int32_t src = k < head ? k : (k + 37 * i) % n_text;
        out[k] = text[src % n_text];
    }
}

static ls_status run_batch(const ls_model *m, int threads, int32_t B, bool shared, bool narrow, int32_t plen,
                           int32_t gen, const int32_t *text, int32_t n_text, batch_result *res, ls_err *err) {
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = plen + gen + 16, .n_seq_max = B, .step_tokens = B > 256 ? B : 256,
                          .n_threads = threads, .isa = -1, .kernels = narrow ? "narrow" : "auto"};
    ls_engine *e = ls_engine_create(m, &p, err);
    if (!e) return err->code;
    counter c = {0};
    int32_t *prompt = malloc((size_t)plen * sizeof *prompt);
    double *steps = malloc((size_t)(gen + 8) * sizeof *steps);
    ls_status st = LS_OK;
    if (!prompt || !steps) {
        st = ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto done;
    }
    double t0 = ls_now_ms();
    for (int32_t i = 0; i < B && !st; i++) {
        make_prompt(text, n_text, plen, i, shared, prompt);
        ls_request q = {.size = sizeof(ls_request), .prompt = prompt, .n_prompt = plen, .max_tokens = gen + 1, .ignore_eos = true,
                        .sampling = {.temperature = 0.0f, .top_p = 1.0f}, .on_event = count_event, .ud = &c};
        st = ls_engine_submit(e, &q, NULL, err);
    }
    while (!st && c.first_tokens < B) st = ls_engine_step(e, NULL, err);
    double t1 = ls_now_ms();
    int32_t ev0 = c.events, ns = 0;
    while (!st && !ls_engine_idle(e)) {
        double s0 = ls_now_ms();
        st = ls_engine_step(e, NULL, err);
        if (ns < gen + 8) steps[ns++] = ls_now_ms() - s0;
    }
    double t2 = ls_now_ms();
    if (!st) {
        res->prefill_ms = t1 - t0;
        res->tok_s = (double)(c.events - ev0) / ((t2 - t1) / 1e3);
        res->step_ms = ns ? cli_median(steps, ns) : 0.0;
    }
done:
    free(prompt);
    free(steps);
    ls_engine_free(e);
    return st;
}

typedef struct {
    int32_t B;
    bool shared, narrow;
    double tok_s[64], step_ms[64];
} cfg;

/* Time to first token of a prompt whose first `prefix` tokens another request just
 * left in the cache (hit), versus an engine with an empty cache (miss). */
static ls_status ttft(const ls_model *m, int threads, const int32_t *text, int32_t n_text, int32_t prefix,
                      int32_t suffix, bool hit, double *ms, ls_err *err) {
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = prefix + suffix + 16, .n_seq_max = 2, .step_tokens = 512, .n_threads = threads,
                          .isa = -1};
    ls_engine *e = ls_engine_create(m, &p, err);
    if (!e) return err->code;
    int32_t *prompt = malloc((size_t)(prefix + suffix) * sizeof *prompt);
    counter c = {0};
    ls_status st = prompt ? LS_OK : ls_err_set(err, LS_E_NOMEM, "out of memory");
    for (int32_t k = 0; prompt && k < prefix + suffix; k++) prompt[k] = text[k % n_text];
    ls_request q = {.size = sizeof(ls_request), .prompt = prompt, .n_prompt = prefix + suffix, .max_tokens = 1, .ignore_eos = true,
                    .sampling = {.top_p = 1.0f}, .on_event = count_event, .ud = &c};
    if (!st && hit) { /* warm the cache with the prefix and a different continuation */
        q.n_prompt = prefix + 1;
        st = ls_engine_submit(e, &q, NULL, err);
        while (!st && !ls_engine_idle(e)) st = ls_engine_step(e, NULL, err);
        q.n_prompt = prefix + suffix;
        for (int32_t k = prefix; k < prefix + suffix; k++) prompt[k] = text[(k * 7 + 3) % n_text];
    }
    double t0 = ls_now_ms();
    if (!st) st = ls_engine_submit(e, &q, NULL, err);
    while (!st && !ls_engine_idle(e)) st = ls_engine_step(e, NULL, err);
    *ms = ls_now_ms() - t0;
    free(prompt);
    ls_engine_free(e);
    return st;
}

int cli_bench_batch(int argc, char **argv) {
    const char *cmd = "batch";
    const char *model_path = LS_DEFAULT_MODEL, *kernels = "both", *batches = "1,2,4,8,16,32", *prompts = "both";
    long long threads = 0, gen = 32, plen = 64, reps = 3;
    bool json = false, do_ttft = true;
    enum { O_BATCHES = 256, O_GEN, O_PLEN, O_KERNELS, O_PROMPTS, O_REPS, O_NOTTFT, O_JSON };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"threads", required_argument, 0, 't'},
        {"batches", required_argument, 0, O_BATCHES}, {"gen", required_argument, 0, O_GEN},
        {"prompt-len", required_argument, 0, O_PLEN}, {"kernels", required_argument, 0, O_KERNELS},
        {"prompts", required_argument, 0, O_PROMPTS}, {"reps", required_argument, 0, O_REPS},
        {"no-ttft", no_argument, 0, O_NOTTFT},
        {"json", no_argument, 0, O_JSON},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case O_BATCHES: batches = optarg; break;
        case O_GEN: if (!cli_parse_int(cmd, "--gen", optarg, 1, 4096, &gen)) return LS_EXIT_USAGE; break;
        case O_PLEN: if (!cli_parse_int(cmd, "--prompt-len", optarg, 4, 4096, &plen)) return LS_EXIT_USAGE; break;
        case O_KERNELS: kernels = optarg; break;
        case O_PROMPTS: prompts = optarg; break;
        case O_REPS: if (!cli_parse_int(cmd, "--reps", optarg, 1, 64, &reps)) return LS_EXIT_USAGE; break;
        case O_NOTTFT: do_ttft = false; break;
        case O_JSON: json = true; break;
        case 'h': fputs(help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    int mode; /* 0 auto, 1 narrow, 2 both */
    if (!strcmp(kernels, "auto")) mode = 0;
    else if (!strcmp(kernels, "narrow")) mode = 1;
    else if (!strcmp(kernels, "both")) mode = 2;
    else return cli_usage_error(cmd, "invalid value '%s' for --kernels (auto, narrow or both)", kernels);
    int sh_lo, sh_hi; /* the prompt kinds run: 0 unshared, 1 shared */
    if (!strcmp(prompts, "unshared")) sh_lo = sh_hi = 0;
    else if (!strcmp(prompts, "shared")) sh_lo = sh_hi = 1;
    else if (!strcmp(prompts, "both")) sh_lo = 0, sh_hi = 1;
    else return cli_usage_error(cmd, "invalid value '%s' for --prompts (unshared, shared or both)", prompts);
    int32_t bs[16];
    int nb = 0;
    if (!bench_parse_list(cmd, "--batches", batches, 1, 256, bs, 16, &nb)) return LS_EXIT_USAGE;
    ls_err err;
    ls_model *m = bench_load_model(cmd, model_path, &threads);
    if (!m) return LS_EXIT_USAGE;
    /* Prompt text: a real paragraph, tokenized. */
    const char *para =
        "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
        "movable metal type, oil-based ink and a wooden screw press. Within decades, printing spread across Europe, "
        "books became cheaper, and literacy rose. Scholars could share identical copies of texts, which helped "
        "science advance; reformers spread pamphlets; and standard spellings emerged in many languages.";
    int32_t text[256];
    size_t n_text;
    if (ls_tokenize(ls_model_tokenizer(m), para, strlen(para), false, false, text, 256, &n_text, &err)) {
        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
        ls_model_free(m);
        return 1;
    }
    /* The configurations, run round-robin rep by rep so drift hits all alike. */
    cfg *cf = calloc(64, sizeof *cf);
    int nc = 0;
    for (int i = 0; i < nb; i++)
        for (int sh = sh_lo; sh <= sh_hi; sh++) {
            if (mode != 1) cf[nc++] = (cfg){.B = bs[i], .shared = sh, .narrow = false};
            bool tax = bs[i] == 2 || bs[i] == 4 || bs[i] == 8;
            if (mode == 1 || (mode == 2 && tax)) cf[nc++] = (cfg){.B = bs[i], .shared = sh, .narrow = true};
        }
    int rc = 1;
    /* Unrecorded warm-up: the first forwards of a process pay for first touches of the
     * weights and buffers; without it they land on the first configuration. */
    batch_result warm;
    if (run_batch(m, (int)threads, 1, false, false, (int32_t)plen, (int32_t)gen, text, (int32_t)n_text, &warm, &err)) {
        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
        goto out;
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nc; i++) {
            batch_result res = {0};
            if (run_batch(m, (int)threads, cf[i].B, cf[i].shared, cf[i].narrow, (int32_t)plen, (int32_t)gen, text,
                          (int32_t)n_text, &res, &err)) {
                fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                goto out;
            }
            cf[i].tok_s[r] = res.tok_s;
            cf[i].step_ms[r] = res.step_ms;
            if (!json)
                fprintf(stderr, "\r  rep %d/%lld  B=%-3d %-8s %-6s %8.1f tok/s   ", r + 1, reps, cf[i].B,
                        cf[i].shared ? "shared" : "unshared", cf[i].narrow ? "narrow" : "auto", res.tok_s);
        }
    if (!json) fprintf(stderr, "\r%80s\r", "");
    double b1[2] = {0, 0};
    for (int i = 0; i < nc; i++)
        if (cf[i].B == 1 && !cf[i].narrow) b1[cf[i].shared] = cli_median(cf[i].tok_s, (int)reps);
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "batch");
    cJSON_AddStringToObject(root, "model", model_path);
    cJSON_AddNumberToObject(root, "threads", (double)threads);
    cJSON_AddStringToObject(root, "isa", ls_isa_name(ls_isa_best()));
    cJSON_AddNumberToObject(root, "gen", (double)gen);
    cJSON_AddNumberToObject(root, "prompt_len", (double)plen);
    cJSON_AddNumberToObject(root, "reps", (double)reps);
    if (!json) {
        printf("batched decode: %lld threads, prompt %lld tokens, %lld decode tokens per sequence, median of %lld\n",
               threads, plen, gen, reps);
        printf("%4s %-8s %-7s %12s %12s %10s\n", "B", "prompts", "kernels", "decode tok/s", "step ms", "vs B=1");
    }
    for (int i = 0; i < nc; i++) {
        cJSON *c = cJSON_CreateObject(); /* the raw samples first: the medians sort them */
        cJSON_AddItemToObject(c, "decode_tok_s_samples", cJSON_CreateDoubleArray(cf[i].tok_s, (int)reps));
        cJSON_AddItemToObject(c, "step_ms_samples", cJSON_CreateDoubleArray(cf[i].step_ms, (int)reps));
        double ts = cli_median(cf[i].tok_s, (int)reps), sm = cli_median(cf[i].step_ms, (int)reps);
        double vs1 = b1[cf[i].shared] > 0 ? ts / b1[cf[i].shared] : 0.0;
        cJSON_AddNumberToObject(c, "B", cf[i].B);
        cJSON_AddBoolToObject(c, "shared", cf[i].shared);
        cJSON_AddStringToObject(c, "kernels", cf[i].narrow ? "narrow" : "auto");
        cJSON_AddNumberToObject(c, "decode_tok_s", ts);
        cJSON_AddNumberToObject(c, "step_ms", sm);
        cJSON_AddNumberToObject(c, "vs_b1", vs1);
        cJSON_AddItemToArray(rows, c);
        if (!json)
            printf("%4d %-8s %-7s %12.1f %12.2f %9.2fx\n", cf[i].B, cf[i].shared ? "shared" : "unshared",
                   cf[i].narrow ? "narrow" : "auto", ts, sm, vs1);
    }
    if (mode == 2) { /* the narrow-pin tax: auto / narrow at the same B */
        cJSON *tax = cJSON_AddArrayToObject(root, "narrow_tax");
        if (!json) printf("\nnarrow-pin tax (auto tok/s / narrow tok/s, same B and prompts)\n%4s %-8s %8s\n", "B",
                          "prompts", "ratio");
        for (int i = 0; i < nc; i++) {
            if (!cf[i].narrow) continue;
            for (int j = 0; j < nc; j++)
                if (!cf[j].narrow && cf[j].B == cf[i].B && cf[j].shared == cf[i].shared) {
                    double ratio = cli_median(cf[j].tok_s, (int)reps) / cli_median(cf[i].tok_s, (int)reps);
                    cJSON *c = cJSON_CreateObject();
                    cJSON_AddNumberToObject(c, "B", cf[i].B);
                    cJSON_AddBoolToObject(c, "shared", cf[i].shared);
                    cJSON_AddNumberToObject(c, "auto_over_narrow", ratio);
                    cJSON_AddItemToArray(tax, c);
                    if (!json) printf("%4d %-8s %7.2fx\n", cf[i].B, cf[i].shared ? "shared" : "unshared", ratio);
                }
        }
    }
    if (do_ttft) {
        const int32_t prefix = 240, sfx[] = {1, 16, 64};
        cJSON *tt = cJSON_AddArrayToObject(root, "ttft");
        if (!json) printf("\ntime to first token, %d-token cached prefix + suffix (median of %lld)\n%7s %10s %10s %8s\n",
                          prefix, reps, "suffix", "miss ms", "hit ms", "speedup");
        for (int s = 0; s < 3; s++) {
            double miss[64], hit[64];
            for (int r = 0; r < reps; r++) {
                if (ttft(m, (int)threads, text, (int32_t)n_text, prefix, sfx[s], false, &miss[r], &err) ||
                    ttft(m, (int)threads, text, (int32_t)n_text, prefix, sfx[s], true, &hit[r], &err)) {
                    fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                    cJSON_Delete(root);
                    goto out;
                }
            }
            cJSON *c = cJSON_CreateObject();
            cJSON_AddItemToObject(c, "miss_ms_samples", cJSON_CreateDoubleArray(miss, (int)reps));
            cJSON_AddItemToObject(c, "hit_ms_samples", cJSON_CreateDoubleArray(hit, (int)reps));
            double mm = cli_median(miss, (int)reps), hm = cli_median(hit, (int)reps);
            cJSON_AddNumberToObject(c, "prefix", prefix);
            cJSON_AddNumberToObject(c, "suffix", sfx[s]);
            cJSON_AddNumberToObject(c, "miss_ms", mm);
            cJSON_AddNumberToObject(c, "hit_ms", hm);
            cJSON_AddItemToArray(tt, c);
            if (!json) printf("%7d %10.1f %10.1f %7.1fx\n", sfx[s], mm, hm, mm / hm);
        }
    }
    if (json) bench_print_json(root);
    else cJSON_Delete(root);
    rc = 0;
out:
    free(cf);
    ls_model_free(m);
    return rc;
}
