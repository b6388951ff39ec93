// Weights a kernel packed into its own layout stop occupying memory twice: the executor drops
// the file pages of the originals (releaseResidentPages), which must change nothing a reader
// sees.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/buffer_residency.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/optimize.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

Value* floatInput(Graph& g, const std::string& name, Shape shape) {
  ValueType t;
  t.dtype = DType::Float;
  t.shape = std::move(shape);
  return g.addInput(name, t);
}

std::vector<uint8_t> bytesOf(const Tensor& t) {
  return std::vector<uint8_t>(t.bytes(), t.bytes() + t.byteSize());
}

}  // namespace

TEST_CASE("weights: only file-mapped bytes are released, and they read back unchanged",
          "[executor]") {
  const std::filesystem::path dir = testing::processTempPath("weight-residency");
  std::filesystem::create_directories(dir);
  // A model whose 1 MiB weight is stored inside the .onnx file (raw_data), so loading maps it.
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  Graph& g = *m->graph;
  std::vector<float> w(512 * 512);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 1009) * 0.25f;
  Value* x = floatInput(g, "x", Shape::ofStatic({4, 512}));
  Value* wv = g.addInitializer("w", Tensor::fromValues<float>(DType::Float, {512, 512}, w));
  Node* mm = g.createNode({"MatMul", "", {x, wv}, {"y"}, "mm", {}});
  mm->output(0)->type.dtype = DType::Float;
  g.addOutput(mm->output(0));
  const std::string path = (dir / "matmul.onnx").string();
  saveModel(*m, path);

  // Heap bytes exist nowhere else: never released.
  CHECK_FALSE(releaseResidentPages(wv->initializer()->buffer()));

  std::unique_ptr<Model> loaded = loadModel(path);
  const Tensor& weight = *loaded->graph->findValue("w")->initializer();
  const std::vector<uint8_t> before = bytesOf(weight);
  CHECK(releaseResidentPages(weight.buffer()));
  CHECK(bytesOf(weight) == before);  // faulted back in from the file

  // Through the executor: the MatMul packs its constant B on the first run and the original's
  // pages go; later runs (and another executor over the same model) compute the same result.
  const std::vector<NamedTensor> inputs = makeRandomInputs(*loaded->graph, 7);
  Executor first(*loaded);
  const HostTensor y1 = first.run(inputs)[0].tensor;
  const HostTensor y2 = first.run(inputs)[0].tensor;
  const HostTensor y3 = Executor(*loaded).run(inputs)[0].tensor;
  REQUIRE(y1.byteSize() == y2.byteSize());
  CHECK(std::memcmp(y1.raw(), y2.raw(), y1.byteSize()) == 0);
  CHECK(std::memcmp(y1.raw(), y3.raw(), y1.byteSize()) == 0);
  CHECK(bytesOf(weight) == before);
  // And the result is the product (one element checked against a double reference).
  const float* xs = inputs[0].tensor.data<float>();
  double ref = 0;
  for (int k = 0; k < 512; ++k) ref += static_cast<double>(xs[k]) * w[static_cast<size_t>(k) * 512 + 3];
  CHECK(y1.data<float>()[3] == Approx(ref).epsilon(1e-4));
  std::filesystem::remove_all(dir);
}

// ---- Copies the executor makes, and lets go of once packed ----

namespace {

// `values` as a float tensor whose bytes start one byte into their buffer, as raw_data at an odd
// offset of a mapped file does: the executor cannot borrow them and copies them.
Tensor misalignedFloats(std::vector<int64_t> dims, const std::vector<float>& values) {
  auto storage = std::make_shared<std::vector<uint8_t>>(values.size() * sizeof(float) + 1);
  std::memcpy(storage->data() + 1, values.data(), values.size() * sizeof(float));
  const uint8_t* bytes = storage->data() + 1;
  return Tensor(DType::Float, std::move(dims), Buffer(storage, bytes, values.size() * 4));
}

// Produces float i * 0.5 - 3 for element i, counting how often it is asked to.
class CountingRecipe : public ByteRecipe {
 public:
  void produce(uint8_t* dst, size_t size) const override {
    ++calls;
    for (size_t i = 0; i < size / 4; ++i) {
      const float v = static_cast<float>(i % 97) * 0.5f - 3.f;
      std::memcpy(dst + 4 * i, &v, 4);
    }
  }
  mutable int calls = 0;
};

std::unique_ptr<Model> matmulModel(Tensor weight, bool also_added) {
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  Graph& g = *m->graph;
  Value* x = floatInput(g, "x", Shape::ofStatic({4, 64}));
  Value* wv = g.addInitializer("w", std::move(weight));
  Node* mm = g.createNode({"MatMul", "", {x, wv}, {"y"}, "mm", {}});
  mm->output(0)->type.dtype = DType::Float;
  g.addOutput(mm->output(0));
  if (also_added) {  // a second reader that uses W's bytes as they are, every run
    Node* add = g.createNode({"Add", "", {wv, wv}, {"w2"}, "add", {}});
    add->output(0)->type.dtype = DType::Float;
    g.addOutput(add->output(0));
  }
  return m;
}

std::vector<float> weightValues(size_t n) {
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  return w;
}

bool sameBytes(const HostTensor& a, const HostTensor& b) {
  return a.dims() == b.dims() && a.byteSize() == b.byteSize() &&
         std::memcmp(a.raw(), b.raw(), a.byteSize()) == 0;
}

}  // namespace

TEST_CASE("weights: a copy made for alignment exists only until its readers have packed it",
          "[executor]") {
  const std::vector<float> w = weightValues(64 * 48);
  auto aligned = matmulModel(Tensor::fromValues<float>(DType::Float, {64, 48}, w), false);
  auto odd = matmulModel(misalignedFloats({64, 48}, w), false);
  const Tensor& odd_w = *odd->graph->findValue("w")->initializer();
  REQUIRE(HostTensor::borrowable(*aligned->graph->findValue("w")->initializer()));
  REQUIRE_FALSE(HostTensor::borrowable(odd_w));
  const uint64_t bytes = 64 * 48 * sizeof(float);

  const std::vector<NamedTensor> inputs = makeRandomInputs(*odd->graph, 3);
  Executor reference(*aligned);
  const HostTensor expected = reference.run(inputs)[0].tensor;
  CHECK(reference.releasedConstantBytes() == 0);  // borrowed: nothing of its own to let go

  Executor executor(*odd);
  CHECK(executor.releasedConstantBytes() == bytes);  // not copied before a node reads it
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    const HostTensor y = executor.run(inputs)[0].tensor;
    CHECK(sameBytes(y, expected));
    CHECK(executor.releasedConstantBytes() == bytes);  // copied, packed, let go
  }
  // The product itself, one element against a double reference.
  const float* xs = inputs[0].tensor.data<float>();
  double ref = 0;
  for (int k = 0; k < 64; ++k) ref += static_cast<double>(xs[k]) * w[static_cast<size_t>(k) * 48 + 5];
  CHECK(expected.data<float>()[5] == Approx(ref).epsilon(1e-5));
}

TEST_CASE("weights: a copy that a node reads as it is stays for every run", "[executor]") {
  const std::vector<float> w = weightValues(64 * 48);
  auto odd = matmulModel(misalignedFloats({64, 48}, w), true);
  auto aligned = matmulModel(Tensor::fromValues<float>(DType::Float, {64, 48}, w), true);
  const std::vector<NamedTensor> inputs = makeRandomInputs(*odd->graph, 4);
  Executor reference(*aligned);
  const std::vector<NamedTensor> expected = reference.run(inputs);
  Executor executor(*odd);
  for (int run = 0; run < 2; ++run) {
    const std::vector<NamedTensor> got = executor.run(inputs);
    REQUIRE(got.size() == 2);
    CHECK(sameBytes(got[0].tensor, expected[0].tensor));
    CHECK(sameBytes(got[1].tensor, expected[1].tensor));  // W + W, read from the kept copy
    CHECK(got[1].tensor.data<float>()[7] == 2 * w[7]);
    CHECK(executor.releasedConstantBytes() == 0);
  }
}

TEST_CASE("weights: a kernel that must repack gets a released copy back", "[executor]") {
  // Conv 3x3 with 32 channels in and out and dynamic height and width: a 10x10 plane runs
  // Winograd F(2x2, 3x3), a 5x5 one im2col (conv.cpp's winogradTile), so each change of size
  // packs W again from its bytes after the executor let them go.
  const std::vector<float> w = weightValues(32 * 32 * 9);
  auto convModel = [](Tensor weight) {
    auto m = std::make_unique<Model>();
    m->setOpsetVersion("", 17);
    Graph& g = *m->graph;
    Value* x = floatInput(g, "x", Shape(std::vector<Dim>{Dim::known(1), Dim::known(32),
                                                         Dim::symbolic("h"), Dim::symbolic("w")}));
    Value* wv = g.addInitializer("w", std::move(weight));
    Node* conv = g.createNode({"Conv", "", {x, wv}, {"y"}, "conv",
                               {Attribute::ofInts("kernel_shape", {3, 3}),
                                Attribute::ofInts("pads", {1, 1, 1, 1})}});
    conv->output(0)->type.dtype = DType::Float;
    g.addOutput(conv->output(0));
    return m;
  };
  auto odd = convModel(misalignedFloats({32, 32, 3, 3}, w));
  auto aligned = convModel(Tensor::fromValues<float>(DType::Float, {32, 32, 3, 3}, w));
  const uint64_t bytes = w.size() * sizeof(float);
  Executor executor(*odd);
  for (int64_t side : {10, 5, 10, 5}) {
    INFO("plane " << side << "x" << side);
    HostTensor x(DType::Float, {1, 32, side, side});
    for (int64_t i = 0; i < x.numel(); ++i) {
      x.mutableData<float>()[i] = static_cast<float>((i * 13) % 29) * 0.1f - 1.4f;
    }
    const std::vector<NamedTensor> inputs = {{"x", x}};
    const HostTensor expected = Executor(*aligned).run(inputs)[0].tensor;
    const HostTensor y = executor.run(inputs)[0].tensor;
    CHECK(sameBytes(y, expected));
    CHECK(executor.releasedConstantBytes() == bytes);
  }
}

TEST_CASE("weights: deferred bytes are hashed, compared and run without being kept",
          "[executor]") {
  const size_t n = 64 * 48;
  auto recipe = std::make_shared<CountingRecipe>();
  const Tensor deferred(DType::Float, {64, 48}, Buffer::deferred(n * 4, recipe));
  std::vector<float> eager_values(n);
  recipe->produce(reinterpret_cast<uint8_t*>(eager_values.data()), n * 4);
  const Tensor eager = Tensor::fromValues<float>(DType::Float, {64, 48}, eager_values);
  recipe->calls = 0;

  CHECK(deferred.contentHash() == eager.contentHash());
  CHECK(deferred.identical(eager));
  CHECK(eager.identical(deferred));
  CHECK(deferred.buffer().isPending());
  CHECK_FALSE(HostTensor::borrowable(deferred));

  auto model = matmulModel(deferred, false);
  auto reference = matmulModel(eager, false);
  const std::vector<NamedTensor> inputs = makeRandomInputs(*model->graph, 5);
  const HostTensor expected = Executor(*reference).run(inputs)[0].tensor;
  Executor executor(*model);
  const int calls_before = recipe->calls;
  for (int run = 0; run < 2; ++run) CHECK(sameBytes(executor.run(inputs)[0].tensor, expected));
  CHECK(recipe->calls == calls_before + 1);  // produced once, into the copy that was packed
  CHECK(executor.releasedConstantBytes() == n * 4);
  CHECK(model->graph->findValue("w")->initializer()->buffer().isPending());
}

TEST_CASE("weights: -O3 keeps fold-conv-bn's scaled weights deferred through a run",
          "[executor]") {
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  Graph& g = *m->graph;
  Value* x = floatInput(g, "x", Shape::ofStatic({1, 8, 12, 12}));
  Value* w = g.addInitializer(
      "w", Tensor::fromValues<float>(DType::Float, {16, 8, 3, 3}, weightValues(16 * 8 * 9)));
  auto perChannel = [&](const char* name, float base) {
    std::vector<float> v(16);
    for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.05f * static_cast<float>(i);
    return g.addInitializer(name, Tensor::fromValues<float>(DType::Float, {16}, v));
  };
  Value* scale = perChannel("scale", 0.5f);
  Value* bias = perChannel("bias", -0.2f);
  Value* mean = perChannel("mean", 0.1f);
  Value* var = perChannel("var", 0.7f);
  Node* conv = g.createNode({"Conv", "", {x, w}, {"c"}, "conv",
                             {Attribute::ofInts("kernel_shape", {3, 3}),
                              Attribute::ofInts("pads", {1, 1, 1, 1})}});
  conv->output(0)->type.dtype = DType::Float;
  Node* bn = g.createNode({"BatchNormalization", "", {conv->output(0), scale, bias, mean, var},
                           {"y"}, "bn", {}});
  bn->output(0)->type.dtype = DType::Float;
  g.addOutput(bn->output(0));

  auto original = m->clone();
  passes::OptimizeRequest request;
  request.level = 3;
  passes::optimize(*m, request);
  REQUIRE(m->graph->numNodes() == 1);
  const Node* fused = m->graph->firstNode();
  const Buffer& folded = fused->input(1)->initializer()->buffer();
  CHECK(folded.isPending());  // dedupe-initializers hashed it without keeping the bytes

  const std::vector<NamedTensor> inputs = makeRandomInputs(*original->graph, 9);
  const HostTensor expected = Executor(*original).run(inputs)[0].tensor;
  Executor executor(*m);
  const HostTensor y = executor.run(inputs)[0].tensor;
  REQUIRE(y.numel() == expected.numel());
  for (int64_t i = 0; i < y.numel(); i += 97) {
    CHECK(y.data<float>()[i] == Approx(expected.data<float>()[i]).margin(1e-4));
  }
  CHECK(folded.isPending());
  CHECK(executor.releasedConstantBytes() == 16 * 8 * 9 * sizeof(float));
}
