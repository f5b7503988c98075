/* gguf_write.c - the in-memory GGUF builder declared in gguf_write.h.
 *
 * KVs are encoded as they are added into one growing byte buffer; tensors keep a
 * copy of their data and are laid out at serialization time. */
#include "gguf/gguf_write.h"
#include "util/alloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

typedef struct {
    uint8_t *p;  /* (cap) */
    size_t n;
    size_t cap;
} gguf_wbuf;

typedef struct {
    char *name;                 /* owned, NUL-terminated */
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    void *data;                 /* owned, (nbytes) */
    uint64_t nbytes;
} gguf_wtensor;

typedef struct {
    size_t off; /* key bytes in kvs.p */
    size_t len;
} gguf_wkey;

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;
    bool alignment_set;

    gguf_wbuf kvs;      /* encoded KVs, in order */
    uint64_t n_kv;
    gguf_wkey *keys;    /* (n_kv) for duplicate detection */
    uint64_t keys_cap;

    gguf_wtensor *tensors; /* (n_tensors) */
    uint64_t n_tensors;
    uint64_t tensors_cap;

    ls_status st;       /* sticky first error */
    char msg[256];
};

static ls_status gguf_writer_fail(gguf_writer *w, ls_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ls_status gguf_writer_fail(gguf_writer *w, ls_status st, const char *fmt, ...) {
    if (w->st == LS_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->msg, sizeof w->msg, fmt, ap);
        va_end(ap);
        w->st = st;
    }
    return w->st;
}

/* Grows *p (an array of elem-byte items with capacity *cap) to hold `need` items. */
static bool gguf_grow(void **p, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap : 8;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / elem) return false;
        nc *= 2;
    }
    void *q = ls_realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static ls_status gguf_wbuf_put(gguf_writer *w, gguf_wbuf *b, const void *src, size_t n) {
    if (w->st) return w->st;
    if (n > SIZE_MAX - b->n) return gguf_writer_fail(w, LS_E_NOMEM, "gguf writer buffer overflows");
    uint64_t cap = b->cap;
    void *p = b->p;
    if (!gguf_grow(&p, &cap, (uint64_t)b->n + n, 1))
        return gguf_writer_fail(w, LS_E_NOMEM, "out of memory growing the gguf writer buffer");
    b->p = p;
    b->cap = (size_t)cap;
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return LS_OK;
}

static ls_status gguf_wbuf_u32(gguf_writer *w, gguf_wbuf *b, uint32_t v) { return gguf_wbuf_put(w, b, &v, 4); }
static ls_status gguf_wbuf_u64(gguf_writer *w, gguf_wbuf *b, uint64_t v) { return gguf_wbuf_put(w, b, &v, 8); }
static ls_status gguf_wbuf_str(gguf_writer *w, gguf_wbuf *b, const char *s, uint64_t len) {
    gguf_wbuf_u64(w, b, len);
    return gguf_wbuf_put(w, b, s, (size_t)len);
}

gguf_writer *gguf_writer_create(void) {
    gguf_writer *w = ls_calloc(1, sizeof *w);
    if (!w) return NULL;
    w->version = 3;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->keys);
    free(w->kvs.p);
    free(w);
}

void gguf_writer_set_version(gguf_writer *w, uint32_t version) { w->version = version; }

/* Writes key and type; the caller then writes the value. */
static ls_status gguf_writer_begin_kv(gguf_writer *w, const char *key, gguf_vtype type) {
    if (w->st) return w->st;
    size_t len = strlen(key);
    if (len == 0) return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: empty key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (w->keys[i].len == len && memcmp(w->kvs.p + w->keys[i].off, key, len) == 0)
            return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: duplicate key '%s'", key);
    if (!gguf_grow((void **)&w->keys, &w->keys_cap, w->n_kv + 1, sizeof *w->keys))
        return gguf_writer_fail(w, LS_E_NOMEM, "out of memory adding key '%s'", key);
    size_t off = w->kvs.n + 8;
    gguf_wbuf_str(w, &w->kvs, key, len);
    gguf_wbuf_u32(w, &w->kvs, (uint32_t)type);
    if (w->st) return w->st;
    w->keys[w->n_kv++] = (gguf_wkey){off, len};
    return LS_OK;
}

static ls_status gguf_writer_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v, size_t size) {
    gguf_writer_begin_kv(w, key, type);
    return gguf_wbuf_put(w, &w->kvs, v, size);
}

ls_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    if (w->st) return w->st;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: alignment %u is not a nonzero power of two", alignment);
    if (w->alignment_set) return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: alignment set twice");
    ls_status st = gguf_writer_scalar(w, "general.alignment", GGUF_VT_UINT32, &alignment, 4);
    if (st) return st;
    w->alignment = alignment;
    w->alignment_set = true;
    return LS_OK;
}

ls_status gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_UINT8, &v, 1);
}
ls_status gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_INT8, &v, 1);
}
ls_status gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_UINT16, &v, 2);
}
ls_status gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_INT16, &v, 2);
}
ls_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_UINT32, &v, 4);
}
ls_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_INT32, &v, 4);
}
ls_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_UINT64, &v, 8);
}
ls_status gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v) {
    return gguf_writer_scalar(w, key, GGUF_VT_INT64, &v, 8);
}
ls_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v) {
    return gguf_writer_scalar(w, key, GGUF_VT_FLOAT32, &v, 4);
}
ls_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v) {
    return gguf_writer_scalar(w, key, GGUF_VT_FLOAT64, &v, 8);
}
ls_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return gguf_writer_scalar(w, key, GGUF_VT_BOOL, &b, 1);
}

ls_status gguf_writer_add_strn(gguf_writer *w, const char *key, const char *v, uint64_t len) {
    gguf_writer_begin_kv(w, key, GGUF_VT_STRING);
    return gguf_wbuf_str(w, &w->kvs, v, len);
}

ls_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) {
    return gguf_writer_add_strn(w, key, v, strlen(v));
}

static uint32_t gguf_writer_scalar_size(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

ls_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n) {
    if (w->st) return w->st;
    uint32_t size = gguf_writer_scalar_size(elem);
    uint64_t bytes;
    if (size == 0)
        return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: array '%s' element type %s is not a scalar", key,
                                gguf_vtype_name(elem));
    if (ls_mul_u64(n, size, &bytes) || bytes > SIZE_MAX)
        return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: array '%s' of %llu elements is too large", key,
                                (unsigned long long)n);
    gguf_writer_begin_kv(w, key, GGUF_VT_ARRAY);
    gguf_wbuf_u32(w, &w->kvs, (uint32_t)elem);
    gguf_wbuf_u64(w, &w->kvs, n);
    return gguf_wbuf_put(w, &w->kvs, data, (size_t)bytes);
}

ls_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    gguf_writer_begin_kv(w, key, GGUF_VT_ARRAY);
    gguf_wbuf_u32(w, &w->kvs, GGUF_VT_STRING);
    gguf_wbuf_u64(w, &w->kvs, n);
    for (uint64_t i = 0; i < n && !w->st; i++) gguf_wbuf_str(w, &w->kvs, strs[i], strlen(strs[i]));
    return w->st;
}

ls_status gguf_writer_add_value(gguf_writer *w, const char *key, const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_UINT8: return gguf_writer_add_u8(w, key, (uint8_t)v->v.u64);
    case GGUF_VT_INT8: return gguf_writer_add_i8(w, key, (int8_t)v->v.i64);
    case GGUF_VT_UINT16: return gguf_writer_add_u16(w, key, (uint16_t)v->v.u64);
    case GGUF_VT_INT16: return gguf_writer_add_i16(w, key, (int16_t)v->v.i64);
    case GGUF_VT_UINT32: return gguf_writer_add_u32(w, key, (uint32_t)v->v.u64);
    case GGUF_VT_INT32: return gguf_writer_add_i32(w, key, (int32_t)v->v.i64);
    case GGUF_VT_UINT64: return gguf_writer_add_u64(w, key, v->v.u64);
    case GGUF_VT_INT64: return gguf_writer_add_i64(w, key, v->v.i64);
    case GGUF_VT_FLOAT32: return gguf_writer_add_f32(w, key, (float)v->v.f64);
    case GGUF_VT_FLOAT64: return gguf_writer_add_f64(w, key, v->v.f64);
    case GGUF_VT_BOOL: return gguf_writer_add_bool(w, key, v->v.u64 != 0);
    case GGUF_VT_STRING: return gguf_writer_add_strn(w, key, v->v.str.ptr, v->v.str.len);
    case GGUF_VT_ARRAY:
        if (v->v.arr.elem_type != GGUF_VT_STRING)
            return gguf_writer_add_arr(w, key, v->v.arr.elem_type, v->v.arr.raw, v->v.arr.n);
        gguf_writer_begin_kv(w, key, GGUF_VT_ARRAY);
        gguf_wbuf_u32(w, &w->kvs, GGUF_VT_STRING);
        gguf_wbuf_u64(w, &w->kvs, v->v.arr.n);
        for (uint64_t i = 0; i < v->v.arr.n && !w->st; i++)
            gguf_wbuf_str(w, &w->kvs, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
        return w->st;
    default: return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: '%s' has value type %d", key, (int)v->type);
    }
}

ls_status gguf_writer_add_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *bytes, size_t nbytes) {
    gguf_writer_begin_kv(w, key, type);
    return gguf_wbuf_put(w, &w->kvs, bytes, nbytes);
}

ls_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                 const uint64_t *ne, const void *data, uint64_t nbytes) {
    if (w->st) return w->st;
    if (name[0] == '\0') return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: empty tensor name");
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: duplicate tensor name '%s'", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: tensor '%s' has n_dims %u", name, n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] == 0 || ls_mul_u64(n_elems, ne[d], &n_elems))
            return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: tensor '%s' has a bad shape", name);
    ls_err e;
    ls_err_clear(&e);
    uint64_t want;
    if (ls_type_nbytes(type, n_elems, &want, &e) != LS_OK)
        return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: tensor '%s': %s", name, e.msg);
    if (want != nbytes || nbytes > SIZE_MAX)
        return gguf_writer_fail(w, LS_E_INVALID, "gguf writer: tensor '%s' has %llu bytes of data (expected %llu)",
                                name, (unsigned long long)nbytes, (unsigned long long)want);
    if (!gguf_grow((void **)&w->tensors, &w->tensors_cap, w->n_tensors + 1, sizeof *w->tensors))
        return gguf_writer_fail(w, LS_E_NOMEM, "out of memory adding tensor '%s'", name);
    gguf_wtensor t = {.type = type, .n_dims = n_dims, .nbytes = nbytes};
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    t.name = ls_strdup(name);
    t.data = ls_malloc(nbytes ? (size_t)nbytes : 1);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        return gguf_writer_fail(w, LS_E_NOMEM, "out of memory copying tensor '%s'", name);
    }
    if (nbytes) memcpy(t.data, data, (size_t)nbytes);
    w->tensors[w->n_tensors++] = t;
    return LS_OK;
}

static uint64_t gguf_align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

ls_status gguf_writer_serialize(const gguf_writer *w, void **out, size_t *out_size, ls_err *err) {
    *out = NULL;
    *out_size = 0;
    if (w->st) return ls_err_set(err, w->st, "%s", w->msg);
    /* Header and tensor infos go into a local builder sharing w's error slot semantics. */
    gguf_writer tmp = {.version = w->version};
    gguf_wbuf b = {0};
    uint32_t magic = GGUF_MAGIC;
    gguf_wbuf_put(&tmp, &b, &magic, 4);
    gguf_wbuf_u32(&tmp, &b, w->version);
    gguf_wbuf_u64(&tmp, &b, w->n_tensors);
    gguf_wbuf_u64(&tmp, &b, w->n_kv);
    gguf_wbuf_put(&tmp, &b, w->kvs.p, w->kvs.n);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const gguf_wtensor *t = &w->tensors[i];
        gguf_wbuf_str(&tmp, &b, t->name, strlen(t->name));
        gguf_wbuf_u32(&tmp, &b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) gguf_wbuf_u64(&tmp, &b, t->ne[d]);
        gguf_wbuf_u32(&tmp, &b, t->type);
        off = gguf_align_up(off, w->alignment);
        gguf_wbuf_u64(&tmp, &b, off);
        off += t->nbytes;
    }
    static const uint8_t zeros[256] = {0};
    uint64_t data_start = gguf_align_up(b.n, w->alignment);
    while (!tmp.st && b.n < data_start) {
        size_t n = (size_t)(data_start - b.n) < sizeof zeros ? (size_t)(data_start - b.n) : sizeof zeros;
        gguf_wbuf_put(&tmp, &b, zeros, n);
    }
    for (uint64_t i = 0; i < w->n_tensors && !tmp.st; i++) {
        const gguf_wtensor *t = &w->tensors[i];
        uint64_t at = data_start + gguf_align_up(b.n - data_start, w->alignment);
        while (!tmp.st && b.n < at) {
            size_t n = (size_t)(at - b.n) < sizeof zeros ? (size_t)(at - b.n) : sizeof zeros;
            gguf_wbuf_put(&tmp, &b, zeros, n);
        }
        gguf_wbuf_put(&tmp, &b, t->data, (size_t)t->nbytes);
    }
    if (tmp.st) {
        free(b.p);
        return ls_err_set(err, tmp.st, "%s", tmp.msg);
    }
    if (!b.p) { /* cannot happen: the header is always written */
        free(b.p);
        return ls_err_set(err, LS_E_NOMEM, "gguf writer produced no bytes");
    }
    *out = b.p;
    *out_size = b.n;
    return LS_OK;
}

ls_status gguf_writer_write_file(const gguf_writer *w, const char *path, ls_err *err) {
    void *buf;
    size_t n;
    ls_status st = gguf_writer_serialize(w, &buf, &n, err);
    if (st) return st;
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        st = ls_err_set(err, LS_E_IO, "cannot create '%s': %s", path, strerror(errno));
        free(buf);
        return st;
    }
    if (fwrite(buf, 1, n, fp) != n) {
        st = ls_err_set(err, LS_E_IO, "cannot write '%s': %s", path, strerror(errno));
        fclose(fp);
        free(buf);
        return st;
    }
    free(buf);
    if (fclose(fp) != 0) return ls_err_set(err, LS_E_IO, "cannot write '%s': %s", path, strerror(errno));
    return LS_OK;
}
