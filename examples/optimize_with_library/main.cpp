// Optimizes an ONNX model at -O3 with the fusectl library, as `fusectl optimize -O3` does:
//   optimize_with_library MODEL OUTPUT
#include <cstdio>
#include <exception>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/pipeline.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL OUTPUT\n", argv[0]);
    return 2;
  }
  try {
    std::unique_ptr<fusectl::Model> model = fusectl::loadModel(argv[1]);

    fusectl::passes::Report report;
    fusectl::passes::PassManager().run(*model, fusectl::passes::Pipeline::forLevel(3), report);

    fusectl::saveModel(*model, argv[2]);
    std::printf("%s: %zu nodes -> %zu, %zu fusions; wrote %s\n", argv[1], report.before.nodes,
                report.after.nodes, report.fusions.size(), argv[2]);
  } catch (const std::exception& e) {  // fusectl::Error says what failed, naming the file
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
