/* bench_mixed.c - `lockstep-bench mixed`: one speculative stream amid N classic
 * streams in the batched engine.  For each N (default 1, 3, 7) three mixes run,
 * interleaved rep by rep:
 *   absent  the N classic streams alone;
 *   spec    the N classic streams and the speculative stream with its drafter;
 *   plain   the same N + 1 streams, the speculative one decoded plainly,
 * and it reports the classic streams' aggregate decode rate with the speculative
 * stream present versus absent, and the speculative stream's own rate with its
 * drafter over its plain rate in the same mix.  Rates are taken over the full-mix
 * window: the steps that begin with every stream of the mix decoding (after the last
 * first token, up to the first stream's end), so prefill and a stream's lonely tail
 * do not blur them.  Every stream's tokens in every run are compared (memcmp) with
 * its solo run; one difference fails the benchmark.  Greedy, ignore-EOS, fixed
 * lengths; the classic streams are prose chats, the speculative one an input-grounded
 * rewrite (where n-gram drafts are accepted). */
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
#include "speculative/spec.h"

static const char *help =
    "usage: lockstep-bench mixed [-m MODEL] [-t THREADS] [--classic LIST] [--gen N] [--spec-gen N]\n"
    "                            [--spec KIND] [--draft-max K] [--reps N] [--json]\n"
    "\n"
    "  -m, --model PATH     model (default " LS_DEFAULT_MODEL ")\n"
    "  -t, --threads N      threads (default: online CPUs)\n"
    "      --classic LIST   numbers of classic streams beside the speculative one (default 1,3,7; at most 7)\n"
    "      --gen N          tokens per classic stream (default 64)\n"
    "      --spec-gen N     tokens of the speculative stream (default 2 x --gen)\n"
    "      --spec KIND      its drafter: ngram (default), layerskip or draft (the model as its own draft)\n"
    "      --draft-max K    longest draft (default 8)\n"
    "      --reps N         runs per figure, medians reported (default 3)\n"
    "      --json           one JSON object instead of tables\n"
    "  -h, --help           this help\n";

#define MAX_CLASSIC 7
#define MAX_REPS 64
#define MAX_PROMPT 512

static const char *classic_msgs[MAX_CLASSIC] = {
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old, in a few paragraphs.",
    "Describe a busy market in a small town on a Saturday morning.",
    "Write a letter from a sailor to his sister about his first voyage.",
    "Tell me about the life of honey bees through the seasons.",
    "Describe a walk through an old forest after the rain.",
    "Write a story about a robot who learns to bake bread.",
};
static const char *spec_msg =
    "Here is a paragraph:\n\"The printing press, developed by Johannes Gutenberg around 1440, combined movable metal "
    "type, oil-based ink and a wooden screw press. Within decades printing spread across Europe, books became cheaper, "
    "and literacy rose. Scholars could share identical copies of texts, which helped science advance.\"\nRepeat the "
    "paragraph exactly, but replace \"Johannes Gutenberg\" with \"a German goldsmith\".";

typedef struct {
    const int32_t *prompt;
    int32_t n_prompt, max_tokens;
    int32_t *toks; /* generated tokens (max_tokens of them) */
    int32_t n, n_drafted, n_accepted;
    bool done;
} stream;

static void on_event(void *ud, const ls_event *ev) {
    stream *s = ud;
    if (ev->token >= 0 && s->n < s->max_tokens) s->toks[s->n++] = ev->token;
    s->n_drafted = ev->n_drafted;
    s->n_accepted = ev->n_accepted;
    if (ev->done) s->done = true;
}

typedef struct {
    double classic_tok_s, spec_tok_s, spec_per_step, accept_rate;
    int32_t window_steps;
    uint64_t preemptions; /* a preempted stream is recomputed: same tokens, slower */
} mix_result;

typedef struct {
    const ls_model *m;
    int threads;
    int32_t n_ctx, draft_max;
    ls_spec_kind kind;
} mix_env;

/* Runs streams s[0..n) together (s[n_classic], if present, is the speculative stream;
 * with_drafter gives it its drafter) and measures the full-mix window. */
static ls_status run_mix(const mix_env *env, stream *s, int n, int n_classic, bool with_drafter, mix_result *res,
                         ls_err *err) {
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = env->n_ctx, .n_seq_max = n, .step_tokens = 2048, .n_threads = env->threads,
                          .isa = -1, .draft_max = env->draft_max};
    ls_engine *e = ls_engine_create(env->m, &p, err);
    if (!e) return err->code;
    ls_drafter *d = NULL;
    ls_status st = LS_OK;
    if (with_drafter) {
        ls_sampler_params greedy = {.temperature = 0.0f, .top_p = 1.0f};
        ls_spec_params sp = {.size = sizeof(ls_spec_params), .kind = env->kind, .draft_max = env->draft_max, .draft_min = 1, .ngram_min = 2,
                             .ngram_max = 4, .draft_model = env->m};
        if (!(d = ls_drafter_create(e, &sp, &greedy, err))) {
            ls_engine_free(e);
            return err->code;
        }
    }
    for (int i = 0; i < n && !st; i++) {
        s[i].n = s[i].n_drafted = s[i].n_accepted = 0;
        s[i].done = false;
        ls_request q = {.size = sizeof(ls_request), .prompt = s[i].prompt, .n_prompt = s[i].n_prompt, .max_tokens = s[i].max_tokens,
                        .ignore_eos = true, .sampling = {.temperature = 0.0f, .top_p = 1.0f}, .on_event = on_event,
                        .ud = &s[i]};
        if (i == n_classic && d) {
            q.draft = ls_drafter_draft;
            q.draft_ud = d;
        }
        st = ls_engine_submit(e, &q, NULL, err);
    }
    double win_ms = 0.0;
    int32_t win_classic = 0, win_spec = 0, steps = 0;
    while (!st && !ls_engine_idle(e)) {
        bool full = true; /* every stream has its first token and none has ended */
        int32_t before[MAX_CLASSIC + 1];
        for (int i = 0; i < n; i++) {
            full = full && s[i].n > 0 && !s[i].done;
            before[i] = s[i].n;
        }
        double t0 = ls_now_ms();
        st = ls_engine_step(e, NULL, err);
        double dt = ls_now_ms() - t0;
        if (!full) continue;
        win_ms += dt;
        steps++;
        for (int i = 0; i < n; i++) {
            if (i < n_classic) win_classic += s[i].n - before[i];
            else win_spec += s[i].n - before[i];
        }
    }
    if (!st && (steps == 0 || win_ms <= 0.0))
        st = ls_err_set(err, LS_E_INVALID, "the full-mix window is empty (streams too short?)");
    if (!st) {
        res->classic_tok_s = win_classic / (win_ms / 1e3);
        res->spec_tok_s = n > n_classic ? win_spec / (win_ms / 1e3) : 0.0;
        res->spec_per_step = n > n_classic ? (double)win_spec / steps : 0.0;
        res->accept_rate =
            n > n_classic && s[n_classic].n_drafted ? (double)s[n_classic].n_accepted / s[n_classic].n_drafted : 0.0;
        res->window_steps = steps;
        ls_engine_stats es = LS_ENGINE_STATS_INIT;
        ls_engine_get_stats(e, &es);
        res->preemptions = es.preemptions;
    }
    ls_drafter_free(d);
    ls_engine_free(e);
    return st;
}

/* Byte parity of every stream against its solo reference. */
static bool same_tokens(const stream *s, const int32_t *ref) {
    return s->n == s->max_tokens && !memcmp(s->toks, ref, sizeof(int32_t) * (size_t)s->n);
}

enum { MIX_ABSENT, MIX_SPEC, MIX_PLAIN, N_MIX };
static const char *mix_names[N_MIX] = {"absent", "spec", "plain"};

int cli_bench_mixed(int argc, char **argv) {
    const char *cmd = "mixed";
    const char *model_path = LS_DEFAULT_MODEL, *classic_list = "1,3,7", *kind_name = "ngram";
    long long threads = 0, gen = 64, spec_gen = 0, draft_max = 8, reps = 3;
    bool json = false;
    enum { O_CLASSIC = 256, O_GEN, O_SPECGEN, O_SPEC, O_DMAX, O_REPS, O_JSON };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"threads", required_argument, 0, 't'},
        {"classic", required_argument, 0, O_CLASSIC}, {"gen", required_argument, 0, O_GEN},
        {"spec-gen", required_argument, 0, O_SPECGEN}, {"spec", required_argument, 0, O_SPEC},
        {"draft-max", required_argument, 0, O_DMAX},  {"reps", required_argument, 0, O_REPS},
        {"json", no_argument, 0, O_JSON},             {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case O_CLASSIC: classic_list = optarg; break;
        case O_GEN: if (!cli_parse_int(cmd, "--gen", optarg, 8, 2048, &gen)) return LS_EXIT_USAGE; break;
        case O_SPECGEN: if (!cli_parse_int(cmd, "--spec-gen", optarg, 8, 2048, &spec_gen)) return LS_EXIT_USAGE; break;
        case O_SPEC: kind_name = optarg; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &draft_max)) return LS_EXIT_USAGE; break;
        case O_REPS: if (!cli_parse_int(cmd, "--reps", optarg, 1, MAX_REPS, &reps)) return LS_EXIT_USAGE; break;
        case O_JSON: json = true; break;
        case 'h': fputs(help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    int32_t ns[8];
    int n_ns;
    if (!bench_parse_list(cmd, "--classic", classic_list, 1, MAX_CLASSIC, ns, 8, &n_ns)) return LS_EXIT_USAGE;
    ls_spec_kind kind;
    ls_err err;
    if (ls_spec_kind_from_name(kind_name, &kind, &err) || kind == LS_SPEC_OFF || kind == LS_SPEC_MTP)
        return cli_usage_error(cmd, "invalid value '%s' for --spec (ngram, layerskip or draft)", kind_name);
    if (!spec_gen) spec_gen = 2 * gen;
    ls_model *m = bench_load_model(cmd, model_path, &threads);
    if (!m) return LS_EXIT_USAGE;
    int rc = 1;
    cJSON *root = NULL;
    /* Streams 0..6 classic, 7 the speculative one; each with its prompt, its solo
     * reference tokens and a buffer per run. */
    static int32_t prompts[MAX_CLASSIC + 1][MAX_PROMPT];
    stream s[MAX_CLASSIC + 1] = {{0}}, run[MAX_CLASSIC + 1];
    int32_t *ref[MAX_CLASSIC + 1] = {0}, max_prompt = 0;
    int n_all = MAX_CLASSIC + 1;
    for (int i = 0; i < n_all; i++) {
        const char *msg = i < MAX_CLASSIC ? classic_msgs[i] : spec_msg;
        if (!bench_chat_tokens(cmd, m, msg, prompts[i], MAX_PROMPT, &s[i].n_prompt)) goto out;
        s[i].prompt = prompts[i];
        s[i].max_tokens = (int32_t)(i < MAX_CLASSIC ? gen : spec_gen);
        s[i].toks = malloc(sizeof(int32_t) * (size_t)s[i].max_tokens);
        ref[i] = malloc(sizeof(int32_t) * (size_t)s[i].max_tokens);
        if (!s[i].toks || !ref[i]) {
            fprintf(stderr, "lockstep-bench %s: out of memory\n", cmd);
            goto out;
        }
        if (s[i].n_prompt > max_prompt) max_prompt = s[i].n_prompt;
    }
    mix_env env = {.m = m, .threads = (int)threads, .n_ctx = max_prompt + (int32_t)spec_gen + (int32_t)draft_max + 16,
                   .draft_max = (int32_t)draft_max, .kind = kind};
    /* Solo references: each stream alone, plain. */
    for (int i = 0; i < n_all; i++) {
        mix_result r;
        if (run_mix(&env, &s[i], 1, i < MAX_CLASSIC ? 1 : 0, false, &r, &err)) {
            fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
            goto out;
        }
        if (s[i].n != s[i].max_tokens) {
            fprintf(stderr, "lockstep-bench %s: stream %d generated %d of %d tokens alone\n", cmd, i, s[i].n,
                    s[i].max_tokens);
            goto out;
        }
        memcpy(ref[i], s[i].toks, sizeof(int32_t) * (size_t)s[i].n);
    }
    /* [N index][mix][rep] */
    static mix_result res[8][N_MIX][MAX_REPS];
    int parity_checked = 0;
    for (int r = 0; r < reps; r++)
        for (int a = 0; a < n_ns; a++)
            for (int mix = 0; mix < N_MIX; mix++) {
                int nc = ns[a], n = mix == MIX_ABSENT ? nc : nc + 1;
                for (int i = 0; i < nc; i++) run[i] = s[i];
                run[nc] = s[MAX_CLASSIC]; /* the speculative stream sits after the classic ones */
                if (run_mix(&env, run, n, nc, mix == MIX_SPEC, &res[a][mix][r], &err)) {
                    fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                    goto out;
                }
                for (int i = 0; i < n; i++) {
                    int id = i < nc ? i : MAX_CLASSIC;
                    if (!same_tokens(&run[i], ref[id])) {
                        fprintf(stderr,
                                "lockstep-bench %s: PARITY FAILURE: %s stream %d in the '%s' mix with %d classic streams "
                                "differs from its solo run\n",
                                cmd, id == MAX_CLASSIC ? "the speculative" : "classic", id, mix_names[mix], nc);
                        goto out;
                    }
                    parity_checked++;
                }
                if (!json)
                    fprintf(stderr, "\r  rep %d/%lld  N=%d %-6s classic %7.1f tok/s   ", r + 1, reps, nc,
                            mix_names[mix], res[a][mix][r].classic_tok_s);
            }
    if (!json) fprintf(stderr, "\r%70s\r", "");
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", model_path);
    cJSON_AddNumberToObject(root, "threads", (double)threads);
    cJSON_AddStringToObject(root, "isa", ls_isa_name(ls_isa_best()));
    cJSON_AddStringToObject(root, "drafter", ls_spec_kind_name(kind));
    cJSON_AddNumberToObject(root, "draft_max", (double)draft_max);
    cJSON_AddNumberToObject(root, "gen_classic", (double)gen);
    cJSON_AddNumberToObject(root, "gen_spec", (double)spec_gen);
    cJSON_AddNumberToObject(root, "reps", (double)reps);
    cJSON *pr = cJSON_AddArrayToObject(root, "prompt_tokens");
    for (int i = 0; i < n_all; i++) cJSON_AddItemToArray(pr, cJSON_CreateNumber(s[i].n_prompt));
    cJSON_AddNumberToObject(root, "parity_streams_checked", parity_checked);
    cJSON_AddNumberToObject(root, "parity_failures", 0);
    cJSON *rows = cJSON_AddArrayToObject(root, "mixed");
    if (!json) {
        printf("one %s-speculative stream (%lld tokens) amid N classic streams (%lld tokens each), greedy, "
               "%lld threads, median of %lld\n",
               ls_spec_kind_name(kind), spec_gen, gen, threads, reps);
        printf("%3s %16s %16s %16s %9s %12s %12s %8s %9s\n", "N", "classic absent", "classic +spec", "classic +plain",
               "spec/abs", "spec tok/s", "plain tok/s", "speedup", "tok/step");
    }
    for (int a = 0; a < n_ns; a++) {
        double v[N_MIX][4][MAX_REPS];
        for (int mix = 0; mix < N_MIX; mix++)
            for (int r = 0; r < reps; r++) {
                v[mix][0][r] = res[a][mix][r].classic_tok_s;
                v[mix][1][r] = res[a][mix][r].spec_tok_s;
                v[mix][2][r] = res[a][mix][r].spec_per_step;
                v[mix][3][r] = res[a][mix][r].accept_rate;
            }
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "N", ns[a]);
        cJSON *samples = cJSON_CreateObject();
        for (int mix = 0; mix < N_MIX; mix++) {
            cJSON *sm = cJSON_CreateObject();
            cJSON_AddItemToObject(sm, "classic_tok_s", cJSON_CreateDoubleArray(v[mix][0], (int)reps));
            if (mix != MIX_ABSENT) cJSON_AddItemToObject(sm, "spec_stream_tok_s", cJSON_CreateDoubleArray(v[mix][1], (int)reps));
            cJSON *ws = cJSON_AddArrayToObject(sm, "window_steps"), *pe = cJSON_AddArrayToObject(sm, "preemptions");
            for (int r = 0; r < reps; r++) {
                cJSON_AddItemToArray(ws, cJSON_CreateNumber(res[a][mix][r].window_steps));
                cJSON_AddItemToArray(pe, cJSON_CreateNumber((double)res[a][mix][r].preemptions));
            }
            cJSON_AddItemToObject(samples, mix_names[mix], sm);
        }
        double cabs = cli_median(v[MIX_ABSENT][0], (int)reps), cspec = cli_median(v[MIX_SPEC][0], (int)reps),
               cplain = cli_median(v[MIX_PLAIN][0], (int)reps), sspec = cli_median(v[MIX_SPEC][1], (int)reps),
               splain = cli_median(v[MIX_PLAIN][1], (int)reps), per_step = cli_median(v[MIX_SPEC][2], (int)reps),
               acc = cli_median(v[MIX_SPEC][3], (int)reps);
        cJSON_AddNumberToObject(c, "classic_absent_tok_s", cabs);
        cJSON_AddNumberToObject(c, "classic_with_spec_tok_s", cspec);
        cJSON_AddNumberToObject(c, "classic_with_plain_tok_s", cplain);
        cJSON_AddNumberToObject(c, "classic_with_spec_over_absent", cspec / cabs);
        cJSON_AddNumberToObject(c, "classic_with_plain_over_absent", cplain / cabs);
        cJSON_AddNumberToObject(c, "spec_stream_tok_s", sspec);
        cJSON_AddNumberToObject(c, "spec_stream_plain_tok_s", splain);
        cJSON_AddNumberToObject(c, "spec_stream_speedup", sspec / splain);
        cJSON_AddNumberToObject(c, "spec_tokens_per_step", per_step);
        cJSON_AddNumberToObject(c, "spec_accept_rate", acc);
        cJSON_AddItemToObject(c, "samples", samples);
        cJSON_AddItemToArray(rows, c);
        if (!json)
            printf("%3d %16.1f %16.1f %16.1f %8.2fx %12.1f %12.1f %7.2fx %9.2f\n", ns[a], cabs, cspec, cplain,
                   cspec / cabs, sspec, splain, sspec / splain, per_step);
    }
    if (json) {
        bench_print_json(root);
        root = NULL;
    } else {
        printf("parity: %d stream runs byte-identical (tokens, memcmp) to their solo runs\n", parity_checked);
    }
    rc = 0;
out:
    cJSON_Delete(root);
    for (int i = 0; i < n_all; i++) {
        free(s[i].toks);
        free(ref[i]);
    }
    ls_model_free(m);
    return rc;
}
