// fusectl::Attention on the device (fused_ops.def; the CPU kernel is cpu/attention.cpp, whose
// results this one reproduces to rounding): Y = softmax(scale * Q K^T + M, causal) V per
// (batch, query head), K/V head h / G serving query head h; and fusectl::AttentionPacked, the
// same kernel reading the heads of one merged q/k/v projection and writing them merged, through
// the per-tensor batch, head and row strides of Params; AttentionPackedRotary rotates the q and
// k rows as it stages them (headValue).
//
// Flash-attention style on the CUDA cores (fp32 FMAs whatever the storage, so that fp16 and
// bf16 sum the way the CPU's FloatView does): one block of kWarps warps takes kRowsPerWarp
// query rows per warp of one (batch, head) and walks the keys in tiles of BN. Each tile of K
// and V is staged in shared memory as float; each lane scores BN / 32 keys against its warp's
// rows, the rows keep a running max and sum (online softmax: when the max grows, what was
// accumulated is scaled by exp(m_old - m_new)), and the probabilities go from registers to the
// V product by warp shuffles. No score ever reaches global memory; the memory is O(BM x D)
// per block.
//
// Semantics kept from the CPU kernel: the mask is added after the scale, then the causal cut
// (key t hidden from query s when t > s + T - S, bottom-right aligned); a row that sees no key
// (causal, S > T) is zeros; a row whose visible scores hold a NaN or +inf or are all -inf is
// NaN, as vec::softmaxRow makes it. The head size (D, and Dv of V) picks a template bucket of
// 64, 128 or 256.
//
// Q, K, V: float32, float16 or bfloat16 (all one type); the mask any of the three, whatever Q
// is. Not run here, so on the CPU: heads larger than 256, K or V of another dtype than Q, a
// mask of another type. The registration's `accepts` declines such nodes from their
// declared types and dims; what only the run shows throws fusectl::Error(Unsupported).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../cpu/attention_shape.h"
#include "cuda_common.h"
#include "cuda_device_util.cuh"
#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {
namespace {

constexpr int64_t kMaxHead = 256;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // BM: query rows per block
constexpr unsigned kFullMask = 0xffffffffu;

// Per head-size bucket DMAX (a multiple of 32, at least max(D, Dv)): the key tile BN and the
// shared memory it takes. 256 takes BN = 32 so that two blocks still fit on an SM (about
// 97 KiB each) instead of one.
template <int DMAX> struct Bucket {
  static_assert(DMAX % 32 == 0 && DMAX >= 64 && DMAX <= 256, "head-size bucket");
  static constexpr int kKeys = DMAX <= 128 ? 64 : 32;  // BN
  static constexpr int kKeysPerLane = kKeys / 32;
  // K's row stride in float4s is odd, so the 8 lanes of each quarter-warp that read 8
  // different K rows at one column (128-bit loads) hit 8 different bank groups.
  static constexpr int kKStride = DMAX + 4;
  static constexpr int kChunks = DMAX / 32;  // V columns per lane: lane + 32 * i
  static constexpr size_t kSmemFloats = static_cast<size_t>(kBlockRows) * DMAX +
                                        static_cast<size_t>(kKeys) * kKStride +
                                        static_cast<size_t>(kKeys) * DMAX;
  static constexpr size_t kSmemBytes = kSmemFloats * sizeof(float);
};

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;  // null: no mask
  void* y;
  int64_t S, T, Hq, Hkv, group;
  int D, Dv;
  float scale;
  int causal;
  int64_t mask_b, mask_h, mask_s, mask_t;  // element strides over [B, Hq, S, T], 0 = broadcast
  int64_t query_blocks;                    // ceil(S / BM)
  // Where each head of q, k, v and y lies (attention_shape.h): [B, H, S, D] blocks for
  // Attention; rows of the merged projection (and of the merged heads) for AttentionPacked.
  AttentionStrides at;
  // AttentionPackedRotary: the rotary tables (Q's element type; null: no rotation), row s of
  // batch b at b * rot_b + s * rot_s, the same for every head.
  const void* cos;
  const void* sin;
  int64_t rot_b, rot_s;
};

// Element d of row `row` (position `pos`) of one q or k head, rotated as RotaryEmbedding's
// rotate_half does when the node carries tables (vec::rotateHalfRow on the CPU:
// x * cos + (-x2) * sin).
template <typename Elem>
__device__ __forceinline__ float headValue(const Params& p, const Elem* __restrict__ row,
                                           int64_t b, int64_t pos, int d, int D) {
  const float x = toFloat(row[d]);
  if (!p.cos) return x;
  const int half = D / 2;
  const int64_t at = b * p.rot_b + pos * p.rot_s + d;
  const float c = toFloat(static_cast<const Elem*>(p.cos)[at]);
  const float s = toFloat(static_cast<const Elem*>(p.sin)[at]);
  return d < half ? __fadd_rn(__fmul_rn(x, c), __fmul_rn(-toFloat(row[d + half]), s))
                  : __fadd_rn(__fmul_rn(x, c), __fmul_rn(toFloat(row[d - half]), s));
}

// Keys [0, visibleKeys(s)) are the ones query row s attends to.
__device__ __forceinline__ int64_t visibleKeys(const Params& p, int64_t s) {
  if (!p.causal) return p.T;
  const int64_t n = s + p.T - p.S + 1;
  return n < 0 ? 0 : (n > p.T ? p.T : n);
}

template <typename Elem, typename MaskElem, int DMAX>
__global__ void __launch_bounds__(kThreads) attentionKernel(Params p) {
  using B = Bucket<DMAX>;
  constexpr int BN = B::kKeys;
  constexpr int KPL = B::kKeysPerLane;
  constexpr int R = kRowsPerWarp;

  extern __shared__ float4 smem4[];  // float4: the QK loop reads 128 bits at a time
  float* sQ = reinterpret_cast<float*>(smem4);  // [BM][DMAX]
  float* sK = sQ + kBlockRows * DMAX;           // [BN][kKStride]
  float* sV = sK + BN * B::kKStride;            // [BN][DMAX]

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  // Query blocks of one head are adjacent (they share K/V in L2), and the last one, which has
  // the most keys to see when causal, is scheduled first.
  int64_t block = blockIdx.x;
  const int64_t qb = p.query_blocks - 1 - block % p.query_blocks;
  block /= p.query_blocks;
  const int64_t h = block % p.Hq;
  const int64_t b = block / p.Hq;
  const int64_t kvh = h / p.group;

  const AttentionStrides& at = p.at;
  const Elem* __restrict__ q = static_cast<const Elem*>(p.q) + b * at.q.batch + h * at.q.head;
  const Elem* __restrict__ k = static_cast<const Elem*>(p.k) + b * at.k.batch + kvh * at.k.head;
  const Elem* __restrict__ v = static_cast<const Elem*>(p.v) + b * at.v.batch + kvh * at.v.head;
  const MaskElem* __restrict__ mask =
      p.mask ? static_cast<const MaskElem*>(p.mask) + b * p.mask_b + h * p.mask_h : nullptr;
  Elem* __restrict__ y = static_cast<Elem*>(p.y) + b * at.y.batch + h * at.y.head;

  const int D = p.D, Dv = p.Dv;
  const int DP = (D + 3) & ~3;  // D padded with zeros to whole float4s
  const int64_t s0 = qb * kBlockRows;
  const int64_t block_last = (s0 + kBlockRows < p.S ? s0 + kBlockRows : p.S) - 1;
  const int64_t keys_end = visibleKeys(p, block_last);
  const int64_t warp_first = s0 + warp * R;
  const int64_t warp_keys_end =
      warp_first < p.S
          ? visibleKeys(p, (warp_first + R < p.S ? warp_first + R : p.S) - 1)
          : 0;

  // Each warp stages its own query rows; rows past S and columns past D are zeros.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t s = warp_first + r;
    float* dst = sQ + (warp * R + r) * DMAX;
#pragma unroll
    for (int i = 0; i < B::kChunks; ++i) {
      const int d = lane + 32 * i;
      if (d < DP) dst[d] = (s < p.S && d < D) ? headValue(p, q + s * at.q.row, b, s, d, D) : 0.f;
    }
  }

  float o[R][B::kChunks];
  float row_max[R], row_sum[R];  // row_sum: this lane's share; summed over the warp at the end
#pragma unroll
  for (int r = 0; r < R; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
#pragma unroll
    for (int i = 0; i < B::kChunks; ++i) o[r][i] = 0.f;
  }

  for (int64_t t0 = 0; t0 < keys_end; t0 += BN) {
    __syncthreads();  // the previous tile is no longer read
    // K and V rows past the block's last visible key are zeros, so no lane multiplies a
    // probability of 0 by stale shared memory (0 * NaN).
#pragma unroll
    for (int jw = 0; jw < BN / kWarps; ++jw) {
      const int j = warp + jw * kWarps;
      const int64_t t = t0 + j;
      const bool live = t < keys_end;
#pragma unroll
      for (int i = 0; i < B::kChunks; ++i) {
        const int d = lane + 32 * i;
        if (d < DP)
          sK[j * B::kKStride + d] = (live && d < D) ? headValue(p, k + t * at.k.row, b, t, d, D) : 0.f;
        sV[j * DMAX + d] = (live && d < Dv) ? toFloat(v[t * at.v.row + d]) : 0.f;
      }
    }
    __syncthreads();
    if (t0 >= warp_keys_end) continue;  // warp-uniform: all of this tile is hidden from the warp

    // Scores of this lane's keys (lane + 32 c) against the warp's R rows.
    float sc[R][KPL];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < KPL; ++c) sc[r][c] = 0.f;
    {
      const float4* q4 = reinterpret_cast<const float4*>(sQ + warp * R * DMAX);
      const float4* k4 = reinterpret_cast<const float4*>(sK);
      const int n4 = DP / 4;
#pragma unroll 4
      for (int d4 = 0; d4 < n4; ++d4) {
        float4 kk[KPL];
#pragma unroll
        for (int c = 0; c < KPL; ++c) kk[c] = k4[(lane + 32 * c) * (B::kKStride / 4) + d4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float4 qq = q4[r * (DMAX / 4) + d4];  // the same address in every lane
#pragma unroll
          for (int c = 0; c < KPL; ++c) {
            float a = sc[r][c];
            a = fmaf(qq.x, kk[c].x, a);
            a = fmaf(qq.y, kk[c].y, a);
            a = fmaf(qq.z, kk[c].z, a);
            a = fmaf(qq.w, kk[c].w, a);
            sc[r][c] = a;
          }
        }
      }
    }

    // Online softmax: sc becomes exp(x - m) with m the row max so far (-inf marks a hidden
    // key or a padding row, and weighs 0).
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t s = warp_first + r;
      const int64_t visible = s < p.S ? visibleKeys(p, s) : 0;
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < KPL; ++c) {
        const int64_t t = t0 + lane + 32 * c;
        float x = -INFINITY;
        if (t < visible) {
          x = sc[r][c] * p.scale;
          if (mask) x += toFloat(mask[s * p.mask_s + t * p.mask_t]);
        }
        sc[r][c] = x;
        tile_max = fmaxf(tile_max, x);  // fmaxf drops a NaN here; exp(NaN) spreads it below
      }
      tile_max = warpMax(tile_max);
      const float m_new = fmaxf(row_max[r], tile_max);
      // While every score so far is -inf the row has nothing to rescale; shifting by 0 keeps
      // exp(-inf - -inf) = NaN out of it (an all -inf row still ends 0 / 0 = NaN).
      const float shift = m_new == -INFINITY ? 0.f : m_new;
      const float correction = expf(row_max[r] - shift);
      row_max[r] = m_new;
      float part = 0.f;
#pragma unroll
      for (int c = 0; c < KPL; ++c) {
        sc[r][c] = expf(sc[r][c] - shift);
        part += sc[r][c];
      }
      row_sum[r] = row_sum[r] * correction + part;
#pragma unroll
      for (int i = 0; i < B::kChunks; ++i) o[r][i] *= correction;
    }

    // o += P V over the keys this warp can see in the tile; lane l owns columns l + 32 i.
    const int64_t n64 = warp_keys_end - t0;
    const int n = n64 < BN ? static_cast<int>(n64) : BN;
#pragma unroll
    for (int c = 0; c < KPL; ++c) {
      const int jn = n - 32 * c;
      if (jn <= 0) break;
      const int count = jn < 32 ? jn : 32;
      for (int jj = 0; jj < count; ++jj) {
        float pj[R];
#pragma unroll
        for (int r = 0; r < R; ++r) pj[r] = __shfl_sync(kFullMask, sc[r][c], jj);
        const float* vrow = sV + (32 * c + jj) * DMAX + lane;
#pragma unroll
        for (int i = 0; i < B::kChunks; ++i) {
          if (32 * i >= Dv) break;
          const float vv = vrow[32 * i];
#pragma unroll
          for (int r = 0; r < R; ++r) o[r][i] = fmaf(pj[r], vv, o[r][i]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t s = warp_first + r;
    const float l = warpSum(row_sum[r]);
    if (s >= p.S) continue;
    const bool sees_none = visibleKeys(p, s) == 0;  // zeros, not 0 / 0
    const float inv = 1.f / l;
#pragma unroll
    for (int i = 0; i < B::kChunks; ++i) {
      const int d = lane + 32 * i;
      if (d < Dv) y[s * at.y.row + d] = fromFloat<Elem>(sees_none ? 0.f : o[r][i] * inv);
    }
  }
}

template <typename Elem, typename MaskElem, int DMAX>
void launchBucket(const Params& p, int64_t blocks) {
  constexpr size_t smem = Bucket<DMAX>::kSmemBytes;
  // Above 48 KiB of dynamic shared memory a kernel has to opt in, once per function (the
  // backend drives one device).
  static const bool opted_in = [] {
    check(cudaFuncSetAttribute(attentionKernel<Elem, MaskElem, DMAX>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "cudaFuncSetAttribute (Attention shared memory)");
    return true;
  }();
  (void)opted_in;
  attentionKernel<Elem, MaskElem, DMAX>
      <<<static_cast<unsigned>(blocks), kThreads, smem, stream()>>>(p);
  launched("Attention");
}

template <typename Elem, typename MaskElem>
void launchForHeadSize(const Params& p, int64_t blocks, int head) {
  if (head <= 64) return launchBucket<Elem, MaskElem, 64>(p, blocks);
  if (head <= 128) return launchBucket<Elem, MaskElem, 128>(p, blocks);
  return launchBucket<Elem, MaskElem, 256>(p, blocks);
}

template <typename Elem>
void launchForMask(const Params& p, int64_t blocks, int head, DType mask_dtype) {
  withFloatType(mask_dtype, [&](auto mask_tag) {
    launchForHeadSize<Elem, decltype(mask_tag)>(p, blocks, head);
  });
}

// Errors carry the node the way KernelContext::fail spells it, but as Unsupported: the node is
// valid, this backend just does not run it (the CPU kernel does).
[[noreturn]] void unsupported(const KernelContext& ctx, const std::string& what) {
  throw Error(ErrorKind::Unsupported, "node '" + ctx.node().label() + "' (" +
                                          ctx.node().opType() + "): " + what +
                                          " is not supported by the CUDA backend");
}

// Fills the rest of p (its pointers and p.at set by the caller) and launches the kernel over
// a.B x a.Hq heads of a.S queries and a.T keys.
void launchAttention(const KernelContext& ctx, Params& p, const AttentionShape& a, DType dtype,
                     const HostTensor* m, HostTensor& y) {
  const float scale = ctx.attrFloat("scale", 1.f / std::sqrt(static_cast<float>(a.D)));
  const bool causal = ctx.attrInt("causal", 0) != 0;
  const MaskStrides ms = m ? maskStrides(ctx, m->dims(), a) : MaskStrides{};
  const int64_t head = std::max(a.D, a.Dv);
  if (head > kMaxHead)
    unsupported(ctx, "head size " + std::to_string(head) + " (Q/K " + std::to_string(a.D) +
                         ", V " + std::to_string(a.Dv) + "; at most " +
                         std::to_string(kMaxHead) + ")");
  if (y.numel() == 0) return;
  p.mask = m && m->numel() > 0 ? m->raw() : nullptr;
  p.y = y.mutableRaw();
  p.S = a.S;
  p.T = a.T;
  p.Hq = a.Hq;
  p.Hkv = a.Hkv;
  p.group = a.Hq / a.Hkv;
  p.D = static_cast<int>(a.D);
  p.Dv = static_cast<int>(a.Dv);
  p.scale = scale;
  p.causal = causal ? 1 : 0;
  p.mask_b = ms.b;
  p.mask_h = ms.h;
  p.mask_s = ms.s;
  p.mask_t = ms.t;
  p.query_blocks = (a.S + kBlockRows - 1) / kBlockRows;
  const int64_t blocks = p.query_blocks * a.B * a.Hq;
  if (blocks > std::numeric_limits<int32_t>::max())
    ctx.fail("too many query blocks (" + std::to_string(blocks) + ") for one CUDA grid");
  const DType mask_dtype = m ? m->dtype() : DType::Float;
  withFloatType(dtype, [&](auto tag) {
    launchForMask<decltype(tag)>(p, blocks, static_cast<int>(head), mask_dtype);
  });
}

void runAttention(KernelContext& ctx) {
  const HostTensor& q = ctx.requireInput(0);
  const HostTensor& k = ctx.requireInput(1);
  const HostTensor& v = ctx.requireInput(2);
  const HostTensor* m = ctx.input(3);
  if (!cudaFloatType(q.dtype()))
    unsupported(ctx, "element type " + std::string(dtypeName(q.dtype())));
  // The kernel reads K and V as Q's type and converts nothing on the host.
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    unsupported(ctx, "K (" + std::string(dtypeName(k.dtype())) + ") and V (" +
                         std::string(dtypeName(v.dtype())) + ") of another type than Q (" +
                         std::string(dtypeName(q.dtype())) + ")");
  }
  if (m && !cudaFloatType(m->dtype()))
    unsupported(ctx, "a mask of element type " + std::string(dtypeName(m->dtype())));
  const AttentionShape a = attentionShape(ctx, q, k, v);
  HostTensor& y = ctx.allocateOutput(0, q.dtype(), {a.B, a.Hq, a.S, a.Dv});
  Params p{};
  p.q = q.raw();
  p.k = k.raw();
  p.v = v.raw();
  p.at = blockStrides(a);
  launchAttention(ctx, p, a, q.dtype(), m, y);
}

// AttentionPacked: X [B, S, (Hq + 2 Hkv) * D], its q, k and v heads side by side in each row;
// Y [B, S, Hq * D]. The kernel reads and writes each head with the rows' stride.
// AttentionPackedRotary (`rotary`): inputs 2 and 3 are the rotary tables, applied to the q and k
// rows as they are staged.
void runAttentionPacked(KernelContext& ctx, bool rotary) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor* m = ctx.input(1);
  if (!cudaFloatType(x.dtype()))
    unsupported(ctx, "element type " + std::string(dtypeName(x.dtype())));
  if (m && !cudaFloatType(m->dtype()))
    unsupported(ctx, "a mask of element type " + std::string(dtypeName(m->dtype())));
  const AttentionShape a = packedAttentionShape(ctx, x);
  Params p{};
  if (rotary) {
    const HostTensor& cos_t = ctx.requireInput(2);
    const HostTensor& sin_t = ctx.requireInput(3);
    if (cos_t.dtype() != x.dtype() || sin_t.dtype() != x.dtype())
      unsupported(ctx, "rotary tables of another type than X");
    const RotaryTableStrides rows = packedRotaryTableStrides(ctx, a, cos_t, sin_t);
    p.cos = cos_t.raw();
    p.sin = sin_t.raw();
    p.rot_b = rows.b;
    p.rot_s = rows.s;
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), {a.B, a.S, a.Hq * a.D});
  const size_t esize = dtypeSize(x.dtype());
  const auto* base = static_cast<const unsigned char*>(x.raw());
  p.at = packedStrides(a);
  p.q = base;
  p.k = base + static_cast<size_t>(p.at.k_offset) * esize;
  p.v = base + static_cast<size_t>(p.at.v_offset) * esize;
  launchAttention(ctx, p, a, x.dtype(), m, y);
}

// What the declared types and dims already rule out is declined, so that the node runs on the
// CPU instead of failing; runAttention's own refusals remain for what only the run shows.
bool attentionAccepts(const Node& n) {
  const auto present = [](const Value* x) { return x && !x->name().empty(); };
  const Value* q = n.input(0);
  const DType qt = present(q) ? q->dtype() : DType::Undefined;
  for (size_t i : {1, 2}) {
    const Value* x = n.input(i);
    if (present(x) && qt != DType::Undefined && x->dtype() != DType::Undefined &&
        x->dtype() != qt) {
      return false;
    }
  }
  const Value* m = n.input(3);
  if (present(m) && m->dtype() != DType::Undefined && !cudaFloatType(m->dtype())) return false;
  for (size_t i : {0, 2}) {  // Q's D (K's must equal it) and V's Dv
    const Value* x = n.input(i);
    if (!present(x) || !x->shape().hasRank() || x->shape().rank() != 4) continue;
    const Dim& d = x->shape()[3];
    if (d.isStatic() && d.value() > kMaxHead) return false;
  }
  return true;
}

// AttentionPacked: a float X and mask, and a head size (X's static width over Hq + 2 Hkv) the
// kernel's buckets take.
bool attentionPackedAccepts(const Node& n) {
  const Value* m = n.input(1);
  if (m && !m->name().empty() && m->dtype() != DType::Undefined && !cudaFloatType(m->dtype()))
    return false;
  const Value* x = n.input(0);
  if (!x || !x->shape().hasRank() || x->shape().rank() != 3) return true;
  const Dim& w = x->shape()[2];
  const int64_t hq = n.attrInt("num_heads", 0);
  const int64_t heads = hq + 2 * n.attrInt("kv_num_heads", hq);
  return !(w.isStatic() && heads > 0 && w.value() / heads > kMaxHead);
}

// AttentionPackedRotary: AttentionPacked's conditions, and tables of X's type.
bool attentionPackedRotaryAccepts(const Node& n) {
  const Value* x = n.input(0);
  for (size_t i : {2, 3}) {
    const Value* t = n.input(i);
    if (x && t && x->dtype() != DType::Undefined && t->dtype() != DType::Undefined &&
        t->dtype() != x->dtype())
      return false;
  }
  return attentionPackedAccepts(n);
}

}  // namespace

void registerAttentionKernels(KernelRegistry& r) {
  addCudaKernel(r, "fusectl", "Attention", 1, 1000, runAttention,
                kCudaFloatTypes, 0, attentionAccepts);
  addCudaKernel(r, "fusectl", "AttentionPacked", 1, 1000,
                [](KernelContext& c) { runAttentionPacked(c, /*rotary=*/false); },
                kCudaFloatTypes, 0, attentionPackedAccepts);
  addCudaKernel(r, "fusectl", "AttentionPackedRotary", 1, 1000,
                [](KernelContext& c) { runAttentionPacked(c, /*rotary=*/true); },
                kCudaFloatTypes, 0, attentionPackedRotaryAccepts);
}

}  // namespace fusectl::kernels::cuda
