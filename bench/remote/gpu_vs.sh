#!/usr/bin/env bash
# lockstep's CUDA build beside llama.cpp's on one card in one call: llama.cpp (the tree vendored in
# the llama-cpp-python 0.3.36 sdist) builds in the background while the 8B-shaped Q4_0 file is
# written; then interleaved pairs of `lockstep run --json` (tg128, pp512, pp2048) and `llama-bench
# -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3`, and bench_cuda's prefill suite.
#   C    the carried folder: bin.tar.xz (as bench/remote/gpu_attn.sh) and lcpp.tar.xz (the
#        llama.cpp tree as lcpp/, without models, docs, tests and the other GPU backends)
#   OUT  where the logs come back (r.tar.xz)
set -u
C=${C:-.gpu-carry}
OUT=${OUT:-/tmp/out}
W=/tmp/w L=/tmp/logs
mkdir -p "$W" "$L" "$OUT"
T0=$SECONDS LIMIT=${LIMIT:-560}
tar -C "$W" -xJf "$C/lcpp.tar.xz"
( cd "$W" && cmake -S lcpp -B lcpp-b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF > "$L/lcpp-configure.log" 2>&1 &&
  cmake --build lcpp-b --target llama-bench -j 16 > "$L/lcpp-build.log" 2>&1; echo $? > "$W/lcpp.rc" ) &
tar -C "$W" -xJf "$C/bin.tar.xz"
N=$W/bin
export LD_LIBRARY_PATH=$N/lib
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"; nvcc --version | tail -n 1; } > "$L/env.txt" 2>&1
cat "$L/env.txt" > "$L/summary.txt"
cp "$N/hdr.gguf" "$W/vocab.gguf" && truncate -s "$(cat "$N/hdr.size")" "$W/vocab.gguf"
F8=$W/s8b_q4_0.gguf
"$N/synth-gguf" --shape 8b --type q4_0 --vocab-from "$W/vocab.gguf" -o "$F8" > "$L/synth.log" 2>&1
step() { # name, timeout, command...: the log in L/name.log, its telling lines in L/summary.txt
    local n=$1 t=$2; shift 2
    if (( SECONDS - T0 + 15 > LIMIT )); then echo "== $n skipped (time)" >> "$L/summary.txt"; return; fi
    local left=$(( LIMIT - (SECONDS - T0) )); (( t > left )) && t=$left
    local s=$SECONDS
    timeout "$t" "$@" > "$L/$n.log" 2>&1
    echo "== $n rc $? $((SECONDS - s)) s (at $((SECONDS - T0)) s)" >> "$L/summary.txt"
    grep -E "tok/s|pp[0-9]|tg[0-9]|prefill_ms|decode_tok_s" "$L/$n.log" | tail -n 12 >> "$L/summary.txt"
    tar -C /tmp -cJf "$OUT/r.tar.xz" logs 2>/dev/null
}
while [ ! -f "$W/lcpp.rc" ] && (( SECONDS - T0 < LIMIT - 120 )); do sleep 3; done
echo "llama.cpp build rc $(cat "$W/lcpp.rc" 2>/dev/null || echo unfinished) at $((SECONDS - T0)) s" >> "$L/summary.txt"
P512=$(python3 -c 'print(" ".join(["the"] * 511))')
P2048=$(python3 -c 'print(" ".join(["the"] * 2047))')
for p in 1 2; do
    step "ls_tg_$p" 60 "$N/lockstep" run -m "$F8" --device cuda -p "Hello" -n 128 --temp 0 --no-probe --json
    step "ls_pp512_$p" 60 "$N/lockstep" run -m "$F8" --device cuda -p "$P512" -n 1 --temp 0 --no-probe --json
    step "ls_pp2048_$p" 60 "$N/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P2048" -n 1 --temp 0 --no-probe --json
    step "llama_bench_$p" 90 "$W/lcpp-b/bin/llama-bench" -m "$F8" -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3
done
step bench_prefill 90 "$N/bench_cuda" --no-1b --suites prefill
echo "== done at $((SECONDS - T0)) s" >> "$L/summary.txt"
tar -C /tmp -cJf "$OUT/r.tar.xz" logs
cat "$L/summary.txt"
