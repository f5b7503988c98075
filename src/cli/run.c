/* run.c - `lockstep run`: generate from a prompt or a chat message, streaming. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/generate.h"
#include "engine/probe.h"
#include "model/model.h"
#include "engine/spec_probe.h"
#include "spec/spec.h"

static const char *run_help =
    "usage: lockstep run [-m MODEL] (-p PROMPT | --chat MESSAGE [--system S]) [flags]\n"
    "\n"
    "  -m, --model PATH        GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "  -p, --prompt TEXT       raw prompt (special tokens like <|im_start|> are recognised)\n"
    "      --chat MESSAGE      a user message, wrapped in the model's chat template\n"
    "      --system TEXT       system message for --chat\n"
    "      --chat-template NAME  override the template family (chatml, llama2, llama3,\n"
    "                          mistral, gemma, phi3, zephyr)\n"
    "  -n, --n-predict N       max new tokens (default 256; -1 = until the context is full)\n"
    "      --temp T            temperature (default 0.8; 0 = greedy)\n"
    "      --top-k K           top-k (default 40; 0 = off)\n"
    "      --top-p P           top-p (default 0.95; 1 = off)\n"
    "      --seed S            seed of the draw; token p uses only (seed, p) (default 0)\n"
    "  -t, --threads N         threads (default: online CPUs)\n"
    "  -c, --ctx-size N        context size in tokens (default min(trained, 4096))\n"
    "      --spec KIND         speculative decoding: ngram, draft, layerskip, mtp or off (default off);\n"
    "                          the tokens are the same as without it, only faster or slower\n"
    "      --draft-max K       longest draft (default 8)\n"
    "      --draft-min N       shorter drafts are not verified (default 1)\n"
    "      --draft-model PATH  the draft model for --spec draft (same vocabulary)\n"
    "      --draft-layers L    --spec layerskip drafts with the first L layers (default half)\n"
    "      --ngram-min N, --ngram-max N   n-gram sizes for --spec ngram (default 2, 4)\n"
    "      --allow-inexact     speculate even if the exactness probe declines\n"
    "      --no-probe          skip the startup parity probe (and the speculation probe)\n"
    "      --json              print one JSON object instead of streaming text\n"
    "  -h, --help              this help\n"
    "\n"
    "Streams the answer to stdout; a summary line and the probe verdict go to stderr.\n"
    "LOCKSTEP_ISA=scalar|avx2|avx512 forces the kernel instruction set.\n";

typedef struct {
    bool json;
} stream_state;

static void on_text(void *ud, int32_t token, const char *text, size_t len) {
    stream_state *s = ud;
    (void)token;
    if (s->json || len == 0) return;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

int cli_run(int argc, char **argv) {
    const char *cmd = "run";
    const char *model_path = LS_DEFAULT_MODEL, *prompt = NULL, *chat = NULL, *system = NULL, *tmpl = NULL;
    long long n_predict = 256, top_k = 40, threads = 0, ctx_size = 0;
    double temp = 0.8, top_p = 0.95;
    uint64_t seed = 0;
    bool json = false, probe = true, allow_inexact = false;
    const char *spec_name = "off", *draft_path = NULL;
    long long draft_max = 8, draft_min = 1, draft_layers = 0, ngram_min = 2, ngram_max = 4;
    enum { O_CHAT = 256, O_SYSTEM, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_JSON, O_TMPL, O_NOPROBE, O_SPEC, O_DMAX, O_DMIN,
           O_DMODEL, O_DLAYERS, O_NGMIN, O_NGMAX, O_INEXACT };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"prompt", required_argument, 0, 'p'},
        {"chat", required_argument, 0, O_CHAT}, {"system", required_argument, 0, O_SYSTEM},
        {"n-predict", required_argument, 0, 'n'}, {"temp", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK}, {"top-p", required_argument, 0, O_TOPP},
        {"seed", required_argument, 0, O_SEED}, {"threads", required_argument, 0, 't'},
        {"ctx-size", required_argument, 0, 'c'}, {"json", no_argument, 0, O_JSON},
        {"chat-template", required_argument, 0, O_TMPL}, {"no-probe", no_argument, 0, O_NOPROBE},
        {"spec", required_argument, 0, O_SPEC}, {"draft-max", required_argument, 0, O_DMAX},
        {"draft-min", required_argument, 0, O_DMIN}, {"draft-model", required_argument, 0, O_DMODEL},
        {"draft-layers", required_argument, 0, O_DLAYERS}, {"ngram-min", required_argument, 0, O_NGMIN},
        {"ngram-max", required_argument, 0, O_NGMAX}, {"allow-inexact", no_argument, 0, O_INEXACT},
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
        case 'n': if (!cli_parse_int(cmd, "--n-predict", optarg, -1, 1 << 24, &n_predict)) return LS_EXIT_USAGE; break;
        case O_TEMP: if (!cli_parse_float(cmd, "--temp", optarg, 0, 1e6, &temp)) return LS_EXIT_USAGE; break;
        case O_TOPK: if (!cli_parse_int(cmd, "--top-k", optarg, 0, 1 << 24, &top_k)) return LS_EXIT_USAGE; break;
        case O_TOPP: if (!cli_parse_float(cmd, "--top-p", optarg, 1e-9, 1, &top_p)) return LS_EXIT_USAGE; break;
        case O_SEED: if (!cli_parse_u64(cmd, "--seed", optarg, &seed)) return LS_EXIT_USAGE; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case 'c': if (!cli_parse_int(cmd, "--ctx-size", optarg, 1, 1 << 24, &ctx_size)) return LS_EXIT_USAGE; break;
        case O_JSON: json = true; break;
        case O_NOPROBE: probe = false; break;
        case O_SPEC: spec_name = optarg; break;
        case O_INEXACT: allow_inexact = true; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &draft_max)) return LS_EXIT_USAGE; break;
        case O_DMIN: if (!cli_parse_int(cmd, "--draft-min", optarg, 0, 64, &draft_min)) return LS_EXIT_USAGE; break;
        case O_DMODEL: draft_path = optarg; break;
        case O_DLAYERS: if (!cli_parse_int(cmd, "--draft-layers", optarg, 1, 4096, &draft_layers)) return LS_EXIT_USAGE; break;
        case O_NGMIN: if (!cli_parse_int(cmd, "--ngram-min", optarg, 1, 16, &ngram_min)) return LS_EXIT_USAGE; break;
        case O_NGMAX: if (!cli_parse_int(cmd, "--ngram-max", optarg, 1, 16, &ngram_max)) return LS_EXIT_USAGE; break;
        case 'h': fputs(run_help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (!prompt == !chat) return cli_usage_error(cmd, "give exactly one of -p PROMPT or --chat MESSAGE");
    if (system && !chat) return cli_usage_error(cmd, "--system needs --chat");
    if (access(model_path, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read model file '%s'%s", model_path,
                               strcmp(model_path, LS_DEFAULT_MODEL) ? "" : " (run `make model` to fetch it)");
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? n : 1;
    }
    ls_err err;
    ls_err_clear(&err);
    ls_spec_params spp = {.draft_max = (int32_t)draft_max, .draft_min = (int32_t)draft_min,
                          .ngram_min = (int32_t)ngram_min, .ngram_max = (int32_t)ngram_max,
                          .skip_first = (int32_t)draft_layers};
    if (ls_spec_kind_from_name(spec_name, &spp.kind, &err)) return cli_usage_error(cmd, "%s", err.msg);
    if (draft_path && spp.kind != LS_SPEC_DRAFT) return cli_usage_error(cmd, "--draft-model needs --spec draft");
    if (spp.kind == LS_SPEC_DRAFT && !draft_path) return cli_usage_error(cmd, "--spec draft needs --draft-model PATH");
    if (draft_path && access(draft_path, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read draft model file '%s'", draft_path);
    if (draft_min > draft_max) return cli_usage_error(cmd, "--draft-min %lld exceeds --draft-max %lld", draft_min, draft_max);
    if (ngram_min > ngram_max) return cli_usage_error(cmd, "--ngram-min %lld exceeds --ngram-max %lld", ngram_min, ngram_max);
    ls_model *dm = NULL;
    ls_spec_stats sst = {0};
    int rc = LS_EXIT_USAGE;
    ls_ctx *ctx = NULL;
    char *text = NULL;
    int32_t *toks = NULL;
    ls_gen_result res = {0};
    ls_model *m = ls_model_load((ls_model_params){.path = model_path, .chat_template = tmpl}, &err);
    if (!m) {
        fprintf(stderr, "lockstep run: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    if (draft_path) {
        dm = ls_model_load((ls_model_params){.path = draft_path}, &err);
        if (!dm) {
            fprintf(stderr, "lockstep run: cannot load draft model '%s': %s\n", draft_path, err.msg);
            ls_model_free(m);
            return LS_EXIT_USAGE;
        }
        spp.draft_model = dm;
    }
    spp.n_ctx = (int32_t)(ctx_size ? ctx_size : 0);
    if (spp.kind != LS_SPEC_OFF) {
        spp.n_ctx = spp.n_ctx ? spp.n_ctx : 1; /* checked against the real context below */
        if (ls_spec_check(m, &spp, &err)) {
            fprintf(stderr, "lockstep run: %s\n", err.msg);
            goto out;
        }
    }
    const ls_tokenizer *tok = ls_model_tokenizer(m);
    const char *input = prompt;
    if (chat) {
        const ls_chat_template *t = ls_model_chat_template(m);
        if (!t) {
            fprintf(stderr, "lockstep run: %s\n", ls_model_template_error(m));
            goto out;
        }
        ls_chat_msg msgs[2];
        size_t nm = 0;
        if (system) msgs[nm++] = (ls_chat_msg){"system", system};
        msgs[nm++] = (ls_chat_msg){"user", chat};
        if (ls_chat_apply(t, msgs, nm, true, &text, &err)) {
            fprintf(stderr, "lockstep run: %s\n", err.msg);
            goto out;
        }
        input = text;
    }
    size_t len = strlen(input), n_tok = 0;
    size_t cap = len + 8;
    toks = malloc(cap * sizeof *toks);
    if (!toks || ls_tokenize(tok, input, len, true, true, toks, cap, &n_tok, &err)) {
        fprintf(stderr, "lockstep run: cannot tokenize the prompt: %s\n", toks ? err.msg : "out of memory");
        goto out;
    }
    ls_ctx_params cp = {.n_ctx = (int32_t)ctx_size, .n_threads = (int32_t)threads, .isa = -1};
    ctx = ls_ctx_create(m, cp, &err);
    if (!ctx) {
        fprintf(stderr, "lockstep run: %s\n", err.msg);
        goto out;
    }
    if ((int64_t)n_tok >= ls_ctx_n_ctx(ctx)) {
        fprintf(stderr, "lockstep run: the prompt is %zu tokens but the context holds %d; "
                        "shorten it or raise --ctx-size\n", n_tok, ls_ctx_n_ctx(ctx));
        goto out;
    }
    rc = 1;
    ls_probe_result pr = {0};
    if (probe && ls_probe_run(m, toks, (int32_t)n_tok, (int)threads, ls_ctx_isa(ctx), &pr, &err)) {
        fprintf(stderr, "lockstep run: probe failed to run: %s\n", err.msg);
        goto out;
    }
    stream_state ss = {.json = json};
    ls_spec_gate gate = {.probe = probe, .allow_inexact = allow_inexact, .model_path = model_path,
                         .memo_dir = ls_probe_memo_dir()};
    ls_gen_params gp = {
        .sampler = {.temperature = (float)temp, .top_k = (int32_t)top_k, .top_p = (float)top_p, .seed = seed},
        .n_predict = (int32_t)n_predict,
        .on_text = on_text,
        .ud = &ss,
    };
    ls_status gst = spp.kind == LS_SPEC_OFF
                        ? ls_generate(ctx, toks, (int32_t)n_tok, &gp, &res, &err)
                        : ls_generate_spec(m, &spp, &gate, (int)threads, ls_ctx_n_ctx(ctx), toks, (int32_t)n_tok, &gp,
                                           &res, &sst, &err);
    if (gst) {
        fprintf(stderr, "lockstep run: %s\n", err.msg);
        rc = err.code == LS_E_RANGE || err.code == LS_E_INVALID ? LS_EXIT_USAGE : 1;
        goto out;
    }
    /* Forward passes per second, as llama-bench's tg counts them (the last sampled
     * token needs no forward). */
    double tok_s = res.decode_ms > 0 && res.n_decode > 0 ? res.n_decode / (res.decode_ms / 1e3) : 0.0;
    const char *verdict = !probe ? "skipped" : pr.ok ? "verified" : "FAILED";
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", res.text);
        cJSON *ids = cJSON_AddArrayToObject(o, "tokens");
        for (int32_t i = 0; i < res.n_gen; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(res.tokens[i]));
        cJSON_AddNumberToObject(o, "n_prompt", (double)n_tok);
        cJSON_AddNumberToObject(o, "n_gen", res.n_gen);
        cJSON_AddNumberToObject(o, "prefill_ms", res.prefill_ms);
        cJSON_AddNumberToObject(o, "decode_ms", res.decode_ms);
        cJSON_AddNumberToObject(o, "decode_tok_s", tok_s);
        cJSON_AddStringToObject(o, "finish_reason", ls_finish_name(res.finish));
        cJSON_AddStringToObject(o, "parity", verdict);
        cJSON_AddStringToObject(o, "isa", ls_isa_name(ls_ctx_isa(ctx)));
        cJSON_AddNumberToObject(o, "threads", (double)threads);
        cJSON_AddStringToObject(o, "spec", ls_spec_kind_name(spp.kind));
        cJSON_AddStringToObject(o, "spec_probe", !sst.probed ? "skipped" : ls_verdict_name((ls_verdict)sst.verdict));
        cJSON_AddBoolToObject(o, "spec_declined", sst.declined);
        cJSON_AddNumberToObject(o, "draft_n", sst.n_drafted);
        cJSON_AddNumberToObject(o, "draft_accepted", sst.n_accepted);
        /* tokens emitted per target decode step: 1 + the drafts accepted in it */
        cJSON_AddNumberToObject(o, "mean_accepted_len", sst.n_steps ? (double)(res.n_gen - 1 + (res.finish == LS_FINISH_STOP)) / sst.n_steps : 1.0);
        char *s = cJSON_PrintUnformatted(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "\n[%d prompt + %d generated tokens | prefill %.1f ms (%.1f tok/s) | decode %.1f tok/s | "
                        "%s, %lld threads | finish: %s]\n",
                (int)n_tok, res.n_gen, res.prefill_ms, res.prefill_ms > 0 ? n_tok / (res.prefill_ms / 1e3) : 0.0,
                tok_s, ls_isa_name(ls_ctx_isa(ctx)), threads, ls_finish_name(res.finish));
        if (sst.probed)
            fprintf(stderr, "[speculation probe: %s%s (%.0f ms)%s%s]\n", ls_verdict_name((ls_verdict)sst.verdict),
                    sst.probe_memo ? ", memoized" : "", sst.probe_ms, sst.declined ? " - speculation declined: " : "",
                    sst.declined ? sst.probe_detail : "");
        if (spp.kind != LS_SPEC_OFF)
            fprintf(stderr, "[spec %s: %d drafted, %d accepted (%.0f %%), %.2f tokens per target step, %.0f ms drafting]\n",
                    ls_spec_kind_name(spp.kind), sst.n_drafted, sst.n_accepted,
                    sst.n_drafted ? 100.0 * sst.n_accepted / sst.n_drafted : 0.0,
                    sst.n_steps ? (double)(res.n_gen - 1 + (res.finish == LS_FINISH_STOP)) / sst.n_steps : 1.0,
                    sst.draft_ms);
    }
    if (probe) {
        if (pr.ok)
            fprintf(stderr, "parity: verified (%d tokens: chunked prefill, %lld vs 1 threads, %s vs scalar; "
                            "logits byte-identical, %.0f ms)\n",
                    pr.n_tokens, threads, ls_isa_name(ls_ctx_isa(ctx)), pr.ms);
        else
            fprintf(stderr, "parity: FAILED (%s)\n", pr.detail);
    }
    rc = probe && !pr.ok ? 1 : 0;
out:
    ls_gen_result_free(&res);
    free(toks);
    free(text);
    ls_ctx_free(ctx);
    ls_model_free(m);
    ls_model_free(dm);
    return rc;
}
