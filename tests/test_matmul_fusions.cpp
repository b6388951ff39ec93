// The MatMul family of issue 12 against independent references: the FusedMatMul kernel (weight
// packed once per executor, epilogue in registers) against a naive double-precision loop, and
// fuse-matmul-epilogue / fuse-gelu on the testdata transformer exports (what fused, what not).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/passes/pipeline.h"
#include "random_values.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

HostTensor floatTensor(std::vector<int64_t> dims, const std::vector<float>& values) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  std::copy(values.begin(), values.end(), t.mutableData<float>());
  return t;
}

std::string floatList(const std::vector<float>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{:.9g}", i ? ", " : "", v[i]);
  return out;
}

double activationRef(const std::string& act, double x) {
  if (act.empty()) return x;
  if (act == "Relu") return std::max(x, 0.0);
  if (act == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (act == "Tanh") return std::tanh(x);
  if (act == "Silu") return x / (1 + std::exp(-x));
  if (act == "HardSwish") return x * std::min(1.0, std::max(0.0, x / 6 + 0.5));
  if (act == "Gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  FAIL("no reference for " << act);
  return 0;
}

struct FusedMatMulCase {
  std::vector<int64_t> a_dims;  // [..., K]
  int64_t n = 0;
  bool bias = true;
  bool residual = false;
  std::string activation;
};

// Y = act(A x W + b + Z) with W and b as initializers (so the executor packs W once), run
// twice through one executor (the second run reads the cached packed weight), against a double
// loop.
void checkFusedMatMul(const FusedMatMulCase& c, int threads) {
  const int64_t K = c.a_dims.back(), N = c.n;
  int64_t M = 1;
  for (size_t i = 0; i + 1 < c.a_dims.size(); ++i) M *= c.a_dims[i];
  std::vector<int64_t> y_dims = c.a_dims;
  y_dims.back() = N;
  const std::vector<float> a = randomFloats(M * K, 1), w = randomFloats(K * N, 2),
                           b = randomFloats(N, 3), z = randomFloats(M * N, 4);
  auto dims = [](const std::vector<int64_t>& d) { return fmt::format("{}", fmt::join(d, ", ")); };
  std::string inputs = fmt::format("float[{}] A", dims(c.a_dims));
  if (c.residual) inputs += fmt::format(", float[{}] Z", dims(y_dims));
  std::string args = "A, W";
  if (c.bias) args += ", B";
  if (c.residual) args += c.bias ? ", Z" : ",, Z";
  const std::string attrs =
      c.activation.empty() ? "" : fmt::format(" <activation = \"{}\">", c.activation);
  const std::string text = fmt::format(
      R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g ({}) => (float[{}] Y)
<
  float[{}, {}] W = {{{}}},
  float[{}] B = {{{}}}
>
{{
  Y = fusectl.FusedMatMul{} ({})
}}
)",
      inputs, dims(y_dims), K, N, floatList(w), N, floatList(b), attrs, args);
  auto model = parseModelText(text, "fused_matmul");
  ExecutorOptions options;
  options.num_threads = threads;
  Executor ex(*model, options);
  std::vector<NamedTensor> feeds = {{"A", floatTensor(c.a_dims, a)}};
  if (c.residual) feeds.push_back({"Z", floatTensor(y_dims, z)});
  for (int run = 0; run < 2; ++run) {
    auto out = ex.run(feeds);
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].tensor.dims() == y_dims);
    const float* y = out[0].tensor.data<float>();
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[i * K + k]) * w[k * N + j];
        if (c.bias) acc += b[j];
        if (c.residual) acc += z[i * N + j];
        const double want = activationRef(c.activation, acc);
        INFO("run " << run << " row " << i << " col " << j << " activation '" << c.activation
                    << "' threads " << threads);
        REQUIRE(std::abs(y[i * N + j] - want) <= 1e-5 + 1e-4 * std::abs(want));
      }
    }
  }
}

}  // namespace

TEST_CASE("FusedMatMul: one packed GEMM over the rows of a batched A, epilogue applied",
          "[kernels][gemm][fused][matmul-fusions]") {
  const int threads = GENERATE(1, 2);
  for (const char* act : {"", "Relu", "Gelu", "Silu", "Tanh", "Sigmoid", "HardSwish"}) {
    checkFusedMatMul({{2, 5, 37}, 29, true, false, act}, threads);
    checkFusedMatMul({{2, 5, 37}, 29, true, true, act}, threads);
  }
  checkFusedMatMul({{3, 2, 4, 16}, 33, true, true, "Gelu"}, threads);  // 4-D activations
  checkFusedMatMul({{1, 70, 64}, 96, true, false, ""}, threads);        // several row panels
  checkFusedMatMul({{2, 3, 8}, 5, false, true, "Relu"}, threads);       // residual, no bias
}

TEST_CASE("FusedMatMul: a bad operand is a one-line error naming the node",
          "[kernels][gemm][fused][matmul-fusions]") {
  auto model = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[2, 3, 4] A, float[5, 6] W, float[6] B) => (float[2, 3, 6] Y)
{
  Y = fusectl.FusedMatMul (A, W, B)
}
)",
                              "bad");
  Executor ex(*model, ExecutorOptions{});
  std::vector<NamedTensor> feeds = {{"A", floatTensor({2, 3, 4}, randomFloats(24, 1))},
                                    {"W", floatTensor({5, 6}, randomFloats(30, 2))},
                                    {"B", floatTensor({6}, randomFloats(6, 3))}};
  REQUIRE_THROWS_WITH(ex.run(feeds), Catch::Contains("inner dimensions differ") &&
                                         Catch::Contains("FusedMatMul"));
}

TEST_CASE("SwiGLU: g * sigmoid(g) * up against double precision, every block boundary",
          "[kernels][fused][matmul-fusions]") {
  const int threads = GENERATE(1, 2);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{1025}, int64_t{70001}}) {
    auto model = parseModelText(fmt::format(R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[{0}] G, float[{0}] U) => (float[{0}] Y)
{{
  Y = fusectl.SwiGLU (G, U)
}}
)",
                                            n),
                                "swiglu");
    ExecutorOptions options;
    options.num_threads = threads;
    std::vector<float> g = randomFloats(n, 5), u = randomFloats(n, 6);
    for (float& x : g) x *= 12.f;  // into both tails of the sigmoid
    auto out = Executor(*model, options).run({{"G", floatTensor({n}, g)}, {"U", floatTensor({n}, u)}});
    const float* y = out.at(0).tensor.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(g[i]) / (1 + std::exp(-double(g[i]))) * u[i];
      INFO("n " << n << " i " << i << " g " << g[i]);
      REQUIRE(std::abs(y[i] - want) <= 1e-6 + 1e-5 * std::abs(want));
    }
  }
}
