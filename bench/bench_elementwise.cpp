// fusectl::Elementwise (fuse-elementwise) against the elementwise ops it replaces, both run
// through the executor on the same inputs, A/B/A/B: a six-op chain over 16M floats, a BERT-style
// additive mask built from a [1, 1, 1, S] mask and added to [1, 12, S, S] scores, a
// squeeze-excite gate (Sigmoid of [1, C, 1, 1] times [1, C, H, W]) and GELU written with Erf
// (which fuse-gelu would take; here it shows what the generic program costs against the five
// ops). The fused model is what the pass writes (fuse-elementwise alone on the unfused model).
//
//   bench_elementwise [--threads N] [--repeat R] [--only SUBSTRING] [--clock wall|cpu]
//
// One JSON line per case: medians in ms, fused/unfused (below 1: the program is faster), the
// fused kernel's GB/s over the bytes it must move (inputs read once, output written once).
// No assertions (speed is not a unit-test property).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/passes/optimize.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;

struct Case {
  const char* name;
  const char* text;
};

const Case kCases[] = {
    {"chain6_16M", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[4096, 4096] X, float[4096, 4096] Z) => (float[4096, 4096] Y)
<float half = {0.5}, float one = {1}>
{
  A = Mul (X, half)
  B = Add (A, one)
  C = Tanh (B)
  D = Mul (C, X)
  E = Sub (D, Z)
  Y = Relu (E)
})"},
    {"bert_mask_s128", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 1, 1, 128] M, float[1, 12, 128, 128] S) => (float[1, 12, 128, 128] Y)
<float one = {1}, float big = {-10000}>
{
  Inv = Sub (one, M)
  Bias = Mul (Inv, big)
  Y = Add (S, Bias)
})"},
    {"se_gate_96x56x56", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 96, 56, 56] X, float[1, 96, 1, 1] G) => (float[1, 96, 56, 56] Y)
{
  S = Sigmoid (G)
  Y = Mul (X, S)
})"},
    {"gelu_erf_128x3072", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[128, 3072] X) => (float[128, 3072] Y)
<float sqrt2 = {1.4142135}, float one = {1}, float half = {0.5}>
{
  A = Div (X, sqrt2)
  B = Erf (A)
  C = Add (B, one)
  D = Mul (X, C)
  Y = Mul (D, half)
})"},
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeat = 20;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_elementwise: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(value());
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(value());
    else if (!std::strcmp(argv[i], "--only")) only = value();
    else if (!std::strcmp(argv[i], "--clock")) fusectl::bench::g_cpu_clock = !std::strcmp(value(), "cpu");
    else {
      std::fprintf(stderr,
                   "usage: bench_elementwise [--threads N] [--repeat R] [--only SUBSTRING] "
                   "[--clock wall|cpu]\n");
      return 2;
    }
  }
  for (const Case& c : kCases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    std::unique_ptr<Model> unfused = parseModelText(c.text, c.name);
    std::unique_ptr<Model> fused = parseModelText(c.text, c.name);
    passes::OptimizeRequest request;
    request.passes = "fuse-elementwise";
    passes::optimize(*fused, request);
    ExecutorOptions options;
    options.num_threads = threads;
    Executor a(*unfused, options), b(*fused, options);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<NamedTensor> inputs;
    double bytes = 0;
    for (const Value* in : unfused->graph->inputs()) {
      std::vector<int64_t> dims;
      for (const Dim& d : in->shape().dims()) dims.push_back(d.value());
      HostTensor t(DType::Float, dims);
      float* p = t.mutableData<float>();
      for (int64_t k = 0; k < t.numel(); ++k) p[k] = dist(rng);
      bytes += 4.0 * static_cast<double>(t.numel());
      inputs.push_back({in->name(), std::move(t)});
    }
    {
      const HostTensor y = b.run(inputs)[0].tensor;
      bytes += 4.0 * static_cast<double>(y.numel());
    }
    a.run(inputs);
    const auto [ma, mb] = fusectl::bench::alternatingMedians(
        repeat, [&] { a.run(inputs); }, [&] { b.run(inputs); });
    std::printf(
        "{\"case\": \"%s\", \"threads\": %d, \"unfused_nodes\": %zu, \"fused_nodes\": %zu, "
        "\"unfused_ms\": %.3f, \"fused_ms\": %.3f, \"fused_over_unfused\": %.3f, "
        "\"fused_gb_per_s\": %.2f}\n",
        c.name, threads, unfused->graph->numNodes(), fused->graph->numNodes(), ma * 1e3,
        mb * 1e3, mb / ma, bytes / mb / 1e9);
    std::fflush(stdout);
  }
  return 0;
}
