build-tsan/obj/src/cli/bench.o: src/cli/bench.c src/cli/cli.h \
 src/engine/generate.h src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/sample/sample.h src/quant/quant.h
src/cli/cli.h:
src/engine/generate.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/sample/sample.h:
src/quant/quant.h:
