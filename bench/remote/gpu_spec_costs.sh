#!/usr/bin/env bash
# Speculative decoding on the GPU with the measured draft costs (issue 30's GPU figure), and
# lockstep's CUDA build beside llama.cpp's on the same card (issue 29), run on the device host
# over several back-to-back calls (the default model is 98 MB, more than one call carries).
#   C   the carried folder: bin.tar.xz (bin/: lockstep and bench_cuda of `make CUDA=1
#       BUILD=build-cuda`, synth-gguf, lib/ with their shared libraries, hdr.gguf + hdr.size:
#       the default model's header for synth-gguf), lcpp.tar.gz (llama.cpp's tree from the
#       llama-cpp-python 0.3.36 sdist, slimmed), m.NN (the default model in parts), *.mtp.gguf
#   W   where it all lands (kept while the machine stays warm);  OUT  the logs (one tar)
# Usage: gpu_spec_costs.sh part     copy C's files into W; unpack; start llama.cpp's build
#                                   and the 8B-shaped file in the background (once per call)
#        gpu_spec_costs.sh spec     join the model, check its sha256, then bench/mtp_bench.py on
#                                   the GPU: plain beside --spec mtp with measured and with static
#                                   draft costs (COSTS), module alone or with prompt lookup first
#                                   (LOOKUPS: --draft-lookup values, default 0), for each module in
#                                   W, and the n-gram drafter (NGRAM=0: not)
#        gpu_spec_costs.sh tests    make test-cuda's programs (those carried): test_cuda, test_engine_cuda,
#                                   and the mutant test_cuda_mut, which must fail
#        gpu_spec_costs.sh kern     bench_cuda's kernels and decode suites (the warp kernel's rows per
#                                   warp at M = 2..8, batched decode, verify blocks)
#        gpu_spec_costs.sh vs       lockstep and llama.cpp on the 8B-shaped file: tg128, pp512,
#                                   pp2048 (run --json beside llama-bench) and batched decode B = 1, 8, 32
#                                   (llama-batched-bench beside bench_cuda --decode-only)
set -u
C=${C:-.gpu-carry}
W=${W:-/tmp/w}
OUT=${OUT:-/tmp/out}
L=$W/logs
M=$W/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
F8=$W/s8b_q4_0.gguf
T0=$SECONDS
LIMIT=${LIMIT:-570}
mkdir -p "$W" "$L" "$OUT"
export LD_LIBRARY_PATH=$W/bin/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
pack() { tar -C "$W" -cJf "$OUT/logs.tar.xz" logs 2>/dev/null; }
step() { # name, timeout, command...: its output in L/name.log, a line in L/summary.txt
    local n=$1 t=$2; shift 2
    if (( SECONDS - T0 + 15 > LIMIT )); then echo "== $n skipped (time)" >> "$L/summary.txt"; return; fi
    local left=$(( LIMIT - (SECONDS - T0) )); (( t > left )) && t=$left
    local s=$SECONDS
    timeout "$t" "$@" > "$L/$n.log" 2>&1
    echo "== $n rc $? $((SECONDS - s)) s (at $((SECONDS - T0)) s)" >> "$L/summary.txt"
    grep -E "^\||PARITY|differ|ms/step|tok/s|S_TG|S_PP|pp[0-9]|tg[0-9]" "$L/$n.log" | tail -n 30 >> "$L/summary.txt"
    pack
}
case "${1:-}" in
part)
    for f in "$C"/*; do
        case "$f" in
        *bin.tar.xz) tar -C "$W" -xJf "$f" ;;
        *lcpp.tar.gz) tar -C "$W" -xzf "$f" ;;
        *) cp "$f" "$W/" ;;
        esac
    done
    { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
      lscpu | grep -E "Model name|^CPU\(s\)"; nvcc --version | tail -n 1; } > "$L/env.txt" 2>&1
    if [ -d "$W/lcpp" ] && [ ! -e "$W/lcpp.started" ]; then
        touch "$W/lcpp.started"
        setsid bash -c "cd $W && cmake -S lcpp -B lcpp-b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF \
            > $L/lcpp-configure.log 2>&1 && nice cmake --build lcpp-b --target llama-bench llama-batched-bench -j 16 \
            > $L/lcpp-build.log 2>&1; echo \$? > $W/lcpp.rc" < /dev/null > /dev/null 2>&1 &
    fi
    if [ -x "$W/bin/synth-gguf" ] && [ ! -e "$W/synth.started" ]; then
        touch "$W/synth.started"
        cp "$W/bin/hdr.gguf" "$W/vocab.gguf" && truncate -s "$(cat "$W/bin/hdr.size")" "$W/vocab.gguf"
        setsid bash -c "'$W/bin/synth-gguf' --shape 8b --type q4_0 --vocab-from '$W/vocab.gguf' -o '$F8.tmp' \
            > $L/synth.log 2>&1 && mv '$F8.tmp' '$F8'; echo rc \$? >> $L/synth.log" < /dev/null > /dev/null 2>&1 &
    fi
    cat "$L/env.txt"; ls -la "$W"; pack
    ;;
spec)
    [ -s "$M" ] || cat "$W"/m.* > "$M"
    echo "$SHA  $M" | sha256sum -c - > "$L/model_sha.txt" 2>&1 || { cat "$L/model_sha.txt"; pack; exit 1; }
    cp mtp/SmolLM2-135M-Instruct.Q4_1.mtp.gguf "$W/shipped.mtp.gguf"
    for mod in "$W"/*.mtp.gguf; do
        b=$(basename "$mod" .mtp.gguf)
        step "mtp_$b" "${MTP_T:-240}" python3 bench/mtp_bench.py --lockstep "$W/bin/lockstep" --model "$M" --module "$mod" \
            --device cuda --no-acceptance --isas auto --costs "${COSTS:-measured,static}" --lookups "${LOOKUPS:-0}" \
            --reps "${REPS:-2}" --speed-prompts "${SPEED_PROMPTS:-4}" --threads 2 --out "$L/mtp_$b"
    done
    [ "${NGRAM:-1}" = 0 ] ||
        step ngram 120 env LS="$W/bin/lockstep" M="$M" OUT="$L/ngram" PAIRS=3 COSTS_AB=1 bash bench/remote/gpu_spec.sh
    cat "$L/summary.txt"
    ;;
tests)
    step test_cuda 200 "$W/bin/test_cuda"
    step test_engine_cuda 120 "$W/bin/test_engine_cuda"
    step test_cuda_mut 60 "$W/bin/test_cuda_mut" --quick
    grep -q "rc 0 " <(grep "== test_cuda_mut" "$L/summary.txt") && echo "MUTANT PASSED: the parity tests cannot fail" >> "$L/summary.txt"
    grep -E "checks|differ|FAIL|MUTANT" "$L"/test_cuda*.log "$L/test_engine_cuda.log" | tail -n 12 >> "$L/summary.txt"
    cat "$L/summary.txt"
    ;;
kern)
    step bench_kern 300 "$W/bin/bench_cuda" --no-1b --suites kernels,decode --out "$L"
    cat "$L/summary.txt"
    ;;
vs)
    while [ ! -f "$W/lcpp.rc" ] && (( SECONDS - T0 < LIMIT - 200 )); do sleep 3; done
    echo "llama.cpp build rc $(cat "$W/lcpp.rc" 2>/dev/null || echo unfinished) at $((SECONDS - T0)) s" >> "$L/summary.txt"
    while ! grep -q '^rc' "$L/synth.log" 2>/dev/null && (( SECONDS - T0 < LIMIT - 150 )); do sleep 2; done
    LB=$W/lcpp-b/bin
    P512=$(python3 -c 'print(" ".join(["the"] * 511))')
    P2048=$(python3 -c 'print(" ".join(["the"] * 2047))')
    for p in 1 2; do
        step "ls_tg_$p" 60 "$W/bin/lockstep" run -m "$F8" --device cuda -p "Hello" -n 128 --temp 0 --no-probe --json
        step "ls_pp_$p" 60 "$W/bin/lockstep" run -m "$F8" --device cuda -p "$P512" -n 1 --temp 0 --no-probe --json
        step "ls_pp2048_$p" 60 "$W/bin/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P2048" -n 1 --temp 0 --no-probe \
            --json
        step "llama_bench_$p" 90 "$LB/llama-bench" -m "$F8" -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3
    done
    step bench_cuda_decode 120 "$W/bin/bench_cuda" --no-1b --decode-only --out "$L"
    step llama_batched 120 "$LB/llama-batched-bench" -m "$F8" -ngl 99 -fa on -c 16384 -b 2048 -ub 512 \
        -npp 128 -ntg 128 -npl 1,8,32
    cat "$L/summary.txt"
    ;;
*) echo "usage: $0 part|spec|tests|kern|vs" >&2; exit 2 ;;
esac
