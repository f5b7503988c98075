build-tsan/obj/src/tokenizer/chat.o: src/tokenizer/chat.c \
 src/tokenizer/chat.h src/util/err.h
src/tokenizer/chat.h:
src/util/err.h:
