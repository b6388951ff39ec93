// The executor on whatever loads: a model the loader accepts runs on seeded inputs, as
// `fusectl run` runs it. Kernels check what a file can get wrong (indices, shapes, attribute
// values, sizes) and refuse with fusectl::Error; a crash, a sanitizer report, a leak or another
// exception is the finding. The limits keep each input quick under ASan: tensors of at most
// 1 MiB (loader and executor), inputs of at most 2^18 elements, and no Loop or Scan (a trip
// count from the file is a slow model, not a fault; If bodies still run).
#include "fuzz_common.h"
#include "fuzz_models.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace {

constexpr int64_t kMaxInputElements = int64_t{1} << 18;

bool isLoop(const fusectl::Node& n) { return n.opType() == "Loop" || n.opType() == "Scan"; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::LoadOptions load;
  load.infer_shapes = false;  // as `fusectl run` loads
  load.prefault_weights = false;
  load.max_tensor_bytes = fusectl::fuzz::kRunMaxTensorBytes;
  std::unique_ptr<fusectl::Model> model;
  try {
    model = fusectl::parseModelBinary(fusectl::fuzz::bytesOf(data, size), "fuzz.onnx",
                                      "/nonexistent-fuzz-dir", load);
  } catch (const fusectl::Error&) {
    return 0;
  }
  if (fusectl::fuzz::anyNode(*model->graph, isLoop) ||
      !fusectl::fuzz::inputsAtMost(*model->graph, kMaxInputElements)) {
    return 0;
  }
  fusectl::fuzz::expectCleanOutcome([&] {
    const std::vector<fusectl::kernels::NamedTensor> inputs =
        fusectl::kernels::makeRandomInputs(*model->graph, 1);
    fusectl::kernels::ExecutorOptions options;
    options.max_tensor_bytes = fusectl::fuzz::kRunMaxTensorBytes;
    fusectl::kernels::Executor executor(*model, options);
    executor.run(inputs);
  });
  return 0;
}
