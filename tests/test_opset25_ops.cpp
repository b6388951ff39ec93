// The newer ONNX ops of the full node suite that this tree runs: LinearAttention,
// CausalConvWithState (opset 27), CumProd, BitCast (26), DeformConv, Range on 16-bit floats,
// ai.onnx.ml TreeEnsemble and ai.onnx.preview FlexAttention. Each kernel is compared on random
// shapes with a naive double-precision loop written here from the operator's definition (or,
// for DeformConv with zero offsets, with the Conv kernel), and each legality check is
// exercised with the reason asserted.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/half.h"
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
using fusectl::kernels::KernelRegistry;
using fusectl::testing::floats;
using fusectl::testing::PlainAllocator;

// One node run through the kernel the global registry holds for it (every built-in kernel).
// Inputs left std::nullopt are omitted optional inputs.
std::vector<HostTensor> runNode(const std::string& op, int64_t opset,
                                const std::vector<std::optional<HostTensor>>& inputs,
                                std::vector<Attribute> attrs, int num_outputs, int threads = 1,
                                const std::string& domain = "") {
  Graph g("t");
  Graph::NodeSpec spec;
  spec.op_type = op;
  spec.domain = domain;
  spec.name = "node_" + op;
  std::vector<const HostTensor*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      spec.inputs.push_back(nullptr);
      ptrs.push_back(nullptr);
      continue;
    }
    ValueType vt;
    vt.dtype = inputs[i]->dtype();
    spec.inputs.push_back(g.addInput("in" + std::to_string(i), vt));
    ptrs.push_back(&*inputs[i]);
  }
  for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back("out" + std::to_string(i));
  spec.attributes = std::move(attrs);
  Node* node = g.createNode(std::move(spec));
  for (Value* v : node->outputs()) g.addOutput(v);
  const fusectl::kernels::KernelInfo* info = KernelRegistry::global().find(domain, op, opset);
  if (!info) throw std::logic_error("no kernel for " + op);
  PlainAllocator plain;
  KernelContext ctx(*node, opset, ptrs, plain, threads);
  info->fn(ctx);
  return ctx.outputs();
}

std::vector<float> randomFloats(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void requireClose(const HostTensor& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.dtype() == DType::Float);
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  const float* g = got.data<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::fabs(g[i] - want[i]) <= tol * (1 + std::fabs(want[i])));
  }
}

// ---- LinearAttention ----

struct LinearAttentionCase {
  int64_t B, T, Hkv, group, dk, dv;
  std::string rule;
  bool decay_per_dim, beta_shared, with_past;
  float scale;  // 0: the default 1/sqrt(d_k)
};

// The recurrence exactly as the operator defines it, in double: per (b, kv head), per step,
// decay the state, correct v by what the state already returns for k, add k v^T, read with q.
void naiveLinearAttention(const LinearAttentionCase& c, const std::vector<float>& q,
                          const std::vector<float>& k, const std::vector<float>& v,
                          const std::vector<float>& past, const std::vector<float>& decay,
                          const std::vector<float>& beta, std::vector<double>& out,
                          std::vector<double>& state) {
  const int64_t Hq = c.Hkv * c.group, dk = c.dk, dv = c.dv;
  const bool gated = c.rule == "gated" || c.rule == "gated_delta";
  const bool delta = c.rule == "delta" || c.rule == "gated_delta";
  const double scale = c.scale == 0 ? 1.0 / std::sqrt(double(dk)) : c.scale;
  out.assign(static_cast<size_t>(c.B * c.T * Hq * dv), 0.0);
  state.assign(static_cast<size_t>(c.B * c.Hkv * dk * dv), 0.0);
  if (c.with_past)
    for (size_t i = 0; i < state.size(); ++i) state[i] = past[i];
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hkv; ++h) {
      double* S = &state[static_cast<size_t>((b * c.Hkv + h) * dk * dv)];
      for (int64_t t = 0; t < c.T; ++t) {
        const int64_t row = b * c.T + t;
        if (gated)
          for (int64_t d = 0; d < dk; ++d) {
            const double g =
                c.decay_per_dim ? decay[row * c.Hkv * dk + h * dk + d] : decay[row * c.Hkv + h];
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= std::exp(g);
          }
        std::vector<double> vt(static_cast<size_t>(dv));
        for (int64_t m = 0; m < dv; ++m) vt[m] = v[row * c.Hkv * dv + h * dv + m];
        if (delta) {
          const double bt = c.beta_shared ? beta[row] : beta[row * c.Hkv + h];
          for (int64_t m = 0; m < dv; ++m) {
            double r = 0;
            for (int64_t d = 0; d < dk; ++d) r += S[d * dv + m] * k[row * c.Hkv * dk + h * dk + d];
            vt[m] = bt * (vt[m] - r);
          }
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m)
            S[d * dv + m] += k[row * c.Hkv * dk + h * dk + d] * vt[m];
        for (int64_t g = h * c.group; g < (h + 1) * c.group; ++g)
          for (int64_t m = 0; m < dv; ++m) {
            double acc = 0;
            for (int64_t d = 0; d < dk; ++d) acc += q[row * Hq * dk + g * dk + d] * S[d * dv + m];
            out[static_cast<size_t>(row * Hq * dv + g * dv + m)] = scale * acc;
          }
      }
    }
}

std::vector<HostTensor> runLinearAttention(const LinearAttentionCase& c, std::mt19937& rng,
                                           std::vector<double>& want_out,
                                           std::vector<double>& want_state, int threads) {
  const int64_t Hq = c.Hkv * c.group;
  const auto q = randomFloats(c.B * c.T * Hq * c.dk, rng);
  const auto k = randomFloats(c.B * c.T * c.Hkv * c.dk, rng, -0.5f, 0.5f);
  const auto v = randomFloats(c.B * c.T * c.Hkv * c.dv, rng);
  const auto past = randomFloats(c.B * c.Hkv * c.dk * c.dv, rng);
  const auto decay = randomFloats(c.B * c.T * c.Hkv * (c.decay_per_dim ? c.dk : 1), rng, -0.3f, 0);
  const auto beta = randomFloats(c.B * c.T * (c.beta_shared ? 1 : c.Hkv), rng, 0, 1);
  naiveLinearAttention(c, q, k, v, past, decay, beta, want_out, want_state);
  const bool gated = c.rule == "gated" || c.rule == "gated_delta";
  const bool delta = c.rule == "delta" || c.rule == "gated_delta";
  std::vector<std::optional<HostTensor>> in = {floats({c.B, c.T, Hq * c.dk}, q),
                                               floats({c.B, c.T, c.Hkv * c.dk}, k),
                                               floats({c.B, c.T, c.Hkv * c.dv}, v)};
  in.push_back(c.with_past ? std::optional<HostTensor>(floats({c.B, c.Hkv, c.dk, c.dv}, past))
                           : std::nullopt);
  in.push_back(gated ? std::optional<HostTensor>(
                           floats({c.B, c.T, c.Hkv * (c.decay_per_dim ? c.dk : 1)}, decay))
                     : std::nullopt);
  if (delta) in.push_back(floats({c.B, c.T, c.beta_shared ? 1 : c.Hkv}, beta));
  std::vector<Attribute> attrs = {Attribute::ofInt("q_num_heads", Hq),
                                  Attribute::ofInt("kv_num_heads", c.Hkv),
                                  Attribute::ofString("update_rule", c.rule)};
  if (c.scale != 0) attrs.push_back(Attribute::ofFloat("scale", c.scale));
  return runNode("LinearAttention", 27, in, attrs, 2, threads);
}

TEST_CASE("LinearAttention matches a double-precision recurrence on random shapes",
          "[opset25_ops][linear_attention]") {
  std::mt19937 rng(25);
  std::uniform_int_distribution<int64_t> small(1, 4);
  const char* rules[] = {"linear", "gated", "delta", "gated_delta"};
  for (int trial = 0; trial < 24; ++trial) {
    LinearAttentionCase c{small(rng),
                          small(rng) + 1,
                          small(rng),
                          small(rng),
                          small(rng) + 1,
                          small(rng) + 1,
                          rules[trial % 4],
                          trial % 3 != 0,
                          trial % 5 == 0,
                          trial % 2 == 0,
                          trial % 7 == 0 ? 0.3f : 0.0f};
    if (c.beta_shared == false && trial % 6 == 0) c.beta_shared = true;
    INFO("trial " << trial << " rule " << c.rule << " B" << c.B << " T" << c.T << " Hkv" << c.Hkv
                  << " group" << c.group << " dk" << c.dk << " dv" << c.dv);
    std::vector<double> want_out, want_state;
    const auto got = runLinearAttention(c, rng, want_out, want_state, 1 + trial % 3);
    REQUIRE(got.size() == 2);
    REQUIRE(got[0].dims() == std::vector<int64_t>{c.B, c.T, c.Hkv * c.group * c.dv});
    REQUIRE(got[1].dims() == std::vector<int64_t>{c.B, c.Hkv, c.dk, c.dv});
    requireClose(got[0], want_out, 1e-4);
    requireClose(got[1], want_state, 1e-4);
  }
}

TEST_CASE("LinearAttention rejects inputs its update rule does not allow, saying why",
          "[opset25_ops][linear_attention]") {
  const auto x = floats({1, 2, 4}, std::vector<float>(8, 0.5f));
  const auto heads = [](int64_t q, int64_t kv, const char* rule) {
    return std::vector<Attribute>{Attribute::ofInt("q_num_heads", q),
                                  Attribute::ofInt("kv_num_heads", kv),
                                  Attribute::ofString("update_rule", rule)};
  };
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x}, heads(2, 2, "gated"), 2),
                    Catch::Contains("requires the decay input"));
  CHECK_THROWS_WITH(
      runNode("LinearAttention", 27, {x, x, x, std::nullopt, x}, heads(2, 2, "linear"), 2),
      Catch::Contains("forbids the decay input"));
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x}, heads(2, 2, "delta"), 2),
                    Catch::Contains("requires the beta input"));
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x}, heads(3, 2, "linear"), 2),
                    Catch::Contains("positive multiple of kv_num_heads"));
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x}, heads(2, 2, "softmax"), 2),
                    Catch::Contains("is not one of linear"));
  const auto past = floats({1, 2, 2, 3}, std::vector<float>(12, 0.f));
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x, past}, heads(2, 2, "linear"), 2),
                    Catch::Contains("past_state dims [1,2,2,3] must be [1, 2, 2, 2]"));
  const auto decay = floats({1, 2, 3}, std::vector<float>(6, 0.f));
  CHECK_THROWS_WITH(
      runNode("LinearAttention", 27, {x, x, x, std::nullopt, decay}, heads(2, 2, "gated"), 2),
      Catch::Contains("decay's last dim 3 must be kv_num_heads"));
}

// ---- CausalConvWithState ----

TEST_CASE("CausalConvWithState matches a double-precision depthwise causal convolution",
          "[opset25_ops][causal_conv]") {
  std::mt19937 rng(27);
  std::uniform_int_distribution<int64_t> small(1, 5);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t B = small(rng), C = small(rng), L = small(rng), K = small(rng);
    const bool with_bias = trial % 2 == 0, with_past = trial % 3 != 0, silu = trial % 4 < 2;
    INFO("trial " << trial << " B" << B << " C" << C << " L" << L << " K" << K);
    const auto x = randomFloats(B * C * L, rng), w = randomFloats(C * K, rng);
    const auto bias = randomFloats(C, rng), past = randomFloats(B * C * (K - 1), rng);
    std::vector<double> want(static_cast<size_t>(B * C * L)), want_state;
    for (int64_t bc = 0; bc < B * C; ++bc) {
      const int64_t c = bc % C;
      std::vector<double> padded;
      for (int64_t j = 0; j < K - 1; ++j)
        padded.push_back(with_past ? past[bc * (K - 1) + j] : 0.0);
      for (int64_t t = 0; t < L; ++t) padded.push_back(x[bc * L + t]);
      for (int64_t t = 0; t < L; ++t) {
        double acc = with_bias ? bias[c] : 0.0;
        for (int64_t j = 0; j < K; ++j) acc += w[c * K + j] * padded[t + j];
        want[bc * L + t] = silu ? acc / (1 + std::exp(-acc)) : acc;
      }
      want_state.insert(want_state.end(), padded.end() - (K - 1), padded.end());
    }
    std::vector<std::optional<HostTensor>> in = {floats({B, C, L}, x), floats({C, 1, K}, w)};
    in.push_back(with_bias ? std::optional<HostTensor>(floats({C}, bias)) : std::nullopt);
    if (with_past) in.push_back(floats({B, C, K - 1}, past));
    std::vector<Attribute> attrs;
    if (silu) attrs.push_back(Attribute::ofString("activation", trial % 8 == 0 ? "swish" : "silu"));
    const auto got = runNode("CausalConvWithState", 27, in, attrs, 2, 1 + trial % 2);
    REQUIRE(got[1].dims() == std::vector<int64_t>{B, C, K - 1});
    requireClose(got[0], want, 1e-5);
    requireClose(got[1], want_state, 0);
  }
}

TEST_CASE("CausalConvWithState over a sequence equals two calls that pass the state on",
          "[opset25_ops][causal_conv]") {
  std::mt19937 rng(3);
  const int64_t B = 2, C = 3, L = 7, K = 4, split = 3;
  const auto x = randomFloats(B * C * L, rng), w = randomFloats(C * K, rng);
  const auto whole =
      runNode("CausalConvWithState", 27, {floats({B, C, L}, x), floats({C, 1, K}, w)}, {}, 2);
  std::vector<float> first, second;
  for (int64_t bc = 0; bc < B * C; ++bc) {
    first.insert(first.end(), x.begin() + bc * L, x.begin() + bc * L + split);
    second.insert(second.end(), x.begin() + bc * L + split, x.begin() + (bc + 1) * L);
  }
  const auto a = runNode("CausalConvWithState", 27,
                         {floats({B, C, split}, first), floats({C, 1, K}, w)}, {}, 2);
  const auto b =
      runNode("CausalConvWithState", 27,
              {floats({B, C, L - split}, second), floats({C, 1, K}, w), std::nullopt, a[1]}, {}, 2);
  for (int64_t bc = 0; bc < B * C; ++bc)
    for (int64_t t = 0; t < L; ++t) {
      const float got = t < split ? a[0].data<float>()[bc * split + t]
                                  : b[0].data<float>()[bc * (L - split) + t - split];
      REQUIRE(got == Approx(whole[0].data<float>()[bc * L + t]).margin(1e-6));
    }
  REQUIRE(std::memcmp(b[1].raw(), whole[1].raw(), whole[1].byteSize()) == 0);
}

TEST_CASE("CausalConvWithState rejects a weight or state of the wrong shape, saying why",
          "[opset25_ops][causal_conv]") {
  const auto x = floats({1, 2, 3}, std::vector<float>(6, 1.f));
  CHECK_THROWS_WITH(
      runNode("CausalConvWithState", 27, {x, floats({3, 1, 2}, std::vector<float>(6, 1.f))}, {}, 2),
      Catch::Contains("weight dims [3,1,2] must be [2, 1, k]"));
  CHECK_THROWS_WITH(runNode("CausalConvWithState", 27,
                            {x, floats({2, 1, 2}, std::vector<float>(4, 1.f)), std::nullopt,
                             floats({1, 2, 2}, std::vector<float>(4, 1.f))},
                            {}, 2),
                    Catch::Contains("past_state dims [1,2,2] must be [1, 2, 1]"));
  CHECK_THROWS_WITH(
      runNode("CausalConvWithState", 27, {x, floats({2, 1, 2}, std::vector<float>(4, 1.f))},
              {Attribute::ofString("activation", "relu")}, 2),
      Catch::Contains("activation 'relu' is not one of none, silu, swish"));
}

// ---- CumProd ----

TEST_CASE("CumProd matches a naive running product on every axis, exclusive and reversed",
          "[opset25_ops][cumprod]") {
  std::mt19937 rng(26);
  std::uniform_int_distribution<int64_t> small(1, 4);
  for (int trial = 0; trial < 32; ++trial) {
    const std::vector<int64_t> dims = {small(rng), small(rng), small(rng)};
    const int64_t axis = trial % 3, n = dims[0] * dims[1] * dims[2];
    const bool exclusive = trial & 4, reverse = trial & 8;
    const auto x = randomFloats(static_cast<size_t>(n), rng, 0.5f, 1.5f);
    std::vector<double> want(static_cast<size_t>(n));
    const int64_t inner = axis == 2 ? 1 : axis == 1 ? dims[2] : dims[1] * dims[2];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = (i / inner) % dims[axis];
      double p = 1;
      for (int64_t j = 0; j < dims[axis]; ++j) {
        const bool take =
            reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
        if (take) p *= x[i + (j - pos) * inner];
      }
      want[i] = p;
    }
    INFO("trial " << trial << " axis " << axis);
    const auto got = runNode(
        "CumProd", 26, {floats(dims, x), fusectl::testing::int64s({}, {axis - 3})},
        {Attribute::ofInt("exclusive", exclusive), Attribute::ofInt("reverse", reverse)}, 1);
    requireClose(got[0], want, 1e-5);
  }
  const auto ints = runNode("CumProd", 26,
                            {fusectl::testing::tensorOf<int32_t>(DType::Int32, {4}, {2, 3, -1, 5}),
                             fusectl::testing::int64s({}, {0})},
                            {}, 1);
  CHECK(fusectl::testing::valuesOf<int32_t>(ints[0]) == std::vector<int32_t>{2, 6, -6, -30});
}

// ---- BitCast ----

TEST_CASE("BitCast reinterprets bytes without converting, and refuses a width change",
          "[opset25_ops][bitcast]") {
  const std::vector<float> x = {1.0f, -0.0f, 3.5e-12f};
  const auto got = runNode("BitCast", 26, {floats({3}, x)},
                           {Attribute::ofInt("to", static_cast<int64_t>(DType::Int32))}, 1);
  REQUIRE(got[0].dtype() == DType::Int32);
  for (size_t i = 0; i < x.size(); ++i) {
    int32_t bits = 0;
    std::memcpy(&bits, &x[i], 4);
    CHECK(got[0].data<int32_t>()[i] == bits);
  }
  CHECK_THROWS_WITH(runNode("BitCast", 26, {floats({3}, x)},
                            {Attribute::ofInt("to", static_cast<int64_t>(DType::Int64))}, 1),
                    Catch::Contains("cannot reinterpret float (32 bits) as int64 (64 bits)"));
  CHECK_THROWS_WITH(runNode("BitCast", 26, {floats({3}, x)}, {Attribute::ofInt("to", 99)}, 1),
                    Catch::Contains("attribute 'to' = 99 is not an ONNX element type"));
}

// ---- DeformConv ----

struct DeformCase {
  int64_t N, C, H, W, O, KH, KW, group, offset_group, stride, pad, dilation;
};

TEST_CASE("DeformConv with zero offsets and no mask equals Conv", "[opset25_ops][deform_conv]") {
  std::mt19937 rng(19);
  const DeformCase cases[] = {{1, 2, 5, 5, 3, 3, 3, 1, 1, 1, 0, 1},
                              {2, 4, 6, 5, 4, 2, 3, 2, 2, 2, 1, 1},
                              {1, 3, 7, 7, 6, 3, 2, 3, 1, 1, 2, 2}};
  for (const DeformCase& c : cases) {
    const int64_t span_h = (c.KH - 1) * c.dilation + 1, span_w = (c.KW - 1) * c.dilation + 1;
    const int64_t OH = (c.H + 2 * c.pad - span_h) / c.stride + 1;
    const int64_t OW = (c.W + 2 * c.pad - span_w) / c.stride + 1;
    const auto x = randomFloats(c.N * c.C * c.H * c.W, rng);
    const auto w = randomFloats(c.O * (c.C / c.group) * c.KH * c.KW, rng);
    const auto b = randomFloats(c.O, rng);
    const std::vector<Attribute> attrs = {Attribute::ofInts("strides", {c.stride, c.stride}),
                                          Attribute::ofInts("pads", {c.pad, c.pad, c.pad, c.pad}),
                                          Attribute::ofInts("dilations", {c.dilation, c.dilation}),
                                          Attribute::ofInt("group", c.group)};
    std::vector<Attribute> deform_attrs = attrs;
    deform_attrs.push_back(Attribute::ofInt("offset_group", c.offset_group));
    const HostTensor xt = floats({c.N, c.C, c.H, c.W}, x);
    const HostTensor wt = floats({c.O, c.C / c.group, c.KH, c.KW}, w);
    const HostTensor bt = floats({c.O}, b);
    const auto conv = runNode("Conv", 11, {xt, wt, bt}, attrs, 1);
    const HostTensor zero =
        floats({c.N, c.offset_group * 2 * c.KH * c.KW, OH, OW},
               std::vector<float>(c.N * c.offset_group * 2 * c.KH * c.KW * OH * OW, 0.f));
    const auto deform = runNode("DeformConv", 19, {xt, wt, zero, bt}, deform_attrs, 1, 2);
    REQUIRE(deform[0].dims() == conv[0].dims());
    for (int64_t i = 0; i < conv[0].numel(); ++i)
      REQUIRE(deform[0].data<float>()[i] == Approx(conv[0].data<float>()[i]).margin(1e-5));
  }
}

TEST_CASE("DeformConv with fractional offsets and a mask matches a double-precision loop",
          "[opset25_ops][deform_conv]") {
  std::mt19937 rng(20);
  const DeformCase c{2, 4, 5, 6, 4, 3, 2, 2, 2, 1, 1, 1};
  const int64_t OH = c.H + 2 * c.pad - c.KH + 1, OW = c.W + 2 * c.pad - c.KW + 1, K = c.KH * c.KW;
  const auto x = randomFloats(c.N * c.C * c.H * c.W, rng);
  const auto w = randomFloats(c.O * (c.C / c.group) * K, rng);
  const auto off = randomFloats(c.N * c.offset_group * 2 * K * OH * OW, rng, -2.5f, 2.5f);
  const auto mask = randomFloats(c.N * c.offset_group * K * OH * OW, rng, 0.f, 1.f);
  const auto pixel = [&](int64_t n, int64_t ch, int64_t y, int64_t z) -> double {
    return y < 0 || y >= c.H || z < 0 || z >= c.W ? 0.0 : x[((n * c.C + ch) * c.H + y) * c.W + z];
  };
  std::vector<double> want(static_cast<size_t>(c.N * c.O * OH * OW), 0.0);
  const int64_t cg = c.C / c.group, og_size = c.C / c.offset_group;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = 0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int64_t ch = (o / (c.O / c.group)) * cg + ci, g = ch / og_size;
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t k = kh * c.KW + kw;
                const auto at = [&](int64_t channel) {
                  return off[((n * c.offset_group * 2 * K + channel) * OH + i) * OW + j];
                };
                const double py = i - c.pad + kh + at(g * 2 * K + 2 * k);
                const double px = j - c.pad + kw + at(g * 2 * K + 2 * k + 1);
                const double y0 = std::floor(py), x0 = std::floor(px), fy = py - y0, fx = px - x0;
                const int64_t iy = static_cast<int64_t>(y0), ix = static_cast<int64_t>(x0);
                const double v = (1 - fy) * (1 - fx) * pixel(n, ch, iy, ix) +
                                 (1 - fy) * fx * pixel(n, ch, iy, ix + 1) +
                                 fy * (1 - fx) * pixel(n, ch, iy + 1, ix) +
                                 fy * fx * pixel(n, ch, iy + 1, ix + 1);
                const double m = mask[((n * c.offset_group * K + g * K + k) * OH + i) * OW + j];
                acc += w[(o * cg + ci) * K + k] * m * v;
              }
          }
          want[static_cast<size_t>(((n * c.O + o) * OH + i) * OW + j)] = acc;
        }
  const auto got = runNode(
      "DeformConv", 19,
      {floats({c.N, c.C, c.H, c.W}, x), floats({c.O, cg, c.KH, c.KW}, w),
       floats({c.N, c.offset_group * 2 * K, OH, OW}, off), std::nullopt,
       floats({c.N, c.offset_group * K, OH, OW}, mask)},
      {Attribute::ofInts("pads", {c.pad, c.pad, c.pad, c.pad}), Attribute::ofInt("group", c.group),
       Attribute::ofInt("offset_group", c.offset_group)},
      1, 3);
  requireClose(got[0], want, 1e-5);
  CHECK_THROWS_WITH(
      runNode("DeformConv", 19,
              {floats({c.N, c.C, c.H, c.W}, x), floats({c.O, cg, c.KH, c.KW}, w),
               floats({c.N, 2 * K, OH, OW}, std::vector<float>(c.N * 2 * K * OH * OW, 0.f))},
              {Attribute::ofInts("pads", {c.pad, c.pad, c.pad, c.pad}),
               Attribute::ofInt("group", c.group), Attribute::ofInt("offset_group", 2)},
              1),
      Catch::Contains("offset dims [2,12,5,7] must be [2, 24, 5, 7]"));
}

// ---- Range on 16-bit floats ----

TEST_CASE("Range counts and steps 16-bit floats in float, one rounding per element",
          "[opset25_ops][range]") {
  const auto half = [](float v) {
    return fusectl::testing::tensorOf<uint16_t>(DType::Float16, {},
                                                {fusectl::kernels::floatToHalf(v)});
  };
  const auto got = runNode("Range", 11, {half(1.0f), half(2.9f), half(0.3f)}, {}, 1);
  REQUIRE(got[0].dims() == std::vector<int64_t>{7});  // ceil((2.9 - 1) / 0.3) in half values
  for (int64_t i = 0; i < 7; ++i) {
    const float want = fusectl::kernels::halfToFloat(fusectl::kernels::floatToHalf(
        fusectl::kernels::halfToFloat(fusectl::kernels::floatToHalf(1.0f)) +
        i * fusectl::kernels::halfToFloat(fusectl::kernels::floatToHalf(0.3f))));
    CHECK(fusectl::kernels::halfToFloat(got[0].data<uint16_t>()[i]) == want);
  }
}

// ---- TreeEnsemble ----

// Two trees over two features, one set-membership node: the leaves each row reaches are worked
// out by hand in the comments.
std::vector<Attribute> twoTrees(int64_t aggregate) {
  // Tree 0 (root 0): x0 <= 1 ? leaf 0 (target 0, 1.5) : node 1: x1 in {2, 4} ? leaf 1 (t1, 2)
  //                                                                         : leaf 2 (t0, -1)
  // Tree 1 (root 2): x1 > 0 ? leaf 3 (t0, 10) : leaf 4 (t1, 20)
  return {Attribute::ofInt("n_targets", 2),
          Attribute::ofInt("aggregate_function", aggregate),
          Attribute::ofInts("tree_roots", {0, 2}),
          Attribute::ofInts("nodes_featureids", {0, 1, 1}),
          Attribute::ofTensor("nodes_modes",
                              fusectl::Tensor::fromValues<uint8_t>(DType::UInt8, {3}, {0, 6, 3})),
          Attribute::ofTensor("nodes_splits",
                              fusectl::Tensor::fromValues<float>(DType::Float, {3}, {1, 0, 0})),
          Attribute::ofTensor("membership_values",
                              fusectl::Tensor::fromValues<float>(DType::Float, {3}, {2, 4, NAN})),
          Attribute::ofInts("nodes_truenodeids", {0, 1, 3}),
          Attribute::ofInts("nodes_trueleafs", {1, 1, 1}),
          Attribute::ofInts("nodes_falsenodeids", {1, 2, 4}),
          Attribute::ofInts("nodes_falseleafs", {0, 1, 1}),
          Attribute::ofInts("leaf_targetids", {0, 1, 0, 0, 1}),
          Attribute::ofTensor("leaf_weights", fusectl::Tensor::fromValues<float>(
                                                  DType::Float, {5}, {1.5f, 2, -1, 10, 20}))};
}

TEST_CASE("TreeEnsemble walks each tree and aggregates per target",
          "[opset25_ops][tree_ensemble]") {
  // Rows: (0, 4): tree 0 leaf 0 (t0 1.5), tree 1 leaf 3 (t0 10)
  //       (2, 4): tree 0 leaf 1 (t1 2),   tree 1 leaf 3 (t0 10)
  //       (2, -3): tree 0 leaf 2 (t0 -1), tree 1 leaf 4 (t1 20)
  const auto x = floats({3, 2}, {0, 4, 2, 4, 2, -3});
  const auto sum = runNode("TreeEnsemble", 5, {x}, twoTrees(1), 1, 1, "ai.onnx.ml");
  CHECK(fusectl::testing::valuesOf<float>(sum[0]) == std::vector<float>{11.5f, 0, 10, 2, -1, 20});
  const auto avg = runNode("TreeEnsemble", 5, {x}, twoTrees(0), 1, 1, "ai.onnx.ml");
  CHECK(fusectl::testing::valuesOf<float>(avg[0]) == std::vector<float>{5.75f, 0, 5, 1, -0.5f, 10});
  const auto mx = runNode("TreeEnsemble", 5, {x}, twoTrees(3), 1, 1, "ai.onnx.ml");
  CHECK(mx[0].data<float>()[0] == 10);
  CHECK(mx[0].data<float>()[3] == 2);
}

TEST_CASE("TreeEnsemble rejects a cycle and an out-of-range child, saying why",
          "[opset25_ops][tree_ensemble]") {
  const auto x = floats({1, 2}, {0, 0});
  std::vector<Attribute> cyclic = twoTrees(1);
  for (Attribute& a : cyclic)
    if (a.name == "nodes_falsenodeids")
      a.ints = {1, 0, 4};
    else if (a.name == "nodes_falseleafs")
      a.ints = {0, 0, 1};
  CHECK_THROWS_WITH(runNode("TreeEnsemble", 5, {x}, cyclic, 1, 1, "ai.onnx.ml"),
                    Catch::Contains("cycle through node 0"));
  std::vector<Attribute> wild = twoTrees(1);
  for (Attribute& a : wild)
    if (a.name == "nodes_truenodeids") a.ints = {9, 1, 3};
  CHECK_THROWS_WITH(runNode("TreeEnsemble", 5, {x}, wild, 1, 1, "ai.onnx.ml"),
                    Catch::Contains("node 0 points at leaf 9"));
}

// ---- FlexAttention ----

TEST_CASE("FlexAttention without modifiers matches a double-precision softmax attention",
          "[opset25_ops][flex_attention]") {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> small(1, 4);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t B = small(rng), Hkv = small(rng), group = small(rng), L = small(rng),
                  S = small(rng);
    const int64_t E = small(rng) + 1, Ev = small(rng) + 1, Hq = Hkv * group;
    const double scale = trial % 2 ? 0.3 : 1.0 / std::sqrt(double(E));
    const auto q = randomFloats(B * Hq * L * E, rng), k = randomFloats(B * Hkv * S * E, rng);
    const auto v = randomFloats(B * Hkv * S * Ev, rng);
    std::vector<double> want(static_cast<size_t>(B * Hq * L * Ev), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t l = 0; l < L; ++l) {
          const int64_t kh = b * Hkv + h / group;
          std::vector<double> p(static_cast<size_t>(S));
          double sum = 0;
          for (int64_t s = 0; s < S; ++s) {
            double d = 0;
            for (int64_t e = 0; e < E; ++e)
              d += q[((b * Hq + h) * L + l) * E + e] * k[(kh * S + s) * E + e];
            sum += (p[s] = std::exp(scale * d));
          }
          for (int64_t s = 0; s < S; ++s)
            for (int64_t e = 0; e < Ev; ++e)
              want[((b * Hq + h) * L + l) * Ev + e] += p[s] / sum * v[(kh * S + s) * Ev + e];
        }
    std::vector<Attribute> attrs;
    if (trial % 2) attrs.push_back(Attribute::ofFloat("scale", 0.3f));
    const HostTensor qt = floats({B, Hq, L, E}, q), kt = floats({B, Hkv, S, E}, k),
                     vt = floats({B, Hkv, S, Ev}, v);
    const auto got = runNode("FlexAttention", 1, {qt, kt, vt}, attrs, 1, 2, "ai.onnx.preview");
    INFO("trial " << trial);
    requireClose(got[0], want, 1e-5);
  }
}

// ---- ai.onnx.ml Binarizer and ArrayFeatureExtractor ----

TEST_CASE("Binarizer and ArrayFeatureExtractor match a naive loop", "[opset25_ops][ml_features]") {
  std::mt19937 rng(5);
  const auto x = randomFloats(24, rng, -2.f, 2.f);
  const auto bin = runNode("Binarizer", 1, {floats({2, 3, 4}, x)},
                           {Attribute::ofFloat("threshold", 0.25f)}, 1, 1, "ai.onnx.ml");
  for (size_t i = 0; i < x.size(); ++i)
    CHECK(bin[0].data<float>()[i] == (x[i] > 0.25f ? 1.f : 0.f));
  const auto picked = runNode("ArrayFeatureExtractor", 1,
                              {floats({2, 3, 4}, x), fusectl::testing::int64s({3}, {3, 0, 3})}, {},
                              1, 1, "ai.onnx.ml");
  REQUIRE(picked[0].dims() == std::vector<int64_t>{2, 3, 3});
  const int64_t cols[] = {3, 0, 3};
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 3; ++j) CHECK(picked[0].data<float>()[r * 3 + j] == x[r * 4 + cols[j]]);
  const auto row = runNode("ArrayFeatureExtractor", 1,
                           {floats({4}, {1, 2, 3, 4}), fusectl::testing::int64s({1}, {2})}, {}, 1,
                           1, "ai.onnx.ml");
  CHECK(row[0].dims() == std::vector<int64_t>{1, 1});
  CHECK_THROWS_WITH(runNode("ArrayFeatureExtractor", 1,
                            {floats({4}, {1, 2, 3, 4}), fusectl::testing::int64s({1}, {4})}, {}, 1,
                            1, "ai.onnx.ml"),
                    Catch::Contains("index 4 is out of range for a last axis of 4"));
}

}  // namespace
