// fusectl::Attention (fused_ops.def): softmax(scale * Q * K^T + M, causal) * V per head, with
// grouped-query heads (G = Hq / Hkv query heads read one key/value head).
//
// Two layouts, per (batch, query head) block, both on the packed GEMM (gemm_micro.h, alpha =
// scale, K read transposed in place through its strides):
//  - whole blocks: the S x T score block is computed, each row gets the mask, the causal cut and
//    a max-subtracted softmax (vec::softmaxRow), and the probabilities multiply V.
//  - tiles (useTiles: causal with T >= 512, or any block of 4M scores or more): flash-style. Query tiles of kQueryTile rows walk the keys in tiles of kKeyTile
//    with an online softmax (a running row max m and sum l; when m grows, what was accumulated
//    is scaled by exp(m_old - m_new)), so no score matrix larger than kQueryTile x kKeyTile
//    (32 KiB) ever exists, and causal key tiles past a query tile's last visible key are not
//    computed at all. The sums are taken in another order than the one-pass softmax's, so the
//    two layouts agree to rounding, not bit for bit.
// Blocks run in parallel; each GEMM runs on its block's thread, so the result does not depend
// on the thread count. Non-float32 inputs (all four of one type) are converted to float32 once
// (FloatView) and Y is rounded to their type once (FloatSink).
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

constexpr int64_t kQueryTile = 256, kKeyTile = 256;

// Measured with bench/bench_attention (12 heads of 64, 1 thread, bench/README.md): causal, the
// tiles skip the key tiles past the diagonal and win from 512 keys on (30.6 against 46.2 ms at
// 1024); without the cut, the whole block's one large GEMM is faster until the block stops
// fitting in cache, and they are even at 2048 x 2048 (16 MiB of scores per block and thread,
// which the tiles never allocate).
bool useTiles(int64_t S, int64_t T, bool causal) {
  return (causal && T >= 512) || S * T >= int64_t{2048} * 2048;
}

// One (batch, head) block in the flash-style layout (see the top of the file). `mask` is the
// block's mask at [s = 0, t = 0] with its s/t strides, or null.
void attentionTiled(const float* q, const float* k, const float* v, float* y, int64_t S,
                    int64_t T, int64_t D, int64_t Dv, float scale, bool causal, const float* mask,
                    int64_t mask_s, int64_t mask_t) {
  std::vector<float> scores(static_cast<size_t>(kQueryTile * kKeyTile));
  std::vector<float> row_max(static_cast<size_t>(kQueryTile));
  std::vector<float> row_sum(static_cast<size_t>(kQueryTile));
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  for (int64_t s0 = 0; s0 < S; s0 += kQueryTile) {
    const int64_t rows = std::min(kQueryTile, S - s0);
    float* out = y + s0 * Dv;
    std::fill(out, out + rows * Dv, 0.f);
    std::fill(row_max.begin(), row_max.end(), kNone);
    std::fill(row_sum.begin(), row_sum.end(), 0.f);
    // Row s sees keys [0, s + T - S]; the tile's last row sees the most.
    const int64_t keys = causal ? std::clamp<int64_t>(s0 + rows - 1 + T - S + 1, 0, T) : T;
    for (int64_t t0 = 0; t0 < keys; t0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, keys - t0);
      GemmParams qk = gemmParams(rows, cols, D, q + s0 * D, D, false, k + t0 * D, D, true,
                                 scores.data(), kKeyTile);
      qk.alpha = scale;
      gemm(qk, 1);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores.data() + r * kKeyTile;
        const int64_t s = s0 + r;
        if (mask) {
          const float* mrow = mask + s * mask_s + t0 * mask_t;
          if (mask_t == 0) {
            for (int64_t j = 0; j < cols; ++j) row[j] += mrow[0];
          } else {
            for (int64_t j = 0; j < cols; ++j) row[j] += mrow[j];
          }
        }
        const int64_t visible =
            causal ? std::clamp<int64_t>(s + T - S + 1 - t0, 0, cols) : cols;
        std::fill(row + visible, row + cols, 0.f);
        if (visible == 0) continue;
        const float tile_max = vec::max(row, visible);
        const float m_new = std::max(row_max[static_cast<size_t>(r)], tile_max);
        // exp(-inf) = 0 clears the row's (zero) accumulator on its first visible tile.
        const float correction = std::exp(row_max[static_cast<size_t>(r)] - m_new);
        for (int64_t j = 0; j < visible; ++j) row[j] -= m_new;
        vec::unary(vec::Unary::Exp, row, row, visible);
        float tile_sum = 0.f;
        for (int64_t j = 0; j < visible; ++j) tile_sum += row[j];
        row_sum[static_cast<size_t>(r)] = row_sum[static_cast<size_t>(r)] * correction + tile_sum;
        row_max[static_cast<size_t>(r)] = m_new;
        if (correction != 1.f) {
          float* o = out + r * Dv;
          for (int64_t d = 0; d < Dv; ++d) o[d] *= correction;
        }
      }
      GemmParams pv = gemmParams(rows, Dv, cols, scores.data(), kKeyTile, false, v + t0 * Dv, Dv,
                                 false, out, Dv);
      pv.accumulate = true;
      gemm(pv, 1);
    }
    // A row that sees no key (S > T, causal) keeps zeros, as in the short layout.
    for (int64_t r = 0; r < rows; ++r) {
      const float l = row_sum[static_cast<size_t>(r)];
      if (l == 0.f) continue;
      const float inv = 1.f / l;
      float* o = out + r * Dv;
      for (int64_t d = 0; d < Dv; ++d) o[d] *= inv;
    }
  }
}

void runAttention(KernelContext& ctx) {
  const HostTensor& q = ctx.requireInput(0);
  const HostTensor& k = ctx.requireInput(1);
  const HostTensor& v = ctx.requireInput(2);
  const HostTensor* m = ctx.input(3);
  if (!isFloatComputeType(q.dtype()))
    ctx.fail("unsupported element type " + std::string(dtypeName(q.dtype())));
  requireSameDType(ctx, q, "Q", &k, "K");
  requireSameDType(ctx, q, "Q", &v, "V");
  requireSameDType(ctx, q, "Q", m, "M");
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
  const bool tiled = useTiles(S, T, causal);
  parallelFor(blocks, ctx.numThreads(), 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(tiled ? 0 : static_cast<size_t>(S * T));
    for (int64_t block = first; block < last; ++block) {
      const int64_t b = block / Hq, h = block % Hq, kv = b * Hkv + h / group;
      const float* qb = qf.data() + block * S * D;
      const float* kb = kf.data() + kv * T * D;
      const float* vb = vf.data() + kv * T * Dv;
      float* yb = ys.data() + block * S * Dv;
      if (tiled) {
        const float* mb = mf ? mf.data() + b * ms.b + h * ms.h : nullptr;
        attentionTiled(qb, kb, vb, yb, S, T, D, Dv, scale, causal, mb, ms.s, ms.t);
        continue;
      }
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
