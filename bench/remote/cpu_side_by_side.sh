#!/usr/bin/env bash
# The CPU side-by-side figures taken on a borrowed quiet machine (the device host of
# docs/cuda.md), whose working tree arrives without build outputs or models:
#   DC  what was carried: bin/ (lockstep, lockstep-bench, synth-gguf, and lockstep-old for
#       the A/B of the probe's cost), lib/ (the shared libraries they need), llama-avx2/ and
#       llama-native/ (llama-bench, llama-batched-bench from bench/llamacpp/build.sh),
#       and the default model at models/ of the working tree
#   OUT where the raw results go
# Each figure runs on CORES (2 cores, as on the CI machine) at T threads, interleaved.
#   1. the probe's cost, before and after the scalar matmul change: 5 pairs
#   2. AVX2 (AVX-VNNI and AVX-512 hidden) vs llama.cpp built for AVX2: tg128, pp512
#   3. AVX-512 (the host's best) vs llama.cpp native: tg128, pp512
#   4. a synthetic Llama-3.2-1B-shaped Q4_1 file (bench/synth_gguf.c, 642 MiB): decode and
#      batched decode B = 1..16 vs llama-batched-bench, on BIG_CORES at BIG_T threads
#   5. (1bk) the same shapes in llama.cpp's Q4_K_M mix (Q4_K; attn_v, ffn_down, embedding
#      Q6_K): tg128 and pp512 on CORES at T threads, AVX-512 and AVX2 (issue 20)
set -u
DC=${DC:-/tmp/dc}
OUT=${OUT:-/tmp/out}
CORES=${CORES:-0,1}
T=${T:-2}
BIG_CORES=${BIG_CORES:-0-7}
BIG_T=${BIG_T:-8}
PAIRS=${PAIRS:-5}
STEPS=${STEPS:-probe,avx2,avx512,1b}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
export LD_LIBRARY_PATH="$DC/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt" 2>&1
grep -o 'avx512[a-z_]*\|avx_vnni\|amx[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' > "$OUT/cpuflags.txt"
has() { case ",$STEPS," in *",$1,"*) return 0 ;; esac; return 1; }
vs() { # name, llama dir, cores, env..., then -- and vs_llamacpp args
    local name=$1 ldir=$2 cores=$3; shift 3
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    echo "== $name"
    env "${envs[@]}" taskset -c "$cores" python3 bench/vs_llamacpp.py --lockstep "$DC/bin/lockstep" --bench-tool "$DC/bin/lockstep-bench" \
        --llama-bin "$DC/$ldir" --json-out "$OUT/$name.json" "$@" > "$OUT/$name.md" 2> "$OUT/$name.log"
    echo "rc $?" >> "$OUT/$name.log"
    tail -n 25 "$OUT/$name.md"
}
if has probe; then
    echo "== probe cost (old = before the scalar matmul change)"
    for i in $(seq "$PAIRS"); do
        for b in old new; do
            exe="$DC/bin/lockstep"; [ $b = old ] && exe="$DC/bin/lockstep-old"
            taskset -c "$CORES" "$exe" probe --json --no-memo -t "$T" -m "$M" > "$OUT/probe_$b.$i.json" 2>&1
            printf '%s %s ' "$b" "$(grep -o '"ms": *[0-9.]*' "$OUT/probe_$b.$i.json" | head -1)"
        done
        echo
    done
fi
has avx2 && vs avx2 llama-avx2 "$CORES" LOCKSTEP_CPU_HIDE=avxvnni -- -m "$M" -t "$T" --tests tg128,pp512 --pairs "$PAIRS" --no-bw
has avx512 && vs avx512 llama-native "$CORES" LOCKSTEP_NOTHING=1 -- -m "$M" -t "$T" --tests tg128,pp512 --pairs "$PAIRS" --no-bw
if has 1b; then
    "$DC/bin/synth-gguf" --shape 1b --type q4_1 --vocab-from "$M" -o /tmp/synth1b.gguf
    vs 1b_native llama-native "$BIG_CORES" LOCKSTEP_NOTHING=1 -- -m /tmp/synth1b.gguf -t "$BIG_T" --tests tg128,tgb1,tgb2,tgb4,tgb8,tgb16 \
        --pairs 3
fi
if has 1bk; then
    "$DC/bin/synth-gguf" --shape 1b --type q4_k_m --vocab-from "$M" -o /tmp/synth1bk.gguf
    vs 1bk_avx512 llama-native "$CORES" LOCKSTEP_NOTHING=1 -- -m /tmp/synth1bk.gguf -t "$T" --tests tg128,pp512 --pairs 3 --no-bw
    vs 1bk_avx2 llama-avx2 "$CORES" LOCKSTEP_CPU_HIDE=avxvnni -- -m /tmp/synth1bk.gguf -t "$T" --tests tg128,pp512 --pairs 3 --no-bw
fi
echo "== done"
