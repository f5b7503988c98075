/* fixture.h - what the C test files share: the model under test, a seeded generator, and
 * skips that cannot hide.
 *
 * The model is $MODEL (default models/SmolLM2-135M-Instruct.Q4_1.gguf).  When it cannot
 * be read, a test that needs it prints a line starting "SKIPPED:" (which
 * scripts/run-tests.sh counts and lists in its closing summary) and skips; under CI
 * (CI=true) it fails instead, so a missing model can never turn a CI run green.
 * Include after cmocka.h. */
#ifndef LOCKSTEP_TEST_FIXTURE_H
#define LOCKSTEP_TEST_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockstep.h"
#include "util/util.h"

static inline const char *fx_model_path(void) {
    const char *p = getenv("MODEL");
    return p && *p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

static inline bool fx_ci(void) {
    const char *c = getenv("CI");
    return c && *c && strcmp(c, "0") && strcmp(c, "false");
}

/* Loads path (NULL: the model under test); NULL when the file is not there (a load
 * error of a file that is there aborts the test program: that is a bug). */
static inline ls_model *fx_load_model(const char *path) {
    if (!path) path = fx_model_path();
    if (access(path, R_OK) != 0) return NULL;
    ls_err err;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = path;
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "fixture: cannot load '%s': %s\n", path, err.msg);
        abort();
    }
    return m;
}

/* Skips (or, under CI, fails) the calling test when m is NULL. */
#define FX_NEED(m)                                                                                        \
    do {                                                                                                     \
        if (!(m)) {                                                                                          \
            if (fx_ci()) fail_msg("the model %s is missing (CI=true: a missing model is a failure)", fx_model_path()); \
            printf("SKIPPED: %s: the model %s is not there (`make model` fetches it)\n", __func__, fx_model_path()); \
            skip();                                                                                          \
        }                                                                                                    \
    } while (0)

/* Uniform integer in [lo, hi] from a splitmix64 state. */
static inline int32_t fx_rng_int(uint64_t *s, int32_t lo, int32_t hi) {
    return lo + (int32_t)(ls_splitmix64(s) % (uint64_t)(hi - lo + 1));
}

static inline void fx_ignore_event(void *ud, const ls_event *ev) {
    (void)ud;
    (void)ev;
}

#endif
