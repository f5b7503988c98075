#!/usr/bin/env bash
# Checks on the borrowed device host of what this session's host cannot run: the AVX-512
# and AVX-VNNI kernels (an AVX2-only development host) and the CUDA backend (no GPU).
#   DC   what was carried: bin/ (test_kernels, kp_mm_base, kp_mm_new, test_layout,
#        test_cuda, test_engine_cuda: prebuilt here), lib/ (their shared libraries)
#   OUT  where the raw logs go
# 1. test_kernels on every ISA the CPU has (matmul parity, memcmp against the scalar
#    definition), then the Q4_K cases with AVX-512 and AVX-VNNI hidden;
# 2. the Q4_K matmul A/B (bench/kp_ab.sh: main before and after the Q4_K panel; 1 thread);
# 3. test_layout, test_cuda --quick and test_engine_cuda (synthetic files) on the GPU.
set -u
DC=${DC:-/tmp/dc}
OUT=${OUT:-/tmp/out}
export LD_LIBRARY_PATH="$DC/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
{ lscpu | grep -E "Model name|^CPU\(s\)"; grep -o -w 'avx512f\|avx512_vnni\|avx_vnni\|amx_int8\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; nvidia-smi -L; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
step() { # name, timeout, command...
    local name=$1 t=$2; shift 2
    local t0=$(date +%s.%N)
    timeout "$t" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "rc $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.1f\", b - a}") s" >> "$OUT/$name.log"
    echo "== $name: $(tail -n 1 "$OUT/$name.log")"
    grep -E "NOT CHECKED|PASSED|FAILED|ERROR|parity:|differ|verified" "$OUT/$name.log" | head -n 12
}
step test_kernels 90 taskset -c 2 "$DC/bin/test_kernels"
for h in avx512 avxvnni; do
    step "test_kernels_hide_$h" 60 env LOCKSTEP_CPU_HIDE=$h taskset -c 2 "$DC/bin/test_kernels" test_parity_q4_k
done
for isa in avx512 avxvnni avx2; do
    taskset -c 4 bench/kp_ab.sh "$DC/bin/kp_mm_base" "$DC/bin/kp_mm_new" $isa 12 2048 2048 3 1 64 512
done > "$OUT/kp_ab.txt" 2>&1
cat "$OUT/kp_ab.txt"
step test_layout 30 "$DC/bin/test_layout"
step test_cuda_quick 60 "$DC/bin/test_cuda" --quick
step test_engine_cuda 60 "$DC/bin/test_engine_cuda"
echo "== done"
