#!/bin/bash
# cpuab.sh OLD NEW MODEL ISA PAIRS: per pair, CPU seconds (user+sys, 1 thread) of -n 72 minus -n 8
# for old then new: the CPU time of 64 decode steps, robust to preemption on a shared host.
old=$1 new=$2 m=$3 isa=$4 P=$5
cpu() { /usr/bin/time -f "%U %S" env LOCKSTEP_ISA=$isa $1 run -m $m -p "Once upon a time" -n $2 --no-probe -t 1 --temp 0 2>&1 >/dev/null | tail -1 | awk '{print $1+$2}'; }
for i in $(seq 1 $P); do
  for side in old new; do
    b=$old; [ $side = new ] && b=$new
    a=$(cpu $b 8); c=$(cpu $b 72)
    echo "$side $a $c" | awk '{printf "%s %.3f ms/token (cpu %s / %s)\n", $1, ($3-$2)*1000/64, $2, $3}'
  done
done
