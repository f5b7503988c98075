#include "engine/generate.h"
#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double ls_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

ls_status ls_check_prompt_room(int32_t n_prompt, int32_t n_ctx, ls_err *err) {
    if (n_prompt <= 0) return ls_err_set(err, LS_E_INVALID, "the prompt is empty (0 tokens)");
    if (n_prompt >= n_ctx)
        return ls_err_set(err, LS_E_RANGE,
                          "the prompt is %d tokens but the context holds %d (needs room for one more); "
                          "shorten it or raise --ctx-size",
                          n_prompt, n_ctx);
    return LS_OK;
}

const char *ls_finish_name(ls_finish f) {
    switch (f) {
    case LS_FINISH_STOP: return "stop";
    case LS_FINISH_LENGTH: return "length";
    case LS_FINISH_CANCELLED: return "cancelled";
    case LS_FINISH_ERROR: return "error";
    }
    return "?";
}

void ls_gen_result_free(ls_gen_result *r) {
    if (!r) return;
    free(r->tokens);
    free(r->text);
    memset(r, 0, sizeof *r);
}

/* Appends to a growing text buffer (amortised doubling; not on the per-token
 * forward path, which never allocates). */
static ls_status text_append(ls_gen_result *r, size_t *cap, const char *s, size_t n, ls_err *err) {
    if (r->text_len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < r->text_len + n + 1) nc *= 2;
        char *t = ls_realloc(r->text, nc);
        if (!t) return ls_err_set(err, LS_E_NOMEM, "out of memory");
        r->text = t;
        *cap = nc;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return LS_OK;
}

ls_status ls_generate(ls_ctx *c, const int32_t *prompt, int32_t n_prompt, const ls_gen_params *gp,
                      ls_gen_result *res, ls_err *err) {
    memset(res, 0, sizeof *res);
    ls_status st = ls_sampler_params_check(&gp->sampler, err);
    if (st) return st;
    const int32_t n_ctx = ls_ctx_n_ctx(c);
    if ((st = ls_check_prompt_room(n_prompt, n_ctx, err))) return st;
    const ls_tokenizer *tok = ls_ctx_tokenizer(c);
    const int32_t n_vocab = (int32_t)ls_tokenizer_n_vocab(tok);
    int32_t max_new = n_ctx - n_prompt;
    if (gp->n_predict >= 0 && gp->n_predict < max_new) max_new = gp->n_predict;

    float *logits = ls_malloc((size_t)n_vocab * sizeof *logits);
    void *scratch = ls_malloc(ls_sampler_scratch_bytes(n_vocab));
    res->tokens = ls_malloc(((size_t)max_new + 1) * sizeof *res->tokens);
    size_t text_cap = 0;
    if (!logits || !scratch || !res->tokens) {
        st = ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto done;
    }
    if ((st = text_append(res, &text_cap, "", 0, err))) goto done;

    double t0 = ls_now_ms();
    if ((st = ls_ctx_eval(c, prompt, n_prompt, 0, logits, false, err))) goto done;
    double t1 = ls_now_ms();
    res->prefill_ms = t1 - t0;
    res->finish = LS_FINISH_LENGTH;

    ls_detok_stream ds;
    ls_detok_init(&ds);
    char piece[256];
    int32_t pos = n_prompt;
    for (int32_t i = 0; i < max_new; i++) {
        int32_t id = ls_sample(&gp->sampler, logits, n_vocab, (uint64_t)pos, scratch);
        if (ls_tokenizer_is_eog(tok, id)) {
            res->finish = LS_FINISH_STOP;
            break;
        }
        res->tokens[res->n_gen++] = id;
        size_t n = ls_detok_push(&ds, tok, id, piece, sizeof piece);
        if ((st = text_append(res, &text_cap, piece, n, err))) goto done;
        if (gp->on_text) gp->on_text(gp->ud, id, piece, n);
        if (i + 1 == max_new) break; /* no forward needed for a token nobody samples from */
        if ((st = ls_ctx_eval(c, &id, 1, pos, logits, false, err))) goto done;
        res->n_decode++;
        pos++;
    }
    size_t n = ls_detok_flush(&ds, piece, sizeof piece);
    if (n) {
        if ((st = text_append(res, &text_cap, piece, n, err))) goto done;
        if (gp->on_text) gp->on_text(gp->ud, -1, piece, n);
    }
    res->decode_ms = ls_now_ms() - t1;
done:
    free(logits);
    free(scratch);
    if (st) ls_gen_result_free(res);
    return st;
}
