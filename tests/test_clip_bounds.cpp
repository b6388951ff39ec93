// Clip's absent bounds (fusectl/graph/clip_bounds.h): the element type's lowest() and max() as
// the operator text defines them (Clip-6's attributes: float's), the same in the Clip kernel, in
// a Clip fused into a convolution's epilogue and in an Elementwise program, so that the fusions
// keep the kernel's result where an input is +-inf. Until 2026-12-06 the kernel and the
// Elementwise program left an absent bound out (inf stayed inf) while the epilogue clamped at
// +-FLT_MAX: fusing a Clip without an upper bound turned a +inf into FLT_MAX.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/half.h"
#include "fusectl/passes/optimize.h"

namespace {
using namespace fusectl;
using namespace fusectl::kernels;
using namespace fusectl::passes;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

HostTensor floats(std::vector<int64_t> dims, const std::vector<float>& v) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == v.size());
  std::memcpy(t.mutableRaw(), v.data(), v.size() * sizeof(float));
  return t;
}

// Y's values, as floats (a float16 Y widened exactly).
std::vector<float> runY(const Model& model, std::vector<NamedTensor> inputs) {
  std::vector<NamedTensor> out = runModel(model, inputs);
  REQUIRE(out.size() == 1);
  const HostTensor& y = out[0].tensor;
  std::vector<float> v(static_cast<size_t>(y.numel()));
  for (int64_t i = 0; i < y.numel(); ++i)
    v[static_cast<size_t>(i)] =
        y.dtype() == DType::Float16 ? halfToFloat(y.data<uint16_t>()[i]) : y.data<float>()[i];
  return v;
}

// Equal bit for bit, NaN with any payload matching NaN.
void requireSameBits(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(std::memcmp(&got[i], &want[i], sizeof(float)) == 0);
    }
  }
}

// The model of `text`, and the same after the pipeline `passes`.
std::pair<std::unique_ptr<Model>, std::unique_ptr<Model>> originalAndOptimized(
    const std::string& text, const std::string& passes) {
  OptimizeRequest request;
  request.passes = passes;
  std::unique_ptr<Model> optimized = parseModelText(text, "model");
  optimize(*optimized, request);
  return {parseModelText(text, "model"), std::move(optimized)};
}

size_t countOps(const Model& m, const std::string& prefix) {
  size_t n = 0;
  for (const Node* node : m.graph->nodes())
    if (node->opType().rfind(prefix, 0) == 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("Clip without a bound clamps at the element type's limits, +-inf included",
          "[kernels][clip]") {
  const std::vector<float> x = {kInf, -kInf, 2.f, kNaN, -3.f};
  SECTION("opset 13, no upper bound") {
    auto m = parseModelText(
        "<ir_version: 8, opset_import: [\"\" : 13]>\n"
        "g (float[5] X) => (float[5] Y)\n<float lo = {-1.0}>\n{\n  Y = Clip (X, lo)\n}\n",
        "clip");
    requireSameBits(runY(*m, {{"X", floats({5}, x)}}), {FLT_MAX, -1.f, 2.f, kNaN, -1.f});
  }
  SECTION("opset 13, no bounds") {
    auto m = parseModelText(
        "<ir_version: 8, opset_import: [\"\" : 13]>\n"
        "g (float[5] X) => (float[5] Y)\n{\n  Y = Clip (X)\n}\n",
        "clip");
    requireSameBits(runY(*m, {{"X", floats({5}, x)}}), {FLT_MAX, -FLT_MAX, 2.f, kNaN, -3.f});
  }
  SECTION("opset 6, no attributes: float's limits") {
    auto m = parseModelText(
        "<ir_version: 3, opset_import: [\"\" : 6]>\n"
        "g (float[5] X) => (float[5] Y)\n{\n  Y = Clip <max = 1.5> (X)\n}\n",
        "clip");
    requireSameBits(runY(*m, {{"X", floats({5}, x)}}), {1.5f, -FLT_MAX, 1.5f, kNaN, -3.f});
  }
  SECTION("opset 13, float16: its own limits, 65504") {
    auto m = parseModelText(
        "<ir_version: 8, opset_import: [\"\" : 13]>\n"
        "g (float16[3] X) => (float16[3] Y)\n{\n  Y = Clip (X)\n}\n",
        "clip");
    HostTensor h(DType::Float16, {3});
    const float hv[] = {kInf, -kInf, 2.f};
    for (int i = 0; i < 3; ++i) h.mutableData<uint16_t>()[i] = floatToHalf(hv[i]);
    requireSameBits(runY(*m, {{"X", std::move(h)}}), {65504.f, -65504.f, 2.f});
  }
}

TEST_CASE("A Clip fused into a convolution or an Elementwise program keeps the kernel's bounds",
          "[kernels][clip][fusion]") {
  // Inputs of +-1e30 whose products overflow to +-inf before a Clip without an upper bound.
  struct Case {
    const char* passes;
    const char* fused_op;
    std::string text;
    std::vector<int64_t> dims;
    std::vector<float> x;
    size_t spot;       // an output that was +inf before its Clip
    float spot_value;  // and what the Clip, and whatever follows it, make of it
  };
  const Case cases[] = {
      {"fuse-epilogue", "FusedConv",
       "<ir_version: 8, opset_import: [\"\" : 13]>\n"
       "g (float[1, 1, 2, 2] X) => (float[1, 2, 2, 2] Y)\n"
       "<float[2, 1, 1, 1] W = {1e30, -1e30}, float[2] B = {0.0, 0.0}, float lo = {-5.0}>\n"
       "{\n  C = Conv (X, W, B)\n  Y = Clip (C, lo)\n}\n",
       {1, 1, 2, 2}, {1e30f, -1e30f, 1.f, kNaN}, 5, FLT_MAX},  // -1e30 * -1e30 = +inf
      {"fuse-elementwise", "Elementwise",
       "<ir_version: 8, opset_import: [\"\" : 13]>\n"
       "g (float[6] X) => (float[6] Y)\n<float lo = {-5.0}>\n"
       "{\n  A = Mul (X, X)\n  B = Clip (A)\n  C = Neg (B)\n  D = Clip (C, lo)\n"
       "  Y = Abs (D)\n}\n",
       {6}, {1e30f, -1e30f, 2.f, kNaN, kInf, 0.5f}, 0, 5.f},  // inf, FLT_MAX, -FLT_MAX, -5, 5
  };
  for (const Case& c : cases) {
    INFO(c.passes << "\n" << c.text);
    auto [original, fused] = originalAndOptimized(c.text, c.passes);
    REQUIRE(countOps(*fused, "Clip") == 0);
    REQUIRE(countOps(*fused, c.fused_op) == 1);
    const std::vector<float> want = runY(*original, {{"X", floats(c.dims, c.x)}});
    CHECK(want[c.spot] == c.spot_value);
    requireSameBits(runY(*fused, {{"X", floats(c.dims, c.x)}}), want);
  }
}
