#!/bin/sh
# bench/simde/run.sh - run test_kernels' matmul parity tests for the AVX-512 and AVX-VNNI
# kernels on a host that lacks them, with the intrinsics emulated in portable C by SIMDe
# (apt-get install libsimde-dev; SIMDe 0.7.4 lacks a few intrinsics and does not fuse
# fmadd: immintrin.h here supplies them, fmadd with fmaf).  Test-only: nothing here is
# part of the library.  The emulated objects are compiled at -O0 (2 min for
# matmul_avx512.c) and the ISA mask claims AVX-VNNI and AVX-512; only the matmul
# kernels are emulated, so run only matmul tests (ops_avx512.o is the real one).
# Usage (after make -j2 all): sh bench/simde/run.sh [TEST...]   (default: Q4_K's tests)
set -e
D=${KP_SIMDE_DIR:-/tmp/lockstep-simde}
mkdir -p "$D"
CF="-std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno -Iinclude -Isrc -I."
# after ls_isa_mask's AVX-512 detection: claim the emulated levels there
awk '{ print } /mask \|= 1u << LS_ISA_AVX512;/ { print "    if (mask & (1u << LS_ISA_AVX2)) mask |= (1u << LS_ISA_AVXVNNI) | (1u << LS_ISA_AVX512); /* emulated */" }' \
    src/kernels/cpu/isa.c > "$D/isa.c"
grep -q emulated "$D/isa.c"
cc $CF -O2 -c "$D/isa.c" -o "$D/isa.o"
cc $CF -O0 -w -Ibench/simde -c src/kernels/cpu/matmul_avx512.c -o "$D/matmul_avx512.o" &
cc $CF -O0 -w -Ibench/simde -c src/kernels/cpu/matmul_avxvnni.c -o "$D/matmul_avxvnni.o"
wait
cp build/liblockstep.a "$D/lib.a"
(cd "$D" && ar r lib.a isa.o matmul_avx512.o matmul_avxvnni.o)
cc $CF -O2 -pthread -Itests/unit -o "$D/test_kernels" tests/unit/test_kernels.c -lcmocka "$D/lib.a" \
    -lpcre2-8 -lcjson -lcrypto -lmicrohttpd -lm -pthread
[ $# -gt 0 ] || set -- test_parity_q4_k test_parity_long_k test_parity_row_runs test_parity_extreme_x
for t in "$@"; do "$D/test_kernels" "$t"; done
