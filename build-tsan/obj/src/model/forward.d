build-tsan/obj/src/model/forward.o: src/model/forward.c \
 src/model/model_impl.h src/model/model.h src/gguf/gguf.h src/util/err.h \
 src/kernels/cpu/kernels.h src/tokenizer/chat.h src/tokenizer/tokenizer.h \
 src/quant/quant.h
src/model/model_impl.h:
src/model/model.h:
src/gguf/gguf.h:
src/util/err.h:
src/kernels/cpu/kernels.h:
src/tokenizer/chat.h:
src/tokenizer/tokenizer.h:
src/quant/quant.h:
