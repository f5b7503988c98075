#!/bin/bash
# pfab.sh OLD NEW MODEL ISA PAIRS: the run's own prefill_ms (JSON) of a 260-token prompt, -t 2, old then new
old=$1 new=$2 m=$3 isa=$4 P=$5
long=$(cat /tmp/rss/prompt_long.txt)
for i in $(seq 1 $P); do
  for side in old new; do
    b=$old; [ $side = new ] && b=$new
    LOCKSTEP_ISA=$isa $b run -m $m -p "$long" -n 1 --no-probe -t 2 --temp 0 --json 2>/dev/null | python3 -c "import json,sys;d=json.load(sys.stdin);print('$side', d['n_prompt'], round(d['prefill_ms'],1), 'ms')"
  done
done
