build-tsan/obj/src/tokenizer/pretok.o: src/tokenizer/pretok.c \
 src/tokenizer/tok_internal.h src/util/err.h
src/tokenizer/tok_internal.h:
src/util/err.h:
