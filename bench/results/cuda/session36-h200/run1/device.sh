#!/usr/bin/env bash
# session 35: the k_mma2 copy plan (new) against main (old), parity first; logs into $OUT/r.tar.xz
set -u
mkdir -p /tmp/new /tmp/old
tar -C /tmp/new -xJf .gpu-carry/new.tar.xz; tar -C /tmp/old -xJf .gpu-carry/bin.tar.xz
N=/tmp/new/bin; O=/tmp/old/bin; L=/tmp/logs; mkdir -p $L
export LD_LIBRARY_PATH=$N/lib
T0=$SECONDS; LIMIT=${LIMIT:-560}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; } > $L/env.txt 2>&1
step() { local n=$1 t=$2; shift 2
  if (( SECONDS - T0 + 15 > LIMIT )); then echo "== $n skipped" >> $L/summary.txt; return; fi
  local left=$(( LIMIT - (SECONDS - T0) )); (( t > left )) && t=$left
  local s=$SECONDS; timeout $t "$@" > $L/$n.log 2>&1; echo "== $n rc $? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "checks|differ|FAIL|ok$|ms/step|TOPS|tok/s|total|identical" $L/$n.log | tail -n 40 >> $L/summary.txt; }
step test_cuda 150 $N/test_cuda
step bench_new 110 $N/bench_cuda --no-1b --suites kernels,prefill --out $L
step test_cuda_muta 40 $N/test_cuda_muta --attn
step bench_old 110 $O/bench_cuda --no-1b --suites kernels,prefill
step test_cuda_mut 50 $N/test_cuda_mut --quick
step test_engine_cuda 90 $N/test_engine_cuda
step dec_new 60 env LS_BENCH_NO_KERNELS=1 $N/bench_cuda --no-1b --decode-only
step test_layout 40 $N/test_layout
cat $L/summary.txt
tar -C /tmp -cJf $OUT/r.tar.xz logs
