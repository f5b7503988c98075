#!/usr/bin/env bash
# Batched decode on the device host, one call: parity (test_cuda, the tree mutant, test_engine_cuda),
# bench_cuda's kernels and decode suites twice (the GEMM's runs of 9..32 rows on k_mma, as before,
# beside k_mma2's one-tile-row configurations, in one process: the decode table's columns), the
# CLI's probe, and, where llama.cpp's CUDA build (started first, in the background) is done in
# time, llama-batched-bench at B = 1, 8, 16, 32 on the same 8B-shaped Q4_0 file.
#   C    the carried folder: amx.tar.xz (optional; bench/remote/cpu_amx.sh pack), checked while llama.cpp builds;
#        bin.tar.xz holding bin/ (lockstep, test_cuda, test_cuda_mut,
#        test_engine_cuda, bench_cuda, synth-gguf, stripped; lib/; hdr.gguf + hdr.size: the
#        default model's header for synth-gguf); lcpp.tar.xz (optional): llama.cpp's tree as lcpp/
#   OUT  where the logs come back (r.tar.xz; summary.txt)
set -u
C=${C:-.gpu-carry}
OUT=${OUT:-/tmp/out}
W=/tmp/w L=/tmp/logs
rm -rf "$L"   # a reused host may keep an earlier lease's logs
mkdir -p "$W" "$L" "$OUT"
T0=$SECONDS LIMIT=${LIMIT:-570}
N=$W/bin
STEP_GREP="checks|differ|FAIL|tok/s|identical|parity|matmul|total|^ +(1|8|12|16|24|32) |M = (16|24|32)|S_TG|^\|" STEP_TAIL=60
. "$(dirname "$0")/device_lib.sh"
lcpp_build_bg llama-batched-bench 12
tar -C "$W" -xJf "$C/bin.tar.xz"
export LD_LIBRARY_PATH=$N/lib
device_env
synth_8b_q4_0
step test_cuda 200 "$N/test_cuda"
step test_cuda_mut 60 "$N/test_cuda_mut" --quick    # the tree mutant (k_mma2's bias one too large): must fail
step test_engine_cuda 120 "$N/test_engine_cuda"
step bench_1 150 "$N/bench_cuda" --no-1b --suites "${BENCH1_SUITES:-kernels,decode}" --out "$L"
step bench_2 120 "$N/bench_cuda" --no-1b --suites decode
while [ ! -f "$F8" ] && (( SECONDS - T0 < LIMIT - 60 )); do sleep 2; done
step run_probe 90 "$N/lockstep" run -m "$F8" --device cuda -p "Hello there" -n 16 --temp 0
# while llama.cpp builds: the AMX level's parity on this host's Xeon (cpu_amx.sh pack's amx.tar.xz, if carried):
# test_kernels with its planted AMX bugs, the probe and test_model_parity on a 1B-shaped file; no timing
if [ -f "$C/amx.tar.xz" ]; then
    mkdir -p /tmp/dc && tar -C /tmp/dc -xJf "$C/amx.tar.xz"
    step amx 150 env DC=/tmp/dc NO_BENCH=1 SHAPE=1b SY=/tmp OUT="$L/amx" bash "$(dirname "$0")/cpu_amx.sh" run
    cat "$L/amx/summary.md" >> "$L/summary.txt" 2>/dev/null
fi
if [ -f "$W/lcpp.rc" ] || [ -d "$W/lcpp" ]; then
    while [ ! -f "$W/lcpp.rc" ] && (( SECONDS - T0 < LIMIT - 100 )); do sleep 3; done
    echo "llama.cpp build rc $(cat "$W/lcpp.rc" 2>/dev/null || echo unfinished) at $((SECONDS - T0)) s" >> "$L/summary.txt"
    if [ "$(cat "$W/lcpp.rc" 2>/dev/null)" = 0 ]; then
        step llama_batched 120 "$W/lcpp-b/bin/llama-batched-bench" -m "$F8" -ngl 99 -fa on -c 16384 -b 2048 -ub 512 \
            -npp 128 -ntg 128 -npl 1,8,16,32
        step bench_3 120 "$N/bench_cuda" --no-1b --suites decode
    fi
fi
echo "== done at $((SECONDS - T0)) s" >> "$L/summary.txt"
tar -C /tmp -cJf "$OUT/r.tar.xz" logs
cat "$L/summary.txt"
