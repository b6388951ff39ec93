// ai.onnx.preview FlexAttention (opset 1) without its graph-valued modifiers:
//   Y = softmax(scale * Q K^T) V,  Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev]
// scale defaults to 1/sqrt(E); query head h reads key/value head h / (Hq / Hkv). Scores are
// rounded to Q's type (as the reference's matmul in that type does), the softmax runs in
// float (double for double inputs). score_mod and prob_mod are subgraphs that rewrite the
// scores or probabilities; running them needs subgraph execution, which this kernel does not
// have, so a node carrying either fails with that reason rather than computing something else.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void flexAttentionKernel(KernelContext& ctx) {
  for (const char* mod : {"score_mod", "prob_mod"})
    if (ctx.node().hasAttr(mod))
      throwUnsupported(
          fmt::format("node '{}' (FlexAttention): the {} subgraph is not supported "
                      "(running it needs subgraph execution)",
                      ctx.node().label(), mod));
  const HostTensor& q = ctx.requireInput(0);
  const HostTensor& k = ctx.requireInput(1);
  const HostTensor& v = ctx.requireInput(2);
  for (const HostTensor* t : {&q, &k, &v})
    if (!isFloatComputeType(t->dtype()) || t->rank() != 4)
      ctx.fail("Q, K and V must be rank-4 float tensors");
  const int64_t B = q.dim(0), Hq = q.dim(1), L = q.dim(2), E = q.dim(3);
  const int64_t Hkv = k.dim(1), S = k.dim(2), Ev = v.dim(3);
  if (k.dim(0) != B || v.dim(0) != B || k.dim(3) != E || v.dim(1) != Hkv || v.dim(2) != S ||
      Hkv <= 0 || Hq % Hkv != 0)
    ctx.fail(
        fmt::format("Q {}, K {} and V {} do not agree (K and V share heads and length, Q "
                    "heads a multiple of theirs, Q and K one embedding size)",
                    formatDims(q.dims()), formatDims(k.dims()), formatDims(v.dims())));
  const Attribute* scale_attr = ctx.node().attr("scale");
  const double scale = scale_attr ? scale_attr->f : 1.0 / std::sqrt(static_cast<double>(E));
  const bool wide = q.dtype() == DType::Double;
  const bool narrow = q.dtype() == DType::Float16 || q.dtype() == DType::BFloat16;
  FloatView qv(q), kv(k), vv(v);  // double inputs go through float only when !wide
  const double* qd = wide ? q.data<double>() : nullptr;
  const double* kd = wide ? k.data<double>() : nullptr;
  const double* vd = wide ? v.data<double>() : nullptr;
  const auto Q = [&](int64_t i) { return wide ? qd[i] : static_cast<double>(qv[i]); };
  const auto K = [&](int64_t i) { return wide ? kd[i] : static_cast<double>(kv[i]); };
  const auto V = [&](int64_t i) { return wide ? vd[i] : static_cast<double>(vv[i]); };
  HostTensor& out = ctx.allocateOutput(0, v.dtype(), {B, Hq, L, Ev});
  std::vector<double> y(static_cast<size_t>(B * Hq * L * Ev));
  const int64_t group = Hq / Hkv;
  parallelFor(B * Hq, ctx.numThreads(), 1, [&](int64_t begin, int64_t end) {
    std::vector<double> p(static_cast<size_t>(S));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / Hq, h = bh % Hq, hk = b * Hkv + h / group;
      for (int64_t l = 0; l < L; ++l) {
        const int64_t qrow = (bh * L + l) * E;
        double mx = -INFINITY;
        for (int64_t s = 0; s < S; ++s) {
          double dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += Q(qrow + e) * K((hk * S + s) * E + e);
          double score = dot * scale;
          if (narrow) {
            float f = static_cast<float>(score);
            uint16_t bits = 0;
            fromFloat(&f, q.dtype(), &bits, 1);
            toFloat(q.dtype(), &bits, &f, 1);
            score = f;
          } else if (!wide) {
            score = static_cast<float>(score);
          }
          p[static_cast<size_t>(s)] = score;
          mx = std::max(mx, score);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        double* yo = y.data() + (bh * L + l) * Ev;
        for (int64_t s = 0; s < S; ++s) {
          const double w = p[static_cast<size_t>(s)] / sum;
          for (int64_t e = 0; e < Ev; ++e) yo[e] += w * V((hk * S + s) * Ev + e);
        }
      }
    }
  });
  if (v.dtype() == DType::Double) {
    std::copy(y.begin(), y.end(), out.mutableData<double>());
  } else {
    std::vector<float> yf(y.begin(), y.end());
    fromFloat(yf.data(), v.dtype(), out.mutableRaw(), out.numel());
  }
}

}  // namespace
}  // namespace cpu

void registerFlexAttentionKernels(KernelRegistry& r) {
  r.add({"ai.onnx.preview", "FlexAttention", 1, 1000, cpu::flexAttentionKernel});
}

}  // namespace fusectl::kernels
