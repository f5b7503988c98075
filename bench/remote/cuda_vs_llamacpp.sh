#!/usr/bin/env bash
# The GPU checks and the side-by-side with llama.cpp's CUDA backend, on the borrowed device
# host (one H200), whose working tree arrives without build outputs or models.
#   DC  what was carried (.dev/dc, prepared on the development host; bin/ and lib/ travel as
#       bin.tar.xz, the CUDA programs being 25 MB each with the runtime linked in):
#       bin/  test_layout, test_cuda, test_cuda_mut, test_engine_cuda (make CUDA=1 BUILD=build-cuda
#             cuda), lockstep (the CUDA build's CLI), synth-gguf; lib/ the shared libraries they
#             need; lcpp.tar.gz  the llama.cpp tree vendored in the llama-cpp-python 0.3.36 sdist,
#             without its models/, docs/, tests/, examples/ and the other backends;
#             vocab.gguf  SmolLM2's tokenizer keys alone (synth-gguf copies them)
#   OUT where the raw logs go
# Usage: bench/remote/cuda_vs_llamacpp.sh start   (configure llama.cpp and start its build in the
#            background, write the 8B-shaped file)
#        bench/remote/cuda_vs_llamacpp.sh tests   (make test-cuda's programs)
#        bench/remote/cuda_vs_llamacpp.sh bench   (wait for the build, then tg128 and pp512 of
#            both engines on the same file, PAIRS interleaved pairs)
set -u
DC=${DC:-.dev/dc}
OUT=${OUT:-/tmp/out}
W=${W:-/tmp/work}
PAIRS=${PAIRS:-3}
F8=$W/synth8b-q4_0.gguf
case "$DC" in /*) ;; *) DC=$PWD/$DC ;; esac
export LD_LIBRARY_PATH="$DC/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT" "$W"
step() { # name, timeout, command...
    local name=$1 t=$2; shift 2
    local t0=$(date +%s)
    timeout "$t" "$@" > "$OUT/$name.log" 2>&1
    echo "rc $?, $(( $(date +%s) - t0 )) s" >> "$OUT/$name.log"
    echo "== $name: $(tail -n 1 "$OUT/$name.log")"
    grep -E "NOT CHECKED|PASS|FAIL|ERROR|parity:|differ|verified|ok$" "$OUT/$name.log" | tail -n 8
}
case "${1:-}" in
start)
    tar xJf "$DC/bin.tar.xz" -C "$DC" || exit 1
    { nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"; nvcc --version | tail -n 2; cmake --version | head -n 1; } \
        > "$OUT/env.txt" 2>&1
    cat "$OUT/env.txt"
    rm -rf "$W/lcpp" "$W/lcpp-b"
    tar xzf "$DC/lcpp.tar.gz" -C "$W"
    # llama.cpp: CUDA for sm_90 (the H200), FlashAttention kernels on, only llama-bench built.
    setsid bash -c "cd $W && cmake -S lcpp -B lcpp-b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF > lcpp-configure.log 2>&1 \
        && cmake --build lcpp-b --target llama-bench -j 14 > lcpp-build.log 2>&1; echo \$? > lcpp-build.rc" \
        < /dev/null > /dev/null 2>&1 &
    step synth 300 "$DC/bin/synth-gguf" --shape 8b --type q4_0 --vocab-from "$DC/vocab.gguf" -o "$F8"
    ls -la "$W"
    ;;
tests)
    # make test-cuda's programs: the layout test, the GPU parity suite, the engine on the GPU
    # against the CPU, and the mutant (wrong tree order), which must fail.
    step test_layout 60 "$DC/bin/test_layout"
    step test_cuda "${T_CUDA:-400}" "$DC/bin/test_cuda"
    step test_engine_cuda 150 "$DC/bin/test_engine_cuda"
    step test_cuda_mut 90 "$DC/bin/test_cuda_mut" --quick
    grep -q "^rc 0" "$OUT/test_cuda_mut.log" && echo "MUTANT PASSED: the parity tests cannot fail"
    echo "llama.cpp build: $(cat "$W/lcpp-build.rc" 2>/dev/null || echo running)"
    ;;
bench)
    for i in $(seq 1 "${WAIT5:-90}"); do [ -f "$W/lcpp-build.rc" ] && break; sleep 5; done
    echo "llama.cpp build: rc $(cat "$W/lcpp-build.rc" 2>/dev/null || echo 'not finished')"
    tail -n 3 "$W/lcpp-build.log"
    cp "$W/lcpp-configure.log" "$W/lcpp-build.log" "$OUT/" 2>/dev/null
    LB=$W/lcpp-b/bin/llama-bench
    [ -x "$LB" ] || { echo "llama-bench was not built"; exit 1; }
    "$LB" --version > "$OUT/llama_version.txt" 2>&1
    # Interleaved: lockstep decode of 128 tokens and prefill of 512 (--device cuda, the exact
    # family), then llama-bench tg128 and pp512 with every layer on the GPU, FlashAttention on.
    P512=$(python3 -c 'print(" ".join(["the"] * 511))')
    for p in $(seq 1 "$PAIRS"); do
        "$DC/bin/lockstep" run -m "$F8" --device cuda -p "Hello" -n 128 --temp 0 --no-probe --json \
            > "$OUT/ls_tg_$p.json" 2> "$OUT/ls_tg_$p.err"
        "$DC/bin/lockstep" run -m "$F8" --device cuda -p "$P512" -n 1 --temp 0 --no-probe --json \
            > "$OUT/ls_pp_$p.json" 2> "$OUT/ls_pp_$p.err"
        "$LB" -m "$F8" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json > "$OUT/llama_$p.json" 2> "$OUT/llama_$p.err"
        echo "pair $p done"
    done
    ;;
*) echo "usage: $0 start|tests|bench" >&2; exit 2 ;;
esac
