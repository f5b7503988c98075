/* reasoning.c - a reasoning model's think block split out of its reply (--reasoning-format
 * deepseek, the default): a reply that opens with "<think>" has its reasoning up to
 * "</think>" and its content after it (chat: reasoning_content; Responses: a reasoning
 * output item; Messages: a thinking block).  The rule (Qwen 3's template reads an
 * assistant turn back the same way, src/tokenizer/chat.c):
 *
 *   reasoning  the text after the opening "<think>" up to the first "</think>", '\n'
 *              trimmed at both ends; a reply that never closes it is all reasoning;
 *   content    the text after that "</think>", leading '\n' trimmed;
 *   a reply that does not open with "<think>" (its very first bytes) is all content.
 *
 * A stream sends only what more text cannot change (ls_srv_think_split with done
 * false): a possible "<think>" not yet complete, a possible "</think>" not yet
 * complete and '\n's that may yet be trimmed are held back.  Each span given for a text
 * is a prefix of the span given for any longer text, so the streamed pieces concatenate
 * to the finished reply's fields. */
#include <string.h>

#include "server/server_impl.h"

static const char OPEN[] = "<think>", CLOSE[] = "</think>";
#define OPEN_N (sizeof OPEN - 1)
#define CLOSE_N (sizeof CLOSE - 1)

void ls_srv_think_split(const char *t, size_t n, bool done, bool enabled, ls_srv_split *o) {
    *o = (ls_srv_split){0};
    if (!t) n = 0;
    if (!enabled) {
        o->c1 = n;
        return;
    }
    if (n < OPEN_N && !memcmp(t, OPEN, n) && !done) return; /* maybe "<think>": hold it all */
    if (n < OPEN_N || memcmp(t, OPEN, OPEN_N)) {             /* no think block */
        o->c1 = n;
        return;
    }
    o->think = true;
    size_t r0 = OPEN_N;
    const char *e = memmem(t + OPEN_N, n - OPEN_N, CLOSE, CLOSE_N);
    size_t stop = e ? (size_t)(e - t) : n; /* where the reasoning may end */
    if (!e && !done) { /* a partial "</think>" at the end is held back */
        for (size_t k = CLOSE_N - 1; k > 0; k--)
            if (n - OPEN_N >= k && !memcmp(t + n - k, CLOSE, k)) {
                stop = n - k;
                break;
            }
    }
    while (r0 < stop && t[r0] == '\n') r0++;
    size_t r1 = stop;
    while (r1 > r0 && t[r1 - 1] == '\n') r1--; /* trailing '\n's: trimmed, or held until more follows */
    o->r0 = r0;
    o->r1 = r1;
    if (!e) { /* still thinking (or never closed): no content */
        o->c0 = o->c1 = n;
        return;
    }
    size_t c0 = (size_t)(e - t) + CLOSE_N;
    while (c0 < n && t[c0] == '\n') c0++;
    o->c0 = c0;
    o->c1 = n;
}
