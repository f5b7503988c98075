build-tsan/obj/src/engine/probe.o: src/engine/probe.c src/engine/probe.h \
 src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/engine/generate.h src/sample/sample.h
src/engine/probe.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/engine/generate.h:
src/sample/sample.h:
