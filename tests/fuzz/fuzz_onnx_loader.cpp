// Binary ONNX models: import, shape inference and Graph::verify() (what every command does on
// load). External data resolves against a folder that does not exist, so a fuzzed location can
// only be refused.
#include "fuzz_common.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::fuzz::expectCleanOutcome([&] {
    auto model = fusectl::parseModelBinary(fusectl::fuzz::bytesOf(data, size), "fuzz.onnx",
                                           "/nonexistent-fuzz-dir", {});
    if (std::string problem = model->graph->verify(); !problem.empty())
      fusectl::fuzz::fail("loaded graph fails verify(): " + problem);
  });
  return 0;
}
