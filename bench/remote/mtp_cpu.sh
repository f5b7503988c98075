#!/usr/bin/env bash
# The CPU speed of `--spec mtp` on a borrowed quiet host (the device host's cores): for
# each module given, bench/mtp_bench.py's speed part (plain and mtp interleaved, byte-
# identical, 4 held-out chat prompts, REPS pairs each) at AVX-512 and AVX2 on CORES
# (2 cores, as the CI machine) at 2 threads.
#   LS      a lockstep binary (the CUDA build's runs the CPU path the same)
#   M       SmolLM2-135M-Instruct.Q4_1.gguf;  MODULES  space-separated module files
#   OUT     results: OUT/<module name>/{runs.jsonl,summary.json} and OUT/mtp_cpu.md
set -u
LS=${LS:?}; M=${M:?}; MODULES=${MODULES:?}; OUT=${OUT:-/tmp/out}; CORES=${CORES:-0,1}; REPS=${REPS:-3}
mkdir -p "$OUT"
for mod in $MODULES; do
    name=$(basename "$mod" .gguf)
    echo "== $name" | tee -a "$OUT/mtp_cpu.md"
    taskset -c "$CORES" python3 bench/mtp_bench.py --lockstep "$LS" --model "$M" --module "$mod" --no-acceptance \
        --reps "$REPS" --threads 2 --isas auto,avx2 --out "$OUT/$name" 2>&1 | tail -n 6 | tee -a "$OUT/mtp_cpu.md"
done
