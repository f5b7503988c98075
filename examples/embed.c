/* embed.c - lockstep inside another program, through the public header alone.
 *
 *   cc -Iinclude examples/embed.c -Lbuild -llockstep -o embed && LD_LIBRARY_PATH=build ./embed MODEL "prompt"
 *
 * Loads a model, creates an engine, certifies it with the parity probe, then answers one
 * chat message twice: once streamed through the event callback, once collected by
 * ls_engine_generate, and checks both gave the same tokens (they must: same request,
 * same seed).  docs/embedding.md walks through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockstep.h"

static void print_text(void *ud, const ls_event *ev) {
    (void)ud;
    if (ev->text_len) fwrite(ev->text, 1, ev->text_len, stdout);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL MESSAGE\n", argv[0]);
        return 2;
    }
    ls_err err;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = argv[1];
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], err.msg);
        return 2;
    }
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT;
    ep.n_ctx = 512;
    ep.n_threads = 2;
    ep.n_seq_max = 4;
    ep.draft_max = 4;
    ls_engine *e = ls_engine_create(m, &ep, &err);
    if (!e) {
        fprintf(stderr, "engine: %s\n", err.msg);
        ls_model_free(m);
        return 1;
    }
    ls_probe_params pp = LS_PROBE_PARAMS_INIT; /* no memo_dir: probe afresh */
    ls_probe_result pr = LS_PROBE_RESULT_INIT;
    if (ls_engine_probe(e, &pp, &pr, &err)) {
        fprintf(stderr, "probe: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "parity: %s (%d logits rows compared)\n", ls_verdict_name(pr.verdict), pr.n_rows);

    ls_chat_msg msg = {"user", argv[2]};
    char *text = NULL;
    int32_t toks[1024];
    size_t n = 0;
    if (ls_model_apply_chat(m, &msg, 1, true, &text, &err) ||
        ls_model_tokenize(m, text, strlen(text), true, true, toks, 1024, &n, &err)) {
        fprintf(stderr, "prompt: %s\n", err.msg);
        return 1;
    }
    free(text);
    ls_request q = LS_REQUEST_INIT;
    q.prompt = toks;
    q.n_prompt = (int32_t)n;
    q.max_tokens = 32;
    q.sampling = (ls_sampler_params){.temperature = 0.7f, .top_k = 40, .top_p = 0.95f, .seed = 42};
    q.on_event = print_text; /* streamed as it is decoded */
    ls_result a = LS_RESULT_INIT, b = LS_RESULT_INIT;
    if (ls_engine_generate(e, &q, &a, &err)) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return 1;
    }
    printf("\n");
    q.on_event = NULL; /* the same request again, collected only */
    if (ls_engine_generate(e, &q, &b, &err)) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return 1;
    }
    int same = a.n_tokens == b.n_tokens && !memcmp(a.tokens, b.tokens, sizeof(int32_t) * (size_t)a.n_tokens);
    fprintf(stderr, "%d tokens, finish %s, %d served from the prefix cache the second time; replay %s\n", a.n_tokens,
            ls_finish_name(a.finish), b.n_cached, same ? "identical" : "DIFFERENT");
    ls_result_free(&a);
    ls_result_free(&b);
    ls_engine_free(e);
    ls_model_free(m);
    return same ? 0 : 1;
}
