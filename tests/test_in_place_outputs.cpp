// Elementwise kernels that write their output over an input they are the last reader of
// (KernelContext::allocateOutputOverInputs). The model runs with ExecutorOptions::donate_inputs
// on and off: the outputs must be the same bits, the numbers those of a reference computed
// here, and the peak of live activations lower by the buffers the in-place writes saved. (The
// channels-last scale and depthwise convolution: test_channels_last.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "kernel_case.h"
#include "random_values.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

struct DonationRun {
  std::vector<float> y;
  uint64_t peak = 0;
};

DonationRun runDonating(const Model& model, bool donate, int threads,
                        const std::vector<NamedTensor>& inputs) {
  ExecutorOptions options;
  options.num_threads = threads;
  options.donate_inputs = donate;
  Executor ex(model, options);
  ExecutionStats stats;
  const std::vector<NamedTensor> out = ex.run(inputs, &stats);
  const HostTensor& y = out.at(0).tensor;
  return {std::vector<float>(y.data<float>(), y.data<float>() + y.numel()),
          stats.peak_activation_bytes};
}

}  // namespace

TEST_CASE("Elementwise kernels write over an input they are the last reader of",
          "[kernels][in_place]") {
  // k stays live to the end, so with a buffer of its own for every value three are live at
  // once (a, k, b at the Relu; c, k, y at the Add); over their inputs, two.
  const auto model = parseModelText(R"onnx(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[2, 3, 40] X, float[40] S) => (float[2, 3, 40] Z) <float lo = {-0.25}, float hi = {0.5}> {
  a = Neg (X)
  k = Exp (X)
  b = Relu (a)
  c = Mul (S, b)
  d = fusectl.Elementwise <program = "t0 = Mul(x0, x1); t1 = Sigmoid(t0)"> (c, S)
  e = Clip (d, lo, hi)
  y = Add (e, k)
  Z = Neg (y)
}
)onnx",
                                    "<in-place test>");
  const int64_t n = 2 * 3 * 40;
  const std::vector<float> x = randomFloats(static_cast<size_t>(n), 11);
  const std::vector<float> s = randomFloats(40, 12);
  const std::vector<NamedTensor> inputs = {{"X", testing::floats({2, 3, 40}, x)},
                                           {"S", testing::floats({40}, s)}};
  for (const int threads : {1, 2}) {
    INFO(threads << " threads");
    const DonationRun own = runDonating(*model, false, threads, inputs);
    const DonationRun over = runDonating(*model, true, threads, inputs);
    CHECK(over.y == own.y);
    CHECK(own.peak == 3 * n * sizeof(float));
    CHECK(over.peak == 2 * n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      const double sc = s[static_cast<size_t>(i % 40)];
      const double c = sc * std::max(-double(x[static_cast<size_t>(i)]), 0.0);
      const double d = 1 / (1 + std::exp(-(c * sc)));
      const double e = std::min(std::max(d, -0.25), 0.5);
      const double want = -(e + std::exp(double(x[static_cast<size_t>(i)])));
      INFO("element " << i);
      REQUIRE(std::abs(over.y[static_cast<size_t>(i)] - want) <= 1e-6 + 1e-6 * std::abs(want));
    }
  }
}
