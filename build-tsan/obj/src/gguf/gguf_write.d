build-tsan/obj/src/gguf/gguf_write.o: src/gguf/gguf_write.c \
 src/gguf/gguf_write.h src/gguf/gguf.h src/util/err.h src/quant/quant.h
src/gguf/gguf_write.h:
src/gguf/gguf.h:
src/util/err.h:
src/quant/quant.h:
