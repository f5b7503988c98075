build-tsan/obj/src/kernels/cpu/ops.o: src/kernels/cpu/ops.c \
 src/kernels/cpu/internal.h src/kernels/cpu/kernels.h src/util/err.h \
 src/quant/quant.h
src/kernels/cpu/internal.h:
src/kernels/cpu/kernels.h:
src/util/err.h:
src/quant/quant.h:
