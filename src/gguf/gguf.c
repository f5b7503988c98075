/* gguf.c - the validating GGUF v2/v3 reader declared in gguf.h.
 *
 * One parser serves gguf_open (an mmap'd file) and gguf_open_mem (a caller buffer).
 * Every read goes through a bounds-checked cursor, and every count, length, size
 * and offset is checked with overflow-safe 64-bit arithmetic before it is used or
 * allocated for.  Validation policy, beyond the byte layout in gguf.h:
 *   - version 2 or 3 only (v1 used 32-bit counts and is rejected);
 *   - kv_count and tensor_count must fit in the bytes that remain, at the minimum
 *     encoded size of an entry, before anything is allocated for them;
 *   - keys and tensor names are non-empty and unique;
 *   - BOOL bytes are 0 or 1 (in arrays too);
 *   - arrays nest at most GGUF_MAX_ARRAY_DEPTH levels;
 *   - general.alignment, when present, is a UINT32 nonzero power of two;
 *   - general.architecture is present and a STRING;
 *   - tensors: n_dims in 1..4, every ne[i] >= 1 (empty tensors are rejected), the
 *     element count fits in int64, the type is known to quant.h, ne[0] is a
 *     multiple of the type's block size, the offset is a multiple of the alignment,
 *     the data lies inside the file, and no two tensors' data overlap.
 * With no tensors the file may end before the (padded) data section; then
 * gguf_data_offset can exceed gguf_file_size, and nothing points there.
 *
 * Lookups use two open-addressing hash tables (FNV-1a) built during the parse,
 * which also detect duplicate keys and tensor names. */
#include "gguf/gguf.h"
#include "util/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian fields with memcpy: big-endian hosts are not supported"
#endif

#define GGUF_HEADER_BYTES 24u
#define GGUF_MAX_ARRAY_DEPTH 8u
/* Smallest possible encodings, used to reject absurd counts before allocating:
 * a KV is a key (u64 len + >= 1 byte) + u32 type + >= 1 value byte; a tensor info is
 * a name (u64 len + >= 1 byte) + u32 n_dims + >= 1 u64 dim + u32 type + u64 offset. */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_BYTES 33u
#define GGUF_MIN_STR_BYTES 8u   /* an array element string: u64 len (may be empty) */
#define GGUF_MIN_ARR_BYTES 12u  /* an array element array: u32 elem_type + u64 n */
#define GGUF_NAME_SHOW 80       /* longest key/name quoted verbatim in a message */

/* One allocation owned by the reader (string and nested-array element tables). */
typedef struct gguf_chunk gguf_chunk;
struct gguf_chunk {
    gguf_chunk *next;
    alignas(max_align_t) unsigned char data[];
};

/* An open-addressing table of indices (slot = index + 1, 0 = empty). */
typedef struct {
    uint64_t *slots; /* (cap) */
    uint64_t cap;    /* a power of two, > 2 * entries */
} gguf_index;

struct gguf_file {
    const uint8_t *base; /* (size) the mapping or the caller's buffer */
    uint64_t size;
    void *map;           /* mmap'd region (gguf_open only), else NULL */
    size_t map_len;
    int fd;              /* the mapped file, kept open to notice truncation; -1 for memory */

    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    uint64_t n_kv;
    gguf_kv *kvs;        /* (n_kv) */
    uint64_t *kv_pos;    /* (n_kv) file offset of each KV, for getter messages */
    gguf_index kv_index;

    uint64_t n_tensors;
    gguf_tensor *tensors; /* (n_tensors) */
    gguf_index tensor_index;

    gguf_chunk *chunks;  /* every other allocation, freed by gguf_close */

    /* A model split with gguf-split: this is the first shard (split.no 0); shards[i] is
     * shard i + 1, opened with it and closed with it, and the tensor table above is the
     * union of every shard's.  A shard other than the first needs no general.architecture. */
    bool is_shard;
    uint32_t n_shards;   /* 1 for a file that is not split */
    gguf_file **shards;  /* (n_shards - 1) */
};

/* ---- small helpers ---------------------------------------------------------- */

/* Quotes s into buf for a message: printable ASCII verbatim, other bytes as \xNN,
 * truncated with "..." after GGUF_NAME_SHOW bytes.  Returns buf. */
static const char *gguf_show(gguf_str s, char buf[GGUF_NAME_SHOW * 4 + 8]) {
    size_t o = 0;
    uint64_t n = s.len < GGUF_NAME_SHOW ? s.len : GGUF_NAME_SHOW;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
            buf[o++] = (char)ch;
        } else {
            static const char hex[] = "0123456789abcdef";
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[ch >> 4];
            buf[o++] = hex[ch & 15];
        }
    }
    if (s.len > n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}
typedef char gguf_namebuf[GGUF_NAME_SHOW * 4 + 8];

static uint64_t gguf_hash(const char *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (uint64_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint32_t gguf_vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0; /* STRING, ARRAY, unknown */
    }
}

static bool gguf_vtype_is_int(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_UINT16: case GGUF_VT_INT16:
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_UINT64: case GGUF_VT_INT64: return true;
    default: return false;
    }
}

static bool gguf_vtype_is_signed(gguf_vtype t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}

const char *gguf_vtype_name(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: return "UINT8";
    case GGUF_VT_INT8: return "INT8";
    case GGUF_VT_UINT16: return "UINT16";
    case GGUF_VT_INT16: return "INT16";
    case GGUF_VT_UINT32: return "UINT32";
    case GGUF_VT_INT32: return "INT32";
    case GGUF_VT_FLOAT32: return "FLOAT32";
    case GGUF_VT_BOOL: return "BOOL";
    case GGUF_VT_STRING: return "STRING";
    case GGUF_VT_ARRAY: return "ARRAY";
    case GGUF_VT_UINT64: return "UINT64";
    case GGUF_VT_INT64: return "INT64";
    case GGUF_VT_FLOAT64: return "FLOAT64";
    case GGUF_VT_COUNT: break;
    }
    return "UNKNOWN";
}

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

/* Reads a little-endian scalar of `size` bytes (1, 2, 4 or 8) as raw bits. */
static uint64_t gguf_load_bits(const uint8_t *p, uint32_t size) {
    switch (size) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

/* Decodes one scalar of type t at p into out (type and union member). */
static void gguf_decode_scalar(const uint8_t *p, gguf_vtype t, gguf_value *out) {
    uint64_t bits = gguf_load_bits(p, gguf_vtype_size(t));
    out->type = t;
    switch (t) {
    case GGUF_VT_INT8: out->v.i64 = (int8_t)(uint8_t)bits; break;
    case GGUF_VT_INT16: out->v.i64 = (int16_t)(uint16_t)bits; break;
    case GGUF_VT_INT32: out->v.i64 = (int32_t)(uint32_t)bits; break;
    case GGUF_VT_INT64: out->v.i64 = (int64_t)bits; break;
    case GGUF_VT_FLOAT32: { float f; uint32_t b = (uint32_t)bits; memcpy(&f, &b, 4); out->v.f64 = f; break; }
    case GGUF_VT_FLOAT64: { double d; memcpy(&d, &bits, 8); out->v.f64 = d; break; }
    default: out->v.u64 = bits; break; /* unsigned integers and BOOL */
    }
}

/* ---- the parse state -------------------------------------------------------- */

typedef struct {
    gguf_file *f;
    uint64_t pos;  /* cursor: next byte to read */
    ls_err *err;
} gguf_parser;

static uint64_t gguf_left(const gguf_parser *ps) { return ps->f->size - ps->pos; }

/* Zeroed n * elem bytes owned by f (freed by gguf_close). */
static void *gguf_alloc(gguf_parser *ps, uint64_t n, uint64_t elem, const char *what) {
    uint64_t bytes, total;
    if (ls_mul_u64(n, elem, &bytes) || ls_add_u64(bytes, sizeof(gguf_chunk), &total) || total > SIZE_MAX) {
        ls_err_set(ps->err, LS_E_NOMEM, "allocation for %s overflows (%llu x %llu bytes)", what,
                   (unsigned long long)n, (unsigned long long)elem);
        return NULL;
    }
    gguf_chunk *c = ls_calloc(1, (size_t)total);
    if (!c) {
        ls_err_set(ps->err, LS_E_NOMEM, "out of memory allocating %llu bytes for %s",
                   (unsigned long long)bytes, what);
        return NULL;
    }
    c->next = ps->f->chunks;
    ps->f->chunks = c;
    return c->data;
}

static ls_status gguf_need(gguf_parser *ps, uint64_t n, const char *what) {
    if (n > gguf_left(ps))
        return ls_err_set_at(ps->err, LS_E_FORMAT, ps->pos,
                             "unexpected end of file reading %s (need %llu bytes, %llu left)", what,
                             (unsigned long long)n, (unsigned long long)gguf_left(ps));
    return LS_OK;
}

static ls_status gguf_read_u32(gguf_parser *ps, uint32_t *out, const char *what) {
    ls_status st = gguf_need(ps, 4, what);
    if (st) return st;
    memcpy(out, ps->f->base + ps->pos, 4);
    ps->pos += 4;
    return LS_OK;
}

static ls_status gguf_read_u64(gguf_parser *ps, uint64_t *out, const char *what) {
    ls_status st = gguf_need(ps, 8, what);
    if (st) return st;
    memcpy(out, ps->f->base + ps->pos, 8);
    ps->pos += 8;
    return LS_OK;
}

/* Reads a gguf_string.  `what` names it for messages ("key", "tensor name", ...);
 * `key`, when non-NULL, is the key whose value or element this string is. */
static ls_status gguf_read_str(gguf_parser *ps, gguf_str *out, const char *what, const gguf_str *key) {
    uint64_t at = ps->pos;
    uint64_t len;
    ls_status st = gguf_read_u64(ps, &len, what);
    if (st) return st;
    if (len > gguf_left(ps)) {
        gguf_namebuf kb;
        return ls_err_set_at(ps->err, LS_E_FORMAT, at,
                             "string length %llu runs past end of file (%s%s%s%s, %llu bytes left)",
                             (unsigned long long)len, what, key ? " of key '" : "",
                             key ? gguf_show(*key, kb) : "", key ? "'" : "",
                             (unsigned long long)gguf_left(ps));
    }
    out->len = len;
    out->ptr = (const char *)ps->f->base + ps->pos;
    ps->pos += len;
    return LS_OK;
}

/* ---- hash index --------------------------------------------------------------- */

/* Sizes idx for up to n entries: capacity a power of two >= 2n (>= 16). */
static ls_status gguf_index_init(gguf_parser *ps, gguf_index *idx, uint64_t n, const char *what) {
    uint64_t cap = 16;
    while (cap / 2 < n) cap *= 2; /* n is bounded by the file size, so this terminates */
    idx->slots = gguf_alloc(ps, cap, sizeof(uint64_t), what);
    if (!idx->slots) return LS_E_NOMEM;
    idx->cap = cap;
    return LS_OK;
}

/* Finds `name` (len bytes) in idx over `names` (a stride-addressed array of gguf_str).
 * Returns the entry index or UINT64_MAX; *slot_out gets the slot where it is or would go. */
static uint64_t gguf_index_find(const gguf_index *idx, const char *name, uint64_t len, const void *base,
                                size_t stride, uint64_t *slot_out) {
    if (!idx->slots) return UINT64_MAX;
    uint64_t mask = idx->cap - 1;
    uint64_t s = gguf_hash(name, len) & mask;
    for (;;) {
        uint64_t v = idx->slots[s];
        if (v == 0) break;
        const gguf_str *cand = (const gguf_str *)((const char *)base + (v - 1) * stride);
        if (cand->len == len && (len == 0 || memcmp(cand->ptr, name, len) == 0)) {
            if (slot_out) *slot_out = s;
            return v - 1;
        }
        s = (s + 1) & mask;
    }
    if (slot_out) *slot_out = s;
    return UINT64_MAX;
}

/* ---- metadata values ---------------------------------------------------------- */

static ls_status gguf_parse_value(gguf_parser *ps, gguf_str key, uint32_t type, uint32_t depth,
                                  gguf_value *out);

static ls_status gguf_parse_array(gguf_parser *ps, gguf_str key, uint32_t depth, gguf_value *out) {
    gguf_namebuf kb;
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return ls_err_set_at(ps->err, LS_E_FORMAT, ps->pos,
                             "arrays nested more than %u levels deep for key '%s'", GGUF_MAX_ARRAY_DEPTH,
                             gguf_show(key, kb));
    uint64_t type_at = ps->pos;
    uint32_t et;
    uint64_t n;
    ls_status st = gguf_read_u32(ps, &et, "array element type");
    if (st) return st;
    if (et >= GGUF_VT_COUNT)
        return ls_err_set_at(ps->err, LS_E_FORMAT, type_at,
                             "unknown metadata value type %u for key '%s' (array element type)", et,
                             gguf_show(key, kb));
    uint64_t n_at = ps->pos;
    if ((st = gguf_read_u64(ps, &n, "array length"))) return st;
    out->type = GGUF_VT_ARRAY;
    out->v.arr.elem_type = (gguf_vtype)et;
    out->v.arr.n = n;
    out->v.arr.raw = NULL;
    out->v.arr.strs = NULL;
    out->v.arr.items = NULL;

    uint32_t esize = gguf_vtype_size(et);
    if (esize) {
        uint64_t bytes;
        if (ls_mul_u64(n, esize, &bytes) || bytes > gguf_left(ps))
            return ls_err_set_at(ps->err, LS_E_FORMAT, n_at,
                                 "array of %llu %s elements for key '%s' runs past end of file (%llu bytes left)",
                                 (unsigned long long)n, gguf_vtype_name((gguf_vtype)et), gguf_show(key, kb),
                                 (unsigned long long)gguf_left(ps));
        const uint8_t *p = ps->f->base + ps->pos;
        if (et == GGUF_VT_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (p[i] > 1)
                    return ls_err_set_at(ps->err, LS_E_FORMAT, ps->pos + i,
                                         "bool array element %llu for key '%s' is %u (expected 0 or 1)",
                                         (unsigned long long)i, gguf_show(key, kb), p[i]);
        }
        out->v.arr.raw = p;
        ps->pos += bytes;
        return LS_OK;
    }

    uint64_t min = et == GGUF_VT_STRING ? GGUF_MIN_STR_BYTES : GGUF_MIN_ARR_BYTES;
    if (n > gguf_left(ps) / min)
        return ls_err_set_at(ps->err, LS_E_FORMAT, n_at,
                             "array of %llu %s elements for key '%s' runs past end of file (%llu bytes left)",
                             (unsigned long long)n, gguf_vtype_name((gguf_vtype)et), gguf_show(key, kb),
                             (unsigned long long)gguf_left(ps));
    if (n == 0) return LS_OK;
    if (et == GGUF_VT_STRING) {
        gguf_str *strs = gguf_alloc(ps, n, sizeof *strs, "a string array");
        if (!strs) return LS_E_NOMEM;
        out->v.arr.strs = strs;
        for (uint64_t i = 0; i < n; i++)
            if ((st = gguf_read_str(ps, &strs[i], "array element string", &key))) return st;
        return LS_OK;
    }
    gguf_value *items = gguf_alloc(ps, n, sizeof *items, "a nested array");
    if (!items) return LS_E_NOMEM;
    out->v.arr.items = items;
    for (uint64_t i = 0; i < n; i++)
        if ((st = gguf_parse_value(ps, key, GGUF_VT_ARRAY, depth + 1, &items[i]))) return st;
    return LS_OK;
}

/* Parses one value of `type` (already read) at the cursor; depth counts enclosing arrays. */
static ls_status gguf_parse_value(gguf_parser *ps, gguf_str key, uint32_t type, uint32_t depth,
                                  gguf_value *out) {
    gguf_namebuf kb;
    if (type == GGUF_VT_STRING) {
        out->type = GGUF_VT_STRING;
        return gguf_read_str(ps, &out->v.str, "string value", &key);
    }
    if (type == GGUF_VT_ARRAY) return gguf_parse_array(ps, key, depth, out);
    uint32_t size = gguf_vtype_size(type);
    LS_ASSERT(size != 0); /* the caller checked type < GGUF_VT_COUNT */
    ls_status st = gguf_need(ps, size, "metadata value");
    if (st) return st;
    const uint8_t *p = ps->f->base + ps->pos;
    if (type == GGUF_VT_BOOL && p[0] > 1)
        return ls_err_set_at(ps->err, LS_E_FORMAT, ps->pos, "bool value %u for key '%s' is not 0 or 1", p[0],
                             gguf_show(key, kb));
    gguf_decode_scalar(p, (gguf_vtype)type, out);
    ps->pos += size;
    return LS_OK;
}

static ls_status gguf_parse_kvs(gguf_parser *ps) {
    gguf_file *f = ps->f;
    ls_status st;
    if ((st = gguf_index_init(ps, &f->kv_index, f->n_kv, "the key index"))) return st;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        gguf_namebuf kb;
        f->kv_pos[i] = ps->pos;
        if ((st = gguf_read_str(ps, &kv->key, "key", NULL))) return st;
        if (kv->key.len == 0) return ls_err_set_at(ps->err, LS_E_FORMAT, f->kv_pos[i], "key %llu is empty",
                                                   (unsigned long long)i);
        uint64_t slot;
        uint64_t prev = gguf_index_find(&f->kv_index, kv->key.ptr, kv->key.len, f->kvs, sizeof *f->kvs, &slot);
        if (prev != UINT64_MAX)
            return ls_err_set_at(ps->err, LS_E_FORMAT, f->kv_pos[i], "duplicate key '%s' (KVs %llu and %llu)",
                                 gguf_show(kv->key, kb), (unsigned long long)prev, (unsigned long long)i);
        f->kv_index.slots[slot] = i + 1;
        uint64_t type_at = ps->pos;
        uint32_t type;
        if ((st = gguf_read_u32(ps, &type, "metadata value type"))) return st;
        if (type >= GGUF_VT_COUNT)
            return ls_err_set_at(ps->err, LS_E_FORMAT, type_at, "unknown metadata value type %u for key '%s'",
                                 type, gguf_show(kv->key, kb));
        if ((st = gguf_parse_value(ps, kv->key, type, 0, &kv->value))) return st;
    }
    return LS_OK;
}

static uint64_t gguf_find_idx(const gguf_file *f, const char *key) {
    return gguf_index_find(&f->kv_index, key, strlen(key), f->kvs, sizeof *f->kvs, NULL);
}

/* general.alignment (optional, UINT32 power of two) and general.architecture (STRING). */
static ls_status gguf_check_general(gguf_parser *ps) {
    gguf_file *f = ps->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    uint64_t i = gguf_find_idx(f, "general.alignment");
    if (i != UINT64_MAX) {
        const gguf_value *v = &f->kvs[i].value;
        if (v->type != GGUF_VT_UINT32)
            return ls_err_set_at(ps->err, LS_E_FORMAT, f->kv_pos[i],
                                 "key 'general.alignment' has type %s (expected UINT32)", gguf_vtype_name(v->type));
        if (v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)) != 0)
            return ls_err_set_at(ps->err, LS_E_FORMAT, f->kv_pos[i],
                                 "general.alignment %llu is not a nonzero power of two",
                                 (unsigned long long)v->v.u64);
        f->alignment = (uint32_t)v->v.u64;
    }
    i = gguf_find_idx(f, "general.architecture");
    if (i == UINT64_MAX) { /* shards after the first (split.no > 0) hold tensors only */
        uint64_t k = gguf_find_idx(f, "split.no");
        if (f->is_shard || (k != UINT64_MAX && gguf_vtype_is_int(f->kvs[k].value.type) && f->kvs[k].value.v.u64 != 0))
            return LS_OK;
    }
    if (i == UINT64_MAX)
        return ls_err_set(ps->err, LS_E_FORMAT, "missing required key 'general.architecture'");
    if (f->kvs[i].value.type != GGUF_VT_STRING)
        return ls_err_set_at(ps->err, LS_E_FORMAT, f->kv_pos[i],
                             "key 'general.architecture' has type %s (expected STRING)",
                             gguf_vtype_name(f->kvs[i].value.type));
    return LS_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

static ls_status gguf_parse_tensor(gguf_parser *ps, uint64_t i, uint64_t *off_pos) {
    gguf_file *f = ps->f;
    gguf_tensor *t = &f->tensors[i];
    gguf_namebuf nb;
    uint64_t at = ps->pos;
    ls_status st;
    if ((st = gguf_read_str(ps, &t->name, "tensor name", NULL))) return st;
    if (t->name.len == 0)
        return ls_err_set_at(ps->err, LS_E_FORMAT, at, "tensor %llu has an empty name", (unsigned long long)i);
    uint64_t slot;
    uint64_t prev = gguf_index_find(&f->tensor_index, t->name.ptr, t->name.len, f->tensors, sizeof *f->tensors,
                                    &slot);
    if (prev != UINT64_MAX)
        return ls_err_set_at(ps->err, LS_E_FORMAT, at, "duplicate tensor name '%s' (tensors %llu and %llu)",
                             gguf_show(t->name, nb), (unsigned long long)prev, (unsigned long long)i);
    f->tensor_index.slots[slot] = i + 1;

    at = ps->pos;
    if ((st = gguf_read_u32(ps, &t->n_dims, "tensor n_dims"))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return ls_err_set_at(ps->err, LS_E_FORMAT, at, "tensor '%s' has n_dims %u (expected 1..%d)",
                             gguf_show(t->name, nb), t->n_dims, GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    bool overflow = false;
    uint64_t dims_at = ps->pos;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = ps->pos;
        if ((st = gguf_read_u64(ps, &t->ne[d], "tensor dimension"))) return st;
        if (t->ne[d] == 0)
            return ls_err_set_at(ps->err, LS_E_FORMAT, at, "tensor '%s' dimension %u is 0", gguf_show(t->name, nb),
                                 d);
        if (ls_mul_u64(n_elems, t->ne[d], &n_elems)) overflow = true;
    }
    if (overflow || n_elems > (uint64_t)INT64_MAX)
        return ls_err_set_at(ps->err, LS_E_FORMAT, dims_at,
                             "tensor '%s' dimensions overflow (ne = [%llu, %llu, %llu, %llu])",
                             gguf_show(t->name, nb), (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                             (unsigned long long)t->ne[2], (unsigned long long)t->ne[3]);
    t->n_elems = n_elems;

    at = ps->pos;
    if ((st = gguf_read_u32(ps, &t->type, "tensor type"))) return st;
    const ls_type_info *ti = ls_type_get(t->type);
    if (!ti) return ls_err_set_at(ps->err, LS_E_FORMAT, at, "tensor '%s' has unknown type %u", gguf_show(t->name, nb),
                                  t->type);
    if (ti->block_elems == 0 || t->ne[0] % ti->block_elems != 0)
        return ls_err_set_at(ps->err, LS_E_FORMAT, dims_at,
                             "tensor '%s' row length %llu is not a multiple of the block size %u of type %s",
                             gguf_show(t->name, nb), (unsigned long long)t->ne[0], ti->block_elems, ti->name);
    ls_err scratch;
    ls_err_clear(&scratch);
    if (ls_type_nbytes(t->type, n_elems, &t->nbytes, &scratch) != LS_OK)
        return ls_err_set_at(ps->err, LS_E_FORMAT, dims_at, "tensor '%s' size is invalid: %s", gguf_show(t->name, nb),
                             scratch.msg);

    at = ps->pos;
    *off_pos = at;
    if ((st = gguf_read_u64(ps, &t->offset, "tensor offset"))) return st;
    if (t->offset % f->alignment != 0)
        return ls_err_set_at(ps->err, LS_E_FORMAT, at, "tensor '%s' offset %llu is not a multiple of the alignment %u",
                             gguf_show(t->name, nb), (unsigned long long)t->offset, f->alignment);
    return LS_OK;
}

typedef struct {
    uint64_t offset;
    uint64_t idx;
} gguf_span;

static int gguf_span_cmp(const void *a, const void *b) {
    const gguf_span *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Places the data section and checks every tensor's bytes: inside the file, no overlaps.
 * off_pos: (n_tensors) file offset of each tensor's offset field, for messages. */
static ls_status gguf_check_data(gguf_parser *ps, const uint64_t *off_pos) {
    gguf_file *f = ps->f;
    gguf_namebuf nb, nb2;
    uint64_t pad = (f->alignment - ps->pos % f->alignment) % f->alignment;
    if (ls_add_u64(ps->pos, pad, &f->data_offset))
        return ls_err_set_at(ps->err, LS_E_FORMAT, ps->pos, "data section offset overflows");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t start, end;
        if (ls_add_u64(f->data_offset, t->offset, &start) || ls_add_u64(start, t->nbytes, &end))
            return ls_err_set_at(ps->err, LS_E_FORMAT, off_pos[i],
                                 "tensor '%s' data offset %llu + size %llu overflows", gguf_show(t->name, nb),
                                 (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        if (end > f->size)
            return ls_err_set_at(ps->err, LS_E_FORMAT, off_pos[i],
                                 "tensor '%s' data [%llu, %llu) runs past end of file (size %llu)",
                                 gguf_show(t->name, nb), (unsigned long long)start, (unsigned long long)end,
                                 (unsigned long long)f->size);
        t->data = f->base + start;
    }
    if (f->n_tensors < 2) return LS_OK;
    gguf_span *spans = ls_malloc((size_t)f->n_tensors * sizeof *spans); /* n_tensors <= size / 33: no overflow */
    if (!spans)
        return ls_err_set(ps->err, LS_E_NOMEM, "out of memory sorting %llu tensors",
                          (unsigned long long)f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) spans[i] = (gguf_span){f->tensors[i].offset, i};
    qsort(spans, (size_t)f->n_tensors, sizeof *spans, gguf_span_cmp);
    ls_status st = LS_OK;
    for (uint64_t k = 1; k < f->n_tensors; k++) {
        const gguf_tensor *a = &f->tensors[spans[k - 1].idx], *b = &f->tensors[spans[k].idx];
        if (a->offset + a->nbytes > b->offset) { /* both end inside the file: no overflow */
            st = ls_err_set_at(ps->err, LS_E_FORMAT, off_pos[spans[k].idx],
                               "tensors '%s' and '%s' overlap (data offsets [%llu, %llu) and [%llu, %llu))",
                               gguf_show(a->name, nb), gguf_show(b->name, nb2), (unsigned long long)a->offset,
                               (unsigned long long)(a->offset + a->nbytes), (unsigned long long)b->offset,
                               (unsigned long long)(b->offset + b->nbytes));
            break;
        }
    }
    free(spans);
    return st;
}

/* ---- the whole file --------------------------------------------------------- */

static ls_status gguf_parse(gguf_file *f, ls_err *err) {
    gguf_parser ps = {f, 0, err};
    uint32_t magic;
    ls_status st;
    if ((st = gguf_read_u32(&ps, &magic, "magic"))) return st;
    if (magic != GGUF_MAGIC)
        return ls_err_set_at(err, LS_E_FORMAT, 0, "bad magic 0x%08x (expected 'GGUF')", magic);
    if ((st = gguf_read_u32(&ps, &f->version, "version"))) return st;
    if (f->version != 2 && f->version != 3) {
        const char *hint = (f->version & 0xffffu) == 0 && f->version != 0 ? " (a big-endian file? only little-endian is supported)" : "";
        return ls_err_set_at(err, LS_E_UNSUPPORTED, 4, "unsupported GGUF version %u%s", f->version, hint);
    }
    if ((st = gguf_read_u64(&ps, &f->n_tensors, "tensor count"))) return st;
    if ((st = gguf_read_u64(&ps, &f->n_kv, "KV count"))) return st;

    /* Absurd counts are rejected before anything is allocated for them. */
    uint64_t left = gguf_left(&ps);
    if (f->n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return ls_err_set_at(err, LS_E_FORMAT, 8, "tensor count %llu is absurd for a %llu-byte file",
                             (unsigned long long)f->n_tensors, (unsigned long long)f->size);
    if (f->n_kv > left / GGUF_MIN_KV_BYTES)
        return ls_err_set_at(err, LS_E_FORMAT, 16, "KV count %llu is absurd for a %llu-byte file",
                             (unsigned long long)f->n_kv, (unsigned long long)f->size);
    uint64_t kvb, tb, both;
    if (ls_mul_u64(f->n_kv, GGUF_MIN_KV_BYTES, &kvb) || ls_mul_u64(f->n_tensors, GGUF_MIN_TENSOR_BYTES, &tb) ||
        ls_add_u64(kvb, tb, &both) || both > left)
        return ls_err_set_at(err, LS_E_FORMAT, 8,
                             "tensor count %llu and KV count %llu are absurd for a %llu-byte file",
                             (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv,
                             (unsigned long long)f->size);

    if (f->n_kv) {
        if (!(f->kvs = gguf_alloc(&ps, f->n_kv, sizeof *f->kvs, "the KV table"))) return LS_E_NOMEM;
        if (!(f->kv_pos = gguf_alloc(&ps, f->n_kv, sizeof *f->kv_pos, "the KV table")))
            return LS_E_NOMEM;
    }
    if ((st = gguf_parse_kvs(&ps))) return st;
    if ((st = gguf_check_general(&ps))) return st;

    uint64_t *off_pos = NULL;
    if (f->n_tensors) {
        if (!(f->tensors = gguf_alloc(&ps, f->n_tensors, sizeof *f->tensors, "the tensor table")))
            return LS_E_NOMEM;
        if (!(off_pos = gguf_alloc(&ps, f->n_tensors, sizeof *off_pos, "the tensor table")))
            return LS_E_NOMEM;
    }
    if ((st = gguf_index_init(&ps, &f->tensor_index, f->n_tensors, "the tensor index"))) return st;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((st = gguf_parse_tensor(&ps, i, &off_pos[i]))) return st;
    return gguf_check_data(&ps, off_pos);
}

static gguf_file *gguf_open_impl(gguf_file *f, ls_err *err) {
    ls_err_clear(err);
    if (gguf_parse(f, err) != LS_OK) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open_mem(const void *buf, size_t size, ls_err *err) {
    LS_ASSERT(buf != NULL || size == 0);
    gguf_file *f = ls_calloc(1, sizeof *f);
    if (!f) {
        ls_err_set(err, LS_E_NOMEM, "out of memory allocating a gguf_file");
        return NULL;
    }
    static const uint8_t empty[1] = {0};
    f->fd = -1;
    f->n_shards = 1;
    f->base = buf ? buf : empty;
    f->size = size;
    return gguf_open_impl(f, err);
}

static gguf_file *gguf_open_file(const char *path, bool is_shard, ls_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ls_err_set(err, LS_E_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ls_err_set(err, LS_E_IO, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        ls_err_set(err, LS_E_IO, "cannot map '%s': not a regular file", path);
        close(fd);
        return NULL;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        ls_err_set(err, LS_E_IO, "cannot map '%s': %llu bytes exceed the address space", path,
                   (unsigned long long)sb.st_size);
        close(fd);
        return NULL;
    }
    gguf_file *f = ls_calloc(1, sizeof *f);
    if (!f) {
        ls_err_set(err, LS_E_NOMEM, "out of memory allocating a gguf_file");
        close(fd);
        return NULL;
    }
    static const uint8_t empty[1] = {0};
    f->fd = fd;
    f->base = empty;
    f->size = (uint64_t)sb.st_size;
    f->is_shard = is_shard;
    f->n_shards = 1;
    if (sb.st_size > 0) { /* mmap of 0 bytes fails; an empty file just fails to parse */
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            ls_err_set(err, LS_E_IO, "cannot mmap '%s': %s", path, strerror(errno));
            close(fd);
            free(f);
            return NULL;
        }
        f->map = m;
        f->map_len = (size_t)sb.st_size;
        f->base = m;
    }
    return gguf_open_impl(f, err);
}

/* ---- split models (gguf-split) -----------------------------------------------
 * As llama.cpp writes and reads them: every shard carries split.no (its 0-based
 * index, u16), split.count (u16) and split.tensors.count (i32, the tensors of all
 * shards together); the first holds the metadata and may hold tensors, each holds its
 * own tensors in its own data section, and shard i (0-based) of n is named
 * PREFIX-%05d-of-%05d.gguf with i + 1 and n.  The model is opened by its first shard. */

/* An integer key as u64 (any integer type), or false when absent or not an integer. */
static bool gguf_int_key(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_value *v = gguf_find(f, key);
    if (!v || !gguf_vtype_is_int(v->type)) return false;
    *out = gguf_vtype_is_signed(v->type) ? v->v.i64 : (v->v.u64 > INT64_MAX ? INT64_MAX : (int64_t)v->v.u64);
    return true;
}

static ls_status gguf_open_splits(gguf_file *f, const char *path, ls_err *err) {
    int64_t count, no, total;
    if (!gguf_find(f, "split.count")) return LS_OK;
    if (!gguf_int_key(f, "split.count", &count) || count < 1 || count > 65535)
        return ls_err_set(err, LS_E_FORMAT, "'%s': split.count is not an integer in 1..65535", path);
    if (!gguf_int_key(f, "split.no", &no))
        return ls_err_set(err, LS_E_FORMAT, "'%s': split.count %lld without an integer split.no", path,
                          (long long)count);
    if (no != 0)
        return ls_err_set(err, LS_E_INVALID,
                          "'%s' is shard %lld of %lld of a split model (split.no %lld): open the first shard, "
                          "named ...-00001-of-%05lld.gguf", path, (long long)no + 1, (long long)count, (long long)no,
                          (long long)count);
    if (!gguf_int_key(f, "split.tensors.count", &total) || total < 0)
        return ls_err_set(err, LS_E_FORMAT, "'%s': split model without a valid split.tensors.count", path);
    if (count == 1) {
        if ((uint64_t)total != f->n_tensors)
            return ls_err_set(err, LS_E_FORMAT, "'%s': split.tensors.count is %lld but the file holds %llu tensors",
                              path, (long long)total, (unsigned long long)f->n_tensors);
        return LS_OK;
    }
    char tail[64];
    snprintf(tail, sizeof tail, "-00001-of-%05lld.gguf", (long long)count);
    size_t plen = strlen(path), tlen = strlen(tail);
    if (plen < tlen || strcmp(path + plen - tlen, tail) != 0)
        return ls_err_set(err, LS_E_INVALID,
                          "'%s' is the first of %lld shards (split.count) but its name does not end in '%s', so "
                          "the others cannot be found", path, (long long)count, tail);
    char *name = ls_malloc(plen + 1);
    f->shards = ls_calloc((size_t)count - 1, sizeof *f->shards);
    if (!name || !f->shards) {
        free(name);
        return ls_err_set(err, LS_E_NOMEM, "out of memory opening %lld shards", (long long)count);
    }
    ls_status st = LS_OK;
    uint64_t n = f->n_tensors;
    for (int64_t i = 1; i < count && !st; i++) {
        memcpy(name, path, plen - tlen);
        snprintf(name + plen - tlen, tlen + 1, "-%05lld-of-%05lld.gguf", (long long)i + 1, (long long)count);
        ls_err e;
        gguf_file *s = gguf_open_file(name, true, &e);
        if (!s) {
            st = ls_err_set(err, e.code, "shard %lld of %lld: %s", (long long)i + 1, (long long)count, e.msg);
            break;
        }
        f->shards[i - 1] = s;
        f->n_shards++;
        int64_t sno, scount;
        if (!gguf_int_key(s, "split.no", &sno))
            st = ls_err_set(err, LS_E_FORMAT, "shard '%s' has no integer split.no (expected %lld)", name, (long long)i);
        else if (sno != i)
            st = ls_err_set(err, LS_E_FORMAT, "shard '%s' has split.no %lld (expected split.no %lld)", name,
                            (long long)sno, (long long)i);
        else if (gguf_int_key(s, "split.count", &scount) && scount != count)
            st = ls_err_set(err, LS_E_FORMAT, "shard '%s' has split.count %lld, the first shard %lld", name,
                            (long long)scount, (long long)count);
        else if (s->n_tensors > UINT64_MAX - n)
            st = ls_err_set(err, LS_E_FORMAT, "shard '%s': tensor count overflows", name);
        else
            n += s->n_tensors;
    }
    free(name);
    if (st) return st;
    if (n != (uint64_t)total)
        return ls_err_set(err, LS_E_FORMAT, "'%s': split.tensors.count is %lld but the %lld shards hold %llu tensors",
                          path, (long long)total, (long long)count, (unsigned long long)n);
    /* One table of every shard's tensors, the first shard's first (their data pointers point
     * into their own shard's mapping); a name in two shards is an error naming both. */
    gguf_parser ps = {f, 0, err};
    gguf_tensor *all = n ? gguf_alloc(&ps, n, sizeof *all, "the split model's tensor table") : NULL;
    gguf_index idx = {0};
    if ((n && !all) || gguf_index_init(&ps, &idx, n, "the split model's tensor index")) return LS_E_NOMEM;
    uint64_t k = 0;
    for (uint32_t sh = 0; sh < f->n_shards; sh++) {
        const gguf_file *s = sh ? f->shards[sh - 1] : f;
        for (uint64_t j = 0; j < s->n_tensors; j++, k++) {
            all[k] = s->tensors[j];
            all[k].shard = sh;
            uint64_t slot, prev = gguf_index_find(&idx, all[k].name.ptr, all[k].name.len, all, sizeof *all, &slot);
            if (prev != UINT64_MAX) {
                gguf_namebuf nb;
                return ls_err_set(err, LS_E_FORMAT, "tensor '%s' is in shard %u and in shard %u of '%s'",
                                  gguf_show(all[k].name, nb), all[prev].shard + 1, sh + 1, path);
            }
            idx.slots[slot] = k + 1;
        }
    }
    f->tensors = all;
    f->n_tensors = n;
    f->tensor_index = idx;
    return LS_OK;
}

gguf_file *gguf_open(const char *path, ls_err *err) {
    gguf_file *f = gguf_open_file(path, false, err);
    if (f && gguf_open_splits(f, path, err)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (uint32_t i = 0; i + 1 < f->n_shards; i++) gguf_close(f->shards[i]);
    free(f->shards);
    for (gguf_chunk *c = f->chunks; c;) {
        gguf_chunk *next = c->next;
        free(c);
        c = next;
    }
    if (f->map) munmap(f->map, f->map_len);
    if (f->fd >= 0) close(f->fd);
    free(f);
}

static ls_status gguf_check_one(const gguf_file *f, ls_err *err) {
    if (f->fd < 0) return LS_OK;
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) return ls_err_set(err, LS_E_IO, "cannot stat the mapped file: %s", strerror(errno));
    if ((uint64_t)sb.st_size < f->size)
        return ls_err_set(err, LS_E_IO, "the file was truncated while mapped: %llu bytes now, %llu when opened",
                          (unsigned long long)sb.st_size, (unsigned long long)f->size);
    return LS_OK;
}

ls_status gguf_check_intact(const gguf_file *f, ls_err *err) {
    ls_status st = gguf_check_one(f, err);
    for (uint32_t i = 0; !st && i + 1 < f->n_shards; i++) {
        ls_err e;
        if ((st = gguf_check_one(f->shards[i], &e)))
            ls_err_set(err, st, "shard %u of %u: %s", i + 2, f->n_shards, e.msg);
    }
    return st;
}

uint32_t gguf_n_shards(const gguf_file *f) { return f->n_shards; }

const void *gguf_shard_bytes(const gguf_file *f, uint32_t i, uint64_t *size) {
    const gguf_file *s = i == 0 ? f : i < f->n_shards ? f->shards[i - 1] : NULL;
    *size = s ? s->size : 0;
    return s ? s->base : NULL;
}

uint64_t gguf_total_size(const gguf_file *f) {
    uint64_t n = f->size;
    for (uint32_t i = 0; i + 1 < f->n_shards; i++) n += f->shards[i]->size;
    return n;
}

/* Gives back the pages of [p, p + n) that lie inside one of f's mappings (whole pages
 * only): the mapping is read-only and private, so a later read faults them in again from
 * the file, unchanged.  Nothing for a caller's buffer (gguf_open_mem). */
void gguf_release(const gguf_file *f, const void *p, uint64_t n) {
#ifdef MADV_DONTNEED
    const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    for (uint32_t i = 0; i < f->n_shards; i++) {
        const gguf_file *s = i ? f->shards[i - 1] : f;
        const uintptr_t lo = (uintptr_t)s->map, hi = lo + s->map_len, a = (uintptr_t)p;
        if (!s->map || a < lo || a >= hi) continue;
        uintptr_t b = a + (n < hi - a ? n : hi - a);
        uintptr_t pa = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1), pb = b & ~((uintptr_t)page - 1);
        if (pb > pa) (void)madvise((void *)pa, pb - pa, MADV_DONTNEED); /* advice: a failure costs memory only */
        return;
    }
#else
    (void)f, (void)p, (void)n;
#endif
}

bool gguf_shard_identity(const gguf_file *f, uint32_t i, char *buf, size_t cap) {
    if (i >= f->n_shards) return false;
    const gguf_file *s = i ? f->shards[i - 1] : f;
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st) != 0) return false;
    int n = snprintf(buf, cap, "%llu:%llu:%lld:%lld.%09ld:%lld.%09ld", (unsigned long long)st.st_dev,
                     (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
    return n > 0 && (size_t)n < cap;
}

/* ---- accessors ---------------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const gguf_file *f) { return f->size; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
uint64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
uint64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_value *gguf_find(const gguf_file *f, const char *key) {
    uint64_t i = gguf_find_idx(f, key);
    return i == UINT64_MAX ? NULL : &f->kvs[i].value;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    uint64_t i = gguf_index_find(&f->tensor_index, name, strlen(name), f->tensors, sizeof *f->tensors, NULL);
    return i == UINT64_MAX ? NULL : &f->tensors[i];
}

/* ---- typed getters ---------------------------------------------------------- */

/* Finds key, or fails with "missing required key". *pos gets the KV's file offset. */
static ls_status gguf_lookup(const gguf_file *f, const char *key, const gguf_value **out, uint64_t *pos,
                             ls_err *err) {
    uint64_t i = gguf_find_idx(f, key);
    if (i == UINT64_MAX) return ls_err_set(err, LS_E_FORMAT, "missing required key '%s'", key);
    *out = &f->kvs[i].value;
    *pos = f->kv_pos[i];
    return LS_OK;
}

static ls_status gguf_wrong_type(const gguf_value *v, const char *key, uint64_t pos, const char *expected,
                                 ls_err *err) {
    return ls_err_set_at(err, LS_E_FORMAT, pos, "key '%s' has type %s (expected %s)", key,
                         gguf_vtype_name(v->type), expected);
}

/* An integer value checked against [lo, hi] (signed or unsigned view). */
static ls_status gguf_get_int(const gguf_file *f, const char *key, bool want_signed, uint64_t umax, int64_t smin,
                              int64_t smax, const char *tname, uint64_t *uout, int64_t *sout, ls_err *err) {
    const gguf_value *v;
    uint64_t pos;
    ls_status st = gguf_lookup(f, key, &v, &pos, err);
    if (st) return st;
    if (!gguf_vtype_is_int(v->type)) return gguf_wrong_type(v, key, pos, "an integer", err);
    bool neg = gguf_vtype_is_signed(v->type) && v->v.i64 < 0;
    if (want_signed) {
        if (neg ? v->v.i64 < smin : v->v.u64 > (uint64_t)smax) goto range;
        *sout = v->v.i64;
        return LS_OK;
    }
    if (neg || v->v.u64 > umax) goto range;
    *uout = v->v.u64;
    return LS_OK;
range:
    if (neg)
        return ls_err_set_at(err, LS_E_FORMAT, pos, "key '%s' value %lld does not fit in %s", key,
                             (long long)v->v.i64, tname);
    return ls_err_set_at(err, LS_E_FORMAT, pos, "key '%s' value %llu does not fit in %s", key,
                         (unsigned long long)v->v.u64, tname);
}

ls_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, ls_err *err) {
    uint64_t u;
    ls_status st = gguf_get_int(f, key, false, UINT32_MAX, 0, 0, "u32", &u, NULL, err);
    if (st == LS_OK) *out = (uint32_t)u;
    return st;
}

ls_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, ls_err *err) {
    return gguf_get_int(f, key, false, UINT64_MAX, 0, 0, "u64", out, NULL, err);
}

ls_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, ls_err *err) {
    int64_t s;
    ls_status st = gguf_get_int(f, key, true, 0, INT32_MIN, INT32_MAX, "i32", NULL, &s, err);
    if (st == LS_OK) *out = (int32_t)s;
    return st;
}

ls_status gguf_get_f32(const gguf_file *f, const char *key, float *out, ls_err *err) {
    const gguf_value *v;
    uint64_t pos;
    ls_status st = gguf_lookup(f, key, &v, &pos, err);
    if (st) return st;
    if (v->type != GGUF_VT_FLOAT32 && v->type != GGUF_VT_FLOAT64)
        return gguf_wrong_type(v, key, pos, "FLOAT32 or FLOAT64", err);
    *out = (float)v->v.f64;
    return LS_OK;
}

ls_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, ls_err *err) {
    const gguf_value *v;
    uint64_t pos;
    ls_status st = gguf_lookup(f, key, &v, &pos, err);
    if (st) return st;
    if (v->type != GGUF_VT_BOOL) return gguf_wrong_type(v, key, pos, "BOOL", err);
    *out = v->v.u64 != 0;
    return LS_OK;
}

ls_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, ls_err *err) {
    const gguf_value *v;
    uint64_t pos;
    ls_status st = gguf_lookup(f, key, &v, &pos, err);
    if (st) return st;
    if (v->type != GGUF_VT_STRING) return gguf_wrong_type(v, key, pos, "STRING", err);
    *out = v->v.str;
    return LS_OK;
}

ls_status gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem, const gguf_value **out,
                       ls_err *err) {
    const gguf_value *v;
    uint64_t pos;
    ls_status st = gguf_lookup(f, key, &v, &pos, err);
    if (st) return st;
    if (v->type != GGUF_VT_ARRAY) return gguf_wrong_type(v, key, pos, "ARRAY", err);
    if (elem != GGUF_VT_COUNT && v->v.arr.elem_type != elem)
        return ls_err_set_at(err, LS_E_FORMAT, pos, "key '%s' is an array of %s (expected an array of %s)", key,
                             gguf_vtype_name(v->v.arr.elem_type), gguf_vtype_name(elem));
    *out = v;
    return LS_OK;
}

int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i) {
    LS_ASSERT(arr->type == GGUF_VT_ARRAY && i < arr->v.arr.n);
    gguf_vtype t = arr->v.arr.elem_type;
    LS_ASSERT(gguf_vtype_is_int(t) || t == GGUF_VT_BOOL);
    uint32_t size = gguf_vtype_size(t);
    gguf_value v;
    gguf_decode_scalar((const uint8_t *)arr->v.arr.raw + i * size, t, &v);
    return v.v.i64; /* UINT64 values above INT64_MAX wrap (two's complement) */
}

double gguf_arr_f64(const gguf_value *arr, uint64_t i) {
    LS_ASSERT(arr->type == GGUF_VT_ARRAY && i < arr->v.arr.n);
    gguf_vtype t = arr->v.arr.elem_type;
    LS_ASSERT(t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64);
    gguf_value v;
    gguf_decode_scalar((const uint8_t *)arr->v.arr.raw + i * gguf_vtype_size(t), t, &v);
    return v.v.f64;
}
