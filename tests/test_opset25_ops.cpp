// The ONNX opset 26-27 ops this tree runs without a fusectl rewrite: LinearAttention,
// CausalConvWithState, CumProd and BitCast. Each kernel is compared on random shapes with a
// naive double-precision loop written here from the operator's definition, and each legality
// check is exercised with the reason asserted.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
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
std::vector<HostTensor> runNode(const std::string& op, int64_t opset,
                                const std::vector<std::optional<HostTensor>>& inputs,
                                std::vector<Attribute> attrs, int num_outputs, int threads = 1) {
  Graph g("t");
  Graph::NodeSpec spec;
  spec.op_type = op;
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
  const fusectl::kernels::KernelInfo* info = KernelRegistry::global().find("", op, opset);
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
            const double g = c.decay_per_dim ? decay[row * c.Hkv * dk + h * dk + d]
                                             : decay[row * c.Hkv + h];
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
          for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += k[row * c.Hkv * dk + h * dk + d] * vt[m];
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
  std::vector<std::optional<HostTensor>> in = {
      floats({c.B, c.T, Hq * c.dk}, q), floats({c.B, c.T, c.Hkv * c.dk}, k),
      floats({c.B, c.T, c.Hkv * c.dv}, v)};
  in.push_back(c.with_past ? std::optional<HostTensor>(floats({c.B, c.Hkv, c.dk, c.dv}, past))
                           : std::nullopt);
  in.push_back(gated ? std::optional<HostTensor>(floats(
                           {c.B, c.T, c.Hkv * (c.decay_per_dim ? c.dk : 1)}, decay))
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
    LinearAttentionCase c{small(rng), small(rng) + 1, small(rng), small(rng), small(rng) + 1,
                          small(rng) + 1, rules[trial % 4], trial % 3 != 0, trial % 5 == 0,
                          trial % 2 == 0, trial % 7 == 0 ? 0.3f : 0.0f};
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
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x, std::nullopt, x}, heads(2, 2, "linear"), 2),
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
  CHECK_THROWS_WITH(runNode("LinearAttention", 27, {x, x, x, std::nullopt, decay},
                            heads(2, 2, "gated"), 2),
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
      for (int64_t j = 0; j < K - 1; ++j) padded.push_back(with_past ? past[bc * (K - 1) + j] : 0.0);
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
  const auto whole = runNode("CausalConvWithState", 27, {floats({B, C, L}, x), floats({C, 1, K}, w)}, {}, 2);
  std::vector<float> first, second;
  for (int64_t bc = 0; bc < B * C; ++bc) {
    first.insert(first.end(), x.begin() + bc * L, x.begin() + bc * L + split);
    second.insert(second.end(), x.begin() + bc * L + split, x.begin() + (bc + 1) * L);
  }
  const auto a = runNode("CausalConvWithState", 27, {floats({B, C, split}, first), floats({C, 1, K}, w)}, {}, 2);
  const auto b = runNode("CausalConvWithState", 27,
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
  CHECK_THROWS_WITH(runNode("CausalConvWithState", 27, {x, floats({3, 1, 2}, std::vector<float>(6, 1.f))}, {}, 2),
                    Catch::Contains("weight dims [3,1,2] must be [2, 1, k]"));
  CHECK_THROWS_WITH(runNode("CausalConvWithState", 27,
                            {x, floats({2, 1, 2}, std::vector<float>(4, 1.f)), std::nullopt,
                             floats({1, 2, 2}, std::vector<float>(4, 1.f))}, {}, 2),
                    Catch::Contains("past_state dims [1,2,2] must be [1, 2, 1]"));
  CHECK_THROWS_WITH(runNode("CausalConvWithState", 27, {x, floats({2, 1, 2}, std::vector<float>(4, 1.f))},
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
        const bool take = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
        if (take) p *= x[i + (j - pos) * inner];
      }
      want[i] = p;
    }
    INFO("trial " << trial << " axis " << axis);
    const auto got = runNode("CumProd", 26, {floats(dims, x), fusectl::testing::int64s({}, {axis - 3})},
                             {Attribute::ofInt("exclusive", exclusive), Attribute::ofInt("reverse", reverse)}, 1);
    requireClose(got[0], want, 1e-5);
  }
  const auto ints = runNode("CumProd", 26,
                            {fusectl::testing::tensorOf<int32_t>(DType::Int32, {4}, {2, 3, -1, 5}),
                             fusectl::testing::int64s({}, {0})}, {}, 1);
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

}  // namespace
