#include "util/err.h"

#include <stdarg.h>
#include <string.h>

ls_status ls_err_set(ls_err *err, ls_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
        err->offset = LS_NO_OFFSET;
    }
    return code;
}

ls_status ls_err_set_at(ls_err *err, ls_status code, uint64_t offset, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof err->msg)
            snprintf(err->msg + n, sizeof err->msg - (size_t)n, " (at byte offset %llu)",
                     (unsigned long long)offset);
        err->code = code;
        err->offset = offset;
    }
    return code;
}

void ls_err_clear(ls_err *err) {
    if (err) {
        err->code = LS_OK;
        err->offset = LS_NO_OFFSET;
        err->msg[0] = '\0';
    }
}

const char *ls_status_name(ls_status code) {
    switch (code) {
    case LS_OK: return "ok";
    case LS_E_IO: return "io error";
    case LS_E_FORMAT: return "format error";
    case LS_E_UNSUPPORTED: return "unsupported";
    case LS_E_NOMEM: return "out of memory";
    case LS_E_INVALID: return "invalid argument";
    case LS_E_RANGE: return "out of range";
    }
    return "unknown error";
}
