build-tsan/obj/src/kernels/cpu/bench.o: src/kernels/cpu/bench.c \
 src/kernels/cpu/bench.h src/kernels/cpu/internal.h \
 src/kernels/cpu/kernels.h src/util/err.h src/quant/quant.h
src/kernels/cpu/bench.h:
src/kernels/cpu/internal.h:
src/kernels/cpu/kernels.h:
src/util/err.h:
src/quant/quant.h:
