// Which nodes the CUDA backend would run, decided without a GPU: the executor resolves kernels
// against cudaKernelRegistry() through a backend that only names the device. The fused testdata
// models must run every float node on the GPU, or a fusion's gain there would be eaten by copies.
// And BroadcastIndex, the index walk of the elementwise kernels, which is host code.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>

#include "cuda_case.h"
#include "half_model.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/cuda_backend.h"
#include "fusectl/kernels/cuda_device.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/optimize.h"

#ifdef FUSECTL_HAVE_CUDA
#include "cuda_common.h"
#endif

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

// "domain::Op" -> count of the float nodes that would run on the CPU and move float data.
std::map<std::string, int> floatFallbacks(const Model& model) {
  std::map<std::string, int> ops;
  for (const Node* n : fusectl::testing::cudaFallbackNodes(model)) {
    const DType t = kernelDType(*n);
    // Shape and Size read only dims: they run on the CPU and copy nothing.
    const KernelInfo* cpu = KernelRegistry::global().find(
        n->domain(), n->opType(), model.opsetVersion(n->domain()), t);
    if (cpu && cpu->dims_only_inputs) continue;
    if (t == DType::Float || t == DType::Float16 || t == DType::BFloat16)
      ++ops[n->domain() + "::" + n->opType()];
  }
  return ops;
}

std::string describe(const std::map<std::string, int>& ops) {
  std::string s;
  for (const auto& [op, n] : ops) s += op + " x" + std::to_string(n) + " ";
  return s.empty() ? "none" : s;
}

// The `half` twins of these testdata models place every float node on the GPU, as given and
// after -O3 (which must fuse something).
void checkHalfTwinsOnGpu(DType half, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    INFO(name);
    auto model = fusectl::test::loadTestModelAsHalf(name, half);
    CHECK(describe(floatFallbacks(*model)) == "none");
    passes::OptimizeRequest request;
    request.level = 3;
    const passes::Report report = passes::optimize(*model, request);
    CHECK(!report.fusions.empty());
    CHECK(describe(floatFallbacks(*model)) == "none");
  }
}

}  // namespace

TEST_CASE("cuda placement: the fused testdata models run every float node on the GPU",
          "[cuda_placement]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  for (const char* name : {"resnet_mini", "mobilenet_mini", "bert_layer", "bert_op17",
                           "vit_encoder_op13", "vit_encoder_op17", "gpt2_block"}) {
    INFO(name);
    auto model = loadModel(std::string(FUSECTL_SOURCE_DIR "/testdata/models/") + name + ".onnx");
    // As exported: every float op of these models has a CUDA kernel.
    const auto unfused = floatFallbacks(*model);
    CHECK(describe(unfused) == "none");
    passes::OptimizeRequest request;
    request.level = 3;
    passes::optimize(*model, request);
    const auto fused = floatFallbacks(*model);
    CHECK(describe(fused) == "none");
  }
}

TEST_CASE("cuda placement: the float16 twins of the testdata transformers, fused, run every "
          "float node on the GPU",
          "[cuda_placement][half]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  // The half fused nodes (FusedMatMul, SkipLayerNorm, Attention, Gelu, the rotary embeddings,
  // SwiGLUPacked... in float16) must find their CUDA kernels as the float32 ones do: a float16
  // BERT is the GPU check's fp16 model.
  checkHalfTwinsOnGpu(DType::Float16, {"bert_op17", "vit_encoder_op13", "gpt2_block",
                                       "llama_layer", "llama_gqa_block"});
}

TEST_CASE("cuda placement: the bfloat16 twins of the testdata models, as given and fused, run "
          "every float node on the GPU",
          "[cuda_placement][half]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  // bfloat16 is what most LLM checkpoints ship in: a bfloat16 graph must not run on the CPU
  // for want of bfloat16 kernels, unfused (the GPU check's baseline) or fused.
  checkHalfTwinsOnGpu(DType::BFloat16, {"resnet_mini", "mobilenet_mini", "bert_op17",
                                        "vit_encoder_op13", "gpt2_block", "llama_layer",
                                        "llama_gqa_block"});
}

TEST_CASE("cuda placement: the fused LLaMA testdata blocks run every float node on the GPU",
          "[cuda_placement]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  // Their fused rotary embeddings (and the QK-norm, SwiGLU and attention around them) have
  // CUDA kernels: nothing of the block goes back to the host.
  for (const char* name : {"llama_layer", "llama_gqa_block"}) {
    INFO(name);
    auto model = loadModel(std::string(FUSECTL_SOURCE_DIR "/testdata/models/") + name + ".onnx");
    CHECK(describe(floatFallbacks(*model)) == "none");
    passes::OptimizeRequest request;
    request.level = 3;
    passes::optimize(*model, request);
    std::map<std::string, int> fused_ops;
    for (const Node* n : model->graph->nodes())
      if (n->domain() == "fusectl") ++fused_ops[n->opType()];
    INFO(describe(fused_ops));
    // llama_layer's rotations went into its packed attention; llama_gqa_block's q/k/v stay
    // apart (its narrow K/V are not merged), so its QK-norm rotations stay nodes.
    CHECK(fused_ops.count("AttentionPackedRotary") +
              fused_ops.count("QKNormRotaryEmbedding") == 1);
    CHECK(fused_ops.count("SwiGLUPacked") == 1);
    CHECK(describe(floatFallbacks(*model)) == "none");
  }
}

TEST_CASE("cuda placement: ops without a CUDA kernel are listed, not fatal", "[cuda_placement]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  // Comparisons have no CUDA kernel: Greater runs on the CPU between device nodes, and the
  // placement says so instead of failing.
  const auto model = parseModelText(
      "<ir_version: 8, opset_import: [\"\" : 17]>\n"
      "g (float[4, 8] X, float[8, 16] W, float[16] Z) => (float[4, 16] Y)\n"
      "{\n  M = MatMul (X, W)\n  G = Greater (M, Z)\n  Y = Where (G, M, Z)\n}\n",
      "greater");
  const auto fallbacks = floatFallbacks(*model);
  INFO(describe(fallbacks));
  CHECK(describe(fallbacks) == "::Greater x1 ");
  // And the model still runs, on the CPU here.
  CHECK_NOTHROW(runModel(*model, makeRandomInputs(*model->graph, 7)));
}

#ifdef FUSECTL_HAVE_CUDA
TEST_CASE("cuda broadcast index: shapes merge to the fewest dims each input walks as one",
          "[cuda_placement]") {
  using fusectl::kernels::cuda::BroadcastIndex;
  std::vector<int64_t> out;
  const std::vector<int64_t> a{2, 3, 4}, same{2, 3, 4}, bias{4}, chan{3, 1}, scalar{};
  BroadcastIndex b = BroadcastIndex::make({&a, &same}, out);
  CHECK(out == a);
  CHECK(b.rank == 1);
  CHECK(b.numel == 24);
  CHECK((b.contiguous(0) && b.contiguous(1)));

  b = BroadcastIndex::make({&a, &bias}, out);  // a per-column bias: [6 rows, 4 cols]
  REQUIRE(b.rank == 2);
  CHECK(b.out_dims[0] == 6);
  CHECK(b.out_dims[1] == 4);
  CHECK(b.strides[1][0] == 0);
  CHECK(b.strides[1][1] == 1);
  CHECK(!b.contiguous(1));

  b = BroadcastIndex::make({&a, &chan}, out);  // per row of the middle dim: [2, 3, 4]
  REQUIRE(b.rank == 3);
  CHECK(b.strides[1][0] == 0);
  CHECK(b.strides[1][1] == 1);
  CHECK(b.strides[1][2] == 0);
  CHECK(b.strides[0][0] == 12);

  b = BroadcastIndex::make({&scalar, &a}, out);
  CHECK(out == a);
  CHECK(b.rank == 1);
  CHECK(b.strides[0][0] == 0);

  // Walk every element with the strides and compare with a direct computation.
  const std::vector<int64_t> x{5, 1, 7}, y{1, 6, 1};
  b = BroadcastIndex::make({&x, &y}, out);
  CHECK(out == std::vector<int64_t>{5, 6, 7});
  for (int64_t i = 0; i < b.numel; ++i) {
    int64_t rest = i, ox = 0, oy = 0;
    for (int d = b.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % b.out_dims[d];
      rest /= b.out_dims[d];
      ox += idx * b.strides[0][d];
      oy += idx * b.strides[1][d];
    }
    const int64_t i0 = i / 42, i1 = i / 7 % 6, i2 = i % 7;
    CHECK(ox == i0 * 7 + i2);
    CHECK(oy == i1);
  }

  const std::vector<int64_t> bad{3};
  CHECK_THROWS_WITH(BroadcastIndex::make({&a, &bad}, out),
                    Catch::Contains("[2,3,4] and [3] do not broadcast"));
}
#endif
