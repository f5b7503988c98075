/* backend_nocuda.c - a build without the CUDA backend (`make CUDA=1` builds one). */
#include "engine/backend.h"

const ls_backend *ls_backend_cuda(ls_err *err) {
    ls_err_set(err, LS_E_UNSUPPORTED, "this build has no CUDA backend (build it with `make CUDA=1`; docs/cuda.md)");
    return NULL;
}
