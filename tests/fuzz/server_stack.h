/* server_stack.h - runs one fuzz input on a thread with the server's connection-thread
 * stack (LS_SRV_THREAD_STACK, src/server/request.h; libFuzzer's own thread has 8 MiB), so a
 * parse or render that recurses too deep for the server crashes in the fuzzer too. */
#ifndef LS_FUZZ_SERVER_STACK_H
#define LS_FUZZ_SERVER_STACK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "server/request.h"

typedef struct {
    const uint8_t *data;
    size_t size;
} input;

/* fn(&(input){data, size}) on such a thread; traps when the thread cannot be made. */
static inline void on_server_stack(void *(*fn)(void *), const uint8_t *data, size_t size) {
    input in = {data, size};
    pthread_attr_t a;
    pthread_t th;
    if (pthread_attr_init(&a) || pthread_attr_setstacksize(&a, LS_SRV_THREAD_STACK)) __builtin_trap();
    if (pthread_create(&th, &a, fn, &in)) __builtin_trap();
    pthread_join(th, NULL);
    pthread_attr_destroy(&a);
}

#endif
