// The fused norm kernels (fusectl LayerNorm, SkipLayerNorm, RMSNorm, GroupNorm; norms_fused.cpp)
// against the unfused op chains they replace, both run through the executor on one thread, with the
// STREAM triad measured in the same run: one JSON line per (op, shape) with the median time of
// each, the speed-up, the fused node's GB/s (bytes of its inputs and outputs over its median
// time) and that figure's ratio to the triad's GB/s. No assertions: figures are read off by
// people (bench/README.md).
//
//   bench_norms [--repeat R] [--threads T]
// Shapes: [128, 768] and [2048, 768] (BERT-base rows), [1, 32, 4096] (LLaMA-7B decode rows);
// GroupNorm: [1, 512, 1001] in one group (ConvTasNet's global norm), [1, 320, 64, 64] and
// [1, 128, 56, 56] in 32 groups (diffusion UNets, GroupNorm ResNets).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;
using fusectl::bench::median;
using fusectl::bench::now;

HostTensor randomFloats(const std::vector<int64_t>& dims, uint32_t seed) {
  HostTensor t(DType::Float, dims);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  float* p = t.mutableData<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

std::string dimsText(const std::vector<int64_t>& d) { return fmt::format("{}", fmt::join(d, ", ")); }

std::string floatsText(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.5f, 1.5f);
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + fmt::format("{}", dist(gen));
  return s;
}

// The model of `op` over x of `dims`: the fused node, or the chain that fuse-layer-norm /
// fuse-rms-norm / fuse-skip-norm would replace (opset 13 spellings).
std::string modelText(const std::string& op, const std::vector<int64_t>& dims, bool fused) {
  const int64_t h = dims.back();
  const std::string d = dimsText(dims);
  const bool skip = op == "SkipLayerNorm";
  const bool rms = op == "RMSNorm";
  std::string text = fmt::format(
      "<ir_version: 8, opset_import: [\"\" : 13, \"fusectl\" : 1]>\n"
      "g (float[{0}] X{1}) => (float[{0}] Y)\n<\n  float eps = {{1e-5}},\n"
      "  float[{2}] gamma = {{{3}}},\n  float[{2}] beta = {{{4}}}\n>\n{{\n",
      d, skip ? fmt::format(", float[{}] R", d) : "", h, floatsText(h, 1), floatsText(h, 2));
  const int64_t axis = static_cast<int64_t>(dims.size()) - 1;
  if (fused) {
    const std::string attrs = fmt::format("<axis = {}, epsilon = 1e-5>", axis);
    if (op == "LayerNorm") text += "  Y = fusectl.LayerNorm " + attrs + " (X, gamma, beta)\n";
    if (rms) text += "  Y = fusectl.RMSNorm " + attrs + " (X, gamma)\n";
    if (skip) text += "  Y = fusectl.SkipLayerNorm " + attrs + " (X, R, gamma, beta)\n";
    return text + "}\n";
  }
  std::string x = "X";
  if (skip) {
    text += "  H = Add (X, R)\n";
    x = "H";
  }
  if (rms) {
    text += fmt::format("  Q = Mul ({0}, {0})\n  V = ReduceMean <axes = [-1]> (Q)\n"
                        "  A = Add (V, eps)\n  S = Sqrt (A)\n  T = Reciprocal (S)\n"
                        "  N = Mul ({0}, T)\n  Y = Mul (N, gamma)\n",
                        x);
  } else {
    text += fmt::format("  M = ReduceMean <axes = [-1]> ({0})\n  D = Sub ({0}, M)\n"
                        "  Q = Mul (D, D)\n  V = ReduceMean <axes = [-1]> (Q)\n"
                        "  A = Add (V, eps)\n  S = Sqrt (A)\n  N = Div (D, S)\n"
                        "  G = Mul (N, gamma)\n  Y = Add (G, beta)\n",
                        x);
  }
  return text + "}\n";
}

// GroupNorm over x of `dims` in `groups` groups: the fused node, or the chain PyTorch's exporter
// writes (Reshape, InstanceNormalization, Reshape, Mul, Add) that fuse-group-norm replaces.
std::string groupNormModelText(const std::vector<int64_t>& dims, int64_t groups, bool fused) {
  const int64_t c = dims[1];
  std::string units;  // the weight's trailing dims: [C, 1, ..., 1]
  for (size_t i = 2; i < dims.size(); ++i) units += ", 1";
  std::string text = fmt::format(
      "<ir_version: 8, opset_import: [\"\" : 13, \"fusectl\" : 1]>\n"
      "g (float[{0}] X) => (float[{0}] Y)\n<\n  float[{1}{2}] gamma = {{{3}}},\n"
      "  float[{1}{2}] beta = {{{4}}}",
      dimsText(dims), c, fused ? "" : units, floatsText(c, 1), floatsText(c, 2));
  if (fused) {
    return text + fmt::format("\n>\n{{\n  Y = fusectl.GroupNorm <num_groups = {}, epsilon = "
                              "1e-5> (X, gamma, beta)\n}}\n",
                              groups);
  }
  return text + fmt::format(
                    ",\n  int64[3] grouped = {{0, {0}, -1}},\n  float[{0}] ones = {{{1}}},\n"
                    "  float[{0}] zeros = {{{2}}},\n  int64[{3}] back = {{{4}}}\n>\n{{\n"
                    "  R = Reshape (X, grouped)\n"
                    "  N = InstanceNormalization <epsilon = 1e-5> (R, ones, zeros)\n"
                    "  U = Reshape (N, back)\n  G = Mul (U, gamma)\n  Y = Add (G, beta)\n}}\n",
                    groups, fmt::format("{}", fmt::join(std::vector<int>(groups, 1), ", ")),
                    fmt::format("{}", fmt::join(std::vector<int>(groups, 0), ", ")), dims.size(),
                    dimsText(dims));
}

double timeModel(const std::string& text, const std::vector<NamedTensor>& inputs, int threads,
                 int repeat) {
  std::unique_ptr<Model> model = parseModelText(text, "bench_norms");
  ExecutorOptions options;
  options.num_threads = threads;
  Executor ex(*model, options);
  ex.run(inputs);  // warm-up: buffers, pages
  std::vector<double> s;
  for (int r = 0; r < repeat; ++r) {
    const double t0 = now();
    ex.run(inputs);
    s.push_back(now() - t0);
  }
  return median(s);
}

__attribute__((noinline)) void triad(float* __restrict a, const float* __restrict b,
                                     const float* __restrict c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 51, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: bench_norms [--repeat R] [--threads T]\n");
      return 2;
    }
  }
  // The STREAM triad on one thread over 3 x 64 MiB, as bench_bandwidth measures it.
  const int64_t n = int64_t{1} << 24;
  std::vector<float> a(n, 0.f), b(n, 1.f), c(n, 2.f);
  std::vector<double> triads;
  for (int r = 0; r < 9; ++r) {
    const double t0 = now();
    triad(a.data(), b.data(), c.data(), n);
    triads.push_back(now() - t0);
  }
  const double triad_gbs = 12.0 * n / median(triads) / 1e9;
  std::printf("{\"kernel\":\"stream_triad\",\"threads\":1,\"gb_per_s\":%.2f}\n", triad_gbs);

  const std::vector<std::vector<int64_t>> shapes = {{128, 768}, {2048, 768}, {1, 32, 4096}};
  for (const std::string op : {"LayerNorm", "SkipLayerNorm", "RMSNorm"}) {
    for (const std::vector<int64_t>& dims : shapes) {
      std::vector<NamedTensor> inputs = {{"X", randomFloats(dims, 3)}};
      if (op == "SkipLayerNorm") inputs.push_back({"R", randomFloats(dims, 4)});
      const double fused = timeModel(modelText(op, dims, true), inputs, threads, repeat);
      const double unfused = timeModel(modelText(op, dims, false), inputs, threads, repeat);
      const int64_t h = dims.back();
      // Bytes the fused node must move: its activations in and out, and its parameters.
      uint64_t bytes = 0;
      for (const NamedTensor& t : inputs) bytes += t.tensor.byteSize();
      bytes += inputs[0].tensor.byteSize() + (op == "RMSNorm" ? 1 : 2) * 4 * h;
      const double gbs = static_cast<double>(bytes) / fused / 1e9;
      std::printf("{\"kernel\":\"%s\",\"shape\":\"[%s]\",\"threads\":%d,\"fused_us\":%.2f,"
                  "\"unfused_us\":%.2f,\"speedup\":%.2f,\"fused_gb_per_s\":%.2f,"
                  "\"ratio_to_triad\":%.2f}\n",
                  op.c_str(), dimsText(dims).c_str(), threads, fused * 1e6, unfused * 1e6,
                  unfused / fused, gbs, gbs / triad_gbs);
      std::fflush(stdout);
    }
  }
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> grouped = {
      {{1, 512, 1001}, 1}, {{1, 320, 64, 64}, 32}, {{1, 128, 56, 56}, 32}};
  for (const auto& [dims, groups] : grouped) {
    const std::vector<NamedTensor> inputs = {{"X", randomFloats(dims, 3)}};
    const double fused = timeModel(groupNormModelText(dims, groups, true), inputs, threads, repeat);
    const double unfused =
        timeModel(groupNormModelText(dims, groups, false), inputs, threads, repeat);
    const uint64_t bytes = 2 * inputs[0].tensor.byteSize() + 2 * 4 * dims[1];
    const double gbs = static_cast<double>(bytes) / fused / 1e9;
    std::printf("{\"kernel\":\"GroupNorm\",\"shape\":\"[%s]\",\"groups\":%lld,\"threads\":%d,"
                "\"fused_us\":%.2f,\"unfused_us\":%.2f,\"speedup\":%.2f,\"fused_gb_per_s\":%.2f,"
                "\"ratio_to_triad\":%.2f}\n",
                dimsText(dims).c_str(), static_cast<long long>(groups), threads, fused * 1e6,
                unfused * 1e6, unfused / fused, gbs, gbs / triad_gbs);
    std::fflush(stdout);
  }
  return 0;
}
