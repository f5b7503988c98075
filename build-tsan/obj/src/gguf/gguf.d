build-tsan/obj/src/gguf/gguf.o: src/gguf/gguf.c src/gguf/gguf.h \
 src/util/err.h src/quant/quant.h
src/gguf/gguf.h:
src/util/err.h:
src/quant/quant.h:
