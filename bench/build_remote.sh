#!/usr/bin/env bash
# Builds the kernel objects and bench drivers without the rest of the tree (kernel lab use).
set -e
F="-std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -fno-math-errno -pthread -Isrc"
O=${1:-/tmp/lsk}
mkdir -p "$O"
for f in src/kernels/cpu/*.c src/quant/*.c src/util/err.c; do
    b=$(basename "$f" .c); X=""
    case $b in
        *_avx2) X="-mavx2 -mfma -mf16c" ;;
        *_avx512) X="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c" ;;
    esac
    gcc $F $X -c "$f" -o "$O/$b.o" &
done
wait
gcc $F bench/bench_kernels.c "$O"/*.o -lm -o "$O/bench_kernels"
gcc $F bench/mm_quick.c "$O"/*.o -lm -o "$O/mm_quick"
if [ -n "${LAB_AB:-}" ]; then  # A/B: the same with -D$LAB_AB in the AVX-512 matmul
    mkdir -p "$O/b" && cp "$O"/*.o "$O/b/"
    gcc $F -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c -D"$LAB_AB" \
        -c src/kernels/cpu/matmul_avx512.c -o "$O/b/matmul_avx512.o"
    gcc $F bench/mm_quick.c "$O"/b/*.o -lm -o "$O/mm_quick_b"
fi
