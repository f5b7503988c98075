build-tsan/obj/src/cli/probe.o: src/cli/probe.c src/cli/cli.h \
 src/engine/spec_probe.h src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/spec/spec.h src/sample/sample.h src/engine/generate.h
src/cli/cli.h:
src/engine/spec_probe.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/spec/spec.h:
src/sample/sample.h:
src/engine/generate.h:
