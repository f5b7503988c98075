build-tsan/obj/src/quant/quant.o: src/quant/quant.c src/quant/quant.h \
 src/util/err.h
src/quant/quant.h:
src/util/err.h:
