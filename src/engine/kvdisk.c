/* kvdisk.c - the persistent prefix cache's files: index, load with checks, atomic
 * write, least-recently-used deletion past the size cap (see kvdisk.h for the format). */
#include "engine/kvdisk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kv_store.h" /* LS_KV_BLOCK */
#include "util/alloc.h"
#include "util/util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvdisk.c writes the host's floats as the file's little-endian payload: a big-endian host needs byte swaps"
#endif

#define HDR 136
#define SUM 64
#define NAME_HEX 32
#define EXT ".lskv"
static const char MAGIC[8] = {'L', 'S', 'K', 'V', 'B', 'L', 'K', 0};

typedef struct {
    char name[NAME_HEX + 1]; /* the key's first 32 hex digits */
    uint64_t bytes;
    int64_t stamp;           /* last use, ns since the epoch (file mtime) */
} entry;

struct ls_kvdisk {
    char *dir;
    uint64_t max_bytes;
    char sha[65], backend[16];
    uint32_t recipe;
    uint32_t n_layer, n_head_kv, head_dim;
    size_t payload;
    char root[LS_KVDISK_KEY_HEX + 1]; /* key_0 */
    void (*log)(void *, const char *);
    void *log_ud;
    entry *ents;
    size_t n_ents, cap_ents;
    uint64_t total;
    bool warned_write, warned_cap;
    ls_kvdisk_stats st;
};

static void warn(const ls_kvdisk *d, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d->log) d->log(d->log_ud, msg);
    else fprintf(stderr, "lockstep: %s\n", msg);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static bool is_hex_name(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static void file_path(const ls_kvdisk *d, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%.32s" EXT, d->dir, name);
}

static entry *find(const ls_kvdisk *d, const char *key) {
    for (size_t i = 0; i < d->n_ents; i++)
        if (!memcmp(d->ents[i].name, key, NAME_HEX)) return &d->ents[i];
    return NULL;
}

static void drop(ls_kvdisk *d, entry *x) { /* from the index only */
    d->total -= x->bytes;
    *x = d->ents[--d->n_ents];
}

static bool add(ls_kvdisk *d, const char *name, uint64_t bytes, int64_t stamp) {
    entry *x = find(d, name);
    if (x) {
        d->total -= x->bytes;
    } else {
        if (d->n_ents == d->cap_ents) {
            size_t nc = d->cap_ents ? d->cap_ents * 2 : 64;
            entry *a = ls_realloc(d->ents, nc * sizeof *a);
            if (!a) return false;
            d->ents = a;
            d->cap_ents = nc;
        }
        x = &d->ents[d->n_ents++];
        memcpy(x->name, name, NAME_HEX);
        x->name[NAME_HEX] = 0;
    }
    x->bytes = bytes;
    x->stamp = stamp;
    d->total += bytes;
    return true;
}

/* Deletes least recently used files until the total fits the cap; `keep` (a name, or
 * NULL) is spared. */
static void enforce_cap(ls_kvdisk *d, const char *keep) {
    while (d->total > d->max_bytes && d->n_ents > 0) {
        entry *old = NULL;
        for (size_t i = 0; i < d->n_ents; i++)
            if ((!keep || memcmp(d->ents[i].name, keep, NAME_HEX)) && (!old || d->ents[i].stamp < old->stamp))
                old = &d->ents[i];
        if (!old) break;
        char path[4200];
        file_path(d, old->name, path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT) warn(d, "cache dir: cannot delete %s: %s", path, strerror(errno));
        drop(d, old);
    }
}

static bool mkdirs(const char *dir) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp) return false;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return false;
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

/* Indexes DIR's block files; removes temporary files whose writer is gone. */
static ls_status scan(ls_kvdisk *d, ls_err *err) {
    DIR *dh = opendir(d->dir);
    if (!dh) return ls_err_set(err, LS_E_IO, "--cache-dir '%s': cannot open it: %s", d->dir, strerror(errno));
    struct dirent *de;
    char path[4200];
    while ((de = readdir(dh))) {
        const char *n = de->d_name;
        size_t len = strlen(n);
        if (len == NAME_HEX + sizeof EXT - 1 && !strcmp(n + NAME_HEX, EXT) && is_hex_name(n, NAME_HEX)) {
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", d->dir, n);
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            if (!add(d, n, (uint64_t)sb.st_size, (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec)) {
                closedir(dh);
                return ls_err_set(err, LS_E_NOMEM, "out of memory indexing --cache-dir '%s'", d->dir);
            }
        } else if (len > NAME_HEX + sizeof EXT - 1 + 5 && is_hex_name(n, NAME_HEX) &&
                   !strncmp(n + NAME_HEX, EXT ".tmp.", sizeof EXT - 1 + 5)) {
            /* NAME.lskv.tmp.PID.N: a write that never finished, unless its process still runs
             * (this one included: another engine of it may be writing into the same directory) */
            long pid = strtol(n + NAME_HEX + sizeof EXT - 1 + 5, NULL, 10);
            if (pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
                snprintf(path, sizeof path, "%s/%s", d->dir, n);
                unlink(path);
            }
        }
    }
    closedir(dh);
    return LS_OK;
}

ls_kvdisk *ls_kvdisk_open(const ls_kvdisk_params *p, ls_err *err) {
    if (!p->dir || !*p->dir) {
        ls_err_set(err, LS_E_INVALID, "--cache-dir is empty");
        return NULL;
    }
    if (!p->model_sha256 || strlen(p->model_sha256) != 64) {
        ls_err_set(err, LS_E_IO, "--cache-dir needs the model file's sha256, which could not be computed");
        return NULL;
    }
    if (p->n_layer < 1 || p->n_head_kv < 1 || p->head_dim < 1) {
        ls_err_set(err, LS_E_INVALID, "kvdisk: bad KV layout");
        return NULL;
    }
    if (!mkdirs(p->dir)) {
        ls_err_set(err, LS_E_IO, "--cache-dir '%s': cannot create it: %s", p->dir, strerror(errno));
        return NULL;
    }
    ls_kvdisk *d = ls_calloc(1, sizeof *d);
    if (!d || !(d->dir = ls_malloc(strlen(p->dir) + 1))) {
        free(d);
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    strcpy(d->dir, p->dir);
    d->max_bytes = p->max_bytes > 0 ? (uint64_t)p->max_bytes : (uint64_t)1 << 30;
    snprintf(d->sha, sizeof d->sha, "%s", p->model_sha256);
    snprintf(d->backend, sizeof d->backend, "%s", p->backend ? p->backend : "cpu");
    d->recipe = p->recipe;
    d->n_layer = (uint32_t)p->n_layer;
    d->n_head_kv = (uint32_t)p->n_head_kv;
    d->head_dim = (uint32_t)p->head_dim;
    d->payload = (size_t)d->n_layer * 2 * d->n_head_kv * LS_KV_BLOCK * d->head_dim * sizeof(float);
    d->log = p->log;
    d->log_ud = p->log_ud;
    char id[256];
    snprintf(id, sizeof id, "lockstep-kv format=%u recipe=%u model=%s backend=%s dtype=f32 layers=%u kv_heads=%u "
             "head_dim=%u block=%d", LS_KVDISK_FORMAT, d->recipe, d->sha, d->backend, d->n_layer, d->n_head_kv,
             d->head_dim, LS_KV_BLOCK);
    ls_sha256_str(id, d->root);
    if (scan(d, err)) {
        ls_kvdisk_close(d);
        return NULL;
    }
    enforce_cap(d, NULL);
    return d;
}

void ls_kvdisk_close(ls_kvdisk *d) {
    if (!d) return;
    free(d->ents);
    free(d->dir);
    free(d);
}

size_t ls_kvdisk_payload_bytes(const ls_kvdisk *d) { return d->payload; }

void ls_kvdisk_key_next(const ls_kvdisk *d, const char *prev, const int32_t *block_toks,
                        char key[LS_KVDISK_KEY_HEX + 1]) {
    unsigned char t[LS_KV_BLOCK * 4];
    for (int i = 0; i < LS_KV_BLOCK; i++) put32(t + 4 * i, (uint32_t)block_toks[i]);
    const void *parts[2] = {prev ? prev : d->root, t};
    const uint64_t n[2] = {LS_KVDISK_KEY_HEX, sizeof t};
    if (!ls_sha256_parts(parts, n, 2, key)) memset(key, '0', LS_KVDISK_KEY_HEX), key[LS_KVDISK_KEY_HEX] = 0;
}

void ls_kvdisk_key(const ls_kvdisk *d, const int32_t *toks, int32_t n, char key[LS_KVDISK_KEY_HEX + 1]) {
    LS_ASSERT(n > 0 && n % LS_KV_BLOCK == 0);
    char prev[LS_KVDISK_KEY_HEX + 1];
    for (int32_t i = 0; i < n; i += LS_KV_BLOCK) {
        ls_kvdisk_key_next(d, i ? prev : NULL, toks + i, key);
        memcpy(prev, key, sizeof prev);
    }
}

bool ls_kvdisk_has(const ls_kvdisk *d, const char *key) { return find(d, key) != NULL; }

static void header(const ls_kvdisk *d, int32_t n, unsigned char h[HDR]) {
    memset(h, 0, HDR);
    memcpy(h, MAGIC, 8);
    put32(h + 8, LS_KVDISK_FORMAT);
    put32(h + 12, d->recipe);
    memcpy(h + 16, d->sha, 64);
    memcpy(h + 80, d->backend, strlen(d->backend));
    memcpy(h + 96, "f32", 3);
    put32(h + 104, d->n_layer);
    put32(h + 108, d->n_head_kv);
    put32(h + 112, d->head_dim);
    put32(h + 116, LS_KV_BLOCK);
    put32(h + 120, (uint32_t)n);
    put64(h + 128, d->payload);
}

/* Why the file's bytes f[0..size) cannot be used for the prefix toks[0..n), or NULL. */
static const char *check(const ls_kvdisk *d, const unsigned char *f, uint64_t size, const int32_t *toks, int32_t n,
                         char *why, size_t cap) {
    const uint64_t want = HDR + (uint64_t)n * 4 + d->payload + SUM;
    if (size < HDR) {
        snprintf(why, cap, "truncated: %llu bytes, less than the %d-byte header", (unsigned long long)size, HDR);
        return why;
    }
    if (memcmp(f, MAGIC, 8)) return "not a lockstep KV block file (bad magic)";
    if (get32(f + 8) != LS_KVDISK_FORMAT) {
        snprintf(why, cap, "file format %u, this build reads %u", get32(f + 8), LS_KVDISK_FORMAT);
        return why;
    }
    if (get32(f + 12) != d->recipe) {
        snprintf(why, cap, "written under recipe version %u, this build computes recipe %u", get32(f + 12), d->recipe);
        return why;
    }
    if (memcmp(f + 16, d->sha, 64)) {
        snprintf(why, cap, "written for another model (sha256 %.12s..., this model is %.12s...)", (const char *)f + 16,
                 d->sha);
        return why;
    }
    unsigned char h[HDR];
    header(d, n, h);
    if (memcmp(f + 80, h + 80, 120 - 80)) {
        snprintf(why, cap, "another KV layout (backend %.15s, %.7s, %u layers, %u kv heads, head_dim %u, block %u; "
                 "this engine: %s, f32, %u, %u, %u, %d)", (const char *)f + 80, (const char *)f + 96, get32(f + 104),
                 get32(f + 108), get32(f + 112), get32(f + 116), d->backend, d->n_layer, d->n_head_kv, d->head_dim,
                 LS_KV_BLOCK);
        return why;
    }
    if (get32(f + 120) != (uint32_t)n || get64(f + 128) != d->payload || get32(f + 124) != 0) {
        snprintf(why, cap, "holds a block of another prefix length (%u positions, asked for %d)", get32(f + 120), n);
        return why;
    }
    if (size != want) {
        snprintf(why, cap, "%s: %llu bytes, expected %llu", size < want ? "truncated" : "trailing bytes",
                 (unsigned long long)size, (unsigned long long)want);
        return why;
    }
    char sum[65];
    const void *parts[1] = {f};
    const uint64_t len[1] = {size - SUM};
    if (!ls_sha256_parts(parts, len, 1, sum)) return "its checksum could not be computed";
    if (memcmp(sum, f + size - SUM, SUM)) return "checksum mismatch (the file is damaged)";
    for (int32_t i = 0; i < n; i++)
        if (get32(f + HDR + 4 * (size_t)i) != (uint32_t)toks[i]) {
            snprintf(why, cap, "holds another prefix (token %d differs)", i);
            return why;
        }
    return NULL;
}

bool ls_kvdisk_load(ls_kvdisk *d, const char *key, const int32_t *toks, int32_t n, void *payload) {
    entry *x = find(d, key);
    if (!x) return false;
    char path[4200], why[256];
    file_path(d, key, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { /* deleted behind our back (another process's cap): not a warning */
        drop(d, x);
        return false;
    }
    struct stat sb;
    unsigned char *f = NULL;
    const char *bad = NULL;
    const uint64_t want = HDR + (uint64_t)n * 4 + d->payload + SUM;
    if (fstat(fd, &sb) != 0) {
        bad = "cannot stat it";
    } else if ((uint64_t)sb.st_size > want + 4096 && (uint64_t)sb.st_size > HDR) {
        snprintf(why, sizeof why, "trailing bytes: %llu bytes, expected %llu", (unsigned long long)sb.st_size,
                 (unsigned long long)want);
        bad = why;
    } else if (!(f = ls_malloc((size_t)sb.st_size + 1))) {
        bad = "out of memory reading it";
    } else {
        size_t got = 0;
        while (got < (size_t)sb.st_size) {
            ssize_t r = read(fd, f + got, (size_t)sb.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        bad = got != (size_t)sb.st_size ? "short read" : check(d, f, got, toks, n, why, sizeof why);
    }
    close(fd);
    if (bad) {
        warn(d, "cache dir: ignoring %s: %s; removed", path, bad);
        unlink(path);
        drop(d, x);
        d->st.rejected++;
        free(f);
        return false;
    }
    memcpy(payload, f + HDR + (size_t)n * 4, d->payload);
    free(f);
    x->stamp = now_ns();
    utimensat(AT_FDCWD, path, NULL, 0); /* the file's mtime is its last use (LRU across restarts) */
    d->st.loaded++;
    return true;
}

static bool write_all(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

bool ls_kvdisk_save(ls_kvdisk *d, const char *key, const int32_t *toks, int32_t n, const void *payload) {
    LS_ASSERT(n > 0 && n % LS_KV_BLOCK == 0);
    const uint64_t bytes = HDR + (uint64_t)n * 4 + d->payload + SUM;
    if (bytes > d->max_bytes) {
        if (!d->warned_cap)
            warn(d, "cache dir: a block file (%llu bytes) is larger than --cache-dir-max (%llu bytes): nothing is "
                    "written", (unsigned long long)bytes, (unsigned long long)d->max_bytes);
        d->warned_cap = true;
        return false;
    }
    unsigned char *h = ls_malloc(HDR + (size_t)n * 4);
    if (!h) return false;
    header(d, n, h);
    for (int32_t i = 0; i < n; i++) put32(h + HDR + 4 * (size_t)i, (uint32_t)toks[i]);
    char sum[65];
    const void *parts[2] = {h, payload};
    const uint64_t len[2] = {HDR + (uint64_t)n * 4, d->payload};
    bool ok = ls_sha256_parts(parts, len, 2, sum);
    char path[4200], tmp[4300];
    file_path(d, key, path, sizeof path);
    static unsigned long seq; /* distinct temporary names for the engines of one process */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    int fd = ok ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    ok = fd >= 0;
    ok = ok && write_all(fd, h, len[0]) && write_all(fd, payload, len[1]) && write_all(fd, sum, SUM);
    int saved = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = false, saved = errno;
    /* temp + rename: a reader (or a restart after a crash) sees the whole file or none */
    if (ok && rename(tmp, path) != 0) ok = false, saved = errno;
    free(h);
    if (!ok) {
        if (fd >= 0) unlink(tmp);
        if (!d->warned_write)
            warn(d, "cache dir: cannot write %s: %s (blocks are not being persisted)", path, strerror(saved));
        d->warned_write = true;
        return false;
    }
    if (!add(d, key, bytes, now_ns())) return false; /* on disk but not indexed: found at the next start */
    d->st.written++;
    enforce_cap(d, key);
    return true;
}

void ls_kvdisk_get_stats(const ls_kvdisk *d, ls_kvdisk_stats *s) {
    *s = d->st;
    s->files = d->n_ents;
    s->bytes = d->total;
}
