/* generate.h - single-sequence generation: prefill, then sample and decode one
 * token at a time until EOS/EOT, a stop, n_predict tokens, or the context end. */
#ifndef LS_ENGINE_GENERATE_H
#define LS_ENGINE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "sample/sample.h"

typedef struct {
    ls_sampler_params sampler;
    int32_t n_predict;  /* max new tokens; < 0 = until the context is full */
    /* Called for each generated token with its newly complete UTF-8 text
     * (possibly empty while a multi-byte character is split across tokens). */
    void (*on_text)(void *ud, int32_t token, const char *text, size_t len);
    void *ud;
} ls_gen_params;

/* LS_FINISH_ERROR: the engine could not go on with this request (out of memory while
 * it ran); the text so far is intact, the other requests are unaffected. */
typedef enum { LS_FINISH_STOP = 0, LS_FINISH_LENGTH = 1, LS_FINISH_CANCELLED = 2, LS_FINISH_ERROR = 3 } ls_finish;

typedef struct {
    int32_t *tokens;    /* generated ids (malloc'd, caller frees); EOS/EOT not included */
    int32_t n_gen;
    char *text;         /* generated text, NUL-terminated (malloc'd, caller frees) */
    size_t text_len;
    double prefill_ms;
    int32_t n_decode;   /* forward passes after the prefill (n_gen - 1 when the length ends it) */
    double decode_ms;   /* from the first sampled token to the last forward */
    ls_finish finish;
} ls_gen_result;

/* Runs the prompt at position 0 of c.  The prompt must leave room for at least one
 * new token (else LS_E_RANGE naming both sizes). */
ls_status ls_generate(ls_ctx *c, const int32_t *prompt, int32_t n_prompt, const ls_gen_params *gp,
                      ls_gen_result *res, ls_err *err);
void ls_gen_result_free(ls_gen_result *r);
const char *ls_finish_name(ls_finish f);

double ls_now_ms(void);

/* LS_OK when a prompt of n_prompt tokens leaves room for one new token in n_ctx
 * positions; else the error every entry point reports (empty, or too long). */
ls_status ls_check_prompt_room(int32_t n_prompt, int32_t n_ctx, ls_err *err);

#endif
