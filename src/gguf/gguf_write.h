/* gguf_write.h - a small in-memory GGUF builder (v3 by default; layout in gguf.h).
 *
 * Used by tests and tools to write synthetic files.  Keys and tensors are written
 * in the order they are added; tensor data is laid out in that order too, each
 * tensor padded to the alignment.  Every argument is copied, so callers may free
 * theirs right after a call.
 *
 * Errors are sticky: the first failing call (LS_E_INVALID for a bad argument such
 * as a duplicate key or a wrong tensor size, LS_E_NOMEM) is recorded, later add
 * calls do nothing and return it, and gguf_writer_serialize/gguf_writer_write_file
 * report it with its message.  So a caller may add everything unchecked and check
 * once at the end. */
#ifndef LS_GGUF_GGUF_WRITE_H
#define LS_GGUF_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct gguf_writer gguf_writer;

/* Caller owns the result; free with gguf_writer_free.  NULL when out of memory. */
gguf_writer *gguf_writer_create(void);
void gguf_writer_free(gguf_writer *w);

/* The header version (default 3).  Not validated, so tests can write v1 or v4 files. */
void gguf_writer_set_version(gguf_writer *w, uint32_t version);
/* Pads tensor data to `alignment` (a nonzero power of two) and adds the UINT32 KV
 * general.alignment.  Without it the padding is GGUF_DEFAULT_ALIGNMENT and no KV is written. */
ls_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);

/* Scalar and string KVs.  A key may be added once (LS_E_INVALID otherwise). */
ls_status gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
ls_status gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
ls_status gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
ls_status gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
ls_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
ls_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
ls_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
ls_status gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
ls_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
ls_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
ls_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
ls_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
/* A string of len bytes (may hold NULs). */
ls_status gguf_writer_add_strn(gguf_writer *w, const char *key, const char *v, uint64_t len);

/* An array of n scalars of type elem (not STRING/ARRAY); data holds them packed, in
 * host (= little-endian) layout: uint8_t[n] for UINT8, float[n] for FLOAT32, bool as
 * one byte 0/1, etc. */
ls_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n);
/* An array of n NUL-terminated strings. */
ls_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* A value given by its exact encoding (for ARRAY: u32 elem_type, u64 n, elements), for
 * values the typed calls cannot express (nested arrays).  The bytes are not validated. */
/* A value as gguf_open read it (another file's metadata, copied across; the type kept). */
ls_status gguf_writer_add_value(gguf_writer *w, const char *key, const gguf_value *v);
ls_status gguf_writer_add_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *bytes, size_t nbytes);

/* A tensor of ggml type `type` with shape ne[0..n_dims) (ne[0] innermost); data holds
 * nbytes, which must equal ls_type_nbytes(type, prod(ne)).  The data is copied. */
ls_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                 const uint64_t *ne, const void *data, uint64_t nbytes);

/* The whole file.  On success the caller owns *out (release with free()). */
ls_status gguf_writer_serialize(const gguf_writer *w, void **out, size_t *out_size, ls_err *err);
/* Serializes to `path` (created or truncated).  LS_E_IO names the path on failure. */
ls_status gguf_writer_write_file(const gguf_writer *w, const char *path, ls_err *err);

#endif
