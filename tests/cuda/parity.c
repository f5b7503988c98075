/* parity.c - see parity.h. */
#include "parity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

size_t parity_diff_bytes(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    return d;
}

void parity_refs_free(parity_refs *r) {
    for (int q = 0; r->tok && q < r->nseq; q++) {
        free(r->tok[q]);
        free(r->ref[q]);
    }
    free(r->tok);
    free(r->ref);
    free(r->len);
    memset(r, 0, sizeof *r);
}

bool parity_refs_make(parity_refs *r, ls_model *m, int nseq, int nctx, int min_len, int max_len, int n_threads,
                      uint64_t seed, ls_err *err) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->V = (int)ls_model_hparams(m)->n_vocab;
    r->nseq = nseq;
    r->nctx = nctx;
    r->len = calloc((size_t)nseq, sizeof *r->len);
    r->tok = calloc((size_t)nseq, sizeof *r->tok);
    r->ref = calloc((size_t)nseq, sizeof *r->ref);
    ls_fwd *cf = ls_fwd_create(m, (ls_fwd_params){.n_rows = 64, .n_ctx = nctx, .n_threads = n_threads, .isa = -1}, err);
    if (!cf) return false;
    const int bps = nctx / LS_KV_BLOCK;
    ls_kv_store *kv = ls_kv_store_create(m, bps, err);
    if (!kv) {
        ls_fwd_free(cf);
        return false;
    }
    int32_t *table = malloc(sizeof(int32_t) * (size_t)bps);
    for (int i = 0; i < bps; i++) table[i] = i;
    const int32_t *tables[1] = {table};
    uint64_t s = seed;
    bool ok = true;
    for (int q = 0; q < nseq && ok; q++) {
        r->len[q] = q == 0 ? max_len : min_len + (int)(synth_next(&s) % (uint64_t)(max_len - min_len + 1));
        r->tok[q] = malloc((size_t)r->len[q] * 4);
        r->ref[q] = malloc((size_t)r->len[q] * r->V * 4);
        ok = r->tok[q] && r->ref[q];
        for (int i = 0; ok && i < r->len[q]; i++) r->tok[q][i] = (int32_t)(synth_next(&s) % (uint64_t)r->V);
        for (int p0 = 0; ok && p0 < r->len[q]; p0 += 64) {
            const int n = r->len[q] - p0 < 64 ? r->len[q] - p0 : 64;
            int32_t pos[64], seq[64], lr[64];
            for (int i = 0; i < n; i++) {
                pos[i] = p0 + i;
                seq[i] = 0;
                lr[i] = i;
            }
            ls_batch b = {.n = n, .token = r->tok[q] + p0, .pos = pos, .seq = seq, .tables = tables, .logit_row = lr};
            ls_fwd_run(cf, kv, &b, r->ref[q] + (size_t)p0 * r->V);
        }
    }
    free(table);
    ls_kv_store_free(kv);
    ls_fwd_free(cf);
    if (!ok) ls_err_set(err, LS_E_NOMEM, "out of memory for references");
    return ok;
}

size_t parity_run_mix(const parity_refs *r, ls_cuda_fwd *g, ls_cuda_kv *kv, uint64_t seed, double fast_frac, int bmax,
                      size_t *cmp, size_t *rows_out, double *fast_err) {
    return parity_run_mix_runs(r, g, kv, seed, fast_frac, 0, bmax, cmp, rows_out, fast_err);
}

size_t parity_run_mix_runs(const parity_refs *r, ls_cuda_fwd *g, ls_cuda_kv *kv, uint64_t seed, double fast_frac,
                           int fast_run, int bmax, size_t *cmp, size_t *rows_out, double *fast_err) {
    const int bps = r->nctx / LS_KV_BLOCK, nseq = r->nseq, V = r->V;
    if (fast_run > 200) fast_run = 200; /* the reordering below holds a run of up to 232 rows */
    int32_t **tables = malloc(sizeof(int32_t *) * (size_t)nseq);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)nseq * bps);
    int *cur = calloc((size_t)nseq, sizeof(int)), *order = malloc(sizeof(int) * (size_t)nseq);
    uint64_t s = seed;
    for (int i = 0; i < nseq * bps; i++) perm[i] = i;
    for (int i = nseq * bps - 1; i > 0; i--) { /* shuffled blocks */
        int j = (int)(synth_next(&s) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int q = 0; q < nseq; q++) tables[q] = perm + (size_t)q * bps;
    /* the parity need is a request's, so a property of the whole sequence: a sequence on the
     * fast family writes inexact K/V, which its own later rows read */
    uint8_t *seq_fast = calloc((size_t)nseq, 1);
    for (int q = 1; q < nseq; q++) seq_fast[q] = synth_unif(&s) < fast_frac;
    float *logits = malloc((size_t)bmax * V * 4);
    int32_t *tok = malloc(4 * (size_t)bmax), *pos = malloc(4 * (size_t)bmax), *seq = malloc(4 * (size_t)bmax),
            *lr = malloc(4 * (size_t)bmax);
    uint8_t *need = malloc((size_t)bmax);
    size_t diff = 0;
    double fe_num = 0, fe_den = 0;
    *cmp = 0;
    *rows_out = 0;
    for (;;) {
        int na = 0;
        for (int q = 0; q < nseq; q++)
            if (cur[q] < r->len[q]) order[na++] = q;
        if (!na) break;
        for (int i = na - 1; i > 0; i--) {
            int j = (int)(synth_next(&s) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        int n = 0, nf = 0;
        if (fast_run > 0) { /* the fast sequences' rows first, as one run */
            const int want = fast_run + (int)(synth_next(&s) % 33);
            for (int k = 0; k < na && n < want; k++) {
                const int q = order[k];
                if (!seq_fast[q]) continue;
                int c = r->len[q] - cur[q];
                if (c > want - n) c = want - n;
                for (int i = 0; i < c; i++, n++) {
                    tok[n] = r->tok[q][cur[q] + i];
                    pos[n] = cur[q] + i;
                    seq[n] = q;
                    lr[n] = n;
                    need[n] = 0;
                }
                cur[q] += c;
            }
            nf = n;
        }
        const int room = bmax - n;
        const int cap = n + (room > 0 ? 1 + (int)(synth_next(&s) % (uint64_t)room) : 0);
        for (int k = 0; k < na && n < cap; k++) {
            const int q = order[k];
            if (fast_run > 0 && seq_fast[q]) continue;
            const uint64_t u = synth_next(&s) % 10;
            int c = u < 5 ? 1 : u < 8 ? 2 + (int)(synth_next(&s) % 8) : 1 + (int)(synth_next(&s) % 33);
            if (c > r->len[q] - cur[q]) c = r->len[q] - cur[q];
            if (c > cap - n) c = cap - n;
            const bool fast = seq_fast[q];
            for (int i = 0; i < c; i++, n++) {
                tok[n] = r->tok[q][cur[q] + i];
                pos[n] = cur[q] + i;
                seq[n] = q;
                lr[n] = n;
                need[n] = fast ? 0 : 1;
            }
            cur[q] += c;
        }
        if (nf > 0 && n > nf && (synth_next(&s) & 1)) { /* the fast run after the others' rows */
            int32_t tt[256], tp[256], ts[256];
            uint8_t tn[256];
            const int ne = n - nf;
            memcpy(tt, tok, 4 * (size_t)nf), memcpy(tp, pos, 4 * (size_t)nf), memcpy(ts, seq, 4 * (size_t)nf);
            memcpy(tn, need, (size_t)nf);
            memmove(tok, tok + nf, 4 * (size_t)ne), memmove(pos, pos + nf, 4 * (size_t)ne);
            memmove(seq, seq + nf, 4 * (size_t)ne), memmove(need, need + nf, (size_t)ne);
            memcpy(tok + ne, tt, 4 * (size_t)nf), memcpy(pos + ne, tp, 4 * (size_t)nf), memcpy(seq + ne, ts, 4 * (size_t)nf);
            memcpy(need + ne, tn, (size_t)nf);
        }
        if (n == 0) continue; /* only exact rows left and a cap of 0: draw again */
        ls_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .tables = (const int32_t *const *)tables,
                      .logit_row = lr, .need_parity = need};
        ls_err err;
        if (ls_cuda_fwd_run(g, kv, &b, logits, &err)) {
            printf("FAIL gpu run: %s\n", err.msg);
            diff += 1;
            break;
        }
        for (int i = 0; i < n; i++) {
            const float *ref = r->ref[seq[i]] + (size_t)pos[i] * V, *got = logits + (size_t)i * V;
            if (need[i]) {
                diff += parity_diff_bytes(ref, got, (size_t)V * 4);
                *cmp += (size_t)V * 4;
            } else {
                for (int v = 0; v < V; v++) {
                    fe_num += (double)(got[v] - ref[v]) * (got[v] - ref[v]);
                    fe_den += (double)ref[v] * ref[v];
                }
            }
        }
        *rows_out += (size_t)n;
    }
    if (fast_err) *fast_err = fe_den > 0 ? sqrt(fe_num / fe_den) : 0.0;
    free(logits);
    free(perm);
    free(tables);
    free(cur);
    free(order);
    free(tok);
    free(pos);
    free(seq);
    free(lr);
    free(need);
    free(seq_fast);
    return diff;
}
