/* gguf.h - a validating, read-only reader for GGUF v2 and v3 files.
 *
 * File layout (all little-endian):
 *   u32  magic  "GGUF" (0x46554747)
 *   u32  version (2 or 3)
 *   u64  tensor_count
 *   u64  kv_count
 *   kv_count x { gguf_string key; u32 value_type; value }
 *   tensor_count x { gguf_string name; u32 n_dims; u64 ne[n_dims]; u32 type; u64 offset }
 *   padding to `general.alignment` (u32 key, default 32)
 *   tensor data; each tensor at data_start + offset, offset a multiple of the alignment
 * gguf_string = { u64 len; u8 bytes[len] } (not NUL-terminated)
 * value = scalar of value_type, a gguf_string, or an array:
 *   { u32 elem_type; u64 n; n x value-of-elem_type }  (arrays may nest)
 *
 * Every count, length, offset and size is validated with overflow-checked 64-bit
 * arithmetic before use.  A bad file gives NULL and an ls_err naming the problem
 * and its byte offset.  The file is mapped read-only with mmap; all pointers
 * handed out point into that mapping (or into the reader's own parse tables) and
 * stay valid until gguf_close. */
#ifndef LS_GGUF_GGUF_H
#define LS_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define GGUF_MAGIC 0x46554747u
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4

typedef enum {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT = 13,
} gguf_vtype;

typedef struct {
    uint64_t len;
    const char *ptr; /* into the mapping; NOT NUL-terminated */
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u64; /* every unsigned integer type, and bool (0/1) */
        int64_t i64;  /* every signed integer type */
        double f64;   /* FLOAT32 (exactly widened) and FLOAT64 */
        gguf_str str;
        struct {
            gguf_vtype elem_type;
            uint64_t n;
            /* scalar elements: raw little-endian bytes in the mapping (unaligned;
             * read them with the gguf_arr_* accessors).  NULL for STRING/ARRAY. */
            const void *raw;
            const gguf_str *strs;     /* STRING elements, n entries (else NULL) */
            const gguf_value *items;  /* ARRAY elements (nested arrays), n entries (else NULL) */
        } arr;
    } v;
};

typedef struct {
    gguf_str key;
    gguf_value value;
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (innermost) dim; unused dims are 1 */
    uint32_t type;              /* ls_type */
    uint64_t offset;            /* relative to the data section */
    uint64_t n_elems;
    uint64_t nbytes;
    const void *data;           /* into the mapping (of its shard's, for a split model) */
    uint32_t shard;             /* 0-based shard holding it (0 unless split) */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Opens, maps and validates `path`.  Returns NULL and fills err on failure.
 * Caller owns the result; free with gguf_close.
 * A model split with gguf-split is opened by its first shard, PREFIX-00001-of-0000N.gguf
 * (split.count N > 1): every shard is opened, checked (its split.no, split.count; the
 * tensors of all, split.tensors.count of them, unique by name) and mapped, and the
 * result presents them as one file: the first shard's metadata and every shard's
 * tensors.  An error names the shard. */
gguf_file *gguf_open(const char *path, ls_err *err);
/* Same over a caller-owned buffer that must outlive the result (tests, fuzzing). */
gguf_file *gguf_open_mem(const void *buf, size_t size, ls_err *err);
void gguf_close(gguf_file *f);
/* A mapped file must not shrink while mapped: reading a page past the new end raises
 * SIGBUS.  gguf_open keeps the file open; this checks it still has every byte it had
 * (LS_E_IO naming both sizes if not).  Always LS_OK for gguf_open_mem. */
ls_status gguf_check_intact(const gguf_file *f, ls_err *err);

/* Shards opened together (1 unless split), and their bytes together. */
uint32_t gguf_n_shards(const gguf_file *f);
/* The whole bytes of shard i (0: the first) and their count; NULL past the last. */
const void *gguf_shard_bytes(const gguf_file *f, uint32_t i, uint64_t *size);
/* What identifies shard i's file on this machine as the bytes it was opened with: device,
 * inode, size, modification and status-change times (nanoseconds), as text into buf.
 * false: a buffer (gguf_open_mem) or fstat failed. */
bool gguf_shard_identity(const gguf_file *f, uint32_t i, char *buf, size_t cap);
uint64_t gguf_total_size(const gguf_file *f);
/* Advice: the pages of [p, p + n) inside f's mappings are not needed for now (their
 * data was copied elsewhere); they stay readable (read again from the file).  Nothing
 * for gguf_open_mem. */
void gguf_release(const gguf_file *f, const void *p, uint64_t n);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);  /* of the (first) file */
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* file offset of the tensor data section */

uint64_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i);
const gguf_value *gguf_find(const gguf_file *f, const char *key); /* NULL if absent */

uint64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

/* Typed getters for model loaders.  A missing key gives LS_E_FORMAT
 * "missing required key 'K'"; a wrong type gives LS_E_FORMAT naming key and type.
 * Integers of any width/sign are accepted when the value fits. */
ls_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, ls_err *err);
ls_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, ls_err *err);
ls_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, ls_err *err);
ls_status gguf_get_f32(const gguf_file *f, const char *key, float *out, ls_err *err); /* FLOAT32/FLOAT64 */
ls_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, ls_err *err);
ls_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, ls_err *err);
/* An ARRAY whose elements have type `elem` (GGUF_VT_COUNT accepts any). */
ls_status gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem, const gguf_value **out,
                       ls_err *err);

/* Element access for scalar arrays (bounds are the caller's: i < v->v.arr.n). */
int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i);  /* any integer elem type */
double gguf_arr_f64(const gguf_value *arr, uint64_t i);   /* FLOAT32/FLOAT64 */

const char *gguf_vtype_name(gguf_vtype t);
bool gguf_str_eq(gguf_str s, const char *cstr);

#endif
