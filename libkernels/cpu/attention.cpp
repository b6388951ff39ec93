// fusectl::Attention (fused_ops.def): softmax(scale * Q * K^T + M, causal) * V per head, with
// grouped-query heads (G = Hq / Hkv query heads read one key/value head).
//
// Layout: per (batch, query head) block, the S x T score block is computed by the packed GEMM
// (gemm_micro.h, alpha = scale, K read transposed in place through its strides), then each
// score row gets the mask and the causal cut applied and a max-subtracted softmax
// (vec::softmaxRow), and the probabilities multiply V with the same GEMM. This is the simple
// per-row layout, not a flash-style tiled loop with an online softmax: a block keeps its whole
// S x T score matrix (1 MiB at S = T = 512), which still sits in L2 and is read three times.
// Blocks run in parallel; each GEMM runs on its block's thread, so the result does not depend
// on the thread count. Non-float32 inputs are converted to float32 once (FloatView).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compute_common.h"
#include "gemm_micro.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// The mask's element strides over [B, H, S, T] (0 along a broadcast dim).
struct MaskStrides {
  int64_t b = 0, h = 0, s = 0, t = 0;
};

MaskStrides maskStrides(const KernelContext& ctx, const std::vector<int64_t>& dims,
                        const int64_t (&target)[4]) {
  if (dims.size() > 4) ctx.fail("mask M has rank " + std::to_string(dims.size()) + ", more than 4");
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t s = 1;
  const size_t off = 4 - dims.size();
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    const int64_t d = dims[static_cast<size_t>(i)];
    const int64_t want = target[off + static_cast<size_t>(i)];
    if (d != 1 && d != want) {
      ctx.fail("mask M of shape " + formatDims(dims) + " does not broadcast to the scores [" +
               std::to_string(target[0]) + "," + std::to_string(target[1]) + "," +
               std::to_string(target[2]) + "," + std::to_string(target[3]) + "]");
    }
    strides[off + static_cast<size_t>(i)] = d == 1 ? 0 : s;
    s *= d;
  }
  return {strides[0], strides[1], strides[2], strides[3]};
}

void runAttention(KernelContext& ctx) {
  const HostTensor& q = ctx.requireInput(0);
  const HostTensor& k = ctx.requireInput(1);
  const HostTensor& v = ctx.requireInput(2);
  const HostTensor* m = ctx.input(3);
  for (const HostTensor* t : {&q, &k, &v, m}) {
    if (t && !isFloatComputeType(t->dtype()))
      ctx.fail("unsupported element type " + std::string(dtypeName(t->dtype())));
  }
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    ctx.fail("Q, K and V must have rank 4 ([batch, heads, sequence, head size])");
  const int64_t B = q.dims()[0], Hq = q.dims()[1], S = q.dims()[2], D = q.dims()[3];
  const int64_t Hkv = k.dims()[1], T = k.dims()[2], Dv = v.dims()[3];
  if (k.dims()[0] != B || v.dims()[0] != B || k.dims()[3] != D || v.dims()[1] != Hkv ||
      v.dims()[2] != T) {
    ctx.fail("Q " + formatDims(q.dims()) + ", K " + formatDims(k.dims()) + " and V " +
             formatDims(v.dims()) + " do not agree ([B,Hq,S,D], [B,Hkv,T,D], [B,Hkv,T,Dv])");
  }
  if (Hkv <= 0 || Hq % Hkv != 0)
    ctx.fail(std::to_string(Hq) + " query heads are not a multiple of " + std::to_string(Hkv) +
             " key/value heads");
  const int64_t group = Hq / Hkv;
  const float scale = ctx.attrFloat("scale", 1.f / std::sqrt(static_cast<float>(D)));
  const bool causal = ctx.attrInt("causal", 0) != 0;
  const int64_t scores_dims[4] = {B, Hq, S, T};
  const MaskStrides ms = m ? maskStrides(ctx, m->dims(), scores_dims) : MaskStrides{};

  FloatView qf(q), kf(k), vf(v), mf(m);
  HostTensor& y = ctx.allocateOutput(0, q.dtype(), {B, Hq, S, Dv});
  FloatSink ys(y);
  const int64_t blocks = B * Hq;
  parallelFor(blocks, ctx.numThreads(), 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(static_cast<size_t>(S * T));
    for (int64_t block = first; block < last; ++block) {
      const int64_t b = block / Hq, h = block % Hq, kv = b * Hkv + h / group;
      const float* qb = qf.data() + block * S * D;
      const float* kb = kf.data() + kv * T * D;
      const float* vb = vf.data() + kv * T * Dv;
      float* yb = ys.data() + block * S * Dv;
      GemmParams qk = gemmParams(S, T, D, qb, D, false, kb, D, true, scores.data(), T);
      qk.alpha = scale;
      gemm(qk, 1);
      for (int64_t s = 0; s < S; ++s) {
        float* row = scores.data() + s * T;
        if (mf) {
          const float* mrow = mf.data() + b * ms.b + h * ms.h + s * ms.s;
          if (ms.t == 0) {
            for (int64_t t = 0; t < T; ++t) row[t] += mrow[0];
          } else {
            for (int64_t t = 0; t < T; ++t) row[t] += mrow[t];
          }
        }
        // Keys after s + T - S are hidden; a row that sees none (S > T) gets zeros.
        const int64_t visible = causal ? std::clamp<int64_t>(s + T - S + 1, 0, T) : T;
        if (visible == 0) {
          std::fill(row, row + T, 0.f);
          continue;
        }
        vec::softmaxRow(row, row, visible, false);
        std::fill(row + visible, row + T, 0.f);
      }
      gemm(gemmParams(S, Dv, T, scores.data(), T, false, vb, Dv, false, yb, Dv), 1);
    }
  });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerAttentionKernels(KernelRegistry& r) {
  r.add({"fusectl", "Attention", 1, 1000, cpu::runAttention});
}

}  // namespace fusectl::kernels
