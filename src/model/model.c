/* model.c - loading a Llama-architecture model from GGUF: hyperparameters from
 * metadata, weight views over the mmap, the tokenizer and the chat template. */
#include "model/model_impl.h"
#include "kernels/cpu/internal.h"
#include "util/alloc.h"
#include "util/util.h"

#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads "{arch}.suffix" as u32.  A missing key is an error unless def is given. */
static ls_status get_arch_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out,
                              const uint32_t *def, ls_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (def && !gguf_find(f, key)) {
        *out = *def;
        return LS_OK;
    }
    return gguf_get_u32(f, key, out, err);
}

static ls_status get_arch_f32(const gguf_file *f, const char *arch, const char *suffix, float *out,
                              const float *def, ls_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (def && !gguf_find(f, key)) {
        *out = *def;
        return LS_OK;
    }
    return gguf_get_f32(f, key, out, err);
}

static void copy_str(char *dst, size_t cap, gguf_str s) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

static ls_status read_hparams(const gguf_file *f, ls_hparams *hp, const ls_arch **arch_out, ls_err *err) {
    gguf_str arch;
    ls_status st = gguf_get_str(f, "general.architecture", &arch, err);
    if (st) return st;
    copy_str(hp->arch, sizeof hp->arch, arch);
    /* The family's descriptor (arch.c). */
    const ls_arch *ad = ls_arch_find(hp->arch);
    if (!ad) {
        char names[128];
        ls_arch_names(names, sizeof names);
        return ls_err_set(err, LS_E_UNSUPPORTED, "unsupported architecture '%s' (general.architecture; supported: %s)",
                          hp->arch, names);
    }
    *arch_out = ad;
    gguf_str name;
    if (gguf_find(f, "general.name") && gguf_get_str(f, "general.name", &name, NULL) == LS_OK)
        copy_str(hp->name, sizeof hp->name, name);
    const char *a = hp->arch;
    if ((st = get_arch_u32(f, a, "embedding_length", &hp->n_embd, NULL, err))) return st;
    if ((st = get_arch_u32(f, a, "block_count", &hp->n_layer, NULL, err))) return st;
    const uint32_t zero = 0;
    if ((st = get_arch_u32(f, a, "nextn_predict_layers", &hp->n_nextn, &zero, err))) return st;
    if (hp->n_nextn > 1)
        return ls_err_set(err, LS_E_UNSUPPORTED, "nextn_predict_layers = %u: only one MTP module is supported",
                          hp->n_nextn);
    if (hp->n_nextn >= hp->n_layer)
        return ls_err_set(err, LS_E_FORMAT, "nextn_predict_layers %u leaves no trunk in block_count %u",
                          hp->n_nextn, hp->n_layer);
    hp->n_layer -= hp->n_nextn; /* the MTP block comes after the trunk */
    if ((st = get_arch_u32(f, a, "attention.head_count", &hp->n_head, NULL, err))) return st;
    if ((st = get_arch_u32(f, a, "attention.head_count_kv", &hp->n_head_kv, &hp->n_head, err))) return st;
    if ((st = get_arch_u32(f, a, "feed_forward_length", &hp->n_ff, NULL, err))) return st;
    const uint32_t ctx_def = 4096;
    if ((st = get_arch_u32(f, a, "context_length", &hp->n_ctx_train, &ctx_def, err))) return st;
    if ((st = get_arch_f32(f, a, "attention.layer_norm_rms_epsilon", &hp->norm_eps, NULL, err))) return st;
    const float base_def = ad->rope_base_default;
    if ((st = get_arch_f32(f, a, "rope.freq_base", &hp->rope_base, &base_def, err))) return st;
    hp->n_ctx_file = hp->n_ctx_train;
    hp->embd_scale = (ad->feats & LS_AF_EMBD_SCALE) ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->rope_base_swa = ad->swa_pattern ? ad->rope_base_swa : hp->rope_base;
    if (ad->swa_pattern) {
        if ((st = get_arch_u32(f, a, "attention.sliding_window", &hp->n_swa, NULL, err))) return st;
        if (hp->n_swa == 0) return ls_err_set(err, LS_E_FORMAT, "%s.attention.sliding_window is 0", a);
        /* The window layers' rows attend the last n_swa positions (ls_attention); a window
         * no shorter than any context is none. */
        if (hp->n_swa > (1u << 30)) hp->n_swa = 1u << 30;
    }
    char skey[128];
    snprintf(skey, sizeof skey, "%s.final_logit_softcapping", a);
    if (gguf_find(f, skey)) return ls_err_set(err, LS_E_UNSUPPORTED, "metadata '%s' (logit soft-capping) is not supported", skey);
    snprintf(skey, sizeof skey, "%s.attn_logit_softcapping", a);
    if (gguf_find(f, skey)) return ls_err_set(err, LS_E_UNSUPPORTED, "metadata '%s' (logit soft-capping) is not supported", skey);

    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_ff == 0)
        return ls_err_set(err, LS_E_FORMAT, "hyperparameter is zero (embd %u, layers %u, heads %u/%u, ff %u)",
                          hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff);
    char kl_key[128];
    snprintf(kl_key, sizeof kl_key, "%s.attention.key_length", a);
    if (hp->n_embd % hp->n_head != 0 && !gguf_find(f, kl_key))
        return ls_err_set(err, LS_E_FORMAT, "embedding_length %u is not a multiple of head_count %u (and no %s)",
                          hp->n_embd, hp->n_head, kl_key);
    if (hp->n_head % hp->n_head_kv != 0)
        return ls_err_set(err, LS_E_FORMAT, "head_count %u is not a multiple of head_count_kv %u", hp->n_head,
                          hp->n_head_kv);
    uint32_t hd_def = hp->n_embd / hp->n_head;
    if ((st = get_arch_u32(f, a, "attention.key_length", &hp->head_dim, &hd_def, err))) return st;
    uint32_t vlen = hp->head_dim;
    if ((st = get_arch_u32(f, a, "attention.value_length", &vlen, &hp->head_dim, err))) return st;
    if (vlen != hp->head_dim)
        return ls_err_set(err, LS_E_UNSUPPORTED, "key_length %u != value_length %u is not supported",
                          hp->head_dim, vlen);
    if (hp->head_dim == 0 || hp->head_dim % 2 != 0 || hp->head_dim > 1024)
        return ls_err_set(err, LS_E_FORMAT, "bad head dimension %u", hp->head_dim);
    if ((st = get_arch_u32(f, a, "rope.dimension_count", &hp->rope_dim, &hp->head_dim, err))) return st;
    if (hp->rope_dim == 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return ls_err_set(err, LS_E_FORMAT, "rope.dimension_count %u is invalid for head dimension %u",
                          hp->rope_dim, hp->head_dim);

    /* RoPE scaling: none, linear or YaRN, read as llama.cpp reads them (a factor without a
     * type is linear).  Others change the rotation and are refused rather than run wrong. */
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_str stype = {0, NULL};
    if (gguf_find(f, key) && (st = gguf_get_str(f, key, &stype, err))) return st;
    float factor = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    if (gguf_find(f, key) && (st = gguf_get_f32(f, key, &factor, err))) return st;
    hp->rope_yarn = stype.ptr && gguf_str_eq(stype, "yarn");
    bool linear = stype.ptr ? gguf_str_eq(stype, "linear") : (factor != 1.0f && factor != 0.0f);
    if (stype.ptr && !gguf_str_eq(stype, "none") && !gguf_str_eq(stype, "linear") && !hp->rope_yarn)
        return ls_err_set(err, LS_E_UNSUPPORTED, "rope scaling type '%.*s' is not supported (none, linear, yarn)",
                          (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    if (linear || hp->rope_yarn) {
        if (!(factor > 0.0f) || !isfinite(factor))
            return ls_err_set(err, LS_E_FORMAT, "rope.scaling.factor %g is invalid", (double)factor);
        hp->rope_freq_scale = 1.0f / factor;
    }
    if (hp->rope_yarn) {
        if ((st = get_arch_u32(f, a, "rope.scaling.original_context_length", &hp->yarn_n_ctx_orig, &hp->n_ctx_train,
                               err)))
            return st;
        const float one = 1.0f, bf = 32.0f;
        if ((st = get_arch_f32(f, a, "rope.scaling.attn_factor", &hp->yarn_attn_factor, &one, err)) ||
            (st = get_arch_f32(f, a, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, &bf, err)) ||
            (st = get_arch_f32(f, a, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, &one, err)))
            return st;
        if (hp->yarn_n_ctx_orig == 0 || !(hp->yarn_attn_factor > 0.0f) || !isfinite(hp->yarn_attn_factor) ||
            !(hp->yarn_beta_fast > 0.0f) || !(hp->yarn_beta_slow > 0.0f) || !isfinite(hp->yarn_beta_fast) ||
            !isfinite(hp->yarn_beta_slow))
            return ls_err_set(err, LS_E_FORMAT,
                              "bad YaRN parameters (original_context_length %u, attn_factor %g, beta_fast %g, "
                              "beta_slow %g)", hp->yarn_n_ctx_orig, (double)hp->yarn_attn_factor,
                              (double)hp->yarn_beta_fast, (double)hp->yarn_beta_slow);
        /* What the recipe does not compute: a DeepSeek-style log multiplier, another
         * extrapolation mix, an attention factor of another meaning. */
        static const char *const k_yarn_refused[] = {"rope.scaling.yarn_log_multiplier",
                                                     "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"};
        for (size_t i = 0; i < sizeof k_yarn_refused / sizeof k_yarn_refused[0]; i++) {
            snprintf(key, sizeof key, "%s.%s", a, k_yarn_refused[i]);
            if (gguf_find(f, key))
                return ls_err_set(err, LS_E_UNSUPPORTED, "metadata '%s' (YaRN variant) is not supported", key);
        }
    }
    if (gguf_find_tensor(f, "rope_freqs.weight") && !(ad->feats & LS_AF_ROPE_FREQS))
        return ls_err_set(err, LS_E_UNSUPPORTED, "tensor 'rope_freqs.weight' is not supported for architecture '%s'", a);
    return LS_OK;
}

/* Finds a tensor and checks its shape: ne0 (contiguous) x ne1. */
static ls_status find_tensor(const gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1,
                             const gguf_tensor **out, ls_err *err) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return ls_err_set(err, LS_E_FORMAT, "missing tensor '%s'", name);
    uint64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ls_err_set(err, LS_E_FORMAT,
                          "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]", name,
                          (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                          (unsigned long long)ne0, (unsigned long long)want1);
    *out = t;
    return LS_OK;
}

/* Records a matrix to build (its tensor and where the model keeps it); build_matrices
 * builds them all, on every core, once the whole table is checked. */
static ls_status add_matrix(ls_model *m, const gguf_tensor *t, uint64_t N, uint64_t K, ls_wmat **out, ls_err *err) {
    (void)N, (void)K; /* the tensor's shape: checked by find_tensor ([K, N]) */
    if (m->n_mats == m->cap_mats) {
        int32_t nc = m->cap_mats ? 2 * m->cap_mats : 64;
        ls_wmat **a = ls_realloc(m->mats, (size_t)nc * sizeof *a);
        if (a) m->mats = a;
        const gguf_tensor **b = a ? ls_realloc(m->mat_src, (size_t)nc * sizeof *b) : NULL;
        if (b) m->mat_src = b;
        ls_wmat ***c = b ? ls_realloc(m->mat_dst, (size_t)nc * sizeof *c) : NULL;
        if (!c) return ls_err_set(err, LS_E_NOMEM, "out of memory");
        m->mat_dst = c;
        m->cap_mats = nc;
    }
    *out = NULL;
    m->mats[m->n_mats] = NULL;
    m->mat_src[m->n_mats] = t;
    m->mat_dst[m->n_mats++] = out;
    m->weight_bytes += t->nbytes;
    return LS_OK;
}

/* ---- building the weights on every core ---------------------------------------
 * Each matrix is built by one thread, whole (its bytes do not depend on the thread
 * count or the order: the repack is a permutation of the file's bytes).  The pages of
 * the file it was read from are given back (gguf_release) as the build goes, about 1 MiB
 * at a time (a panel build: ls_wmat_prepare_ex), and whole when it is done: the repacked
 * copy replaces them, and the process holds one copy of the weights, not the file's too,
 * nor a large matrix's file pages beside its new copy (a 262144 x 640 Q8_0 output head:
 * 178 MB). */
typedef struct {
    ls_model *m;
    bool prep;          /* ls_model_prepare's pass (else the load's) */
    ls_isa isa;
    uint8_t *arena;
    pthread_mutex_t mu; /* guards what follows */
    int32_t next;       /* the next matrix to take */
    size_t used;        /* arena bytes handed out */
    int32_t fail_at;    /* the lowest matrix that failed (n_mats: none), its error in ferr */
    ls_err ferr;
} ls_par;

static bool repacked(const gguf_tensor *t) {
    return t->type != LS_TYPE_F32 && t->type != LS_TYPE_F16 && t->type != LS_TYPE_BF16; /* those are read in place */
}

/* Gives back the file pages of [p, p + n) (ls_wmat_prepare_ex's done: the source rows a
 * panel build has read, while it builds the rest). */
static void give_back(void *ctx, const void *p, size_t n) {
    const ls_model *m = ctx;
    gguf_release(m->gguf, p, n); /* a no-op outside the file's mapping */
    if (m->mtp_gguf) gguf_release(m->mtp_gguf, p, n);
}

static void *par_worker(void *arg) {
    ls_par *P = arg;
    ls_model *m = P->m;
    for (;;) {
        pthread_mutex_lock(&P->mu);
        int32_t i = P->fail_at < m->n_mats ? m->n_mats : P->next++;
        size_t off = P->used, b = 0;
        if (i < m->n_mats && P->prep) P->used += (b = ls_wmat_prepare_bytes(m->mats[i], P->isa));
        pthread_mutex_unlock(&P->mu);
        if (i >= m->n_mats) return NULL;
        const gguf_tensor *t = m->mat_src[i];
        if (P->prep) { /* cannot fail: every byte it needs is in the arena */
            LS_ASSERT(ls_wmat_prepare_ex(m->mats[i], P->isa, b ? P->arena + off : NULL, give_back, m, NULL) == LS_OK);
        } else {
            ls_err e;
            m->mats[i] = ls_wmat_create(t->type, (int64_t)t->ne[1], (int64_t)t->ne[0], t->data, &e);
            if (!m->mats[i]) {
                pthread_mutex_lock(&P->mu);
                if (i < P->fail_at) {
                    P->fail_at = i;
                    P->ferr = e;
                }
                pthread_mutex_unlock(&P->mu);
                continue;
            }
        }
        /* (at the load, only where creation built the matrix's layout, MXFP4's group records:
         * the panel types' copy is built from the file's pages by ls_model_prepare) */
        if (repacked(t) && (P->prep || !ls_wmat_prepare_bytes(m->mats[i], LS_ISA_SCALAR))) {
            gguf_release(m->gguf, t->data, t->nbytes); /* a no-op outside the file's mapping */
            if (m->mtp_gguf) gguf_release(m->mtp_gguf, t->data, t->nbytes);
        }
    }
}

/* Runs P over every matrix on the CPUs this process may use (at most 64). */
static void par_run(ls_par *P) {
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef CPU_COUNT
    cpu_set_t cs;
    if (sched_getaffinity(0, sizeof cs, &cs) == 0 && CPU_COUNT(&cs) < nc) nc = CPU_COUNT(&cs);
#endif
    int32_t nt = nc < 1 ? 1 : nc > 64 ? 64 : (int32_t)nc;
    if (nt > P->m->n_mats) nt = P->m->n_mats;
    pthread_mutex_init(&P->mu, NULL);
    P->next = 0;
    P->used = 0;
    P->fail_at = P->m->n_mats;
    pthread_t th[64];
    int32_t started = 0;
    for (int32_t k = 1; k < nt; k++, started++)
        if (pthread_create(&th[started], NULL, par_worker, P) != 0) break; /* fewer threads: the same result */
    par_worker(P);
    for (int32_t k = 0; k < started; k++) pthread_join(th[k], NULL);
    pthread_mutex_destroy(&P->mu);
}

/* Creates every listed matrix (MXFP4's group records are built here; the other quantized
 * types' panel copy at ls_model_prepare) and stores each where the model keeps it. */
static ls_status build_matrices(ls_model *m, ls_err *err) {
    ls_par P = {.m = m};
    par_run(&P);
    if (P.fail_at < m->n_mats) {
        if (err) *err = P.ferr;
        return P.ferr.code;
    }
    for (int32_t i = 0; i < m->n_mats; i++) *m->mat_dst[i] = m->mats[i];
    free(m->mat_dst); /* the layer fields it points to are set */
    m->mat_dst = NULL;
    return LS_OK;
}

/* 2 MiB pages for an arena of `cap` bytes?  They cut the TLB misses of streaming the
 * weights (a nested page walk in a VM); measured (one process, a model of each kind,
 * their engines interleaved, 2 threads, 80-250 positions, six runs): decode steps at
 * B = 1 0.87-1.00x, at B = 8 0.88-0.98x the time with 4 KiB pages.  But each first touch
 * of a 2 MiB page costs more than 512 of 4 KiB where the host backs a VM's free memory
 * lazily: on a 2-vCPU Firecracker guest the 5 GB arena of an 8B-shaped Q4_K_M file took
 * 6-18 s more system time to fault in (a load of 2 s became 5-12 s), with no decode or
 * prefill difference measurable over 290 positions (3 interleaved pairs).  So by default
 * an arena up to 1 GiB gets them, a larger one not; LOCKSTEP_HUGEPAGES=on or off decides
 * instead (a server of a large model may prefer on; its load then takes longer). */
static ls_status want_hugepages(size_t cap, bool *huge, ls_err *err) {
    const char *e = getenv("LOCKSTEP_HUGEPAGES");
    if (!e || !*e || !strcmp(e, "auto")) *huge = cap <= ((size_t)1 << 30);
    else if (!strcmp(e, "on")) *huge = true;
    else if (!strcmp(e, "off")) *huge = false;
    else return ls_err_set(err, LS_E_INVALID, "LOCKSTEP_HUGEPAGES='%.40s': expected on, off or auto", e);
    return LS_OK;
}

/* What the ISA's kernels need beyond what the load built (the panel copy of the quantized
 * matrices but MXFP4, their one repacked layout, shared by every ISA: the second ISA finds
 * it built and needs 0 bytes), built on first use of an ISA with this model, for every
 * matrix, in one arena (of 2 MiB pages where want_hugepages says so and the kernel grants
 * them).  A model that never runs (info, tokenize) builds none of it. */
ls_status ls_model_prepare(const ls_model *cm, ls_isa isa, ls_err *err) {
    ls_model *m = (ls_model *)cm; /* a lazily built cache, guarded by prep_mu: the model stays logically const */
    ls_status st = LS_OK;
    if (m->meta_only)
        return ls_err_set(err, LS_E_INVALID, "the model was loaded without its weights (LS_MODEL_LOAD_META): "
                                             "nothing can run over it");
    pthread_mutex_lock(&m->prep_mu);
    if (m->prepared & (1u << isa)) goto out;
    size_t cap = 0;
    for (int32_t i = 0; i < m->n_mats; i++) {
        size_t b = ls_wmat_prepare_bytes(m->mats[i], isa);
        if (b > SIZE_MAX / 4 - cap) {
            st = ls_err_set(err, LS_E_FORMAT, "the weights' %s layout overflows size_t", ls_isa_name(isa));
            goto out;
        }
        cap += b;
    }
    uint8_t *arena = NULL;
    bool use_huge = false;
    if (cap && (st = want_hugepages(cap, &use_huge, err))) goto out;
    if (cap) {
        const size_t huge = (size_t)2 << 20;
        cap = (cap + huge - 1) & ~(huge - 1);
        if (!(arena = ls_aligned_alloc(huge, cap))) {
            st = ls_err_set(err, LS_E_NOMEM, "out of memory allocating %zu MiB for the weights' %s layout", cap >> 20,
                            ls_isa_name(isa));
            goto out;
        }
#ifdef MADV_HUGEPAGE
        if (use_huge) (void)madvise(arena, cap, MADV_HUGEPAGE); /* advice only: 4 KiB pages work too */
#endif
    }
    ls_par P = {.m = m, .prep = true, .isa = isa, .arena = arena};
    par_run(&P); /* every matrix's layout, from the file's pages, which it then gives back */
    LS_ASSERT(P.used <= cap);
    m->prep_arena[isa] = arena; /* freed after every matrix that points into it (ls_model_free) */
    m->prepared |= 1u << isa;
out:
    pthread_mutex_unlock(&m->prep_mu);
    return st;
}

static ls_status load_matrix(ls_model *m, const gguf_file *f, const char *name, uint64_t K, uint64_t N,
                             ls_wmat **out, ls_err *err) {
    const gguf_tensor *t;
    ls_status st = find_tensor(f, name, K, N, &t, err);
    if (st) return st;
    if (!ls_matmul_type_supported(t->type)) {
        const ls_type_info *ti = ls_type_get(t->type);
        return ls_err_set(err, LS_E_UNSUPPORTED, "tensor '%s' has type %s, which has no matmul kernel", name,
                          ti ? ti->name : "?");
    }
    return add_matrix(m, t, N, K, out, err);
}

/* Norm weights are dequantized into owned float arrays (they are tiny). */
static ls_status load_vector(ls_model *m, const gguf_file *f, const char *name, uint64_t n, float **out,
                             ls_err *err) {
    (void)m;
    const gguf_tensor *t;
    ls_status st = find_tensor(f, name, n, 0, &t, err);
    if (st) return st;
    const ls_type_info *ti = ls_type_get(t->type);
    if (!ti || !ti->can_dequant)
        return ls_err_set(err, LS_E_UNSUPPORTED, "tensor '%s' has unsupported type %s", name,
                          ti ? ti->name : "?");
    float *v = ls_malloc(n * sizeof *v);
    if (!v) return ls_err_set(err, LS_E_NOMEM, "out of memory loading '%s'", name);
    ls_dequant_row(t->type, t->data, v, (int64_t)n);
    *out = v;
    return LS_OK;
}

/* ---- an MTP head over part of the vocabulary ---------------------------------
 * lockstep.mtp.head_vocab (an array of token ids, ascending, no repeats) restricts the
 * module's head to those tokens: a draft is the best of them.  Verification is what it
 * always is, so answers do not change; a draft costs less (the head is most of a small
 * module's bytes).  Without a head of its own the module uses those rows of the model's
 * output, copied from the file byte for byte: each row's logit is the one the full head
 * computes, by the same recipe. */
static ls_status load_mtp_vocab(ls_model *m, const gguf_file *mf, ls_err *err) {
    static const char key[] = "lockstep.mtp.head_vocab";
    if (!gguf_find(mf, key)) return LS_OK;
    const gguf_value *a;
    ls_err e;
    if (gguf_get_arr(mf, key, GGUF_VT_COUNT, &a, &e)) return ls_err_set(err, LS_E_FORMAT, "MTP module: %s", e.msg);
    const uint64_t n = a->v.arr.n, nv = m->hp.n_vocab;
    if (n == 0 || n > nv)
        return ls_err_set(err, LS_E_FORMAT, "MTP module: %s has %llu tokens (1 to the vocabulary's %llu)", key,
                          (unsigned long long)n, (unsigned long long)nv);
    switch (a->v.arr.elem_type) {
    case GGUF_VT_INT8: case GGUF_VT_UINT8: case GGUF_VT_INT16: case GGUF_VT_UINT16:
    case GGUF_VT_INT32: case GGUF_VT_UINT32: case GGUF_VT_INT64: case GGUF_VT_UINT64: break;
    default:
        return ls_err_set(err, LS_E_FORMAT, "MTP module: %s is an array of %s, not of token ids", key,
                          gguf_vtype_name(a->v.arr.elem_type));
    }
    if (!(m->mtp_vocab = ls_malloc(n * sizeof *m->mtp_vocab))) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        int64_t t = gguf_arr_i64(a, i);
        if (t < 0 || (uint64_t)t >= nv || (i > 0 && t <= m->mtp_vocab[i - 1]))
            return ls_err_set(err, LS_E_FORMAT, "MTP module: %s[%llu] = %lld is %s", key, (unsigned long long)i,
                              (long long)t, t < 0 || (uint64_t)t >= nv ? "not a token of the vocabulary"
                                                                        : "not above the id before it");
        m->mtp_vocab[i] = (int32_t)t;
    }
    m->n_mtp_vocab = (int32_t)n;
    return LS_OK;
}

static const gguf_tensor *output_src(const ls_model *m) {
    for (int32_t i = 0; i < m->n_mats; i++)
        if (m->mat_dst[i] == &m->output) return m->mat_src[i];
    return NULL;
}

static uint64_t output_bytes(const ls_model *m) {
    const gguf_tensor *t = output_src(m);
    return t ? t->nbytes : 0;
}

static ls_status gather_head_rows(ls_model *m, ls_err *err) {
    const gguf_tensor *t = output_src(m);
    LS_ASSERT(t && t->ne[1] == m->hp.n_vocab);
    const size_t rb = t->nbytes / t->ne[1], n = (size_t)m->n_mtp_vocab;
    if (!(m->mtp_head_rows = ls_malloc(n * rb))) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        memcpy((uint8_t *)m->mtp_head_rows + i * rb, (const uint8_t *)t->data + (size_t)m->mtp_vocab[i] * rb, rb);
    gguf_tensor *h = &m->mtp_head_src;
    *h = *t;
    h->ne[1] = n;
    h->n_elems = n * t->ne[0];
    h->nbytes = n * rb;
    h->offset = 0;
    h->data = m->mtp_head_rows;
    return add_matrix(m, h, n, t->ne[0], &m->mtp_head, err);
}

/* ---- the tensor table ------------------------------------------------------
 * Every blk.N tensor a family may have: a matrix (k columns, n rows: ggml's
 * [ne0, ne1] = [k, n]) or a vector of k floats, loaded into the ls_layer field at
 * `off` when the family has `feat` (0: every family), and then required.  The order
 * is the order the matrices are listed in (the llama path's is unchanged). */
typedef enum { LS_DIM_NONE, LS_DIM_E, LS_DIM_Q, LS_DIM_KV, LS_DIM_F, LS_DIM_HD } ls_dim;
typedef struct {
    const char *name;
    bool mat;
    ls_dim k, n;
    unsigned feat;
    size_t off;
} ls_tspec;
#define LOFF(f) offsetof(ls_layer, f)
static const ls_tspec k_block[] = {
    {"attn_norm.weight", false, LS_DIM_E, LS_DIM_NONE, 0, LOFF(attn_norm)},
    {"attn_q.weight", true, LS_DIM_E, LS_DIM_Q, 0, LOFF(wq)},
    {"attn_k.weight", true, LS_DIM_E, LS_DIM_KV, 0, LOFF(wk)},
    {"attn_v.weight", true, LS_DIM_E, LS_DIM_KV, 0, LOFF(wv)},
    {"attn_q.bias", false, LS_DIM_Q, LS_DIM_NONE, LS_AF_QKV_BIAS, LOFF(bq)},
    {"attn_k.bias", false, LS_DIM_KV, LS_DIM_NONE, LS_AF_QKV_BIAS, LOFF(bk)},
    {"attn_v.bias", false, LS_DIM_KV, LS_DIM_NONE, LS_AF_QKV_BIAS, LOFF(bv)},
    {"attn_q_norm.weight", false, LS_DIM_HD, LS_DIM_NONE, LS_AF_QK_NORM, LOFF(q_norm)},
    {"attn_k_norm.weight", false, LS_DIM_HD, LS_DIM_NONE, LS_AF_QK_NORM, LOFF(k_norm)},
    {"attn_output.weight", true, LS_DIM_Q, LS_DIM_E, 0, LOFF(wo)},
    {"post_attention_norm.weight", false, LS_DIM_E, LS_DIM_NONE, LS_AF_POST_NORMS, LOFF(post_attn_norm)},
    {"ffn_norm.weight", false, LS_DIM_E, LS_DIM_NONE, 0, LOFF(ffn_norm)},
    {"ffn_gate.weight", true, LS_DIM_E, LS_DIM_F, 0, LOFF(w_gate)},
    {"ffn_up.weight", true, LS_DIM_E, LS_DIM_F, 0, LOFF(w_up)},
    {"ffn_down.weight", true, LS_DIM_F, LS_DIM_E, 0, LOFF(w_down)},
    {"post_ffw_norm.weight", false, LS_DIM_E, LS_DIM_NONE, LS_AF_POST_NORMS, LOFF(post_ffn_norm)},
};
#undef LOFF

static uint64_t dim_of(const ls_hparams *hp, ls_dim d) {
    switch (d) {
    case LS_DIM_E: return hp->n_embd;
    case LS_DIM_Q: return (uint64_t)hp->n_head * hp->head_dim;
    case LS_DIM_KV: return (uint64_t)hp->n_head_kv * hp->head_dim;
    case LS_DIM_F: return hp->n_ff;
    case LS_DIM_HD: return hp->head_dim;
    default: return 0;
    }
}

static ls_status load_weights(ls_model *m, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    ls_status st;
    const gguf_file *f = m->gguf;
    const uint64_t E = hp->n_embd;

    const gguf_tensor *emb;
    if ((st = find_tensor(f, "token_embd.weight", E, hp->n_vocab, &emb, err))) return st;
    const ls_type_info *ti = ls_type_get(emb->type);
    if (!ti || !ti->can_dequant)
        return ls_err_set(err, LS_E_UNSUPPORTED, "tensor 'token_embd.weight' has unsupported type %s",
                          ti ? ti->name : "?");
    m->tok_embd = emb;
    m->tok_embd_row_bytes = emb->nbytes / hp->n_vocab;

    if ((st = load_vector(m, f, "output_norm.weight", E, &m->out_norm, err))) return st;
    if ((m->arch->feats & LS_AF_ROPE_FREQS) && gguf_find_tensor(f, "rope_freqs.weight")) {
        if ((st = load_vector(m, f, "rope_freqs.weight", hp->rope_dim / 2, &m->rope_freqs, err))) return st;
        for (uint32_t i = 0; i < hp->rope_dim / 2; i++)
            if (!(m->rope_freqs[i] > 0.0f) || !isfinite(m->rope_freqs[i]))
                return ls_err_set(err, LS_E_FORMAT, "tensor 'rope_freqs.weight' has a bad factor %g at %u",
                                  (double)m->rope_freqs[i], i);
    }
    hp = &m->hp;
    if (gguf_find_tensor(f, "output.weight")) {
        m->hp.tied_output = false;
        if ((st = load_matrix(m, f, "output.weight", E, hp->n_vocab, &m->output, err))) return st;
    } else {
        m->hp.tied_output = true;
        if (!ls_matmul_type_supported(emb->type))
            return ls_err_set(err, LS_E_UNSUPPORTED,
                              "tied output head: token_embd.weight type %s has no matmul kernel", ti->name);
        if ((st = add_matrix(m, emb, hp->n_vocab, E, &m->output, err))) return st;
    }

    m->layers = ls_calloc(hp->n_layer + hp->n_nextn, sizeof *m->layers);
    if (!m->layers) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    char name[96];
    uint64_t trunk_bytes = 0;
    for (uint32_t l = 0; l < hp->n_layer + hp->n_nextn; l++) {
        if (l == hp->n_layer) trunk_bytes = m->weight_bytes;
        ls_layer *L = &m->layers[l];
        const gguf_file *lf = l >= hp->n_layer && m->mtp_gguf ? m->mtp_gguf : f; /* the module's own file */
        for (size_t i = 0; i < sizeof k_block / sizeof k_block[0]; i++) {
            const ls_tspec *ts = &k_block[i];
            if (ts->feat && !(m->arch->feats & ts->feat)) continue;
            snprintf(name, sizeof name, "blk.%u.%s", l, ts->name);
            uint64_t k = dim_of(hp, ts->k), n = dim_of(hp, ts->n);
            if (ts->mat) {
                if ((st = load_matrix(m, lf, name, k, n, (ls_wmat **)((char *)L + ts->off), err))) return st;
            } else {
                if ((st = load_vector(m, lf, name, k, (float **)((char *)L + ts->off), err))) return st;
            }
        }
    }
    if (hp->n_nextn) { /* the MTP module's own tensors (llama.cpp's nextn names) */
        const uint32_t l = hp->n_layer;
        const gguf_file *mf = m->mtp_gguf ? m->mtp_gguf : f;
        snprintf(name, sizeof name, "blk.%u.nextn.enorm.weight", l);
        if ((st = load_vector(m, mf, name, E, &m->mtp_enorm, err))) return st;
        snprintf(name, sizeof name, "blk.%u.nextn.hnorm.weight", l);
        if ((st = load_vector(m, mf, name, E, &m->mtp_hnorm, err))) return st;
        snprintf(name, sizeof name, "blk.%u.nextn.shared_head_norm.weight", l);
        if ((st = load_vector(m, mf, name, E, &m->mtp_head_norm, err))) return st;
        snprintf(name, sizeof name, "blk.%u.nextn.eh_proj.weight", l);
        if ((st = load_matrix(m, mf, name, 2 * E, E, &m->mtp_eh_proj, err))) return st;
        if ((st = load_mtp_vocab(m, mf, err))) return st;
        snprintf(name, sizeof name, "blk.%u.nextn.shared_head_head.weight", l);
        const uint64_t nh = m->n_mtp_vocab ? (uint64_t)m->n_mtp_vocab : hp->n_vocab;
        const bool has_head = gguf_find_tensor(mf, name) != NULL;
        const bool own_head = has_head || m->n_mtp_vocab; /* (built later: mtp_head is NULL) */
        if (has_head) {
            if ((st = load_matrix(m, mf, name, E, nh, &m->mtp_head, err))) return st;
        } else if (m->n_mtp_vocab && (st = gather_head_rows(m, err))) {
            return st;
        }
        snprintf(name, sizeof name, "blk.%u.nextn.embed_tokens.weight", l);
        if (gguf_find_tensor(mf, name)) {
            const gguf_tensor *t;
            if ((st = find_tensor(mf, name, E, hp->n_vocab, &t, err))) return st;
            const ls_type_info *ei = ls_type_get(t->type);
            if (!ei || !ei->can_dequant)
                return ls_err_set(err, LS_E_UNSUPPORTED, "tensor '%s' has unsupported type %s", name,
                                  ei ? ei->name : "?");
            m->mtp_embd = t;
        }
        /* what a draft reads against what a target step reads: the module's block, eh_proj
         * and its head (the model's output when it shares it) */
        uint64_t mod = m->weight_bytes - trunk_bytes + (own_head ? 0 : output_bytes(m));
        m->mtp_cost = trunk_bytes ? (double)mod / (double)trunk_bytes : 1.0;
        m->weight_bytes = trunk_bytes; /* bytes per token count the trunk only */
    }
    return LS_OK;
}

/* ---- the plan (plan.h): every decision the forward makes, taken once here ---- */
static bool rope_params_eq(const ls_rope_params *a, const ls_rope_params *b) {
    return a->head_dim == b->head_dim && a->freq_base == b->freq_base && a->freq_scale == b->freq_scale &&
           a->neox == b->neox && a->yarn == b->yarn && a->yarn_n_ctx_orig == b->yarn_n_ctx_orig &&
           a->yarn_beta_fast == b->yarn_beta_fast && a->yarn_beta_slow == b->yarn_beta_slow &&
           a->yarn_attn_factor == b->yarn_attn_factor;
}

static ls_status ls_plan_build(ls_model *m, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    const ls_arch *ad = m->arch;
    ls_plan *P = &m->plan;
    P->embd_scale = hp->embd_scale;
    P->norm_eps = hp->norm_eps;
    P->out_norm = m->out_norm;
    P->output = m->output;
    ls_rope_params rp = {
        .n_ctx = (int32_t)(hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096),
        .head_dim = (int32_t)hp->rope_dim,
        .freq_base = hp->rope_base,
        .freq_scale = hp->rope_freq_scale,
        /* llama: adjacent pairs (the converter permutes Q/K for this); qwen, gemma: NeoX */
        .neox = (ad->feats & LS_AF_NEOX) != 0,
        .yarn = hp->rope_yarn,
        .yarn_n_ctx_orig = (int32_t)(hp->yarn_n_ctx_orig > INT32_MAX ? INT32_MAX : hp->yarn_n_ctx_orig),
        .yarn_beta_fast = hp->yarn_beta_fast,
        .yarn_beta_slow = hp->yarn_beta_slow,
        .yarn_attn_factor = hp->yarn_attn_factor,
    };
    P->n_rope = 1;
    P->rope[0] = (ls_rope_plan){rp, m->rope_freqs};
    if (ad->swa_pattern) { /* the local layers: their own base, no scaling (as llama.cpp: Gemma 3 4B+ scale
                            * only the global layers, linear factor 8) */
        ls_rope_params rs = rp;
        rs.freq_base = hp->rope_base_swa;
        rs.freq_scale = 1.0f;
        rs.yarn = false;
        if (!rope_params_eq(&rs, &rp)) {
            P->rope[1] = (ls_rope_plan){rs, m->rope_freqs};
            P->n_rope = 2;
        }
    }
    P->n_layers = (int32_t)(hp->n_layer + hp->n_nextn);
    P->layers = ls_calloc((size_t)P->n_layers, sizeof *P->layers);
    if (!P->layers) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    const float attn_scale = 1.0f / sqrtf((float)hp->head_dim); /* every family (docs/numerics.md) */
    for (int32_t l = 0; l < P->n_layers; l++) {
        const ls_layer *L = &m->layers[l];
        ls_layer_plan *lp = &P->layers[l];
        /* a sliding-window layer: every layer of a windowed family but each swa_pattern-th (not the MTP block) */
        const bool swa = ad->swa_pattern && (uint32_t)l < hp->n_layer && (uint32_t)l % ad->swa_pattern != ad->swa_pattern - 1;
        lp->attn_norm = L->attn_norm;
        lp->wq = L->wq;
        lp->wk = L->wk;
        lp->wv = L->wv;
        lp->bq = L->bq;
        lp->bk = L->bk;
        lp->bv = L->bv;
        lp->q_norm = L->q_norm;
        lp->k_norm = L->k_norm;
        lp->rope = swa && P->n_rope == 2 ? 1 : 0;
        lp->window = swa ? (int32_t)hp->n_swa : 0;
        lp->attn_scale = attn_scale;
        lp->wo = L->wo;
        lp->post_attn_norm = L->post_attn_norm;
        lp->ffn_norm = L->ffn_norm;
        lp->w_gate = L->w_gate;
        lp->w_up = L->w_up;
        lp->act = ad->act;
        lp->w_down = L->w_down;
        lp->post_ffn_norm = L->post_ffn_norm;
        LS_ASSERT(!lp->bq == !lp->bk && !lp->bq == !lp->bv && !lp->q_norm == !lp->k_norm &&
                  !lp->post_attn_norm == !lp->post_ffn_norm);
    }
    return LS_OK;
}

/* ---- an MTP module in a file of its own (ls_model_params.mtp_path) ----------
 * The file holds one nextn block as llama.cpp names it (blk.{n_layer}.nextn.* and the
 * block's attention and FFN tensors) with the target's architecture, {arch}.block_count =
 * the target's + 1 and {arch}.nextn_predict_layers = 1, and names the model it was fitted
 * to: lockstep.mtp.target_sha256 (the target file's SHA-256, hex) and, for messages,
 * lockstep.mtp.target_name.  Its tensors load as the target's own module (load_weights). */
static ls_status mtp_u32_eq(const gguf_file *g, const char *path, const char *arch, const char *suffix,
                            uint32_t want, ls_err *err) {
    uint32_t v;
    ls_err e;
    if (get_arch_u32(g, arch, suffix, &v, NULL, &e))
        return ls_err_set(err, LS_E_FORMAT, "MTP module '%s': %s", path, e.msg);
    if (v != want)
        return ls_err_set(err, LS_E_INVALID, "MTP module '%s': %s.%s is %u, the model's is %u", path, arch, suffix,
                          v, want);
    return LS_OK;
}

static ls_status attach_mtp_file(ls_model *m, const char *path, const char *model_path, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    const char *mp = model_path ? model_path : "(memory)";
    if (hp->n_nextn)
        return ls_err_set(err, LS_E_INVALID, "model '%s' has an MTP module of its own; the module '%s' would "
                                             "replace it (leave out --draft-model to use the model's own)", mp, path);
    ls_err e;
    if (!(m->mtp_gguf = gguf_open(path, &e))) return ls_err_set(err, e.code, "MTP module '%s': %s", path, e.msg);
    const gguf_file *g = m->mtp_gguf;
    if (gguf_check_intact(g, &e)) return ls_err_set(err, e.code, "MTP module '%s': %s", path, e.msg);
    gguf_str arch;
    if (gguf_get_str(g, "general.architecture", &arch, &e))
        return ls_err_set(err, LS_E_FORMAT, "MTP module '%s': %s", path, e.msg);
    if (!gguf_str_eq(arch, hp->arch))
        return ls_err_set(err, LS_E_INVALID, "MTP module '%s' is for architecture '%.*s', the model '%s' is '%s'",
                          path, (int)(arch.len > 32 ? 32 : arch.len), arch.ptr, mp, hp->arch);
    ls_status st;
    if ((st = mtp_u32_eq(g, path, hp->arch, "nextn_predict_layers", 1, err)) ||
        (st = mtp_u32_eq(g, path, hp->arch, "block_count", hp->n_layer + 1, err)) ||
        (st = mtp_u32_eq(g, path, hp->arch, "embedding_length", hp->n_embd, err)) ||
        (st = mtp_u32_eq(g, path, hp->arch, "attention.head_count", hp->n_head, err)) ||
        (st = mtp_u32_eq(g, path, hp->arch, "attention.head_count_kv", hp->n_head_kv, err)) ||
        (st = mtp_u32_eq(g, path, hp->arch, "feed_forward_length", hp->n_ff, err)))
        return st;
    gguf_str want, name = {0, NULL};
    if (!gguf_find(g, "lockstep.mtp.target_sha256") || gguf_get_str(g, "lockstep.mtp.target_sha256", &want, NULL) ||
        want.len != 64)
        return ls_err_set(err, LS_E_FORMAT, "MTP module '%s' does not name the model it was fitted to "
                                            "(no 64-digit lockstep.mtp.target_sha256)", path);
    if (gguf_find(g, "lockstep.mtp.target_name")) gguf_get_str(g, "lockstep.mtp.target_name", &name, NULL);
    if (!m->path || !ls_model_sha256_fill(m))
        return ls_err_set(err, LS_E_IO, "cannot hash the model '%s' to check the MTP module '%s' against it", mp,
                          path);
    if (memcmp(want.ptr, m->sha256, 64) != 0)
        return ls_err_set(err, LS_E_INVALID, "MTP module '%s' was fitted to another model ('%.*s', sha256 %.16s...), "
                                             "not to '%s' (sha256 %.16s...)", path,
                          (int)(name.len > 96 ? 96 : name.len), name.ptr ? name.ptr : "", want.ptr, mp, m->sha256);
    m->hp.n_nextn = 1;
    return LS_OK;
}

ls_model *ls_model_load(const ls_model_params *pp, ls_err *err) {
    ls_model_params p = LS_MODEL_PARAMS_INIT;
    if (ls_params_take(&p, sizeof p, pp, "model params", err)) return NULL;
    if (!p.path) {
        ls_err_set(err, LS_E_INVALID, "no model path given");
        return NULL;
    }
    gguf_file *g = gguf_open(p.path, err);
    return g ? ls_model_load_gguf(g, &p, err) : NULL;
}

static ls_status check_intact(const ls_model *m, const char *path, ls_err *err) {
    ls_err e;
    if (gguf_check_intact(m->gguf, &e) == LS_OK) return LS_OK;
    return ls_err_set(err, e.code, "model '%s': %s", path ? path : "(memory)", e.msg);
}

ls_model *ls_model_load_gguf(gguf_file *g, const ls_model_params *pp, ls_err *err) {
    ls_model_params p = LS_MODEL_PARAMS_INIT;
    if (ls_params_take(&p, sizeof p, pp, "model params", err)) {
        gguf_close(g);
        return NULL;
    }
    ls_model *m = ls_calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    m->gguf = g;
    pthread_mutex_init(&m->prep_mu, NULL);
    if (p.cache_dir && *p.cache_dir && !(m->cache_dir = ls_strdup(p.cache_dir))) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto fail;
    }
    if (p.path && !(m->path = ls_strdup(p.path))) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto fail;
    }
    if (check_intact(m, p.path, err)) goto fail;
    if (read_hparams(m->gguf, &m->hp, &m->arch, err)) goto fail;
    if (p.mtp_path && attach_mtp_file(m, p.mtp_path, p.path, err)) goto fail;
    m->tok = ls_tokenizer_from_gguf(m->gguf, err);
    if (!m->tok) goto fail;
    m->hp.n_vocab = ls_tokenizer_n_vocab(m->tok);
    uint32_t nv;
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", m->hp.arch);
    if (gguf_find(m->gguf, key) && gguf_get_u32(m->gguf, key, &nv, NULL) == LS_OK && nv != m->hp.n_vocab) {
        ls_err_set(err, LS_E_FORMAT, "%s = %u but the tokenizer has %u tokens", key, nv, m->hp.n_vocab);
        goto fail;
    }
    if (p.load != LS_MODEL_LOAD_FULL && p.load != LS_MODEL_LOAD_META) {
        ls_err_set(err, LS_E_INVALID, "unknown model load mode %d", (int)p.load);
        goto fail;
    }
    m->meta_only = p.load == LS_MODEL_LOAD_META;
    if (load_weights(m, err)) goto fail; /* checks every tensor; lists the matrices */
    if (!m->meta_only && build_matrices(m, err)) goto fail;
    if (check_intact(m, p.path, err)) goto fail; /* shrunk while the weights were read */
    if (m->mtp_gguf && gguf_check_intact(m->mtp_gguf, err)) goto fail;

    if (ls_plan_build(m, err)) goto fail;

    /* Chat template: an override by name, else detection from the file.  A model
     * without a usable template still loads: plain prompts work, --chat reports why. */
    ls_err terr;
    ls_err_clear(&terr);
    if (p.chat_template && p.chat_template_file) {
        ls_err_set(err, LS_E_INVALID, "give a chat template by name or by file, not both");
        goto fail;
    }
    if (p.chat_template_file) {
        if (ls_chat_template_from_file(p.chat_template_file, &m->tmpl, err)) goto fail;
        m->has_tmpl = true;
    } else if (p.chat_template) {
        if (ls_chat_template_by_name(p.chat_template, &m->tmpl, err)) goto fail;
        m->has_tmpl = true;
    } else {
        gguf_str src = {0, NULL};
        if (gguf_find(m->gguf, "tokenizer.chat_template"))
            gguf_get_str(m->gguf, "tokenizer.chat_template", &src, NULL);
        if (ls_chat_template_detect(src.ptr, (size_t)src.len, &m->tmpl, &terr) == LS_OK) {
            m->has_tmpl = true;
        } else if (!src.ptr && m->arch->chat_default) { /* no template in the file: the family's own */
            if (ls_chat_template_by_name(m->arch->chat_default, &m->tmpl, err)) goto fail;
            m->has_tmpl = true;
        } else if (terr.code == LS_E_NOMEM) { /* not a property of the file: fail the load */
            if (err) *err = terr;
            goto fail;
        } else {
            snprintf(m->tmpl_err, sizeof m->tmpl_err, "%s", terr.msg);
        }
    }
    if (m->has_tmpl) { /* a Jinja template's bos_token / eos_token */
        char bos[128] = "", eos[128] = "";
        int32_t b = ls_tokenizer_bos(m->tok), e = ls_tokenizer_eos(m->tok);
        size_t nb = b >= 0 ? ls_token_bytes(m->tok, b, true, bos, sizeof bos - 1) : 0;
        size_t ne = e >= 0 ? ls_token_bytes(m->tok, e, true, eos, sizeof eos - 1) : 0;
        bos[nb < sizeof bos ? nb : sizeof bos - 1] = '\0';
        eos[ne < sizeof eos ? ne : sizeof eos - 1] = '\0';
        if (ls_chat_template_set_tokens(&m->tmpl, bos, eos, ls_tokenizer_adds_bos(m->tok),
                                        ls_tokenizer_adds_eos(m->tok), err))
            goto fail;
    }
    return m;
fail:
    ls_model_free(m);
    return NULL;
}

void ls_model_free(ls_model *m) {
    if (!m) return;
    if (m->layers) {
        for (uint32_t l = 0; l < m->hp.n_layer + m->hp.n_nextn; l++) {
            for (size_t i = 0; i < sizeof k_block / sizeof k_block[0]; i++)
                if (!k_block[i].mat) free(*(float **)((char *)&m->layers[l] + k_block[i].off));
        }
        free(m->layers);
    }
    free(m->plan.layers);
    for (int32_t i = 0; i < m->n_mats; i++) ls_wmat_free(m->mats[i]);
    free(m->mats);
    free(m->mat_src);
    free(m->mat_dst);
    for (int i = 0; i < LS_ISA_COUNT; i++) free(m->prep_arena[i]); /* after every matrix that points into it */
    pthread_mutex_destroy(&m->prep_mu);
    free(m->path);
    free(m->cache_dir);
    free(m->out_norm);
    free(m->rope_freqs);
    free(m->mtp_enorm);
    free(m->mtp_hnorm);
    free(m->mtp_head_norm);
    free(m->mtp_vocab);
    free(m->mtp_head_rows); /* after the matrix built from it */
    if (m->has_tmpl) ls_chat_template_free(&m->tmpl);
    ls_tokenizer_free(m->tok);
    gguf_close(m->gguf);
    gguf_close(m->mtp_gguf);
    free(m);
}

const ls_hparams *ls_model_hparams(const ls_model *m) { return &m->hp; }

void ls_model_out_norm_row(const ls_model *m, const float *x, float *out) {
    ls_rmsnorm_row_scalar(x, m->out_norm, m->hp.norm_eps, (int64_t)m->hp.n_embd, out);
}
const ls_tokenizer *ls_model_tokenizer(const ls_model *m) { return m->tok; }
const gguf_file *ls_model_gguf(const ls_model *m) { return m->gguf; }
const char *ls_model_path(const ls_model *m) { return m->path; }
const ls_chat_template *ls_model_chat_template(const ls_model *m) { return m->has_tmpl ? &m->tmpl : NULL; }
const char *ls_model_template_error(const ls_model *m) { return m->tmpl_err; }
uint64_t ls_model_weight_bytes(const ls_model *m) { return m->weight_bytes; }
bool ls_model_has_mtp(const ls_model *m) { return m->hp.n_nextn > 0 && m->mtp_eh_proj; }
int32_t ls_model_mtp_vocab(const ls_model *m, const int32_t **ids) {
    if (ids) *ids = m->mtp_vocab;
    return m->n_mtp_vocab;
}
double ls_model_mtp_cost(const ls_model *m) { return m->mtp_cost; }
bool ls_model_meta_only(const ls_model *m) { return m->meta_only; }
