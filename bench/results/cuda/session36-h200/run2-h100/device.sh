#!/usr/bin/env bash
# session 36: k_mma2 copy plan + k_attn4 by default + the 64 x 64 tile for every type (new)
# against main c510d2f (old), then llama.cpp (built here from the llama-cpp-python 0.3.36 sdist)
set -u
mkdir -p /tmp/new /tmp/old /tmp/w
tar -C /tmp/new -xJf .gpu-carry/new.tar.xz
N=/tmp/new/bin; O=/tmp/old/bin; L=/tmp/logs; mkdir -p $L
T0=$SECONDS; LIMIT=${LIMIT:-575}
export LD_LIBRARY_PATH=$N/lib
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; nvcc --version | tail -1; } > $L/env.txt 2>&1
cp $N/hdr.gguf /tmp/w/vocab.gguf && truncate -s $(cat $N/hdr.size) /tmp/w/vocab.gguf
( $N/synth-gguf --shape 8b --type q4_0 --vocab-from /tmp/w/vocab.gguf -o /tmp/w/s8b_q4_0.gguf > $L/synth.log 2>&1; echo rc $? >> $L/synth.log ) &
step() { local n=$1 t=$2; shift 2
  if (( SECONDS - T0 + 15 > LIMIT )); then echo "== $n skipped" >> $L/summary.txt; return; fi
  local left=$(( LIMIT - (SECONDS - T0) )); (( t > left )) && t=$left
  local s=$SECONDS; timeout $t "$@" > $L/$n.log 2>&1; echo "== $n rc $? $((SECONDS-s)) s (at $((SECONDS-T0)) s)" >> $L/summary.txt
  grep -E "checks|differ|FAIL|ok$|ms/step|TOPS|tok/s|identical|parity|S_TG|S_PP|\| +[0-9]" $L/$n.log | tail -n 40 >> $L/summary.txt
  tar -C /tmp -cJf $OUT/r.tar.xz logs 2>/dev/null; }
step test_cuda 150 $N/test_cuda
step test_engine_cuda 90 $N/test_engine_cuda
step test_cuda_muta 40 $N/test_cuda_muta --attn
step bench_new 150 $N/bench_cuda --no-1b --suites prefill --out $L
step test_cuda_mut 50 $N/test_cuda_mut --quick
while [ ! -s /tmp/w/s8b_q4_0.gguf ] || ! grep -q '^rc' $L/synth.log; do sleep 2; (( SECONDS - T0 > LIMIT - 60 )) && break; done
P512=$(python3 -c 'print(" ".join(["the"] * 511))')
step ls_tg_1 60 $N/lockstep run -m /tmp/w/s8b_q4_0.gguf --device cuda -p "Hello" -n 128 --temp 0 --no-probe --json
step ls_pp_1 60 $N/lockstep run -m /tmp/w/s8b_q4_0.gguf --device cuda -p "$P512" -n 1 --temp 0 --no-probe --json
step run_probe 60 $N/lockstep run -m /tmp/w/s8b_q4_0.gguf --device cuda -p "Hello there" -n 16 --temp 0
cat $L/summary.txt
tar -C /tmp -cJf $OUT/r.tar.xz logs
