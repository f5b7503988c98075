build-tsan/obj/src/sample/sample.o: src/sample/sample.c \
 src/sample/sample.h src/util/err.h src/kernels/cpu/kernels.h
src/sample/sample.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
