/* backend.c - backend lookup in the build's table (backend.h). */
#include "engine/backend.h"

#include <stdio.h>
#include <string.h>

/* Backends that exist in the tree but need a build of their own. */
static const struct { const char *name, *how; } ls_backends_elsewhere[] = {
    {"cuda", "build it with `make CUDA=1`; docs/cuda.md"},
};

const ls_backend *ls_backend_find(const char *name, ls_err *err) {
    if (!name || !*name) return ls_backends[0];
    char have[128] = "";
    for (int i = 0; ls_backends[i]; i++) {
        if (!strcmp(name, ls_backends[i]->name)) return ls_backends[i];
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? ", " : "", ls_backends[i]->name);
    }
    for (size_t i = 0; i < sizeof ls_backends_elsewhere / sizeof ls_backends_elsewhere[0]; i++)
        if (!strcmp(name, ls_backends_elsewhere[i].name)) {
            ls_err_set(err, LS_E_UNSUPPORTED, "this build has no %s backend (%s; this one has: %s)", name,
                       ls_backends_elsewhere[i].how, have);
            return NULL;
        }
    ls_err_set(err, LS_E_INVALID, "unknown device '%s' (available: %s)", name, have);
    return NULL;
}
