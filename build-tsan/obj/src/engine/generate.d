build-tsan/obj/src/engine/generate.o: src/engine/generate.c \
 src/engine/generate.h src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/sample/sample.h
src/engine/generate.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/sample/sample.h:
