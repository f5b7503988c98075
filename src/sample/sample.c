/* sample.c - temperature, top-k, top-p and a draw keyed only by (seed, pos).
 *
 * The recipe (also in docs/numerics.md):
 *   1. temperature 0: argmax (lowest id wins ties).
 *   2. candidates sorted by logit descending, id ascending on ties; top-k keeps
 *      the first k.
 *   3. p_i = ls_expf((l_i - l_max) / T), summed sequentially in candidate order.
 *   4. top-p keeps the shortest prefix whose cumulative mass >= top_p * total.
 *   5. u = ls_rand_uniform(seed, pos, 0) in [0,1); the token is the first candidate
 *      whose cumulative mass exceeds u * kept_total.
 * Only (seed, pos) feed the draw, so speculative verification of position pos
 * draws exactly what plain decoding draws there. */
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

ls_status ls_sampler_params_check(const ls_sampler_params *p, ls_err *err) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return ls_err_set(err, LS_E_INVALID, "temperature must be a finite number >= 0 (got %g)",
                          (double)p->temperature);
    if (p->top_k < 0) return ls_err_set(err, LS_E_INVALID, "top-k must be >= 0 (got %d)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return ls_err_set(err, LS_E_INVALID, "top-p must be in (0, 1] (got %g)", (double)p->top_p);
    return LS_OK;
}

/* splitmix64 finalizer: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ls_rand_uniform(uint64_t seed, uint64_t pos, uint64_t stream) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (pos * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
    h = mix64(h ^ (stream * 0xa0761d6478bd642full + 0xe7037ed1a0b428dbull));
    return (double)(h >> 11) * 0x1.0p-53; /* 53 random bits: exact in a double, < 1 */
}

typedef struct {
    float logit;
    int32_t id;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

size_t ls_sampler_scratch_bytes(int32_t n_vocab) {
    return (size_t)n_vocab * (2 * sizeof(cand) + sizeof(float) + 2 * sizeof(uint32_t));
}

/* The candidate order of cand_cmp (logit descending, then id ascending) by a stable
 * LSD radix sort: 4 passes of 8 bits over a key that orders floats like `<`
 * (-0 counts as +0, as the comparator sees them).  The input arrives in id order, so
 * stability gives the id tie-break.  Same result as qsort with cand_cmp, in O(n). */
static void sort_all(cand *c, int32_t n, void *tmp_space) {
    cand *tmp = tmp_space;
    uint32_t *key = (uint32_t *)(tmp + n), *key2 = key + n;
    for (int32_t i = 0; i < n; i++) {
        float f = c[i].logit == 0.0f ? 0.0f : c[i].logit;
        uint32_t b;
        memcpy(&b, &f, 4);
        b = (b & 0x80000000u) ? ~b : b | 0x80000000u; /* ascending float order */
        key[i] = ~b;                                   /* descending */
    }
    cand *src = c, *dst = tmp;
    uint32_t *ks = key, *kd = key2;
    for (int shift = 0; shift < 32; shift += 8) {
        int32_t count[257] = {0};
        for (int32_t i = 0; i < n; i++) count[((ks[i] >> shift) & 0xFF) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int32_t i = 0; i < n; i++) {
            int32_t at = count[(ks[i] >> shift) & 0xFF]++;
            dst[at] = src[i];
            kd[at] = ks[i];
        }
        cand *t = src;
        src = dst;
        dst = t;
        uint32_t *tk = ks;
        ks = kd;
        kd = tk;
    }
    /* 4 passes: the sorted data is back in c */
}

/* The first index of the largest logit (a NaN never wins; a NaN logit 0 does, as the
 * loop `if (l[i] > l[best]) best = i` has it).  Two passes the compiler vectorizes:
 * the maximum v by 16 lane-wise maxima (the same `x > m ? x : m` step, every lane
 * seeded with l[0]), then the first i with l[i] == v (-0 == +0, as `>` sees them). */
static int32_t argmax(const float *logits, int32_t n) {
    if (!(logits[0] == logits[0])) return 0;
    float m[16], v = logits[0];
    for (int j = 0; j < 16; j++) m[j] = v;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
    for (; i < n; i++) v = logits[i] > v ? logits[i] : v;
    for (int j = 0; j < 16; j++) v = m[j] > v ? m[j] : v;
    for (i = 0; i + 16 <= n; i += 16) {
        int hit = 0;
        for (int j = 0; j < 16; j++) hit |= logits[i + j] == v;
        if (hit) break;
    }
    while (!(logits[i] == v)) i++;
    return i;
}

/* Moves the k largest candidates (in cand_cmp order) to the front, sorted. */
static void select_top(cand *c, int32_t n, int32_t k, void *tmp) {
    if (k >= n) {
        sort_all(c, n, tmp);
        return;
    }
    /* Quickselect-free: a bounded insertion into a sorted prefix of size k. */
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
    for (int32_t i = k; i < n; i++) {
        if (cand_cmp(&c[i], &c[k - 1]) >= 0) continue;
        cand x = c[i];
        int32_t j = k - 1;
        while (j > 0 && cand_cmp(&x, &c[j - 1]) < 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

int32_t ls_sample(const ls_sampler_params *p, const float *logits, int32_t n_vocab, uint64_t pos,
                  void *scratch) {
    if (p->temperature == 0.0f) return argmax(logits, n_vocab);
    cand *c = scratch;
    float *prob = (float *)(c + n_vocab);
    void *tmp = prob + n_vocab;
    for (int32_t i = 0; i < n_vocab; i++) c[i] = (cand){logits[i], i};
    int32_t n = n_vocab;
    if (p->top_k > 0 && p->top_k < n) {
        select_top(c, n, p->top_k, tmp);
        n = p->top_k;
    } else {
        select_top(c, n, n, tmp);
    }
    const float lmax = c[0].logit;
    float total = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        prob[i] = ls_expf((c[i].logit - lmax) / p->temperature);
        total += prob[i];
    }
    if (p->top_p < 1.0f) {
        const float target = p->top_p * total;
        float cum = 0.0f;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += prob[i];
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        total = 0.0f;
        for (int32_t i = 0; i < n; i++) total += prob[i];
    }
    const double u = ls_rand_uniform(p->seed, pos, 0) * (double)total;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += (double)prob[i];
        if (cum > u) return c[i].id;
    }
    return c[n - 1].id;
}
