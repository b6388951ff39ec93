# Entry points: `make demo` and `make test` each install what they need, build, then run.
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Line tables only (-g1), not full debug info: stack traces and profilers still name files and
# lines, and the compile, most of CI's time, is about a third shorter than with -g (a test file:
# 21 s at -O2 -g, 14.6 s at -O2 -g1, 14.1 s at -O2). For a debugger's view of locals:
# make CMAKE_FLAGS=-DCMAKE_BUILD_TYPE=Debug.
# The test binary and the CLI, which drive the libraries and do little work of their own, at
# -O1 (FUSECTL_DRIVER_CXX_FLAGS): a fifth less compile time for their 86 files, 40% of the
# build's (test_cli_optimize.cpp 12.3-13.6 -> 8.7-10.3 s); libraries, kernels and benchmarks
# keep -O2.
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DFUSECTL_DRIVER_CXX_FLAGS=-O1
# A compiler cache, when one is installed, makes rebuilds of unchanged files free. Optional:
# CI's clean machine has none and builds everything.
CCACHE := $(shell command -v ccache 2>/dev/null)
# ccache does not cache a compile that reads a precompiled header (without sloppiness settings
# it runs the compiler every time), so with ccache the headers are not precompiled (FUSECTL_PCH).
ifneq ($(CCACHE),)
CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CUDA_COMPILER_LAUNCHER=$(CCACHE) \
    -DFUSECTL_PCH=OFF
endif
# CUDA_ARCHITECTURES=LIST sets CMAKE_CUDA_ARCHITECTURES (empty: CMakeLists.txt's default,
# Hopper machine code and Ampere PTX). CI, which has no GPU and only needs the CUDA sources to
# compile, builds one (.ci/run): nvcc takes half the time (attention.cu: 51 -> 27 s).
CUDA_ARCHITECTURES ?=
ifneq ($(CUDA_ARCHITECTURES),)
CMAKE_FLAGS += -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHITECTURES)
endif
# onnxruntime-node, the reference runtime of the ORT tests, goes here (scripts/install-ort.sh).
ORT_DIR ?= $(abspath $(BUILD_DIR))/ort
DEMO_MODEL ?= testdata/models/resnet_mini.onnx
DEMO_SHAPE ?= input=1x3x32x32

.PHONY: all deps ort browser configure build demo test clean sanitize-build test-sanitize test-tsan \
    fuzz fuzz-build

all: build

deps:
	bash scripts/install-deps.sh

# Without network access the install fails; the ORT tests then report themselves skipped and
# everything else still runs, so a failure here is a warning, not a stop.
ort: deps
	bash scripts/install-ort.sh $(ORT_DIR) || echo "warning: onnxruntime-node not installed; the ORT tests will be skipped"

# chromium, for the HTML report's real-browser test: best effort as well; without it that test
# reports itself skipped. Installing it took 135 s here (apt, 16 packages, ~120 MB).
browser: deps
	bash scripts/install-browser.sh || echo "warning: chromium not installed; the browser test of the HTML report will be skipped"

configure: deps
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) -DFUSECTL_ORT_DIR=$(ORT_DIR)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Optimizes the bundled ResNet-style model at -O3 (batch fixed to 1, so that the activation
# bytes fusion saves can be counted), checks it against the original on seeded inputs, prints
# the before/after table and writes the report, JSON and HTML (fusectl report's page).
demo: build
	@mkdir -p $(BUILD_DIR)/demo
	$(BUILD_DIR)/apps/fusectl optimize $(DEMO_MODEL) -o $(BUILD_DIR)/demo/resnet_mini.opt.onnx \
	    -O3 $(if $(DEMO_SHAPE),--shape $(DEMO_SHAPE)) --verify \
	    --report $(BUILD_DIR)/demo/fusion.json --html $(BUILD_DIR)/demo/fusion.html --table
	@echo "report: $(BUILD_DIR)/demo/fusion.json, $(BUILD_DIR)/demo/fusion.html; what changed:" \
	    "$(BUILD_DIR)/apps/fusectl diff $(DEMO_MODEL) $(BUILD_DIR)/demo/resnet_mini.opt.onnx"

test: build ort browser
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# ---- Sanitizers and fuzzing (docs/hardening.md) ----
# The launcher flags only, not the build type: each sanitizer build sets its own.
LAUNCHER_FLAGS := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DFUSECTL_PCH=OFF)
# Any report fails the test that triggered it; leaks are reports too. A failed allocation
# returns null (std::bad_alloc) as it does without ASan, so the tests of fusectl's
# out-of-memory refusals see what a user would.
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# One clang build serves both the sanitizer suite and the fuzz targets, so CI compiles the
# sources twice (this and `make test`), not three times: the libraries, the CLI and the tests
# are compiled with -fsanitize=address,undefined,fuzzer-no-link; the Catch2 tests and the CLI
# link ASan and UBSan, the fuzz targets libFuzzer too (CMake option FUSECTL_FUZZ).
SAN_DIR ?= build-san
# -O1 with line tables only, as ASan's documentation suggests: stack traces keep file and line,
# and the instrumented compile, the longest stage of CI, costs less than at -O2 -g.
SAN_OPT_FLAGS ?= -O1 -gline-tables-only -DNDEBUG
TSAN_DIR ?= build-tsan
# Tests the ASan+UBSan run leaves out: an extended regular expression over their names (grep -E
# and CTest read it alike; empty: the whole suite, which is what `make test-sanitize` runs).
# Timings are in docs/hardening.md.
SANITIZE_EXCLUDE ?=
# 1: the Catch2 tests run in a few processes, 2*JOBS plus one per long test
# (tests/run_test_shards.sh), the other CTest tests under CTest; 0: every test in a process of its
# own under CTest, which takes longer (each instrumented process spends about 0.25 s starting and
# checking for leaks) but names each failing test alone.
SANITIZE_SHARDS ?= 1

sanitize-build: deps ort
	CC=clang CXX=clang++ cmake -S . -B $(SAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT_FLAGS)" -DFUSECTL_ENABLE_CUDA=OFF -DFUSECTL_BUILD_BENCH=OFF -DFUSECTL_FUZZ=ON $(LAUNCHER_FLAGS) \
	    -DFUSECTL_ORT_DIR=$(ORT_DIR)
	cmake --build $(SAN_DIR) -j $(JOBS)
fuzz-build: sanitize-build

# The sweep tests (tests/sweep_harness.h) run every Nth of their 169,654 models under the
# sanitizers; `make test` runs them all. Every 4th took 1,467 s of the two cores' time
# instrumented on 7 December 2026 (two thirds of the sanitizer stage, CI 3,728 s against its
# 2,700 s target), every 16th 380 s; every 64th, some 2,650 models, keeps CI under its target.
# Set it to 1 to run them all (docs/hardening.md).
SANITIZE_SWEEP_STRIDE ?= 64

# The CTest suite under AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer.
SANITIZE_RUN_ENV := $(SANITIZER_ENV) FUSECTL_SWEEP_STRIDE=$(SANITIZE_SWEEP_STRIDE)
SANITIZE_CTEST_EXCLUDE := $(if $(SANITIZE_EXCLUDE),-E '$(SANITIZE_EXCLUDE)')
test-sanitize: sanitize-build
ifeq ($(SANITIZE_SHARDS),1)
	cd $(SAN_DIR) && $(SANITIZE_RUN_ENV) ctest --output-on-failure -j $(JOBS) -LE '^catch$$' \
	    $(SANITIZE_CTEST_EXCLUDE)
	$(SANITIZE_RUN_ENV) bash tests/run_test_shards.sh $(SAN_DIR)/tests/fusectl_tests $(JOBS) \
	    '$(SANITIZE_EXCLUDE)'
else
	cd $(SAN_DIR) && $(SANITIZE_RUN_ENV) ctest --output-on-failure -j $(JOBS) $(SANITIZE_CTEST_EXCLUDE)
endif

# ThreadSanitizer on what runs threads: the worker pool and executor tests, and the CLI
# executing every testdata model with 2 and with 8 threads per kernel. A gcc build of its own
# (TSan cannot share a build with ASan); CI leaves it out.
TSAN_MODELS := $(wildcard testdata/models/*.onnx)
test-tsan: deps
	cmake -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSECTL_ENABLE_CUDA=OFF \
	    -DFUSECTL_BUILD_BENCH=OFF $(LAUNCHER_FLAGS) -DFUSECTL_ORT_DIR=$(ORT_DIR) \
	    -DFUSECTL_SANITIZE=thread
	cmake --build $(TSAN_DIR) -j $(JOBS) --target fusectl fusectl_tests
	$(SANITIZER_ENV) $(TSAN_DIR)/tests/fusectl_tests "[threads],executor:*"
	for threads in 2 8; do for m in $(TSAN_MODELS); do \
	  $(SANITIZER_ENV) $(TSAN_DIR)/apps/fusectl run $$m --threads $$threads >/dev/null || exit 1; \
	done; done

# libFuzzer targets (tests/fuzz/), from the sanitizer build; each runs FUZZ_SECONDS on a corpus
# seeded from the testdata and ../shared/onnx-node-tests{,-full} (when present). Any crash, leak, UB
# report or timeout fails the run; the input that caused it is left in $(SAN_DIR)/findings/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := fuzz_onnx_loader fuzz_onnx_text fuzz_pattern fuzz_pipeline fuzz_npy fuzz_tensor_pb \
    fuzz_optimizer fuzz_executor fuzz_optimized_outputs
fuzz: sanitize-build
	bash tests/fuzz/run_fuzzers.sh $(SAN_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD_DIR)
