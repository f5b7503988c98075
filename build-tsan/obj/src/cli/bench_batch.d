build-tsan/obj/src/cli/bench_batch.o: src/cli/bench_batch.c src/cli/cli.h \
 src/engine/engine.h src/engine/generate.h src/model/model.h \
 src/gguf/gguf.h src/util/err.h src/kernels/cpu/kernels.h \
 src/tokenizer/chat.h src/tokenizer/tokenizer.h src/sample/sample.h
src/cli/cli.h:
src/engine/engine.h:
src/engine/generate.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/sample/sample.h:
