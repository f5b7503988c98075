# device_lib.sh - what the one-call device scripts share (sourced; bash). Expects W (work
# folder), L (logs folder), OUT (where logs.tar.xz / r.tar.xz go back), N (the carried bin/),
# T0 and LIMIT (seconds) set by the caller.
#   device_env            the card, host and toolkit into L/env.txt and L/summary.txt
#   synth_8b_q4_0         writes the 8B-shaped Q4_0 file to $F8 in the background (F8 appears only when
#                         complete, then synth.log ends with "rc N")
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
