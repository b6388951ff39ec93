// The epilogue contract: the elementwise tail of a Conv or Gemm (bias, residual add,
// activation) that a fused kernel applies to each output tile right after its last K block,
// while the tile is still in L1. Any backend's FusedConv/FusedGemm computes exactly this.
//
// Y = act(acc + bias + residual). Conv applies its bias this way already; FusedConv and
// FusedGemm (domain "fusectl") add the residual and the activation, so a fusion pass only has to
// rewrite the graph. Bias is per output row (Conv: one value per output channel) or per output
// column (Gemm: one per N). The activations, their parameters and defaults, and the op-type
// spellings are the fused-op table's (fusectl/graph/fused_ops.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/fused_ops.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

// The bias and residual operands of a fused node, wherever its spelling puts them
// (fusedOperandSlots in fused_ops.h). A spelling must list exactly the inputs its function
// takes, none omitted; ctx.fail() otherwise.
struct FusedOperands {
  const HostTensor* bias = nullptr;
  const HostTensor* residual = nullptr;
  int residual_input = -1;  // the residual's input index, -1 without one
};

inline FusedOperands fusedOperands(const KernelContext& ctx) {
  const std::string& op = ctx.node().opType();
  const std::optional<FusedOperandSlots> slots = fusedOperandSlots(op);
  if (!slots) ctx.fail(op + " is not a spelling of a fused op");
  if (const size_t count = slots->exact_inputs) {
    bool complete = ctx.numInputs() == count;
    for (size_t i = 0; complete && i < count; ++i) complete = ctx.input(i) != nullptr;
    if (!complete) {
      ctx.fail(op + " takes exactly " + std::to_string(count) + " inputs, none omitted");
    }
  }
  const HostTensor* residual = slots->residual ? ctx.input(*slots->residual) : nullptr;
  return {slots->bias ? ctx.input(*slots->bias) : nullptr, residual,
          residual ? static_cast<int>(*slots->residual) : -1};
}

// A node spelled as a variant (anything but the plain base name) must compute what its name
// says, or our executor and an ONNX runtime running the attached function would disagree.
inline void checkFusedSpelling(const KernelContext& ctx, std::string_view base, bool bias,
                               bool residual, Activation act) {
  const std::string& op = ctx.node().opType();
  if (op == base) return;
  std::string expected = fusedSpellingName(base, bias, residual, act);
  // A float16/bfloat16 node is exported with its type after the spelling (fused_ops.h), and
  // that function Casts from the type, so the name must also say the inputs' type.
  if (const std::optional<DType> t = fusedSpellingDType(op)) {
    const HostTensor* x = ctx.input(0);
    expected = fusedDTypeSpelling(expected, x ? x->dtype() : *t);
  }
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
    const ActivationInfo& info = activationInfo(act);
    if (info.num_params > 0) alpha = info.defaults[0];
    if (info.num_params > 1) beta = info.defaults[1];
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
      case Activation::GeluTanh:
        for (int64_t j = 0; j < n; ++j) {
          const float v = y[j], cube = v * v * v;  // geluTanh512's operation order
          y[j] = 0.5f * v * (1.f + std::tanh(0.7978845608028654f * (v + 0.044715f * cube)));
        }
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

// Sets on `ep` the activation a fused node's string attribute `activation_attr` names, with the
// parameters its `params_attr` holds (ONNX's defaults for those it leaves out), and returns it;
// an unknown name fails the node.
inline Activation readNodeActivation(const KernelContext& ctx, Epilogue& ep,
                                     const std::string& activation_attr = "activation",
                                     const std::string& params_attr = "activation_params") {
  const std::string name = ctx.attrString(activation_attr, "");
  const std::optional<Activation> act = parseActivation(name);
  if (!act) ctx.fail("unknown " + activation_attr + " '" + name + "'");
  const std::vector<float> params = ctx.attrFloats(params_attr);
  ep.setActivation(*act, params.data(), params.size());
  return *act;
}

}  // namespace fusectl::kernels
