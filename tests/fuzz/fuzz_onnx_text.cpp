// ONNX textual syntax (with fusectl's #@ directives): parse, import, shape inference, verify().
#include "fuzz_common.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::fuzz::expectCleanOutcome([&] {
    auto model = fusectl::parseModelText(fusectl::fuzz::bytesOf(data, size), "fuzz.onnxtxt", {});
    if (std::string problem = model->graph->verify(); !problem.empty())
      fusectl::fuzz::fail("parsed graph fails verify(): " + problem);
  });
  return 0;
}
