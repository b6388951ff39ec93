// The fused norm kernels of domain fusectl (libkernels/cpu/norms_fused.cpp: LayerNorm, RMSNorm,
// SkipLayerNorm, SkipRMSNorm, GroupNorm, ChannelLayerNorm) against naive double-precision references written here: odd row
// lengths (the vector tails), several leading shapes, a mean far from zero beside a small
// spread (where a one-pass E[x^2] - E[x]^2 in float would lose every digit), every ISA this CPU
// has, one and several threads, and the errors a malformed node gets.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../libkernels/cpu/vec_kernels.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"
#include "random_values.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;

HostTensor floatTensor(std::vector<int64_t> dims, const std::vector<float>& v) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == v.size());
  if (!v.empty()) std::memcpy(t.mutableRaw(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> valuesOf(const HostTensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class PlainAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return HostTensor(dtype, dims);
  }
};

// Runs one fusectl node through the global registry with outputs `outputs` ("" leaves one off).
std::vector<HostTensor> runFused(const std::string& op, const std::vector<HostTensor>& inputs,
                                 std::vector<Attribute> attrs,
                                 std::vector<std::string> outputs = {"Y"}, int threads = 1) {
  Graph g("t");
  Graph::NodeSpec spec;
  spec.op_type = op;
  spec.domain = "fusectl";
  spec.name = "node_" + op;
  std::vector<const HostTensor*> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueType vt;
    vt.dtype = inputs[i].dtype();
    spec.inputs.push_back(g.addInput("in" + std::to_string(i), vt));
    args.push_back(&inputs[i]);
  }
  spec.output_names = std::move(outputs);
  spec.attributes = std::move(attrs);
  Node* node = g.createNode(std::move(spec));
  // Graph outputs, so that the kernel is asked for each (an output nobody reads is not wanted).
  for (Value* out : node->outputs())
    if (out) g.addOutput(out);
  const KernelInfo* info = KernelRegistry::global().find("fusectl", op, 1);
  REQUIRE(info != nullptr);
  PlainAllocator plain;
  KernelContext ctx(*node, 1, args, plain, threads);
  info->fn(ctx);
  return ctx.outputs();
}

std::vector<Attribute> normAttrs(int64_t axis, float eps) {
  return {Attribute::ofInt("axis", axis), Attribute::ofFloat("epsilon", eps)};
}

// The reference: rows of `cols`, statistics in double from the float inputs.
std::vector<double> referenceNorm(const std::vector<float>& x, const std::vector<float>* skip,
                                  bool skip_per_row, int64_t cols,
                                  const std::vector<float>& scale,
                                  const std::vector<float>* bias, bool rms, double eps,
                                  std::vector<double>* sum_out = nullptr) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> s(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      // The kernel rounds the sum to float once, as the unfused Add does.
      const float k = skip ? (*skip)[static_cast<size_t>(skip_per_row ? c : r * cols + c)] : 0.f;
      s[c] = skip ? static_cast<double>(x[r * cols + c] + k) : x[r * cols + c];
      if (sum_out) (*sum_out)[r * cols + c] = s[c];
    }
    double mean = 0, var = 0;
    if (!rms) {
      for (double v : s) mean += v;
      mean /= cols;
    }
    for (double v : s) var += (v - mean) * (v - mean);
    var /= cols;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = scale.size() == 1 ? scale[0] : scale[c];
      y[r * cols + c] = (s[c] - mean) / std::sqrt(var + eps) * g + (bias ? (*bias)[c] : 0.0);
    }
  }
  return y;
}

void requireClose(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
    if (err > worst) worst = err, at = i;
  }
  INFO("worst relative error " << worst << " at element " << at << ": got " << got[at]
                               << ", want " << want[at]);
  REQUIRE(worst <= tol);
}

std::vector<vec::Isa> isasHere() {
  std::vector<vec::Isa> isas;
  for (vec::Isa i : {vec::Isa::Portable, vec::Isa::Avx2, vec::Isa::Avx512})
    if (i <= vec::bestSupportedIsa()) isas.push_back(i);
  return isas;
}

struct ForcedIsa {
  explicit ForcedIsa(vec::Isa isa) { vec::forceIsa(isa); }
  ~ForcedIsa() { vec::forceIsa(std::nullopt); }
};

}  // namespace

TEST_CASE("fusectl LayerNorm and RMSNorm match double precision", "[kernels][norms]") {
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t cols : {1, 7, 17, 768, 1001}) {
      for (int threads : {1, 4}) {
        const int64_t rows = 13;
        INFO("isa " << vec::isaName(isa) << ", cols " << cols << ", threads " << threads);
        // A mean of 1000 beside a spread of 1: E[x^2] - E[x]^2 in float would keep nothing.
        const std::vector<float> x = randomFloats(rows * cols, 7 + cols, 999.f, 1001.f);
        const std::vector<float> scale = randomFloats(cols, 11, -2.f, 2.f);
        const std::vector<float> bias = randomFloats(cols, 13, -1.f, 1.f);
        const float eps = 1e-5f;
        const std::vector<HostTensor> ln =
            runFused("LayerNorm",
                     {floatTensor({rows, cols}, x), floatTensor({cols}, scale),
                      floatTensor({cols}, bias)},
                     normAttrs(-1, eps), {"Y"}, threads);
        // At a mean of 1000, float inputs and float partial sums (vec::sum) leave the mean
        // off by ~1e-4, which the division by a spread of 0.6 carries into the result; a
        // one-pass variance would be off by tens of percent.
        requireClose(valuesOf(ln[0]),
                     referenceNorm(x, nullptr, false, cols, scale, &bias, false, eps), 2e-3);
        const std::vector<HostTensor> rms = runFused(
            "RMSNorm", {floatTensor({rows, cols}, x), floatTensor({cols}, scale)},
            normAttrs(1, eps), {"Y"}, threads);
        requireClose(valuesOf(rms[0]),
                     referenceNorm(x, nullptr, false, cols, scale, nullptr, true, eps), 2e-6);
      }
    }
  }
}

TEST_CASE("fusectl norms normalise over every axis from `axis` on", "[kernels][norms]") {
  const std::vector<float> x = randomFloats(2 * 3 * 5, 3, -4.f, 4.f);
  const std::vector<float> scale = randomFloats(15, 5, 0.5f, 1.5f);
  const std::vector<float> bias = randomFloats(15, 6, -1.f, 1.f);
  const std::vector<HostTensor> y = runFused(
      "LayerNorm", {floatTensor({2, 3, 5}, x), floatTensor({3, 5}, scale), floatTensor({3, 5}, bias)},
      normAttrs(1, 1e-3f));
  requireClose(valuesOf(y[0]), referenceNorm(x, nullptr, false, 15, scale, &bias, false, 1e-3),
               2e-6);
  // The weight-free RMSNorm of prefold-rms-norm-weight: a Scale of [1] holding 1.
  const std::vector<HostTensor> r =
      runFused("RMSNorm", {floatTensor({2, 3, 5}, x), floatTensor({1}, {1.f})}, normAttrs(-2, 1e-6f));
  requireClose(valuesOf(r[0]), referenceNorm(x, nullptr, false, 15, {1.f}, nullptr, true, 1e-6),
               2e-6);
}

TEST_CASE("fusectl SkipLayerNorm and SkipRMSNorm add, return the sum and normalise",
          "[kernels][norms]") {
  const int64_t rows = 6, cols = 37;
  const std::vector<float> x = randomFloats(rows * cols, 21, -3.f, 3.f);
  const std::vector<float> skip = randomFloats(rows * cols, 22, -3.f, 3.f);
  const std::vector<float> row_bias = randomFloats(cols, 23, -1.f, 1.f);
  const std::vector<float> scale = randomFloats(cols, 24, -2.f, 2.f);
  const std::vector<float> bias = randomFloats(cols, 25, -1.f, 1.f);
  for (bool rms : {false, true}) {
    for (bool per_row : {false, true}) {
      for (bool want_sum : {false, true}) {
        INFO("rms " << rms << ", bias per row " << per_row << ", sum wanted " << want_sum);
        const std::vector<float>& k = per_row ? row_bias : skip;
        std::vector<HostTensor> in = {floatTensor({2, 3, cols}, x),
                                      floatTensor(per_row ? std::vector<int64_t>{cols}
                                                          : std::vector<int64_t>{2, 3, cols},
                                                  k),
                                      floatTensor({cols}, scale)};
        if (!rms) in.push_back(floatTensor({cols}, bias));
        std::vector<std::string> outs = {"Y"};
        if (want_sum) outs.push_back("Sum");
        const std::vector<HostTensor> got = runFused(rms ? "SkipRMSNorm" : "SkipLayerNorm", in,
                                                     normAttrs(-1, 1e-5f), outs, 3);
        std::vector<double> sum(x.size());
        const std::vector<double> want = referenceNorm(x, &k, per_row, cols, scale,
                                                       rms ? nullptr : &bias, rms, 1e-5, &sum);
        requireClose(valuesOf(got[0]), want, 2e-6);
        if (want_sum) requireClose(valuesOf(got[1]), sum, 0.0);
      }
    }
  }
}

// GroupNorm's reference: each (sample, group) block of x [n, c, inner] normalised in double.
std::vector<double> referenceGroupNorm(const std::vector<float>& x, int64_t n, int64_t c,
                                       int64_t inner, int64_t groups,
                                       const std::vector<float>& scale,
                                       const std::vector<float>& bias, double eps) {
  std::vector<double> y(x.size());
  const int64_t per_group = c / groups, block = per_group * inner;
  for (int64_t b = 0; b < n * groups; ++b) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < block; ++i) mean += x[b * block + i];
    mean /= block;
    for (int64_t i = 0; i < block; ++i) var += (x[b * block + i] - mean) * (x[b * block + i] - mean);
    var /= block;
    for (int64_t i = 0; i < block; ++i) {
      const int64_t ch = (b % groups) * per_group + i / inner;
      y[b * block + i] = (x[b * block + i] - mean) / std::sqrt(var + eps) * scale[ch] + bias[ch];
    }
  }
  return y;
}

TEST_CASE("fusectl GroupNorm matches double precision", "[kernels][norms]") {
  struct Shape {
    std::vector<int64_t> dims;
    int64_t groups;
  };
  // One group over a long signal (ConvTasNet: blocks of many 4096-element chunks, and fewer
  // blocks than threads), 32 groups of a UNet-like map, odd sizes, a 3-D volume.
  const std::vector<Shape> shapes = {{{1, 16, 1001}, 1},   {{2, 64, 9, 9}, 32},
                                     {{2, 6, 7}, 3},       {{3, 4, 1}, 2},
                                     {{1, 8, 3, 4, 5}, 4}, {{2, 12, 5, 5}, 12}};
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (const Shape& sh : shapes) {
      for (int threads : {1, 3}) {
        int64_t numel = 1, inner = 1;
        for (size_t i = 0; i < sh.dims.size(); ++i) {
          numel *= sh.dims[i];
          if (i >= 2) inner *= sh.dims[i];
        }
        const int64_t n = sh.dims[0], c = sh.dims[1];
        INFO("isa " << vec::isaName(isa) << ", shape " << sh.dims.size() << "-D, " << numel
                    << " elements, " << sh.groups << " groups, threads " << threads);
        // A mean of 1000 beside a spread of 1, as for LayerNorm above; the output is centred
        // before it is scaled, so the error stays near the mean's own (~3e-4 of the result).
        const std::vector<float> x = randomFloats(numel, 31 + numel, 999.f, 1001.f);
        const std::vector<float> scale = randomFloats(c, 32, -2.f, 2.f);
        const std::vector<float> bias = randomFloats(c, 33, -1.f, 1.f);
        const std::vector<HostTensor> y = runFused(
            "GroupNorm", {floatTensor(sh.dims, x), floatTensor({c}, scale), floatTensor({c}, bias)},
            {Attribute::ofInt("num_groups", sh.groups), Attribute::ofFloat("epsilon", 1e-5f)},
            {"Y"}, threads);
        requireClose(valuesOf(y[0]),
                     referenceGroupNorm(x, n, c, inner, sh.groups, scale, bias, 1e-5), 5e-4);
      }
    }
  }
  // Centred inputs keep every digit the float output has.
  const std::vector<float> x = randomFloats(2 * 6 * 50, 41, -3.f, 3.f);
  const std::vector<float> scale = randomFloats(6, 42, 0.5f, 1.5f);
  const std::vector<float> bias = randomFloats(6, 43, -1.f, 1.f);
  const std::vector<HostTensor> y = runFused(
      "GroupNorm", {floatTensor({2, 6, 50}, x), floatTensor({6}, scale), floatTensor({6}, bias)},
      {Attribute::ofInt("num_groups", 2), Attribute::ofFloat("epsilon", 1e-5f)});
  requireClose(valuesOf(y[0]), referenceGroupNorm(x, 2, 6, 50, 2, scale, bias, 1e-5), 2e-6);
}

// ChannelLayerNorm's reference: x [n, c, p] normalised over c at every (n, p), in double.
std::vector<double> referenceChannelNorm(const std::vector<float>& x, int64_t n, int64_t c,
                                         int64_t p, const std::vector<float>& scale,
                                         const std::vector<float>& bias, double eps) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t q = 0; q < p; ++q) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < c; ++k) mean += x[(b * c + k) * p + q];
      mean /= c;
      for (int64_t k = 0; k < c; ++k) {
        const double d = x[(b * c + k) * p + q] - mean;
        var += d * d;
      }
      var /= c;
      for (int64_t k = 0; k < c; ++k) {
        const int64_t at = (b * c + k) * p + q;
        y[at] = (x[at] - mean) / std::sqrt(var + eps) * scale[k] + bias[k];
      }
    }
  return y;
}

TEST_CASE("fusectl ChannelLayerNorm matches double precision", "[kernels][norms]") {
  // Blocks of 512 positions with a partial last one, channel chunks of 32 with a partial last
  // one (C = 70), one channel, a 2-D map, two images; a mean of 1000 beside a spread of 1.
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 512, 1100}, {2, 70, 33}, {1, 1, 9}, {2, 6, 4, 5}};
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (const std::vector<int64_t>& dims : shapes) {
      for (int threads : {1, 3}) {
        const int64_t n = dims[0], c = dims[1];
        int64_t p = 1;
        for (size_t i = 2; i < dims.size(); ++i) p *= dims[i];
        INFO("isa " << vec::isaName(isa) << ", " << c << " channels x " << p << " positions, "
                    << threads << " threads");
        const std::vector<float> x = randomFloats(n * c * p, 51 + c, 999.f, 1001.f);
        const std::vector<float> scale = randomFloats(c, 52, -2.f, 2.f);
        const std::vector<float> bias = randomFloats(c, 53, -1.f, 1.f);
        const std::vector<HostTensor> y = runFused(
            "ChannelLayerNorm", {floatTensor(dims, x), floatTensor({c}, scale), floatTensor({c}, bias)},
            {Attribute::ofFloat("epsilon", 1e-5f)}, {"Y"}, threads);
        // One channel: the variance is 0 and the output the bias.
        requireClose(valuesOf(y[0]), referenceChannelNorm(x, n, c, p, scale, bias, 1e-5), 2e-3);
      }
    }
  }
  const HostTensor x = floatTensor({1, 4, 2}, randomFloats(8, 54, -1.f, 1.f));
  CHECK_THROWS_WITH(runFused("ChannelLayerNorm",
                             {x, floatTensor({3}, {1, 1, 1}), floatTensor({4}, {0, 0, 0, 0})},
                             {Attribute::ofFloat("epsilon", 1e-5f)}),
                    Catch::Contains("one value per channel (4); they hold 3 and 4"));
  CHECK_THROWS_WITH(runFused("ChannelLayerNorm",
                             {floatTensor({4, 2}, randomFloats(8, 55, -1.f, 1.f)),
                              floatTensor({2}, {1, 1}), floatTensor({2}, {0, 0})},
                             {Attribute::ofFloat("epsilon", 1e-5f)}),
                    Catch::Contains("rank >= 3"));
}

TEST_CASE("fusectl norm kernels reject malformed nodes with one line", "[kernels][norms]") {
  const HostTensor x = floatTensor({2, 4}, randomFloats(8, 1, -1.f, 1.f));
  const HostTensor s4 = floatTensor({4}, {1, 1, 1, 1});
  const HostTensor s3 = floatTensor({3}, {1, 1, 1});
  CHECK_THROWS_WITH(runFused("RMSNorm", {x, s4}, {Attribute::ofFloat("epsilon", 1e-5f)}),
                    Catch::Contains("needs both 'axis' and 'epsilon'"));
  CHECK_THROWS_WITH(runFused("RMSNorm", {x, s3}, normAttrs(-1, 1e-5f)),
                    Catch::Contains("Scale has 3 elements; the normalised shape has 4"));
  CHECK_THROWS_WITH(runFused("LayerNorm", {x, s4, s4}, normAttrs(2, 1e-5f)),
                    Catch::Contains("axis out of range"));
  CHECK_THROWS_WITH(runFused("SkipRMSNorm", {x, floatTensor({2, 1}, {1, 2}), s4},
                             normAttrs(-1, 1e-5f)),
                    Catch::Contains("Skip must have X's shape"));
  const HostTensor x3 = floatTensor({1, 4, 2}, randomFloats(8, 2, -1.f, 1.f));
  const auto groupAttrs = [](int64_t groups) {
    return std::vector<Attribute>{Attribute::ofInt("num_groups", groups),
                                  Attribute::ofFloat("epsilon", 1e-5f)};
  };
  CHECK_THROWS_WITH(runFused("GroupNorm", {x3, s4, s4}, groupAttrs(3)),
                    Catch::Contains("num_groups 3 does not divide 4 channels"));
  CHECK_THROWS_WITH(runFused("GroupNorm", {x3, s3, s4}, groupAttrs(2)),
                    Catch::Contains("one value per channel (4); they hold 3 and 4"));
  CHECK_THROWS_WITH(runFused("GroupNorm", {x3, s4, s4}, {Attribute::ofInt("num_groups", 2)}),
                    Catch::Contains("needs 'epsilon'"));
}
