/* sample.c - temperature, top-k, top-p and a draw keyed only by (seed, pos).
 *
 * The recipe (also in docs/numerics.md):
 *   0. logit modifiers, each in float, in this order, on a copy of the logits:
 *      a. logit_bias: l[id] += bias, in the order given;
 *      b. repeat_penalty r over the distinct tokens of the last repeat_last_n of the
 *         sequence (prompt included): l = l <= 0 ? l * r : l / r;
 *      c. frequency f / presence q over the generated tokens, c = a token's count:
 *         l -= (float)c * f + q.
 *   1. temperature 0: argmax (lowest id wins ties).
 *   2. candidates sorted by logit descending, id ascending on ties; top-k keeps
 *      the first k.
 *   3. p_i = ls_expf((l_i - l_max) / T), summed sequentially in candidate order.
 *   4. top-p keeps the shortest prefix whose cumulative mass >= top_p * total.
 *   4b. min-p keeps the leading candidates with p_i >= min_p * p_0 (p_0 the largest).
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
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return ls_err_set(err, LS_E_INVALID, "min-p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->repeat_penalty >= 0.0f) || !isfinite(p->repeat_penalty))
        return ls_err_set(err, LS_E_INVALID, "repeat penalty must be a finite number >= 0 (got %g)",
                          (double)p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return ls_err_set(err, LS_E_INVALID, "repeat last-n must be >= -1 (got %d)", p->repeat_last_n);
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return ls_err_set(err, LS_E_INVALID, "frequency and presence penalties must be finite");
    if (p->n_logit_bias < 0 || (p->n_logit_bias && !p->logit_bias))
        return ls_err_set(err, LS_E_INVALID, "bad logit bias list");
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (!isfinite(p->logit_bias[i].bias))
            return ls_err_set(err, LS_E_INVALID, "logit bias for token %d is not finite", p->logit_bias[i].id);
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
    /* cands + radix temp, probs, 2 keys; the modified logits and the token counts */
    return (size_t)n_vocab * (2 * sizeof(cand) + sizeof(float) + 2 * sizeof(uint32_t) + sizeof(float) +
                              sizeof(int32_t));
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

bool ls_sampler_modifies(const ls_sampler_params *p) {
    return p->n_logit_bias > 0 || (p->repeat_penalty != 0.0f && p->repeat_penalty != 1.0f && p->repeat_last_n != 0) ||
           p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
}

/* Step 0 of the recipe into mod[] (cnt[]: n_vocab scratch ints, any contents). */
static void modify(const ls_sampler_params *p, const float *logits, int32_t V, const int32_t *toks, int32_t n_toks,
                   int32_t n_prompt, float *mod, int32_t *cnt) {
    memcpy(mod, logits, (size_t)V * sizeof *mod);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].id;
        if (id >= 0 && id < V) mod[id] += p->logit_bias[i].bias;
    }
    if (!toks) return;
    const float r = p->repeat_penalty;
    if (r != 0.0f && r != 1.0f && p->repeat_last_n != 0) {
        int32_t from = p->repeat_last_n < 0 || p->repeat_last_n > n_toks ? 0 : n_toks - p->repeat_last_n;
        for (int32_t i = from; i < n_toks; i++) cnt[toks[i]] = 0;
        for (int32_t i = from; i < n_toks; i++) {
            int32_t t = toks[i];
            if (cnt[t]) continue;
            cnt[t] = 1;
            mod[t] = mod[t] <= 0.0f ? mod[t] * r : mod[t] / r;
        }
    }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        if (n_prompt < 0) n_prompt = 0;
        for (int32_t i = n_prompt; i < n_toks; i++) cnt[toks[i]] = 0;
        for (int32_t i = n_prompt; i < n_toks; i++) cnt[toks[i]]++;
        for (int32_t i = n_prompt; i < n_toks; i++) {
            int32_t t = toks[i];
            if (!cnt[t]) continue;
            mod[t] -= (float)cnt[t] * p->frequency_penalty + p->presence_penalty;
            cnt[t] = 0;
        }
    }
}

static float *mod_buf(void *scratch, int32_t n_vocab) {
    return (float *)((char *)scratch + (size_t)n_vocab * (2 * sizeof(cand) + sizeof(float) + 2 * sizeof(uint32_t)));
}

static int32_t sample_core(const ls_sampler_params *p, const float *logits, int32_t n_vocab, uint64_t pos,
                           void *scratch, const uint32_t *mask);

int32_t ls_sample(const ls_sampler_params *p, const float *logits, int32_t n_vocab, uint64_t pos,
                  void *scratch) {
    if (ls_sampler_modifies(p)) { /* no history: of the modifiers only the bias acts */
        float *mod = mod_buf(scratch, n_vocab);
        modify(p, logits, n_vocab, NULL, 0, 0, mod, (int32_t *)(mod + n_vocab));
        logits = mod;
    }
    return sample_core(p, logits, n_vocab, pos, scratch, NULL);
}

int32_t ls_sample_seq(const ls_sampler_params *p, const float *logits, int32_t n_vocab, const int32_t *toks,
                      int32_t n_toks, int32_t n_prompt, void *scratch) {
    if (ls_sampler_modifies(p)) {
        float *mod = mod_buf(scratch, n_vocab);
        modify(p, logits, n_vocab, toks, n_toks, n_prompt, mod, (int32_t *)(mod + n_vocab));
        logits = mod;
    }
    return sample_core(p, logits, n_vocab, (uint64_t)n_toks, scratch, NULL);
}

int32_t ls_sample_seq_masked(const ls_sampler_params *p, const float *logits, int32_t n_vocab, const int32_t *toks,
                             int32_t n_toks, int32_t n_prompt, const uint32_t *mask, void *scratch) {
    if (!mask) return ls_sample_seq(p, logits, n_vocab, toks, n_toks, n_prompt, scratch);
    if (ls_sampler_modifies(p)) {
        float *mod = mod_buf(scratch, n_vocab);
        modify(p, logits, n_vocab, toks, n_toks, n_prompt, mod, (int32_t *)(mod + n_vocab));
        logits = mod;
    }
    return sample_core(p, logits, n_vocab, (uint64_t)n_toks, scratch, mask);
}

#define MASK_HAS(m, i) (((m)[(i) >> 5] >> ((i) & 31)) & 1u)

/* Steps 1-5 on the (modified) logits; with a mask, over the allowed tokens only (in id
 * order, so every tie-break is the same as over the whole vocabulary). */
static int32_t sample_core(const ls_sampler_params *p, const float *logits, int32_t n_vocab, uint64_t pos,
                           void *scratch, const uint32_t *mask) {
    cand *c = scratch;
    float *prob = (float *)(c + n_vocab);
    void *tmp = prob + n_vocab;
    int32_t n = n_vocab;
    if (mask) {
        n = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            if (MASK_HAS(mask, i)) c[n++] = (cand){logits[i], i};
        if (n == 0) return -1;
        if (p->temperature == 0.0f) { /* argmax's rule over the allowed: the first wins ties, a NaN never
                                       * beats it (nor does a later one) */
            int32_t best = 0;
            for (int32_t i = 1; i < n; i++)
                if (c[i].logit > c[best].logit) best = i;
            return c[best].id;
        }
    } else {
        if (p->temperature == 0.0f) return argmax(logits, n_vocab);
        for (int32_t i = 0; i < n_vocab; i++) c[i] = (cand){logits[i], i};
    }
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
    if (p->min_p > 0.0f) {
        const float floor_p = p->min_p * prob[0];
        int32_t keep = 1;
        while (keep < n && prob[keep] >= floor_p) keep++;
        if (keep < n) {
            n = keep;
            total = 0.0f;
            for (int32_t i = 0; i < n; i++) total += prob[i];
        }
    }
    const double u = ls_rand_uniform(p->seed, pos, 0) * (double)total;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += (double)prob[i];
        if (cum > u) return c[i].id;
    }
    return c[n - 1].id;
}

void ls_sample_logprobs(const float *lg, int32_t V, int32_t token, int32_t n_top, ls_logprobs *e) {
    double mx = lg[0], sum = 0;
    for (int32_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    double lz = mx + log(sum);
    e->token = token;
    e->logprob = (float)(lg[token] - lz);
    if (n_top > LS_LOGPROBS_TOP_MAX) n_top = LS_LOGPROBS_TOP_MAX;
    e->n_top = 0;
    for (int32_t i = 0; i < V && n_top > 0; i++) { /* keep the best n_top, higher logit first, lower id on ties */
        int32_t k = e->n_top;
        if (k == n_top && !(lg[i] > lg[e->top_tok[k - 1]])) continue;
        if (k < n_top) e->n_top++;
        else k--;
        while (k > 0 && lg[i] > lg[e->top_tok[k - 1]]) {
            e->top_tok[k] = e->top_tok[k - 1];
            k--;
        }
        e->top_tok[k] = i;
    }
    for (int32_t k = 0; k < e->n_top; k++) e->top_lp[k] = (float)(lg[e->top_tok[k]] - lz);
}
