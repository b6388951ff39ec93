// fusectl::Attention's CPU kernel against a naive double-precision attention written here:
// multi-head and grouped-query heads, a broadcast additive mask, the causal cut (including
// S < T, bottom-right aligned), threads, and the errors for inputs that do not agree. Then
// fuse-attention at -O3 on the bundled BERT and LLaMA layers: one Attention per layer, same
// outputs through the executor.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/kernel.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/pipeline.h"
#include "kernel_case.h"
#include "random_values.h"

namespace {

using fusectl::Node;
using fusectl::kernels::HostTensor;
using fusectl::kernels::KernelRegistry;

struct Problem {
  int64_t B = 1, Hq = 2, Hkv = 2, S = 3, T = 3, D = 4, Dv = 4;
  std::vector<int64_t> mask_dims;  // empty: no mask input
  float scale = 0.5f;
  bool causal = false;
  int threads = 1;
  // AttentionPackedRotary: the dims of its Cos and Sin tables (last D, broadcast into the
  // heads [B, H, S, D] with no head dim); empty: AttentionPacked.
  std::vector<int64_t> rotary_dims;
};

std::vector<HostTensor> runKernel(const Problem& p, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<float>& m) {
  using fusectl::testing::floats;
  fusectl::testing::KernelCase c("Attention", 1);
  c.domain("fusectl").registry(KernelRegistry::global()).threads(p.threads);
  c.input(floats({p.B, p.Hq, p.S, p.D}, q))
      .input(floats({p.B, p.Hkv, p.T, p.D}, k))
      .input(floats({p.B, p.Hkv, p.T, p.Dv}, v));
  if (!p.mask_dims.empty()) c.input(floats(p.mask_dims, m));
  return c.attrFloat("scale", p.scale).attrInt("causal", p.causal ? 1 : 0).run();
}

// The definition, in double: for each query head h, key/value head h / (Hq / Hkv).
std::vector<double> reference(const Problem& p, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& m) {
  std::vector<double> y(static_cast<size_t>(p.B * p.Hq * p.S * p.Dv), 0.0);
  const int64_t group = p.Hq / p.Hkv;
  std::vector<int64_t> md = p.mask_dims;
  while (!md.empty() && md.size() < 4) md.insert(md.begin(), 1);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t kv = h / group;
      for (int64_t s = 0; s < p.S; ++s) {
        std::vector<double> w(static_cast<size_t>(p.T));
        double top = -INFINITY;
        for (int64_t t = 0; t < p.T; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < p.D; ++d)
            dot += double(q[((b * p.Hq + h) * p.S + s) * p.D + d]) *
                   double(k[((b * p.Hkv + kv) * p.T + t) * p.D + d]);
          double x = dot * p.scale;
          if (!md.empty()) {
            const int64_t i0 = md[0] == 1 ? 0 : b, i1 = md[1] == 1 ? 0 : h,
                          i2 = md[2] == 1 ? 0 : s, i3 = md[3] == 1 ? 0 : t;
            x += m[((i0 * md[1] + i1) * md[2] + i2) * md[3] + i3];
          }
          if (p.causal && t > s + p.T - p.S) x = -INFINITY;
          w[t] = x;
          top = std::max(top, x);
        }
        double total = 0;
        for (double& x : w) total += (x = std::exp(x - top));
        for (int64_t d = 0; d < p.Dv; ++d) {
          double acc = 0;
          for (int64_t t = 0; t < p.T; ++t)
            acc += w[t] / total * double(v[((b * p.Hkv + kv) * p.T + t) * p.Dv + d]);
          y[((b * p.Hq + h) * p.S + s) * p.Dv + d] = acc;
        }
      }
    }
  return y;
}

void checkAgainstReference(const Problem& p) {
  const auto q = randomFloats(static_cast<size_t>(p.B * p.Hq * p.S * p.D), 1);
  const auto k = randomFloats(static_cast<size_t>(p.B * p.Hkv * p.T * p.D), 2);
  const auto v = randomFloats(static_cast<size_t>(p.B * p.Hkv * p.T * p.Dv), 3);
  int64_t mn = 1;
  for (int64_t d : p.mask_dims) mn *= d;
  const auto m = p.mask_dims.empty() ? std::vector<float>{} : randomFloats(static_cast<size_t>(mn), 4, -3.f, 0.f);
  std::vector<HostTensor> out = runKernel(p, q, k, v, m);
  REQUIRE(out.size() == 1);
  CHECK(out[0].dims() == std::vector<int64_t>{p.B, p.Hq, p.S, p.Dv});
  const std::vector<double> want = reference(p, q, k, v, m);
  const float* got = out[0].data<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-5 + 1e-4 * std::abs(want[i]));
  }
}

// AttentionPacked on X [B, S, (Hq + 2 Hkv) D], whose heads are cut out here into the [B, H, S, D]
// blocks the reference reads; its Y [B, S, Hq D] is compared with the reference's heads merged.
std::vector<HostTensor> runPackedKernel(const Problem& p, const std::vector<float>& x,
                                        const std::vector<float>& m,
                                        const std::vector<float>& cos,
                                        const std::vector<float>& sin) {
  using fusectl::testing::floats;
  const bool rotary = !p.rotary_dims.empty();
  fusectl::testing::KernelCase c(rotary ? "AttentionPackedRotary" : "AttentionPacked", 1);
  c.domain("fusectl").registry(KernelRegistry::global()).threads(p.threads);
  c.input(floats({p.B, p.S, (p.Hq + 2 * p.Hkv) * p.D}, x));
  if (!p.mask_dims.empty()) c.input(floats(p.mask_dims, m));
  else if (rotary) c.input(floats({1}, {0.f}));  // M comes before the tables
  if (rotary) c.input(floats(p.rotary_dims, cos)).input(floats(p.rotary_dims, sin));
  return c.attrInt("num_heads", p.Hq)
      .attrInt("kv_num_heads", p.Hkv)
      .attrFloat("scale", p.scale)
      .attrInt("causal", p.causal ? 1 : 0)
      .run();
}

void checkPackedAgainstReference(const Problem& p) {
  REQUIRE(p.S == p.T);
  REQUIRE(p.D == p.Dv);
  const int64_t W = (p.Hq + 2 * p.Hkv) * p.D;
  const auto x = randomFloats(static_cast<size_t>(p.B * p.S * W), 5);
  // Head j of the part starting at head `first` (0 for q, Hq for k, Hq + Hkv for v) of row
  // (b, s) is at x[(b S + s) W + (first + j) D].
  auto heads = [&](int64_t first, int64_t count) {
    std::vector<float> out(static_cast<size_t>(p.B * count * p.S * p.D));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < count; ++h)
        for (int64_t s = 0; s < p.S; ++s)
          for (int64_t d = 0; d < p.D; ++d)
            out[static_cast<size_t>(((b * count + h) * p.S + s) * p.D + d)] =
                x[static_cast<size_t>((b * p.S + s) * W + (first + h) * p.D + d)];
    return out;
  };
  int64_t mn = 1;
  for (int64_t d : p.mask_dims) mn *= d;
  const auto m = p.mask_dims.empty() ? std::vector<float>{}
                                     : randomFloats(static_cast<size_t>(mn), 4, -3.f, 0.f);
  // The rotary tables, and the rotate_half rotation of q and k heads [B, H, S, D] by them, in
  // double: y[k] = x[k] cos[k] - x[k + D/2] sin[k], y[k + D/2] = x[k + D/2] cos + x[k] sin.
  int64_t tn = 1;
  for (int64_t d : p.rotary_dims) tn *= d;
  const auto cos = randomFloats(static_cast<size_t>(tn), 6), sin = randomFloats(static_cast<size_t>(tn), 7);
  auto rotate = [&](std::vector<float> h, int64_t count) {
    if (p.rotary_dims.empty()) return h;
    std::vector<int64_t> td = p.rotary_dims;
    while (td.size() < 4) td.insert(td.begin(), 1);
    const std::vector<float> in = h;
    const int64_t half = p.D / 2;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t hh = 0; hh < count; ++hh)
        for (int64_t s = 0; s < p.S; ++s)
          for (int64_t d = 0; d < p.D; ++d) {
            const size_t row = static_cast<size_t>(((b * count + hh) * p.S + s) * p.D);
            const size_t t = static_cast<size_t>(
                (((td[0] == 1 ? 0 : b) * td[1] + 0) * td[2] + (td[2] == 1 ? 0 : s)) * td[3] + d);
            const double partner = d < half ? -double(in[row + d + half]) : double(in[row + d - half]);
            h[row + d] = static_cast<float>(double(in[row + d]) * cos[t] + partner * sin[t]);
          }
    return h;
  };
  const std::vector<double> want = reference(p, rotate(heads(0, p.Hq), p.Hq),
                                             rotate(heads(p.Hq, p.Hkv), p.Hkv),
                                             heads(p.Hq + p.Hkv, p.Hkv), m);
  std::vector<HostTensor> out = runPackedKernel(p, x, m, cos, sin);
  REQUIRE(out.size() == 1);
  CHECK(out[0].dims() == std::vector<int64_t>{p.B, p.S, p.Hq * p.D});
  const float* got = out[0].data<float>();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t s = 0; s < p.S; ++s)
        for (int64_t d = 0; d < p.D; ++d) {
          const double w = want[static_cast<size_t>(((b * p.Hq + h) * p.S + s) * p.D + d)];
          const float y = got[static_cast<size_t>((b * p.S + s) * p.Hq * p.D + h * p.D + d)];
          INFO("b " << b << " head " << h << " row " << s << " column " << d << ": got " << y
                    << ", want " << w);
          REQUIRE(std::abs(y - w) <= 1e-5 + 1e-4 * std::abs(w));
        }
}

}  // namespace

TEST_CASE("attention kernel: the packed form reads its heads from one merged projection",
          "[attention][kernels]") {
  Problem p;  // multi-head, a padding mask per batch
  p.B = 2, p.Hq = p.Hkv = 3, p.S = p.T = 7, p.D = p.Dv = 8;
  p.mask_dims = {2, 1, 1, 7};
  checkPackedAgainstReference(p);
  p.Hq = 4, p.Hkv = 2;  // grouped-query, causal
  p.causal = true;
  p.mask_dims = {};
  checkPackedAgainstReference(p);
  p.B = 1, p.Hq = p.Hkv = 2, p.S = p.T = 70, p.D = p.Dv = 64;  // the packed GEMM tiles
  p.scale = 0.125f;
  p.mask_dims = {70, 70};
  checkPackedAgainstReference(p);
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.S = p.T = 520, p.D = p.Dv = 16;  // flash-style tiles, threads
  p.mask_dims = {2, 1, 1, 520};
  p.threads = 2;
  checkPackedAgainstReference(p);
  p.causal = false;
  checkPackedAgainstReference(p);
}

TEST_CASE("attention kernel: the packed rotary form rotates q and k as it reads them",
          "[attention][kernels]") {
  Problem p;  // tables [S, D], multi-head, a padding mask per batch
  p.B = 2, p.Hq = p.Hkv = 3, p.S = p.T = 7, p.D = p.Dv = 8;
  p.mask_dims = {2, 1, 1, 7};
  p.rotary_dims = {7, 8};
  checkPackedAgainstReference(p);
  p.Hq = 4, p.Hkv = 2;  // grouped-query (k rotated once per group), causal, tables per batch
  p.causal = true;
  p.mask_dims = {};
  p.rotary_dims = {2, 1, 7, 8};
  checkPackedAgainstReference(p);
  p.rotary_dims = {1, 8};  // one angle row for every position
  checkPackedAgainstReference(p);
  p.B = 1, p.Hq = 8, p.Hkv = 2, p.S = p.T = 600, p.D = p.Dv = 16;  // flash-style tiles, threads
  p.rotary_dims = {1, 1, 600, 16};
  p.threads = 2;
  checkPackedAgainstReference(p);
}

TEST_CASE("attention kernel: rotary tables that differ by head are a one-line error",
          "[attention][kernels]") {
  // [1, 2, 3, 4]: a table per head, which one AttentionPackedRotary cannot take for q and k.
  using fusectl::testing::floats;
  fusectl::testing::KernelCase c("AttentionPackedRotary", 1);
  c.domain("fusectl").registry(KernelRegistry::global());
  c.input(floats({1, 3, 24}, randomFloats(72, 5)))
      .input(floats({1}, {0.f}))
      .input(floats({1, 2, 3, 4}, randomFloats(24, 6)))
      .input(floats({1, 2, 3, 4}, randomFloats(24, 7)))
      .attrInt("num_heads", 2)
      .attrInt("kv_num_heads", 2);
  CHECK_THROWS_WITH(c.run(), Catch::Contains("Cos [1,2,3,4] does not broadcast"));
}

TEST_CASE("attention kernel: a packed projection the heads do not divide is a one-line error",
          "[attention][kernels]") {
  // 25 columns for 2 + 2 x 2 heads: not 6 heads of one size.
  fusectl::testing::KernelCase c("AttentionPacked", 1);
  c.domain("fusectl").registry(KernelRegistry::global());
  c.input(fusectl::testing::floats({1, 3, 25}, randomFloats(75, 5)))
      .attrInt("num_heads", 2)
      .attrInt("kv_num_heads", 2);
  CHECK_THROWS_WITH(c.run(), Catch::Contains("does not hold 6 heads of one size"));
}

TEST_CASE("attention kernel: multi-head with a broadcast additive mask", "[attention][kernels]") {
  Problem p;
  p.B = 2, p.Hq = p.Hkv = 3, p.S = 5, p.T = 7, p.D = 8, p.Dv = 6;
  p.mask_dims = {2, 1, 1, 7};
  p.scale = 1.f / std::sqrt(8.f);
  checkAgainstReference(p);
  p.mask_dims = {5, 7};  // per (query, key), every batch and head
  checkAgainstReference(p);
  p.mask_dims = {};  // none
  checkAgainstReference(p);
}

TEST_CASE("attention kernel: grouped-query heads share their key/value head",
          "[attention][kernels]") {
  Problem p;
  p.B = 1, p.Hq = 8, p.Hkv = 2, p.S = 9, p.T = 9, p.D = 16, p.Dv = 16;
  p.scale = 0.25f;
  p.causal = true;
  checkAgainstReference(p);
  p.threads = 3;
  checkAgainstReference(p);
}

TEST_CASE("attention kernel: causal with fewer queries than keys is bottom-right aligned",
          "[attention][kernels]") {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.S = 3, p.T = 6, p.D = 4, p.Dv = 5;
  p.causal = true;
  p.mask_dims = {1, 2, 3, 6};
  checkAgainstReference(p);
}

TEST_CASE("attention kernel: large blocks go through the packed GEMM tiles",
          "[attention][kernels]") {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 2, p.S = 70, p.T = 70, p.D = 64, p.Dv = 64;
  p.scale = 0.125f;
  p.causal = true;
  checkAgainstReference(p);
}

TEST_CASE("attention kernel: long keys take the flash-style tiles with an online softmax",
          "[attention][kernels]") {
  // 512 queries or keys and up go through the tiled layout: partial query and key tiles
  // (600 = 2 x 256 + 88), causal tiles skipped past the diagonal, grouped-query heads, every
  // mask broadcast, threads.
  Problem p;
  p.B = 1, p.Hq = 4, p.Hkv = 2, p.S = 130, p.T = 600, p.D = 32, p.Dv = 24;
  p.scale = 1.f / std::sqrt(32.f);
  p.causal = true;
  p.mask_dims = {1, 1, 1, 600};
  checkAgainstReference(p);
  p.mask_dims = {130, 600};
  checkAgainstReference(p);
  p.mask_dims = {1, 4, 130, 1};  // one value per query row: the same shift for every key
  checkAgainstReference(p);
  p.B = 2, p.Hq = p.Hkv = 2, p.S = p.T = 520, p.D = p.Dv = 16;
  p.causal = true;
  p.mask_dims = {};
  p.threads = 2;
  checkAgainstReference(p);
  // Not causal: many key tiles under a full mask, many query tiles over one key tile.
  p.B = 1, p.Hq = 4, p.Hkv = 2, p.S = 70, p.T = 700, p.D = 24, p.Dv = 40;
  p.causal = false;
  p.threads = 1;
  p.mask_dims = {1, 4, 70, 700};
  checkAgainstReference(p);
  p.S = 530, p.T = 40;
  p.mask_dims = {530, 1};
  checkAgainstReference(p);
  // 1.4M keys: 4.2M scores in a block, of which the tiles hold 256 x 256 at a time.
  p.B = 1, p.Hq = p.Hkv = 1, p.S = 3, p.T = 1400000, p.D = 4, p.Dv = 3;
  p.causal = false;
  p.threads = 1;
  p.mask_dims = {1, 1, 1, 1400000};
  checkAgainstReference(p);
}

TEST_CASE("attention kernel: inputs that do not agree are one-line errors naming the node",
          "[attention][kernels]") {
  Problem p;
  p.Hq = 3, p.Hkv = 2;
  const auto q = randomFloats(static_cast<size_t>(p.B * p.Hq * p.S * p.D), 1);
  const auto k = randomFloats(static_cast<size_t>(p.B * p.Hkv * p.T * p.D), 2);
  const auto v = randomFloats(static_cast<size_t>(p.B * p.Hkv * p.T * p.Dv), 3);
  CHECK_THROWS_WITH(runKernel(p, q, k, v, {}),
                    Catch::Contains("3 query heads are not a multiple of 2 key/value heads"));
  p.Hq = 2;
  p.mask_dims = {2, 3};
  const auto q2 = randomFloats(static_cast<size_t>(p.B * p.Hq * p.S * p.D), 1);
  CHECK_THROWS_WITH(runKernel(p, q2, k, v, randomFloats(6, 4)),
                    Catch::Contains("does not broadcast to the scores"));
}

namespace {

size_t countOps(const fusectl::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const Node* node : g.nodesOfType(op)) {
    (void)node;
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("fuse-attention at -O3 leaves one Attention per layer and keeps the outputs",
          "[attention][passes]") {
  using namespace fusectl;
  struct ModelCase {
    const char* name;
    std::vector<std::pair<std::string, Shape>> shapes;  // sequence 7, batch 2
    int64_t causal;
    // BERT's q/k/v projections merge, and the attention then reads them packed
    // (fuse-packed-attention); LLaMA's too, with its rotary embedding of q and k taken in.
    const char* op;
  };
  const std::vector<ModelCase> models = {
      {"bert_layer", {{"hidden", Shape::ofStatic({2, 7, 64})}, {"attention_mask", Shape::ofStatic({2, 1, 1, 7})}}, 0, "AttentionPacked"},
      {"llama_layer", {{"hidden", Shape::ofStatic({2, 7, 64})}, {"cos", Shape::ofStatic({7, 16})}, {"sin", Shape::ofStatic({7, 16})}}, 1, "AttentionPackedRotary"},
  };
  for (const ModelCase& mc : models) {
    INFO(mc.name);
    const std::string path = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + mc.name + ".onnx";
    std::unique_ptr<Model> before = loadModel(path);
    std::unique_ptr<Model> after = loadModel(path);
    REQUIRE(countOps(*before->graph, "Softmax") == 1);
    passes::Report report;
    passes::PassManagerOptions options;
    options.verify_each = true;
    REQUIRE(passes::PassManager(options).run(*after, passes::Pipeline::forLevel(3), report));
    CHECK(countOps(*after->graph, "Softmax") == 0);
    std::vector<Node*> fused;
    for (const char* op : {"Attention", "AttentionPacked", "AttentionPackedRotary"})
      for (Node* n : after->graph->nodesOfType(op, "fusectl")) fused.push_back(n);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0]->opType() == mc.op);
    CHECK(fused[0]->attrInt("causal", -1) == mc.causal);
    CHECK(fused[0]->attrFloat("scale", 0) == Approx(0.25));  // 1 / sqrt(16)
    for (uint64_t seed : {1u, 2u}) {
      std::vector<kernels::NamedTensor> inputs = kernels::makeRandomInputs(*before->graph, seed, mc.shapes);
      std::vector<kernels::NamedTensor> want = kernels::runModel(*before, inputs);
      std::vector<kernels::NamedTensor> got = kernels::runModel(*after, inputs);
      REQUIRE(want.size() == got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        const HostTensor& w = want[i].tensor;
        const HostTensor& g = got[i].tensor;
        REQUIRE(w.dims() == g.dims());
        double diff = 0, scale = 0;
        for (int64_t k = 0; k < w.numel(); ++k) {
          diff = std::max(diff, double(std::fabs(g.data<float>()[k] - w.data<float>()[k])));
          scale = std::max(scale, double(std::fabs(w.data<float>()[k])));
        }
        INFO("seed " << seed << ": max abs diff " << diff << ", max |output| " << scale);
        REQUIRE(scale > 0);
        CHECK(diff <= 1e-5 * scale);
      }
    }
  }
}
