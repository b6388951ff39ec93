// ai.onnx.preview FlexAttention (opset 1):
//   Y = prob_mod(softmax(score_mod(scale * Q K^T))) V,  Q [B, Hq, L, E], K [B, Hkv, S, E],
//   V [B, Hkv, S, Ev]
// scale defaults to 1/sqrt(E); query head h reads key/value head h / (Hq / Hkv). Scores are
// rounded to Q's type (as the reference's matmul in that type does), the softmax runs in
// float (double for double inputs). score_mod and prob_mod are optional one-input, one-output
// subgraphs that rewrite the whole [B, Hq, L, S] tensor of scores or of probabilities in that
// softmax type; each runs once per node (KernelContext::runSubgraph), not once per element.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// Y, accumulated in double, written in V's type (double kept, the rest through float).
void storeOutput(const std::vector<double>& y, HostTensor& out) {
  if (out.dtype() == DType::Double) {
    std::copy(y.begin(), y.end(), out.mutableData<double>());
  } else {
    std::vector<float> yf(y.begin(), y.end());
    fromFloat(yf.data(), out.dtype(), out.mutableRaw(), out.numel());
  }
}

// A whole [B, Hq, L, S] tensor in the softmax type, as the modifier subgraphs take it.
HostTensor softmaxTypeTensor(bool wide, const std::vector<int64_t>& dims,
                             const std::vector<double>& values) {
  HostTensor t(wide ? DType::Double : DType::Float, dims);
  if (wide) {
    std::copy(values.begin(), values.end(), t.mutableData<double>());
  } else {
    float* f = t.mutableData<float>();
    for (size_t i = 0; i < values.size(); ++i) f[i] = static_cast<float>(values[i]);
  }
  return t;
}

// Runs modifier `attr` on `values` (in the softmax type) and reads its one output back; the
// body must keep the shape and the type.
void applyModifier(KernelContext& ctx, const char* attr, bool wide,
                   const std::vector<int64_t>& dims, std::vector<double>& values) {
  std::vector<HostTensor> results = ctx.runSubgraph(attr, {softmaxTypeTensor(wide, dims, values)});
  const DType want = wide ? DType::Double : DType::Float;
  if (results.size() != 1 || !results[0].isTensor() || results[0].dtype() != want ||
      results[0].dims() != dims)
    ctx.fail(fmt::format("the {} subgraph must return one {} tensor of shape {}", attr,
                         dtypeName(want), formatDims(dims)));
  if (wide) {
    const double* d = results[0].data<double>();
    std::copy(d, d + values.size(), values.begin());
  } else {
    const float* f = results[0].data<float>();
    std::copy(f, f + values.size(), values.begin());
  }
}

// The path with score_mod and/or prob_mod: the scores and the probabilities are materialised
// as whole tensors (the modifiers see all of them at once), in the softmax type.
template <typename KvHeadFn, typename ScoreFn, typename ValueFn>
void flexAttentionWithModifiers(KernelContext& ctx, int64_t B, int64_t Hq, int64_t L, int64_t S,
                                int64_t Ev, bool wide, const KvHeadFn& kvHead,
                                const ScoreFn& score, const ValueFn& V) {
  const std::vector<int64_t> dims = {B, Hq, L, S};
  std::vector<double> p(static_cast<size_t>(B * Hq * L * S));
  parallelFor(B * Hq, ctx.numThreads(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t s = 0; s < S; ++s) p[static_cast<size_t>((bh * L + l) * S + s)] = score(bh, l, s);
  });
  if (ctx.node().hasAttr("score_mod")) applyModifier(ctx, "score_mod", wide, dims, p);
  const auto round = [wide](double x) { return wide ? x : static_cast<double>(static_cast<float>(x)); };
  for (int64_t row = 0; row < B * Hq * L; ++row) {
    double* r = p.data() + row * S;
    double mx = -INFINITY;
    for (int64_t s = 0; s < S; ++s) mx = std::max(mx, r[s]);
    double sum = 0;
    for (int64_t s = 0; s < S; ++s) sum += (r[s] = std::exp(r[s] - mx));
    for (int64_t s = 0; s < S; ++s) r[s] = round(r[s] / sum);
  }
  if (ctx.node().hasAttr("prob_mod")) applyModifier(ctx, "prob_mod", wide, dims, p);
  const HostTensor& v = ctx.requireInput(2);
  HostTensor& out = ctx.allocateOutput(0, v.dtype(), {B, Hq, L, Ev});
  std::vector<double> y(static_cast<size_t>(B * Hq * L * Ev));
  for (int64_t bh = 0; bh < B * Hq; ++bh) {
    const int64_t hk = kvHead(bh);
    for (int64_t l = 0; l < L; ++l) {
      double* yo = y.data() + (bh * L + l) * Ev;
      const double* w = p.data() + (bh * L + l) * S;
      for (int64_t s = 0; s < S; ++s)
        for (int64_t e = 0; e < Ev; ++e) yo[e] += w[s] * V((hk * S + s) * Ev + e);
    }
  }
  storeOutput(y, out);
}

void flexAttentionKernel(KernelContext& ctx) {
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
  // The key/value head (batch included) that query head bh = b * Hq + h reads.
  const auto kvHead = [Hq, Hkv](int64_t bh) { return (bh / Hq) * Hkv + (bh % Hq) / (Hq / Hkv); };
  // The score of query row (b, h, l) against key s, rounded as the reference rounds it.
  const auto score = [&](int64_t bh, int64_t l, int64_t s) {
    const int64_t hk = kvHead(bh);
    const int64_t qrow = (bh * L + l) * E;
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += Q(qrow + e) * K((hk * S + s) * E + e);
    double x = dot * scale;
    if (narrow) {
      float f = static_cast<float>(x);
      uint16_t bits = 0;
      fromFloat(&f, q.dtype(), &bits, 1);
      toFloat(q.dtype(), &bits, &f, 1);
      x = f;
    } else if (!wide) {
      x = static_cast<float>(x);
    }
    return x;
  };
  if (ctx.node().hasAttr("score_mod") || ctx.node().hasAttr("prob_mod")) {
    flexAttentionWithModifiers(ctx, B, Hq, L, S, Ev, wide, kvHead, score, V);
    return;
  }
  HostTensor& out = ctx.allocateOutput(0, v.dtype(), {B, Hq, L, Ev});
  std::vector<double> y(static_cast<size_t>(B * Hq * L * Ev));
  parallelFor(B * Hq, ctx.numThreads(), 1, [&](int64_t begin, int64_t end) {
    std::vector<double> p(static_cast<size_t>(S));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t hk = kvHead(bh);
      for (int64_t l = 0; l < L; ++l) {
        double mx = -INFINITY;
        for (int64_t s = 0; s < S; ++s) {
          const double x = score(bh, l, s);
          p[static_cast<size_t>(s)] = x;
          mx = std::max(mx, x);
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
  storeOutput(y, out);
}

}  // namespace
}  // namespace cpu

void registerFlexAttentionKernels(KernelRegistry& r) {
  r.add({"ai.onnx.preview", "FlexAttention", 1, 1000, cpu::flexAttentionKernel});
}

}  // namespace fusectl::kernels
