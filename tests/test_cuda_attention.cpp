// fusectl::Attention on the CUDA backend (libkernels/cuda/attention.cu) against the CPU kernel,
// through the executor on one-node models: multi-head and grouped-query heads, head sizes 32
// to 256 (each template bucket, and Dv != D), sequences of 1, 7, 130 and 600 (one and several
// key tiles and query blocks, partial ones), the causal cut with S = T, S < T and S > T (rows
// that see no key), every broadcast of the additive mask, a padding mask of large negative
// entries, the scalar zero mask of a node fused without one and the default scale, in float32,
// float16 and bfloat16; and AttentionPacked, the same kernel over a merged q/k/v projection,
// with AttentionPackedRotary rotating its q and k heads as it stages them.
//
// Tolerances. float32: both kernels compute in float32 and differ only in the order of their
// sums (the online softmax rescales partial sums; the CPU sums a whole row, or other tiles),
// about 1e-7 relative per element, so an nmse near 1e-13; 1e-7 leaves a wide margin and still
// catches any wrong weight or index. float16: both round float32 results to half once, so they
// differ by at most one half ulp where their float32 values straddle a rounding boundary.
// bfloat16: the same inputs on both sides (Q, K, V and the mask are bfloat16 values, read as
// float32) and one rounding of Y, but an ulp of 2^-7 relative for float16's 2^-10, so a
// straddled boundary costs 8x more (one rounding of a whole tensor would be an nmse near 5e-6):
// 1e-4, still far below what a wrong weight or index gives (an nmse near 1).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_case.h"

namespace {

using fusectl::testing::checkCudaAgainstCpu;
using fusectl::testing::cudaDeviceOrSkip;

constexpr double kFloatNmse = 1e-7;
constexpr double kHalfNmse = 1e-5;
constexpr double kBFloat16Nmse = 1e-4;

struct Spec {
  std::string type = "float";  // Q, K, V and Y
  int64_t B = 1, Hq = 2, Hkv = 2, S = 7, T = 7, D = 64;
  int64_t Dv = 0;  // 0: D
  bool causal = false;
  bool default_scale = false;  // no scale attribute: 1 / sqrt(D)
  float scale = 0.125f;
  std::vector<int64_t> mask_dims = {1, 1, 1, 7};
  std::string mask_type;  // "": Q's type
  std::string mask_values;  // "{...}": M is an initializer with these values, not an input
};

std::string dimsText(const std::vector<int64_t>& dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out;
}

std::string modelText(const Spec& s) {
  const int64_t dv = s.Dv ? s.Dv : s.D;
  const std::string t = s.type;
  const std::string mt = s.mask_type.empty() ? s.type : s.mask_type;
  // A scalar is spelled without brackets: `float[] M` parses as an unknown rank.
  const std::string mask_decl =
      mt + (s.mask_dims.empty() ? "" : "[" + dimsText(s.mask_dims) + "]") + " M";
  std::string inputs = t + "[" + dimsText({s.B, s.Hq, s.S, s.D}) + "] Q, " + t + "[" +
                       dimsText({s.B, s.Hkv, s.T, s.D}) + "] K, " + t + "[" +
                       dimsText({s.B, s.Hkv, s.T, dv}) + "] V";
  std::string initializers;
  if (s.mask_values.empty())
    inputs += ", " + mask_decl;
  else
    initializers = "<" + mask_decl + " = " + s.mask_values + ">\n";
  std::vector<std::string> attrs;
  if (!s.default_scale) attrs.push_back("scale = " + std::to_string(s.scale));
  if (s.causal) attrs.push_back("causal = 1");
  std::string attr_text;
  for (size_t i = 0; i < attrs.size(); ++i) attr_text += (i ? ", " : "") + attrs[i];
  if (!attr_text.empty()) attr_text = " <" + attr_text + ">";
  return "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\n"
         "g (" + inputs + ") => (" + t + "[" + dimsText({s.B, s.Hq, s.S, dv}) + "] Y)\n" +
         initializers + "{\n  Y = fusectl.Attention" + attr_text + " (Q, K, V, M)\n}\n";
}

double nmseFor(const std::string& type) {
  if (type == "float16") return kHalfNmse;
  return type == "bfloat16" ? kBFloat16Nmse : kFloatNmse;
}

// Runs `s` in float32, float16 and bfloat16.
void checkEveryType(Spec s) {
  for (const char* type : {"float", "float16", "bfloat16"}) {
    s.type = type;
    const std::string text = modelText(s);
    INFO(text);
    checkCudaAgainstCpu(text, nmseFor(s.type));
  }
}

// One AttentionPacked node over X [B, S, (Hq + 2 Hkv) D] with a mask of dims `mask`; with
// `tables` (the Cos and Sin dims), AttentionPackedRotary.
struct PackedSpec {
  int64_t B, S, Hq, Hkv, D;
  int causal;
  std::string mask;
  std::string tables;  // empty: no rotation
};

// Runs `p` in float32, float16 and bfloat16.
void checkPackedEveryType(const PackedSpec& p) {
  const bool rotary = !p.tables.empty();
  for (const std::string t : {"float", "float16", "bfloat16"}) {
    const int64_t width = (p.Hq + 2 * p.Hkv) * p.D;
    const std::string tables =
        rotary ? ", " + t + "[" + p.tables + "] C, " + t + "[" + p.tables + "] N" : "";
    const std::string text =
        "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\n"
        "g (" + t + "[" + dimsText({p.B, p.S, width}) + "] X, " + t + "[" + p.mask + "] M" +
        tables + ") => (" + t + "[" + dimsText({p.B, p.S, p.Hq * p.D}) + "] Y)\n{\n  Y = " +
        (rotary ? "fusectl.AttentionPackedRotary" : "fusectl.AttentionPacked") +
        " <num_heads = " + std::to_string(p.Hq) + ", kv_num_heads = " + std::to_string(p.Hkv) +
        ", scale = 0.125, causal = " + std::to_string(p.causal) + "> (X, M" +
        (rotary ? ", C, N" : "") + ")\n}\n";
    INFO(text);
    checkCudaAgainstCpu(text, nmseFor(t));
  }
}

}  // namespace

TEST_CASE("cuda attention: multi-head over head sizes and sequence lengths", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (int64_t d : {32, 64, 80, 128}) {
    for (int64_t seq : {1, 7, 130}) {
      Spec s;
      s.B = 2, s.Hq = s.Hkv = 3, s.S = s.T = seq, s.D = d;
      s.scale = 1.f / 8.f;
      s.mask_dims = {2, 1, 1, seq};  // a per-batch key mask, as BERT's
      checkEveryType(s);
    }
  }
}

TEST_CASE("cuda attention: grouped-query heads, causal, 600 tokens", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  Spec s;
  s.Hq = 8, s.Hkv = 2, s.S = s.T = 600, s.D = 128;
  s.causal = true;
  s.default_scale = true;
  s.mask_dims = {};  // the scalar 0 that fuse-attention gives a node without a mask
  checkEveryType(s);
  s.Hq = 4, s.Hkv = 1, s.D = 64;  // multi-query: one key/value head for every query head
  s.causal = false;
  s.mask_dims = {1, 1, 1, 600};
  checkEveryType(s);
}

TEST_CASE("cuda attention: causal with fewer and with more queries than keys", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  struct Lengths {
    int64_t S, T;
  };
  // S < T: bottom-right aligned (query s sees keys t <= s + T - S); S = 1: one decode step
  // over a long cache; S > T: the first S - T rows see no key and are zeros.
  for (const Lengths& l : {Lengths{7, 130}, Lengths{1, 600}, Lengths{130, 600}, Lengths{130, 7},
                           Lengths{600, 130}}) {
    INFO("S = " << l.S << ", T = " << l.T);
    Spec s;
    s.Hq = 4, s.Hkv = 2, s.S = l.S, s.T = l.T, s.D = 80;
    s.causal = true;
    s.mask_dims = {1, 1, 1, l.T};
    checkEveryType(s);
  }
}

TEST_CASE("cuda attention: the additive mask broadcasts as on the CPU", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  const int64_t B = 2, Hq = 4, S = 33, T = 130;
  const std::vector<std::vector<int64_t>> masks = {
      {},               // one value for every score
      {1},              // the same, rank 1
      {T},              // per key
      {S, T},           // per (query, key), every batch and head
      {Hq, 1, T},       // per head and key, rank 3
      {1, Hq, S, 1},    // per (head, query): the same shift for every key
      {B, 1, S, T},     // per batch, query and key
      {B, Hq, S, T},    // no broadcast
  };
  for (bool causal : {false, true}) {
    for (const auto& dims : masks) {
      Spec s;
      s.B = B, s.Hq = Hq, s.Hkv = 2, s.S = S, s.T = T, s.D = 32;
      s.causal = causal;
      s.mask_dims = dims;
      checkEveryType(s);
    }
  }
}

TEST_CASE("cuda attention: a padding mask of large negative entries", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // Batch 0 hides its last three keys with -10000 (BERT's fill); batch 1 hides every key of
  // its one row with -1e9, which leaves all its scores equal: the softmax is then uniform.
  Spec s;
  s.B = 2, s.Hq = s.Hkv = 2, s.S = 1, s.T = 7, s.D = 64;
  s.mask_dims = {2, 1, 1, 7};
  s.mask_values =
      "{0, 0, 0, 0, -10000, -10000, -10000, "
      "-1000000000, -1000000000, -1000000000, -1000000000, -1000000000, -1000000000, "
      "-1000000000}";
  s.type = "float";
  INFO(modelText(s));
  checkCudaAgainstCpu(modelText(s), kFloatNmse);
  s.S = 7;
  s.mask_dims = {2, 1, 1, 7};
  s.causal = true;
  INFO(modelText(s));
  checkCudaAgainstCpu(modelText(s), kFloatNmse);
}

TEST_CASE("cuda attention: head size 256, Dv != D, a zero mask, default scale", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  struct Heads {
    int64_t D, Dv;
  };
  for (const Heads& h : {Heads{256, 256}, Heads{256, 128}, Heads{96, 48}, Heads{24, 200},
                         Heads{7, 5}}) {
    INFO("D = " << h.D << ", Dv = " << h.Dv);
    Spec s;
    s.Hq = 4, s.Hkv = 2, s.S = 130, s.T = 130, s.D = h.D, s.Dv = h.Dv;
    // What fuse-attention gives a node without a mask (the loader wants all four inputs); a
    // float32 one for float16 heads too, as the text syntax has no float16 literals.
    s.mask_dims = {};
    s.mask_type = "float";
    s.mask_values = "{0}";
    s.default_scale = true;
    checkEveryType(s);
    s.causal = true;
    s.S = 7;
    checkEveryType(s);
  }
}

TEST_CASE("cuda attention: float16 heads with a float32 mask", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  Spec s;
  s.type = "float16";
  s.mask_type = "float";
  s.B = 2, s.Hq = 4, s.Hkv = 4, s.S = 130, s.T = 130, s.D = 64;
  s.mask_dims = {2, 1, 130, 130};
  s.causal = true;
  INFO(modelText(s));
  checkCudaAgainstCpu(modelText(s), kHalfNmse);
}

TEST_CASE("cuda attention: bfloat16 heads with a mask of each float type", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (const char* mask_type : {"bfloat16", "float", "float16"}) {
    Spec s;
    s.type = "bfloat16";
    s.mask_type = mask_type;
    s.B = 2, s.Hq = 4, s.Hkv = 2, s.S = 130, s.T = 130, s.D = 64;
    s.mask_dims = {2, 1, 130, 130};
    s.causal = true;
    INFO(modelText(s));
    checkCudaAgainstCpu(modelText(s), kBFloat16Nmse);
  }
}

// Placement only (no GPU needed): bfloat16 heads with a mask of any float type are the CUDA
// kernel's; bfloat16 Q with float32 V is declined (the kernel reads K and V as Q's type).
TEST_CASE("cuda attention: bfloat16 nodes are placed on the GPU", "[cuda]") {
  if (!fusectl::cuda::builtWithCuda()) return;
  for (const char* mask_type : {"bfloat16", "float", "float16"}) {
    Spec s;
    s.type = "bfloat16";
    s.mask_type = mask_type;
    INFO(modelText(s));
    CHECK(fusectl::testing::cudaFallbackNodes(*fusectl::parseModelText(modelText(s), "<attn>"))
              .empty());
  }
  const std::string mixed =
      "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\n"
      "g (bfloat16[1, 2, 7, 32] Q, bfloat16[1, 2, 7, 32] K, float[1, 2, 7, 32] V, "
      "bfloat16[1, 1, 1, 7] M) => (bfloat16[1, 2, 7, 32] Y)\n"
      "{\n  Y = fusectl.Attention <scale = 0.25> (Q, K, V, M)\n}\n";
  CHECK(fusectl::testing::cudaFallbackNodes(*fusectl::parseModelText(mixed, "<attn>")).size() ==
        1);
}

TEST_CASE("cuda attention: nodes the kernel does not take run on the CPU", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // Heads over 256, and V of another dtype than Q: `accepts` declines both from the declared
  // types and dims, so each runs on the CPU fallback instead of failing.
  Spec big;
  big.Hq = big.Hkv = 2, big.S = big.T = 7, big.D = 320;
  const auto r = checkCudaAgainstCpu(modelText(big), kFloatNmse, /*fallbacks_allowed=*/true);
  CHECK(r.stats.fallback_nodes == 1);
  const std::string mixed =
      "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\n"
      "g (float16[1, 2, 7, 32] Q, float16[1, 2, 7, 32] K, float[1, 2, 7, 32] V, "
      "float16[1, 1, 1, 7] M) => (float16[1, 2, 7, 32] Y)\n"
      "{\n  Y = fusectl.Attention <scale = 0.25> (Q, K, V, M)\n}\n";
  const auto m = checkCudaAgainstCpu(mixed, kHalfNmse, /*fallbacks_allowed=*/true);
  CHECK(m.stats.fallback_nodes == 1);
}

TEST_CASE("cuda attention: the packed form reads one merged q/k/v projection", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // AttentionPacked: multi-head with a per-batch key mask (BERT's), and grouped-query causal
  // over several query blocks and key tiles, each head read and written with a row stride.
  for (const PackedSpec& p : {PackedSpec{2, 130, 3, 3, 64, 0, "2, 1, 1, 130", ""},
                              PackedSpec{1, 600, 4, 2, 32, 1, "1, 1, 1, 600", ""}})
    checkPackedEveryType(p);
}

TEST_CASE("cuda attention: the packed rotary form rotates q and k as it stages them", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // AttentionPackedRotary: tables [S, D] (LLaMA's) and per batch [B, 1, S, D] (HF's after
  // unsqueeze(1)), grouped-query causal over several query blocks and key tiles. Each staged q
  // and k element is rotated from its row and its partner half (headValue), with each product
  // rounded as on the CPU.
  for (const PackedSpec& p : {PackedSpec{2, 130, 4, 4, 64, 1, "1", "130, 64"},
                              PackedSpec{2, 600, 8, 2, 128, 1, "1", "2, 1, 600, 128"},
                              PackedSpec{1, 7, 2, 2, 32, 0, "1", "1, 32"}})
    checkPackedEveryType(p);
}
