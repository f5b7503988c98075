#include "engine/probe.h"
#include "util/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"

#define PROBE_MAX 8
#define PROBE_SCALAR 2

/* Runs tokens through a fresh context in chunks of `chunk`, collecting every
 * row's logits into out (n x n_vocab). */
static ls_status eval_shaped(const ls_model *m, const int32_t *tokens, int32_t n, int32_t chunk, int threads,
                             ls_isa isa, float *out, ls_err *err) {
    ls_ctx_params cp = {.n_ctx = 16, .n_batch = PROBE_MAX, .n_threads = threads, .isa = (int32_t)isa};
    ls_ctx *c = ls_ctx_create(m, cp, err);
    if (!c) return err ? err->code : LS_E_NOMEM;
    const size_t V = ls_model_hparams(m)->n_vocab;
    ls_status st = LS_OK;
    for (int32_t i = 0; i < n && !st; i += chunk) {
        int32_t k = n - i < chunk ? n - i : chunk;
        st = ls_ctx_eval(c, tokens + i, k, i, out + (size_t)i * V, true, err);
    }
    ls_ctx_free(c);
    return st;
}

static bool same(const float *a, const float *b, int32_t n, size_t V, const char *what, ls_probe_result *r) {
    for (int32_t i = 0; i < n; i++)
        if (memcmp(a + (size_t)i * V, b + (size_t)i * V, V * sizeof(float)) != 0) {
            if (!r->detail[0])
                snprintf(r->detail, sizeof r->detail, "%s: logits of row %d differ", what, i);
            return false;
        }
    return true;
}

ls_status ls_probe_run(const ls_model *m, const int32_t *tokens, int32_t n, int n_threads, ls_isa isa,
                       ls_probe_result *out, ls_err *err) {
    memset(out, 0, sizeof *out);
    double t0 = ls_now_ms();
    if (n > PROBE_MAX) n = PROBE_MAX;
    if (n < 1) return ls_err_set(err, LS_E_INVALID, "probe needs at least one token");
    out->n_tokens = n;
    const size_t V = ls_model_hparams(m)->n_vocab;
    float *ref = ls_malloc((size_t)n * V * sizeof(float));
    float *alt = ls_malloc((size_t)n * V * sizeof(float));
    ls_status st = LS_OK;
    if (!ref || !alt) {
        st = ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto done;
    }
    if ((st = eval_shaped(m, tokens, n, n, n_threads, isa, ref, err))) goto done;
    out->chunked = true;
    const int32_t chunks[] = {3, 1};
    for (size_t i = 0; i < 2; i++) {
        if ((st = eval_shaped(m, tokens, n, chunks[i], n_threads, isa, alt, err))) goto done;
        out->chunked &= same(ref, alt, n, V, chunks[i] == 1 ? "token by token vs one chunk" : "chunks of 3 vs one chunk", out);
    }
    out->threads = true;
    if (n_threads != 1) {
        if ((st = eval_shaped(m, tokens, n, n, 1, isa, alt, err))) goto done;
        out->threads = same(ref, alt, n, V, "1 thread vs live thread count", out);
    }
    out->isa = true;
    if (isa != LS_ISA_SCALAR) {
        /* The scalar reference is slow (it is the definition, not a fast path), so
         * this axis checks the first PROBE_SCALAR rows only; a row's bits do not
         * depend on the rows after it (the chunked axis above checks that). */
        int32_t ns = n < PROBE_SCALAR ? n : PROBE_SCALAR;
        if ((st = eval_shaped(m, tokens, ns, ns, n_threads, LS_ISA_SCALAR, alt, err))) goto done;
        out->isa = same(ref, alt, ns, V, "scalar vs live ISA", out);
    }
    out->ok = out->chunked && out->threads && out->isa;
done:
    free(ref);
    free(alt);
    out->ms = ls_now_ms() - t0;
    return st;
}
