# device_lib.sh - what the one-call device scripts share (sourced; bash). Expects W (work
# folder), L (logs folder), OUT (where logs.tar.xz / r.tar.xz go back), N (the carried bin/),
# T0 and LIMIT (seconds) and C (the carried folder) set by the caller.
#   device_env            the card, host and toolkit into L/env.txt and L/summary.txt
#   synth_8b_q4_0         writes the 8B-shaped Q4_0 file to $F8 in the background (F8 appears only when
#                         complete, then synth.log ends with "rc N")
#   lcpp_build_bg TARGET J  when C/lcpp.tar.xz (llama.cpp's tree as lcpp/) is carried and not yet unpacked:
#                         builds TARGET for sm_90 with CUDA in W/lcpp-b, J jobs, niced, in the background;
#                         W/lcpp.rc gets the build's exit status when it ends
#   step NAME T CMD...    runs CMD with a timeout of T (cut to the time left) into L/NAME.log,
#                         appends its rc and the lines matching STEP_GREP (last STEP_TAIL) to
#                         L/summary.txt, and packs the logs into OUT/r.tar.xz
device_env() {
    { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
      lscpu | grep -E "Model name|^CPU\(s\)"; nvcc --version | tail -n 1; } > "$L/env.txt" 2>&1
    cat "$L/env.txt" >> "$L/summary.txt"
}
F8=$W/s8b_q4_0.gguf
synth_8b_q4_0() {
    [ -f "$F8" ] && return
    cp "$N/hdr.gguf" "$W/vocab.gguf" && truncate -s "$(cat "$N/hdr.size")" "$W/vocab.gguf"
    ( "$N/synth-gguf" --shape 8b --type q4_0 --vocab-from "$W/vocab.gguf" -o "$F8.tmp" > "$L/synth.log" 2>&1
      rc=$?; mv "$F8.tmp" "$F8"; echo "rc $rc" >> "$L/synth.log" ) &
}
lcpp_build_bg() {
    [ -f "$C/lcpp.tar.xz" ] && [ ! -d "$W/lcpp" ] || return 0
    tar -C "$W" -xJf "$C/lcpp.tar.xz"
    ( cd "$W" && cmake -S lcpp -B lcpp-b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
          -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
          -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF > "$L/lcpp-configure.log" 2>&1 &&
      nice -n 19 cmake --build lcpp-b --target "$1" -j "$2" > "$L/lcpp-build.log" 2>&1; echo $? > "$W/lcpp.rc" ) &
}
STEP_GREP=${STEP_GREP:-"checks|differ|FAIL|TOPS|tok/s|identical|parity"}
STEP_TAIL=${STEP_TAIL:-30}
step() {
    local n=$1 t=$2; shift 2
    if (( SECONDS - T0 + 15 > LIMIT )); then echo "== $n skipped (time)" >> "$L/summary.txt"; return; fi
    local left=$(( LIMIT - (SECONDS - T0) )); (( t > left )) && t=$left
    local s=$SECONDS
    timeout "$t" "$@" > "$L/$n.log" 2>&1
    echo "== $n rc $? $((SECONDS - s)) s (at $((SECONDS - T0)) s)" >> "$L/summary.txt"
    grep -E "$STEP_GREP" "$L/$n.log" | tail -n "$STEP_TAIL" >> "$L/summary.txt"
    tar -C /tmp -cJf "$OUT/r.tar.xz" logs 2>/dev/null
}
