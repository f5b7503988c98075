/* cuda_fwd.cu - the forward pass on the GPU: weight upload (once per model, shared),
 * the paged KV store, the per-call plan (rows in runs of one family), CUDA graphs for
 * decode-sized batches, and the fast family through cuBLAS (loaded at run time).
 *
 * The step sequence is the model's plan (src/model/plan.h, read through cuda_src.h), the
 * one forward.c executes: every optional step of a layer (biases, q/k norms, the RoPE
 * table, the window, post-norms, the activation) runs when its plan field says so, for
 * every family alike (docs/cuda.md). */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

extern "C" {
#include "backend/cuda/cuda_fwd.h"
#include "backend/cuda/cuda_src.h"
#include "util/err.h"
}
#include "backend/cuda/cuda_internal.h"


/* ---- errors ------------------------------------------------------------------- */
static ls_status cuda_fail(ls_err *err, cudaError_t e, const char *what, int line) {
    return ls_err_set(err, e == cudaErrorMemoryAllocation ? LS_E_NOMEM : LS_E_IO, "CUDA %s (%s) in %s (cuda_fwd.cu:%d)",
                      cudaGetErrorName(e), cudaGetErrorString(e), what, line);
}
#define CK(x)                                                         \
    do {                                                              \
        cudaError_t e_ = (x);                                         \
        if (e_ != cudaSuccess) return cuda_fail(err, e_, #x, __LINE__); \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

bool ls_cuda_available(char *name, size_t name_cap, ls_err *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        ls_err_set(err, LS_E_UNSUPPORTED, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return false;
    }
    int dev = 0;
    cudaDeviceProp prop;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        ls_err_set(err, LS_E_UNSUPPORTED, "CUDA device query failed (%s)", cudaGetErrorString(e));
        return false;
    }
    if (name && name_cap) snprintf(name, name_cap, "%s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
                                   prop.multiProcessorCount);
    if (prop.major < 8) {
        ls_err_set(err, LS_E_UNSUPPORTED, "CUDA device %s has compute capability %d.%d (8.0 or newer needed)", prop.name,
                   prop.major, prop.minor);
        return false;
    }
    return true;
}

/* ---- device matrices -------------------------------------------------------------- */
struct DMat {
    lsc_mat m;
    uint64_t bytes; /* device bytes (what one full pass over it reads) */
};

static void dmat_free(DMat *d) {
    cudaFree((void *)d->m.codes);
    cudaFree((void *)d->m.hi);
    cudaFree((void *)d->m.sc);
    cudaFree((void *)d->m.sb);
    cudaFree((void *)d->m.f);
    memset(d, 0, sizeof *d);
}

static ls_status dmat_alloc(DMat *d, int type, int64_t N, int64_t K, ls_err *err) {
    memset(d, 0, sizeof *d);
    if (!lsc_supported(type))
        return ls_err_set(err, LS_E_UNSUPPORTED, "the CUDA backend has no matmul for ggml type %d", type);
    if (N > (1 << 30) || K > (1 << 30)) return ls_err_set(err, LS_E_UNSUPPORTED, "matrix %lld x %lld too large", (long long)N, (long long)K);
    d->m.type = type;
    d->m.N = (int)N;
    d->m.K = (int)K;
    if (lsc_is_float(type)) {
        if (K % 4) return ls_err_set(err, LS_E_UNSUPPORTED, "float matrix with K = %lld (the GPU needs a multiple of 4)", (long long)K);
        const size_t bytes = (size_t)N * K * (type == LSC_F32 ? 4 : 2);
        void *p = NULL;
        CK(cudaMalloc(&p, bytes));
        d->m.f = p;
        d->bytes = bytes;
        return LS_OK;
    }
    if (K % lsc_blk_elems(type))
        return ls_err_set(err, LS_E_INVALID, "K = %lld is not a multiple of the type's block", (long long)K);
    d->m.nb = (int)(K / 32);
    d->m.nbp = (int)lsc_nbp(d->m.nb);
    const size_t units = (size_t)N * d->m.nbp;
    const size_t sz[4] = {units * lsc_cb(type), units * lsc_hb(type), units * lsc_scb(type),
                          lsc_sbb(type) ? (size_t)N * (d->m.nbp / 8) * 4 : 0};
    const uint8_t **dst[4] = {&d->m.codes, &d->m.hi, &d->m.sc, &d->m.sb};
    for (int i = 0; i < 4; i++) {
        if (!sz[i]) continue;
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, sz[i]);
        if (e != cudaSuccess) {
            dmat_free(d);
            return cuda_fail(err, e, "cudaMalloc (weights)", __LINE__);
        }
        *dst[i] = (const uint8_t *)p;
        CK(cudaMemset(p, 0, sz[i]));
        d->bytes += sz[i];
    }
    return LS_OK;
}

/* Source matrix s into rows base + (n / chunk) * cstride + n % chunk of d. */
static ls_status dmat_fill(DMat *d, const lsc_mat_src *s, int base, int chunk, int cstride, uint8_t *tmp,
                           ls_err *err) {
    if ((int)s->type != d->m.type || s->K != d->m.K)
        return ls_err_set(err, LS_E_INVALID, "stacked matrices differ in type or K");
    if (lsc_is_float(d->m.type)) {
        if (chunk < s->N) return ls_err_set(err, LS_E_INVALID, "float matrices are not interleaved");
        const size_t rb = (size_t)d->m.K * (d->m.type == LSC_F32 ? 4 : 2);
        CK(cudaMemcpy((uint8_t *)d->m.f + (size_t)base * rb, s->data, s->nbytes, cudaMemcpyHostToDevice));
        return LS_OK;
    }
    CK(cudaMemcpy(tmp, s->data, s->nbytes, cudaMemcpyHostToDevice));
    CK(lsc_repack(d->m, tmp, (int)s->N, s->row_bytes, base, chunk, cstride, lsc_stream()));
    CK(cudaDeviceSynchronize());
    return LS_OK;
}

/* ---- the model's weights on the device (shared by its fwds) -------------------- */
struct WLayer {
    float *attn_norm, *ffn_norm;
    /* the plan's optional steps (NULL: absent) */
    float *bqkv;                          /* q|k|v biases, one vector of QD + 2 KVD */
    float *q_norm, *k_norm;               /* (head_dim) */
    float *post_attn_norm, *post_ffn_norm; /* (n_embd) */
    int rope, window;
    float attn_scale;
    int glu;                              /* LSC_MODE_SWIGLU or LSC_MODE_GEGLU */
    int n_qkv;         /* 1: Q, K, V stacked in one matrix; 3: separate */
    DMat qkv[3];
    int qkv_col[3];    /* column of each in the qkv activation rows */
    DMat wo;
    int n_gu;          /* 1: gate/up stacked in 8-row chunks (the SwiGLU epilogue); 2: separate */
    DMat gu[2];
    DMat down;
};

struct Weights {
    const ls_model *model;
    int refs;
    lsc_model_src src;
    std::vector<WLayer> L;
    float *out_norm;
    DMat output;
    /* the MTP module (src.has_mtp): its block is L[n_layer] */
    float *mtp_enorm, *mtp_hnorm, *mtp_head_norm;
    DMat mtp_eh, mtp_head; /* mtp_head empty when it shares output */
    uint64_t bytes;
    size_t max_nk; /* the largest N * K (fast family dequantization scratch) */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static std::vector<Weights *> g_weights;

static void weights_free(Weights *w) {
    for (WLayer &l : w->L) {
        cudaFree(l.attn_norm);
        cudaFree(l.ffn_norm);
        cudaFree(l.bqkv);
        cudaFree(l.q_norm);
        cudaFree(l.k_norm);
        cudaFree(l.post_attn_norm);
        cudaFree(l.post_ffn_norm);
        for (int i = 0; i < 3; i++) dmat_free(&l.qkv[i]);
        dmat_free(&l.wo);
        for (int i = 0; i < 2; i++) dmat_free(&l.gu[i]);
        dmat_free(&l.down);
    }
    cudaFree(w->out_norm);
    dmat_free(&w->output);
    cudaFree(w->mtp_enorm);
    cudaFree(w->mtp_hnorm);
    cudaFree(w->mtp_head_norm);
    dmat_free(&w->mtp_eh);
    dmat_free(&w->mtp_head);
    lsc_model_src_free(&w->src);
    delete w;
}

static ls_status upload_vec(float **d, const float *h, size_t n, ls_err *err) {
    CK(cudaMalloc((void **)d, n * sizeof(float)));
    CK(cudaMemcpy(*d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return LS_OK;
}

static ls_status weights_upload(Weights *w, ls_err *err) {
    const lsc_model_src *s = &w->src;
    uint64_t maxb = s->output.nbytes;
    const int nl = s->n_layer + (s->has_mtp ? 1 : 0); /* the MTP block after the trunk */
    if (s->has_mtp) {
        maxb = s->mtp_eh_proj.nbytes > maxb ? s->mtp_eh_proj.nbytes : maxb;
        maxb = s->mtp_head.nbytes > maxb ? s->mtp_head.nbytes : maxb;
    }
    for (int l = 0; l < nl; l++) {
        const lsc_layer_src *L = &s->layers[l];
        const lsc_mat_src *all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++) maxb = all[i]->nbytes > maxb ? all[i]->nbytes : maxb;
    }
    uint8_t *tmp = NULL;
    CK(cudaMalloc(&tmp, maxb));
    ls_status st = LS_OK;
    w->L.resize(nl);
    for (WLayer &l : w->L) memset(&l, 0, sizeof l);
    auto track = [&](const DMat &d) {
        w->bytes += d.bytes;
        const size_t nk = (size_t)d.m.N * d.m.K;
        if (nk > w->max_nk) w->max_nk = nk;
    };
    for (int li = 0; li < nl && !st; li++) {
        const lsc_layer_src *L = &s->layers[li];
        WLayer &D = w->L[li];
        if ((st = upload_vec(&D.attn_norm, L->attn_norm, s->n_embd, err)) ||
            (st = upload_vec(&D.ffn_norm, L->ffn_norm, s->n_embd, err)))
            break;
        D.rope = L->rope;
        D.window = L->window;
        D.attn_scale = L->attn_scale;
        D.glu = L->gelu ? LSC_MODE_GEGLU : LSC_MODE_SWIGLU;
        if (L->bq) { /* one vector in the qkv row's column order */
            const size_t qd = (size_t)s->n_head * s->head_dim, kvd = (size_t)s->n_head_kv * s->head_dim;
            std::vector<float> b(qd + 2 * kvd);
            memcpy(b.data(), L->bq, qd * 4);
            memcpy(b.data() + qd, L->bk, kvd * 4);
            memcpy(b.data() + qd + kvd, L->bv, kvd * 4);
            if ((st = upload_vec(&D.bqkv, b.data(), b.size(), err))) break;
        }
        if (L->q_norm && ((st = upload_vec(&D.q_norm, L->q_norm, s->head_dim, err)) ||
                          (st = upload_vec(&D.k_norm, L->k_norm, s->head_dim, err))))
            break;
        if (L->post_attn_norm && ((st = upload_vec(&D.post_attn_norm, L->post_attn_norm, s->n_embd, err)) ||
                                  (st = upload_vec(&D.post_ffn_norm, L->post_ffn_norm, s->n_embd, err))))
            break;
        /* Q, K, V: one stacked matrix when they share a type */
        const int64_t NQ = L->wq.N, NK = L->wk.N, NV = L->wv.N;
        D.qkv_col[0] = 0;
        D.qkv_col[1] = (int)NQ;
        D.qkv_col[2] = (int)(NQ + NK);
        if (L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
            D.n_qkv = 1;
            if ((st = dmat_alloc(&D.qkv[0], (int)L->wq.type, NQ + NK + NV, L->wq.K, err)) ||
                (st = dmat_fill(&D.qkv[0], &L->wq, 0, 1 << 30, 0, tmp, err)) ||
                (st = dmat_fill(&D.qkv[0], &L->wk, (int)NQ, 1 << 30, 0, tmp, err)) ||
                (st = dmat_fill(&D.qkv[0], &L->wv, (int)(NQ + NK), 1 << 30, 0, tmp, err)))
                break;
            track(D.qkv[0]);
        } else {
            D.n_qkv = 3;
            const lsc_mat_src *m3[3] = {&L->wq, &L->wk, &L->wv};
            for (int i = 0; i < 3 && !st; i++) {
                if ((st = dmat_alloc(&D.qkv[i], (int)m3[i]->type, m3[i]->N, m3[i]->K, err)) ||
                    (st = dmat_fill(&D.qkv[i], m3[i], 0, 1 << 30, 0, tmp, err)))
                    break;
                track(D.qkv[i]);
            }
            if (st) break;
        }
        if ((st = dmat_alloc(&D.wo, (int)L->wo.type, L->wo.N, L->wo.K, err)) ||
            (st = dmat_fill(&D.wo, &L->wo, 0, 1 << 30, 0, tmp, err)))
            break;
        track(D.wo);
        /* gate/up: stacked in chunks of 8 rows (gate c, up c, ...) for the fused SwiGLU */
        const int64_t F = L->gate.N;
        if (L->gate.type == L->up.type && !lsc_is_float((int)L->gate.type) && F % LSC_GU_CHUNK == 0) {
            D.n_gu = 1;
            if ((st = dmat_alloc(&D.gu[0], (int)L->gate.type, 2 * F, L->gate.K, err)) ||
                (st = dmat_fill(&D.gu[0], &L->gate, 0, LSC_GU_CHUNK, 2 * LSC_GU_CHUNK, tmp, err)) ||
                (st = dmat_fill(&D.gu[0], &L->up, LSC_GU_CHUNK, LSC_GU_CHUNK, 2 * LSC_GU_CHUNK, tmp, err)))
                break;
            track(D.gu[0]);
        } else {
            D.n_gu = 2;
            if ((st = dmat_alloc(&D.gu[0], (int)L->gate.type, F, L->gate.K, err)) ||
                (st = dmat_fill(&D.gu[0], &L->gate, 0, 1 << 30, 0, tmp, err)) ||
                (st = dmat_alloc(&D.gu[1], (int)L->up.type, L->up.N, L->up.K, err)) ||
                (st = dmat_fill(&D.gu[1], &L->up, 0, 1 << 30, 0, tmp, err)))
                break;
            track(D.gu[0]);
            track(D.gu[1]);
        }
        if ((st = dmat_alloc(&D.down, (int)L->down.type, L->down.N, L->down.K, err)) ||
            (st = dmat_fill(&D.down, &L->down, 0, 1 << 30, 0, tmp, err)))
            break;
        track(D.down);
    }
    if (!st) st = upload_vec(&w->out_norm, s->out_norm, s->n_embd, err);
    if (!st && !(st = dmat_alloc(&w->output, (int)s->output.type, s->output.N, s->output.K, err)))
        st = dmat_fill(&w->output, &s->output, 0, 1 << 30, 0, tmp, err);
    if (!st) track(w->output);
    if (!st && s->has_mtp) {
        if (!(st = upload_vec(&w->mtp_enorm, s->mtp_enorm, s->n_embd, err)) &&
            !(st = upload_vec(&w->mtp_hnorm, s->mtp_hnorm, s->n_embd, err)) &&
            !(st = upload_vec(&w->mtp_head_norm, s->mtp_head_norm, s->n_embd, err)) &&
            !(st = dmat_alloc(&w->mtp_eh, (int)s->mtp_eh_proj.type, s->mtp_eh_proj.N, s->mtp_eh_proj.K, err)) &&
            !(st = dmat_fill(&w->mtp_eh, &s->mtp_eh_proj, 0, 1 << 30, 0, tmp, err))) {
            track(w->mtp_eh);
            if (s->mtp_own_head &&
                !(st = dmat_alloc(&w->mtp_head, (int)s->mtp_head.type, s->mtp_head.N, s->mtp_head.K, err)) &&
                !(st = dmat_fill(&w->mtp_head, &s->mtp_head, 0, 1 << 30, 0, tmp, err)))
                track(w->mtp_head);
        }
    }
    cudaFree(tmp);
    return st;
}

static Weights *weights_acquire(const ls_model *m, ls_err *err) {
    pthread_mutex_lock(&g_mu);
    for (Weights *w : g_weights)
        if (w->model == m) {
            w->refs++;
            pthread_mutex_unlock(&g_mu);
            return w;
        }
    Weights *w = new Weights();
    w->model = m;
    w->refs = 1;
    ls_status st = lsc_model_describe(m, &w->src, err);
    if (!st) st = weights_upload(w, err);
    if (st) {
        weights_free(w);
        pthread_mutex_unlock(&g_mu);
        return NULL;
    }
    g_weights.push_back(w);
    pthread_mutex_unlock(&g_mu);
    return w;
}

static void weights_release(Weights *w) {
    if (!w) return;
    pthread_mutex_lock(&g_mu);
    if (--w->refs == 0) {
        for (size_t i = 0; i < g_weights.size(); i++)
            if (g_weights[i] == w) g_weights.erase(g_weights.begin() + (long)i);
        weights_free(w);
    }
    pthread_mutex_unlock(&g_mu);
}

/* ---- KV store ------------------------------------------------------------------------ */
struct ls_cuda_kv {
    float *d;
    int32_t n_blocks;
    size_t block_floats, layer_floats;
    int n_layer, n_kv, D;
    cudaStream_t st;
};

ls_cuda_kv *ls_cuda_kv_create(const ls_model *m, int32_t n_blocks, int32_t n_layers, ls_err *err) {
    if (n_blocks < 1 || n_layers < 0) {
        ls_err_set(err, LS_E_INVALID, "the KV cache needs at least one block (got %d) and a layer count >= 0 (got %d)",
                   n_blocks, n_layers);
        return NULL;
    }
    lsc_model_src s;
    if (lsc_model_describe(m, &s, err)) return NULL;
    ls_cuda_kv *kv = (ls_cuda_kv *)calloc(1, sizeof *kv);
    if (!kv) {
        lsc_model_src_free(&s);
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    kv->n_blocks = n_blocks;
    kv->n_layer = n_layers ? n_layers : s.n_layer;
    kv->n_kv = s.n_head_kv;
    kv->D = s.head_dim;
    kv->layer_floats = (size_t)2 * LS_KV_BLOCK * s.n_head_kv * s.head_dim;
    kv->block_floats = (size_t)kv->n_layer * kv->layer_floats; /* s.kv_block_floats for the model's count */
    lsc_model_src_free(&s);
    cudaError_t e = cudaMalloc((void **)&kv->d, (size_t)n_blocks * kv->block_floats * sizeof(float));
    if (e == cudaSuccess) e = cudaMemset(kv->d, 0, (size_t)n_blocks * kv->block_floats * sizeof(float));
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&kv->st, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        ls_err_set(err, e == cudaErrorMemoryAllocation ? LS_E_NOMEM : LS_E_IO,
                   "allocating %.0f MiB of device KV cache (%d blocks): %s",
                   (double)n_blocks * (double)kv->block_floats * 4.0 / 1048576.0, n_blocks, cudaGetErrorString(e));
        ls_cuda_kv_free(kv);
        return NULL;
    }
    return kv;
}

void ls_cuda_kv_free(ls_cuda_kv *kv) {
    if (!kv) return;
    cudaFree(kv->d);
    if (kv->st) cudaStreamDestroy(kv->st);
    free(kv);
}

int32_t ls_cuda_kv_blocks(const ls_cuda_kv *kv) { return kv->n_blocks; }

ls_status ls_cuda_kv_block_copy(ls_cuda_kv *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err) {
    if (dst < 0 || dst >= kv->n_blocks || src < 0 || src >= kv->n_blocks || n_pos < 0 || n_pos > LS_KV_BLOCK)
        return ls_err_set(err, LS_E_INVALID, "KV block copy %d -> %d of %d positions out of range", src, dst, n_pos);
    if (!n_pos || dst == src) return LS_OK;
    const size_t seg = (size_t)LS_KV_BLOCK * kv->D * sizeof(float); /* one kv head's run */
    CK(cudaMemcpy2DAsync(kv->d + (size_t)dst * kv->block_floats, seg, kv->d + (size_t)src * kv->block_floats, seg,
                         (size_t)n_pos * kv->D * sizeof(float), (size_t)kv->n_layer * 2 * kv->n_kv,
                         cudaMemcpyDeviceToDevice, kv->st));
    CK(cudaStreamSynchronize(kv->st));
    return LS_OK;
}

ls_status ls_cuda_kv_block_get(ls_cuda_kv *kv, int32_t b, void *out, ls_err *err) {
    if (b < 0 || b >= kv->n_blocks) return ls_err_set(err, LS_E_INVALID, "KV block %d out of range", b);
    CK(cudaDeviceSynchronize()); /* every forward that wrote the block is done */
    CK(cudaMemcpyAsync(out, kv->d + (size_t)b * kv->block_floats, kv->block_floats * sizeof(float),
                       cudaMemcpyDeviceToHost, kv->st));
    CK(cudaStreamSynchronize(kv->st));
    return LS_OK;
}

ls_status ls_cuda_kv_block_put(ls_cuda_kv *kv, int32_t b, const void *in, ls_err *err) {
    if (b < 0 || b >= kv->n_blocks) return ls_err_set(err, LS_E_INVALID, "KV block %d out of range", b);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpyAsync(kv->d + (size_t)b * kv->block_floats, in, kv->block_floats * sizeof(float),
                       cudaMemcpyHostToDevice, kv->st));
    CK(cudaStreamSynchronize(kv->st)); /* before any later forward reads it, and before `in` is reused */
    return LS_OK;
}

/* ---- cuBLAS, loaded at run time (the fast family) ------------------------------------ */
struct Blas {
    void *lib;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                           const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                           cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
};
static Blas g_blas;
static int g_blas_state; /* 0 untried, 1 loaded, -1 missing */

static bool blas_load(void) {
    pthread_mutex_lock(&g_mu);
    if (!g_blas_state) {
        /* the dynamic loader's search (LD_LIBRARY_PATH, the cache), then the toolkit's folder */
        const char *cands[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                               "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12"};
        for (const char *c : cands)
            if (c && (g_blas.lib = dlopen(c, RTLD_NOW | RTLD_LOCAL))) break;
        if (g_blas.lib) {
            g_blas.create = (decltype(g_blas.create))dlsym(g_blas.lib, "cublasCreate_v2");
            g_blas.destroy = (decltype(g_blas.destroy))dlsym(g_blas.lib, "cublasDestroy_v2");
            g_blas.set_stream = (decltype(g_blas.set_stream))dlsym(g_blas.lib, "cublasSetStream_v2");
            g_blas.gemm = (decltype(g_blas.gemm))dlsym(g_blas.lib, "cublasGemmEx");
        }
        g_blas_state = g_blas.lib && g_blas.create && g_blas.destroy && g_blas.set_stream && g_blas.gemm ? 1 : -1;
    }
    pthread_mutex_unlock(&g_mu);
    return g_blas_state == 1;
}

/* ---- the forward ------------------------------------------------------------------------ */
#define LSC_GRAPHS 32
#define LSC_GRAPH_ROWS 64

struct GraphEnt {
    uint64_t key[5];
    cudaGraphExec_t exec;
    uint64_t used;
};

struct Run {
    int m0, n;
    bool fast;
};

struct ls_cuda_fwd {
    Weights *w;
    const lsc_model_src *s;
    const ls_model *model;
    int32_t n_rows, n_ctx, maxblk;
    std::vector<int> layers;
    bool mtp;   /* runs the MTP module: rows carry embd_in; K/V in layer 0 of a one-layer store */
    float *cat; /* (n_rows, 2 n_embd) the module's input [enorm(embed); hnorm(hidden)] */
    cudaStream_t st;
    lsc_stream ls; /* st and the launch settings of this forward's kernels (set per run from opts) */
    cudaEvent_t ev0, ev1;
    /* device */
    float *xn, *qkv, *att, *h, *tbuf, *logits_d, *cs[2], *sn[2]; /* RoPE tables: the plan's (n_rope) */
    int8_t *xq, *xq2; /* quantized activations; xq2: h (the down matmul's input, written by the SwiGLU matmul) */
    float2 *dxs, *dxs2;
    uint8_t *stage_d;
    int32_t logits_rows; /* rows logits_d/logits_h hold */
    /* host (pinned) */
    uint8_t *stage_h;
    float *logits_h, *hidden_h;
    size_t stage_cap;
    /* fast family */
    void *blas;
    bool blas_ran; /* this forward's matmuls called cuBLAS (stats.rows_cublas) */
    __half *wh, *xh;
    ls_cuda_opts opts;
    ls_cuda_stats stats;
    GraphEnt graphs[LSC_GRAPHS];
    uint64_t graph_clock;
    int E, QD, KVD, QKVD, F, V;
    float *part;        /* split-K partial trees of the tensor-core GEMM */
    size_t part_floats;
    float *ascr;        /* k_attn4's score slabs (prefill), when part is too small for them */
    size_t ascr_floats;
    /* profiling (opts.profile) */
    cudaEvent_t pev[1024];
    const char *pname[1024];
    int pn, nkinds;
    const char *kind[32];
    double kind_ms[32];
};

#define PROF(f, name)                                                            \
    do {                                                                         \
        if ((f)->opts.profile && (f)->pn < 1024) {                              \
            if (!(f)->pev[(f)->pn]) cudaEventCreate(&(f)->pev[(f)->pn]);         \
            (f)->pname[(f)->pn] = (name);                                        \
            cudaEventRecord((f)->pev[(f)->pn++], (f)->st);                        \
        }                                                                        \
    } while (0)

/* staging layout for M rows (4-byte words): x_in (M E), pos (M), tbl_off (M), out_idx (M), tables (M maxblk),
 * and for an MTP forward the rows' hidden states (M E) */
struct Stage {
    size_t x, pos, tbl_off, out_idx, tbl, ein, words;
};
static Stage stage_layout(const ls_cuda_fwd *f, int M) {
    Stage s;
    s.x = 0;
    s.pos = (size_t)M * f->E;
    s.tbl_off = s.pos + M;
    s.out_idx = s.tbl_off + M;
    s.tbl = s.out_idx + M;
    s.ein = (s.tbl + (size_t)M * f->maxblk + 15) & ~(size_t)15; /* float4 loads: 64-byte aligned */
    s.words = s.ein + (f->mtp ? (size_t)M * f->E : 0);
    s.words = (s.words + 63) & ~(size_t)63;
    return s;
}

static void graphs_clear(ls_cuda_fwd *f) {
    for (GraphEnt &g : f->graphs) {
        if (g.exec) cudaGraphExecDestroy(g.exec);
        memset(&g, 0, sizeof g);
    }
}

void ls_cuda_fwd_free(ls_cuda_fwd *f) {
    if (!f) return;
    if (f->st) cudaStreamSynchronize(f->st);
    graphs_clear(f);
    for (cudaEvent_t e : f->pev)
        if (e) cudaEventDestroy(e);
    void *dev[] = {f->xn, f->qkv, f->att, f->h, f->tbuf, f->logits_d, f->cs[0], f->sn[0], f->cs[1], f->sn[1], f->xq,
                   f->dxs, f->xq2, f->dxs2, f->stage_d, f->wh, f->xh, f->part, f->cat, f->ascr};
    for (void *p : dev) cudaFree(p);
    cudaFreeHost(f->stage_h);
    cudaFreeHost(f->logits_h);
    cudaFreeHost(f->hidden_h);
    if (f->blas) g_blas.destroy((cublasHandle_t)f->blas);
    if (f->ev0) cudaEventDestroy(f->ev0);
    if (f->ev1) cudaEventDestroy(f->ev1);
    if (f->st) cudaStreamDestroy(f->st);
    weights_release(f->w);
    delete f;
}

static ls_status dalloc(void **p, size_t bytes, ls_err *err) {
    CK(cudaMalloc(p, bytes ? bytes : 16));
    return LS_OK;
}

static ls_status logits_reserve(ls_cuda_fwd *f, int32_t rows, ls_err *err) {
    if (rows <= f->logits_rows) return LS_OK;
    graphs_clear(f); /* the graphs hold the old addresses */
    cudaFree(f->logits_d);
    cudaFreeHost(f->logits_h);
    f->logits_d = NULL;
    f->logits_h = NULL;
    f->logits_rows = 0;
    const size_t bytes = (size_t)rows * f->V * sizeof(float);
    CK(cudaMalloc((void **)&f->logits_d, bytes));
    CK(cudaMallocHost((void **)&f->logits_h, bytes));
    f->logits_rows = rows;
    return LS_OK;
}

ls_cuda_fwd *ls_cuda_fwd_create(const ls_model *m, const ls_backend_params *p, ls_err *err) {
    if (!ls_cuda_available(NULL, 0, err)) return NULL;
    if (p->n_rows < 1 || p->n_ctx < 1) {
        ls_err_set(err, LS_E_INVALID, "bad forward sizes (rows %d, context %d)", p->n_rows, p->n_ctx);
        return NULL;
    }
    ls_cuda_fwd *f = new ls_cuda_fwd(); /* value-initialized: every plain member zero */
    f->model = m;
    f->n_rows = p->n_rows;
    f->n_ctx = p->n_ctx;
    f->maxblk = (p->n_ctx + LS_KV_BLOCK - 1) / LS_KV_BLOCK;
    f->opts.fast = 1;
    f->opts.fast_min_rows = 64;
    f->opts.gemv_max_rows = 8; /* 9..12 rows: k_mma2 on one tile row beats the warp kernel in runs of 8 and
                                * the rest (B = 12 sequences 6.66-6.76 against 8.21-8.23 ms a step; 12 was the
                                * default while the GEMM took k_mma's tiles: H100, session41-h100) */
    f->opts.graphs = 1;
    f->opts.pdl = 1;
    f->opts.gemv_nw = 1;
    f->opts.mma_minblocks = 2;
    f->opts.mma_v2 = 4;
    f->opts.mma_small = 3;
    f->opts.attn_mr = 1;
    ls_status st = LS_OK;
    cudaError_t e;
    int dev = 0;
    cudaDeviceProp prop;
    f->w = weights_acquire(m, err);
    if (!f->w) goto fail;
    f->s = &f->w->src;
    {
        const lsc_model_src *s = f->s;
        f->E = s->n_embd;
        f->QD = s->n_head * s->head_dim;
        f->KVD = s->n_head_kv * s->head_dim;
        f->QKVD = f->QD + 2 * f->KVD;
        f->F = s->n_ff;
        f->V = p->mtp && s->mtp_own_head ? (int)s->mtp_head.N : s->n_vocab; /* the MTP head may cover part of the vocabulary */
        f->mtp = p->mtp;
        if (p->mtp && !s->has_mtp) {
            ls_err_set(err, LS_E_UNSUPPORTED, "this model has no MTP (nextn) module");
            goto fail;
        }
        const int nl = p->mtp ? 0 : p->layers ? p->n_layers : s->n_layer;
        if (p->mtp) f->layers.push_back(s->n_layer); /* the module's block, after the trunk */
        if (!p->mtp && (nl < 1 || nl > s->n_layer)) {
            ls_err_set(err, LS_E_INVALID, "layer list of %d layers (the model has %d)", nl, s->n_layer);
            goto fail;
        }
        for (int i = 0; i < nl; i++) {
            const int l = p->layers ? p->layers[i] : i;
            if (l < 0 || l >= s->n_layer) {
                ls_err_set(err, LS_E_INVALID, "layer %d does not exist (the model has %d)", l, s->n_layer);
                goto fail;
            }
            f->layers.push_back(l);
        }
        if (s->n_embd % 4 || f->QD % 4 || f->F % 4) {
            ls_err_set(err, LS_E_UNSUPPORTED, "the CUDA backend needs row widths that are multiples of 4");
            goto fail;
        }
        if ((e = cudaGetDevice(&dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
            st = cuda_fail(err, e, "device properties", __LINE__);
            goto fail;
        }
        const size_t att_smem = lsc_attn_smem(s->n_head, s->n_head_kv, s->head_dim, p->n_ctx);
        if (att_smem > prop.sharedMemPerBlockOptin) {
            ls_err_set(err, LS_E_UNSUPPORTED,
                       "context %d is too long for the GPU attention kernel (%zu KiB of shared memory, the device has %zu)",
                       p->n_ctx, att_smem >> 10, (size_t)prop.sharedMemPerBlockOptin >> 10);
            goto fail;
        }
        if ((e = lsc_attn_init(prop.sharedMemPerBlockOptin, prop.multiProcessorCount)) != cudaSuccess || (e = lsc_mma_init()) != cudaSuccess ||
            (e = lsc_ops_init()) != cudaSuccess) {
            st = cuda_fail(err, e, "kernel attributes", __LINE__);
            goto fail;
        }
        if ((e = cudaStreamCreateWithFlags(&f->st, cudaStreamNonBlocking)) != cudaSuccess ||
            (e = cudaEventCreate(&f->ev0)) != cudaSuccess || (e = cudaEventCreate(&f->ev1)) != cudaSuccess) {
            st = cuda_fail(err, e, "stream", __LINE__);
            goto fail;
        }
        const size_t R = (size_t)p->n_rows;
        int kmax = f->E > f->QD ? f->E : f->QD;
        kmax = f->F > kmax ? f->F : kmax;
        if (f->mtp) kmax = 2 * f->E > kmax ? 2 * f->E : kmax; /* eh_proj's input */
        const int xs = (int)lsc_nbp(kmax / 32 + 1);
        if (f->mtp && (st = dalloc((void **)&f->cat, R * 2 * f->E * 4, err))) goto fail;
        if ((st = dalloc((void **)&f->xn, R * f->E * 4, err)) || (st = dalloc((void **)&f->qkv, R * f->QKVD * 4, err)) ||
            (st = dalloc((void **)&f->att, R * f->QD * 4, err)) || (st = dalloc((void **)&f->h, R * f->F * 4, err)) ||
            (st = dalloc((void **)&f->tbuf, R * (2 * f->F > f->E ? 2 * f->F : f->E) * 4, err)) ||
            (st = dalloc((void **)&f->xq, R * xs * 32, err)) || (st = dalloc((void **)&f->dxs, R * xs * 8, err)) ||
            (st = dalloc((void **)&f->xq2, R * xs * 32, err)) || (st = dalloc((void **)&f->dxs2, R * xs * 8, err)))
            goto fail;
        f->part_floats = (size_t)8 * (R < 64 ? R : 64) * 16896;
        if ((st = dalloc((void **)&f->part, f->part_floats * 4, err))) goto fail;
        if (R >= 16) { /* k_attn4: a slab of 32 (row, head) pairs x the keys for each of two blocks an SM */
            const size_t keys = (size_t)(p->n_ctx < 8192 ? p->n_ctx : 8192) + 31;
            const size_t want = (size_t)2 * prop.multiProcessorCount * 32 * (keys / 32 * 32);
            if (want > f->part_floats) {
                f->ascr_floats = want;
                if ((st = dalloc((void **)&f->ascr, want * 4, err))) goto fail;
            }
        }
        const Stage sl = stage_layout(f, p->n_rows);
        f->stage_cap = sl.words * 4;
        if ((st = dalloc((void **)&f->stage_d, f->stage_cap, err))) goto fail;
        if ((e = cudaMallocHost((void **)&f->stage_h, f->stage_cap)) != cudaSuccess ||
            (e = cudaMallocHost((void **)&f->hidden_h, R * f->E * 4)) != cudaSuccess) {
            st = cuda_fail(err, e, "pinned host buffers", __LINE__);
            goto fail;
        }
        if ((st = logits_reserve(f, p->n_rows < 32 ? p->n_rows : 32, err))) goto fail;
        /* RoPE tables (the host computes them as ls_rope_create does) */
        const size_t half = (size_t)s->rope_dim / 2, cnt = (size_t)p->n_ctx * half;
        float *cs = (float *)malloc(cnt * 4 + 4), *sn = (float *)malloc(cnt * 4 + 4);
        if (!cs || !sn) {
            free(cs);
            free(sn);
            ls_err_set(err, LS_E_NOMEM, "out of memory for RoPE tables");
            goto fail;
        }
        for (int i = 0; i < s->n_rope && !st; i++) {
            lsc_rope_tables(m, i, p->n_ctx, cs, sn);
            st = upload_vec(&f->cs[i], cs, cnt, err);
            if (!st) st = upload_vec(&f->sn[i], sn, cnt, err);
        }
        free(cs);
        free(sn);
        if (st) goto fail;
        if (blas_load()) {
            cublasHandle_t hnd;
            if (g_blas.create(&hnd) == CUBLAS_STATUS_SUCCESS) {
                f->blas = hnd;
                g_blas.set_stream(hnd, f->st);
            }
        }
        f->stats.cublas = f->blas != NULL;
        f->stats.weight_bytes = f->w->bytes;
        uint64_t sb = f->mtp ? f->w->mtp_eh.bytes + (s->mtp_own_head ? f->w->mtp_head.bytes : f->w->output.bytes)
                             : f->w->output.bytes;
        for (int l : f->layers) {
            const WLayer &L = f->w->L[l];
            for (int i = 0; i < L.n_qkv; i++) sb += L.qkv[i].bytes;
            for (int i = 0; i < L.n_gu; i++) sb += L.gu[i].bytes;
            sb += L.wo.bytes + L.down.bytes;
        }
        f->stats.step_bytes = sb;
    }
    return f;
fail:
    (void)st;
    ls_cuda_fwd_free(f);
    return NULL;
}

void ls_cuda_fwd_get_opts(const ls_cuda_fwd *f, ls_cuda_opts *o) { *o = f->opts; }
void ls_cuda_fwd_set_opts(ls_cuda_fwd *f, const ls_cuda_opts *o) {
    f->opts = *o;
    f->nkinds = 0;
    graphs_clear(f);
}
int ls_cuda_fwd_profile(const ls_cuda_fwd *f, const char **names, double *ms, int cap) {
    for (int i = 0; i < f->nkinds && i < cap; i++) {
        names[i] = f->kind[i];
        ms[i] = f->kind_ms[i];
    }
    return f->nkinds;
}
void ls_cuda_fwd_stats(const ls_cuda_fwd *f, ls_cuda_stats *s) { *s = f->stats; }

/* ---- one call ------------------------------------------------------------------------------- */
struct Plan {
    int M, n_out;
    std::vector<Run> rows, head; /* runs of consecutive rows (gathered head rows) of one family */
    uint64_t rows_fast, rows_exact; /* the rows each family was asked for (before runs merge) */
    int max_keys;
    int attn_mr; /* k_attn4 may serve this batch's attention */
    bool hidden;
    bool blas_used;
};

/* The fast family: W dequantized to fp16, activations to fp16, cuBLAS fp32-accumulated GEMM. */
static ls_status mm_fast(ls_cuda_fwd *f, const DMat &d, const float *xf, int ldxf, int m0, int n, float *y, int ldy,
                         int mode, ls_err *err) {
    const lsc_mat &w = d.m;
    if (!f->wh) {
        CK(cudaMalloc((void **)&f->wh, f->w->max_nk * sizeof(__half)));
        int kmax = f->E > f->QD ? f->E : f->QD;
        kmax = f->F > kmax ? f->F : kmax;
        CK(cudaMalloc((void **)&f->xh, (size_t)f->n_rows * kmax * sizeof(__half)));
    }
    CK(lsc_dequant_half(w, f->wh, f->ls));
    CK(lsc_f2h(xf + (size_t)m0 * ldxf, ldxf, n, w.K, f->xh, f->ls));
    const float one = 1.0f, zero = 0.0f;
    float *out = lsc_gated(mode) ? f->tbuf : y + (size_t)m0 * ldy;
    const int ldc = lsc_gated(mode) ? w.N : ldy;
    cublasStatus_t bs = g_blas.gemm((cublasHandle_t)f->blas, CUBLAS_OP_T, CUBLAS_OP_N, w.N, n, w.K, &one, f->wh,
                                    CUDA_R_16F, w.K, f->xh, CUDA_R_16F, w.K, mode == LSC_MODE_ADD ? &one : &zero, out,
                                    CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) return ls_err_set(err, LS_E_IO, "cublasGemmEx failed (status %d)", (int)bs);
    if (lsc_gated(mode)) CK(lsc_epilogue(f->tbuf, w.N, n, y + (size_t)m0 * ldy, ldy, mode, f->ls));
    return LS_OK;
}

/* One matrix over the plan's runs.  xf: float activations (ldxf), a: their quantization. */
static ls_status mm(ls_cuda_fwd *f, const DMat &d, const std::vector<Run> &runs, const float *xf, int ldxf, lsc_act a,
                    float *y, int ldy, int mode, ls_err *err, lsc_qout qo = lsc_qout{NULL, NULL, 0}) {
    const lsc_mat &w = d.m;
    for (const Run &r : runs) {
        float *yr = y + (size_t)r.m0 * ldy;
        if (lsc_is_float(w.type)) {
            CK(lsc_gemv_float(w, xf + (size_t)r.m0 * ldxf, ldxf, r.n, yr, ldy, mode, f->ls));
            continue;
        }
        if (r.fast && f->blas && r.n >= f->opts.fast_min_rows) {
            f->blas_ran = true;
            ls_status st = mm_fast(f, d, xf, ldxf, r.m0, r.n, y, ldy, mode, err);
            if (st) return st;
            continue;
        }
        lsc_act ar = a;
        ar.q = a.q + (size_t)r.m0 * a.xs * 32;
        ar.dxs = a.dxs + (size_t)r.m0 * a.xs;
        if (f->opts.narrow) { /* the narrow pin: the one-row warp kernel, row by row */
            for (int i = 0; i < r.n; i++) {
                lsc_act a1 = ar;
                a1.q = ar.q + (size_t)i * a.xs * 32;
                a1.dxs = ar.dxs + (size_t)i * a.xs;
                lsc_qout q1 = qo;
                if (qo.q) {
                    q1.q = qo.q + (size_t)i * qo.xs * 32;
                    q1.dxs = qo.dxs + (size_t)i * qo.xs;
                }
                CK(lsc_gemv(w, a1, 1, yr + (size_t)i * ldy, ldy, mode, f->ls, q1));
            }
        } else if (r.n <= f->opts.gemv_max_rows)
            CK(lsc_gemv(w, ar, r.n, yr, ldy, mode, f->ls, qo));
        else
            CK(lsc_mma(w, ar, r.n, yr, ldy, mode, f->part, f->part_floats, f->ls));
    }
    return LS_OK;
}

static ls_status enqueue(ls_cuda_fwd *f, ls_cuda_kv *kv, const Plan &pl, ls_err *err) {
    const lsc_model_src *s = f->s;
    const int M = pl.M, E = f->E, F = f->F, D = s->head_dim;
    const Stage sl = stage_layout(f, M);
    lsc_stream &st = f->ls;
    st = lsc_stream(f->st, 0 /* the first kernel follows a copy */, f->opts.gemv_nw, f->opts.mma_minblocks == 2 ? 2 : 1,
                    f->opts.mma_v2, pl.attn_mr);
    st.gemv_nwr = f->opts.gemv_nwr;
    st.mma_small = f->opts.mma_small;
    CK(cudaMemcpyAsync(f->stage_d, f->stage_h, sl.words * 4, cudaMemcpyHostToDevice, st));
    PROF(f, "upload");
    const int pdl = f->opts.pdl && !f->opts.profile;
    float *x = (float *)f->stage_d + sl.x; /* the residual stream lives in the staged embeddings */
    const int32_t *pos = (const int32_t *)f->stage_d + sl.pos, *tbl_off = (const int32_t *)f->stage_d + sl.tbl_off,
                  *out_idx = (const int32_t *)f->stage_d + sl.out_idx, *tbl = (const int32_t *)f->stage_d + sl.tbl;
    const int xsE = (int)lsc_nbp(E / 32), xsQ = (int)lsc_nbp(f->QD / 32), xsF = (int)lsc_nbp(F / 32);
    ls_status rs;
    if (f->mtp) { /* forward.c: x = eh_proj([enorm(embed(token)); hnorm(hidden)]) */
        const float *ein = (const float *)f->stage_d + sl.ein;
        const int xs2 = (int)lsc_nbp(2 * E / 32);
        CK(lsc_rmsnorm_quant(x, E, NULL, f->w->mtp_enorm, s->norm_eps, M, E, f->cat, 2 * E, NULL, NULL, 0, st));
        st.pdl = pdl;
        CK(lsc_rmsnorm_quant(ein, E, NULL, f->w->mtp_hnorm, s->norm_eps, M, E, f->cat + E, 2 * E, NULL, NULL, 0, st));
        if (!lsc_is_float(f->w->mtp_eh.m.type)) CK(lsc_quant(f->cat, 2 * E, M, 2 * E, f->xq, f->dxs, xs2, st));
        const lsc_act a2 = {f->xq, f->dxs, xs2};
        if ((rs = mm(f, f->w->mtp_eh, pl.rows, f->cat, 2 * E, a2, x, E, LSC_MODE_STORE, err))) return rs;
        PROF(f, "mtp: norms+eh_proj");
    }
    for (int l : f->layers) {
        const WLayer &L = f->w->L[l];
        CK(lsc_rmsnorm_quant(x, E, NULL, L.attn_norm, s->norm_eps, M, E, f->xn, E, f->xq, f->dxs, xsE, st));
        st.pdl = pdl;
        PROF(f, "rmsnorm+quant");
        const lsc_act aE = {f->xq, f->dxs, xsE};
        for (int i = 0; i < L.n_qkv; i++)
            if ((rs = mm(f, L.qkv[i], pl.rows, f->xn, E, aE, f->qkv + L.qkv_col[i], f->QKVD, LSC_MODE_STORE, err)))
                return rs;
        PROF(f, "matmul qkv");
        lsc_kvargs ka;
        ka.kv = kv->d;
        ka.block_floats = kv->block_floats;
        ka.layer_off = f->mtp ? 0 : (size_t)l * kv->layer_floats; /* the module's store has one layer */
        ka.tbl = tbl;
        ka.tbl_off = tbl_off;
        ka.pos = pos;
        const lsc_qkpre pre = {L.bqkv, L.q_norm, L.k_norm, s->norm_eps}; /* plan steps 3, 4 */
        CK(lsc_rope_kv(f->qkv, f->QKVD, M, s->n_head, s->n_head_kv, D, s->rope_dim, s->rope_neox, f->cs[L.rope],
                       f->sn[L.rope], ka, pre, st));
        PROF(f, "(bias, q/k norm,) rope+kv write");
        const bool q_att = !lsc_is_float(L.wo.m.type);
        CK(lsc_attention(f->qkv, f->QKVD, M, s->n_head, s->n_head_kv, D, L.attn_scale, L.window, ka, pl.max_keys,
                         f->att, q_att ? f->xq : NULL, f->dxs, xsQ, f->ascr ? f->ascr : f->part,
                         f->ascr ? f->ascr_floats : f->part_floats, st));
        PROF(f, "attention(+quant)");
        const lsc_act aQ = {f->xq, f->dxs, xsQ};
        if (L.post_attn_norm) { /* plan steps 7-9: t = att Wo; x = x + rmsnorm(t) */
            if ((rs = mm(f, L.wo, pl.rows, f->att, f->QD, aQ, f->tbuf, E, LSC_MODE_STORE, err))) return rs;
            PROF(f, "matmul wo");
            CK(lsc_norm_add(f->tbuf, E, L.post_attn_norm, s->norm_eps, M, E, x, E, st));
            PROF(f, "post-norm+add");
        } else {
            if ((rs = mm(f, L.wo, pl.rows, f->att, f->QD, aQ, x, E, LSC_MODE_ADD, err))) return rs;
            PROF(f, "matmul wo(+add)");
        }
        CK(lsc_rmsnorm_quant(x, E, NULL, L.ffn_norm, s->norm_eps, M, E, f->xn, E, f->xq, f->dxs, xsE, st));
        PROF(f, "rmsnorm+quant");
        /* one exact warp-kernel run (decode): the SwiGLU matmul quantizes h itself */
        const bool fuse_q = L.n_gu == 1 && !lsc_is_float(L.down.m.type) && pl.rows.size() == 1 && !pl.rows[0].fast &&
                            M == 1 && f->opts.gemv_max_rows >= 1 && F % 32 == 0;
        if (L.n_gu == 1) {
            const lsc_qout qo = {fuse_q ? f->xq2 : (int8_t *)NULL, f->dxs2, xsF};
            if ((rs = mm(f, L.gu[0], pl.rows, f->xn, E, aE, f->h, F, L.glu, err, qo))) return rs;
        } else {
            if ((rs = mm(f, L.gu[0], pl.rows, f->xn, E, aE, f->tbuf, 2 * F, LSC_MODE_STORE, err)) ||
                (rs = mm(f, L.gu[1], pl.rows, f->xn, E, aE, f->tbuf + F, 2 * F, LSC_MODE_STORE, err)))
                return rs;
            CK(lsc_glu(f->tbuf, f->tbuf + F, 2 * F, M, F, f->h, F, L.glu, st));
        }
        PROF(f, "matmul gate/up(+glu)");
        if (!lsc_is_float(L.down.m.type) && !fuse_q) {
            CK(lsc_quant(f->h, F, M, F, f->xq2, f->dxs2, xsF, st));
            PROF(f, "quant");
        }
        const lsc_act aF = {f->xq2, f->dxs2, xsF};
        if (L.post_ffn_norm) { /* plan steps 13-15 */
            if ((rs = mm(f, L.down, pl.rows, f->h, F, aF, f->tbuf, E, LSC_MODE_STORE, err))) return rs;
            PROF(f, "matmul down");
            CK(lsc_norm_add(f->tbuf, E, L.post_ffn_norm, s->norm_eps, M, E, x, E, st));
            PROF(f, "post-norm+add");
        } else {
            if ((rs = mm(f, L.down, pl.rows, f->h, F, aF, x, E, LSC_MODE_ADD, err))) return rs;
            PROF(f, "matmul down(+add)");
        }
    }
    if (pl.n_out > 0) { /* the head: the rows that need logits, gathered in row order */
        const float *hn = f->mtp ? f->w->mtp_head_norm : f->w->out_norm;
        const DMat &head = f->mtp && s->mtp_own_head ? f->w->mtp_head : f->w->output;
        CK(lsc_rmsnorm_quant(x, E, out_idx, hn, s->norm_eps, pl.n_out, E, f->xn, E, f->xq, f->dxs, xsE, st));
        st.pdl = pdl;
        PROF(f, "rmsnorm+quant");
        const lsc_act aE = {f->xq, f->dxs, xsE};
        if ((rs = mm(f, head, pl.head, f->xn, E, aE, f->logits_d, f->V, LSC_MODE_STORE, err))) return rs;
        PROF(f, "matmul head");
    }
    st.pdl = 0;
    return LS_OK;
}

static ls_status run_graph(ls_cuda_fwd *f, ls_cuda_kv *kv, const Plan &pl, const uint64_t key[5], ls_err *err) {
    GraphEnt *g = NULL, *victim = NULL;
    for (GraphEnt &e : f->graphs) {
        if (e.exec && !memcmp(e.key, key, sizeof e.key)) g = &e;
        if (!victim || (victim->exec && (!e.exec || e.used < victim->used))) victim = &e; /* empty, else LRU */
    }
    if (!g) {
        if (victim->exec) cudaGraphExecDestroy(victim->exec);
        memset(victim, 0, sizeof *victim);
        CK(cudaStreamBeginCapture(f->st, cudaStreamCaptureModeThreadLocal));
        ls_status rs = enqueue(f, kv, pl, err);
        cudaGraph_t graph = NULL;
        cudaError_t e = cudaStreamEndCapture(f->st, &graph);
        if (rs) {
            if (graph) cudaGraphDestroy(graph);
            return rs;
        }
        if (e != cudaSuccess) return cuda_fail(err, e, "cudaStreamEndCapture", __LINE__);
        e = cudaGraphInstantiate(&victim->exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) return cuda_fail(err, e, "cudaGraphInstantiate", __LINE__);
        memcpy(victim->key, key, sizeof victim->key);
        g = victim;
    }
    g->used = ++f->graph_clock;
    CK(cudaGraphLaunch(g->exec, f->st));
    return LS_OK;
}

ls_status ls_cuda_fwd_run(ls_cuda_fwd *f, ls_cuda_kv *kv, const ls_batch *b, float *logits, ls_err *err) {
    const double t0 = now_ms();
    const lsc_model_src *s = f->s;
    if (!b || b->n < 1 || b->n > f->n_rows || !b->token || !b->pos || !b->seq || !b->tables || !b->logit_row)
        return ls_err_set(err, LS_E_INVALID, "bad batch (%d rows, at most %d)", b ? b->n : 0, f->n_rows);
    if (!b->embd_in != !f->mtp)
        return ls_err_set(err, LS_E_INVALID, f->mtp ? "an MTP forward needs each row's hidden state (embd_in)"
                                                    : "hidden-state inputs (embd_in) are for an MTP forward");
    if ((f->mtp ? kv->n_layer < 1 : kv->n_layer != s->n_layer) || kv->D != s->head_dim || kv->n_kv != s->n_head_kv)
        return ls_err_set(err, LS_E_INVALID, "the KV store belongs to another model shape");
    Plan pl;
    pl.M = b->n;
    pl.n_out = 0;
    pl.hidden = b->hidden_out != NULL;
    pl.blas_used = false;
    pl.rows_fast = pl.rows_exact = 0;
    f->blas_ran = false;
    int max_pos = 0;
    const Stage sl = stage_layout(f, b->n);
    int32_t *sw = (int32_t *)f->stage_h;
    int32_t *tb = sw + sl.tbl;
    size_t tb_used = 0;
    for (int32_t r = 0; r < b->n; r++) {
        if (b->token[r] < 0 || b->token[r] >= s->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "row %d: token %d out of range (vocabulary %d)", r, b->token[r], s->n_vocab);
        if (b->pos[r] < 0 || b->pos[r] >= f->n_ctx)
            return ls_err_set(err, LS_E_RANGE, "row %d: position %d outside the context (%d)", r, b->pos[r], f->n_ctx);
        if (b->logit_row[r] >= 0 && b->logit_row[r] != pl.n_out++)
            return ls_err_set(err, LS_E_INVALID, "row %d: logit rows must be numbered 0, 1, ... in row order", r);
        max_pos = b->pos[r] > max_pos ? b->pos[r] : max_pos;
        sw[sl.pos + r] = b->pos[r];
        /* a run of rows of one sequence shares one copy of its table (covering the run's
         * largest position) */
        if (r > 0 && b->seq[r] == b->seq[r - 1]) {
            sw[sl.tbl_off + r] = sw[sl.tbl_off + r - 1];
        } else {
            sw[sl.tbl_off + r] = (int32_t)(sl.tbl + tb_used);
            int32_t e = r, pm = b->pos[r];
            while (e + 1 < b->n && b->seq[e + 1] == b->seq[r]) pm = b->pos[++e] > pm ? b->pos[e] : pm;
            const int32_t nblk = (pm >> LS_KV_BLOCK_SHIFT) + 1;
            const int32_t *t = b->tables[b->seq[r]];
            for (int32_t i = 0; i < nblk; i++) {
                if (t[i] < 0 || t[i] >= kv->n_blocks)
                    return ls_err_set(err, LS_E_INVALID, "row %d: block %d of its table is %d (the store has %d)", r, i,
                                      t[i], kv->n_blocks);
                tb[tb_used + i] = t[i];
            }
            tb_used += (size_t)nblk;
        }
    }
    /* tbl_off is relative to the start of the tables */
    for (int32_t r = 0; r < b->n; r++) sw[sl.tbl_off + r] -= (int32_t)sl.tbl;
    if (pl.n_out && !logits) return ls_err_set(err, LS_E_INVALID, "rows want logits but no logits buffer was given");
    ls_status rs = logits_reserve(f, pl.n_out > 0 ? pl.n_out : 1, err);
    if (rs) return rs;
    uint64_t fast_mask = 0, out_mask = 0;
    for (int32_t r = 0, o = 0; r < b->n; r++) {
        const bool fast = f->opts.fast && b->need_parity && !b->need_parity[r];
        if (fast && r < 64) fast_mask |= 1ull << r;
        if (pl.rows.empty() || pl.rows.back().fast != fast) pl.rows.push_back(Run{r, 0, fast});
        pl.rows.back().n++;
        if (b->logit_row[r] >= 0) {
            if (r < 64) out_mask |= 1ull << r;
            sw[sl.out_idx + o] = r;
            if (pl.head.empty() || pl.head.back().fast != fast) pl.head.push_back(Run{o, 0, fast});
            pl.head.back().n++;
            o++;
        }
    }
    for (const Run &r : pl.rows) (r.fast ? pl.rows_fast : pl.rows_exact) += (uint64_t)r.n;
    {
        int segs = b->n > 0;
        for (int32_t r = 1; r < b->n; r++) segs += b->seq[r] != b->seq[r - 1];
        pl.attn_mr = b->n >= 16 && ((f->opts.attn_mr == 1 && b->n >= 8 * segs) || f->opts.attn_mr >= 2)
                         ? (f->opts.attn_mr == 3 ? 3 : 1)
                         : 0;
    }
    /* A fast run that cuBLAS would not take (under fast_min_rows, or no cuBLAS) runs the exact
     * kernels anyway: it joins its exact neighbours, so a verify block beside a few classic rows
     * is one run (one launch per matrix), not two (bench_cuda's mixed section measured the split
     * at 1.03-1.35x the step time of one run, H100). */
    auto merge = [&](std::vector<Run> &runs) {
        std::vector<Run> out;
        for (Run r : runs) {
            if (r.fast && !(f->blas && r.n >= f->opts.fast_min_rows)) r.fast = false;
            if (!out.empty() && out.back().fast == r.fast && out.back().m0 + out.back().n == r.m0)
                out.back().n += r.n;
            else
                out.push_back(r);
        }
        runs.swap(out);
    };
    merge(pl.rows);
    merge(pl.head);
    for (const Run &r : pl.rows) pl.blas_used = pl.blas_used || r.fast;
    for (const Run &r : pl.head) pl.blas_used = pl.blas_used || r.fast;
    if (f->mtp) {
        lsc_embed_rows_mtp(f->model, b->token, b->n, (float *)f->stage_h + sl.x);
        memcpy((float *)f->stage_h + sl.ein, b->embd_in, (size_t)b->n * f->E * sizeof(float));
    } else {
        lsc_embed_rows(f->model, b->token, b->n, (float *)f->stage_h + sl.x);
    }

    const bool use_graph = f->opts.graphs && !f->opts.profile && b->n <= LSC_GRAPH_ROWS && !pl.blas_used &&
                           f->opts.attn_mr != 3; /* the tests' small persistent grid: not a graph key */
    f->pn = 0;
    if (use_graph) { /* attention's shared memory is sized by a power-of-two bucket of keys */
        int bucket = 256;
        while (bucket < max_pos + 1) bucket *= 2;
        pl.max_keys = bucket < f->n_ctx ? bucket : f->n_ctx;
    } else {
        pl.max_keys = max_pos + 1;
    }
    cudaError_t e;
    if ((e = cudaEventRecord(f->ev0, f->st)) != cudaSuccess) return cuda_fail(err, e, "cudaEventRecord", __LINE__);
    if (use_graph) {
        const uint64_t key[5] = {(uint64_t)b->n | (uint64_t)pl.n_out << 16 | (uint64_t)pl.max_keys << 32 |
                                     (uint64_t)pl.attn_mr << 63,
                                 fast_mask,
                                 out_mask, (uint64_t)(uintptr_t)kv, (uint64_t)(uintptr_t)kv->d};
        rs = run_graph(f, kv, pl, key, err);
    } else {
        rs = enqueue(f, kv, pl, err);
    }
    if (rs) {
        cudaStreamSynchronize(f->st);
        return rs;
    }
    CK(cudaEventRecord(f->ev1, f->st));
    if (pl.n_out)
        CK(cudaMemcpyAsync(f->logits_h, f->logits_d, (size_t)pl.n_out * f->V * 4, cudaMemcpyDeviceToHost, f->st));
    if (pl.hidden)
        CK(cudaMemcpyAsync(f->hidden_h, (float *)f->stage_d + sl.x, (size_t)b->n * f->E * 4, cudaMemcpyDeviceToHost,
                           f->st));
    CK(cudaStreamSynchronize(f->st));
    CK(cudaGetLastError());
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, f->ev0, f->ev1));
    for (int i = 0; i < f->pn; i++) { /* opts.profile: the time since the previous mark, by kind */
        float d = 0.0f;
        CK(cudaEventElapsedTime(&d, i ? f->pev[i - 1] : f->ev0, f->pev[i]));
        int k = 0;
        while (k < f->nkinds && strcmp(f->kind[k], f->pname[i])) k++;
        if (k == f->nkinds && k < 32) {
            f->kind[k] = f->pname[i];
            f->kind_ms[k] = 0;
            f->nkinds++;
        }
        if (k < 32) f->kind_ms[k] += d;
    }
    if (pl.n_out) memcpy(logits, f->logits_h, (size_t)pl.n_out * f->V * 4);
    if (pl.hidden) memcpy(b->hidden_out, f->hidden_h, (size_t)b->n * f->E * 4);
    f->stats.rows_fast += pl.rows_fast;
    f->stats.rows_exact += pl.rows_exact;
    for (const Run &r : pl.rows)
        if (r.fast && f->blas_ran) f->stats.rows_cublas += (uint64_t)r.n;
    f->stats.gpu_ms = ms;
    f->stats.graph = use_graph;
    f->stats.total_ms = now_ms() - t0;
    return LS_OK;
}

/* ---- test hooks (cuda_test.h) --------------------------------------------------------------- */
extern "C" {
#include "backend/cuda/cuda_test.h"
}

ls_status ls_cuda_test_quant(const float *x, int M, int K, int8_t *q, float *dxs, ls_err *err) {
    const int xs = (int)lsc_nbp(K / 32);
    float *dx = NULL;
    int8_t *dq = NULL;
    float2 *dd = NULL;
    ls_status st = LS_OK;
    cudaError_t e;
#define T_CK(x)                                               \
    if ((e = (x)) != cudaSuccess) {                           \
        st = cuda_fail(err, e, #x, __LINE__);                 \
        goto done;                                            \
    }
    T_CK(cudaMalloc((void **)&dx, (size_t)M * K * 4));
    T_CK(cudaMalloc((void **)&dq, (size_t)M * xs * 32));
    T_CK(cudaMalloc((void **)&dd, (size_t)M * xs * 8));
    T_CK(cudaMemcpy(dx, x, (size_t)M * K * 4, cudaMemcpyHostToDevice));
    T_CK(lsc_quant(dx, K, M, K, dq, dd, xs, lsc_stream()));
    T_CK(cudaDeviceSynchronize());
    for (int m = 0; m < M; m++) {
        T_CK(cudaMemcpy(q + (size_t)m * K, dq + (size_t)m * xs * 32, (size_t)K, cudaMemcpyDeviceToHost));
        T_CK(cudaMemcpy(dxs + (size_t)m * (K / 32) * 2, dd + (size_t)m * xs, (size_t)(K / 32) * 8, cudaMemcpyDeviceToHost));
    }
done:
    cudaFree(dx);
    cudaFree(dq);
    cudaFree(dd);
    return st;
}

ls_status ls_cuda_test_matmul(uint32_t type, int64_t N, int64_t K, const void *w, int M, const float *x, int kernel,
                              float *y, ls_err *err) {
    cudaError_t e0 = lsc_mma_init();
    if (e0 != cudaSuccess) return cuda_fail(err, e0, "lsc_mma_init", __LINE__);
    DMat d;
    ls_status st = dmat_alloc(&d, (int)type, N, K, err);
    if (st) return st;
    uint8_t *tmp = NULL;
    float *dx = NULL, *dy = NULL;
    int8_t *dq = NULL;
    float2 *dd = NULL;
    const int xs = (int)lsc_nbp(K / 32 + 1);
    lsc_mat_src s;
    cudaError_t e;
    s.type = type;
    s.N = N;
    s.K = K;
    s.data = (const uint8_t *)w;
    s.row_bytes = lsc_is_float((int)type) ? (size_t)K * (type == LSC_F32 ? 4 : 2)
                                          : (size_t)(K / lsc_blk_elems((int)type)) * lsc_blk_bytes((int)type);
    s.nbytes = s.row_bytes * (uint64_t)N;
    T_CK(cudaMalloc((void **)&tmp, s.nbytes));
    if ((st = dmat_fill(&d, &s, 0, 1 << 30, 0, tmp, err))) goto done;
    T_CK(cudaMalloc((void **)&dx, (size_t)M * K * 4));
    T_CK(cudaMalloc((void **)&dy, (size_t)M * N * 4));
    T_CK(cudaMalloc((void **)&dq, (size_t)M * xs * 32));
    T_CK(cudaMalloc((void **)&dd, (size_t)M * xs * 8));
    T_CK(cudaMemcpy(dx, x, (size_t)M * K * 4, cudaMemcpyHostToDevice));
    T_CK(cudaMemset(dy, 0xff, (size_t)M * N * 4)); /* poison: every output must be written */
    if (lsc_is_float((int)type)) {
        T_CK(lsc_gemv_float(d.m, dx, (int)K, M, dy, (int)N, LSC_MODE_STORE, lsc_stream()));
    } else if (kernel == LS_CUDA_K_FAST) {
        if (!blas_load()) {
            st = ls_err_set(err, LS_E_UNSUPPORTED, "no cuBLAS");
            goto done;
        }
        __half *wh = NULL, *xh = NULL;
        cublasHandle_t h;
        T_CK(cudaMalloc((void **)&wh, (size_t)N * K * 2));
        T_CK(cudaMalloc((void **)&xh, (size_t)M * K * 2));
        g_blas.create(&h);
        const float one = 1.0f, zero = 0.0f;
        T_CK(lsc_dequant_half(d.m, wh, lsc_stream()));
        T_CK(lsc_f2h(dx, (int)K, M, (int)K, xh, lsc_stream()));
        g_blas.gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, M, (int)K, &one, wh, CUDA_R_16F, (int)K, xh, CUDA_R_16F, (int)K,
                    &zero, dy, CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        T_CK(cudaDeviceSynchronize());
        g_blas.destroy(h);
        cudaFree(wh);
        cudaFree(xh);
    } else {
        T_CK(lsc_quant(dx, (int)K, M, (int)K, dq, dd, xs, lsc_stream()));
        const lsc_act a = {dq, dd, xs};
        if (kernel == LS_CUDA_K_GEMV) {
            T_CK(lsc_gemv(d.m, a, M, dy, (int)N, LSC_MODE_STORE, lsc_stream()));
        }
        if (kernel > LS_CUDA_K_GEMV_NWR && kernel <= LS_CUDA_K_GEMV_NWR + 4) {
            lsc_stream ls;
            ls.gemv_nwr = kernel - LS_CUDA_K_GEMV_NWR;
            T_CK(lsc_gemv(d.m, a, M, dy, (int)N, LSC_MODE_STORE, ls));
        }
        if (kernel == LS_CUDA_K_MMA) {
            float *part = NULL;
            const size_t pf = (size_t)8 * M * N;
            T_CK(cudaMalloc((void **)&part, pf * 4));
            T_CK(lsc_mma(d.m, a, M, dy, (int)N, LSC_MODE_STORE, part, pf, lsc_stream()));
            T_CK(cudaDeviceSynchronize());
            cudaFree(part);
        }
        const bool v2 = kernel > LS_CUDA_K_MMA2 && kernel <= LS_CUDA_K_MMA2 + 3,
                   sm = kernel > LS_CUDA_K_MMA2S && kernel <= LS_CUDA_K_MMA2S + 2;
        if (v2 || sm) {
            float *part = NULL;
            const size_t pf = (size_t)8 * M * N;
            lsc_stream ls(0, 0, 1, 1, v2 ? kernel - LS_CUDA_K_MMA2 : 4);
            ls.mma_small = sm ? kernel - LS_CUDA_K_MMA2S : 0; /* configurations 1..3: k_mma under 33 rows, as before */
            T_CK(cudaMalloc((void **)&part, pf * 4));
            T_CK(lsc_mma(d.m, a, M, dy, (int)N, LSC_MODE_STORE, part, pf, ls));
            T_CK(cudaDeviceSynchronize());
            cudaFree(part);
        }
    }
    T_CK(cudaDeviceSynchronize());
    T_CK(cudaMemcpy(y, dy, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
done:
    cudaFree(tmp);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dq);
    cudaFree(dd);
    dmat_free(&d);
    return st;
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

ls_status ls_cuda_test_bandwidth(size_t bytes, int reps, double *copy_gbs, double *read_gbs, ls_err *err) {
    uint8_t *a = NULL, *b = NULL;
    unsigned *o = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *ms = (float *)calloc((size_t)reps, sizeof(float));
    ls_status st = LS_OK;
    cudaError_t e;
    int sms = 0;
    T_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    T_CK(cudaMalloc((void **)&a, bytes));
    T_CK(cudaMalloc((void **)&b, bytes));
    T_CK(cudaMalloc((void **)&o, 4096 * sizeof(unsigned)));
    T_CK(cudaMemset(a, 1, bytes));
    T_CK(cudaMemset(b, 2, bytes));
    T_CK(cudaEventCreate(&e0));
    T_CK(cudaEventCreate(&e1));
    for (int k = 0; k < 2; k++) {
        for (int i = -2; i < reps; i++) { /* two warm-ups */
            T_CK(cudaEventRecord(e0, 0));
            if (k == 0) {
                T_CK(cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, bytes, cudaMemcpyDeviceToDevice, 0));
            } else {
                T_CK(lsc_read_probe(i & 1 ? a : b, bytes, o, sms * 4, lsc_stream()));
            }
            T_CK(cudaEventRecord(e1, 0));
            T_CK(cudaEventSynchronize(e1));
            if (i >= 0) T_CK(cudaEventElapsedTime(&ms[i], e0, e1));
        }
        qsort(ms, (size_t)reps, sizeof(float), cmp_f);
        const double med = ms[reps / 2] * 1e-3;
        if (k == 0) *copy_gbs = 2.0 * (double)bytes / med / 1e9;
        else *read_gbs = (double)bytes / med / 1e9;
    }
done:
    cudaFree(a);
    cudaFree(b);
    cudaFree(o);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    free(ms);
    return st;
}

ls_status ls_cuda_test_mm_bench(uint32_t type, int64_t N, int64_t K, const void *w, int M, int kernel, int nw, int pdl,
                                int reps, double *ms, double *gbs, ls_err *err) {
    const bool v2 = kernel > LS_CUDA_K_MMA2 && kernel <= LS_CUDA_K_MMA2 + 3,
               sm = kernel > LS_CUDA_K_MMA2S && kernel <= LS_CUDA_K_MMA2S + 2;
    lsc_stream ls(0, 0, nw ? nw : 1, kernel == 3 ? 2 : 1, v2 ? kernel - LS_CUDA_K_MMA2 : sm ? 4 : 0);
    ls.gemv_nwr = M > 1 ? nw : 0; /* runs of 2..8 rows: nw weight rows per warp (0: the default choice) */
    ls.mma_small = sm ? kernel - LS_CUDA_K_MMA2S : 0;
    if (kernel == 3 || v2 || sm) kernel = LS_CUDA_K_MMA;
    cudaError_t e = lsc_mma_init();
    if (e != cudaSuccess) return cuda_fail(err, e, "lsc_mma_init", __LINE__);
    DMat d[16];
    memset(d, 0, sizeof d);
    int nc = 0;
    ls_status st = LS_OK;
    uint8_t *tmp = NULL;
    float *dx = NULL, *dy = NULL, *part = NULL;
    int8_t *dq = NULL;
    float2 *dd = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    const int xs = (int)lsc_nbp(K / 32 + 1);
    const size_t pf = (size_t)8 * M * N;
    lsc_mat_src s;
    s.type = type;
    s.N = N;
    s.K = K;
    s.data = (const uint8_t *)w;
    s.row_bytes = (size_t)(K / lsc_blk_elems((int)type)) * lsc_blk_bytes((int)type);
    s.nbytes = s.row_bytes * (uint64_t)N;
    T_CK(cudaMalloc((void **)&tmp, s.nbytes));
    for (nc = 0; nc < 16; nc++) { /* copies of the matrix until they outgrow the L2 four times over */
        if ((st = dmat_alloc(&d[nc], (int)type, N, K, err)) || (st = dmat_fill(&d[nc], &s, 0, 1 << 30, 0, tmp, err))) goto done;
        if ((uint64_t)(nc + 1) * d[0].bytes > ((uint64_t)256 << 20)) {
            nc++;
            break;
        }
    }
    T_CK(cudaMalloc((void **)&dx, (size_t)M * K * 4));
    T_CK(cudaMalloc((void **)&dy, (size_t)M * N * 4));
    T_CK(cudaMalloc((void **)&dq, (size_t)M * xs * 32));
    T_CK(cudaMalloc((void **)&dd, (size_t)M * xs * 8));
    T_CK(cudaMalloc((void **)&part, pf * 4));
    T_CK(cudaMemset(dx, 0, (size_t)M * K * 4));
    T_CK(lsc_quant(dx, (int)K, M, (int)K, dq, dd, xs, lsc_stream()));
    T_CK(cudaEventCreate(&e0));
    T_CK(cudaEventCreate(&e1));
    {
        const lsc_act a = {dq, dd, xs};
        for (int pass = 0; pass < 2; pass++) { /* a warm-up pass, then the timed one */
            T_CK(cudaEventRecord(e0, 0));
            for (int i = 0; i < reps; i++) {
                ls.pdl = pdl && i > 0;
                if (kernel == LS_CUDA_K_GEMV) {
                    T_CK(lsc_gemv(d[i % nc].m, a, M, dy, (int)N, LSC_MODE_STORE, ls));
                } else {
                    T_CK(lsc_mma(d[i % nc].m, a, M, dy, (int)N, LSC_MODE_STORE, part, pf, ls));
                }
            }
            T_CK(cudaEventRecord(e1, 0));
            T_CK(cudaEventSynchronize(e1));
        }
        float t = 0;
        T_CK(cudaEventElapsedTime(&t, e0, e1));
        *ms = t / reps;
        *gbs = (double)d[0].bytes / (*ms * 1e-3) / 1e9;
    }
done:
    for (int i = 0; i < 16; i++) dmat_free(&d[i]);
    cudaFree(tmp);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dq);
    cudaFree(dd);
    cudaFree(part);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}
