// Weights a kernel packed into its own layout stop occupying memory twice: the executor drops
// the file pages of the originals (releaseResidentPages), which must change nothing a reader
// sees.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <vector>

#include "fusectl/graph/buffer_residency.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

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
  ValueType xt;
  xt.dtype = DType::Float;
  xt.shape = Shape::ofStatic({4, 512});
  Value* x = g.addInput("x", xt);
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
