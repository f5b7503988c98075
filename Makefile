# lockstep build.  `make run` answers a chat question with the default model;
# `make test` builds and runs every test.  See README.md.
#
# Floating point: -ffp-contract=off everywhere (the canonical recipes place every
# fma explicitly), and no fast-math flag ever: the parity contract depends on it.

CC      ?= cc
PYTHON  ?= python3
# The tests' Python: the project's virtual environment with the pinned references
# (scripts/install-deps.sh --test makes it; `make test` runs that first).
TEST_VENV   ?= $(shell bash scripts/install-deps.sh --venv-path)
TEST_PYTHON ?= $(TEST_VENV)/bin/python
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
SAN_ISA ?=
CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter \
                -ffp-contract=off -fno-math-errno -fPIC -pthread -Iinclude -Isrc -I. $(SAN)
CFLAGS  ?=
ALL_CFLAGS = $(CFLAGS_COMMON) $(CFLAGS) $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
LDLIBS  = $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8) -lcjson -lcrypto -lmicrohttpd -lm -pthread $(SAN)

MODEL   ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
# `make model MODEL=gemma3`: the Gemma 3 270M Q4_K_M file (scripts/fetch-model.sh).
override MODEL := $(if $(filter gemma3,$(MODEL)),models/gemma-3-270m-q4_k_m.gguf,$(MODEL))

# The library is everything under src/ but the two programs built on its public header
# (include/lockstep.h): the command line (src/cli) and the HTTP server (src/server); the
# CUDA backend (src/backend/cuda) joins it only in a CUDA build (below).
LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/server/*' -not -path 'src/backend/cuda/*' | sort)
CLI_SRC  := $(shell find src/cli src/server -name '*.c' | sort)
BENCH_SRC := $(sort $(wildcard bench/cli/*.c)) src/cli/args.c
# A CUDA build (CUDA=1, its own BUILD folder, e.g. `make CUDA=1 BUILD=build-cuda`) puts the
# CUDA backend behind the engine's seam (src/engine/backend.h) in place of the stub.
CUDA     ?= 0
ifeq ($(CUDA),1)
LIB_SRC  := $(filter-out src/engine/backend_nocuda.c,$(LIB_SRC)) src/backend/cuda/backend_cuda.c
endif
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# Per-ISA kernel files get their instruction set; everything else is baseline x86-64.
ISA_AVX2   = -mavx2 -mfma -mf16c
ISA_AVXVNNI = -mavxvnni $(ISA_AVX2)
ISA_AVX512 = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni $(ISA_AVX2)

.PHONY: all lib cli tests test test-c test-asan test-tsan fuzz run model deps test-deps clean mutants
all: cli lib tests bench-tools $(BUILD)/embed

lib: $(BUILD)/liblockstep.a $(BUILD)/liblockstep.so $(BUILD)/liblockstep_test.so
cli: $(BUILD)/lockstep
tests: $(TEST_BIN)

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ISA_AVX2) $(SAN_ISA) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avxvnni.o: %_avxvnni.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ISA_AVXVNNI) $(SAN_ISA) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ISA_AVX512) $(SAN_ISA) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/liblockstep.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library exports the public API only (include/lockstep.h's LS_API functions,
# listed by a version script); every other symbol is local to it.  liblockstep_test.so
# exports everything, for the Python tests that check internals (the tokenizer and chat
# templates against HF tokenizers and jinja2).
$(BUILD)/lockstep.map: include/lockstep.h
	@mkdir -p $(dir $@)
	@{ echo '{ global:'; grep -o 'LS_API[^(]*(' $< | grep -o 'ls_[a-z0-9_]*($$' | tr -d '(' | sed 's/$$/;/'; \
	  echo 'local: *; };'; } > $@
# What a program links: the library, and in a CUDA build the backend's objects too.
ifeq ($(CUDA),1)
LINK_LIB  = -Wl,--start-group $(BUILD)/liblockstep.a $(BUILD)/liblockstep_cuda.a -Wl,--end-group $(CUDA_LDLIBS)
LINK_DEPS = $(BUILD)/liblockstep.a $(BUILD)/liblockstep_cuda.a
SO_EXTRA  = $(CUDA_OBJ)
else
LINK_LIB  = $(BUILD)/liblockstep.a $(LDLIBS)
LINK_DEPS = $(BUILD)/liblockstep.a
SO_EXTRA  =
endif
$(BUILD)/liblockstep.so: $(LIB_OBJ) $(SO_EXTRA) $(BUILD)/lockstep.map
	$(CC) -shared -o $@ $(LIB_OBJ) $(SO_EXTRA) -Wl,--version-script=$(BUILD)/lockstep.map $(if $(SO_EXTRA),$(CUDA_LDLIBS),$(LDLIBS))
$(BUILD)/liblockstep_test.so: $(LIB_OBJ) $(SO_EXTRA)
	$(CC) -shared -o $@ $(LIB_OBJ) $(SO_EXTRA) $(if $(SO_EXTRA),$(CUDA_LDLIBS),$(LDLIBS))

$(BUILD)/lockstep: $(CLI_OBJ) $(LINK_DEPS)
	$(CC) -o $@ $(CLI_OBJ) $(LINK_LIB)

# The embedding example (docs/embedding.md): the public header and the shared library,
# nothing else of the tree.
$(BUILD)/embed: examples/embed.c include/lockstep.h $(BUILD)/liblockstep.so
	$(CC) -std=c11 -O2 -Wall -Wextra -Iinclude -o $@ $< -L$(BUILD) -llockstep -Wl,-rpath,'$$ORIGIN'

# Benchmark tools (bench/): they may use the library's internals.
.PHONY: bench-tools
bench-tools: $(BUILD)/lockstep-bench $(BUILD)/bench-budget $(BUILD)/synth-gguf
$(BUILD)/lockstep-bench: $(BENCH_OBJ) $(LINK_DEPS)
	$(CC) -o $@ $(BENCH_OBJ) $(LINK_LIB)
$(BUILD)/synth-gguf: bench/synth_gguf.c tests/cuda/synth.c tests/cuda/synth.h $(LINK_DEPS)
	$(CC) $(ALL_CFLAGS) -Itests/cuda -o $@ bench/synth_gguf.c tests/cuda/synth.c $(LINK_LIB)
$(BUILD)/bench-budget: bench/budget.c $(LINK_DEPS)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LINK_LIB) \
	    -Wl,--wrap=ls_matmul_multi_rows,--wrap=ls_attention,--wrap=ls_rmsnorm,--wrap=ls_swiglu

# the server's tool-call parser: pure (cJSON), linked on its own
$(BUILD)/tests/test_tools: tests/unit/test_tools.c src/server/tools.c src/server/tools.h $(LINK_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ tests/unit/test_tools.c src/server/tools.c -lcmocka $(LINK_LIB)

$(BUILD)/tests/%: tests/unit/%.c $(LINK_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< -lcmocka $(LINK_LIB)

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(BENCH_OBJ:.o=.d)

# ---- the README's two commands -------------------------------------------
deps:
	@bash scripts/install-deps.sh

# What the tests need: the packages above plus cmocka, clang, valgrind, nginx, and the
# Python references in the project's virtual environment (a check, when all is there).
test-deps:
	@bash scripts/install-deps.sh --test

model: $(MODEL)
$(MODEL):
	@bash scripts/fetch-model.sh $@

run: deps
	@$(MAKE) --no-print-directory cli model
	$(BUILD)/lockstep run -m $(MODEL) --chat "What is the capital of France? Answer in one sentence." -n 64

# test-deps first, alone: the build needs its packages (cmocka) on a fresh machine.
test:
	@$(MAKE) --no-print-directory test-deps
	@$(MAKE) --no-print-directory all model
	@LOCKSTEP_BUILD=$(BUILD) MODEL=$(MODEL) PYTHON=$(TEST_PYTHON) bash scripts/run-tests.sh

test-c:
	@$(MAKE) --no-print-directory test-deps
	@$(MAKE) --no-print-directory all
	@LOCKSTEP_BUILD=$(BUILD) MODEL=$(MODEL) PYTHON=$(TEST_PYTHON) bash scripts/run-tests.sh --c-only

# The C suite under AddressSanitizer + UndefinedBehaviorSanitizer (own build dir).
ASAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# LOCKSTEP_TEST_QUICK trims the parity sweeps to a subset that still reaches every
# kernel path and tail (memory safety is what this run adds; make test does the rest).
test-asan: test-deps model build-asan-all
	@LOCKSTEP_BUILD=build-asan MODEL=$(MODEL) LOCKSTEP_TEST_QUICK=$${LOCKSTEP_TEST_QUICK:-1} LOCKSTEP_ENGINE_CASES=$${LOCKSTEP_ENGINE_CASES:-8} \
	    LOCKSTEP_FAULT_POINTS=$${LOCKSTEP_FAULT_POINTS:-24} bash scripts/run-tests.sh --c-only

# ThreadSanitizer over the multi-threaded parts: the thread pool's two kinds of job,
# the engine (pools, parity mixes), the drafters, and the server end to end (its HTTP
# threads and the engine thread).
test-tsan: test-deps model build-tsan-all
	@set -e; export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"; \
	    build-tsan/tests/test_kernels "test_pool*"; \
	    LOCKSTEP_ENGINE_CASES=$${LOCKSTEP_ENGINE_CASES:-8} MODEL=$(MODEL) build-tsan/tests/test_engine; \
	    LOCKSTEP_TEST_QUICK=$${LOCKSTEP_TEST_QUICK:-1} MODEL=$(MODEL) build-tsan/tests/test_spec; \
	    LOCKSTEP_BUILD=build-tsan LOCKSTEP_LOAD_REQUESTS=3 MODEL=$(MODEL) $(TEST_PYTHON) -m pytest -q \
	        tests/python/test_server.py -k "chat or logprobs or errors or disconnect or abandoned or load or tokenize"

# Deliberate bugs, one at a time in a scratch copy, each of which the tests must catch
# (scripts/mutants.py; the list and what kills each: docs/reliability.md).  By hand:
# about 20-30 minutes on 2 cores.
mutants: test-deps all model
	$(TEST_PYTHON) scripts/mutants.py

# The two sanitizer builds, as targets of their own so that `make -j2 build-asan-all
# build-tsan-all` builds both at once (the ASan+UBSan build of matmul_avx512.c alone takes
# over 2 minutes on one core).  TSan leaves the SIMD kernel files uninstrumented
# (SAN_ISA): it turns every vector load into a call, and one engine case then took 383 s
# instead of 21; what TSan is for, the pool, engine, drafter and server threads, stays
# instrumented.  ASan+UBSan instruments everything.
.PHONY: build-asan-all build-tsan-all
build-asan-all:
	@$(MAKE) --no-print-directory BUILD=build-asan SAN="$(ASAN_FLAGS)" OPT=-O2 all
build-tsan-all:
	@$(MAKE) --no-print-directory BUILD=build-tsan SAN="-fsanitize=thread" SAN_ISA=-fno-sanitize=thread OPT=-O2 all

# libFuzzer targets (clang) over the parsers, each for FUZZ_SECONDS, from the seed
# corpus in tests/fuzz/corpus/<target>; crashes land in build-fuzz/.
FUZZ_SECONDS ?= 60
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -ffp-contract=off -fsanitize=fuzzer,address,undefined
build-fuzz/fuzz_gguf: tests/fuzz/fuzz_gguf.c src/gguf/gguf.c src/quant/quant.c src/util/err.c src/util/alloc.c
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -o $@ $^
FUZZ_TOK_SRC = tests/fuzz/fuzz_tokenizer.c src/tokenizer/tokenizer.c src/tokenizer/pretok.c src/tokenizer/spm.c src/gguf/gguf.c \
               src/quant/quant.c src/util/err.c src/util/alloc.c
build-fuzz/fuzz_tokenizer: $(FUZZ_TOK_SRC)
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -o $@ $^ -lpcre2-8
build-fuzz/fuzz_request: tests/fuzz/fuzz_request.c src/server/request.c src/server/tools.c src/tokenizer/chat.c src/tokenizer/jinja.c src/sample/grammar.c \
                         src/sample/json_schema.c src/util/err.c src/util/alloc.c
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -pthread -o $@ $^ -lcjson
build-fuzz/fuzz_chat: tests/fuzz/fuzz_chat.c src/tokenizer/chat.c src/tokenizer/jinja.c src/util/err.c src/util/alloc.c
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -o $@ $^ -lcjson -lm
build-fuzz/fuzz_grammar: tests/fuzz/fuzz_grammar.c src/sample/grammar.c src/sample/json_schema.c src/util/err.c src/util/alloc.c
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -pthread -o $@ $^ -lcjson
FUZZ_TARGETS = gguf tokenizer request chat grammar
# One phony target per fuzzer, so `make -j2 fuzz` runs two at a time (each is one
# process on one core).  Each one's log goes to build-fuzz/<target>.log; its last lines
# (runs, coverage) are printed when it ends, the whole log if it fails.
fuzz: $(FUZZ_TARGETS:%=fuzz-%)
.PHONY: $(FUZZ_TARGETS:%=fuzz-%)
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: build-fuzz/fuzz_% model
	@mkdir -p build-fuzz/corpus-$*
	@echo "== fuzz_$* for $(FUZZ_SECONDS) s, after its regression corpus (log: build-fuzz/$*.log)"
	@if MODEL=$(MODEL) build-fuzz/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -timeout=60 -max_len=65536 \
	        -artifact_prefix=build-fuzz/$*- build-fuzz/corpus-$* tests/fuzz/corpus/$* > build-fuzz/$*.log 2>&1; then \
	    grep -E "INITED|Done [0-9]+ runs" build-fuzz/$*.log | sed 's/^/fuzz_$*: /'; \
	else cat build-fuzz/$*.log; echo "fuzz_$*: FAILED (inputs: build-fuzz/$*-*)"; exit 1; fi

# Every benchmark suite (bench/README.md) with llama.cpp side by side; builds llama.cpp
# first when it is missing (bench/llamacpp/build.sh, ~20 min once).  Writes
# bench/results/ and the generated section of docs/benchmarks.md; BENCH_FLAGS=--quick
# for a short development run (into build/bench/results-quick/).
# Then, for every lower kernel level this CPU runs (BENCH_ISAS; default: those of avxvnni and
# avx2 that `lockstep info --isa` lists below the best one), the decode and prefill suites
# again with lockstep forced to that level and the llama.cpp built for it (LLAMA_ISA), into
# bench/results/isa-<level>/ (BENCH_ISA_SUITES; BENCH_ISAS= skips them).
.PHONY: bench
BENCH_FLAGS ?=
BENCH_ISA_SUITES ?= decode,prefill
bench: cli bench-tools model
	@bash scripts/install-deps.sh --bench
	$(PYTHON) bench/suites.py --lockstep $(BUILD)/lockstep --bench-tool $(BUILD)/lockstep-bench --docs docs/benchmarks.md $(BENCH_FLAGS)
	@have="$$($(BUILD)/lockstep info --isa)"; best="$${have##* }"; \
	isas="$(if $(filter undefined,$(origin BENCH_ISAS)),auto,$(BENCH_ISAS))"; \
	if [ "$$isas" = auto ]; then isas=; for i in avxvnni avx2; do \
	    case " $$have " in *" $$i "*) [ "$$i" != "$$best" ] && isas="$$isas $$i";; esac; done; fi; \
	rc=0; for i in $$isas; do \
	    echo "== make bench: --isa $$i (suites $(BENCH_ISA_SUITES))"; \
	    $(PYTHON) bench/suites.py --isa $$i --suites $(BENCH_ISA_SUITES) --lockstep $(BUILD)/lockstep \
	        --bench-tool $(BUILD)/lockstep-bench $(BENCH_FLAGS) || rc=1; \
	done; exit $$rc

# ---- CUDA backend (docs/cuda.md) --------------------------------------------
# Built only when asked: `make cuda` (the library and its test and bench programs),
# `make test-cuda` / `make bench-cuda` (build, then run on the GPU), or CUDA=1, which
# adds `cuda` to `all`.  `make test` and the CPU build never need a CUDA toolkit: CI
# machines may have nvcc but no GPU, so finding nvcc alone turns nothing on.
NVCC       ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc),nvcc)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH  ?= -gencode=arch=compute_90,code=sm_90
# -fmad=false: no contraction anywhere (the kernels also spell every rounding out with
# __fmul_rn/__fadd_rn/__fmaf_rn); never --use_fast_math; IEEE division and sqrt.
NVCCFLAGS  ?= -std=c++17 -O3 -g -lineinfo -fmad=false -prec-div=true -prec-sqrt=true -ftz=false
CUDA_DEFS  ?=
CUDA_CU    := $(sort $(wildcard src/backend/cuda/*.cu))
CUDA_OBJ   := $(CUDA_CU:%.cu=$(BUILD)/cuda/obj/%.o) $(BUILD)/cuda/obj/src/backend/cuda/cuda_src.o
CUDA_MUT_OBJ := $(filter-out $(BUILD)/cuda/obj/src/backend/cuda/cuda_mm_%,$(CUDA_OBJ)) \
                $(patsubst %.cu,$(BUILD)/cuda/mut/%.o,$(filter src/backend/cuda/cuda_mm_%,$(CUDA_CU)))
# CUDA runtime linked statically; cuBLAS (the fast family) is opened at run time.
CUDA_LDLIBS ?= -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic -static-libgcc $(LDLIBS)
CUDA_TESTS := $(BUILD)/cuda/test_layout $(BUILD)/cuda/test_cuda $(BUILD)/cuda/test_cuda_mut $(BUILD)/cuda/bench_cuda \
              $(BUILD)/cuda/test_engine_cuda

.PHONY: cuda test-cuda bench-cuda
ifeq ($(CUDA),1)
all: cuda
else
# Without CUDA=1 these rebuild everything as a CUDA build, in build-cuda by default.
cuda test-cuda bench-cuda:
	@$(MAKE) --no-print-directory CUDA=1 BUILD=$(if $(filter build,$(BUILD)),build-cuda,$(BUILD)) $@
endif
ifeq ($(CUDA),1)
cuda: $(BUILD)/liblockstep_cuda.a $(CUDA_TESTS) all

$(BUILD)/cuda/obj/%.o: %.cu src/backend/cuda/cuda_internal.h src/backend/cuda/cuda_recipe.h src/backend/cuda/cuda_mm.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(CUDA_ARCH) $(CUDA_DEFS) -Iinclude -Isrc -Xcompiler -ffp-contract=off,-fPIC,-Wall -c $< -o $@
$(BUILD)/cuda/mut/%.o: %.cu src/backend/cuda/cuda_internal.h src/backend/cuda/cuda_recipe.h src/backend/cuda/cuda_mm.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(CUDA_ARCH) -DLS_CUDA_MUTATE_TREE -Iinclude -Isrc -Xcompiler -ffp-contract=off,-fPIC -c $< -o $@
$(BUILD)/cuda/obj/src/backend/cuda/cuda_src.o: src/backend/cuda/cuda_src.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/liblockstep_cuda.a: $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/cuda/liblockstep_cuda_mut.a: $(CUDA_MUT_OBJ)
	@rm -f $@
	ar rcs $@ $^

CUDA_TEST_DEPS = tests/cuda/synth.c tests/cuda/synth.h tests/cuda/parity.c tests/cuda/parity.h
$(BUILD)/cuda/test_layout: tests/cuda/test_layout.c $(CUDA_TEST_DEPS) src/backend/cuda/cuda_recipe.h $(BUILD)/liblockstep.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/cuda -o $@ $< tests/cuda/synth.c $(BUILD)/liblockstep.a $(LDLIBS)
$(BUILD)/cuda/test_cuda: tests/cuda/test_cuda.c $(CUDA_TEST_DEPS) $(BUILD)/liblockstep_cuda.a $(BUILD)/liblockstep.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/cuda -o $@ $< tests/cuda/synth.c tests/cuda/parity.c -Wl,--start-group $(BUILD)/liblockstep_cuda.a $(BUILD)/liblockstep.a -Wl,--end-group $(CUDA_LDLIBS)
$(BUILD)/cuda/test_cuda_mut: tests/cuda/test_cuda.c $(CUDA_TEST_DEPS) $(BUILD)/cuda/liblockstep_cuda_mut.a $(BUILD)/liblockstep.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/cuda -o $@ $< tests/cuda/synth.c tests/cuda/parity.c $(BUILD)/cuda/liblockstep_cuda_mut.a $(BUILD)/liblockstep.a $(CUDA_LDLIBS)
$(BUILD)/cuda/test_engine_cuda: tests/cuda/test_engine_cuda.c $(CUDA_TEST_DEPS) $(BUILD)/liblockstep_cuda.a $(BUILD)/liblockstep.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/cuda -o $@ $< tests/cuda/synth.c -Wl,--start-group $(BUILD)/liblockstep_cuda.a $(BUILD)/liblockstep.a -Wl,--end-group $(CUDA_LDLIBS)
$(BUILD)/cuda/bench_cuda: bench/cuda/bench_cuda.c $(CUDA_TEST_DEPS) $(BUILD)/liblockstep_cuda.a $(BUILD)/liblockstep.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/cuda -o $@ $< tests/cuda/synth.c tests/cuda/parity.c -Wl,--start-group $(BUILD)/liblockstep_cuda.a $(BUILD)/liblockstep.a -Wl,--end-group $(CUDA_LDLIBS)

# On a machine with a GPU: the host-side layout test, the GPU parity suite, and the
# deliberately broken build (its final tree in the wrong order), which must fail.
test-cuda: cuda
	$(BUILD)/cuda/test_layout
	$(BUILD)/cuda/test_cuda
	$(BUILD)/cuda/test_engine_cuda
	@if [ -f $(MODEL) ]; then $(BUILD)/cuda/test_engine_cuda --model $(MODEL); \
	else echo "test-cuda: NOT CHECKED: the real model on the GPU ($(MODEL) is missing; make model)"; fi
	@if $(BUILD)/cuda/test_cuda_mut --quick > $(BUILD)/cuda/mutant.log 2>&1; then \
	    echo "test-cuda: the mutant (wrong tree order) passed: the parity tests cannot fail"; exit 1; \
	else echo "test-cuda: the mutant (wrong tree order) fails, as it must ($$(grep -c FAIL $(BUILD)/cuda/mutant.log) failing checks)"; fi
bench-cuda: cuda
	@mkdir -p bench/results/cuda
	$(BUILD)/cuda/bench_cuda --out bench/results/cuda
endif

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
