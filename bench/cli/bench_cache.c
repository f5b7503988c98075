/* bench_cache.c - `lockstep-bench cache`: time to first token when a long shared
 * prefix is already in the engine's prefix cache (hit) versus a cold engine (miss),
 * as a function of the new suffix's length.
 *
 * Per rep, two engines with the serving defaults (512-token step budget):
 *   hit   prefix cache on; the prefix is prefilled once (unmeasured), then each
 *         prompt prefix + suffix is submitted and timed, every suffix different
 *         from the others from its first token, so only the prefix can match;
 *   miss  prefix cache off; the same prompts, each prefilled in full.
 * TTFT is submit to the first token's event (prefill and the first sampling step).
 * The cached positions the engine reports are checked: a hit must have reused the
 * whole block-aligned part of the prefix, a miss nothing.  Suffix lengths and
 * hit/miss are interleaved within each rep; medians are reported. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/cli/bench_common.h"
#include "bench/cli/bench.h"
#include "cli/cli.h"
#include "util/util.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

static const char *help =
    "usage: lockstep-bench cache [-m MODEL] [-t THREADS] [--prefix N] [--suffixes LIST] [--reps N] [--json]\n"
    "\n"
    "  -m, --model PATH     model (default " LS_DEFAULT_MODEL ")\n"
    "  -t, --threads N      threads (default: online CPUs)\n"
    "      --prefix N       tokens of the shared prefix (default 512)\n"
    "      --suffixes LIST  new tokens after it (default 1,2,4,8,16,32,64)\n"
    "      --reps N         runs per figure, medians reported (default 3)\n"
    "      --json           one JSON object instead of a table\n"
    "  -h, --help           this help\n";

#define MAX_SUFFIXES 16
#define MAX_REPS 64

/* A document to draw token ids from: the prefix is its beginning (repeated as
 * needed); the suffixes are taken from a window that slides through it. */
static const char *doc =
    "Chapter one. The harbour town woke before dawn. Fishermen carried nets down to the boats, the baker lit his "
    "ovens, and the ferry from the islands sounded its horn twice as it rounded the breakwater. Mara had lived above "
    "the chandlery for eleven years, long enough to tell the weather from the colour of the water at first light, "
    "and this morning the water was the grey of old pewter. She made coffee, fed the cat, and read the letter again. "
    "It had come the night before, in an envelope with a foreign stamp and her name written in a hand she had not "
    "seen since she was a girl. Her uncle, the letter said, had left her his house on the northern cape, and with "
    "it a lighthouse that had not been lit in thirty years, a rowing boat, two hundred books and a debt to the "
    "harbour master that nobody could explain. Chapter two. The road north followed the coast through villages "
    "whose names she knew only from the shipping forecast. Sheep stood on the verges; the wind came off the sea in "
    "long cold gusts; at every bend the cape seemed no nearer. When she arrived the tide was out, and the causeway "
    "to the lighthouse lay bare, paved with black stones and strands of kelp.";

typedef struct {
    double t_first;
    int32_t n_cached;
    bool first, done;
} probe;

static void on_event(void *ud, const ls_event *ev) {
    probe *p = ud;
    if (ev->token >= 0 && !p->first) {
        p->first = true;
        p->t_first = ls_now_ms();
        p->n_cached = ev->n_cached;
    }
    if (ev->done) p->done = true;
}

/* Submits prompt[0..n) for one token and runs the engine until it is idle;
 * *ms = submit to first token. */
static ls_status first_token(ls_engine *e, const int32_t *prompt, int32_t n, double *ms, int32_t *n_cached,
                             ls_err *err) {
    probe p = {0};
    ls_request q = {.size = sizeof(ls_request), .prompt = prompt, .n_prompt = n, .max_tokens = 1, .ignore_eos = true,
                    .sampling = {.temperature = 0.0f, .top_p = 1.0f}, .on_event = on_event, .ud = &p};
    double t0 = ls_now_ms();
    ls_status st = ls_engine_submit(e, &q, NULL, err);
    while (!st && !ls_engine_idle(e)) st = ls_engine_step(e, NULL, err);
    if (!st && !p.first) st = ls_err_set(err, LS_E_INVALID, "the request produced no token");
    *ms = p.t_first - t0;
    *n_cached = p.n_cached;
    return st;
}

int cli_bench_cache(int argc, char **argv) {
    const char *cmd = "cache";
    const char *model_path = LS_DEFAULT_MODEL, *suffix_list = "1,2,4,8,16,32,64";
    long long threads = 0, prefix = 512, reps = 3;
    bool json = false;
    enum { O_PREFIX = 256, O_SUFFIXES, O_REPS, O_JSON };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"threads", required_argument, 0, 't'},
        {"prefix", required_argument, 0, O_PREFIX}, {"suffixes", required_argument, 0, O_SUFFIXES},
        {"reps", required_argument, 0, O_REPS},    {"json", no_argument, 0, O_JSON},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case O_PREFIX: if (!cli_parse_int(cmd, "--prefix", optarg, 16, 3072, &prefix)) return LS_EXIT_USAGE; break;
        case O_SUFFIXES: suffix_list = optarg; break;
        case O_REPS: if (!cli_parse_int(cmd, "--reps", optarg, 1, MAX_REPS, &reps)) return LS_EXIT_USAGE; break;
        case O_JSON: json = true; break;
        case 'h': fputs(help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    int32_t sfx[MAX_SUFFIXES];
    int n_sfx;
    if (!bench_parse_list(cmd, "--suffixes", suffix_list, 1, 1024, sfx, MAX_SUFFIXES, &n_sfx)) return LS_EXIT_USAGE;
    ls_err err;
    ls_model *m = bench_load_model(cmd, model_path, &threads);
    if (!m) return LS_EXIT_USAGE;
    int rc = 1;
    int32_t max_sfx = 0;
    for (int i = 0; i < n_sfx; i++)
        if (sfx[i] > max_sfx) max_sfx = sfx[i];
    int32_t n_ctx = (int32_t)prefix + max_sfx + 16, text[1024];
    size_t n_text = 0;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_ctx);
    ls_engine *hit_e = NULL, *miss_e = NULL;
    cJSON *root = NULL;
    static double hit_ms[MAX_SUFFIXES][MAX_REPS], miss_ms[MAX_SUFFIXES][MAX_REPS];
    int32_t hit_cached[MAX_SUFFIXES] = {0};
    if (!prompt) {
        fprintf(stderr, "lockstep-bench %s: out of memory\n", cmd);
        goto out;
    }
    if (ls_tokenize(ls_model_tokenizer(m), doc, strlen(doc), false, false, text, 1024, &n_text, &err)) {
        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
        goto out;
    }
    for (int32_t k = 0; k < prefix; k++) prompt[k] = text[k % n_text];
    /* The block-aligned part of the prefix is what a hit must reuse. */
    const int32_t expect_cached = (int32_t)prefix / LS_KV_BLOCK * LS_KV_BLOCK;
    for (int r = 0; r < reps; r++) {
        ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = n_ctx, .n_seq_max = 2, .n_threads = (int)threads, .isa = -1};
        hit_e = ls_engine_create(m, &p, &err);
        p.no_prefix_cache = true;
        miss_e = hit_e ? ls_engine_create(m, &p, &err) : NULL;
        if (!miss_e) {
            fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
            goto out;
        }
        double ms;
        int32_t nc, used[MAX_SUFFIXES];
        /* Unmeasured: the prefix into the hit engine's cache; one cold prefill in the
         * miss engine so its first measured run does not pay for first touches. */
        prompt[prefix] = text[(prefix * 5 + 1) % n_text];
        if (first_token(hit_e, prompt, (int32_t)prefix + 1, &ms, &nc, &err) ||
            first_token(miss_e, prompt, (int32_t)prefix + 1, &ms, &nc, &err)) {
            fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
            goto out;
        }
        for (int i = 0; i < n_sfx; i++) {
            /* A suffix of its own: its first token differs from the warm-up's and from
             * every earlier suffix's in this engine, so only the prefix can match. */
            int32_t start = (int32_t)((7 + 13 * i) % n_text);
            for (bool clash = true; clash;) { /* a first token no earlier prompt of this engine had */
                clash = false;
                for (int j = 0; j <= i && !clash; j++)
                    clash = text[start] == (j < i ? used[j] : text[(prefix * 5 + 1) % n_text]);
                if (clash) start = (start + 1) % (int32_t)n_text;
            }
            used[i] = text[start];
            for (int32_t k = 0; k < sfx[i]; k++) prompt[prefix + k] = text[(start + k) % n_text];
            int32_t n = (int32_t)prefix + sfx[i];
            if (first_token(miss_e, prompt, n, &miss_ms[i][r], &nc, &err)) {
                fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                goto out;
            }
            if (nc != 0) {
                fprintf(stderr, "lockstep-bench %s: the cold engine reported %d cached positions\n", cmd, nc);
                goto out;
            }
            if (first_token(hit_e, prompt, n, &hit_ms[i][r], &nc, &err)) {
                fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                goto out;
            }
            if (nc < expect_cached) {
                fprintf(stderr, "lockstep-bench %s: a hit reused %d positions, not the %d of the cached prefix\n", cmd, nc,
                        expect_cached);
                goto out;
            }
            hit_cached[i] = nc;
            if (!json)
                fprintf(stderr, "\r  rep %d/%lld  suffix %4d  miss %8.1f ms  hit %7.1f ms   ", r + 1, reps, sfx[i],
                        miss_ms[i][r], hit_ms[i][r]);
        }
        ls_engine_free(hit_e);
        ls_engine_free(miss_e);
        hit_e = miss_e = NULL;
    }
    if (!json) {
        fprintf(stderr, "\r%72s\r", "");
        printf("time to first token, %lld-token prefix + suffix, %lld threads, median of %lld\n"
               "%7s %10s %10s %8s %14s\n",
               prefix, threads, reps, "suffix", "miss ms", "hit ms", "speedup", "cached (hit)");
    }
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", model_path);
    cJSON_AddNumberToObject(root, "threads", (double)threads);
    cJSON_AddStringToObject(root, "isa", ls_isa_name(ls_isa_best()));
    cJSON_AddNumberToObject(root, "prefix", (double)prefix);
    cJSON_AddNumberToObject(root, "kv_block", LS_KV_BLOCK);
    cJSON_AddNumberToObject(root, "reps", (double)reps);
    cJSON *rows = cJSON_AddArrayToObject(root, "cache");
    for (int i = 0; i < n_sfx; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "suffix", sfx[i]);
        cJSON_AddItemToObject(c, "miss_ms_samples", cJSON_CreateDoubleArray(miss_ms[i], (int)reps));
        cJSON_AddItemToObject(c, "hit_ms_samples", cJSON_CreateDoubleArray(hit_ms[i], (int)reps));
        double mm = cli_median(miss_ms[i], (int)reps), hm = cli_median(hit_ms[i], (int)reps);
        cJSON_AddNumberToObject(c, "miss_ms", mm);
        cJSON_AddNumberToObject(c, "hit_ms", hm);
        cJSON_AddNumberToObject(c, "speedup", mm / hm);
        cJSON_AddNumberToObject(c, "hit_cached_positions", hit_cached[i]);
        cJSON_AddItemToArray(rows, c);
        if (!json) printf("%7d %10.1f %10.2f %7.1fx %14d\n", sfx[i], mm, hm, mm / hm, hit_cached[i]);
    }
    if (json) {
        bench_print_json(root);
        root = NULL;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    ls_engine_free(hit_e);
    ls_engine_free(miss_e);
    free(prompt);
    ls_model_free(m);
    return rc;
}
