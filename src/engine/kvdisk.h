/* kvdisk.h - the persistent prefix cache: full KV blocks in files of a directory, so a
 * prefix computed before a restart is loaded instead of prefilled again.
 *
 * One file per full block of LS_KV_BLOCK positions, named by a key that chains the
 * identity (model sha256, recipe version, KV layout) and every token from position 0
 * through the block's last: key_0 = sha256(identity line), key_i = sha256(key_{i-1} hex,
 * the block's tokens as little-endian u32); the file is DIR/<first 32 hex digits of the
 * key>.lskv.  A block's K/V depend only on the tokens up to its last position and their
 * positions (the parity contract), so the file's bits are the bits a cold prefill
 * computes.
 *
 * File layout, little-endian, no padding, nothing written as a raw struct:
 *     0   8  magic "LSKVBLK\0"
 *     8   4  u32 format version (LS_KVDISK_FORMAT)
 *    12   4  u32 recipe version (LOCKSTEP_RECIPE_VERSION of the writer)
 *    16  64  model sha256, 64 ASCII hex digits
 *    80  16  backend name, NUL-padded ("cpu")
 *    96   8  KV element type, NUL-padded ("f32")
 *   104   4  u32 n_layer
 *   108   4  u32 n_head_kv
 *   112   4  u32 head_dim
 *   116   4  u32 block positions (LS_KV_BLOCK)
 *   120   4  u32 n_prefix: tokens from position 0 through the block's last (a multiple
 *            of the block size; the block holds positions n_prefix - block .. n_prefix-1)
 *   124   4  u32 0 (reserved)
 *   128   8  u64 payload bytes (n_layer * 2 * n_head_kv * block * head_dim * 4)
 *   136      n_prefix u32 tokens
 *            payload: the block, [layer][K|V][n_head_kv][block][head_dim] f32
 *   end-64 64 sha256 of every byte before it, ASCII hex
 * A file is used only when every field matches this process's identity and layout, its
 * tokens are the prefix asked for, its size is exact and the checksum holds; otherwise it
 * is ignored with a warning that names the reason, and removed.  Files are written to a
 * temporary name (NAME.lskv.tmp.PID.N; left over by a dead process, deleted at open) and renamed, so a crash mid-write leaves no partial file under a block's
 * name.  The directory's block files are kept under a size cap, least recently used
 * (file mtime, touched on every hit) deleted first. */
#ifndef LS_ENGINE_KVDISK_H
#define LS_ENGINE_KVDISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define LS_KVDISK_FORMAT 1u
#define LS_KVDISK_KEY_HEX 64

typedef struct ls_kvdisk ls_kvdisk;

typedef struct {
    const char *dir;          /* created if missing */
    int64_t max_bytes;        /* cap on the directory's block files; 0 = 1 GiB */
    const char *model_sha256; /* 64 hex digits */
    const char *backend;      /* "cpu" */
    uint32_t recipe;          /* LOCKSTEP_RECIPE_VERSION (a test may pass another) */
    int32_t n_layer, n_head_kv, head_dim;
    void (*log)(void *ud, const char *msg); /* warnings; NULL: stderr */
    void *log_ud;
} ls_kvdisk_params;

typedef struct {
    uint64_t loaded, written, rejected; /* blocks */
    uint64_t files, bytes;              /* in the index now */
} ls_kvdisk_stats;

/* Opens (creates) the directory and indexes its block files (names, sizes, mtimes; the
 * contents are checked when a block is loaded).  Caller owns the result (ls_kvdisk_close). */
ls_kvdisk *ls_kvdisk_open(const ls_kvdisk_params *p, ls_err *err);
void ls_kvdisk_close(ls_kvdisk *d);

/* The bytes of one block's payload (what load fills and save takes). */
size_t ls_kvdisk_payload_bytes(const ls_kvdisk *d);

/* key_i from key_{i-1} (NULL: the root, key_0) and the block's LS_KV_BLOCK tokens. */
void ls_kvdisk_key_next(const ls_kvdisk *d, const char *prev, const int32_t *block_toks, char key[LS_KVDISK_KEY_HEX + 1]);
/* The key of the prefix toks[0..n), n a positive multiple of LS_KV_BLOCK. */
void ls_kvdisk_key(const ls_kvdisk *d, const int32_t *toks, int32_t n, char key[LS_KVDISK_KEY_HEX + 1]);

/* Whether the index has a file for the key (nothing is read). */
bool ls_kvdisk_has(const ls_kvdisk *d, const char *key);
/* Reads and checks the file of key for the prefix toks[0..n) into payload; false when
 * there is none or it is rejected (a warning names why; the file is removed). */
bool ls_kvdisk_load(ls_kvdisk *d, const char *key, const int32_t *toks, int32_t n, void *payload);
/* Writes the block of prefix toks[0..n) (temp file + rename), then deletes least recently
 * used files past the cap.  false (with a warning, once) when it cannot be written. */
bool ls_kvdisk_save(ls_kvdisk *d, const char *key, const int32_t *toks, int32_t n, const void *payload);

void ls_kvdisk_get_stats(const ls_kvdisk *d, ls_kvdisk_stats *s);

#endif
