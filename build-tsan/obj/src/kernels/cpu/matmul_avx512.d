build-tsan/obj/src/kernels/cpu/matmul_avx512.o: \
 src/kernels/cpu/matmul_avx512.c src/kernels/cpu/internal.h \
 src/kernels/cpu/kernels.h src/util/err.h src/quant/quant.h \
 src/kernels/cpu/tree_avx512.h
src/kernels/cpu/internal.h:
src/kernels/cpu/kernels.h:
src/util/err.h:
src/quant/quant.h:
src/kernels/cpu/tree_avx512.h:
