build-tsan/obj/src/kernels/cpu/ops_avx2.o: src/kernels/cpu/ops_avx2.c \
 src/kernels/cpu/internal.h src/kernels/cpu/kernels.h src/util/err.h \
 src/quant/quant.h src/kernels/cpu/tree_avx2.h
src/kernels/cpu/internal.h:
src/kernels/cpu/kernels.h:
src/util/err.h:
src/quant/quant.h:
src/kernels/cpu/tree_avx2.h:
