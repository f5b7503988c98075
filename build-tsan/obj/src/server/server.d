build-tsan/obj/src/server/server.o: src/server/server.c \
 src/server/server.h src/spec/spec.h src/model/model.h src/gguf/gguf.h \
 src/util/err.h src/kernels/cpu/kernels.h src/tokenizer/chat.h \
 src/tokenizer/tokenizer.h src/sample/sample.h src/engine/generate.h \
 src/engine/engine.h src/engine/probe.h src/engine/spec_probe.h \
 src/server/request.h
src/server/server.h:
src/spec/spec.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/sample/sample.h:
src/engine/generate.h:
src/engine/engine.h:
src/engine/probe.h:
src/engine/spec_probe.h:
src/server/request.h:
