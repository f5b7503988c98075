/* utf8.c - UTF-8 validation, shared by the tokenizer, the server's request reader and its
 * reply writer (a file of its own so that the parsers' fuzz targets link it alone). */
#include <stddef.h>

#include "lockstep.h"

/* Length of the valid UTF-8 sequence at p (n bytes available), 0 if the bytes
 * there do not start a complete valid sequence.  Rejects overlongs, surrogates
 * and code points above U+10FFFF. */
size_t ls_utf8_valid_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 0;
    if (n < len) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return len;
}
