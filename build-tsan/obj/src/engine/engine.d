build-tsan/obj/src/engine/engine.o: src/engine/engine.c \
 src/engine/engine.h src/engine/generate.h src/model/model.h \
 src/gguf/gguf.h src/util/err.h src/kernels/cpu/kernels.h \
 src/tokenizer/chat.h src/tokenizer/tokenizer.h src/sample/sample.h \
 src/engine/kvcache.h
src/engine/engine.h:
src/engine/generate.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/sample/sample.h:
src/engine/kvcache.h:
