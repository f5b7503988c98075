#!/usr/bin/env bash
# Prefill attention (k_attn4) on the device host, one call: parity, old against new in one
# process each (bench_cuda's prefill suite, interleaved), and an ncu profile of k_attn4 in a
# 2,047-token prefill of the 8B-shaped Q4_0 file.
#   C    the carried folder: bin.tar.xz holding bin/ (the CUDA build's lockstep, test_cuda,
#        test_cuda_muta, test_engine_cuda, bench_cuda, synth-gguf, stripped; lib/ with their
#        shared libraries; hdr.gguf + hdr.size: the default model's header for synth-gguf) and
#        old/bench_cuda (the baseline build)
#   OUT  where the logs come back (r.tar.xz; summary.txt)
set -u
C=${C:-.gpu-carry}
OUT=${OUT:-/tmp/out}
W=/tmp/w L=/tmp/logs
mkdir -p "$W" "$L" "$OUT"
tar -C "$W" -xJf "$C/bin.tar.xz"
N=$W/bin O=$W/old
T0=$SECONDS LIMIT=${LIMIT:-560}
export LD_LIBRARY_PATH=$N/lib
STEP_GREP="checks|differ|FAIL|ms/step|TOPS|tok/s|identical|parity|attention"
. "$(dirname "$0")/device_lib.sh"
device_env
synth_8b_q4_0
step test_cuda 200 "$N/test_cuda"
step test_cuda_muta 60 "$N/test_cuda_muta" --attn
step test_engine_cuda 120 "$N/test_engine_cuda"
for i in 1 2; do
    step "bench_old_$i" 90 "$O/bench_cuda" --no-1b --suites prefill
    step "bench_new_$i" 90 "$N/bench_cuda" --no-1b --suites prefill
done
while ! grep -q '^rc' "$L/synth.log" 2>/dev/null; do sleep 2; (( SECONDS - T0 > LIMIT - 60 )) && break; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
P2048=$(python3 -c 'print(" ".join(["the"] * 2047))')
P512=$(python3 -c 'print(" ".join(["the"] * 511))')
for i in 1 2; do
    for b in old new; do
        D=$O; [ $b = new ] && D=$N
        step "ls_pp512_${b}_$i" 60 "$D/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P512" -n 1 --temp 0 --no-probe --json
        step "ls_pp2048_${b}_$i" 60 "$D/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P2048" -n 1 --temp 0 --no-probe --json
    done
done
step run_probe 90 "$N/lockstep" run -m "$F8" --device cuda -p "Hello there" -n 16 --temp 0
if [ -n "$NCU" ]; then
    # the CLI prefills in steps of 512 rows: launch 96 is the fourth step's first layer (keys up to 2,048)
    step ncu_attn 150 "$NCU" -k regex:k_attn4 --launch-skip 96 -c 2 --set full --import-source yes -o "$L/attn" \
        "$N/lockstep" run -m "$F8" --device cuda -c 4096 -p "$P2048" -n 1 --temp 0 --no-probe
    "$NCU" -i "$L/attn.ncu-rep" --page details > "$L/attn_details.txt" 2>&1
    "$NCU" -i "$L/attn.ncu-rep" --page source --csv --print-source sass > "$L/attn_sass.csv" 2>&1
    rm -f "$L/attn.ncu-rep"
fi
echo "== done at $((SECONDS - T0)) s" >> "$L/summary.txt"
tar -C /tmp -cJf "$OUT/r.tar.xz" logs
cat "$L/summary.txt"
