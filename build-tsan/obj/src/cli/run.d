build-tsan/obj/src/cli/run.o: src/cli/run.c src/cli/cli.h \
 src/engine/generate.h src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/sample/sample.h src/engine/probe.h src/engine/spec_probe.h \
 src/spec/spec.h
src/cli/cli.h:
src/engine/generate.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/sample/sample.h:
src/engine/probe.h:
src/engine/spec_probe.h:
src/spec/spec.h:
