build-tsan/obj/src/tokenizer/tokenizer.o: src/tokenizer/tokenizer.c \
 src/tokenizer/tokenizer.h src/gguf/gguf.h src/util/err.h \
 src/tokenizer/tok_internal.h
src/tokenizer/tokenizer.h:
src/gguf/gguf.h:
src/util/err.h:
src/tokenizer/tok_internal.h:
