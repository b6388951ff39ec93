// The executor on whatever loads: a model the loader accepts runs on seeded inputs, as
// `fusectl run` runs it. Kernels check what a file can get wrong (indices, shapes, attribute
// values, sizes) and refuse with fusectl::Error; a crash, a sanitizer report, a leak or another
// exception is the finding. The limits keep each input quick under ASan: tensors of at most
// 1 MiB (loader and executor), inputs of at most 2^18 elements, and no Loop or Scan (a trip
// count from the file is a slow model, not a fault; If bodies still run).
#include "fuzz_common.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace {

constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 20;
constexpr int64_t kMaxInputElements = int64_t{1} << 18;

bool hasLoops(const fusectl::Graph& graph) {
  for (const fusectl::Node* n : graph.nodes())
    if (n->opType() == "Loop" || n->opType() == "Scan") return true;
  for (const fusectl::Node* owner : graph.subgraphOwners()) {
    bool found = false;
    owner->forEachSubgraph([&](const fusectl::Graph& body) { found = found || hasLoops(body); });
    if (found) return true;
  }
  return false;
}

// Inputs run would seed, unless one is too large to be quick (or its dims cannot be made).
bool inputsSmall(const fusectl::Graph& graph) {
  for (const fusectl::Value* input : graph.inputs()) {
    if (input->isInitializer()) continue;
    std::vector<int64_t> dims;
    try {
      dims = fusectl::kernels::concreteInputDims(*input);
    } catch (const fusectl::Error&) {
      return false;
    }
    int64_t elements = 1;
    for (int64_t d : dims) {
      if (d < 0 || (d > 0 && elements > kMaxInputElements / d)) return false;
      elements *= d;
    }
    if (elements > kMaxInputElements) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::LoadOptions load;
  load.infer_shapes = false;  // as `fusectl run` loads
  load.prefault_weights = false;
  load.max_tensor_bytes = kMaxTensorBytes;
  std::unique_ptr<fusectl::Model> model;
  try {
    model = fusectl::parseModelBinary(fusectl::fuzz::bytesOf(data, size), "fuzz.onnx",
                                      "/nonexistent-fuzz-dir", load);
  } catch (const fusectl::Error&) {
    return 0;
  }
  if (hasLoops(*model->graph) || !inputsSmall(*model->graph)) return 0;
  fusectl::fuzz::expectCleanOutcome([&] {
    const std::vector<fusectl::kernels::NamedTensor> inputs =
        fusectl::kernels::makeRandomInputs(*model->graph, 1);
    fusectl::kernels::ExecutorOptions options;
    options.max_tensor_bytes = kMaxTensorBytes;
    fusectl::kernels::Executor executor(*model, options);
    executor.run(inputs);
  });
  return 0;
}
