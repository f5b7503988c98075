#!/bin/sh
# kp_ab.sh - interleaved A/B of one matmul shape between two builds of kp_mm.c.
# Usage: bench/kp_ab.sh A_BIN B_BIN ISA TYPE_ID K N PAIRS M...
#   e.g. cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -o /tmp/kp_b bench/kp_mm.c build/liblockstep.a -lm -pthread
#        (and /tmp/kp_a against the base build's liblockstep.a), then
#        bench/kp_ab.sh /tmp/kp_a /tmp/kp_b avx2 12 2048 2048 5 1 64 512
# Per M: PAIRS runs of A then B alternately (each run: the median of 5 samples, thread CPU
# time, 1 thread); prints the median of each side's runs and B/A time (< 1: B faster), and
# checks that both builds gave the same y bits.
set -e
A=$1 B=$2 ISA=$3 T=$4 K=$5 N=$6 P=$7
shift 7
for M in "$@"; do
    ra="" rb="" ha="" hb=""
    i=0
    while [ $i -lt "$P" ]; do
        la=$("$A" "$T" "$K" "$N" "$M" "$ISA" 5)
        lb=$("$B" "$T" "$K" "$N" "$M" "$ISA" 5)
        ra="$ra $(echo "$la" | sed 's/.*median \([0-9.]*\) us.*/\1/')"
        rb="$rb $(echo "$lb" | sed 's/.*median \([0-9.]*\) us.*/\1/')"
        ha=$(echo "$la" | sed 's/.*y-hash //') hb=$(echo "$lb" | sed 's/.*y-hash //')
        i=$((i + 1))
    done
    echo "$ra|$rb|$ha|$hb" | awk -v isa="$ISA" -v k="$K" -v n="$N" -v m="$M" -F'|' '
        function med(s,   a, c, i, j, t) { c = split(s, a, " "); for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                          return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 }
        { ma = med($1); mb = med($2);
          printf "%s K=%s N=%s M=%s: A %.1f us  B %.1f us  B/A %.3f  (A runs:%s | B runs:%s) bits %s\n", isa, k, n, m, ma, mb, mb / ma, $1, $2, ($3 == $4 ? "same" : "DIFFER") }'
done
