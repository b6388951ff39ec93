// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//
// Both reduce to one gather: loss[n, d] = -w[t] * logp[n, t, d] with t = target[n, d], where
// w[t] is the class weight (1 without weights) and an ignore_index target contributes neither
// loss nor weight. "mean" divides by the sum of the gathered weights whenever weights or
// ignore_index are given (so an all-ignored batch gives 0/0 = NaN, as the ONNX reference does),
// else by the element count. SoftmaxCrossEntropyLoss first takes log_softmax over axis 1 and can
// return it as its second output. Sums run in double; outputs keep the input's dtype.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

struct LossShape {
  int64_t n = 0, c = 0, d = 1;  // [N, C, D] with D the product of the trailing dims
};

LossShape lossShape(const KernelContext& ctx, const HostTensor& x, const HostTensor& target) {
  if (x.rank() < 2) ctx.fail("input must have rank >= 2 (N, C, d1...)");
  if (target.rank() != x.rank() - 1) ctx.fail("target must have rank input.rank - 1");
  if (target.dim(0) != x.dim(0)) ctx.fail("target and input disagree on N");
  for (size_t i = 2; i < x.rank(); ++i)
    if (target.dim(i - 1) != x.dim(i))
      ctx.fail(fmt::format("target dims {} do not match input dims {}", formatDims(target.dims()),
                           formatDims(x.dims())));
  if (target.dtype() != DType::Int32 && target.dtype() != DType::Int64)
    ctx.fail("target must be int32 or int64");
  LossShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  for (size_t i = 2; i < x.rank(); ++i) s.d *= x.dim(i);
  return s;
}

// Writes output 0 from log-probabilities laid out [N, C, D].
void gatherLoss(KernelContext& ctx, const std::vector<double>& logp, const LossShape& s,
                const HostTensor& target, const HostTensor* weight, DType out_dtype) {
  const std::vector<int64_t> t = kutil::readInts(ctx, target);
  std::vector<double> w;
  if (weight) {
    if (weight->rank() != 1 || weight->dim(0) != s.c) ctx.fail("weight must have shape [C]");
    FloatView wv(*weight);
    w.assign(wv.data(), wv.data() + s.c);
  }
  const bool has_ignore = ctx.node().hasAttr("ignore_index");
  const int64_t ignore = ctx.attrInt("ignore_index", 0);
  const std::string reduction = ctx.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    ctx.fail(fmt::format("unknown reduction '{}'", reduction));

  std::vector<double> loss(t.size());
  double loss_sum = 0, weight_sum = 0;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t d = 0; d < s.d; ++d) {
      const size_t i = static_cast<size_t>(n * s.d + d);
      const int64_t cls = t[i];
      if (has_ignore && cls == ignore) continue;
      if (cls < 0 || cls >= s.c) ctx.fail(fmt::format("target {} is outside [0, {})", cls, s.c));
      const double wi = weight ? w[static_cast<size_t>(cls)] : 1.0;
      loss[i] = -logp[static_cast<size_t>((n * s.c + cls) * s.d + d)] * wi;
      loss_sum += loss[i];
      weight_sum += wi;
    }
  }
  std::vector<float> result;
  std::vector<int64_t> dims;
  if (reduction == "none") {
    dims = target.dims();
    result.assign(loss.begin(), loss.end());
  } else if (reduction == "sum") {
    result = {static_cast<float>(loss_sum)};
  } else if (weight || has_ignore) {
    result = {static_cast<float>(loss_sum / weight_sum)};
  } else {
    result = {static_cast<float>(loss_sum / static_cast<double>(loss.size()))};
  }
  HostTensor& out = ctx.allocateOutput(0, out_dtype, dims);
  fromFloat(result.data(), out_dtype, out.mutableRaw(), out.numel());
}

void requireFloatInput(const KernelContext& ctx, const HostTensor& x) {
  if (!isFloatComputeType(x.dtype()))
    ctx.fail(fmt::format("input must be a float type, got {}", dtypeName(x.dtype())));
}

void negativeLogLikelihoodLossKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& target = ctx.requireInput(1);
  requireFloatInput(ctx, x);
  const LossShape s = lossShape(ctx, x, target);
  FloatView xv(x);
  const std::vector<double> logp(xv.data(), xv.data() + xv.size());
  gatherLoss(ctx, logp, s, target, ctx.input(2), x.dtype());
}

void softmaxCrossEntropyLossKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& target = ctx.requireInput(1);
  requireFloatInput(ctx, x);
  const LossShape s = lossShape(ctx, x, target);
  FloatView xv(x);
  std::vector<double> logp(static_cast<size_t>(xv.size()));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t d = 0; d < s.d; ++d) {
      auto at = [&](int64_t c) { return static_cast<size_t>((n * s.c + c) * s.d + d); };
      double mx = -INFINITY;
      for (int64_t c = 0; c < s.c; ++c) mx = std::max(mx, static_cast<double>(xv[at(c)]));
      double sum = 0;
      for (int64_t c = 0; c < s.c; ++c) sum += std::exp(xv[at(c)] - mx);
      const double log_sum = std::log(sum);
      for (int64_t c = 0; c < s.c; ++c) logp[at(c)] = xv[at(c)] - mx - log_sum;
    }
  }
  gatherLoss(ctx, logp, s, target, ctx.input(2), x.dtype());
  if (ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    HostTensor& out = ctx.allocateOutput(1, x.dtype(), x.dims());
    const std::vector<float> lp(logp.begin(), logp.end());
    fromFloat(lp.data(), x.dtype(), out.mutableRaw(), out.numel());
  }
}

}  // namespace
}  // namespace cpu

void registerLossKernels(KernelRegistry& r) {
  r.add({"", "NegativeLogLikelihoodLoss", 12, 1000, cpu::negativeLogLikelihoodLossKernel});
  r.add({"", "SoftmaxCrossEntropyLoss", 12, 1000, cpu::softmaxCrossEntropyLossKernel});
}

}  // namespace fusectl::kernels
