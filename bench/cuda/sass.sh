#!/usr/bin/env bash
# sass.sh - count the SASS of chosen GPU kernels without a GPU (nvcc and Python only): the
# exact GEMM is issue-bound (docs/cuda.md), so instructions per mma in its main loop predict
# its speed.  cuobjdump is not in every CUDA toolkit install; it comes from PyPI's
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (unpacked once into build-cuda/sass/tools).
#   bench/cuda/sass.sh FILE.cu [--match SUBSTR]   (FILE.cu includes the kernel headers and
#                                                 instantiates what to count; see below)
# With no FILE.cu, k_mma2's three tiles for Q4_0, Q4_K, Q6_K and Q8_0.  Registers and spills
# come from ptxas -v.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/build-cuda/sass
mkdir -p "$out"
if ! command -v cuobjdump > /dev/null; then
    if [ ! -x "$out/tools/nvidia/cu13/bin/cuobjdump" ]; then
        python3 -m pip download --no-deps -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$out/whl"
        for w in "$out"/whl/nvidia_cuda_cuobjdump-*.whl "$out"/whl/nvidia_cuda_nvdisasm-*.whl; do
            python3 -m zipfile -e "$w" "$out/tools"
        done
        chmod +x "$out"/tools/nvidia/cu13/bin/*
    fi
    PATH=$out/tools/nvidia/cu13/bin:$PATH
fi
src=
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then src=$1; shift; fi
if [ -z "$src" ]; then
    src=$out/k_mma2.cu
    {
        echo '#include "backend/cuda/cuda_mm.cuh"'
        echo 'namespace lsc {'
        echo '#define I(T, a, b, c, d, e) template __global__ void k_mma2<T, a, b, c, d, e>(const lsc_mat, const int8_t *, const float2 *, int, int, float *, int, int, float *);'
        for t in LSC_Q4_0 LSC_Q4_K LSC_Q6_K LSC_Q8_0; do
            echo "I($t, 2, 2, 4, 4, 1) I($t, 2, 2, 2, 4, 2) I($t, 4, 2, 2, 4, 1)"
        done
        echo '}'
    } > "$src"
fi
nvcc -std=c++17 -O3 -fmad=false -prec-div=true -prec-sqrt=true -ftz=false -gencode=arch=compute_90,code=sm_90 \
    -I"$root/include" -I"$root/src" -cubin -o "$out/k.cubin" "$src" -Xptxas -v 2>&1 |
    grep -E "Compiling entry|registers|spill" | sed -E 's/ptxas info +: //' | paste - - - | cut -c1-220 || true
cuobjdump -sass "$out/k.cubin" > "$out/k.sass"
python3 "$here/sass_loops.py" "$out/k.sass" "$@"
