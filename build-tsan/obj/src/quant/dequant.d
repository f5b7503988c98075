build-tsan/obj/src/quant/dequant.o: src/quant/dequant.c src/quant/quant.h \
 src/util/err.h
src/quant/quant.h:
src/util/err.h:
