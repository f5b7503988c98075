#!/bin/bash
# decab.sh OLD NEW MODEL ISA PAIRS THREADS N: the run's own decode_tok_s (JSON), old then new
old=$1 new=$2 m=$3 isa=$4 P=$5 t=$6 n=$7
for i in $(seq 1 $P); do
  for side in old new; do
    b=$old; [ $side = new ] && b=$new
    LOCKSTEP_ISA=$isa $b run -m $m -p "Once upon a time" -n $n --no-probe -t $t --temp 0 --json 2>/dev/null | python3 -c "import json,sys;d=json.load(sys.stdin);print('$side', round(d['decode_tok_s'],2), 'tok/s')"
  done
done
