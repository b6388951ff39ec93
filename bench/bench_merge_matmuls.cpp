// Is merging parallel projections worth it? merge-parallel-matmuls' rule comes from this run.
//
//   bench_merge_matmuls [--threads N] [--repeat R] [--clock wall|cpu]
//
// For each shape, two models of the same computation run through the executor (weights packed
// once, as in a session): "separate", one FusedMatMul (X x W_i + b_i) per projection, and
// "merged", one FusedMatMul on the concatenated weights and biases followed by the Split that
// hands each consumer its slice. The shapes are BERT-base's q/k/v (768 -> 3 x 768), LLaMA-ish
// q/k/v with full heads (2048 -> 3 x 2048) and with grouped-query K/V a quarter of Q's width
// (2048 -> 2048 + 2 x 512), and a SwiGLU MLP's gate/up (2048 -> 2 x 5632), at sequence 32 and
// 128, batch 1. The two sides alternate A/B/A/B; each prints its median and the ratio
// merged/separate (< 1: merging wins). One JSON line per shape; no assertions.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"

namespace {

using fusectl::Attribute;
using fusectl::DType;
using fusectl::Graph;
using fusectl::Model;
using fusectl::Tensor;
using fusectl::Value;
using fusectl::ValueType;
using fusectl::kernels::Executor;
using fusectl::kernels::ExecutorOptions;
using fusectl::kernels::HostTensor;
using fusectl::kernels::NamedTensor;

struct Shape {
  const char* name;
  int64_t seq;
  int64_t k;
  std::vector<int64_t> widths;
};

std::vector<float> randomValues(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

ValueType floatType(std::vector<int64_t> dims) {
  ValueType t;
  t.dtype = DType::Float;
  t.shape = fusectl::Shape::ofStatic(dims);
  return t;
}

// The weights of projection i: [k, widths[i]] and [widths[i]], the same in both models.
std::unique_ptr<Model> buildModel(const Shape& s, bool merged) {
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  m->setOpsetVersion("fusectl", 1);
  Graph& g = *m->graph;
  Value* x = g.addInput("X", floatType({1, s.seq, s.k}));
  std::vector<std::vector<float>> w, b;
  int64_t total = 0;
  for (size_t i = 0; i < s.widths.size(); ++i) {
    w.push_back(randomValues(s.k * s.widths[i], 10 + i));
    b.push_back(randomValues(s.widths[i], 20 + i));
    total += s.widths[i];
  }
  auto fused = [&](const std::string& out, Value* wv, Value* bv) {
    return g.createNode({"FusedMatMul", "fusectl", {x, wv, bv}, {out}, "mm_" + out, {}})->output(0);
  };
  if (!merged) {
    for (size_t i = 0; i < s.widths.size(); ++i) {
      Value* wv = g.addInitializer("W" + std::to_string(i),
                                   Tensor::fromValues(DType::Float, {s.k, s.widths[i]}, w[i]));
      Value* bv = g.addInitializer("B" + std::to_string(i),
                                   Tensor::fromValues(DType::Float, {s.widths[i]}, b[i]));
      g.addOutput(fused("Y" + std::to_string(i), wv, bv));
    }
    return m;
  }
  std::vector<float> wc(static_cast<size_t>(s.k * total)), bc;
  for (int64_t r = 0; r < s.k; ++r) {
    int64_t col = 0;
    for (size_t i = 0; i < s.widths.size(); ++i) {
      std::memcpy(&wc[r * total + col], &w[i][r * s.widths[i]], s.widths[i] * sizeof(float));
      col += s.widths[i];
    }
  }
  for (const auto& bi : b) bc.insert(bc.end(), bi.begin(), bi.end());
  Value* wv = g.addInitializer("W", Tensor::fromValues(DType::Float, {s.k, total}, wc));
  Value* bv = g.addInitializer("B", Tensor::fromValues(DType::Float, {total}, bc));
  Value* y = fused("Y", wv, bv);
  Value* split = g.addInitializer(
      "split", Tensor::fromValues(DType::Int64, {static_cast<int64_t>(s.widths.size())}, s.widths));
  std::vector<std::string> outs;
  for (size_t i = 0; i < s.widths.size(); ++i) outs.push_back("Y" + std::to_string(i));
  auto* node = g.createNode({"Split", "", {y, split}, outs, "split", {Attribute::ofInt("axis", -1)}});
  for (Value* o : node->outputs()) g.addOutput(o);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeat = 21;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--clock")) fusectl::bench::g_cpu_clock = !std::strcmp(argv[i + 1], "cpu");
  }
  std::vector<Shape> shapes;
  for (int64_t seq : {32, 128}) {
    shapes.push_back({"bert-base-qkv", seq, 768, {768, 768, 768}});
    shapes.push_back({"llama-qkv-mha", seq, 2048, {2048, 2048, 2048}});
    shapes.push_back({"llama-qkv-gqa", seq, 2048, {2048, 512, 512}});
    shapes.push_back({"llama-kv-gqa", seq, 2048, {512, 512}});
    shapes.push_back({"llama-gate-up", seq, 2048, {5632, 5632}});
  }
  for (const Shape& s : shapes) {
    auto separate_model = buildModel(s, false);
    auto merged_model = buildModel(s, true);
    ExecutorOptions options;
    options.num_threads = threads;
    Executor separate(*separate_model, options), merged(*merged_model, options);
    HostTensor x(DType::Float, {1, s.seq, s.k});
    const std::vector<float> xv = randomValues(s.seq * s.k, 1);
    std::memcpy(x.mutableRaw(), xv.data(), xv.size() * sizeof(float));
    const std::vector<NamedTensor> feeds = {{"X", x}};
    separate.run(feeds);  // packs the weights
    merged.run(feeds);
    const auto [ts, tm] = fusectl::bench::alternatingMedians(
        repeat, [&] { separate.run(feeds); }, [&] { merged.run(feeds); });
    const double ms = 1e3 * ts, mm = 1e3 * tm;
    std::string widths;
    for (int64_t w : s.widths) widths += (widths.empty() ? "" : ",") + std::to_string(w);
    std::printf(
        "{\"shape\": \"%s\", \"seq\": %lld, \"k\": %lld, \"widths\": [%s], \"threads\": %d, "
        "\"separate_ms\": %.3f, \"merged_ms\": %.3f, \"ratio\": %.3f}\n",
        s.name, static_cast<long long>(s.seq), static_cast<long long>(s.k), widths.c_str(),
        threads, ms, mm, mm / ms);
    std::fflush(stdout);
  }
  return 0;
}
