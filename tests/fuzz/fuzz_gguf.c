/* libFuzzer target: the GGUF reader on arbitrary bytes.  Whatever the input, the
 * reader must return a file or an error with a message, never crash or read out
 * of bounds (run under ASan/UBSan by `make fuzz`). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ls_err err;
    ls_err_clear(&err);
    gguf_file *f = gguf_open_mem(data, size, &err);
    if (!f) {
        if (err.code == LS_OK || err.msg[0] == '\0') __builtin_trap(); /* an error must say what */
        return 0;
    }
    /* Touch everything the reader hands out. */
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (gguf_find(f, "general.architecture") == NULL) __builtin_trap();
        (void)kv;
    }
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink;
    gguf_close(f);
    return 0;
}
