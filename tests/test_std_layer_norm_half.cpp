// The standard LayerNormalization (opset 17) on float16 and bfloat16, against its ONNX function
// body. The body runs stage one in stash_type (float32 here): XU = Cast(X), the mean, the
// variance, Normalized = Deviation / StdDev, all in float32; then NormalizedT = Cast(Normalized,
// to = T), and stage two in T: Scaled = Mul(NormalizedT, Scale) and Y = Add(Scaled, B), each a
// half operation with its own rounding. So a half Y is rounded three times (twice without B), not
// once at the end as the fusectl LayerNorm kernels round: the two differ by a half ulp on a good
// share of the elements.
//
// Stage one is pinned to float32 precision only (Mean and InvStdDev against double loops): the
// body's ReduceMean leaves the summation order free, so no float32 Mean is the one true one.
// Everything after it is pinned bit for bit: the reference here takes the kernel's own Mean and
// InvStdDev and does Normalized = (X - Mean) * InvStdDev in float32 (the spec text's
// Mul(D, InvStdDev)), rounds it to T, then the Mul and the Add, each rounded to T. A product or
// sum of two half values computed in float32 and rounded to half is the correctly rounded half
// operation (float32 holds the exact product; for the sum, 24 >= 2p + 2 bits, p = 11 or 8, make
// the double rounding harmless), so float32 arithmetic here stands for half arithmetic.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/kernels/half.h"
#include "fusectl/kernels/kernel.h"
#include "kernel_case.h"

namespace {

using fusectl::DType;
using fusectl::kernels::floatToHalfBits;
using fusectl::kernels::halfBitsToFloat;
using fusectl::kernels::HostTensor;
using fusectl::kernels::KernelRegistry;
using fusectl::kernels::roundToHalf;
using Dims = std::vector<int64_t>;

const char* typeName(DType t) { return t == DType::Float16 ? "float16" : "bfloat16"; }

int64_t numel(const Dims& d, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < d.size() && i < to; ++i) n *= d[i];
  return n;
}

// Seeded values in [lo, hi] that the half type holds exactly.
std::vector<float> halfValues(DType t, int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = roundToHalf(t, dist(rng));
  return v;
}

HostTensor halfTensor(DType t, const Dims& dims, const std::vector<float>& v) {
  HostTensor h(t, dims);
  for (size_t i = 0; i < v.size(); ++i) h.mutableData<uint16_t>()[i] = floatToHalfBits(t, v[i]);
  return h;
}

struct Case {
  Case(std::string n, Dims d, int64_t a, bool b)
      : name(std::move(n)), x(std::move(d)), axis(a), bias(b) {}
  Case& range(float lo, float hi) {
    x_lo = lo;
    x_hi = hi;
    return *this;
  }
  Case& eps(float e) {
    epsilon = e;
    return *this;
  }
  Case& stashAttr() {
    stash_attr = true;
    return *this;
  }

  std::string name;
  Dims x;
  int64_t axis;
  bool bias;
  float x_lo = -3.f, x_hi = 3.f;
  std::optional<float> epsilon;  // unset: the default 1e-5
  bool stash_attr = false;       // spell stash_type = 1 out
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      Case("[4, 37] axis -1 with B", {4, 37}, -1, true),
      Case("[4, 37] axis -1 without B", {4, 37}, -1, false),
      Case("[2, 3, 64] axis -1 with B, epsilon 1e-3, stash_type 1", {2, 3, 64}, -1, true)
          .eps(1e-3f)
          .stashAttr(),
      Case("[2, 5, 7] axis 1 with B", {2, 5, 7}, 1, true),
      Case("[2, 5, 7] axis 1 without B", {2, 5, 7}, 1, false),
      Case("[3, 4, 6] axis -2 with B, rows away from 0", {3, 4, 6}, -2, true).range(0.5f, 6.f),
      Case("[5, 9] axis 0 with B", {5, 9}, 0, true),
      // Past the CPU statistics' 1024-element blocks.
      Case("[2, 1030] axis -1 with B", {2, 1030}, -1, true),
  };
  return all;
}

struct Inputs {
  std::vector<float> x, scale, bias;
  Dims norm_dims;
  int64_t axis = 0, rows = 0, cols = 0;
  float epsilon = 1e-5f;
};

Inputs inputsFor(const Case& c, DType t) {
  Inputs in;
  const int64_t rank = static_cast<int64_t>(c.x.size());
  in.axis = c.axis < 0 ? c.axis + rank : c.axis;
  in.norm_dims.assign(c.x.begin() + in.axis, c.x.end());
  in.rows = numel(c.x, 0, static_cast<size_t>(in.axis));
  in.cols = numel(in.norm_dims);
  in.epsilon = c.epsilon.value_or(1e-5f);
  in.x = halfValues(t, numel(c.x), 11, c.x_lo, c.x_hi);
  // Scales past 1 in magnitude, so that the Mul's rounding is not only the Cast's again.
  in.scale = halfValues(t, in.cols, 12, -2.5f, 2.5f);
  if (c.bias) in.bias = halfValues(t, in.cols, 13, -1.f, 1.f);
  return in;
}

// The node with `outputs` outputs (1: Y only; 3: Y, Mean, InvStdDev) on `threads` threads.
std::vector<HostTensor> runNode(const Case& c, DType t, const Inputs& in, int outputs,
                                int threads) {
  fusectl::testing::KernelCase k("LayerNormalization", 17, outputs);
  k.registry(KernelRegistry::global()).threads(threads);
  k.input(halfTensor(t, c.x, in.x)).input(halfTensor(t, in.norm_dims, in.scale));
  if (c.bias) k.input(halfTensor(t, in.norm_dims, in.bias));
  k.attrInt("axis", c.axis);
  if (c.epsilon) k.attrFloat("epsilon", *c.epsilon);
  if (c.stash_attr) k.attrInt("stash_type", 1);
  return k.run();
}

}  // namespace

TEST_CASE("LayerNormalization float16/bfloat16: Y rounds Normalized, the Mul and the Add to T",
          "[std_norms][half]") {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    // Elements where one rounding at the end gives other bits than the body's three: the cases
    // must hold some, or they could not tell the two apart.
    int64_t rounded_once_differs = 0;
    for (const Case& c : cases()) {
      INFO(typeName(t) << " " << c.name);
      const Inputs in = inputsFor(c, t);
      const std::vector<HostTensor> out = runNode(c, t, in, 3, 1);
      REQUIRE(out.size() == 3);
      const HostTensor& y = out[0];
      REQUIRE(y.dtype() == t);
      REQUIRE(y.dims() == c.x);
      REQUIRE(out[1].dtype() == DType::Float);
      REQUIRE(out[2].dtype() == DType::Float);
      const float* mean = out[1].data<float>();
      const float* inv_std = out[2].data<float>();
      int64_t differ = 0, first = -1;
      float first_want = 0, first_got = 0;
      for (int64_t r = 0; r < in.rows; ++r) {
        for (int64_t j = 0; j < in.cols; ++j) {
          const int64_t i = r * in.cols + j;
          const float normalized = (in.x[i] - mean[r]) * inv_std[r];
          const float normalized_t = roundToHalf(t, normalized);
          const float scaled = roundToHalf(t, normalized_t * in.scale[j]);
          const float want = c.bias ? roundToHalf(t, scaled + in.bias[j]) : scaled;
          const float once = roundToHalf(t, c.bias ? normalized * in.scale[j] + in.bias[j]
                                               : normalized * in.scale[j]);
          if (floatToHalfBits(t, once) != floatToHalfBits(t, want)) ++rounded_once_differs;
          const uint16_t got = y.data<uint16_t>()[i];
          if (got != floatToHalfBits(t, want)) {
            if (first < 0) {
              first = i;
              first_want = want;
              first_got = halfBitsToFloat(t, got);
            }
            ++differ;
          }
        }
      }
      INFO(differ << " of " << y.numel() << " elements differ; first at " << first << ": want "
                  << first_want << ", got " << first_got);
      CHECK(differ == 0);

      // Y alone, on three threads (rows split across them): the same bytes.
      const std::vector<HostTensor> alone = runNode(c, t, in, 1, 3);
      REQUIRE(alone.size() == 1);
      REQUIRE(alone[0].byteSize() == y.byteSize());
      CHECK(std::memcmp(alone[0].raw(), y.raw(), y.byteSize()) == 0);
    }
    INFO(typeName(t));
    CHECK(rounded_once_differs > 0);
  }
}

TEST_CASE("LayerNormalization float16/bfloat16: Mean and InvStdDev are float32 (stash_type)",
          "[std_norms][half]") {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    for (const Case& c : cases()) {
      INFO(typeName(t) << " " << c.name);
      const Inputs in = inputsFor(c, t);
      const std::vector<HostTensor> out = runNode(c, t, in, 3, 1);
      REQUIRE(out.size() == 3);
      Dims stat_dims(c.x.begin(), c.x.begin() + in.axis);
      stat_dims.resize(c.x.size(), 1);
      for (size_t o = 1; o <= 2; ++o) {
        REQUIRE(out[o].dtype() == DType::Float);
        REQUIRE(out[o].dims() == stat_dims);
      }
      for (int64_t r = 0; r < in.rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < in.cols; ++j) mean += in.x[r * in.cols + j];
        mean /= static_cast<double>(in.cols);
        for (int64_t j = 0; j < in.cols; ++j) {
          const double d = in.x[r * in.cols + j] - mean;
          var += d * d;
        }
        var /= static_cast<double>(in.cols);
        const double inv_std = 1.0 / std::sqrt(var + static_cast<double>(in.epsilon));
        INFO("row " << r);
        // float32 precision: a few float ulps of the row's scale, far finer than a half ulp
        // (2^-11), so statistics kept in the half type would fail here.
        CHECK(std::abs(out[1].data<float>()[r] - mean) <= 1e-6 * std::max(1.0, std::abs(mean)));
        CHECK(std::abs(out[2].data<float>()[r] - inv_std) <= 2e-6 * inv_std);
      }
    }
  }
}
