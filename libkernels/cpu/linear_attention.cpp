// LinearAttention (opset 27): causal attention through a fixed-size recurrent state, the
// token mixer of linear-attention, RetNet/GLA-style gated and DeltaNet-style models.
//
// Per batch b and key/value head h, with a state S[d_k, d_v] (past_state or zeros), for each
// position t in order:
//   gated, gated_delta:  S = S * exp(decay_t)          (decay per key dim, or one per head)
//   delta, gated_delta:  v_t = beta_t * (v_t - S^T k_t) (beta per head, or one for all)
//   all rules:           S = S + k_t v_t^T
//   output_t[q head g]   = scale * q_t[g]^T S          for every query head g of kv head h
// scale defaults to 1/sqrt(d_k) (attribute absent or 0). Query heads map to kv heads in blocks
// (GQA/MQA: head g reads state g / (q_num_heads / kv_num_heads)). The state is kept in float,
// as the reference keeps it; present_state takes past_state's type, or query's without one.
// chunk_size is a tuning hint of chunked implementations and does not change the result.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

struct LinearAttentionShape {
  int64_t batch, steps, q_heads, kv_heads, d_k, d_v;
};

void checkRank3(const KernelContext& ctx, const HostTensor& t, const char* name,
                const LinearAttentionShape& s) {
  if (t.rank() != 3 || t.dim(0) != s.batch || t.dim(1) != s.steps)
    ctx.fail(fmt::format("{} dims {} must be [{}, {}, *]", name, formatDims(t.dims()), s.batch,
                         s.steps));
}

void linearAttentionKernel(KernelContext& ctx) {
  const HostTensor& q = ctx.requireInput(0);
  const HostTensor& k = ctx.requireInput(1);
  const HostTensor& v = ctx.requireInput(2);
  const HostTensor* past = ctx.input(3);
  const HostTensor* decay = ctx.input(4);
  const HostTensor* beta = ctx.input(5);
  const std::string rule = ctx.attrString("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    ctx.fail("update_rule '" + rule + "' is not one of linear, gated, delta, gated_delta");
  const bool gated = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  if (gated != (decay != nullptr))
    ctx.fail(
        fmt::format("update_rule '{}' {} the decay input", rule, gated ? "requires" : "forbids"));
  if (delta != (beta != nullptr))
    ctx.fail(
        fmt::format("update_rule '{}' {} the beta input", rule, delta ? "requires" : "forbids"));
  for (const HostTensor* t : {&q, &k, &v, past, decay, beta})
    if (t && !isFloatComputeType(t->dtype())) ctx.fail("inputs must be float tensors");
  const int64_t hq = ctx.attrInt("q_num_heads", 0), hkv = ctx.attrInt("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    ctx.fail(
        fmt::format("q_num_heads ({}) must be a positive multiple of kv_num_heads ({})", hq, hkv));
  if (q.rank() != 3)
    ctx.fail(fmt::format("query dims {} must be [batch, time, q_num_heads * d_k]",
                         formatDims(q.dims())));
  LinearAttentionShape s{q.dim(0), q.dim(1), hq, hkv, 0, 0};
  checkRank3(ctx, k, "key", s);
  checkRank3(ctx, v, "value", s);
  if (q.dim(2) % hq != 0 || k.dim(2) != hkv * (q.dim(2) / hq) || v.dim(2) % hkv != 0)
    ctx.fail(
        fmt::format("query {}, key {} and value {} do not split into {} query and {} "
                    "key/value heads of one key size",
                    formatDims(q.dims()), formatDims(k.dims()), formatDims(v.dims()), hq, hkv));
  s.d_k = q.dim(2) / hq;
  s.d_v = v.dim(2) / hkv;
  const int64_t dk = s.d_k, dv = s.d_v, T = s.steps;
  if (past && (past->rank() != 4 || past->dims() != std::vector<int64_t>{s.batch, hkv, dk, dv}))
    ctx.fail(fmt::format("past_state dims {} must be [{}, {}, {}, {}]", formatDims(past->dims()),
                         s.batch, hkv, dk, dv));
  int64_t decay_width = 0;  // d_k when per key dim, 1 when one per head
  if (decay) {
    checkRank3(ctx, *decay, "decay", s);
    if (decay->dim(2) == hkv * dk)
      decay_width = dk;
    else if (decay->dim(2) == hkv)
      decay_width = 1;
    else
      ctx.fail(
          fmt::format("decay's last dim {} must be kv_num_heads ({}) or kv_num_heads * "
                      "d_k ({})",
                      decay->dim(2), hkv, hkv * dk));
  }
  bool beta_shared = false;  // one beta for every head
  if (beta) {
    checkRank3(ctx, *beta, "beta", s);
    if (beta->dim(2) != hkv && beta->dim(2) != 1)
      ctx.fail(fmt::format("beta's last dim {} must be kv_num_heads ({}) or 1", beta->dim(2), hkv));
    beta_shared = beta->dim(2) == 1 && hkv != 1;
  }
  const float attr_scale = ctx.attrFloat("scale", 0.0f);
  const float scale = attr_scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(dk)) : attr_scale;

  FloatView qv(q), kv(k), vv(v), pv(past), gv(decay), bv(beta);
  HostTensor& out = ctx.allocateOutput(0, q.dtype(), {s.batch, T, hq * dv});
  FloatSink ov(out);
  std::vector<float> states(static_cast<size_t>(s.batch * hkv * dk * dv), 0.0f);
  if (pv) std::copy(pv.data(), pv.data() + pv.size(), states.begin());
  const int64_t group = hq / hkv;
  parallelFor(s.batch * hkv, ctx.numThreads(), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> vt(static_cast<size_t>(dv));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / hkv, h = bh % hkv;
      float* S = states.data() + bh * dk * dv;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = b * T + t;
        const float* kt = kv.data() + row * hkv * dk + h * dk;
        const float* vsrc = vv.data() + row * hkv * dv + h * dv;
        std::copy(vsrc, vsrc + dv, vt.begin());
        if (gated) {
          const float* g = gv.data() + row * hkv * decay_width + h * decay_width;
          for (int64_t d = 0; d < dk; ++d) {
            const float f = std::exp(g[decay_width == 1 ? 0 : d]);
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= f;
          }
        }
        if (delta) {
          const float bt = bv[row * beta->dim(2) + (beta_shared ? 0 : h)];
          for (int64_t m = 0; m < dv; ++m) {
            float retrieved = 0;
            for (int64_t d = 0; d < dk; ++d) retrieved += S[d * dv + m] * kt[d];
            vt[static_cast<size_t>(m)] = bt * (vt[static_cast<size_t>(m)] - retrieved);
          }
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += kt[d] * vt[static_cast<size_t>(m)];
        for (int64_t g = h * group; g < (h + 1) * group; ++g) {
          const float* qt = qv.data() + row * hq * dk + g * dk;
          float* o = ov.data() + row * hq * dv + g * dv;
          for (int64_t m = 0; m < dv; ++m) o[m] = 0;
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) o[m] += qt[d] * S[d * dv + m];
          for (int64_t m = 0; m < dv; ++m) o[m] *= scale;
        }
      }
    }
  });
  ov.commit();
  if (ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    HostTensor& st =
        ctx.allocateOutput(1, past ? past->dtype() : q.dtype(), {s.batch, hkv, dk, dv});
    fromFloat(states.data(), st.dtype(), st.mutableRaw(), st.numel());
  }
}

}  // namespace
}  // namespace cpu

void registerLinearAttentionKernels(KernelRegistry& r) {
  r.add({"", "LinearAttention", 27, 1000, cpu::linearAttentionKernel});
}

}  // namespace fusectl::kernels
