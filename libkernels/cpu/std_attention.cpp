// The standard Attention (opsets 23-25): Y = softmax(softcap(scale * Q K^T) + bias) V per query
// head, with grouped-query heads (query head h reads key/value head h / (Hq / Hkv)). Unlike
// fusectl::Attention (attention.cpp) it takes 3D inputs [B, L, H * D] split by q_num_heads and
// kv_num_heads, appends past_key/past_value (and returns the concatenation as present_key/
// present_value), builds its bias from a boolean or additive attn_mask that may be shorter than
// the total sequence (the missing keys are masked), is_causal aligned bottom-right at the cache
// offset, nonpad_kv_seqlen and the opset-25 sliding windows, and can return the QK scores at
// four stages (qk_matmul_output_mode 0: scale * Q K^T, 1: after softcap, 2: plus the bias, 3:
// the probabilities).
//
// Bias, per batch b, query row i and key j (T keys in all, P of them from past_key):
//   offset = P with past_key, nonpad_kv_seqlen[b] - S with it, else 0
//   -inf when the mask says so (false, or past its last column), when is_causal and
//   j > i + offset, when j >= nonpad_kv_seqlen[b], or outside the window around i + offset;
//   plus the additive mask's value.
// A row whose keys are all masked by the bias is a zero row of Y and of the mode-3 output, not
// NaN (the spec's fully-masked-row rule); masked keys get probability 0 even when their score is
// +inf or NaN, so a poisoned score behind the mask cannot leak into the row.
//
// Layout: as attention.cpp, one (batch, query head) block at a time, in parallel over blocks:
// the packed GEMM (gemm_micro.h) computes the S x T scores with alpha = scale, reading Q, K and V
// through their strides (3D inputs need no transpose), each row gets its bias and a vectorised
// softmax, and the same GEMM multiplies the probabilities into V, writing Y through its strides.
// Half, bfloat16 and double are computed in float32 and stored back (FloatView, FloatSink);
// softmax_precision asks for at least the inputs' precision, which float32 always meets.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "compute_common.h"
#include "gemm_micro.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Where one head's [length, width] matrix lives inside a Q, K, V or Y buffer.
struct HeadLayout {
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  int64_t offset(int64_t b, int64_t h) const { return b * batch_stride + h * head_stride; }
};

// [B, H, L, W] contiguous, or [B, L, H * W] (the 3D inputs).
HeadLayout headLayout(bool three_d, int64_t H, int64_t L, int64_t W) {
  if (three_d) return {L * H * W, W, H * W};
  return {H * L * W, L * W, W};
}

// The mask's element strides over [B, Hq, S, Tm] (0 along a broadcast dim).
struct MaskLayout {
  int64_t b = 0, h = 0, s = 0, t = 0, columns = 0;
};

MaskLayout maskLayout(const KernelContext& ctx, const std::vector<int64_t>& dims, int64_t B,
                      int64_t H, int64_t S, int64_t T) {
  if (dims.empty() || dims.size() > 4)
    ctx.fail("attn_mask " + formatDims(dims) + " must have rank 1 to 4");
  const int64_t columns = dims.back();
  if (columns > T)
    ctx.fail("attn_mask " + formatDims(dims) + " has more columns than the " + std::to_string(T) +
             " keys");
  const int64_t target[4] = {B, H, S, columns};
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t stride = 1;
  const size_t off = 4 - dims.size();
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t d = dims[i];
    if (d != 1 && d != target[off + i])
      ctx.fail("attn_mask " + formatDims(dims) + " does not broadcast to [" + std::to_string(B) +
               "," + std::to_string(H) + "," + std::to_string(S) + "," + std::to_string(columns) +
               "]");
    strides[off + i] = d == 1 ? 0 : stride;
    stride *= d;
  }
  return {strides[0], strides[1], strides[2], strides[3], columns};
}

// K or V with the past prepended, as [B, Hkv, T, W] floats (what present_key/value hold).
std::vector<float> concatPast(const FloatView& past, int64_t P, const float* cur,
                              const HeadLayout& cur_layout, int64_t B, int64_t H, int64_t L,
                              int64_t W) {
  const int64_t T = P + L;
  std::vector<float> out(static_cast<size_t>(B * H * T * W));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* dst = out.data() + (b * H + h) * T * W;
      if (P > 0) std::memcpy(dst, past.data() + (b * H + h) * P * W, sizeof(float) * P * W);
      const float* src = cur + cur_layout.offset(b, h);
      for (int64_t l = 0; l < L; ++l)
        std::memcpy(dst + (P + l) * W, src + l * cur_layout.row_stride, sizeof(float) * W);
    }
  }
  return out;
}

void runStdAttention(KernelContext& ctx) {
  const HostTensor& q = ctx.requireInput(0);
  const HostTensor& k = ctx.requireInput(1);
  const HostTensor& v = ctx.requireInput(2);
  const HostTensor* mask = ctx.input(3);
  const HostTensor* past_key = ctx.input(4);
  const HostTensor* past_value = ctx.input(5);
  const HostTensor* nonpad = ctx.input(6);
  for (const HostTensor* t : {&q, &k, &v, past_key, past_value}) {
    if (t && !isFloatComputeType(t->dtype()))
      ctx.fail("unsupported element type " + std::string(dtypeName(t->dtype())) + " for Q/K/V");
  }
  if (mask && mask->dtype() != DType::Bool && !isFloatComputeType(mask->dtype()) &&
      !dtypeIsInteger(mask->dtype()))
    ctx.fail("unsupported attn_mask element type " + std::string(dtypeName(mask->dtype())));
  if (!!past_key != !!past_value) ctx.fail("past_key and past_value must be given together");
  if (nonpad && past_key) ctx.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");

  const bool three_d = q.rank() == 3;
  if ((q.rank() != 3 && q.rank() != 4) || k.rank() != q.rank() || v.rank() != q.rank())
    ctx.fail("Q " + formatDims(q.dims()) + ", K " + formatDims(k.dims()) + " and V " +
             formatDims(v.dims()) + " must all have rank 3 or all rank 4");
  const int64_t B = q.dim(0);
  int64_t Hq, Hkv, S, L, D, Dv;
  if (three_d) {
    Hq = ctx.attrInt("q_num_heads", 0);
    Hkv = ctx.attrInt("kv_num_heads", 0);
    if (Hq <= 0 || Hkv <= 0) ctx.fail("3D inputs need q_num_heads and kv_num_heads");
    if (q.dim(2) % Hq != 0 || k.dim(2) % Hkv != 0 || v.dim(2) % Hkv != 0)
      ctx.fail("hidden sizes of Q " + formatDims(q.dims()) + ", K " + formatDims(k.dims()) +
               " and V " + formatDims(v.dims()) + " are not multiples of the head counts");
    S = q.dim(1), L = k.dim(1), D = q.dim(2) / Hq, Dv = v.dim(2) / Hkv;
    if (k.dim(2) / Hkv != D || v.dim(1) != L || k.dim(0) != B || v.dim(0) != B)
      ctx.fail("Q " + formatDims(q.dims()) + ", K " + formatDims(k.dims()) + " and V " +
               formatDims(v.dims()) + " do not agree");
  } else {
    Hq = q.dim(1), S = q.dim(2), D = q.dim(3);
    Hkv = k.dim(1), L = k.dim(2), Dv = v.dim(3);
    if (k.dim(0) != B || v.dim(0) != B || k.dim(3) != D || v.dim(1) != Hkv || v.dim(2) != L)
      ctx.fail("Q " + formatDims(q.dims()) + ", K " + formatDims(k.dims()) + " and V " +
               formatDims(v.dims()) + " do not agree ([B,Hq,S,D], [B,Hkv,L,D], [B,Hkv,L,Dv])");
  }
  if (Hkv <= 0 || Hq % Hkv != 0)
    ctx.fail(std::to_string(Hq) + " query heads are not a multiple of " + std::to_string(Hkv) +
             " key/value heads");
  const int64_t group = Hq / Hkv;
  int64_t P = 0;
  if (past_key) {
    P = past_key->rank() == 4 ? past_key->dim(2) : -1;
    if (past_key->dims() != std::vector<int64_t>{B, Hkv, P, D} ||
        past_value->dims() != std::vector<int64_t>{B, Hkv, P, Dv})
      ctx.fail("past_key " + formatDims(past_key->dims()) + " and past_value " +
               formatDims(past_value->dims()) + " must be [B, kv_num_heads, past, head size]");
  }
  const int64_t T = P + L;
  std::vector<int64_t> valid_keys;  // nonpad_kv_seqlen per batch
  if (nonpad) {
    if (nonpad->dtype() != DType::Int64 || nonpad->numel() != B)
      ctx.fail("nonpad_kv_seqlen must be int64 [" + std::to_string(B) + "]");
    valid_keys.assign(nonpad->data<int64_t>(), nonpad->data<int64_t>() + B);
    for (int64_t n : valid_keys) {
      if (n < 0 || n > T)
        ctx.fail("nonpad_kv_seqlen " + std::to_string(n) + " is outside [0, " + std::to_string(T) +
                 "]");
    }
  }
  const MaskLayout ml = mask ? maskLayout(ctx, mask->dims(), B, Hq, S, T) : MaskLayout{};
  const bool bool_mask = mask && mask->dtype() == DType::Bool;
  const float scale = ctx.attrFloat("scale", 1.f / std::sqrt(static_cast<float>(D)));
  const float softcap = ctx.attrFloat("softcap", 0.f);
  const bool causal = ctx.attrInt("is_causal", 0) != 0;
  const int64_t left_window = ctx.attrInt("left_window_size", -1);
  const int64_t right_window = ctx.attrInt("right_window_size", -1);
  const int64_t qk_mode = ctx.attrInt("qk_matmul_output_mode", 0);
  if (qk_mode < 0 || qk_mode > 3)
    ctx.fail("qk_matmul_output_mode " + std::to_string(qk_mode) + " is not 0, 1, 2 or 3");

  FloatView qf(q), kf(k), vf(v);
  const HeadLayout q_layout = headLayout(three_d, Hq, S, D);
  HeadLayout k_layout = headLayout(three_d, Hkv, L, D);
  HeadLayout v_layout = headLayout(three_d, Hkv, L, Dv);
  const float* k_data = kf.data();
  const float* v_data = vf.data();
  std::vector<float> k_all, v_all;
  const bool want_present = ctx.outputWanted(1) || ctx.outputWanted(2);
  if (past_key || (want_present && three_d)) {
    FloatView pk(past_key), pv(past_value);
    k_all = concatPast(pk, P, kf.data(), k_layout, B, Hkv, L, D);
    v_all = concatPast(pv, P, vf.data(), v_layout, B, Hkv, L, Dv);
    k_data = k_all.data(), v_data = v_all.data();
    k_layout = headLayout(false, Hkv, T, D);
    v_layout = headLayout(false, Hkv, T, Dv);
  }
  if (ctx.outputWanted(1)) {
    HostTensor& pk = ctx.allocateOutput(1, k.dtype(), {B, Hkv, T, D});
    fromFloat(k_data, k.dtype(), pk.mutableRaw(), pk.numel());
  }
  if (ctx.outputWanted(2)) {
    HostTensor& pv = ctx.allocateOutput(2, v.dtype(), {B, Hkv, T, Dv});
    fromFloat(v_data, v.dtype(), pv.mutableRaw(), pv.numel());
  }
  std::vector<int64_t> y_dims = three_d ? std::vector<int64_t>{B, S, Hq * Dv}
                                        : std::vector<int64_t>{B, Hq, S, Dv};
  HostTensor& y = ctx.allocateOutput(0, q.dtype(), y_dims);
  FloatSink ys(y);
  const HeadLayout y_layout = headLayout(three_d, Hq, S, Dv);
  HostTensor* qk_out = nullptr;
  if (ctx.outputWanted(3)) qk_out = &ctx.allocateOutput(3, q.dtype(), {B, Hq, S, T});
  std::vector<float> qk_scratch;
  float* qk_data = nullptr;
  if (qk_out) {
    if (qk_out->dtype() == DType::Float) {
      qk_data = qk_out->mutableData<float>();
    } else {
      qk_scratch.resize(static_cast<size_t>(qk_out->numel()));
      qk_data = qk_scratch.data();
    }
  }
  FloatView mf;
  if (mask && !bool_mask) mf = FloatView(*mask);
  const uint8_t* mask_bits = bool_mask ? mask->data<uint8_t>() : nullptr;

  parallelFor(B * Hq, ctx.numThreads(), 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(static_cast<size_t>(S * T));
    for (int64_t block = first; block < last; ++block) {
      const int64_t b = block / Hq, h = block % Hq, kv = h / group;
      const float* qb = qf.data() + q_layout.offset(b, h);
      const float* kb = k_data + k_layout.offset(b, kv);
      const float* vb = v_data + v_layout.offset(b, kv);
      float* qk_block = qk_data ? qk_data + block * S * T : nullptr;
      if (T > 0) {
        GemmParams qk = gemmParams(S, T, D, qb, q_layout.row_stride, false, kb,
                                   k_layout.row_stride, true, scores.data(), T);
        qk.alpha = scale;
        gemm(qk, 1);
      }
      if (qk_block && qk_mode == 0) std::copy(scores.begin(), scores.end(), qk_block);
      if (softcap > 0.f) {
        for (float& s : scores) s /= softcap;
        vec::unary(vec::Unary::Tanh, scores.data(), scores.data(), S * T);
        for (float& s : scores) s *= softcap;
      }
      if (qk_block && qk_mode == 1) std::copy(scores.begin(), scores.end(), qk_block);
      const int64_t offset = past_key ? P : nonpad ? valid_keys[static_cast<size_t>(b)] - S : 0;
      const int64_t key_end = nonpad ? valid_keys[static_cast<size_t>(b)] : T;
      for (int64_t i = 0; i < S; ++i) {
        float* row = scores.data() + i * T;
        // Keys [lo, hi) pass the causal frontier, the padding and the window.
        const int64_t p = i + offset;  // the query's absolute position
        const int64_t lo = std::clamp<int64_t>(left_window >= 0 ? p - left_window : 0, 0, T);
        int64_t hi = std::min(key_end, causal ? p + 1 : T);
        if (right_window >= 0) hi = std::min(hi, p + right_window + 1);
        hi = std::clamp<int64_t>(hi, lo, T);  // an empty span when nothing is visible
        // With a mask, keys from its last column on are masked too.
        const int64_t end = mask ? std::min(hi, std::max(lo, ml.columns)) : hi;
        bool any_allowed = lo < end;
        if (mask && any_allowed) {
          // A masked key's score becomes -inf whatever it was (+inf or NaN included), so it gets
          // probability 0; the row is fully masked when no key in the span survives.
          float* span = row + lo;
          const int64_t n = end - lo;
          const int64_t at = b * ml.b + h * ml.h + i * ml.s + lo * ml.t;
          any_allowed = false;
          if (bool_mask) {
            const uint8_t* bits = mask_bits + at;
            for (int64_t j = 0; j < n; ++j) {
              const bool keep = bits[j * ml.t] != 0;
              span[j] = keep ? span[j] : kNegInf;
              any_allowed |= keep;
            }
          } else if (ml.t == 1) {
            const float* add = mf.data() + at;
            for (int64_t j = 0; j < n; ++j) {
              const bool keep = add[j] != kNegInf;
              span[j] = keep ? span[j] + add[j] : kNegInf;
              any_allowed |= keep;
            }
          } else {
            const float add = mf.data()[at];
            any_allowed = add != kNegInf;
            for (int64_t j = 0; j < n; ++j) span[j] = any_allowed ? span[j] + add : kNegInf;
          }
        }
        if (qk_block && qk_mode == 2) {
          // The scores plus the bias: -inf outside the span.
          float* out = qk_block + i * T;
          std::fill(out, out + T, kNegInf);
          if (lo < end) std::copy(row + lo, row + end, out + lo);
        }
        if (any_allowed) {
          vec::softmaxRow(row + lo, row + lo, end - lo, false);
          std::fill(row, row + lo, 0.f);
          std::fill(row + end, row + T, 0.f);
        } else {
          std::fill(row, row + T, 0.f);  // a fully masked row is zero, not NaN
        }
        if (qk_block && qk_mode == 3) std::copy(row, row + T, qk_block + i * T);
      }
      float* yb = ys.data() + y_layout.offset(b, h);
      if (T > 0) {
        gemm(gemmParams(S, Dv, T, scores.data(), T, false, vb, v_layout.row_stride, false, yb,
                        y_layout.row_stride),
             1);
      } else {
        for (int64_t i = 0; i < S; ++i)
          std::fill(yb + i * y_layout.row_stride, yb + i * y_layout.row_stride + Dv, 0.f);
      }
    }
  });
  ys.commit();
  if (qk_out && qk_out->dtype() != DType::Float)
    fromFloat(qk_scratch.data(), qk_out->dtype(), qk_out->mutableRaw(), qk_out->numel());
}

}  // namespace
}  // namespace cpu

void registerStdAttentionKernels(KernelRegistry& r) {
  r.add({"", "Attention", 23, 1000, cpu::runStdAttention});
}

}  // namespace fusectl::kernels
