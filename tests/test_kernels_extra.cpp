// The kernels of the wider ONNX node-test suite (losses, scatter/gather, GridSample, NMS,
// signal, LpPool, Unique, CenterCropPad, Col2Im, recurrent) where that suite is thin: against
// naive references written here, hand-worked spec examples, their error messages, and (hidden
// "[ort]" cases, run by CTest's ort_differential) ONNX Runtime on variants the suite lacks.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "kernel_case.h"
#include "ort_runner.h"
#include "shell_util.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;
using fusectl::testing::floats;
using fusectl::testing::int64s;
using fusectl::testing::valuesOf;

namespace {

std::vector<NamedTensor> runText(const std::string& text, const std::vector<NamedTensor>& inputs) {
  auto model = parseModelText(text, "test");
  Executor ex(*model);
  return ex.run(inputs);
}

HostTensor randomFloats(std::vector<int64_t> dims, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  HostTensor t(DType::Float, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutableData<float>()[i] = dist(rng);
  return t;
}

void requireClose(const HostTensor& actual, const std::vector<double>& expected,
                  double tol = 1e-5) {
  REQUIRE(actual.numel() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i);
    CHECK(actual.data<float>()[i] == Approx(expected[i]).margin(tol).epsilon(tol));
  }
}

}  // namespace

// ---- losses ----

TEST_CASE("SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss match a naive loop",
          "[kernels_extra][losses]") {
  const int64_t N = 3, C = 4, D = 2;
  const HostTensor x = randomFloats({N, C, D}, 1, -2, 2);
  const HostTensor w = randomFloats({C}, 2, 0.5f, 1.5f);
  const std::vector<int64_t> labels = {0, 3, 2, -1, 1, 1};  // -1 is ignored
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (bool weighted : {false, true}) {
      DYNAMIC_SECTION(reduction << (weighted ? " weighted" : "")) {
        const std::string text = fmt::format(
            R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[3,4,2] x, int64[3,2] t, float[4] w) => (float[] loss, float[3,4,2] logp, float[] nll)
{{
  loss, logp = SoftmaxCrossEntropyLoss <reduction = "{0}", ignore_index = -1> (x, t{1})
  nll = NegativeLogLikelihoodLoss <reduction = "{0}", ignore_index = -1> (logp, t{1})
}})",
            reduction, weighted ? ", w" : "");
        const auto out = runText(text, {{"x", x}, {"t", int64s({N, D}, labels)}, {"w", w}});
        // Naive reference.
        std::vector<double> losses;
        double sum = 0, wsum = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t t = labels[static_cast<size_t>(n * D + d)];
            double mx = -1e30, se = 0;
            auto at = [&](int64_t c) {
              return static_cast<double>(x.data<float>()[(n * C + c) * D + d]);
            };
            for (int64_t c = 0; c < C; ++c) mx = std::max(mx, at(c));
            for (int64_t c = 0; c < C; ++c) se += std::exp(at(c) - mx);
            if (t < 0) {
              losses.push_back(0);
              continue;
            }
            const double wt = weighted ? w.data<float>()[t] : 1.0;
            const double l = -(at(t) - mx - std::log(se)) * wt;
            losses.push_back(l);
            sum += l;
            wsum += wt;
          }
        std::vector<double> expected = std::string(reduction) == "none" ? losses
                                       : std::string(reduction) == "sum"
                                           ? std::vector<double>{sum}
                                           : std::vector<double>{sum / wsum};
        requireClose(out[0].tensor, expected);
        requireClose(out[2].tensor, expected);
      }
    }
  }
}

TEST_CASE("NegativeLogLikelihoodLoss: a target outside 0..C-1 names the node",
          "[kernels_extra][losses]") {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2,3] x, int64[2] t) => (float[] y) { y = NegativeLogLikelihoodLoss (x, t) })";
  CHECK_THROWS_WITH(
      runText(text, {{"x", floats({2, 3}, {0, 0, 0, 0, 0, 0})}, {"t", int64s({2}, {1, 3})}}),
      Catch::Contains("NegativeLogLikelihoodLoss") &&
          Catch::Contains("target 3 is outside [0, 3)"));
}

// ---- scatter / gather ----

TEST_CASE("ScatterND applies duplicate indices in order for every reduction",
          "[kernels_extra][scatter]") {
  const HostTensor data = floats({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const HostTensor idx = int64s({3, 1}, {1, -1, 1});
  const HostTensor upd = floats({3, 2}, {10, 20, 30, 40, 2, 3});
  struct Case {
    const char* reduction;
    std::vector<double> expected;
  };
  for (const Case& c :
       {Case{"none", {1, 2, 2, 3, 5, 6, 30, 40}}, Case{"add", {1, 2, 15, 27, 5, 6, 37, 48}},
        Case{"mul", {1, 2, 60, 240, 5, 6, 210, 320}}, Case{"max", {1, 2, 10, 20, 5, 6, 30, 40}},
        Case{"min", {1, 2, 2, 3, 5, 6, 7, 8}}}) {
    DYNAMIC_SECTION(c.reduction) {
      const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[4,2] d, int64[3,1] i, float[3,2] u) => (float[4,2] y)
{{ y = ScatterND <reduction = "{}"> (d, i, u) }})",
                                           c.reduction);
      requireClose(runText(text, {{"d", data}, {"i", idx}, {"u", upd}})[0].tensor, c.expected);
    }
  }
}

TEST_CASE("ScatterND and ScatterElements reject an index outside the axis",
          "[kernels_extra][scatter]") {
  const std::string nd = R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[2,2] d, int64[1,1] i, float[1,2] u) => (float[2,2] y) { y = ScatterND (d, i, u) })";
  CHECK_THROWS_WITH(runText(nd, {{"d", floats({2, 2}, {0, 0, 0, 0})},
                                 {"i", int64s({1, 1}, {2})},
                                 {"u", floats({1, 2}, {1, 1})}}),
                    Catch::Contains("index 2 is out of range for axis 0 of size 2"));
  const std::string el = R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[2,2] d, int64[1,1] i, float[1,1] u) => (float[2,2] y)
{ y = ScatterElements <axis = 1> (d, i, u) })";
  CHECK_THROWS_WITH(runText(el, {{"d", floats({2, 2}, {0, 0, 0, 0})},
                                 {"i", int64s({1, 1}, {-3})},
                                 {"u", floats({1, 1}, {1})}}),
                    Catch::Contains("ScatterElements") && Catch::Contains("index -3"));
}

TEST_CASE("ScatterElements matches a naive loop on a random 3-D case", "[kernels_extra][scatter]") {
  const HostTensor data = randomFloats({3, 4, 5}, 3);
  const HostTensor upd = randomFloats({3, 2, 5}, 4);
  std::mt19937 rng(5);
  std::vector<int64_t> idx(30);
  for (int64_t& v : idx) v = static_cast<int64_t>(rng() % 8) - 4;  // [-4, 4)
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[3,4,5] d, int64[3,2,5] i, float[3,2,5] u) => (float[3,4,5] y)
{ y = ScatterElements <axis = -2, reduction = "add"> (d, i, u) })";
  const auto out = runText(text, {{"d", data}, {"i", int64s({3, 2, 5}, idx)}, {"u", upd}});
  std::vector<double> ref(data.data<float>(), data.data<float>() + data.numel());
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 5; ++c) {
        int64_t k = idx[static_cast<size_t>((a * 2 + b) * 5 + c)];
        if (k < 0) k += 4;
        ref[static_cast<size_t>((a * 4 + k) * 5 + c)] += upd.data<float>()[(a * 2 + b) * 5 + c];
      }
  requireClose(out[0].tensor, ref);
}

TEST_CASE("GatherND with batch_dims, OneHot and Compress follow the spec examples",
          "[kernels_extra][gather]") {
  SECTION("GatherND batch_dims=1") {
    const std::string text = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2,2,2] d, int64[2,1] i) => (float[2,2] y) { y = GatherND <batch_dims = 1> (d, i) })";
    const auto out = runText(
        text, {{"d", floats({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})}, {"i", int64s({2, 1}, {1, 0})}});
    requireClose(out[0].tensor, {2, 3, 4, 5});
  }
  SECTION("OneHot: negative indices wrap, out-of-range rows stay off, axis 0") {
    const std::string text = R"(<ir_version: 8, opset_import: ["" : 11]>
g (int64[4] i, int64[] depth, float[2] v) => (float[3,4] y) { y = OneHot <axis = 0> (i, depth, v) })";
    HostTensor depth(DType::Int64, {});
    depth.mutableData<int64_t>()[0] = 3;
    const auto out = runText(
        text, {{"i", int64s({4}, {0, -1, 3, 1})}, {"depth", depth}, {"v", floats({2}, {-1, 5})}});
    requireClose(out[0].tensor, {5, -1, -1, -1, -1, -1, -1, 5, -1, 5, -1, -1});
  }
  SECTION("Compress along an axis and flattened") {
    const std::string text = R"(<ir_version: 8, opset_import: ["" : 11]>
g (float[3,2] x, bool[3] c) => (float[2,2] y, float[2] z)
{
  y = Compress <axis = 0> (x, c)
  z = Compress (x, c)
})";
    const auto out = runText(text, {{"x", floats({3, 2}, {1, 2, 3, 4, 5, 6})},
                                    {"c", fusectl::testing::bools({3}, {0, 1, 1})}});
    requireClose(out[0].tensor, {3, 4, 5, 6});
    requireClose(out[1].tensor, {2, 3});
  }
}

// ---- GridSample ----

namespace {

// Bilinear 2-D GridSample with zeros padding, written from the formula in the PyTorch docs.
std::vector<double> naiveBilinear(const HostTensor& x, const HostTensor& grid, bool align) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = grid.dim(1), Wo = grid.dim(2);
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          const float* g = grid.data<float>() + ((n * Ho + i) * Wo + j) * 2;
          auto unnorm = [&](double v, int64_t size) {
            return align ? (v + 1) / 2 * (size - 1) : ((v + 1) * size - 1) / 2;
          };
          const double px = unnorm(g[0], W), py = unnorm(g[1], H);
          const double x0 = std::floor(px), y0 = std::floor(py);
          double acc = 0;
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx) {
              const int64_t xi = static_cast<int64_t>(x0) + dx, yi = static_cast<int64_t>(y0) + dy;
              const double wgt = (dx ? px - x0 : 1 - (px - x0)) * (dy ? py - y0 : 1 - (py - y0));
              if (xi < 0 || yi < 0 || xi >= W || yi >= H) continue;
              acc += wgt * x.data<float>()[((n * C + c) * H + yi) * W + xi];
            }
          y.push_back(acc);
        }
  return y;
}

}  // namespace

TEST_CASE("GridSample bilinear/zeros matches a naive loop, inside and outside the image",
          "[kernels_extra][grid_sample]") {
  const HostTensor x = randomFloats({2, 3, 4, 5}, 11);
  const HostTensor grid = randomFloats({2, 3, 6, 2}, 12, -1.3f, 1.3f);
  for (int align : {0, 1}) {
    DYNAMIC_SECTION("align_corners=" << align) {
      const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[2,3,4,5] x, float[2,3,6,2] grid) => (float[2,3,3,6] y)
{{ y = GridSample <align_corners = {}> (x, grid) }})",
                                           align);
      requireClose(runText(text, {{"x", x}, {"grid", grid}})[0].tensor,
                   naiveBilinear(x, grid, align != 0));
    }
  }
}

TEST_CASE("GridSample: an identity grid with align_corners reproduces the input in every mode",
          "[kernels_extra][grid_sample]") {
  const HostTensor x = randomFloats({1, 2, 3, 4}, 13);
  HostTensor grid(DType::Float, {1, 3, 4, 2});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      grid.mutableData<float>()[(i * 4 + j) * 2] = -1 + 2.0f * static_cast<float>(j) / 3;
      grid.mutableData<float>()[(i * 4 + j) * 2 + 1] = -1 + 2.0f * static_cast<float>(i) / 2;
    }
  const std::vector<double> expected(x.data<float>(), x.data<float>() + x.numel());
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    for (const char* pad : {"zeros", "border", "reflection"}) {
      DYNAMIC_SECTION(mode << " " << pad) {
        const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : 20]>
g (float[1,2,3,4] x, float[1,3,4,2] grid) => (float[1,2,3,4] y)
{{ y = GridSample <align_corners = 1, mode = "{}", padding_mode = "{}"> (x, grid) }})",
                                             mode, pad);
        requireClose(runText(text, {{"x", x}, {"grid", grid}})[0].tensor, expected, 1e-4);
      }
    }
  }
}

// ---- NonMaxSuppression ----

TEST_CASE("NonMaxSuppression: the ONNX spec example, per-class and with a score threshold",
          "[kernels_extra][nms]") {
  // [y1, x1, y2, x2]: boxes 0-2 overlap each other (IoU > 0.5), as do 3-4; 5 stands alone.
  const HostTensor boxes = floats({1, 6, 4}, {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                              0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101});
  const HostTensor scores = floats({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
  auto run = [&](int64_t max_out, float score_threshold) {
    const std::string text = R"(<ir_version: 8, opset_import: ["" : 11]>
g (float[1,6,4] b, float[1,1,6] s, int64[1] m, float[1] iou, float[1] st) => (int64[N,3] y)
{ y = NonMaxSuppression <center_point_box = 0> (b, s, m, iou, st) })";
    HostTensor m = int64s({1}, {max_out});
    return runText(text, {{"b", boxes},
                          {"s", scores},
                          {"m", m},
                          {"iou", floats({1}, {0.5f})},
                          {"st", floats({1}, {score_threshold})}})[0]
        .tensor;
  };
  CHECK(valuesOf<int64_t>(run(3, 0.0f)) == std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5});
  CHECK(valuesOf<int64_t>(run(2, 0.0f)) == std::vector<int64_t>{0, 0, 3, 0, 0, 0});
  CHECK(valuesOf<int64_t>(run(3, 0.4f)) == std::vector<int64_t>{0, 0, 3, 0, 0, 0});
  CHECK(run(0, 0.0f).dims() == std::vector<int64_t>{0, 3});
  // torchvision's batched NMS passes sys.maxsize: every box that survives is kept (read as a
  // double, 2^63 - 1 became 2^63 and overflowed to a negative count that kept none).
  CHECK(valuesOf<int64_t>(run(std::numeric_limits<int64_t>::max(), 0.0f)) ==
        std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5});
}

// ---- signal ----

TEST_CASE("DFT: the inverse undoes the forward transform; irfft undoes a one-sided rfft",
          "[kernels_extra][signal]") {
  const HostTensor x = randomFloats({2, 8, 1}, 21);
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 20]>
g (float[2,8,1] x) => (float[2,8,2] back, float[2,8,1] real)
{
  spec = DFT (x)
  back = DFT <inverse = 1> (spec)
  half = DFT <onesided = 1> (x)
  real = DFT <inverse = 1, onesided = 1> (half)
})";
  const auto out = runText(text, {{"x", x}});
  std::vector<double> complex_x, real_x;
  for (int64_t i = 0; i < x.numel(); ++i) {
    complex_x.push_back(x.data<float>()[i]);
    complex_x.push_back(0);
    real_x.push_back(x.data<float>()[i]);
  }
  requireClose(out[0].tensor, complex_x, 1e-5);
  requireClose(out[1].tensor, real_x, 1e-5);
}

TEST_CASE("DFT of a cosine has energy in its two bins only", "[kernels_extra][signal]") {
  const int64_t n = 16;
  HostTensor x(DType::Float, {1, n, 1});
  for (int64_t t = 0; t < n; ++t)
    x.mutableData<float>()[t] =
        static_cast<float>(std::cos(2 * M_PI * 3 * static_cast<double>(t) / n));
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,1] x) => (float[1,16,2] y) { y = DFT <axis = 1> (x) })";
  const HostTensor y = runText(text, {{"x", x}})[0].tensor;
  for (int64_t k = 0; k < n; ++k) {
    INFO("bin " << k);
    CHECK(y.data<float>()[2 * k] == Approx(k == 3 || k == 13 ? 8.0 : 0.0).margin(1e-4));
    CHECK(y.data<float>()[2 * k + 1] == Approx(0.0).margin(1e-4));
  }
}

// ---- LpPool, Unique, CenterCropPad, Col2Im ----

TEST_CASE("LpPool with pads and strides matches a naive loop", "[kernels_extra][lppool]") {
  const HostTensor x = randomFloats({1, 2, 5, 4}, 31);
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[1,2,5,4] x) => (float[1,2,3,2] y)
{ y = LpPool <kernel_shape = [3,2], strides = [2,2], pads = [1,0,1,0], p = 3> (x) })";
  std::vector<double> ref;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        double acc = 0;
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t b = 0; b < 2; ++b) {
            const int64_t h = i * 2 - 1 + a, w = j * 2 + b;
            if (h < 0 || h >= 5) continue;
            acc += std::pow(std::fabs(x.data<float>()[(c * 5 + h) * 4 + w]), 3.0);
          }
        ref.push_back(std::cbrt(acc));
      }
  requireClose(runText(text, {{"x", x}})[0].tensor, ref);
}

TEST_CASE("Unique: sorted and first-occurrence order, with indices, inverse and counts",
          "[kernels_extra][unique]") {
  const HostTensor x = floats({6}, {2, 1, 1, 3, 4, 3});
  for (int sorted : {1, 0}) {
    DYNAMIC_SECTION("sorted=" << sorted) {
      const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : 11]>
g (float[6] x) => (float[N] y, int64[N] idx, int64[6] inv, int64[N] cnt)
{{ y, idx, inv, cnt = Unique <sorted = {}> (x) }})",
                                           sorted);
      const auto out = runText(text, {{"x", x}});
      if (sorted) {
        CHECK(valuesOf<float>(out[0].tensor) == std::vector<float>{1, 2, 3, 4});
        CHECK(valuesOf<int64_t>(out[1].tensor) == std::vector<int64_t>{1, 0, 3, 4});
        CHECK(valuesOf<int64_t>(out[2].tensor) == std::vector<int64_t>{1, 0, 0, 2, 3, 2});
        CHECK(valuesOf<int64_t>(out[3].tensor) == std::vector<int64_t>{2, 1, 2, 1});
      } else {
        CHECK(valuesOf<float>(out[0].tensor) == std::vector<float>{2, 1, 3, 4});
        CHECK(valuesOf<int64_t>(out[1].tensor) == std::vector<int64_t>{0, 1, 3, 4});
        CHECK(valuesOf<int64_t>(out[2].tensor) == std::vector<int64_t>{0, 1, 1, 2, 3, 2});
        CHECK(valuesOf<int64_t>(out[3].tensor) == std::vector<int64_t>{1, 2, 2, 1});
      }
    }
  }
}

TEST_CASE("CenterCropPad crops one axis and pads another, centred", "[kernels_extra][crop]") {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[5,2] x, int64[2] s) => (float[2,5] y) { y = CenterCropPad (x, s) })";
  const auto out = runText(
      text, {{"x", floats({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}, {"s", int64s({2}, {2, 5})}});
  // Rows 1-2 kept ((5-2)/2 = 1); columns padded with 1 zero before ((5-2)/2) and 2 after.
  requireClose(out[0].tensor, {0, 2, 3, 0, 0, 0, 4, 5, 0, 0});
}

TEST_CASE("Col2Im sums overlapping blocks back into the image", "[kernels_extra][col2im]") {
  // A 1x3 image, blocks of 2 at stride 1: columns [a0 a1] at 0-1 and [b0 b1] at 1-2.
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[1,2,2] x, int64[2] img, int64[2] blk) => (float[1,1,1,3] y) { y = Col2Im (x, img, blk) })";
  const auto out = runText(text, {{"x", floats({1, 2, 2}, {1, 10, 2, 20})},
                                  {"img", int64s({2}, {1, 3})},
                                  {"blk", int64s({2}, {1, 2})}});
  requireClose(out[0].tensor, {1, 12, 20});
}

// ---- recurrent ----

TEST_CASE("RNN with sequence_lens: padded steps give zeros and Y_h keeps the last valid step",
          "[kernels_extra][recurrent]") {
  // hidden 1, input 1, W = 1, R = 0.5, no bias: H_t = tanh(x_t + 0.5 H_{t-1}).
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[3,2,1] x, int32[2] lens) => (float[3,1,2,1] y, float[1,2,1] yh)
<float[1,1,1] w = {1.0}, float[1,1,1] r = {0.5}>
{ y, yh = RNN <hidden_size = 1> (x, w, r, , lens) })";
  const auto out =
      runText(text, {{"x", floats({3, 2, 1}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f})},
                     {"lens", fusectl::testing::tensorOf<int32_t>(DType::Int32, {2}, {3, 1})}});
  const double a0 = std::tanh(0.1), a1 = std::tanh(0.3 + 0.5 * a0), a2 = std::tanh(0.5 + 0.5 * a1);
  const double b0 = std::tanh(0.2);
  requireClose(out[0].tensor, {a0, b0, a1, 0, a2, 0});
  requireClose(out[1].tensor, {a2, b0});
}

TEST_CASE("Recurrent ops reject weights that do not fit hidden_size",
          "[kernels_extra][recurrent]") {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[3,2,1] x) => (float[3,1,2,2] y)
<float[1,4,1] w = {1.0, 1.0, 1.0, 1.0}, float[1,4,2] r = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}>
{ y = GRU <hidden_size = 2> (x, w, r) })";
  CHECK_THROWS_WITH(runText(text, {{"x", randomFloats({3, 2, 1}, 1)}}),
                    Catch::Contains("GRU") && Catch::Contains("W dims [1,4,1] do not fit"));
}

// ---- ONNX Runtime on variants the node suite lacks ----

namespace {

// Runs `text` here and in onnxruntime-node on seeded inputs (plus `fixed` ones) and checks
// every output agrees within atol 1e-5, rtol 1e-4.
void checkAgainstOrt(const std::string& name, const std::string& text,
                     const std::vector<NamedTensor>& fixed = {}) {
  const fusectl::test::OrtSetup ort = fusectl::test::findOrtSetup();
  if (!ort.found) {
    WARN(ort.skip_reason);
    return;
  }
  namespace fs = std::filesystem;
  const fs::path dir = fusectl::testing::processTempPath("fusectl_kernels_extra") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto model = parseModelText(text, name);
  const std::string path = (dir / "model.onnx").string();
  saveModel(*model, path);
  std::vector<NamedTensor> inputs;
  for (NamedTensor& in : makeRandomInputs(*model->graph, 17)) {
    bool overridden = false;
    for (const NamedTensor& f : fixed)
      if (f.name == in.name) {
        inputs.push_back(f);
        overridden = true;
      }
    if (!overridden) inputs.push_back(std::move(in));
  }
  Executor ex(*model);
  const std::vector<NamedTensor> ours = ex.run(inputs);
  std::vector<std::string> names;
  for (const NamedTensor& t : ours) names.push_back(t.name);
  const std::vector<NamedTensor> ref = fusectl::test::runOrt(ort, path, inputs, names, dir);
  Tolerance tol;
  tol.atol = 1e-5;
  tol.rtol = 1e-4;
  for (size_t i = 0; i < ours.size(); ++i) {
    const CompareResult r = compareTensors(ours[i].tensor, ref[i].tensor, tol);
    INFO(name << " output '" << ours[i].name << "': " << r.describe(ref[i].tensor.dims()));
    CHECK(r.passed);
  }
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("LSTM/GRU/RNN agree with onnxruntime: bidirectional, sequence_lens, peepholes, clip",
          "[.][ort][kernels_extra]") {
  const std::vector<NamedTensor> lens = {
      {"lens", fusectl::testing::tensorOf<int32_t>(DType::Int32, {3}, {4, 2, 3})}};
  checkAgainstOrt("lstm_bidi", R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[4,3,5] x, float[2,24,5] w, float[2,24,6] r, float[2,48] b, int32[3] lens,
   float[2,3,6] h0, float[2,3,6] c0, float[2,18] p) => (float[4,2,3,6] y, float[2,3,6] yh, float[2,3,6] yc)
{ y, yh, yc = LSTM <hidden_size = 6, direction = "bidirectional"> (x, w, r, b, lens, h0, c0, p) })",
                  lens);
  checkAgainstOrt("lstm_clip_forget", R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[4,3,5] x, float[1,24,5] w, float[1,24,6] r) => (float[4,1,3,6] y, float[1,3,6] yh)
{ y, yh = LSTM <hidden_size = 6, clip = 0.3, input_forget = 1, direction = "reverse"> (x, w, r) })");
  for (int lbr : {0, 1}) {
    checkAgainstOrt("gru_" + std::to_string(lbr),
                    fmt::format(R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[4,3,5] x, float[2,18,5] w, float[2,18,6] r, float[2,36] b, int32[3] lens, float[2,3,6] h0)
  => (float[4,2,3,6] y, float[2,3,6] yh)
{{ y, yh = GRU <hidden_size = 6, direction = "bidirectional", linear_before_reset = {}> (x, w, r, b, lens, h0) }})",
                                lbr),
                    lens);
  }
  // (ONNX Runtime's CPU RNNs reject layout=1; the node suite's batchwise tests cover it.)
  checkAgainstOrt("rnn_activations", R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[4,3,5] x, float[2,6,5] w, float[2,6,6] r, float[2,12] b, int32[3] lens, float[2,3,6] h0)
  => (float[4,2,3,6] y, float[2,3,6] yh)
{ y, yh = RNN <hidden_size = 6, direction = "bidirectional", activations = ["Relu", "Tanh"]> (x, w, r, b, lens, h0) })",
                  lens);
  // One batch entry (the GEMM's one-row products), hidden 20; GRU with linear_before_reset 0
  // multiplies by R_h^T apart.
  const std::vector<NamedTensor> one_len = {
      {"lens", fusectl::testing::tensorOf<int32_t>(DType::Int32, {1}, {3})}};
  checkAgainstOrt("lstm_batch1", R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[4,1,5] x, float[2,80,5] w, float[2,80,20] r, float[2,160] b, int32[1] lens,
   float[2,1,20] h0, float[2,1,20] c0, float[2,60] p) => (float[4,2,1,20] y, float[2,1,20] yh, float[2,1,20] yc)
{ y, yh, yc = LSTM <hidden_size = 20, direction = "bidirectional"> (x, w, r, b, lens, h0, c0, p) })",
                  one_len);
  for (int lbr : {0, 1}) {
    checkAgainstOrt("gru_batch1_" + std::to_string(lbr),
                    fmt::format(R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[6,1,5] x, float[2,60,5] w, float[2,60,20] r, float[2,120] b, float[2,1,20] h0)
  => (float[6,2,1,20] y, float[2,1,20] yh)
{{ y, yh = GRU <hidden_size = 20, direction = "bidirectional", linear_before_reset = {}> (x, w, r, b, , h0) }})",
                                lbr));
  }
  // Constant weights (the sweep's models have them), one batch entry, hidden 17.
  std::vector<std::string> r_values;
  for (int i = 0; i < 17 * 17; ++i)
    r_values.push_back(fmt::format("{:.4f}", 0.3 * std::sin(0.7 * i)));
  checkAgainstOrt("rnn_batch1_constant", fmt::format(R"(<ir_version: 8, opset_import: ["" : 14]>
g (float[5,1,3] x, float[1,17,3] w) => (float[5,1,1,17] y)
<float[1,17,17] r = {{{}}}>
{{ y = RNN <hidden_size = 17> (x, w, r) }})", fmt::join(r_values, ", ")));
}

TEST_CASE(
    "GridSample, RoiAlign, ScatterND, GatherND, NMS, LpPool and Col2Im agree with onnxruntime",
    "[.][ort][kernels_extra]") {
  // The grid is scaled past [-1, 1] so that every padding mode has work to do. Not bicubic with
  // border padding: there ONNX Runtime clamps each tap (as PyTorch does) where the ONNX
  // reference, which the node suite checks and these kernels follow, clamps the coordinate.
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (int align : {0, 1})
        if (std::string(mode) != "bicubic" || std::string(pad) != "border")
          checkAgainstOrt(fmt::format("grid_{}_{}_{}", mode, pad, align),
                          fmt::format(R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[2,3,5,4] x, float[2,6,7,2] grid) => (float[2,3,6,7] y)
<float[1] k = {{1.6}}>
{{
  grid_scaled = Mul (grid, k)
  y = GridSample <mode = "{}", padding_mode = "{}", align_corners = {}> (x, grid_scaled)
}})",
                                      mode, pad, align));
  for (const char* mode : {"avg", "max"})
    checkAgainstOrt(std::string("roi_align_") + mode,
                    fmt::format(R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[2,3,10,12] x) => (float[3,3,3,4] y)
<float[3,4] rois = {{0.5, 1.0, 7.5, 8.25, 2.0, 0.0, 11.0, 9.0, -1.0, 3.5, 4.0, 12.0}}, int64[3] bi = {{0, 1, 1}}>
{{ y = RoiAlign <mode = "{}", output_height = 3, output_width = 4, spatial_scale = 0.9> (x, rois, bi) }})",
                                mode));
  checkAgainstOrt("gathernd_b1", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2,3,4,5] x) => (float[2,2,5] y)
<int64[2,2,2] i = {0, 1, 2, 3, 1, 0, 0, 2}>
{ y = GatherND <batch_dims = 1> (x, i) })");
  checkAgainstOrt("scatternd_mul", R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[4,3,2] x, float[3,2] u) => (float[4,3,2] y)
<int64[3,2] i = {0, 1, 3, 2, 0, 1}>
{ y = ScatterND <reduction = "mul"> (x, i, u) })");
  checkAgainstOrt("nms_center", R"(<ir_version: 8, opset_import: ["" : 11]>
g (float[2,20,4] b, float[2,3,20] s) => (int64[N,3] y)
<int64[1] m = {4}, float[1] iou = {0.2}, float[1] st = {-0.5}>
{ y = NonMaxSuppression <center_point_box = 1> (b, s, m, iou, st) })");
  checkAgainstOrt("lppool_ceil", R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[1,3,8,6] x) => (float[1,3,4,3] y)
{ y = LpPool <kernel_shape = [3,2], strides = [2,2], ceil_mode = 1, p = 1> (x) })");
  checkAgainstOrt("col2im_dil_pad", R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[1,8,12] x) => (float[1,2,5,5] y)
<int64[2] img = {5, 5}, int64[2] blk = {2, 2}>
{ y = Col2Im <dilations = [2,1], pads = [1,0,0,1], strides = [1,2]> (x, img, blk) })");
}
