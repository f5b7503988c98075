/* util.c - see util.h. */
#include "util/util.h"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/alloc.h"

double ls_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool ls_buf_append(ls_buf *b, const void *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) {
            if (nc > SIZE_MAX / 2) return false;
            nc *= 2;
        }
        char *t = ls_realloc(b->p, nc);
        if (!t) return false;
        b->p = t;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

static void ls_hex(const unsigned char *md, char hex[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
}

bool ls_sha256_file(const char *path, char hex[65]) {
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
    if (ok) ls_hex(md, hex);
    return ok;
}

bool ls_sha256_parts(const void *const *p, const uint64_t *n, size_t k, char hex[65]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned int len = 0;
    bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t i = 0; ok && i < k; i++)
        for (uint64_t off = 0; ok && off < n[i]; off += 1u << 30) { /* EVP takes size_t; pieces of 1 GiB */
            uint64_t m = n[i] - off < (1u << 30) ? n[i] - off : (1u << 30);
            ok = EVP_DigestUpdate(ctx, (const unsigned char *)p[i] + off, (size_t)m);
        }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &len) && len == 32;
    EVP_MD_CTX_free(ctx);
    if (ok) ls_hex(md, hex);
    return ok;
}

void ls_sha256_str(const char *s, char hex[65]) {
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL);
    ls_hex(md, hex);
}

void ls_mkdirs(const char *dir) {
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
