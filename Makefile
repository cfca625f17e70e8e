# Makefile - builds the lazy-rotary RAG tools, tests and benchmarks.
# CPU-only when nvcc is absent; adds the CUDA kernels (kernels/*.cu) when found.
# Layout (ARCHITECTURE.md): base/ formats/ tokenizer/ model/ (CPU engine) kernels/ gpu/ (GPU engine)
# store/ ingest/ query/ tools/ tests/ bench/.

CC       ?= gcc
BUILD    ?= build
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= /usr/local/cuda
CSTD     := -std=gnu11
OPT      ?= -O2 -march=x86-64-v2
CFLAGS   := $(CSTD) $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fopenmp -I. \
            $(shell pkg-config --cflags openblas 2>/dev/null) $(EXTRA_CFLAGS)
LIBS     := $(shell pkg-config --libs lmdb sqlite3 libzstd jansson libpcre2-8 openblas libmicrohttpd 2>/dev/null) \
            -lcsv -lm -lpthread -fopenmp $(EXTRA_LDFLAGS)
NVFLAGS  := -O3 -std=c++17 -I. -lineinfo -Xptxas -v \
            -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90

# The library's folders, lowest layer first (ARCHITECTURE.md).
LIB_DIRS  := base formats tokenizer model kernels cache store engine ingest query eval serve
# Programs: files with a main(). Everything else under the module folders is library code.
BIN_SRCS  := $(wildcard tools/*.c) $(wildcard ingest/lazyingest.c) $(wildcard query/lazyquery.c) $(wildcard serve/lazyserve.c)
# engine/engine_gpu.c: the GPU engine, linked only into the programs of 'make cuda' (engine/engine.h)
GPU_ENGINE_SRC := engine/engine_gpu.c
LIB_SRCS  := $(filter-out $(BIN_SRCS) $(GPU_ENGINE_SRC), $(foreach m,$(LIB_DIRS),$(wildcard $(m)/*.c)))
TEST_SRCS := $(wildcard tests/test_*.c)
BENCH_SRCS:= $(wildcard bench/bench_*.c)
CU_SRCS   := $(wildcard kernels/*.cu)

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
BINS      := $(patsubst %.c,$(BUILD)/bin/%,$(notdir $(BIN_SRCS)))
TESTS     := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
BENCHES   := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
HEADERS   := $(foreach m,$(LIB_DIRS) gpu tests,$(wildcard $(m)/*.h))

ifeq ($(NVCC),)
$(info nvcc not found: CPU-only build)
else
$(info nvcc found at $(NVCC): kernels/*.cu build with 'make cuda')
endif

# Default: the command-line tools.
all: $(BINS)

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/liblazy.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/%: tools/%.c $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

$(BUILD)/bin/lazyingest: ingest/lazyingest.c $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

$(BUILD)/bin/lazyquery: query/lazyquery.c $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

# the HTTP server (serve/: scheduler, OpenAI API on libmicrohttpd)
$(BUILD)/bin/lazyserve: serve/lazyserve.c $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

$(BUILD)/bench/%: bench/%.c $(wildcard bench/*.h) $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

# --version (base/cli.c): git describe of the tree, taken when base/cli.o is compiled
$(BUILD)/obj/base/cli.o: CFLAGS += -DLZ_VERSION='"$(shell git describe --always --dirty 2>/dev/null || echo unknown)"'
$(BUILD)/obj/base/cli.o: $(wildcard .git/HEAD .git/refs/heads/*)
# the tools that load a vocabulary alone
$(BUILD)/bin/lazygen $(BUILD)/bin/lazy-tokenize: tools/tokenizer_file.h

# lazyingest with its test hooks (--test-fail-pass: fault injection), for tests/test_ingest.c only
$(BUILD)/tests/lazyingest-hooks: ingest/lazyingest.c $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DLZ_INGEST_TEST_HOOKS $< $(BUILD)/liblazy.a $(LIBS) -o $@
tests: $(BUILD)/tests/lazyingest-hooks

# Build the test programs and the tools they drive (tests/test_bench_serve.c runs two benchmarks).
tests: $(TESTS) $(BINS) $(BUILD)/bench/bench_serve $(BUILD)/bench/bench_workload

# Run every test program; prints 'N passed, N failed' and fails if any failed.
test: tests
	@BUILD=$(BUILD) sh tests/run.sh

# Tests under AddressSanitizer + UndefinedBehaviorSanitizer, in build/asan.
asan:
	$(MAKE) BUILD=build/asan OPT=-O1 \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" tests

# Run the tests built by 'make asan'.
test-asan: asan
	@BUILD=build/asan ASAN_OPTIONS=detect_leaks=1 sh tests/run.sh

# Benchmarks (not tests): see bench/README.md for what each measures.
bench: $(BENCHES) $(BINS)

# The README's main job: install dependencies, build, run on the embedded default.
demo: deps
	$(MAKE) all
	@BUILD=$(BUILD) sh tools/demo.sh

# Install the Debian packages the build needs (idempotent, quiet when present).
deps:
	@sh tools/deps.sh

clean:
	rm -rf build

.PHONY: all tests test asan test-asan bench deps clean cuda demo
.SECONDARY:

# ---- CUDA kernels: 'make cuda' builds the GPU kernels' driver, tests and benchmarks into build/cuda ----
# kernels/*.cu with nvcc for Hopper (sm_90a), kernels/*.c (CPU references and shared
# host code) with $(CC); cudart linked statically by nvcc. Compiles without a GPU.
LZK_DIR     := $(BUILD)/cuda
LZK_NVFLAGS := -O3 -std=c++17 -I. -lineinfo -gencode=arch=compute_90a,code=sm_90a
LZK_CU      := $(wildcard kernels/*.cu)
LZK_C       := $(wildcard kernels/*.c)
LZK_OBJS    := $(LZK_CU:%.cu=$(LZK_DIR)/obj/%.o) $(LZK_C:%.c=$(LZK_DIR)/obj/%.o)
LZK_HDRS    := $(wildcard kernels/*.h kernels/*.cuh) base/rope.h base/half.h

$(LZK_DIR)/obj/kernels/%.o: kernels/%.cu $(LZK_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(LZK_NVFLAGS) -Xptxas -v -c $< -o $@ > $@.ptxas 2>&1 || (cat $@.ptxas; exit 1)

$(LZK_DIR)/obj/kernels/%.o: kernels/%.c $(LZK_HDRS)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -march=x86-64-v2 -Wall -Wextra -I. -c $< -o $@

# the attention kernels' driver: 'kernels_check test' against the CPU references, 'kernels_check perf' timed
$(LZK_DIR)/kernels_check: tests/cuda/kernels_check.cu tests/cuda/kernels_test.cuh tests/cuda/kernels_test_group.cuh \
                          tests/decode_group_case.h bench/kernels/kernels_perf.cuh bench/kernels/kernels_perf_group.cuh \
                          $(LZK_OBJS) tests/test.h tests/cuda/cuda_check.h
	$(NVCC) $(LZK_NVFLAGS) $< $(LZK_OBJS) -o $@

# The GPU ingest forward pass and its test against the CPU engine: the CPU
# library (built here) and its third-party libraries linked statically, cuBLAS
# and the C runtime dynamically (the GPU machine has the CUDA libraries only).
LZK_ARCH   := /usr/lib/x86_64-linux-gnu
LZK_STATIC := $(LZK_ARCH)/liblmdb.a $(LZK_ARCH)/libsqlite3.a $(LZK_ARCH)/libzstd.a $(LZK_ARCH)/libcsv.a \
              $(LZK_ARCH)/libjansson.a $(LZK_ARCH)/libpcre2-8.a $(LZK_ARCH)/openblas-pthread/libopenblas.a \
              $(shell $(CC) -print-file-name=libgomp.a)
# the engine's GPU pass: gpu/llama_cuda*.cu (their shared state: gpu/llama_gpu.cuh)
LZK_ENGINE := $(patsubst %.cu,$(LZK_DIR)/obj/%.o,$(wildcard gpu/llama_cuda*.cu))
# lz_engine's GPU table (engine/engine_gpu.c), linked before the library: its lz_engine_gpu_ops
# keeps the library's stand-in (engine/engine_cpu_only.c) out of the link
LZK_ENGINE += $(LZK_DIR)/obj/engine/engine_gpu.o
LZK_LINK   := $(LZK_ENGINE) $(LZK_CU:%.cu=$(LZK_DIR)/obj/%.o) $(BUILD)/liblazy.a $(LZK_STATIC) \
              -lcublas -lpthread -ldl -lm
$(LZK_DIR)/obj/engine/engine_gpu.o: engine/engine_gpu.c $(HEADERS) gpu/llama_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/obj/gpu/%.o: gpu/%.cu gpu/llama_gpu.cuh gpu/llama_cuda.h model/llama.h $(LZK_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(LZK_NVFLAGS) -Xcompiler -fopenmp -c $< -o $@

$(LZK_DIR)/test_llama_cuda $(LZK_DIR)/test_llama_fp8: $(LZK_DIR)/%: tests/cuda/%.cu tests/cuda/llama_cuda_test.h \
                                                    $(LZK_ENGINE) $(LZK_OBJS) $(BUILD)/liblazy.a
	$(NVCC) $(LZK_NVFLAGS) $< $(LZK_LINK) -o $@

# The tools with GPU engines, for the GPU machine (the same static recipe): their code is the CPU
# build's (no #ifdef); linking engine/engine_gpu.c (LZK_ENGINE) is what gives them --gpu
$(LZK_DIR)/obj/lazyingest.o: ingest/lazyingest.c $(HEADERS) gpu/llama_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/obj/lazyquery.o: query/lazyquery.c $(HEADERS) gpu/llama_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/obj/lazyeval.o: tools/lazyeval.c $(HEADERS) gpu/llama_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/lazyingest $(LZK_DIR)/lazyquery $(LZK_DIR)/lazyeval: $(LZK_DIR)/%: $(LZK_DIR)/obj/%.o $(LZK_ENGINE) $(LZK_OBJS) $(BUILD)/liblazy.a
	$(NVCC) $(LZK_NVFLAGS) -Xcompiler -fopenmp $< $(LZK_LINK) -o $@

# lazyserve with --gpu (one request at a time on the GPU engine); libmicrohttpd linked
# dynamically (its static archive needs GnuTLS's): the GPU machine needs libmicrohttpd12
$(LZK_DIR)/obj/lazyserve.o: serve/lazyserve.c $(HEADERS) gpu/llama_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/lazyserve: $(LZK_DIR)/obj/lazyserve.o $(LZK_ENGINE) $(LZK_OBJS) $(BUILD)/liblazy.a
	$(NVCC) $(LZK_NVFLAGS) -Xcompiler -fopenmp $< $(LZK_LINK) -lmicrohttpd -o $@

# lazyserve's shared libraries a GPU machine may lack (libmicrohttpd and everything it loads but the
# C runtime and CUDA), copied beside it for LD_LIBRARY_PATH=$(LZK_DIR)/lib
$(LZK_DIR)/lib/.done: $(LZK_DIR)/lazyserve
	@mkdir -p $(dir $@)
	ldd $< | awk '/=> \// {print $$3}' | \
	  grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcublas|libcublasLt|libcudart)\.so' | \
	  xargs -r -I{} cp -L {} $(dir $@)
	@touch $@

# bench_serve in-process on the GPU engine (bench/gpu_serve.sh) and lazy-mkmodel, for the GPU machine
# (the same static recipe: no HTTP, no third-party shared libraries)
$(LZK_DIR)/obj/bench_serve.o: bench/bench_serve.c $(HEADERS) $(wildcard bench/*.h) gpu/llama_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/obj/lazy-mkmodel.o: tools/lazy-mkmodel.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LZK_DIR)/bench_serve $(LZK_DIR)/lazy-mkmodel: $(LZK_DIR)/%: $(LZK_DIR)/obj/%.o $(LZK_ENGINE) $(LZK_OBJS) $(BUILD)/liblazy.a
	$(NVCC) $(LZK_NVFLAGS) -Xcompiler -fopenmp $< $(LZK_LINK) -o $@

$(LZK_DIR)/test_ops: tests/cuda/test_ops.cu $(LZK_OBJS) $(BUILD)/obj/model/sampler.o tests/test.h tests/cuda/cuda_check.h
	$(NVCC) $(LZK_NVFLAGS) $< $(LZK_OBJS) $(BUILD)/obj/model/sampler.o -lm -o $@

$(LZK_DIR)/test_gemv: tests/cuda/test_gemv.cu $(LZK_OBJS) tests/test.h tests/cuda/cuda_check.h
	$(NVCC) $(LZK_NVFLAGS) $< $(LZK_OBJS) -lcublas -lm -o $@

$(LZK_DIR)/cublas_shapes: bench/kernels/cublas_shapes.cu
	$(NVCC) $(LZK_NVFLAGS) $< -lcublas -o $@

$(LZK_DIR)/argmax_rows: bench/kernels/argmax_rows.cu $(LZK_OBJS) $(BUILD)/obj/model/sampler.o
	$(NVCC) $(LZK_NVFLAGS) $< $(LZK_OBJS) $(BUILD)/obj/model/sampler.o -lm -o $@

# Registers, stack frame and spills of every kernel, demangled, from ptxas -v.
$(LZK_DIR)/ptxas.txt: $(LZK_OBJS)
	@cat $(LZK_DIR)/obj/kernels/*.o.ptxas | grep -E "Compiling entry|registers|spill" | \
	  sed -e 's/ptxas info *: //' > $@.raw
	@if command -v c++filt >/dev/null 2>&1; then c++filt < $@.raw > $@; else cp $@.raw $@; fi
	@rm -f $@.raw

# Build the CUDA programs (needs nvcc, not a GPU); bench/kernels/run_device.sh
# runs the kernels' driver on a GPU machine.
cuda:
	@if [ -z "$(NVCC)" ]; then echo "nvcc not found: no CUDA build"; exit 1; fi
	@$(MAKE) --no-print-directory $(BUILD)/liblazy.a
	@$(MAKE) --no-print-directory $(LZK_DIR)/kernels_check $(LZK_DIR)/ptxas.txt \
	  $(LZK_DIR)/test_llama_cuda $(LZK_DIR)/test_llama_fp8 $(LZK_DIR)/lazyingest $(LZK_DIR)/lazyquery $(LZK_DIR)/lazyserve $(LZK_DIR)/lazyeval $(LZK_DIR)/test_ops \
	  $(LZK_DIR)/test_gemv $(LZK_DIR)/bench_serve $(LZK_DIR)/lazy-mkmodel $(LZK_DIR)/lib/.done \
	  $(LZK_DIR)/cublas_shapes $(LZK_DIR)/argmax_rows

# ---- fuzzing: 'make fuzz' runs every libFuzzer target of fuzz/ for FUZZ_SECONDS, 'make fuzz-ci' briefly ----
# The library is compiled again with clang, ASan + UBSan and libFuzzer's coverage into build/fuzz;
# the seed corpora are generated there by fuzz/make_seeds.c (nothing committed). fuzz/run.sh runs
# the targets FUZZ_JOBS at a time and fails on a crash; without clang's libFuzzer (tools/deps.sh
# installs it) both targets print SKIP and succeed. What each target checks: fuzz/FUZZING.md.
FUZZ_CC         ?= clang
FUZZ_DIR        := build/fuzz
FUZZ_SECONDS    ?= 60
FUZZ_CI_SECONDS ?= 20
FUZZ_JOBS       ?= 2
FUZZ_SAN        := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# (-Wno-pass-failed: clang notes each "omp simd" loop it leaves scalar at -O1)
FUZZ_CFLAGS     := -std=gnu11 -O1 -g -I. -include fuzz/clang_compat.h -fopenmp -Wno-pass-failed $(FUZZ_SAN) $(shell pkg-config --cflags openblas 2>/dev/null)
FUZZ_TARGETS    := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_BINS       := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_OBJS       := $(LIB_SRCS:%.c=$(FUZZ_DIR)/obj/%.o)
# whether $(FUZZ_CC) links a libFuzzer target with OpenMP (evaluated only by the fuzz targets' recipes)
FUZZ_PROBE       = printf '\#include <omp.h>\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return omp_get_max_threads() < 0; }\n' | \
                   $(FUZZ_CC) -x c -fopenmp -fsanitize=fuzzer,address,undefined - -o $(FUZZ_DIR)/probe 2>$(FUZZ_DIR)/probe.log

$(FUZZ_DIR)/obj/%.o: %.c $(HEADERS) fuzz/clang_compat.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/liblazy.a: $(FUZZ_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h $(FUZZ_DIR)/liblazy.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_DIR)/liblazy.a $(LIBS) -o $@

# the seed generator: the project's own writers, built as the tools are
$(FUZZ_DIR)/make_seeds: fuzz/make_seeds.c fuzz/fuzz_common.h $(BUILD)/liblazy.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/liblazy.a $(LIBS) -o $@

$(FUZZ_DIR)/seeds/.done: $(FUZZ_DIR)/make_seeds datasets/demo/corpus.jsonl datasets/demo/questions.json \
                         datasets/tokenizer/tokenizer.json datasets/tokenizer/tokenizer_config.json
	rm -rf $(FUZZ_DIR)/seeds
	$(FUZZ_DIR)/make_seeds $(FUZZ_DIR)/seeds
	@touch $@

# Build the fuzz targets and their seeds (SKIP without libFuzzer).
fuzz-build:
	@mkdir -p $(FUZZ_DIR) && rm -f $(FUZZ_DIR)/probe
	@if $(FUZZ_PROBE); then $(MAKE) --no-print-directory $(FUZZ_BINS) $(FUZZ_DIR)/seeds/.done; \
	else echo "SKIP fuzz: $(FUZZ_CC) cannot link -fsanitize=fuzzer with OpenMP (clang, libclang-rt-dev, libomp-dev: make deps)"; \
	  sed 's/^/  /' $(FUZZ_DIR)/probe.log | head -n 3; fi

# Run every fuzz target for FUZZ_SECONDS (FUZZ_JOBS at a time); fails on a crash.
fuzz: fuzz-build
	@if [ -x $(FUZZ_DIR)/probe ]; then sh fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS); fi

# CI's run: every target for FUZZ_CI_SECONDS.
fuzz-ci: fuzz-build
	@if [ -x $(FUZZ_DIR)/probe ]; then sh fuzz/run.sh $(FUZZ_DIR) $(FUZZ_CI_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS); fi

.PHONY: fuzz fuzz-build fuzz-ci
