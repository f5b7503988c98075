#!/usr/bin/env bash
# Every GPU check and figure of a session in one call on the borrowed device host (one GPU,
# 16 CPU cores; the working tree arrives without build outputs or models):
#   BIN   a folder with the CUDA build's programs (make CUDA=1 BUILD=build-cuda cuda: lockstep,
#         test_layout, test_cuda, test_cuda_mut, test_engine_cuda, bench_cuda) and lib/ with
#         the shared libraries they need (`ldd`)
#   M     the default model (SmolLM2-135M-Instruct.Q4_1.gguf); MTP: its module (mtp/)
#   OUT   where the logs go; they come back as OUT/gpu_all.tar.gz and OUT/summary.txt
# 1. parity: test_layout, test_cuda (every kernel, family and MTP module vs the CPU's bits),
#    test_cuda_mut (a wrong tree order: must fail), test_engine_cuda on synthetic files and
#    on the default model (the GPU engine vs each request alone on the CPU);
# 2. bench_cuda: the decode step and the pin-tax sections (8B-shaped Q4_0 written in memory);
# 3. bench/remote/gpu_spec.sh: plain vs --spec ngram / --spec mtp on the default model.
set -u
BIN=${BIN:?}; M=${M:?}; MTP=${MTP:-mtp/SmolLM2-135M-Instruct.Q4_1.mtp.gguf}  # MTP_B: a second module (gpu_spec.sh)
OUT=${OUT:-/tmp/out}
L=$OUT/logs
mkdir -p "$L"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S=$OUT/summary.txt
: > "$S"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)";
  sha256sum "$M" "$MTP"; } > "$L/env.txt" 2>&1
cat "$L/env.txt" >> "$S"
step() { # name, timeout, command...: the log in L/name.log, its last lines in the summary
    local name=$1 t=$2; shift 2
    local t0=$SECONDS
    timeout "$t" "$@" > "$L/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc, $((SECONDS - t0)) s" >> "$S"
    grep -E "checks|differ|FAIL|fail|ok$|verified|tok/s|ms/step|pin tax|speed-up|x plain|error" "$L/$name.log" | tail -n 14 >> "$S"
}
step test_layout 60 "$BIN/test_layout"
step test_cuda 240 "$BIN/test_cuda"
step test_cuda_mut 120 "$BIN/test_cuda_mut"
step test_engine_cuda 240 "$BIN/test_engine_cuda"
step test_engine_cuda_model 240 "$BIN/test_engine_cuda" --model "$M"
step bench_cuda_decode 240 env LS_BENCH_NO_KERNELS=1 "$BIN/bench_cuda" --no-1b --decode-only --out "$L"
step bench_cuda_pin 240 "$BIN/bench_cuda" --suites pin --out "$L"
step gpu_spec 500 env LS="$BIN/lockstep" M="$M" MTP="$MTP" MTP_B="${MTP_B:-}" OUT="$L/spec" PAIRS="${PAIRS:-3}" \
    bash bench/remote/gpu_spec.sh
tail -n 12 "$L/spec/summary.txt" >> "$S" 2>/dev/null
tar -C "$OUT" -czf "$OUT/gpu_all.tar.gz" logs && rm -rf "$L"
cat "$S"
