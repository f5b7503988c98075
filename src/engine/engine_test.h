/* engine_test.h - test-only knobs of an engine (tests/unit, the probe's reference
 * engines); never set in serving.  Not part of the public API (lockstep.h). */
#ifndef LS_ENGINE_ENGINE_TEST_H
#define LS_ENGINE_ENGINE_TEST_H

#include "lockstep.h"
#include "kernels/cpu/kernels.h"

typedef struct ls_engine_test {
    /* matmul families (kernels.h) of a host-kernel backend for rows without / with a
     * parity need; NULL = by ls_engine_params.kernels.  The probe withdraws a failing
     * fam_parity. */
    const ls_mm_family *fam, *fam_parity;
    unsigned faults; /* LS_FAULT_* (kernels.h) */
} ls_engine_test;

/* Faults for every engine a process creates, for the end-to-end tests of the probe through
 * the CLI and the server: defined only in build/lockstep-faults (tests/hooks/faults_hook.c
 * reads LOCKSTEP_FAULT there), a weak undefined symbol (NULL) everywhere else, so the
 * shipped binary and library cannot plant a fault. */
unsigned ls_test_faults_hook(void) __attribute__((weak));

/* ls_engine_create with test knobs (t may be NULL: the same as ls_engine_create). */
ls_engine *ls_engine_create_test(const ls_model *m, const ls_engine_params *p, const ls_engine_test *t, ls_err *err);

/* The backend's forward workspace, for tests that look inside it (on the cpu backend:
 * its ls_fwd). */
void *ls_engine_backend_fwd(ls_engine *e);
/* The knobs the engine was created with (faults included). */
const ls_engine_test *ls_engine_test_of(const ls_engine *e);

#endif
