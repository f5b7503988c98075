build-tsan/obj/src/engine/spec_probe.o: src/engine/spec_probe.c \
 src/engine/spec_probe.h src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/engine/generate.h src/sample/sample.h
src/engine/spec_probe.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/engine/generate.h:
src/sample/sample.h:
