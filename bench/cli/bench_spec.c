/* bench_spec.c - `lockstep-bench spec`: speculative decoding's speedup over plain
 * decoding and its mean accepted length, per drafter, on input-grounded prompts
 * (quote a text, ask for an edit, a summary or a code rewrite) and on open prose.
 * Greedy, the same tokens with and without speculation (checked here too); runs are
 * interleaved (plain, then each drafter, per prompt and rep) and medians reported.
 * Then the price of a verify block: decode steps of k + 1 rows whose drafts are all
 * rejected, against plain steps (verify_costs). */
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
#include "speculative/spec.h"

static const char *help =
    "usage: lockstep-bench spec [-m MODEL] [-t THREADS] [-n TOKENS] [--draft-max K] [--reps N] [--json]\n"
    "\n"
    "  -m, --model PATH   target model (default " LS_DEFAULT_MODEL "); it is also the\n"
    "                     'draft' drafter's model (self-draft: acceptance must be 100 %;\n"
    "                     'draft(self,k)' forces draft-max drafts to show it, since the\n"
    "                     adaptive drafter rightly never drafts with a model this costly)\n"
    "  -t, --threads N    threads (default: online CPUs)\n"
    "  -n N               tokens to generate per run (default 128)\n"
    "      --draft-max K  longest draft (default 8)\n"
    "      --reps N       runs per figure, medians reported (default 3)\n"
    "      --json         one JSON object\n"
    "\n"
    "Ends with the cost of a verify block: decode steps whose k drafts are all rejected\n"
    "(k + 1 rows, one token each) against plain steps, k = 0, 1, 2, 3, 4, 8 up to --draft-max.\n";

static const char *grounded[] = {
    "Here is a paragraph:\n\"The printing press, developed by Johannes Gutenberg around 1440, combined movable metal "
    "type, oil-based ink and a wooden screw press. Within decades printing spread across Europe, books became cheaper, "
    "and literacy rose.\"\nRepeat the paragraph exactly, but replace \"Johannes Gutenberg\" with \"a German goldsmith\".",
    "Rewrite this Python function so that the variable `total` is called `acc`, keeping everything else the same:\n"
    "def sum_list(values):\n    total = 0\n    for v in values:\n        total = total + v\n    return total\n\n"
    "def mean(values):\n    total = sum_list(values)\n    return total / len(values)\n",
    "Correct the spelling mistakes in this text and return the whole corrected text: \"Yesterday we went to the "
    "museum of natural histroy. We saw the dinosaur skeletons, the big blue whale, and a room full of minerals that "
    "glowed under ultraviolet light. Afterwards we had lunch in the park and walked home along the river.\"",
};
static const char *prose[] = {
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old, in a few paragraphs.",
    "Describe a busy market in a small town on a Saturday morning.",
};

#define NK 5 /* off, ngram, layerskip, draft (self), draft (self) forced to draft-max */

/* ---- the cost of a verify block -------------------------------------------------
 * A drafter that always proposes k tokens the target rejects (each differs from the
 * reference continuation), so every decode step is one block of k + 1 rows that yields
 * one token: its time against k = 0 is the price of verifying k drafts.  This is the
 * number the adaptive draft length weighs (LS_SPEC_ROW_COST in src/spec/spec.c). */
#define NV 6
typedef struct {
    const int32_t *ref; /* the reference continuation */
    int32_t n_ref, n_prompt, n_vocab, k;
} reject_drafter;

static int32_t reject_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    (void)hist;
    const reject_drafter *d = ud;
    int32_t k = d->k < max ? d->k : max;
    for (int32_t j = 0; j < k; j++) {
        int32_t i = n_hist - d->n_prompt + j;
        out[j] = ((i < d->n_ref ? d->ref[i] : 0) + 1) % d->n_vocab;
    }
    return k;
}

typedef struct {
    int32_t *toks;
    int32_t n, cap;
    double t_first;
    bool done;
} reject_run;

static void reject_event(void *ud, const ls_event *ev) {
    reject_run *r = ud;
    if (ev->token >= 0 && r->n < r->cap) r->toks[r->n++] = ev->token;
    if (ev->token >= 0 && !r->t_first) r->t_first = ls_now_ms();
    if (ev->done) r->done = true;
}

/* ms per decode step for each draft length ks[v] (medians of reps, interleaved); false on
 * an error or when a run's tokens differ from ref (a parity failure, reported). */
static bool verify_costs(const ls_model *m, int threads, const int32_t *prompt, int32_t n_prompt, const int32_t *ref,
                         int32_t n_ref, const int32_t *ks, int nv, int reps, double *ms_out, int32_t *steps_out,
                         ls_err *err) {
    ls_engine_params ep = {.size = sizeof(ls_engine_params), .n_ctx = n_prompt + n_ref + 16, .n_seq_max = 1, .step_tokens = 512, .n_threads = threads,
                           .isa = -1, .draft_max = 64, .no_prefix_cache = true};
    ls_engine *e = ls_engine_create(m, &ep, err);
    if (!e) return false;
    double t[NV][64];
    int32_t toks[4096];
    bool ok = true;
    for (int r = 0; r < reps && ok; r++)
        for (int v = 0; v < nv && ok; v++) {
            reject_drafter d = {ref, n_ref, n_prompt, (int32_t)ls_model_hparams(m)->n_vocab, ks[v]};
            reject_run run = {toks, 0, 4096, 0, false};
            ls_request q = {.size = sizeof(ls_request), .prompt = prompt, .n_prompt = n_prompt,
                            .sampling = {.temperature = 0.0f, .top_p = 1.0f}, .max_tokens = n_ref,
                            .ignore_eos = true, .on_event = reject_event, .ud = &run,
                            .draft = ks[v] ? reject_draft : NULL, .draft_ud = &d};
            if (ls_engine_submit(e, &q, NULL, err)) {
                ok = false;
                break;
            }
            int32_t steps = 0;
            while (!run.done) {
                int32_t rows;
                bool had_first = run.t_first != 0;
                if (ls_engine_step(e, &rows, err)) {
                    ok = false;
                    break;
                }
                if (had_first && rows) steps++;
            }
            if (!ok) break;
            if (run.n != n_ref || memcmp(run.toks, ref, sizeof(int32_t) * (size_t)n_ref)) {
                ls_err_set(err, LS_E_INVALID, "PARITY FAILURE: %d rejected drafts per step changed the tokens",
                           ks[v]);
                ok = false;
                break;
            }
            t[v][r] = steps ? (ls_now_ms() - run.t_first) / steps : 0.0;
            steps_out[v] = steps;
        }
    for (int v = 0; ok && v < nv; v++) ms_out[v] = cli_median(t[v], reps);
    ls_engine_free(e);
    return ok;
}

/* One greedy request through a fresh one-sequence engine with the drafter sp describes
 * (kind off: plain decoding); the result as ls_engine_generate gives it. */
static ls_status spec_generate(ls_model *m, const ls_spec_params *sp, int threads, int32_t n_ctx, const int32_t *toks,
                               int32_t n, int32_t n_gen, ls_result *res, ls_err *err) {
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT;
    ep.n_ctx = n_ctx;
    ep.n_seq_max = 1;
    ep.n_threads = threads;
    ep.draft_max = sp->kind != LS_SPEC_OFF ? sp->draft_max : 0;
    ep.no_prefix_cache = true;
    ls_engine *e = ls_engine_create(m, &ep, err);
    if (!e) return err->code;
    ls_request q = LS_REQUEST_INIT;
    q.prompt = toks;
    q.n_prompt = n;
    q.max_tokens = n_gen;
    ls_drafter *d = NULL;
    ls_status st = LS_OK;
    if (sp->kind != LS_SPEC_OFF && !(d = ls_drafter_create(e, sp, &q.sampling, err))) st = err->code;
    if (d) ls_drafter_attach(d, &q);
    if (!st) st = ls_engine_generate(e, &q, res, err);
    ls_drafter_free(d);
    ls_engine_free(e);
    return st;
}

int cli_bench_spec(int argc, char **argv) {
    const char *cmd = "spec";
    const char *model_path = LS_DEFAULT_MODEL;
    long long threads = 0, n_gen = 128, draft_max = 8, reps = 3;
    bool json = false;
    enum { O_DMAX = 256, O_REPS, O_JSON };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},
                                         {"draft-max", required_argument, 0, O_DMAX}, {"reps", required_argument, 0, O_REPS},
                                         {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case 'n': if (!cli_parse_int(cmd, "-n", optarg, 8, 4096, &n_gen)) return LS_EXIT_USAGE; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &draft_max)) return LS_EXIT_USAGE; break;
        case O_REPS: if (!cli_parse_int(cmd, "--reps", optarg, 1, 64, &reps)) return LS_EXIT_USAGE; break;
        case O_JSON: json = true; break;
        case 'h': fputs(help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    ls_err err;
    ls_model *m = bench_load_model(cmd, model_path, &threads);
    if (!m) return LS_EXIT_USAGE;
    const ls_chat_template *tmpl = ls_model_chat_template(m);
    const ls_spec_kind kinds[NK] = {LS_SPEC_OFF, LS_SPEC_NGRAM, LS_SPEC_LAYERSKIP, LS_SPEC_DRAFT, LS_SPEC_DRAFT};
    const char *labels[NK] = {"off", "ngram", "layerskip", "draft(self)", "draft(self,k)"};
    /* [class][kind][prompt * reps] */
    double tps[2][NK][64], acc_len[2][NK][64], acc_rate[2][NK][64];
    int cnt[2][NK] = {{0}};
    int32_t g0[2048], g0_ref[4096], n_g0 = 0, n_g0_ref = 0; /* grounded prompt 0 and its tokens */
    int rc = 1;
    { /* Unrecorded warm-up: a process's first forwards pay for first touches of the weights. */
        const char *w = "The history of the printing press begins";
        int32_t wt[64];
        size_t nw;
        ls_spec_params sp = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_OFF, .draft_max = (int32_t)draft_max};
        ls_result res = LS_RESULT_INIT;
        if (ls_tokenize(ls_model_tokenizer(m), w, strlen(w), true, false, wt, 64, &nw, &err) ||
            spec_generate(m, &sp, (int)threads, (int32_t)nw + 32, wt, (int32_t)nw, 16, &res, &err)) {
            fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
            goto out;
        }
        ls_result_free(&res);
    }
    for (int r = 0; r < reps; r++)
        for (int cls = 0; cls < 2; cls++)
            for (int pi = 0; pi < 3; pi++) {
                const char *msg = cls == 0 ? grounded[pi] : prose[pi];
                char *text = NULL;
                ls_chat_msg cm = {"user", msg};
                if (!tmpl || ls_chat_apply(tmpl, &cm, 1, true, &text, &err)) {
                    fprintf(stderr, "lockstep-bench %s: %s\n", cmd, tmpl ? err.msg : ls_model_template_error(m));
                    goto out;
                }
                int32_t toks[2048];
                size_t nt;
                if (ls_tokenize(ls_model_tokenizer(m), text, strlen(text), true, true, toks, 2048, &nt, &err)) {
                    free(text);
                    fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                    goto out;
                }
                free(text);
                int32_t ref[4096], n_ref = 0;
                for (int k = 0; k < NK; k++) {
                    ls_spec_params sp = {.size = sizeof(ls_spec_params), .kind = kinds[k], .draft_max = (int32_t)draft_max, .draft_min = 1,
                                         .ngram_min = 2, .ngram_max = 4, .draft_model = m,
                                         .fixed_length = k == NK - 1 /* shows self-draft acceptance */};
                    ls_result res = LS_RESULT_INIT;
                    if (spec_generate(m, &sp, (int)threads, (int32_t)(nt + n_gen + 16), toks, (int32_t)nt,
                                      (int32_t)n_gen, &res, &err)) {
                        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
                        goto out;
                    }
                    if (k == 0) {
                        n_ref = res.n_tokens;
                        memcpy(ref, res.tokens, sizeof(int32_t) * (size_t)res.n_tokens);
                        if (cls == 0 && pi == 0 && r == 0) {
                            n_g0 = (int32_t)nt;
                            memcpy(g0, toks, sizeof(int32_t) * nt);
                            n_g0_ref = res.n_tokens;
                            memcpy(g0_ref, res.tokens, sizeof(int32_t) * (size_t)res.n_tokens);
                        }
                    } else if (res.n_tokens != n_ref || memcmp(ref, res.tokens, sizeof(int32_t) * (size_t)n_ref)) {
                        fprintf(stderr, "lockstep-bench %s: PARITY FAILURE: %s changed the tokens\n", cmd,
                                labels[k]);
                        ls_result_free(&res);
                        goto out;
                    }
                    int c = cnt[cls][k]++;
                    /* tokens sampled in decode steps (a final stop token too), per second and per step */
                    const int32_t n_after = res.n_tokens - 1 + (res.finish == LS_FINISH_STOP);
                    tps[cls][k][c] = res.gen_ms > 0 ? n_after / (res.gen_ms / 1e3) : 0.0;
                    acc_len[cls][k][c] = res.n_steps ? (double)n_after / res.n_steps : 1.0;
                    acc_rate[cls][k][c] = res.n_drafted ? (double)res.n_accepted / res.n_drafted : 0.0;
                    if (!json)
                        fprintf(stderr, "\r  rep %d  %-8s prompt %d  %-13s %7.1f tok/s   ", r + 1,
                                cls ? "prose" : "grounded", pi, labels[k], tps[cls][k][c]);
                    ls_result_free(&res);
                }
            }
    if (!json) fprintf(stderr, "\r%78s\r", "");
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "spec");
    cJSON_AddNumberToObject(root, "threads", (double)threads);
    cJSON_AddNumberToObject(root, "n_gen", (double)n_gen);
    cJSON_AddNumberToObject(root, "draft_max", (double)draft_max);
    cJSON_AddNumberToObject(root, "reps", (double)reps);
    if (!json)
        printf("speculative decoding, greedy, %lld tokens, draft-max %lld, %lld threads; medians over 3 prompts x %lld reps\n"
               "%-9s %-13s %7s %9s %14s %12s\n",
               n_gen, draft_max, threads, reps, "prompts", "drafter", "tok/s", "speedup", "accepted len", "accept rate");
    for (int cls = 0; cls < 2; cls++) {
        cJSON *samples[NK][2]; /* the raw samples first, in run order: the medians sort them */
        for (int k = 0; k < NK; k++) {
            samples[k][0] = cJSON_CreateDoubleArray(tps[cls][k], cnt[cls][k]);
            samples[k][1] = cJSON_CreateDoubleArray(acc_len[cls][k], cnt[cls][k]);
        }
        double base = cli_median(tps[cls][0], cnt[cls][0]);
        for (int k = 0; k < NK; k++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddItemToObject(c, "tok_s_samples", samples[k][0]);
            cJSON_AddItemToObject(c, "accepted_len_samples", samples[k][1]);
            double t = cli_median(tps[cls][k], cnt[cls][k]), al = cli_median(acc_len[cls][k], cnt[cls][k]),
                   ar = cli_median(acc_rate[cls][k], cnt[cls][k]);
            cJSON_AddStringToObject(c, "prompts", cls ? "prose" : "input-grounded");
            cJSON_AddStringToObject(c, "drafter", labels[k]);
            cJSON_AddNumberToObject(c, "tok_s", t);
            cJSON_AddNumberToObject(c, "speedup", base > 0 ? t / base : 0.0);
            cJSON_AddNumberToObject(c, "mean_accepted_len", al);
            cJSON_AddNumberToObject(c, "accept_rate", ar);
            cJSON_AddItemToArray(rows, c);
            if (!json)
                printf("%-9s %-13s %7.1f %8.2fx %14.2f %11.0f%%\n", cls ? "prose" : "grounded", labels[k], t,
                       base > 0 ? t / base : 0.0, al, 100 * ar);
        }
    }
    if (n_g0_ref < 2) { /* the model ended at once: no decode steps to time */
        if (!json) printf("\nverify block cost: skipped (grounded prompt 0 gave %d tokens)\n", (int)n_g0_ref);
    } else { /* the price of a verify block: steps of k + 1 rows, all k drafts rejected */
        int32_t ks[NV] = {0, 1, 2, 3, 4, 8}, steps[NV] = {0};
        int nv = 0;
        while (nv < NV && ks[nv] <= draft_max) nv++;
        double vms[NV];
        int vreps = 3 * (int)reps > 63 ? 63 : 3 * (int)reps; /* cheap runs, a noisy figure: more of them */
        if (!verify_costs(m, (int)threads, g0, n_g0, g0_ref, n_g0_ref, ks, nv, vreps, vms, steps, &err)) {
            fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
            cJSON_Delete(root);
            goto out;
        }
        cJSON_AddNumberToObject(root, "verify_reps", vreps);
        cJSON *vc = cJSON_AddArrayToObject(root, "verify_cost");
        if (!json)
            printf("\nverify block cost (grounded prompt 0, every draft rejected: one token per step; medians of %lld runs)\n"
                   "%6s %5s %9s %10s %14s\n",
                   (long long)vreps, "drafts", "rows", "step ms", "x 1 row", "per extra row");
        for (int v = 0; v < nv; v++) {
            double x = vms[0] > 0 ? vms[v] / vms[0] : 0.0, per = ks[v] ? (x - 1.0) / ks[v] : 0.0;
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "drafts", ks[v]);
            cJSON_AddNumberToObject(c, "rows", ks[v] + 1);
            cJSON_AddNumberToObject(c, "steps", steps[v]);
            cJSON_AddNumberToObject(c, "step_ms", vms[v]);
            cJSON_AddNumberToObject(c, "x_one_row", x);
            cJSON_AddNumberToObject(c, "per_extra_row", per);
            cJSON_AddItemToArray(vc, c);
            if (!json) printf("%6d %5d %9.3f %9.2fx %14.2f\n", ks[v], ks[v] + 1, vms[v], x, per);
        }
    }
    if (json) bench_print_json(root);
    else cJSON_Delete(root);
    rc = 0;
out:
    ls_model_free(m);
    return rc;
}
