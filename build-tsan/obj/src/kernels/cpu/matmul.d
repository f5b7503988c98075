build-tsan/obj/src/kernels/cpu/matmul.o: src/kernels/cpu/matmul.c \
 src/kernels/cpu/internal.h src/kernels/cpu/kernels.h src/util/err.h \
 src/quant/quant.h
src/kernels/cpu/internal.h:
src/kernels/cpu/kernels.h:
src/util/err.h:
src/quant/quant.h:
