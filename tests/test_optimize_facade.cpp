// optimize() and planOptimization() (libpasses optimize.h) as library calls,
// without the CLI: a level, a --passes pipeline with --disable, the gates, and request errors.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/optimize.h"

using namespace fusectl;
using namespace fusectl::passes;

namespace {

std::unique_ptr<Model> testModel(const std::string& name) {
  return loadModel(std::string(FUSECTL_SOURCE_DIR) + "/" + name);
}

// Two Identities to remove (I, Y), one that must stay (Z hands graph input X to a graph output)
// and a duplicate initializer (A2 equals A).
std::unique_ptr<Model> identities() {
  return parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
ids (float[1, 4] X) => (float[1, 4] Y, float[1, 4] Z)
<float[4] A = {1, 2, 3, 4}, float[4] A2 = {1, 2, 3, 4}>
{
  I = Identity (X)
  P = Add (I, A)
  Q = Mul (P, A2)
  Y = Identity (Q)
  Z = Identity (X)
})",
                        "ids");
}

size_t histogramCount(const GraphFigures& f, const std::string& op) {
  for (const auto& [name, n] : f.op_histogram)
    if (name == op) return n;
  return 0;
}

std::string usageError(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Usage);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("optimize: a level runs its pipeline, attaches functions and recounts", "[optimize]") {
  auto model = testModel("testdata/models/resnet_mini.onnx");
  OptimizeRequest request;
  request.level = 3;
  const Report report = optimize(*model, request);
  CHECK(report.pipeline == Pipeline::forLevel(3).str());
  CHECK(report.tool_version == FUSECTL_VERSION);
  CHECK(report.expectations.empty());
  CHECK(gatesPassed(report));
  // The same pipeline through the PassManager alone, told not to attach functions, finds the
  // same sites and leaves the fused nodes as the passes wrote them.
  auto plain = testModel("testdata/models/resnet_mini.onnx");
  Report reference;
  PassManagerOptions keep_as_written;
  keep_as_written.attach_functions = false;
  PassManager(keep_as_written).run(*plain, Pipeline::forLevel(3), reference);
  CHECK(report.fusionsByPattern() == reference.fusionsByPattern());
  CHECK(report.fusionsByPattern().at("conv-bn") == 8);
  CHECK(report.after.nodes == reference.after.nodes);
  CHECK(histogramCount(report.after, "BatchNormalization") == 0);
  // Functions define the fused ops, which now carry the spelling of what they compute, and
  // the "after" figures describe the model as it is (as it will be written).
  CHECK_FALSE(model->functions.empty());
  CHECK(histogramCount(reference.after, "fusectl::FusedConv") > 0);
  CHECK(histogramCount(report.after, "fusectl::FusedConv") == 0);
  CHECK(report.after.op_histogram == GraphFigures::of(*model->graph).op_histogram);
}

TEST_CASE("optimize: --passes with --disable, and an empty pipeline", "[optimize]") {
  auto model = identities();
  OptimizeRequest request;
  request.passes = "fixpoint(eliminate-identity,dedup-initializers,eliminate-dead-code)";
  request.disable = {"dedup-initializers"};
  const Report report = optimize(*model, request);
  CHECK(report.pipeline == "fixpoint(eliminate-identity,eliminate-dead-code)");
  CHECK(report.before.nodes == 5);
  CHECK(report.after.nodes == 3);  // I and Y gone, Z kept
  CHECK(model->graph->initializers().size() == 2);  // A2 kept: dedup-initializers was disabled
  CHECK(model->functions.empty());  // no fusectl op, nothing to define

  // Disabling every member drops the group: nothing runs, nothing changes.
  auto untouched = identities();
  const std::string before = modelToText(*untouched);
  request.passes = "fixpoint(dedup-initializers)";
  const Report empty = optimize(*untouched, request);
  CHECK(empty.pipeline.empty());
  CHECK(planOptimization(request).pipeline.empty());
  CHECK(modelToText(*untouched) == before);
}

TEST_CASE("optimize: gates pass and fail as results, bad requests are usage errors",
          "[optimize]") {
  OptimizeRequest request;
  request.passes = "fold-conv-bn";
  request.expect = {"fold-conv-bn=1", "conv-bn=2"};
  request.fail_if_unfused = {"conv-bn"};
  auto model = testModel("testdata/fixtures/conv_bn_relu.onnxtxt");
  const Report report = optimize(*model, request);
  REQUIRE(report.fusions.size() == 1);
  REQUIRE(report.expectations.size() == 3);
  const Expectation& one = report.expectations[0];
  CHECK(one.kind == "expect");
  CHECK(one.passed);
  CHECK(one.found == 1);
  const Expectation& two = report.expectations[1];
  CHECK_FALSE(two.passed);
  CHECK(two.expected == 2);
  CHECK(two.found == 1);
  CHECK(two.detail == "--expect conv-bn=2: 1 fusion site");
  CHECK(report.expectations[2].kind == "fail-if-unfused");
  CHECK(report.expectations[2].passed);
  CHECK_FALSE(gatesPassed(report));

  // A legality condition keeps Z = Identity(X) (graph input to graph output): the gate fails,
  // and asking for it turns on the rejection reasons even when the caller turned them off.
  OptimizeRequest ids;
  ids.passes = "eliminate-identity";
  ids.fail_if_unfused = {"identity"};
  ids.pass_manager.explain = false;
  auto m = identities();
  const Report unfused = optimize(*m, ids);
  REQUIRE(unfused.expectations.size() == 1);
  CHECK_FALSE(unfused.expectations[0].passed);
  CHECK(unfused.expectations[0].found == 1);
  CHECK_THAT(unfused.expectations[0].detail,
             Catch::StartsWith("--fail-if-unfused identity: 1 candidate not fused; first: "
                               "Identity(Z) [keep"));

  // Errors come before the model is touched.
  auto keep = identities();
  const std::string text = modelToText(*keep);
  auto error = [&](const OptimizeRequest& r) {
    return usageError([&] { optimize(*keep, r); });
  };
  OptimizeRequest both;
  both.level = 1;
  both.passes = "eliminate-identity";
  CHECK(error(both) == "give either -O LEVEL or --passes PIPELINE, not both");
  OptimizeRequest typo;
  typo.level = 1;
  typo.expect = {"fold-conv=1"};
  CHECK_THAT(error(typo), Catch::StartsWith("--expect 'fold-conv': no pass or pattern of that "
                                            "name in the pipeline (known: "));
  OptimizeRequest count;
  count.expect = {"fold-conv-bn=many"};
  CHECK(error(count) == "--expect 'fold-conv-bn=many': COUNT 'many' is not a non-negative integer");
  OptimizeRequest standard;
  standard.level = 3;
  standard.pass_manager.standard_only = true;
  standard.fail_if_unfused = {"fuse-epilogue"};
  CHECK(error(standard) == "--fail-if-unfused 'fuse-epilogue': does not run with --emit standard "
                           "(its output needs the fusectl domain), so this check could never "
                           "fail");
  OptimizeRequest print;
  print.pass_manager.print_after = {"all", "no-such-pass"};
  print.passes = "also-no-such-pass";
  CHECK_THAT(error(print), Catch::StartsWith("unknown pass 'no-such-pass'"));  // checked first
  CHECK(modelToText(*keep) == text);
}

TEST_CASE("optimize: a model's clone optimizes without touching the original", "[optimize]") {
  // fusectl profile optimizes a clone whose initializers share the original's bytes: every
  // pass that changes a weight (fold-conv-bn here) must copy it first.
  for (const char* name : {"testdata/models/resnet_mini.onnx", "testdata/models/bert_layer.onnx",
                           "testdata/models/mobilenet_mini.onnx"}) {
    CAPTURE(name);
    std::unique_ptr<Model> original = testModel(name);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> before;
    for (const Value* v : original->graph->initializers()) {
      const Tensor& t = *v->initializer();
      before.emplace_back(v->name(), std::vector<uint8_t>(t.bytes(), t.bytes() + t.byteSize()));
    }
    const size_t nodes_before = original->graph->numNodes();
    std::unique_ptr<Model> copy = original->clone();
    OptimizeRequest request;
    request.level = 3;
    const Report report = optimize(*copy, request);
    CHECK(!report.fusions.empty());
    CHECK(copy->graph->numNodes() < nodes_before);
    CHECK(original->graph->numNodes() == nodes_before);
    REQUIRE(original->graph->initializers().size() == before.size());
    size_t i = 0;
    for (const Value* v : original->graph->initializers()) {
      const Tensor& t = *v->initializer();
      CHECK(v->name() == before[i].first);
      CHECK(std::vector<uint8_t>(t.bytes(), t.bytes() + t.byteSize()) == before[i].second);
      ++i;
    }
    CHECK(original->graph->verify() == "");
  }
}

TEST_CASE("optimize: dedup-initializers compares in full what its samples cannot tell apart",
          "[optimize]") {
  // A, B and C: 4096 floats each. C equals A; B differs from A in one element outside the
  // three 64-byte windows Tensor::sampleHash reads, so the two share a sample hash and only
  // the full comparison keeps B apart. D shares nobody's sample and is left as it is.
  auto values = [](int differ_at, float shift) {
    std::string out;
    for (int i = 0; i < 4096; ++i)
      out += fmt::format("{}{}", i ? ", " : "", i == differ_at ? -1.0f : 0.5f * i + shift);
    return out;
  };
  const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[4096] X) => (float[4096] Y)
<float[4096] A = {{{}}}, float[4096] B = {{{}}}, float[4096] C = {{{}}}, float[4096] D = {{{}}}>
{{
  a = Add (X, A)
  b = Add (a, B)
  c = Add (b, C)
  Y = Add (c, D)
}}
)", values(-1, 0), values(1000, 0), values(-1, 0), values(-1, 7));
  auto model = parseModelText(text, "dedup");
  const Graph& g = *model->graph;
  const Tensor& a = *g.findValue("A")->initializer();
  const Tensor& b = *g.findValue("B")->initializer();
  REQUIRE(a.sampleHash() == b.sampleHash());  // the case this test is about
  REQUIRE_FALSE(a.identical(b));
  CHECK(a.sampleHash() != g.findValue("D")->initializer()->sampleHash());

  OptimizeRequest request;
  request.passes = "dedup-initializers";
  const Report report = optimize(*model, request);
  std::vector<std::string> left;
  for (const Value* v : model->graph->initializers()) left.push_back(v->name());
  CHECK(left == std::vector<std::string>{"A", "B", "D"});
  CHECK(model->graph->findValue("c")->producer()->input(1)->name() == "A");
  CHECK(model->graph->findValue("b")->producer()->input(1)->name() == "B");
}
