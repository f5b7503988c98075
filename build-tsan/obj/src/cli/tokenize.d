build-tsan/obj/src/cli/tokenize.o: src/cli/tokenize.c src/cli/cli.h \
 src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h
src/cli/cli.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
