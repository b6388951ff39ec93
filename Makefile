# Entry points: `make demo` and `make test` each install what they need, build, then run.
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
# A compiler cache, when one is installed, makes rebuilds of unchanged files free. Optional:
# CI's clean machine has none and builds everything.
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CUDA_COMPILER_LAUNCHER=$(CCACHE)
endif
# onnxruntime-node, the reference runtime of the ORT tests, goes here (scripts/install-ort.sh).
ORT_DIR ?= $(abspath $(BUILD_DIR))/ort
DEMO_MODEL ?= testdata/models/resnet_mini.onnx
DEMO_SHAPE ?= input=1x3x32x32

.PHONY: all deps ort browser configure build demo test clean

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

clean:
	rm -rf $(BUILD_DIR)
