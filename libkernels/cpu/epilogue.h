// The elementwise tail of a Conv or Gemm (bias, residual add, activation), applied by the GEMM
// to each output tile right after its last K block, while the tile is still in L1.
//
// Y = act(acc + bias + residual). Conv applies its bias this way already; FusedConv and
// FusedGemm (domain "fusectl") add the residual and the activation, so a fusion pass only has to
// rewrite the graph. Bias is per output row (Conv: one value per output channel) or per output
// column (Gemm: one per N).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels::cpu {

enum class Activation : uint8_t {
  None,
  Relu,
  Clip,         // clamp to [alpha, beta]
  LeakyRelu,    // x < 0 ? alpha * x : x
  Sigmoid,
  HardSigmoid,  // max(0, min(1, alpha * x + beta))
  HardSwish,    // x * max(0, min(1, x / 6 + 0.5))
  Silu,         // x * sigmoid(x)
  Gelu,         // exact: 0.5 * x * (1 + erf(x / sqrt(2)))
  Tanh,
};

// The ONNX op name of an activation ("Relu", "Clip"...); nullopt for an unknown name.
inline std::optional<Activation> parseActivation(std::string_view name) {
  if (name.empty() || name == "None" || name == "Identity") return Activation::None;
  if (name == "Relu") return Activation::Relu;
  if (name == "Clip") return Activation::Clip;
  if (name == "LeakyRelu") return Activation::LeakyRelu;
  if (name == "Sigmoid") return Activation::Sigmoid;
  if (name == "HardSigmoid") return Activation::HardSigmoid;
  if (name == "HardSwish") return Activation::HardSwish;
  if (name == "Silu") return Activation::Silu;
  if (name == "Gelu") return Activation::Gelu;
  if (name == "Tanh") return Activation::Tanh;
  return std::nullopt;
}

// Every activation, for registering the portable FusedConv/FusedGemm spellings below.
inline constexpr std::array<Activation, 10> kAllActivations = {
    Activation::None,        Activation::Relu,      Activation::Clip, Activation::LeakyRelu,
    Activation::Sigmoid,     Activation::HardSigmoid, Activation::HardSwish, Activation::Silu,
    Activation::Gelu,        Activation::Tanh};

// The name parseActivation reads back ("" for None).
inline std::string_view activationName(Activation a) {
  switch (a) {
    case Activation::None: return "";
    case Activation::Relu: return "Relu";
    case Activation::Clip: return "Clip";
    case Activation::LeakyRelu: return "LeakyRelu";
    case Activation::Sigmoid: return "Sigmoid";
    case Activation::HardSigmoid: return "HardSigmoid";
    case Activation::HardSwish: return "HardSwish";
    case Activation::Silu: return "Silu";
    case Activation::Gelu: return "Gelu";
    case Activation::Tanh: return "Tanh";
  }
  return "";
}

// The portable spelling of a FusedConv/FusedGemm: <base>[_NoBias][_Add][_<activation>], e.g.
// "FusedConv_Add_Relu". A model-local ONNX function cannot branch on attributes or on a missing
// input, so on export (libpasses fusectl_functions.h, docs/ops.md) each fused node is renamed to
// the spelling of what it computes and gets a function of that name; the same kernels run them.
inline std::string fusedVariantName(std::string_view base, bool bias, bool residual,
                                    Activation act) {
  std::string name(base);
  if (!bias) name += "_NoBias";
  if (residual) name += "_Add";
  if (act != Activation::None) name += "_" + std::string(activationName(act));
  return name;
}

// Calls fn(name) once for every op name a fused node of `base` can have: `base` itself and each
// spelling above. Kernels register all of them.
template <typename Fn>
void forEachFusedSpelling(std::string_view base, Fn&& fn) {
  for (bool bias : {true, false})
    for (bool residual : {false, true})
      for (Activation a : kAllActivations) fn(fusedVariantName(base, bias, residual, a));
}

// The bias and residual operands of a fused node. The plain base name has them at inputs 2 and
// 3, either one omitted; a spelling lists exactly the inputs its function takes, without gaps
// (an ONNX function cannot take an omitted input), so "..._NoBias_Add" has Z at input 2.
struct FusedOperands {
  const HostTensor* bias = nullptr;
  const HostTensor* residual = nullptr;
};

inline FusedOperands fusedOperands(const KernelContext& ctx, std::string_view base) {
  const std::string& op = ctx.node().opType();
  if (op == base) return {ctx.input(2), ctx.input(3)};
  const bool bias = op.find("_NoBias") == std::string::npos;
  const bool residual = op.find("_Add") != std::string::npos;
  const size_t count = 2 + (bias ? 1 : 0) + (residual ? 1 : 0);
  bool complete = ctx.numInputs() == count;
  for (size_t i = 0; complete && i < count; ++i) complete = ctx.input(i) != nullptr;
  if (!complete) ctx.fail(op + " takes exactly " + std::to_string(count) + " inputs, none omitted");
  return {bias ? ctx.input(2) : nullptr, residual ? ctx.input(count - 1) : nullptr};
}

// A node spelled as a variant (anything but the plain base name) must compute what its name
// says, or our executor and an ONNX runtime running the attached function would disagree.
inline void checkFusedSpelling(const KernelContext& ctx, std::string_view base, bool bias,
                               bool residual, Activation act) {
  const std::string& op = ctx.node().opType();
  if (op == base) return;
  std::string expected = fusedVariantName(base, bias, residual, act);
  if (op != expected) {
    ctx.fail("the op type says " + op + " but the inputs and attributes make it " + expected);
  }
}

struct Epilogue {
  const float* bias = nullptr;  // indexed by global row (bias_per_row) or global column
  bool bias_per_row = false;
  const float* residual = nullptr;  // same global layout as the output, leading dim ld_residual
  int64_t ld_residual = 0;
  Activation activation = Activation::None;
  float alpha = 0.f;  // Clip min, LeakyRelu / HardSigmoid alpha
  float beta = 0.f;   // Clip max, HardSigmoid beta

  bool empty() const { return !bias && !residual && activation == Activation::None; }

  // Sets the ONNX default parameters of `act`, then overrides them with `params` in the order
  // the op's attributes take them (Clip: min, max; LeakyRelu: alpha; HardSigmoid: alpha, beta).
  void setActivation(Activation act, const float* params, size_t num_params) {
    activation = act;
    switch (act) {
      case Activation::Clip:
        alpha = -std::numeric_limits<float>::infinity();
        beta = std::numeric_limits<float>::infinity();
        break;
      case Activation::LeakyRelu: alpha = 0.01f; break;
      case Activation::HardSigmoid: alpha = 0.2f; beta = 0.5f; break;
      default: break;
    }
    if (num_params > 0) alpha = params[0];
    if (num_params > 1) beta = params[1];
  }

  // Applies to the rows x cols tile whose element (0,0) is global (row0, col0); `c` points at
  // that element, with leading dimension ldc.
  void apply(float* c, int64_t ldc, int64_t row0, int64_t col0, int64_t rows,
             int64_t cols) const {
    for (int64_t i = 0; i < rows; ++i) {
      float* __restrict y = c + i * ldc;
      if (bias) {
        if (bias_per_row) {
          const float b = bias[row0 + i];
          for (int64_t j = 0; j < cols; ++j) y[j] += b;
        } else {
          const float* __restrict b = bias + col0;
          for (int64_t j = 0; j < cols; ++j) y[j] += b[j];
        }
      }
      if (residual) {
        const float* __restrict z = residual + (row0 + i) * ld_residual + col0;
        for (int64_t j = 0; j < cols; ++j) y[j] += z[j];
      }
      activate(y, cols);
    }
  }

  // Applies the activation alone to n contiguous values.
  void activate(float* __restrict y, int64_t n) const {
    switch (activation) {
      case Activation::None: break;
      case Activation::Relu:
        for (int64_t j = 0; j < n; ++j) y[j] = y[j] > 0.f ? y[j] : 0.f;
        break;
      case Activation::Clip: {
        const float lo = alpha, hi = beta;
        for (int64_t j = 0; j < n; ++j) y[j] = std::min(std::max(y[j], lo), hi);
        break;
      }
      case Activation::LeakyRelu: {
        const float a = alpha;
        for (int64_t j = 0; j < n; ++j) y[j] = y[j] < 0.f ? a * y[j] : y[j];
        break;
      }
      case Activation::Sigmoid:
        for (int64_t j = 0; j < n; ++j) y[j] = sigmoid(y[j]);
        break;
      case Activation::HardSigmoid: {
        const float a = alpha, b = beta;
        for (int64_t j = 0; j < n; ++j) y[j] = std::min(std::max(a * y[j] + b, 0.f), 1.f);
        break;
      }
      case Activation::HardSwish:
        for (int64_t j = 0; j < n; ++j) {
          y[j] = y[j] * std::min(std::max(y[j] * (1.f / 6.f) + 0.5f, 0.f), 1.f);
        }
        break;
      case Activation::Silu:
        for (int64_t j = 0; j < n; ++j) y[j] = y[j] * sigmoid(y[j]);
        break;
      case Activation::Gelu:
        for (int64_t j = 0; j < n; ++j) {
          y[j] = 0.5f * y[j] * (1.f + std::erf(y[j] * 0.70710678118654752f));
        }
        break;
      case Activation::Tanh:
        for (int64_t j = 0; j < n; ++j) y[j] = std::tanh(y[j]);
        break;
    }
  }

 private:
  static float sigmoid(float x) {
    // Split by sign so exp never overflows.
    if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.f + e);
  }
};

}  // namespace fusectl::kernels::cpu
