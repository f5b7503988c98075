#!/bin/bash
# interleaved A/B: old (5d3dabc) vs new (HEAD of /work/main build), lockstep run -t 2 --no-probe
M=/work/main/models/SmolLM2-135M-Instruct.Q4_1.gguf
OLD=/tmp/ab-old/build/lockstep; NEW=/tmp/ab-new/lockstep
P13="The quick brown fox jumps over the lazy dog. Then it"
P250="$(python3 -c "print(' '.join(['The history of the city goes back many centuries and its people'] * 22))")"
for i in $(seq 1 ${REPS:-8}); do
  for v in old new; do
    B=$([ $v = old ] && echo $OLD || echo $NEW)
    echo "$v 13 $($B run -m $M --temp 0 --no-probe -t 2 -n 128 -p "$P13" 2>&1 >/dev/null | grep -o 'prefill [0-9.]* ms.*decode [0-9.]* tok/s')"
    echo "$v 250 $($B run -m $M --temp 0 --no-probe -t 2 -n 64 -p "$P250" 2>&1 >/dev/null | grep -o 'prefill [0-9.]* ms.*decode [0-9.]* tok/s')"
  done
done
