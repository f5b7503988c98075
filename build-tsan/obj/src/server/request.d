build-tsan/obj/src/server/request.o: src/server/request.c \
 src/server/request.h src/tokenizer/chat.h src/util/err.h
src/server/request.h:
src/tokenizer/chat.h:
src/util/err.h:
