#!/usr/bin/env bash
# The exact GEMM (k_mma2) on the device host, one call: parity and both mutants, old against new
# in one process each (bench_cuda's kernels and prefill suites, interleaved pairs), the CLI's
# prefill old/new, an ncu profile of one gate|up GEMM at M = 512, and, where llama.cpp's CUDA
# build (started first, in the background) is done in time, llama-bench beside lockstep's CLI.
#   C    the carried folder: bin.tar.xz holding bin/ (the CUDA build's lockstep, test_cuda,
#        test_cuda_mut, test_cuda_muta, test_engine_cuda, bench_cuda, synth-gguf, stripped; lib/
#        with their shared libraries; hdr.gguf + hdr.size: the default model's header for
#        synth-gguf) and old/ (the baseline's bench_cuda and lockstep); lcpp.tar.xz (optional):
#        llama.cpp's tree as lcpp/ (the one vendored in the llama-cpp-python 0.3.36 sdist)
#   OUT  where the logs come back (r.tar.xz; summary.txt)
# A second call on the same warm machine with PHASE=2 runs only the llama.cpp part.
set -u
C=${C:-.gpu-carry}
OUT=${OUT:-/tmp/out}
W=/tmp/w L=/tmp/logs
mkdir -p "$W" "$L" "$OUT"
T0=$SECONDS LIMIT=${LIMIT:-570}
N=$W/bin O=$W/old
STEP_GREP="checks|differ|FAIL|TOPS|tok/s|identical|parity|matmul|total|prefill_ms|pp[0-9]|tg[0-9]" STEP_TAIL=40
. "$(dirname "$0")/device_lib.sh"
if [ "${PHASE:-1}" = 1 ]; then
    lcpp_build_bg llama-bench 10
    tar -C "$W" -xJf "$C/bin.tar.xz"
fi
export LD_LIBRARY_PATH=$N/lib
device_env
synth_8b_q4_0
P512=$(python3 -c 'print(" ".join(["the"] * 511))')
P2048=$(python3 -c 'print(" ".join(["the"] * 2047))')
if [ "${PHASE:-1}" = 1 ]; then
    step test_cuda 200 "$N/test_cuda"
    step test_cuda_mut 120 "$N/test_cuda_mut" --quick   # the tree mutant (k_mma2's bias one too large): must fail
    step test_engine_cuda 120 "$N/test_engine_cuda"
    # in order of need, so that a short lease keeps the first: one pair of each, then the second
    for i in 1 2; do
        step "bench_old_$i" 100 "$O/bench_cuda" --no-1b --suites kernels,prefill
        step "bench_new_$i" 100 "$N/bench_cuda" --no-1b --suites kernels,prefill
        while [ ! -f "$F8" ]; do sleep 2; (( SECONDS - T0 > LIMIT - 60 )) && break; done
        for b in old new; do
            D=$O; [ $b = new ] && D=$N
            step "ls_pp512_${b}_$i" 60 "$D/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P512" -n 1 --temp 0 --no-probe --json
            step "ls_pp2048_${b}_$i" 60 "$D/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P2048" -n 1 --temp 0 --no-probe --json
        done
    done
    step run_probe 90 "$N/lockstep" run -m "$F8" --device cuda -p "Hello there" -n 16 --temp 0
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    if [ -n "$NCU" ]; then
        # the first prefill step's gate|up GEMM (the fourth k_mma2 launch: qkv, wo, gate|up)
        step ncu_mma 150 "$NCU" -k regex:k_mma2 --launch-skip 2 -c 1 --set full -o "$L/mma" \
            "$N/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P512" -n 1 --temp 0 --no-probe
        "$NCU" -i "$L/mma.ncu-rep" --page details > "$L/mma_details.txt" 2>&1
        rm -f "$L/mma.ncu-rep"
    fi
fi
if [ -f "$W/lcpp.rc" ] || [ "${PHASE:-1}" = 2 ]; then
    while [ ! -f "$W/lcpp.rc" ] && (( SECONDS - T0 < LIMIT - 150 )); do sleep 3; done
    echo "llama.cpp build rc $(cat "$W/lcpp.rc" 2>/dev/null || echo unfinished) at $((SECONDS - T0)) s" >> "$L/summary.txt"
    if [ "$(cat "$W/lcpp.rc" 2>/dev/null)" = 0 ]; then
        for p in 1 2; do
            step "ls_cli_tg_$p" 60 "$N/lockstep" run -m "$F8" --device cuda -p "Hello" -n 128 --temp 0 --no-probe --json
            step "ls_cli_pp512_$p" 60 "$N/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P512" -n 1 --temp 0 --no-probe --json
            step "ls_cli_pp2048_$p" 60 "$N/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P2048" -n 1 --temp 0 --no-probe --json
            step "llama_bench_$p" 100 "$W/lcpp-b/bin/llama-bench" -m "$F8" -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3
        done
    fi
fi
echo "== done at $((SECONDS - T0)) s" >> "$L/summary.txt"
tar -C /tmp -cJf "$OUT/r.tar.xz" logs
cat "$L/summary.txt"
