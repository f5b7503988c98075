/* spec_probe.c - P1-P3 through the serving forward (see spec_probe.h). */
#include "engine/spec_probe.h"
#include "util/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"

const char *ls_verdict_name(ls_verdict v) {
    return v == LS_VERDICT_EXACT ? "exact" : v == LS_VERDICT_SCOPED ? "scoped" : "declined";
}

#define PREFIX 6
#define OTHER 5 /* rows of the other sequence in the P2 mix */

typedef struct {
    const ls_model *m;
    ls_fwd *f;
    ls_kv_store *kv;
    size_t V;
    int32_t table_a[8], table_b[8]; /* two sequences, identity-free block tables */
    float *ref, *alt, *scratch_logits;
    int32_t pos[80], seq[80], lrow[80], tok[80];
    uint8_t need[80];
} probe_ctx;

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Runs toks[0..n) of sequence A at positions p0.. in one forward, all rows' logits to out. */
static void fwd_a(probe_ctx *c, const int32_t *toks, int32_t n, int32_t p0, float *out) {
    const int32_t *tables[2] = {c->table_a, c->table_b};
    for (int32_t i = 0; i < n; i++) {
        c->tok[i] = toks[i];
        c->pos[i] = p0 + i;
        c->seq[i] = 0;
        c->lrow[i] = i;
        c->need[i] = 1;
    }
    ls_batch b = {n, c->tok, c->pos, c->seq, tables, c->lrow, c->need, NULL, NULL};
    ls_fwd_run(c->f, c->kv, &b, out);
}

static bool same_rows(probe_ctx *c, const float *a, const float *b, int32_t n, const char *what, int w,
                      ls_spec_probe_result *r) {
    for (int32_t i = 0; i < n; i++)
        if (memcmp(a + (size_t)i * c->V, b + (size_t)i * c->V, c->V * sizeof(float))) {
            if (!r->detail[0])
                snprintf(r->detail, sizeof r->detail, "%s (width %d): logits of row %d differ", what, w, i);
            return false;
        }
    return true;
}

/* One pass over all draws with the forward's current families. */
static void probe_pass(probe_ctx *c, int32_t K, int draws, uint64_t seed, ls_spec_probe_result *r) {
    r->block_vs_chain = r->batch_mix = r->chunked_prefill = true;
    const int32_t W = K + 1, n_vocab = (int32_t)c->V;
    uint64_t rs = seed;
    for (int d = 0; d < draws; d++) {
        int32_t toks[PREFIX + 65], other[OTHER + 4];
        for (int32_t i = 0; i < PREFIX + W; i++) toks[i] = 100 + (int32_t)(rng(&rs) % (uint64_t)(n_vocab - 100));
        for (int32_t i = 0; i < OTHER + 3; i++) other[i] = 100 + (int32_t)(rng(&rs) % (uint64_t)(n_vocab - 100));
        /* P3: the prefix and block in one forward vs random chunks */
        int32_t n = PREFIX + W;
        fwd_a(c, toks, n, 0, c->ref);
        for (int32_t i = 0; i < n;) {
            int32_t ch = 1 + (int32_t)(rng(&rs) % 4);
            if (ch > n - i) ch = n - i;
            fwd_a(c, toks + i, ch, i, c->alt + (size_t)i * c->V);
            i += ch;
        }
        r->chunked_prefill &= same_rows(c, c->ref, c->alt, n, "chunked prefill", 0, r);
        /* P1: the chain (one row per forward) after the prefix, then blocks of width 2..W */
        fwd_a(c, toks, PREFIX, 0, c->scratch_logits);
        for (int32_t i = 0; i < W; i++) fwd_a(c, toks + PREFIX + i, 1, PREFIX + i, c->ref + (size_t)i * c->V);
        for (int32_t w = 2; w <= W; w++) {
            fwd_a(c, toks + PREFIX, w, PREFIX, c->alt);
            r->block_vs_chain &= same_rows(c, c->ref, c->alt, w, "block vs chain", w, r);
        }
        /* P2: the width-W block next to sequence B's prefill chunk and decode-like rows
         * that need no parity (they may run another family) */
        const int32_t *tables[2] = {c->table_a, c->table_b};
        int32_t nb = 0;
        for (int32_t i = 0; i < OTHER; i++, nb++) {
            c->tok[nb] = other[i];
            c->pos[nb] = i;
            c->seq[nb] = 1;
            c->lrow[nb] = -1;
            c->need[nb] = 0;
        }
        for (int32_t i = 0; i < W; i++, nb++) {
            c->tok[nb] = toks[PREFIX + i];
            c->pos[nb] = PREFIX + i;
            c->seq[nb] = 0;
            c->lrow[nb] = i;
            c->need[nb] = 1;
        }
        ls_batch b = {nb, c->tok, c->pos, c->seq, tables, c->lrow, c->need, NULL, NULL};
        ls_fwd_run(c->f, c->kv, &b, c->alt);
        r->batch_mix &= same_rows(c, c->ref, c->alt, W, "verify block in a mixed batch", W, r);
    }
}

ls_status ls_spec_probe(const ls_model *m, ls_fwd *f, int32_t draft_max, int draws, uint64_t seed,
                        ls_spec_probe_result *out, ls_err *err) {
    memset(out, 0, sizeof *out);
    double t0 = ls_now_ms();
    if (draft_max < 1 || draft_max > 64) return ls_err_set(err, LS_E_INVALID, "probe draft length %d (1..64)", draft_max);
    if (draws < 3) draws = 3;
    probe_ctx c = {.m = m, .f = f, .V = ls_model_hparams(m)->n_vocab};
    const int32_t W = draft_max + 1;
    if (ls_fwd_n_rows(f) < PREFIX + W || ls_fwd_n_ctx(f) < PREFIX + W + OTHER)
        return ls_err_set(err, LS_E_INVALID, "the probe needs %d rows per forward and %d positions (have %d and %d)",
                          PREFIX + W, PREFIX + W + OTHER, ls_fwd_n_rows(f), ls_fwd_n_ctx(f));
    c.kv = ls_kv_store_create(m, 16, err);
    if (!c.kv) return err->code;
    for (int i = 0; i < 8; i++) { /* scattered, interleaved blocks: paging is part of the path */
        c.table_a[i] = 2 * i + 1;
        c.table_b[i] = 2 * i;
    }
    size_t rows = (size_t)(PREFIX + W + OTHER);
    c.ref = ls_malloc(rows * c.V * sizeof(float));
    c.alt = ls_malloc(rows * c.V * sizeof(float));
    c.scratch_logits = ls_malloc(rows * c.V * sizeof(float));
    ls_status st = LS_OK;
    if (!c.ref || !c.alt || !c.scratch_logits) {
        st = ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto done;
    }
    out->draws = draws;
    out->fam_free = ls_fwd_family(f);
    out->fam_parity_before = out->fam_parity_after = ls_fwd_parity_family(f);
    probe_pass(&c, draft_max, draws, seed, out);
    bool ok = out->block_vs_chain && out->batch_mix && out->chunked_prefill;
    const ls_mm_family *fp = ls_fwd_parity_family(f);
    if (ok) {
        out->verdict = LS_VERDICT_EXACT;
    } else if (fp && !fp->canonical) { /* withdraw it for rows that need parity, probe again */
        ls_fwd_set_parity_family(f, &ls_mm_wide);
        out->fam_parity_after = &ls_mm_wide;
        probe_pass(&c, draft_max, draws, seed + 1, out);
        ok = out->block_vs_chain && out->batch_mix && out->chunked_prefill;
        out->verdict = ok ? LS_VERDICT_SCOPED : LS_VERDICT_DECLINED;
    } else {
        out->verdict = LS_VERDICT_DECLINED;
    }
done:
    free(c.ref);
    free(c.alt);
    free(c.scratch_logits);
    ls_kv_store_free(c.kv);
    out->ms = ls_now_ms() - t0;
    return st;
}

/* ---- memoization ------------------------------------------------------------- */
#include <cjson/cJSON.h>
#include <errno.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

static bool sha256_file(const char *path, char hex[65]) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], md[32];
    unsigned int n = 0;
    bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    size_t r;
    while (ok && (r = fread(buf, 1, sizeof buf, fp)) > 0) ok = EVP_DigestUpdate(ctx, buf, r);
    ok = ok && !ferror(fp) && EVP_DigestFinal_ex(ctx, md, &n) && n == 32;
    EVP_MD_CTX_free(ctx);
    fclose(fp);
    for (unsigned i = 0; ok && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return ok;
}

static void sha256_str(const char *s, char hex[65]) {
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

const char *ls_probe_memo_dir(void) {
    static char buf[4096];
    const char *d = getenv("LOCKSTEP_CACHE");
    if (d && *d) return d;
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x) snprintf(buf, sizeof buf, "%s/lockstep", x);
    else if (h && *h) snprintf(buf, sizeof buf, "%s/.cache/lockstep", h);
    else return NULL;
    return buf;
}

static void mkdirs(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

ls_status ls_spec_probe_cached(const ls_model *m, const char *model_path, const char *memo_dir, const char *config,
                               ls_fwd *f, int32_t draft_max, int draws, ls_spec_probe_result *out, bool *from_memo,
                               ls_err *err) {
    *from_memo = false;
    const double t0 = ls_now_ms();
    char path[4200] = "";
    char msha[65], esha[65], key[65], desc[1024];
    if (memo_dir && model_path && sha256_file(model_path, msha) && sha256_file("/proc/self/exe", esha)) {
        const ls_mm_family *ff = ls_fwd_family(f), *fp = ls_fwd_parity_family(f);
        snprintf(desc, sizeof desc, "model=%s exe=%s isa=%s threads=%d fam=%s fam_parity=%s K=%d draws=%d %s", msha,
                 esha, ls_isa_name(ls_fwd_isa(f)), ls_fwd_n_threads(f), ff ? ff->name : "?", fp ? fp->name : "?",
                 draft_max, draws < 3 ? 3 : draws, config ? config : "");
        sha256_str(desc, key);
        snprintf(path, sizeof path, "%s/probe-%.32s.json", memo_dir, key);
        FILE *fh = fopen(path, "rb");
        if (fh) {
            char text[4096];
            size_t n = fread(text, 1, sizeof text - 1, fh);
            fclose(fh);
            text[n] = 0;
            cJSON *j = cJSON_Parse(text);
            const cJSON *v = cJSON_GetObjectItem(j, "verdict"), *fa = cJSON_GetObjectItem(j, "fam_parity_after");
            const ls_mm_family *faf = !cJSON_IsString(fa)                              ? NULL
                                      : !strcmp(fa->valuestring, fp->name)              ? fp
                                      : !strcmp(fa->valuestring, ls_mm_wide.name)       ? &ls_mm_wide
                                                                                        : NULL;
            const cJSON *d = cJSON_GetObjectItem(j, "desc");
            if (cJSON_IsNumber(v) && faf && cJSON_IsString(d) && !strcmp(d->valuestring, desc)) {
                memset(out, 0, sizeof *out);
                out->verdict = (ls_verdict)v->valueint;
                out->fam_parity_before = ls_fwd_parity_family(f);
                out->fam_parity_after = faf;
                out->fam_free = ls_fwd_family(f);
                out->block_vs_chain = cJSON_IsTrue(cJSON_GetObjectItem(j, "block_vs_chain"));
                out->batch_mix = cJSON_IsTrue(cJSON_GetObjectItem(j, "batch_mix"));
                out->chunked_prefill = cJSON_IsTrue(cJSON_GetObjectItem(j, "chunked_prefill"));
                out->draws = cJSON_GetObjectItem(j, "draws") ? cJSON_GetObjectItem(j, "draws")->valueint : 0;
                const cJSON *det = cJSON_GetObjectItem(j, "detail");
                if (cJSON_IsString(det)) snprintf(out->detail, sizeof out->detail, "%s", det->valuestring);
                ls_fwd_set_parity_family(f, out->fam_parity_after);
                *from_memo = true;
                out->ms = ls_now_ms() - t0; /* the model and binary hashes, mostly */
                cJSON_Delete(j);
                return LS_OK;
            }
            cJSON_Delete(j); /* stale or foreign: probe again and overwrite */
        }
    }
    ls_status st = ls_spec_probe(m, f, draft_max, draws, 0x5EEDull, out, err);
    if (st || !path[0]) return st;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "desc", desc);
    cJSON_AddNumberToObject(j, "verdict", out->verdict);
    cJSON_AddStringToObject(j, "fam_parity_after", out->fam_parity_after->name);
    cJSON_AddBoolToObject(j, "block_vs_chain", out->block_vs_chain);
    cJSON_AddBoolToObject(j, "batch_mix", out->batch_mix);
    cJSON_AddBoolToObject(j, "chunked_prefill", out->chunked_prefill);
    cJSON_AddNumberToObject(j, "draws", out->draws);
    cJSON_AddStringToObject(j, "detail", out->detail);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    mkdirs(memo_dir);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *fh = text ? fopen(tmp, "wb") : NULL;
    if (fh) { /* write-then-rename: a reader never sees half a file */
        bool ok = fputs(text, fh) >= 0;
        ok = fclose(fh) == 0 && ok;
        if (!ok || rename(tmp, path) != 0) remove(tmp);
    }
    free(text);
    return LS_OK; /* a memo that cannot be written is only a slower next start */
}
