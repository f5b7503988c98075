build-tsan/obj/src/cli/serve.o: src/cli/serve.c src/cli/cli.h \
 src/server/server.h src/spec/spec.h src/model/model.h src/gguf/gguf.h \
 src/util/err.h src/kernels/cpu/kernels.h src/tokenizer/chat.h \
 src/tokenizer/tokenizer.h src/sample/sample.h src/engine/generate.h
src/cli/cli.h:
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
