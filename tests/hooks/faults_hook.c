/* faults_hook.c - linked into build/lockstep-faults only: the CLI and server with test-only
 * parity faults, for the end-to-end tests that the probe catches them through the serving
 * path (tests/python/test_cli.py, test_server.py).  LOCKSTEP_FAULT=kv-skip,threads,isa
 * plants the LS_FAULT_* bits (src/kernels/cpu/kernels.h) into every engine the process
 * creates (engine_test.h's ls_test_faults_hook); the shipped build/lockstep has no hook. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_test.h"

unsigned ls_test_faults_hook(void) {
    const char *v = getenv("LOCKSTEP_FAULT");
    if (!v || !*v) return 0;
    unsigned f = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "kv-skip")) f |= LS_FAULT_KV_SKIP;
        else if (!strcmp(t, "threads")) f |= LS_FAULT_THREADS;
        else if (!strcmp(t, "isa")) f |= LS_FAULT_ISA;
        else fprintf(stderr, "lockstep: LOCKSTEP_FAULT: unknown fault '%s' (kv-skip, threads, isa) ignored\n", t);
    }
    static int said;
    if (f && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "lockstep: LOCKSTEP_FAULT=%s: deliberate parity faults planted (tests only)\n", v);
    return f;
}
