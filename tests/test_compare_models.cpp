// compareModels and checkSameInterface (libkernels compare.h) as library calls: two models that
// agree, and a copy with one deliberately perturbed initializer element, checked against
// figures computed here from the inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/half.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

// A model in ONNX text from its signature (with initializers) and its nodes.
std::unique_ptr<Model> model(const std::string& signature, const std::string& nodes) {
  return parseModelText("<ir_version: 8, opset_import: [\"\" : 13]>\n" + signature + "\n{\n" +
                            nodes + "\n}\n",
                        "m");
}

// Y = X * W element-wise and Z = Relu(X); `w` is W's text.
std::unique_ptr<Model> scaleModel(const std::string& w) {
  return model("scale (float[1, 4] X) => (float[1, 4] Y, float[1, 4] Z)\n<float[4] W = {" + w +
                   "}>",
               "Y = Mul (X, W)\nZ = Relu (X)");
}

const std::vector<double> kW = {0.5, -1.0, 2.0, 0.25};
const std::string kWText = "0.5, -1.0, 2.0, 0.25";
const std::string kPerturbedText = "0.5, -1.0, 2.5, 0.25";  // W[2] + 0.5

std::vector<NamedTensor> inputX(const std::vector<float>& x) {
  HostTensor t(DType::Float, {1, 4});
  std::copy(x.begin(), x.end(), t.mutableData<float>());
  return {{"X", std::move(t)}};
}

// The figures compareTensors promises, computed here for Y = x * w (B) against x * kW (A).
struct Expected {
  double max_abs = 0, max_rel = 0, cosine = 1;
  int64_t mismatches = 0;
};

Expected expectedFor(const std::vector<double>& x, const std::vector<double>& w_b,
                     const Tolerance& tol) {
  Expected e;
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = x[i] * kW[i], b = x[i] * w_b[i];
    const double diff = std::fabs(b - a);
    e.max_abs = std::max(e.max_abs, diff);
    if (a != 0) e.max_rel = std::max(e.max_rel, diff / std::fabs(a));
    if (diff > tol.atol + tol.rtol * std::fabs(a)) ++e.mismatches;
    dot += a * b;
    na += a * a;
    nb += b * b;
  }
  e.cosine = dot / std::sqrt(na * nb);
  return e;
}

}  // namespace

TEST_CASE("compareModels: two models that compute the same agree on every seeded run",
          "[compare]") {
  auto a = scaleModel(kWText);
  // The same function written another way: commuted operands, Relu as Max with zero.
  auto b = model("scale2 (float[1, 4] X) => (float[1, 4] Z, float[1, 4] Y)\n"
                 "<float[4] W = {" + kWText + "}, float[1] zero = {0.0}>",
                 "Y = Mul (W, X)\nZ = Max (X, zero)");
  checkSameInterface(*a->graph, *b->graph, "a", "b");  // does not throw
  ComparisonInputs inputs;
  inputs.seed = 3;
  inputs.runs = 3;
  Tolerance exact;
  exact.atol = 0;
  exact.rtol = 0;
  exact.min_cosine = 1 - 1e-12;  // equal vectors, up to the rounding of the cosine's sqrt
  const Comparison c = compareModels(*a, *b, inputs, exact);
  CHECK(c.passed);
  CHECK(c.runs == 3);
  REQUIRE(c.outputs.size() == 2);
  CHECK(c.outputs[0].name == "Y");  // A's order, whatever B's
  CHECK(c.outputs[1].name == "Z");
  for (const OutputComparison& o : c.outputs) {
    CHECK(o.passed);
    CHECK(o.dtype == DType::Float);
    CHECK(o.dims == std::vector<int64_t>{1, 4});
    CHECK(o.max_abs_error == 0);
    CHECK(o.mismatches == 0);
    CHECK(o.failed_run == -1);
    CHECK(o.detail.empty());
  }
}

TEST_CASE("compareModels: a perturbed initializer, figures against a hand computation",
          "[compare]") {
  auto a = scaleModel(kWText);
  auto b = scaleModel(kPerturbedText);
  const std::vector<double> w_b = {0.5, -1.0, 2.5, 0.25};
  Tolerance tol;  // atol 1e-5, rtol 1e-4

  SECTION("given inputs: the perturbation shows only where X[2] is not zero") {
    ComparisonInputs inputs;
    inputs.given = {inputX({1, 2, 0, -4}), inputX({1, 2, 3, -4})};
    const Comparison c = compareModels(*a, *b, inputs, tol);
    CHECK_FALSE(c.passed);
    CHECK(c.runs == 2);
    REQUIRE(c.outputs.size() == 2);
    const OutputComparison& y = c.outputs[0];
    const Expected e = expectedFor({1, 2, 3, -4}, w_b, tol);  // run 0 has no error at all
    CHECK(e.max_abs == 1.5);
    CHECK_FALSE(y.passed);
    CHECK(y.max_abs_error == Approx(e.max_abs));
    CHECK(y.max_rel_error == Approx(e.max_rel));  // 1.5 / 6
    CHECK(y.cosine == Approx(e.cosine));
    CHECK(y.mismatches == e.mismatches);
    CHECK(y.mismatches == 1);
    CHECK(y.failed_run == 1);
    CHECK(y.failure.first_mismatch == 2);
    CHECK(y.failure.first_actual == 7.5);
    CHECK(y.failure.first_expected == 6);
    CHECK_THAT(y.detail, Catch::StartsWith("run 1: 1 of 4 elements differ (first at [0,2]: 7.5 "
                                           "vs 6); max abs 1.5, max rel 0.25, cosine 0.9"));
    const OutputComparison& z = c.outputs[1];  // Relu does not read W
    CHECK(z.passed);
    CHECK(z.max_abs_error == 0);
    CHECK(z.cosine == Approx(1));
  }

  SECTION("seeded inputs: the figures of makeRandomInputs' data") {
    ComparisonInputs inputs;
    inputs.seed = 5;
    const Comparison c = compareModels(*a, *b, inputs, tol);
    const std::vector<NamedTensor> x = makeRandomInputs(*a->graph, 5);
    REQUIRE(x.size() == 1);
    const float* px = x[0].tensor.data<float>();
    const Expected e = expectedFor({px[0], px[1], px[2], px[3]}, w_b, tol);
    REQUIRE(e.max_abs > 0);  // the seed does not happen to zero X[2]
    const OutputComparison& y = c.outputs[0];
    CHECK(c.runs == 1);
    CHECK(y.passed == (e.mismatches == 0));
    CHECK(y.max_abs_error == Approx(e.max_abs));
    CHECK(y.max_rel_error == Approx(e.max_rel));
    CHECK(y.cosine == Approx(e.cosine));
    CHECK(y.mismatches == e.mismatches);
    CHECK(y.detail.rfind("run", 0) == std::string::npos);  // one run: no run prefix

    // A loose enough tolerance accepts the same difference.
    Tolerance loose;
    loose.atol = e.max_abs;
    loose.rtol = 0;
    CHECK(compareModels(*a, *b, inputs, loose).passed);
  }
}

TEST_CASE("compareModels: outputs B lacks, and checkSameInterface names the models", "[compare]") {
  auto a = scaleModel(kWText);
  auto only_y =
      model("y_only (float[1, 4] X) => (float[1, 4] Y)\n<float[4] W = {" + kWText + "}>",
            "Y = Mul (X, W)");
  const Comparison c = compareModels(*a, *only_y, ComparisonInputs{}, Tolerance{});
  CHECK_FALSE(c.passed);
  CHECK(c.outputs[0].passed);
  CHECK(c.outputs[1].missing);
  CHECK_FALSE(c.outputs[1].passed);
  CHECK(c.outputs[1].detail == "B has no output of this name");
  // B's extra outputs are not compared.
  CHECK(compareModels(*only_y, *a, ComparisonInputs{}, Tolerance{}).passed);

  CHECK_THROWS_WITH(checkSameInterface(*a->graph, *only_y->graph, "a.onnx", "y.onnx"),
                    "output 'Z' of a.onnx is missing from y.onnx");
  auto other_input = model("g (float[1, 4] X2) => (float[1, 4] Y, float[1, 4] Z)",
                           "Y = Relu (X2)\nZ = Relu (X2)");
  CHECK_THROWS_WITH(checkSameInterface(*a->graph, *other_input->graph, "a.onnx", "g.onnx"),
                    "input mismatch: 'X' is an input of a.onnx but not of g.onnx");
  auto int_input = model("g (int64[1, 4] X) => (int64[1, 4] Y, int64[1, 4] Z)",
                         "Y = Identity (X)\nZ = Identity (X)");
  try {
    checkSameInterface(*a->graph, *int_input->graph, "a.onnx", "i.onnx");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidInput);
    CHECK_THAT(e.what(), Catch::StartsWith("input mismatch: 'X' is float") &&
                             Catch::EndsWith("in i.onnx"));
  }
}

TEST_CASE("compareTensors: a half tensor is judged at its type's resolution", "[compare]") {
  // e = 1.0 in every element; a differs by `delta` (rounded to the type) in element 1.
  auto pair = [](DType t, double delta) {
    HostTensor a(t, {4}), e(t, {4});
    auto* ap = a.mutableData<uint16_t>();
    auto* ep = e.mutableData<uint16_t>();
    const auto bits = [t](float v) {
      return t == DType::Float16 ? fusectl::kernels::floatToHalf(v)
                                 : fusectl::kernels::floatToBFloat16(v);
    };
    for (int i = 0; i < 4; ++i) ap[i] = ep[i] = bits(1.0f);
    ap[1] = bits(static_cast<float>(1.0 + delta));
    return std::make_pair(std::move(a), std::move(e));
  };
  Tolerance tol;  // atol 1e-5, rtol 1e-4 for float32
  // float16: 16 epsilons of 2^-10 raise both to 1.5625e-2, so |a - e| <= 3.125e-2 at e = 1.
  auto [a1, e1] = pair(DType::Float16, 0x1p-10 * 30);  // 30 ulps: within
  CHECK(compareTensors(a1, e1, tol).passed);
  auto [a2, e2] = pair(DType::Float16, 0x1p-10 * 33);  // 33 ulps: outside
  CHECK_FALSE(compareTensors(a2, e2, tol).passed);
  // bfloat16: 16 epsilons of 2^-7 are 0.125 each, so |a - e| <= 0.25 at e = 1.
  auto [a3, e3] = pair(DType::BFloat16, 0x1p-7 * 31);
  CHECK(compareTensors(a3, e3, tol).passed);
  auto [a4, e4] = pair(DType::BFloat16, 0x1p-7 * 33);
  CHECK_FALSE(compareTensors(a4, e4, tol).passed);
  // 0 epsilons: the float32 tolerance as given, which one float16 ulp already exceeds.
  tol.half_min_epsilons = 0;
  auto [a5, e5] = pair(DType::Float16, 0x1p-10);
  CHECK_FALSE(compareTensors(a5, e5, tol).passed);
  CHECK(Tolerance{}.forDType(DType::Float).atol == 1e-5);
  CHECK(Tolerance{}.forDType(DType::Float16).rtol == 16 * 0x1p-10);
}
