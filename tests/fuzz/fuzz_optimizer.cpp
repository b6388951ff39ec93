// The optimizer on whatever loads: -O3 on the model, then Graph::verify() and a save, as
// `fusectl optimize` does. A model the loader refuses is not a finding here.
#include "fuzz_common.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/optimize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<fusectl::Model> model;
  try {
    model = fusectl::parseModelBinary(fusectl::fuzz::bytesOf(data, size), "fuzz.onnx",
                                      "/nonexistent-fuzz-dir", {});
  } catch (const fusectl::Error&) {
    return 0;
  }
  fusectl::fuzz::expectCleanOutcome([&] {
    fusectl::passes::OptimizeRequest request;
    request.level = 3;
    fusectl::passes::optimize(*model, request);
    if (std::string problem = model->graph->verify(); !problem.empty())
      fusectl::fuzz::fail("optimized graph fails verify(): " + problem);
    fusectl::modelToBinary(*model);
  });
  return 0;
}
