// fusectl::Attention against the unfused subgraph it replaces, both run through the executor:
// MatMul(Q, Transpose(K)) -> Mul(scale) -> Add(mask) -> Softmax -> MatMul(., V) against one
// Attention node, BERT-base sized (hidden 768, 12 heads of 64), batch 1, at sequence 32, 128
// and 512, with a [1, 1, 1, S] additive mask.
//
//   bench_attention [--threads N] [--repeat R] [--seq S,...] [--causal] [--padding F]
//                   [--clock wall|cpu]
//
// --padding F: the mask is 0 for the first keys and -10000 for the last fraction F of them, as
// a padded batch's BERT export has it; without it, random in [-2, 0].
//
// The two models alternate A/B/A/B on the same inputs; each prints its median, with the ratio
// fused/unfused (below 1: the fused kernel is faster). Prints one JSON line per sequence
// length; no assertions (speed is not a unit-test property).
//
// A second line per sequence length ("attention_softmax") times the whole-block softmax of one
// head's seq x seq scores (below 512, where Attention keeps whole blocks), row by row
// (vec::softmaxRowAdd, as the kernel ran it until 2026-12-05) against the rows in groups
// (vec::softmaxRowsAdd, as it runs it now), alternating, on the same scores and mask; "same"
// says whether the two wrote the same bits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "vec_kernels.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;

constexpr int64_t kHeads = 12, kHeadSize = 64;

ValueType floatType(std::vector<int64_t> dims) {
  ValueType vt;
  vt.dtype = DType::Float;
  vt.shape = Shape::ofStatic(dims);
  return vt;
}

Node* add(Graph& g, const std::string& op, const std::string& domain, std::vector<Value*> in,
          const std::string& out, std::vector<Attribute> attrs = {}) {
  Graph::NodeSpec spec;
  spec.op_type = op;
  spec.domain = domain;
  spec.name = out;
  spec.inputs = std::move(in);
  spec.output_names = {out};
  spec.attributes = std::move(attrs);
  return g.createNode(std::move(spec));
}

// The attention block over split heads, fused (one node) or as the exporters write it.
std::unique_ptr<Model> attentionModel(int64_t seq, bool fused, bool causal) {
  auto model = std::make_unique<Model>();
  model->setOpsetVersion("", 17);
  if (fused) model->setOpsetVersion("fusectl", 1);
  Graph& g = *model->graph;
  const std::vector<int64_t> heads = {1, kHeads, seq, kHeadSize};
  Value* q = g.addInput("q", floatType(heads));
  Value* k = g.addInput("k", floatType(heads));
  Value* v = g.addInput("v", floatType(heads));
  Value* mask = g.addInput("mask", floatType({1, 1, 1, seq}));
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadSize));
  Value* y = nullptr;
  if (fused) {
    y = add(g, "Attention", "fusectl", {q, k, v, mask}, "y",
            {Attribute::ofFloat("scale", scale), Attribute::ofInt("causal", causal ? 1 : 0)})
            ->output(0);
  } else {
    Value* kt = add(g, "Transpose", "", {k}, "kt", {Attribute::ofInts("perm", {0, 1, 3, 2})})->output(0);
    Value* s = add(g, "MatMul", "", {q, kt}, "scores")->output(0);
    Value* c = g.addInitializer("scale", Tensor::fromValues(DType::Float, {}, std::vector<float>{scale}));
    Value* scaled = add(g, "Mul", "", {s, c}, "scaled")->output(0);
    Value* masked = add(g, "Add", "", {scaled, mask}, "masked")->output(0);
    if (causal) {
      std::vector<uint8_t> upper(static_cast<size_t>(seq * seq));
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t j = 0; j < seq; ++j) upper[static_cast<size_t>(i * seq + j)] = j > i;
      Value* cond = g.addInitializer("future", Tensor::fromValues(DType::Bool, {seq, seq}, upper));
      Value* low = g.addInitializer("lowest", Tensor::fromValues(DType::Float, {}, std::vector<float>{-INFINITY}));
      masked = add(g, "Where", "", {cond, low, masked}, "causal")->output(0);
    }
    Value* p = add(g, "Softmax", "", {masked}, "probs", {Attribute::ofInt("axis", -1)})->output(0);
    y = add(g, "MatMul", "", {p, v}, "y")->output(0);
  }
  g.addOutput(y);
  return model;
}

HostTensor randomTensor(std::vector<int64_t> dims, uint32_t seed, float lo, float hi) {
  HostTensor t(DType::Float, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = t.mutableData<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

// One head's scores (seq x seq, random in [-3, 3]) through the softmax with the mask row
// added, row by row and in groups of rows; each timed over 50 blocks a sample so that the
// clock's resolution does not matter.
void printSoftmaxComparison(int64_t seq, bool causal, const float* mask, int repeat) {
  const HostTensor scores = randomTensor({seq, seq}, 5, -3, 3);
  const float* src = scores.data<float>();
  std::vector<float> by_row(static_cast<size_t>(seq * seq)), grouped(by_row.size());
  constexpr int kBlocks = 50;
  const auto rowByRow = [&] {
    for (int n = 0; n < kBlocks; ++n) {
      std::memcpy(by_row.data(), src, by_row.size() * sizeof(float));
      for (int64_t s = 0; s < seq; ++s) {
        float* row = by_row.data() + s * seq;
        const int64_t visible = causal ? s + 1 : seq;
        vec::softmaxRowAdd(row, visible, mask, false);
        std::fill(row + visible, row + seq, 0.f);
      }
    }
  };
  const auto inGroups = [&] {
    for (int n = 0; n < kBlocks; ++n) {
      std::memcpy(grouped.data(), src, grouped.size() * sizeof(float));
      vec::softmaxRowsAdd(grouped.data(), seq, seq, causal ? 1 : seq, causal ? 1 : 0, mask, 0,
                          false);
    }
  };
  const auto [row_s, group_s] = fusectl::bench::alternatingMedians(repeat, rowByRow, inGroups);
  const bool same = std::memcmp(by_row.data(), grouped.data(), by_row.size() * sizeof(float)) == 0;
  std::printf("{\"bench\": \"attention_softmax\", \"seq\": %lld, \"causal\": %s, "
              "\"row_by_row_us\": %.3f, \"grouped_us\": %.3f, \"ratio\": %.3f, \"same\": %s}\n",
              static_cast<long long>(seq), causal ? "true" : "false", row_s / kBlocks * 1e6,
              group_s / kBlocks * 1e6, group_s / row_s, same ? "true" : "false");
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeat = 20;
  bool causal = false;
  double padding = -1;
  std::vector<int64_t> seqs = {32, 128, 512};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--causal") {
      causal = true;
    } else if (i + 1 < argc && a == "--threads") {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && a == "--repeat") {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && a == "--padding") {
      padding = std::atof(argv[++i]);
    } else if (i + 1 < argc && a == "--clock") {
      fusectl::bench::g_cpu_clock = std::strcmp(argv[++i], "cpu") == 0;
    } else if (i + 1 < argc && a == "--seq") {
      seqs.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) seqs.push_back(std::atoll(item.c_str()));
    } else {
      std::fprintf(stderr, "usage: bench_attention [--threads N] [--repeat R] [--seq S,...] "
                           "[--causal] [--padding F] [--clock wall|cpu]\n");
      return 2;
    }
  }
  for (int64_t seq : seqs) {
    auto unfused = attentionModel(seq, false, causal);
    auto fused = attentionModel(seq, true, causal);
    ExecutorOptions options;
    options.num_threads = threads;
    Executor a(*unfused, options), b(*fused, options);
    const std::vector<int64_t> heads = {1, kHeads, seq, kHeadSize};
    HostTensor mask = randomTensor({1, 1, 1, seq}, 4, -2, 0);
    if (padding >= 0) {
      const int64_t kept = seq - static_cast<int64_t>(std::lround(padding * seq));
      for (int64_t t = 0; t < seq; ++t) mask.mutableData<float>()[t] = t < kept ? 0.f : -10000.f;
    }
    const std::vector<NamedTensor> inputs = {{"q", randomTensor(heads, 1, -1, 1)},
                                             {"k", randomTensor(heads, 2, -1, 1)},
                                             {"v", randomTensor(heads, 3, -1, 1)},
                                             {"mask", std::move(mask)}};
    double max_diff = 0;
    {
      const HostTensor ya = a.run(inputs)[0].tensor, yb = b.run(inputs)[0].tensor;
      for (int64_t i = 0; i < ya.numel(); ++i)
        max_diff = std::max(max_diff, double(std::fabs(ya.data<float>()[i] - yb.data<float>()[i])));
    }
    const auto [ma, mb] = fusectl::bench::alternatingMedians(
        repeat, [&] { a.run(inputs); }, [&] { b.run(inputs); });
    std::printf("{\"bench\": \"attention\", \"seq\": %lld, \"heads\": %lld, \"head_size\": %lld, "
                "\"causal\": %s, \"masked_keys\": %s, \"threads\": %d, \"unfused_ms\": %.4f, \"fused_ms\": %.4f, "
                "\"ratio\": %.3f, \"max_abs_diff\": %.3g}\n",
                static_cast<long long>(seq), static_cast<long long>(kHeads),
                static_cast<long long>(kHeadSize), causal ? "true" : "false",
                padding >= 0 ? std::to_string(padding).c_str() : "\"none (random mask)\"",
                threads, ma * 1e3,
                mb * 1e3, mb / ma, max_diff);
    if (seq < 512) printSoftmaxComparison(seq, causal, inputs[3].tensor.data<float>(), repeat);
  }
  return 0;
}
