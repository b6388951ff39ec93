// The shapes fusectl::Attention and fusectl::AttentionPacked take, checked with the messages
// both backends give (cpu/attention.cpp and cuda/attention.cu include this), and where each head
// of Q, K, V and Y lies in memory: a head's rows are `row` elements apart, head h of batch b
// starts at b * batch + h * head (K and V head h / G for query head h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

struct AttentionShape {
  int64_t B = 0, Hq = 0, Hkv = 0, S = 0, T = 0, D = 0, Dv = 0;
};

struct HeadStrides {
  int64_t batch = 0, head = 0, row = 0;
};

struct AttentionStrides {
  HeadStrides q, k, v, y;
  // Where K and V start in AttentionPacked's X, in elements (Q at 0); 0 for Attention, whose
  // Q, K and V are tensors of their own.
  int64_t k_offset = 0, v_offset = 0;
};

// Attention: Q [B, Hq, S, D], K [B, Hkv, T, D], V [B, Hkv, T, Dv], Hq a multiple of Hkv.
inline AttentionShape attentionShape(const KernelContext& ctx, const HostTensor& q,
                                     const HostTensor& k, const HostTensor& v) {
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    ctx.fail("Q, K and V must have rank 4 ([batch, heads, sequence, head size])");
  AttentionShape a;
  a.B = q.dims()[0], a.Hq = q.dims()[1], a.S = q.dims()[2], a.D = q.dims()[3];
  a.Hkv = k.dims()[1], a.T = k.dims()[2], a.Dv = v.dims()[3];
  if (k.dims()[0] != a.B || v.dims()[0] != a.B || k.dims()[3] != a.D || v.dims()[1] != a.Hkv ||
      v.dims()[2] != a.T) {
    ctx.fail("Q " + formatDims(q.dims()) + ", K " + formatDims(k.dims()) + " and V " +
             formatDims(v.dims()) + " do not agree ([B,Hq,S,D], [B,Hkv,T,D], [B,Hkv,T,Dv])");
  }
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0)
    ctx.fail(std::to_string(a.Hq) + " query heads are not a multiple of " +
             std::to_string(a.Hkv) + " key/value heads");
  return a;
}

// Each head its own [rows, D] block: Attention's inputs and output.
inline AttentionStrides blockStrides(const AttentionShape& a) {
  AttentionStrides s;
  s.q = {a.Hq * a.S * a.D, a.S * a.D, a.D};
  s.k = {a.Hkv * a.T * a.D, a.T * a.D, a.D};
  s.v = {a.Hkv * a.T * a.Dv, a.T * a.Dv, a.Dv};
  s.y = {a.Hq * a.S * a.Dv, a.S * a.Dv, a.Dv};
  return s;
}

// AttentionPacked: X [B, S, (Hq + 2 Hkv) D] from the node's num_heads and kv_num_heads; T = S,
// Dv = D.
inline AttentionShape packedAttentionShape(const KernelContext& ctx, const HostTensor& x) {
  if (x.rank() != 3) ctx.fail("X must have rank 3 ([batch, sequence, (Hq + 2 Hkv) * head size])");
  AttentionShape a;
  a.Hq = ctx.attrInt("num_heads", 0);
  a.Hkv = ctx.attrInt("kv_num_heads", a.Hq);
  if (a.Hq <= 0 || a.Hkv <= 0 || a.Hq % a.Hkv != 0) {
    ctx.fail("num_heads " + std::to_string(a.Hq) + " and kv_num_heads " + std::to_string(a.Hkv) +
             " must be positive, num_heads a multiple of kv_num_heads");
  }
  a.B = x.dims()[0], a.S = a.T = x.dims()[1];
  const int64_t width = x.dims()[2], heads = a.Hq + 2 * a.Hkv;
  if (width % heads != 0) {
    ctx.fail("X " + formatDims(x.dims()) + " does not hold " + std::to_string(heads) +
             " heads of one size (num_heads " + std::to_string(a.Hq) + " + 2 x kv_num_heads " +
             std::to_string(a.Hkv) + ")");
  }
  a.D = a.Dv = width / heads;
  return a;
}

// The heads side by side in each row of X, and merged in each row of Y [B, S, Hq D].
inline AttentionStrides packedStrides(const AttentionShape& a) {
  const int64_t width = (a.Hq + 2 * a.Hkv) * a.D;
  AttentionStrides s;
  s.q = s.k = s.v = {a.S * width, a.D, width};
  s.y = {a.S * a.Hq * a.D, a.D, a.Hq * a.D};
  s.k_offset = a.Hq * a.D;
  s.v_offset = (a.Hq + a.Hkv) * a.D;
  return s;
}

// AttentionPackedRotary's Cos and Sin: one shape, an even head size, and a broadcast into every
// head [B, H, S, D] alike (H = 1 stands for all of them, so a table with a head dim other than 1
// is refused). Row s of batch b of a table starts b * strides.b + s * strides.s elements in (a
// stride is 0 along a broadcast dim); the row is D wide.
struct RotaryTableStrides {
  int64_t b = 0, s = 0;
};

inline RotaryTableStrides packedRotaryTableStrides(const KernelContext& ctx,
                                                   const AttentionShape& a,
                                                   const HostTensor& cos, const HostTensor& sin) {
  if (cos.dims() != sin.dims()) ctx.fail("Cos and Sin differ in shape");
  if (a.D % 2 != 0)
    ctx.fail("head size " + std::to_string(a.D) + " is odd; rotate_half needs it even");
  const std::vector<int64_t> strides =
      cpu::rotaryTableStrides(ctx, {a.B, 1, a.S, a.D}, cos, "Cos");
  return {strides[0], strides[2]};
}

// The additive mask's element strides over the scores [B, Hq, S, T] (0 along a broadcast dim).
struct MaskStrides {
  int64_t b = 0, h = 0, s = 0, t = 0;
};

inline MaskStrides maskStrides(const KernelContext& ctx, const std::vector<int64_t>& dims,
                               const AttentionShape& a) {
  if (dims.size() > 4) ctx.fail("mask M has rank " + std::to_string(dims.size()) + ", more than 4");
  const int64_t target[4] = {a.B, a.Hq, a.S, a.T};
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

}  // namespace fusectl::kernels
