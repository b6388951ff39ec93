// fusectl::Attention (fused_ops.def): softmax(scale * Q * K^T + M, causal) * V per head, with
// grouped-query heads (G = Hq / Hkv query heads read one key/value head); and
// fusectl::AttentionPacked, the same computation reading its heads from one merged q/k/v
// projection and writing them merged, with row strides instead of copies.
//
// Two layouts, per (batch, query head) block, both on the packed GEMM (gemm_micro.h, alpha =
// scale, K read transposed through its strides):
//  - whole blocks (fewer than 512 queries and keys): the S x T score block is computed, then
//    each row gets the mask, the causal cut and a max-subtracted softmax in one vector routine
//    (vec::softmaxRowsAdd, a pass at a time over groups of rows), and the probabilities
//    multiply V.
//  - tiles (useTiles: 512 queries or keys and up): flash-style. The keys are walked in tiles of
//    kKeyTile, each tile's K^T and V packed once, and the queries in tiles of kQueryTile under
//    them, with an online softmax (a running row max m and sum l; when m grows, what was
//    accumulated is scaled by exp(m_old - m_new)), so no score matrix larger than kQueryTile x
//    kKeyTile (256 KiB) ever exists, and causal key tiles past a query's last visible key are
//    not computed at all. The sums are taken in another order than the one-pass softmax's, so
//    the two layouts agree to rounding, not bit for bit.
// fusectl::AttentionPackedRotary rotates each block's q and k rows (RotaryEmbedding's
// rotate_half, vec::rotateHalfRow as RotaryEmbedding's kernel) into two buffers of S x D floats
// of the block's thread as it starts, and runs the same block on them; the separate nodes wrote
// five tensors of the heads' size (three head splits, two rotations) and read them back.
// Blocks run in parallel; each GEMM runs on its block's thread, so the result does not depend
// on the thread count. Non-float32 inputs (all four of one type) are converted to float32 once
// (FloatView) and Y is rounded to their type once (FloatSink).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention_shape.h"
#include "compute_common.h"
#include "gemm_micro.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

constexpr int64_t kQueryTile = 256, kKeyTile = 256;

// From 512 queries or keys on, a head's scores never exist whole (issue 13). Measured with
// bench/bench_attention (12 heads of 64, 1 thread, bench/README.md), once the tiles packed each
// key tile once and took their softmax in vector passes: not causal, the tiles and the whole
// block are level at 512 and 1024 (6.0 / 22.6 ms against 5.8-6.1 / 22.5-24.1) and the tiles
// faster at 2048 (87-90 against 96-98 ms); causal, the tiles skip the key tiles past the
// diagonal (4.9 / 15.0 ms against 5.7 / 21.6 at 512 / 1024). At 128 the whole block is 2-3%
// faster (V read in place, no rescaling), so shorter blocks keep it.
bool useTiles(int64_t S, int64_t T) { return std::max(S, T) >= 512; }

// One (batch, head) block in the flash-style layout (see the top of the file). `mask` is the
// block's mask at [s = 0, t = 0] with its s/t strides, or null. The key tiles are the outer
// loop: each tile's K^T and V are packed once for all query tiles (as the GEMM's B operand),
// while every query row keeps its running maximum and sum, and its output row accumulates in y.
void attentionTiled(const float* q, const float* k, const float* v, float* y, int64_t S,
                    int64_t T, int64_t D, int64_t Dv, const AttentionStrides& st, float scale,
                    bool causal, const float* mask, int64_t mask_s, int64_t mask_t) {
  thread_local std::vector<float> scores, row_max, row_sum;
  scores.resize(static_cast<size_t>(kQueryTile * kKeyTile));
  row_max.assign(static_cast<size_t>(S), -std::numeric_limits<float>::infinity());
  row_sum.assign(static_cast<size_t>(S), 0.f);
  for (int64_t s = 0; s < S; ++s) std::fill(y + s * st.y.row, y + s * st.y.row + Dv, 0.f);
  for (int64_t t0 = 0; t0 < T; t0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, T - t0);
    // Row s sees keys [0, s + T - S]: the rows before first_row see none of this tile.
    const int64_t first_row = causal ? std::max<int64_t>(0, t0 - (T - S)) : 0;
    if (first_row >= S) break;
    const PackedMatrix kt = packGemmB(D, cols, k + t0 * st.k.row, 1, st.k.row);
    const PackedMatrix vt = packGemmB(cols, Dv, v + t0 * st.v.row, st.v.row, 1);
    for (int64_t s0 = first_row / kQueryTile * kQueryTile; s0 < S; s0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, S - s0);
      GemmParams qk = gemmParams(rows, cols, D, q + s0 * st.q.row, st.q.row, false,
                                 k + t0 * st.k.row, st.k.row, true, scores.data(), kKeyTile);
      qk.alpha = scale;
      qk.packed_b = &kt;
      gemm(qk, 1);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores.data() + r * kKeyTile;
        const int64_t s = s0 + r;
        const int64_t visible =
            causal ? std::clamp<int64_t>(s + T - S + 1 - t0, 0, cols) : cols;
        std::fill(row + visible, row + cols, 0.f);
        if (visible == 0) continue;
        const float* mrow = mask ? mask + s * mask_s + t0 * mask_t : nullptr;
        const float old_max = row_max[static_cast<size_t>(s)];
        const float tile_sum =
            vec::onlineSoftmaxRow(row, visible, mrow, mask_t == 0, &row_max[static_cast<size_t>(s)]);
        // exp(-inf) = 0 clears the row's (zero) accumulator on its first visible tile.
        const float correction = std::exp(old_max - row_max[static_cast<size_t>(s)]);
        row_sum[static_cast<size_t>(s)] = row_sum[static_cast<size_t>(s)] * correction + tile_sum;
        if (correction != 1.f) {
          float* o = y + s * st.y.row;
          for (int64_t d = 0; d < Dv; ++d) o[d] *= correction;
        }
      }
      GemmParams pv = gemmParams(rows, Dv, cols, scores.data(), kKeyTile, false, v + t0 * st.v.row,
                                 st.v.row, false, y + s0 * st.y.row, st.y.row);
      pv.packed_b = &vt;
      pv.accumulate = true;
      gemm(pv, 1);
    }
  }
  // A row that sees no key (S > T, causal) keeps zeros, as in the short layout.
  for (int64_t s = 0; s < S; ++s) {
    const float l = row_sum[static_cast<size_t>(s)];
    if (l == 0.f) continue;
    const float inv = 1.f / l;
    float* o = y + s * st.y.row;
    for (int64_t d = 0; d < Dv; ++d) o[d] *= inv;
  }
}

// AttentionPackedRotary's tables (attention_shape.h), the same for every head.
struct RotaryTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  RotaryTableStrides rows;
};

// `rows` rows of one head, `stride` apart, rotated into `out` (rows of D).
void rotateHeadRows(const float* x, int64_t stride, int64_t rows, int64_t D, int64_t b,
                    const RotaryTables& rot, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = b * rot.rows.b + r * rot.rows.s;
    vec::rotateHalfRow(x + r * stride, out + r * D, D / 2, rot.cos + at, rot.sin + at);
  }
}

// One attention over B batches of Hq query heads, laid out as `st` says (attention_shape.h);
// k and v point at K's and V's first head. With `rot`, each block's q and k rows are rotated
// first (AttentionPackedRotary).
void computeAttention(KernelContext& ctx, const AttentionShape& L, const AttentionStrides& st_in,
                      const float* q, const float* k, const float* v, const float* mask,
                      const MaskStrides& ms, float* y, const RotaryTables* rot = nullptr) {
  const int64_t group = L.Hq / L.Hkv;
  const float scale = ctx.attrFloat("scale", 1.f / std::sqrt(static_cast<float>(L.D)));
  const bool causal = ctx.attrInt("causal", 0) != 0;
  const int64_t S = L.S, T = L.T, D = L.D, Dv = L.Dv;
  const int64_t blocks = L.B * L.Hq;
  const bool tiled = useTiles(S, T);
  parallelFor(blocks, ctx.numThreads(), 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(tiled ? 0 : static_cast<size_t>(S * T));
    std::vector<float> q_rotated(rot ? static_cast<size_t>(S * D) : 0);
    std::vector<float> k_rotated(rot ? static_cast<size_t>(T * D) : 0);
    AttentionStrides st = st_in;
    int64_t rotated_kv = -1;  // the (batch, kv head) whose k rows k_rotated holds
    for (int64_t block = first; block < last; ++block) {
      const int64_t b = block / L.Hq, h = block % L.Hq, kvh = h / group;
      const float* qb = q + b * st_in.q.batch + h * st_in.q.head;
      const float* kb = k + b * st_in.k.batch + kvh * st_in.k.head;
      if (rot) {
        // The G query heads of a group follow each other: their k rows are rotated once.
        rotateHeadRows(qb, st_in.q.row, S, D, b, *rot, q_rotated.data());
        if (rotated_kv != b * L.Hkv + kvh) {
          rotateHeadRows(kb, st_in.k.row, T, D, b, *rot, k_rotated.data());
          rotated_kv = b * L.Hkv + kvh;
        }
        qb = q_rotated.data();
        kb = k_rotated.data();
        st.q.row = st.k.row = D;
      }
      const float* vb = v + b * st.v.batch + kvh * st.v.head;
      float* yb = y + b * st.y.batch + h * st.y.head;
      if (tiled) {
        const float* mb = mask ? mask + b * ms.b + h * ms.h : nullptr;
        attentionTiled(qb, kb, vb, yb, S, T, D, Dv, st, scale, causal, mb, ms.s, ms.t);
        continue;
      }
      GemmParams qk =
          gemmParams(S, T, D, qb, st.q.row, false, kb, st.k.row, true, scores.data(), T);
      qk.alpha = scale;
      gemm(qk, 1);
      // Keys after s + T - S are hidden from row s; a row that sees none (S > T) gets zeros.
      vec::softmaxRowsAdd(scores.data(), S, T, causal ? T - S + 1 : T, causal ? 1 : 0,
                          mask ? mask + b * ms.b + h * ms.h : nullptr, ms.s, ms.t == 0);
      GemmParams pv =
          gemmParams(S, Dv, T, scores.data(), T, false, vb, st.v.row, false, yb, st.y.row);
      pv.a_in_place = true;
      gemm(pv, 1);
    }
  });
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
  const AttentionShape a = attentionShape(ctx, q, k, v);
  const MaskStrides ms = m ? maskStrides(ctx, m->dims(), a) : MaskStrides{};

  FloatView qf(q), kf(k), vf(v), mf(m);
  HostTensor& y = ctx.allocateOutput(0, q.dtype(), {a.B, a.Hq, a.S, a.Dv});
  FloatSink ys(y);
  computeAttention(ctx, a, blockStrides(a), qf.data(), kf.data(), vf.data(),
                   mf ? mf.data() : nullptr, ms, ys.data());
  ys.commit();
}

// AttentionPacked: X [B, S, (Hq + 2 Hkv) * D] holds the q, k and v heads of each position side
// by side; Y [B, S, Hq * D] the merged heads. Each head is read and written with a row stride,
// so neither the three slices nor the head split and merge are ever copied.
// AttentionPackedRotary (`rotary`): inputs 2 and 3 are the rotary tables, which must broadcast
// into every head [B, H, S, D] alike (no head dim other than 1).
void runAttentionPacked(KernelContext& ctx, bool rotary) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor* m = ctx.input(1);
  if (!isFloatComputeType(x.dtype()))
    ctx.fail("unsupported element type " + std::string(dtypeName(x.dtype())));
  requireSameDType(ctx, x, "X", m, "M");
  const AttentionShape a = packedAttentionShape(ctx, x);
  const MaskStrides ms = m ? maskStrides(ctx, m->dims(), a) : MaskStrides{};

  const HostTensor* cos_t = rotary ? &ctx.requireInput(2) : nullptr;
  const HostTensor* sin_t = rotary ? &ctx.requireInput(3) : nullptr;
  RotaryTables rot;
  if (rotary) {
    requireSameDType(ctx, x, "X", cos_t, "Cos");
    requireSameDType(ctx, x, "X", sin_t, "Sin");
    rot.rows = packedRotaryTableStrides(ctx, a, *cos_t, *sin_t);
  }
  FloatView xf(x), mf(m), cf(cos_t), sf(sin_t);
  rot.cos = cf ? cf.data() : nullptr;
  rot.sin = sf ? sf.data() : nullptr;
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), {a.B, a.S, a.Hq * a.D});
  FloatSink ys(y);
  const AttentionStrides st = packedStrides(a);
  const float* base = xf.data();
  computeAttention(ctx, a, st, base, base + st.k_offset, base + st.v_offset,
                   mf ? mf.data() : nullptr, ms, ys.data(), rotary ? &rot : nullptr);
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerAttentionKernels(KernelRegistry& r) {
  r.add({"fusectl", "Attention", 1, 1000, cpu::runAttention});
  r.add({"fusectl", "AttentionPacked", 1, 1000,
         [](KernelContext& c) { cpu::runAttentionPacked(c, /*rotary=*/false); }});
  r.add({"fusectl", "AttentionPackedRotary", 1, 1000,
         [](KernelContext& c) { cpu::runAttentionPacked(c, /*rotary=*/true); }});
}

}  // namespace fusectl::kernels
