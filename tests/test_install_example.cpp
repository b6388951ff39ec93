// The model examples/optimize_with_library wrote with the installed library, checked as other
// tools see it. tests/install_example.sh builds and runs the example, then runs these with
// FUSECTL_EXAMPLE_ORIGINAL (the model it read) and FUSECTL_EXAMPLE_OUTPUT (the model it wrote);
// hidden, since without the script there is nothing to check.
//  - "[install_example_checker]": onnx's full checker accepts the output, and every fusectl op
//    in it comes with the ONNX function that defines it, although no CLI attached them;
//  - "[install_example_ort]": ONNX Runtime runs the original and the output on the same seeded
//    inputs, and the outputs agree.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "onnx_checker.h"
#include "ort_runner.h"
#include "shell_util.h"
#include "test_files.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/kernels/executor.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

std::string exampleModel(const char* variable) {
  const char* path = std::getenv(variable);
  if (!path || !*path) FAIL(variable << " is not set: tests/install_example.sh runs this test");
  return path;
}

}  // namespace

TEST_CASE("installed example: onnx's full checker accepts the -O3 model the library wrote",
          "[.][install_example_checker]") {
  const std::string output = exampleModel("FUSECTL_EXAMPLE_OUTPUT");
  INFO(output);
  CHECK(fusectl::test::onnxFullCheckProblem(output) == "");

  // The checker passes over a node of a domain it has no schemas for, so it would accept a
  // fusectl op without its function too: each one must find its definition in the model.
  onnx::ModelProto model;
  std::ifstream in(output, std::ios::binary);
  REQUIRE(model.ParseFromIstream(&in));
  std::set<std::pair<std::string, std::string>> functions;
  for (const onnx::FunctionProto& f : model.functions()) functions.insert({f.domain(), f.name()});
  int fusectl_nodes = 0;
  for (const onnx::NodeProto& n : model.graph().node()) {
    if (n.domain().empty() || n.domain() == "ai.onnx" || n.domain() == "ai.onnx.ml") continue;
    ++fusectl_nodes;
    INFO(n.domain() << "::" << n.op_type() << " (node '" << n.name() << "')");
    CHECK(functions.count({n.domain(), n.op_type()}) == 1);
  }
  CHECK(fusectl_nodes > 0);  // -O3 fused resnet_mini's Convs: the functions were needed
}

TEST_CASE("installed example: ONNX Runtime gives the -O3 model the original's outputs",
          "[.][install_example_ort]") {
  const std::string original_path = exampleModel("FUSECTL_EXAMPLE_ORIGINAL");
  const std::string output_path = exampleModel("FUSECTL_EXAMPLE_OUTPUT");
  const fusectl::test::OrtSetup ort = fusectl::test::findOrtSetup();
  INFO(ort.skip_reason);
  REQUIRE(ort.found);  // the script checked before running this

  const std::unique_ptr<Model> original = loadModel(original_path);
  std::vector<std::string> outputs;
  for (const Value* out : original->graph->outputs()) outputs.push_back(out->name());
  const std::vector<NamedTensor> inputs = makeRandomInputs(*original->graph, 7);
  fusectl::testing::TempDir dir("install-example-ort");
  const std::vector<NamedTensor> expected =
      fusectl::test::runOrt(ort, original_path, inputs, outputs, dir.path / "original");
  const std::vector<NamedTensor> actual =
      fusectl::test::runOrt(ort, output_path, inputs, outputs, dir.path / "optimized");

  // Folding BatchNormalization into the weights and fusing change the rounding only: the
  // default tolerance (atol 1e-5, rtol 1e-4) is ~70x the error measured on resnet_mini.
  for (size_t i = 0; i < outputs.size(); ++i) {
    const CompareResult r = compareTensors(actual[i].tensor, expected[i].tensor);
    WARN("output '" << outputs[i] << "': " << r.describe(expected[i].tensor.dims())
                    << " (max abs error " << r.max_abs_error << ")");
    CHECK(r.passed);
  }
}
