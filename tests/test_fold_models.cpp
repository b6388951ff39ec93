// Conv+BN folding on the bundled CNNs (testdata/models/resnet_mini.onnx, mobilenet_mini.onnx):
// `fold-conv-bn,fuse-bias-add` must leave no BatchNormalization behind and keep the outputs,
// compared through the CPU executor on seeded inputs relative to the output's magnitude.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/pipeline.h"

using namespace fusectl;
using namespace fusectl::passes;

namespace {

size_t countOps(const Graph& g, const std::string& op) { return g.nodesOfType(op).size(); }

// max |a - e| / max |e| over every output: the fold's rounding error relative to the output's
// scale (elementwise relative error is meaningless near zero crossings).
double relativeError(const Model& before, const Model& after, uint64_t seed) {
  using namespace fusectl::kernels;
  std::vector<NamedTensor> inputs = makeRandomInputs(*before.graph, seed);
  std::vector<NamedTensor> expected = runModel(before, inputs);
  std::vector<NamedTensor> actual = runModel(after, inputs);
  REQUIRE(expected.size() == actual.size());
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const HostTensor& e = expected[i].tensor;
    const HostTensor& a = actual[i].tensor;
    REQUIRE(e.dims() == a.dims());
    double diff = 0, scale = 0;
    for (int64_t k = 0; k < e.numel(); ++k) {
      const double ev = elementAsDouble(e, k), av = elementAsDouble(a, k);
      diff = std::max(diff, std::fabs(av - ev));
      scale = std::max(scale, std::fabs(ev));
    }
    INFO("output " << expected[i].name << ": max abs diff " << diff << ", max |expected| "
                   << scale);
    REQUIRE(scale > 0);  // an all-zero output would make the comparison vacuous
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace

TEST_CASE("fold-conv-bn,fuse-bias-add removes every BatchNormalization from the CNN models",
          "[passes][fold-conv-bn]") {
  const std::string model = GENERATE(as<std::string>{}, "resnet_mini", "mobilenet_mini");
  const std::string path = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + model + ".onnx";
  INFO(path);
  std::unique_ptr<Model> before = loadModel(path);
  std::unique_ptr<Model> after = loadModel(path);
  const size_t bns = countOps(*before->graph, "BatchNormalization");
  const size_t convs = countOps(*before->graph, "Conv");
  REQUIRE(bns > 0);  // the models exist to exercise this fold

  Report report;
  PassManagerOptions options;
  options.verify_each = true;
  REQUIRE(PassManager(options).run(*after, Pipeline::parse("fold-conv-bn,fuse-bias-add"), report));

  CHECK(countOps(*after->graph, "BatchNormalization") == 0);
  CHECK(countOps(*after->graph, "Conv") == convs);
  CHECK(after->graph->numNodes() <= before->graph->numNodes() - bns);
  CHECK(report.fusions.size() >= bns);
  // Each folded W is a recipe over the loaded bytes until something reads it (Buffer::deferred):
  // the fold allocates no weight memory, and --verify-each's serializations did not keep any.
  size_t pending = 0;
  for (Node* conv : after->graph->nodesOfType("Conv"))
    pending += conv->input(1)->initializer()->buffer().isPending() ? 1 : 0;
  CHECK(pending == bns);
  for (uint64_t seed : {1u, 2u}) {
    const double err = relativeError(*before, *after, seed);
    INFO("seed " << seed << ": max abs diff / max |output| = " << err);
    CHECK(err <= 1e-5);
  }
}
