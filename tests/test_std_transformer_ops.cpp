// The standard opset-23+ transformer ops' CPU kernels (Attention, RMSNormalization,
// RotaryEmbedding, Swish, SwiGLU, TensorScatter) against naive double-precision loops written
// here from the ONNX definitions, on seeded random shapes; then each legality check's error, and
// the shape rules through inferShapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/shape_inference.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/kernel.h"
#include "kernel_case.h"

namespace {

using fusectl::Attribute;
using fusectl::DType;
using fusectl::Graph;
using fusectl::Node;
using fusectl::Value;
using fusectl::ValueType;
using fusectl::kernels::HostTensor;
using fusectl::kernels::KernelContext;
using fusectl::kernels::KernelInfo;
using fusectl::kernels::KernelRegistry;
using fusectl::testing::bools;
using fusectl::testing::floats;
using fusectl::testing::int64s;
using fusectl::testing::PlainAllocator;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> randomFloats(int64_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> valuesOf(const HostTensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Runs one standard (domain "") node through the global registry. An empty input is omitted;
// outputs named "" are not wanted.
std::vector<HostTensor> runStd(const std::string& op, int64_t opset,
                               const std::vector<const HostTensor*>& inputs,
                               std::vector<Attribute> attrs, std::vector<std::string> outputs = {"Y"},
                               int threads = 1) {
  Graph g("t");
  Graph::NodeSpec spec;
  spec.op_type = op;
  spec.name = "node_" + op;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    ValueType vt;
    vt.dtype = inputs[i]->dtype();
    spec.inputs.push_back(g.addInput("in" + std::to_string(i), vt));
  }
  spec.output_names = std::move(outputs);
  spec.attributes = std::move(attrs);
  Node* node = g.createNode(std::move(spec));
  for (Value* out : node->outputs())
    if (out) g.addOutput(out);
  const KernelInfo* info = KernelRegistry::global().find("", op, opset);
  REQUIRE(info != nullptr);
  PlainAllocator plain;
  KernelContext ctx(*node, opset, inputs, plain, threads);
  info->fn(ctx);
  return ctx.outputs();
}

void requireClose(const std::vector<float>& got, const std::vector<double>& want,
                  double tol = 1e-4) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    if (std::isinf(want[i])) {
      REQUIRE(static_cast<double>(got[i]) == want[i]);
    } else {
      REQUIRE(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
    }
  }
}

// ---- Attention ----

struct AttentionCase {
  int64_t B = 2, Hq = 4, Hkv = 2, S = 3, L = 5, P = 0, D = 8, Dv = 6;
  bool three_d = false;
  std::vector<int64_t> mask_dims;  // empty: no mask
  bool bool_mask = false;
  bool causal = false;
  bool nonpad = false;
  float scale = 0.f;  // 0: the default 1/sqrt(D)
  float softcap = 0.f;
  int64_t qk_mode = -1;  // -1: no qk_matmul_output
  int threads = 1;
  int64_t left_window = -1, right_window = -1;  // opset 25's sliding window
};

struct AttentionData {
  std::vector<float> q, k, v, past_k, past_v, mask;  // q, k, v logical [B, H, len, width]
  std::vector<uint8_t> mask_bits;
  std::vector<int64_t> valid;
};

// [B, H, L, W] <-> [B, L, H * W].
std::vector<float> toThreeD(const std::vector<float>& x, int64_t B, int64_t H, int64_t L,
                            int64_t W) {
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t w = 0; w < W; ++w)
          y[((b * L + l) * H + h) * W + w] = x[((b * H + h) * L + l) * W + w];
  return y;
}
std::vector<float> fromThreeD(const std::vector<float>& y, int64_t B, int64_t H, int64_t L,
                              int64_t W) {
  std::vector<float> x(y.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t w = 0; w < W; ++w)
          x[((b * H + h) * L + l) * W + w] = y[((b * L + l) * H + h) * W + w];
  return x;
}

// The element of a mask of dims `md` (right-aligned to [B, H, S, columns]) at (b, h, i, j).
int64_t maskIndex(const std::vector<int64_t>& md, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t full[4] = {b, h, i, j};
  int64_t at = 0;
  const size_t off = 4 - md.size();
  for (size_t d = 0; d < md.size(); ++d) at = at * md[d] + (md[d] == 1 ? 0 : full[off + d]);
  return at;
}

struct AttentionReference {
  std::vector<double> y, qk, probs, qk_biased, qk_capped;
};

// The definition: scores = scale * q . k, softcap, bias from mask / causal / padding, softmax
// over the keys the bias allows (a row with none is zero), y = probs . v.
AttentionReference referenceAttention(const AttentionCase& c, const AttentionData& d) {
  const int64_t T = c.P + c.L, group = c.Hq / c.Hkv;
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  const int64_t columns = c.mask_dims.empty() ? T : c.mask_dims.back();
  AttentionReference r;
  r.y.assign(static_cast<size_t>(c.B * c.Hq * c.S * c.Dv), 0.0);
  r.qk.assign(static_cast<size_t>(c.B * c.Hq * c.S * T), 0.0);
  r.probs = r.qk_biased = r.qk_capped = r.qk;
  auto key = [&](int64_t b, int64_t h, int64_t t, int64_t e) -> double {
    return t < c.P ? d.past_k[((b * c.Hkv + h) * c.P + t) * c.D + e]
                   : d.k[((b * c.Hkv + h) * c.L + (t - c.P)) * c.D + e];
  };
  auto value = [&](int64_t b, int64_t h, int64_t t, int64_t e) -> double {
    return t < c.P ? d.past_v[((b * c.Hkv + h) * c.P + t) * c.Dv + e]
                   : d.v[((b * c.Hkv + h) * c.L + (t - c.P)) * c.Dv + e];
  };
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t offset = c.P > 0 ? c.P : c.nonpad ? d.valid[b] - c.S : 0;
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t kv = h / group;
      for (int64_t i = 0; i < c.S; ++i) {
        std::vector<double> s(static_cast<size_t>(T)), bias(static_cast<size_t>(T), 0.0);
        const size_t row = static_cast<size_t>(((b * c.Hq + h) * c.S + i) * T);
        bool any = false;
        for (int64_t t = 0; t < T; ++t) {
          double dot = 0;
          for (int64_t e = 0; e < c.D; ++e) dot += d.q[((b * c.Hq + h) * c.S + i) * c.D + e] * key(b, kv, t, e);
          s[t] = scale * dot;
          r.qk[row + t] = s[t];
          if (c.softcap > 0) s[t] = c.softcap * std::tanh(s[t] / c.softcap);
          r.qk_capped[row + t] = s[t];
          if (!c.mask_dims.empty()) {
            if (t >= columns) {
              bias[t] = -kInf;
            } else if (c.bool_mask) {
              if (!d.mask_bits[maskIndex(c.mask_dims, b, h, i, t)]) bias[t] = -kInf;
            } else {
              bias[t] = d.mask[maskIndex(c.mask_dims, b, h, i, t)];
            }
          }
          if (c.causal && t > i + offset) bias[t] = -kInf;
          if (c.nonpad && t >= d.valid[b]) bias[t] = -kInf;
          if (c.left_window >= 0 && t < i + offset - c.left_window) bias[t] = -kInf;
          if (c.right_window >= 0 && t > i + offset + c.right_window) bias[t] = -kInf;
          any = any || bias[t] != -kInf;
          r.qk_biased[row + t] = s[t] + bias[t];
        }
        if (!any) continue;
        double m = -kInf, sum = 0;
        for (int64_t t = 0; t < T; ++t)
          if (bias[t] != -kInf) m = std::max(m, s[t] + bias[t]);
        for (int64_t t = 0; t < T; ++t) {
          r.probs[row + t] = bias[t] == -kInf ? 0.0 : std::exp(s[t] + bias[t] - m);
          sum += r.probs[row + t];
        }
        for (int64_t t = 0; t < T; ++t) r.probs[row + t] /= sum;
        for (int64_t e = 0; e < c.Dv; ++e) {
          double acc = 0;
          for (int64_t t = 0; t < T; ++t) acc += r.probs[row + t] * value(b, kv, t, e);
          r.y[((b * c.Hq + h) * c.S + i) * c.Dv + e] = acc;
        }
      }
    }
  }
  return r;
}

// Batch, query heads, key/value heads, query length, new keys, past keys, head sizes of Q/K and V.
AttentionCase dims(int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t L, int64_t P, int64_t D,
                   int64_t Dv) {
  AttentionCase c;
  c.B = B, c.Hq = Hq, c.Hkv = Hkv, c.S = S, c.L = L, c.P = P, c.D = D, c.Dv = Dv;
  return c;
}

void checkAttention(const AttentionCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  AttentionData d;
  d.q = randomFloats(c.B * c.Hq * c.S * c.D, rng);
  d.k = randomFloats(c.B * c.Hkv * c.L * c.D, rng);
  d.v = randomFloats(c.B * c.Hkv * c.L * c.Dv, rng);
  d.past_k = randomFloats(c.B * c.Hkv * c.P * c.D, rng);
  d.past_v = randomFloats(c.B * c.Hkv * c.P * c.Dv, rng);
  const int64_t T = c.P + c.L;
  int64_t mask_n = 1;
  for (int64_t m : c.mask_dims) mask_n *= m;
  d.mask = randomFloats(mask_n, rng, -2.f, 2.f);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t i = 0; i < mask_n; ++i) d.mask_bits.push_back(coin(rng) != 0);
  std::uniform_int_distribution<int64_t> lens(1, T);
  for (int64_t b = 0; b < c.B; ++b) d.valid.push_back(lens(rng));

  const HostTensor q = c.three_d ? floats({c.B, c.S, c.Hq * c.D}, toThreeD(d.q, c.B, c.Hq, c.S, c.D))
                                 : floats({c.B, c.Hq, c.S, c.D}, d.q);
  const HostTensor k = c.three_d ? floats({c.B, c.L, c.Hkv * c.D}, toThreeD(d.k, c.B, c.Hkv, c.L, c.D))
                                 : floats({c.B, c.Hkv, c.L, c.D}, d.k);
  const HostTensor v = c.three_d ? floats({c.B, c.L, c.Hkv * c.Dv}, toThreeD(d.v, c.B, c.Hkv, c.L, c.Dv))
                                 : floats({c.B, c.Hkv, c.L, c.Dv}, d.v);
  const HostTensor mask = c.bool_mask ? bools(c.mask_dims, d.mask_bits) : floats(c.mask_dims, d.mask);
  const HostTensor past_k = floats({c.B, c.Hkv, c.P, c.D}, d.past_k);
  const HostTensor past_v = floats({c.B, c.Hkv, c.P, c.Dv}, d.past_v);
  const HostTensor valid = int64s({c.B}, d.valid);
  std::vector<const HostTensor*> inputs = {&q, &k, &v, c.mask_dims.empty() ? nullptr : &mask,
                                           c.P > 0 ? &past_k : nullptr,
                                           c.P > 0 ? &past_v : nullptr, c.nonpad ? &valid : nullptr};
  std::vector<Attribute> attrs = {Attribute::ofInt("is_causal", c.causal ? 1 : 0)};
  if (c.three_d) {
    attrs.push_back(Attribute::ofInt("q_num_heads", c.Hq));
    attrs.push_back(Attribute::ofInt("kv_num_heads", c.Hkv));
  }
  if (c.scale > 0) attrs.push_back(Attribute::ofFloat("scale", c.scale));
  if (c.softcap > 0) attrs.push_back(Attribute::ofFloat("softcap", c.softcap));
  if (c.qk_mode >= 0) attrs.push_back(Attribute::ofInt("qk_matmul_output_mode", c.qk_mode));
  if (c.left_window >= 0) attrs.push_back(Attribute::ofInt("left_window_size", c.left_window));
  if (c.right_window >= 0) attrs.push_back(Attribute::ofInt("right_window_size", c.right_window));
  std::vector<std::string> outs = {"Y", c.P > 0 ? "present_key" : "", c.P > 0 ? "present_value" : "",
                                   c.qk_mode >= 0 ? "qk" : ""};
  const std::vector<HostTensor> got = runStd("Attention", 23, inputs, attrs, outs, c.threads);
  const AttentionReference want = referenceAttention(c, d);
  std::vector<float> y = valuesOf(got[0]);
  if (c.three_d) {
    REQUIRE(got[0].dims() == std::vector<int64_t>{c.B, c.S, c.Hq * c.Dv});
    y = fromThreeD(y, c.B, c.Hq, c.S, c.Dv);
  } else {
    REQUIRE(got[0].dims() == std::vector<int64_t>{c.B, c.Hq, c.S, c.Dv});
  }
  requireClose(y, want.y);
  if (c.P > 0) {
    REQUIRE(got[1].dims() == std::vector<int64_t>{c.B, c.Hkv, T, c.D});
    REQUIRE(got[2].dims() == std::vector<int64_t>{c.B, c.Hkv, T, c.Dv});
    const std::vector<float> pk = valuesOf(got[1]);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t e = 0; e < c.D; ++e) {
            const float want_k = t < c.P ? d.past_k[((b * c.Hkv + h) * c.P + t) * c.D + e]
                                         : d.k[((b * c.Hkv + h) * c.L + t - c.P) * c.D + e];
            REQUIRE(pk[((b * c.Hkv + h) * T + t) * c.D + e] == want_k);
          }
  }
  if (c.qk_mode >= 0) {
    REQUIRE(got[3].dims() == std::vector<int64_t>{c.B, c.Hq, c.S, T});
    const std::vector<double>& stage = c.qk_mode == 0   ? want.qk
                                       : c.qk_mode == 1 ? want.qk_capped
                                       : c.qk_mode == 2 ? want.qk_biased
                                                        : want.probs;
    requireClose(valuesOf(got[3]), stage);
  }
}

TEST_CASE("standard Attention matches the naive definition on random shapes", "[std_ops]") {
  uint32_t seed = 1;
  SECTION("4D multi-head, no mask") { checkAttention(dims(2, 3, 3, 4, 6, 0, 8, 8), seed++); }
  SECTION("4D grouped-query heads, head sizes differ") {
    checkAttention(dims(2, 6, 2, 5, 7, 0, 16, 12), seed++);
  }
  SECTION("3D multi-query with a past and a shorter boolean mask") {
    AttentionCase c = dims(1, 4, 1, 3, 4, 5, 8, 8);
    c.three_d = true;
    c.mask_dims = {3, 7};
    c.bool_mask = true;
    checkAttention(c, seed++);
  }
  SECTION("3D GQA with past, causal and an additive 4D mask") {
    AttentionCase c = dims(2, 6, 3, 4, 4, 6, 8, 4);
    c.three_d = true;
    c.causal = true;
    c.mask_dims = {2, 1, 4, 10};
    checkAttention(c, seed++);
  }
  SECTION("causal prefill without cache: top-left aligned") {
    AttentionCase c = dims(1, 2, 2, 6, 6, 0, 8, 8);
    c.causal = true;
    checkAttention(c, seed++);
  }
  SECTION("nonpad_kv_seqlen with causal, per-batch offsets") {
    AttentionCase c = dims(3, 4, 2, 2, 8, 0, 8, 8);
    c.causal = true;
    c.nonpad = true;
    checkAttention(c, seed++);
  }
  SECTION("softcap and an explicit scale") {
    AttentionCase c = dims(2, 2, 2, 5, 5, 0, 8, 8);
    c.softcap = 1.5f;
    c.scale = 0.3f;
    checkAttention(c, seed++);
  }
  SECTION("every qk_matmul_output_mode") {
    for (int64_t mode = 0; mode <= 3; ++mode) {
      AttentionCase c = dims(2, 4, 2, 3, 5, 2, 8, 8);
      c.mask_dims = {2, 4, 3, 7};
      c.softcap = 2.f;
      c.causal = true;
      c.qk_mode = mode;
      checkAttention(c, seed++);
    }
  }
  SECTION("sliding windows, with and without a mask") {
    for (bool masked : {false, true}) {
      AttentionCase c = dims(2, 2, 1, 6, 5, 3, 8, 8);
      c.left_window = 2;
      c.right_window = 1;
      c.qk_mode = 2;
      if (masked) c.mask_dims = {1, 1, 6, 8};
      checkAttention(c, seed++);
    }
  }
  SECTION("nonpad_kv_seqlen without causal, and a float mask shorter than the keys") {
    AttentionCase c = dims(3, 2, 2, 4, 9, 0, 8, 8);
    c.nonpad = true;
    c.mask_dims = {3, 1, 4, 6};
    checkAttention(c, seed++);
  }
  SECTION("larger blocks on 4 threads") {
    AttentionCase c = dims(2, 8, 2, 37, 53, 11, 64, 48);
    c.mask_dims = {37, 64};
    c.causal = true;
    c.threads = 4;
    checkAttention(c, seed++);
  }
}

TEST_CASE("standard Attention: a fully masked row is zero and masked poison does not leak",
          "[std_ops]") {
  // Row 0 masks every key; row 1 masks key 1 whose score is +inf (a poisoned K).
  const float inf = std::numeric_limits<float>::infinity();
  const HostTensor q = floats({1, 1, 2, 1}, {1.f, 1.f});
  const HostTensor k = floats({1, 1, 2, 1}, {0.5f, inf});
  const HostTensor v = floats({1, 1, 2, 1}, {3.f, 7.f});
  const HostTensor mask = bools({2, 2}, {0, 0, 1, 0});
  const std::vector<HostTensor> got =
      runStd("Attention", 23, {&q, &k, &v, &mask}, {Attribute::ofInt("qk_matmul_output_mode", 3)},
             {"Y", "", "", "qk"});
  CHECK(valuesOf(got[0]) == std::vector<float>{0.f, 3.f});
  CHECK(valuesOf(got[3]) == std::vector<float>{0.f, 0.f, 1.f, 0.f});
}

TEST_CASE("standard Attention rejects inputs that do not agree, naming the reason", "[std_ops]") {
  const HostTensor q = floats({1, 3, 2, 4}, std::vector<float>(24, 0.f));
  const HostTensor k = floats({1, 2, 2, 4}, std::vector<float>(16, 0.f));
  const HostTensor q2 = floats({1, 2, 2, 4}, std::vector<float>(16, 0.f));
  const HostTensor q3 = floats({1, 2, 8}, std::vector<float>(16, 0.f));
  const HostTensor bad_mask = floats({3, 2}, std::vector<float>(6, 0.f));
  const HostTensor long_mask = floats({2, 5}, std::vector<float>(10, 0.f));
  const HostTensor past = floats({1, 2, 1, 4}, std::vector<float>(8, 0.f));
  REQUIRE_THROWS_WITH(runStd("Attention", 23, {&q, &k, &k}, {}),
                      Catch::Contains("3 query heads are not a multiple of 2 key/value heads"));
  REQUIRE_THROWS_WITH(runStd("Attention", 23, {&q2, &k, &k, &bad_mask}, {}),
                      Catch::Contains("does not broadcast to [1,2,2,2]"));
  REQUIRE_THROWS_WITH(runStd("Attention", 23, {&q2, &k, &k, &long_mask}, {}),
                      Catch::Contains("has more columns than the 2 keys"));
  REQUIRE_THROWS_WITH(runStd("Attention", 23, {&q2, &k, &k, nullptr, &past}, {}),
                      Catch::Contains("past_key and past_value must be given together"));
  REQUIRE_THROWS_WITH(runStd("Attention", 23, {&q3, &q3, &q3}, {}),
                      Catch::Contains("3D inputs need q_num_heads and kv_num_heads"));
  REQUIRE_THROWS_WITH(runStd("Attention", 23, {&q2, &k, &q3}, {}),
                      Catch::Contains("must all have rank 3 or all rank 4"));
}

// ---- RMSNormalization ----

TEST_CASE("standard RMSNormalization matches the naive definition for every axis", "[std_ops]") {
  std::mt19937 rng(7);
  const std::vector<int64_t> dims = {3, 4, 5};
  const HostTensor x = floats(dims, randomFloats(60, rng, -3.f, 3.f));
  for (int64_t axis : {0, 1, 2, -1, -2}) {
    const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
    // Scale of the normalized shape, and one broadcast from a single trailing column.
    for (bool broadcast : {false, true}) {
      std::vector<int64_t> sd(dims.begin() + a, dims.end());
      if (broadcast) sd = {1};
      int64_t sn = 1;
      for (int64_t s : sd) sn *= s;
      const std::vector<float> sv = randomFloats(sn, rng, 0.5f, 2.f);
      const HostTensor scale = floats(sd, sv);
      const float eps = 0.05f;
      INFO("axis " << axis << (broadcast ? " broadcast scale" : ""));
      const std::vector<HostTensor> got =
          runStd("RMSNormalization", 23, {&x, &scale},
                 {Attribute::ofInt("axis", axis), Attribute::ofFloat("epsilon", eps)}, {"Y"}, 2);
      int64_t inner = 1;
      for (size_t i = a; i < 3; ++i) inner *= dims[i];
      const std::vector<float> xv = valuesOf(x);
      std::vector<double> want(60);
      for (int64_t r = 0; r < 60 / inner; ++r) {
        double sq = 0;
        for (int64_t i = 0; i < inner; ++i) sq += double(xv[r * inner + i]) * xv[r * inner + i];
        const double rms = std::sqrt(sq / inner + eps);
        for (int64_t i = 0; i < inner; ++i)
          want[r * inner + i] = xv[r * inner + i] / rms * sv[broadcast ? 0 : i];
      }
      requireClose(valuesOf(got[0]), want);
    }
  }
  const HostTensor scale = floats({5}, std::vector<float>(5, 1.f));
  REQUIRE_THROWS_WITH(runStd("RMSNormalization", 23, {&x, &scale}, {Attribute::ofInt("axis", 3)}),
                      Catch::Contains("axis 3 is outside [-3, 3)"));
  const HostTensor wrong = floats({4}, std::vector<float>(4, 1.f));
  REQUIRE_THROWS_WITH(runStd("RMSNormalization", 23, {&x, &wrong}, {}),
                      Catch::Contains("does not broadcast to X"));
}

// ---- RotaryEmbedding ----

TEST_CASE("standard RotaryEmbedding matches the naive rotation", "[std_ops]") {
  std::mt19937 rng(11);
  const int64_t B = 2, H = 3, S = 5, D = 8, max_pos = 16;
  for (bool interleaved : {false, true})
    for (int64_t R : {int64_t{0}, int64_t{4}})
      for (bool three_d : {false, true})
        for (bool with_ids : {false, true}) {
          INFO("interleaved " << interleaved << " R " << R << " 3D " << three_d << " ids "
                              << with_ids);
          const int64_t rot = R == 0 ? D : R, half = rot / 2;
          const std::vector<float> xv = randomFloats(B * H * S * D, rng);  // [B, H, S, D]
          const int64_t rows = with_ids ? max_pos : B * S;
          const std::vector<float> cv = randomFloats(rows * half, rng);
          const std::vector<float> sv = randomFloats(rows * half, rng);
          std::vector<int64_t> ids(static_cast<size_t>(B * S));
          std::uniform_int_distribution<int64_t> pick(0, max_pos - 1);
          for (int64_t& id : ids) id = pick(rng);
          const HostTensor x = three_d ? floats({B, S, H * D}, toThreeD(xv, B, H, S, D))
                                       : floats({B, H, S, D}, xv);
          const std::vector<int64_t> cache_dims =
              with_ids ? std::vector<int64_t>{max_pos, half} : std::vector<int64_t>{B, S, half};
          const HostTensor cos_t = floats(cache_dims, cv), sin_t = floats(cache_dims, sv);
          const HostTensor pos = int64s({B, S}, ids);
          std::vector<Attribute> attrs = {Attribute::ofInt("interleaved", interleaved),
                                          Attribute::ofInt("rotary_embedding_dim", R)};
          if (three_d) attrs.push_back(Attribute::ofInt("num_heads", H));
          std::vector<float> y = valuesOf(runStd(
              "RotaryEmbedding", 23, {&x, &cos_t, &sin_t, with_ids ? &pos : nullptr}, attrs)[0]);
          if (three_d) y = fromThreeD(y, B, H, S, D);
          std::vector<double> want(xv.begin(), xv.end());
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t s = 0; s < S; ++s) {
                const int64_t row = with_ids ? ids[b * S + s] : b * S + s;
                const int64_t base = ((b * H + h) * S + s) * D;
                for (int64_t i = 0; i < half; ++i) {
                  const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
                  const double c = cv[row * half + i], sn = sv[row * half + i];
                  want[base + i1] = c * xv[base + i1] - sn * xv[base + i2];
                  want[base + i2] = sn * xv[base + i1] + c * xv[base + i2];
                }
              }
          requireClose(y, want, 1e-5);
        }
  const HostTensor x = floats({1, 1, 1, 4}, {1, 2, 3, 4});
  const HostTensor c = floats({2, 2}, {1, 1, 1, 1});
  const HostTensor far = int64s({1, 1}, {2});
  REQUIRE_THROWS_WITH(runStd("RotaryEmbedding", 23, {&x, &c, &c, &far}, {}),
                      Catch::Contains("position id 2 is outside the caches' 2 rows"));
  REQUIRE_THROWS_WITH(runStd("RotaryEmbedding", 23, {&x, &c, &c, &far},
                             {Attribute::ofInt("rotary_embedding_dim", 3)}),
                      Catch::Contains("rotary_embedding_dim 3 must be even"));
}

// ---- Swish, SwiGLU ----

TEST_CASE("standard Swish and SwiGLU match x * sigmoid(alpha * x)", "[std_ops]") {
  std::mt19937 rng(5);
  const int64_t n = 5000;  // several Sigmoid blocks
  const std::vector<float> a = randomFloats(n, rng, -8.f, 8.f), b = randomFloats(n, rng);
  const HostTensor at = floats({50, 100}, a), bt = floats({50, 100}, b);
  for (float alpha : {1.f, 0.5f, 1.702f}) {
    std::vector<double> swish(n), glu(n);
    for (int64_t i = 0; i < n; ++i) {
      swish[i] = a[i] / (1 + std::exp(-double(alpha) * a[i]));
      glu[i] = swish[i] * b[i];
    }
    requireClose(valuesOf(runStd("Swish", 24, {&at}, {Attribute::ofFloat("alpha", alpha)},
                                 {"Y"}, 3)[0]),
                 swish, 1e-5);
    requireClose(valuesOf(runStd("SwiGLU", 28, {&at, &bt}, {Attribute::ofFloat("alpha", alpha)},
                                 {"Y"}, 3)[0]),
                 glu, 1e-5);
  }
  const HostTensor other = floats({100, 50}, b);
  REQUIRE_THROWS_WITH(runStd("SwiGLU", 28, {&at, &other}, {}),
                      Catch::Contains("must have the same shape (SwiGLU does not broadcast)"));
}

// ---- TensorScatter ----

TEST_CASE("TensorScatter writes each batch's update at its index, linear and circular",
          "[std_ops]") {
  const int64_t B = 2, H = 3, M = 6, S = 3, D = 2;
  std::mt19937 rng(3);
  const std::vector<float> past = randomFloats(B * H * M * D, rng);
  const std::vector<float> upd = randomFloats(B * H * S * D, rng);
  const HostTensor past_t = floats({B, H, M, D}, past), upd_t = floats({B, H, S, D}, upd);
  for (const std::string mode : {"linear", "circular"}) {
    const std::vector<int64_t> idx = mode == "linear" ? std::vector<int64_t>{0, 3}
                                                      : std::vector<int64_t>{4, 5};
    const HostTensor idx_t = int64s({B}, idx);
    const std::vector<HostTensor> got =
        runStd("TensorScatter", 24, {&past_t, &upd_t, &idx_t}, {Attribute::ofString("mode", mode)});
    std::vector<double> want(past.begin(), past.end());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t e = 0; e < D; ++e)
            want[((b * H + h) * M + (idx[b] + s) % M) * D + e] = upd[((b * H + h) * S + s) * D + e];
    INFO(mode);
    requireClose(valuesOf(got[0]), want, 0);
  }
  // Without write_indices the update goes to the front; axis 1 of a rank-3 cache.
  const HostTensor past3 = floats({1, 4, 1}, {1, 2, 3, 4}), upd3 = floats({1, 2, 1}, {8, 9});
  CHECK(valuesOf(runStd("TensorScatter", 24, {&past3, &upd3}, {Attribute::ofInt("axis", 1)})[0]) ==
        std::vector<float>{8, 9, 3, 4});
  const HostTensor late = int64s({B}, {0, 4});
  REQUIRE_THROWS_WITH(runStd("TensorScatter", 24, {&past_t, &upd_t, &late}, {}),
                      Catch::Contains("write index 4 of batch 1 puts 3 positions outside a cache of 6"));
  REQUIRE_THROWS_WITH(runStd("TensorScatter", 24, {&past_t, &upd_t}, {Attribute::ofInt("axis", 0)}),
                      Catch::Contains("must name a non-batch dim"));
}

// ---- shape rules ----

TEST_CASE("shape inference gives the standard transformer ops their output shapes", "[std_ops]") {
  const char* text = R"(
<ir_version: 10, opset_import: ["" : 24]>
g (float[batch,5,32] q, float[batch,7,16] k, float[batch,7,24] v, float[batch,2,3,8] pk,
   float[batch,2,3,12] pv, float[batch,4,5,8] x, float[50,4] c, int64[batch,5] ids,
   float16[8] w, float[batch,4,10,8] cache, float[batch,4,5,8] upd)
   => (float y, float pkey, float pval, float qk, float r, float16 n, float s, float t, float y4) {
  y, pkey, pval, qk = Attention<q_num_heads: int = 4, kv_num_heads: int = 2>(q, k, v, , pk, pv)
  y4 = Attention(x, x, x)
  r = RotaryEmbedding(x, c, c, ids)
  n = RMSNormalization(x, w)
  s = Swish(x)
  t = TensorScatter(cache, upd)
}
)";
  auto model = fusectl::parseModelText(text, "std_ops.onnxtxt");
  for (Node* n : model->graph->nodes())
    for (Value* v : n->outputs())
      if (v) v->type.shape = fusectl::Shape::unknownRank();
  const fusectl::ShapeInferenceStats stats = fusectl::inferShapes(*model);
  INFO((stats.warnings.empty() ? std::string() : stats.warnings[0]));
  std::map<std::string, std::string> want = {
      {"y", "float[batch,5,48]"},      {"pkey", "float[batch,2,10,8]"},
      {"pval", "float[batch,2,10,12]"}, {"qk", "float[batch,4,5,10]"},
      {"y4", "float[batch,4,5,8]"},     {"r", "float[batch,4,5,8]"},
      {"n", "float16[batch,4,5,8]"},    {"s", "float[batch,4,5,8]"},
      {"t", "float[batch,4,10,8]"}};
  for (const Value* out : model->graph->outputs()) {
    INFO(out->name());
    CHECK(out->type.str() == want.at(out->name()));
  }
}

}  // namespace
