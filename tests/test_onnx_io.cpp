// ONNX I/O details: buffers and tensors, external data, determinism, atomic writes, tensor
// files, subgraph scoping, and the text printer's handling of what ONNX 1.12 text cannot say.
#include <onnx/defs/parser.h>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "onnx_model_compare.h"
#include "test_files.h"

namespace fs = std::filesystem;
using fusectl::DType;

namespace {

using TempDir = fusectl::testing::TempDir;

using fusectl::testing::slurp;

fusectl::LoadOptions noInference() {
  fusectl::LoadOptions o;
  o.infer_shapes = false;
  return o;
}

onnx::ModelProto parseText(const std::string& text) {
  onnx::ModelProto m;
  auto status = onnx::OnnxParser::Parse(m, text.c_str());
  INFO(status.ErrorMessage());
  REQUIRE(status.IsOK());
  return m;
}

onnx::ModelProto toProto(const fusectl::Model& model) {
  onnx::ModelProto m;
  REQUIRE(m.ParseFromString(fusectl::modelToBinary(model)));
  return m;
}

std::unique_ptr<fusectl::Model> fromProto(const onnx::ModelProto& m) {
  return fusectl::parseModelBinary(m.SerializeAsString(), "test.onnx", ".", noInference());
}

// A model with a few initializers of different sizes.
std::unique_ptr<fusectl::Model> weightsModel() {
  auto model = std::make_unique<fusectl::Model>();
  model->opset_imports.push_back({"", 13});
  fusectl::Graph& g = *model->graph;
  g.name = "weights";
  fusectl::ValueType type;
  type.dtype = DType::Float;
  type.shape = fusectl::Shape::ofStatic({1000});
  fusectl::Value* x = g.addInput("X", type);
  fusectl::Value* acc = x;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> values(i == 3 ? 3 : 1000);
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k * (i + 1)) * 0.5f;
    std::vector<int64_t> dims{static_cast<int64_t>(values.size())};
    fusectl::Value* w = g.addInitializer("W" + std::to_string(i),
                                         fusectl::Tensor::fromValues(DType::Float, dims, values));
    acc = g.createNode(
               {"Add", "", {acc, w}, {"A" + std::to_string(i)}, "add" + std::to_string(i), {}})
              ->output(0);
  }
  g.addOutput(acc);
  return model;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("Buffer and Tensor share bytes and copy on write", "[onnx_io][tensor]") {
  std::string bytes(4096, 'x');
  const char* where = bytes.data();
  auto buffer = fusectl::Buffer::fromString(std::move(bytes));
  CHECK(reinterpret_cast<const char*>(buffer.data()) == where);  // moved, not copied

  fusectl::Tensor a = fusectl::Tensor::fromValues(DType::Float, {2}, std::vector<float>{1, 2});
  fusectl::Tensor b = a;
  CHECK(a.bytes() == b.bytes());
  b.mutableData<float>()[0] = 7;
  CHECK(a.data<float>()[0] == 1);
  CHECK(b.data<float>()[0] == 7);
  const uint8_t* own = b.bytes();
  b.mutableData<float>()[1] = 8;  // sole owner now: written in place
  CHECK(b.bytes() == own);
  CHECK(!a.identical(b));

  fusectl::Tensor zeros(DType::Int4, {3});
  CHECK(zeros.byteSize() == 2);
  fusectl::Tensor half =
      fusectl::Tensor::fromValues(DType::Float16, {2}, std::vector<uint16_t>{0x3c00, 0xc000});
  CHECK(half.valueAsDouble(0) == 1.0);
  CHECK(half.valueAsDouble(1) == -2.0);
  fusectl::Tensor strings = fusectl::Tensor::ofStrings({2}, {"a", "b"});
  CHECK(strings.strings()[1] == "b");
  CHECK(fusectl::dtypeName(DType::BFloat16) == "bfloat16");
  CHECK(fusectl::dtypeFromName("float16") == DType::Float16);
  CHECK(fusectl::dtypeStorageBytes(DType::UInt4, 5) == 3);
}

TEST_CASE("Buffer::mapFile maps a byte range of a file", "[onnx_io][tensor]") {
  TempDir dir;
  std::string data(10000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::ofstream(dir / "blob.bin", std::ios::binary) << data;
  auto mapped = fusectl::Buffer::mapFile(dir / "blob.bin", 4097, 100);  // not page aligned
  REQUIRE(mapped.size() == 100);
  CHECK(std::memcmp(mapped.data(), data.data() + 4097, 100) == 0);
  CHECK_THROWS_AS(fusectl::Buffer::mapFile(dir / "blob.bin", 9990, 20), fusectl::Error);
  CHECK_THROWS_AS(fusectl::Buffer::mapFile(dir / "missing.bin", 0, 1), fusectl::Error);
}

namespace {

// Byte i is a function of i and a seed; counts how often it was asked for the bytes.
class CountingRecipe : public fusectl::ByteRecipe {
 public:
  explicit CountingRecipe(uint8_t seed) : seed_(seed) {}
  void produce(uint8_t* dst, size_t size) const override {
    calls.fetch_add(1);
    for (size_t i = 0; i < size; ++i) dst[i] = byteAt(i);
  }
  uint8_t byteAt(size_t i) const { return static_cast<uint8_t>(i * 13 + seed_); }
  mutable std::atomic<int> calls{0};

 private:
  uint8_t seed_;
};

std::vector<uint8_t> recipeBytes(const CountingRecipe& r, size_t size) {
  std::vector<uint8_t> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = r.byteAt(i);
  return v;
}

}  // namespace

TEST_CASE("deferred buffers: computed once on read, streamed without being kept",
          "[onnx_io][tensor]") {
  auto recipe = std::make_shared<CountingRecipe>(5);
  auto buffer = fusectl::Buffer::deferred(5000, recipe);
  const std::vector<uint8_t> expected = recipeBytes(*recipe, 5000);
  CHECK(buffer.size() == 5000);
  CHECK(buffer.isPending());
  CHECK(recipe->calls == 0);

  std::vector<uint8_t> streamed(5000);
  buffer.copyTo(streamed.data());
  CHECK(streamed == expected);
  CHECK(recipe->calls == 1);
  CHECK(buffer.isPending());  // produced into the caller's memory, not kept

  // A tensor over it detaches on write with the same bytes; the shared buffer stays pending.
  fusectl::Tensor t(DType::Float, {1250}, buffer);
  fusectl::Tensor copy = t;
  uint8_t* mine = copy.mutableBytes();
  CHECK(std::vector<uint8_t>(mine, mine + 5000) == expected);
  CHECK(buffer.isPending());

  // Readers on several threads at once: one computation, one address for all.
  const int before = recipe->calls;
  std::vector<const uint8_t*> seen(4, nullptr);
  std::vector<std::thread> readers;
  for (size_t k = 0; k < seen.size(); ++k)
    readers.emplace_back([&, k] { seen[k] = buffer.data(); });
  for (auto& r : readers) r.join();
  CHECK(recipe->calls == before + 1);
  for (const uint8_t* p : seen) CHECK(p == seen[0]);
  CHECK(std::vector<uint8_t>(seen[0], seen[0] + 5000) == expected);
  CHECK(!buffer.isPending());
  buffer.copyTo(streamed.data());  // kept now: copied, not produced again
  CHECK(recipe->calls == before + 1);
  CHECK(t.bytes() == seen[0]);

  CHECK(fusectl::Buffer::deferred(0, recipe).size() == 0);
  CHECK_THROWS_AS(fusectl::Buffer::deferred(4, nullptr), fusectl::Error);
}

TEST_CASE("deferred initializers save the bytes their recipe gives, inline and external",
          "[onnx_io][tensor][external]") {
  // W0 small, W1 above the writer's 1 MiB buffer, both deferred; the same model with the bytes
  // computed up front must give the same files, and saving must not keep the bytes.
  auto small = std::make_shared<CountingRecipe>(1);
  auto large = std::make_shared<CountingRecipe>(2);
  const size_t small_size = 4000, large_size = (1 << 20) + 4096;
  auto build = [&](bool deferred) {
    auto model = std::make_unique<fusectl::Model>();
    model->opset_imports.push_back({"", 13});
    fusectl::Graph& g = *model->graph;
    fusectl::ValueType type;
    type.dtype = DType::Float;
    type.shape = fusectl::Shape::ofStatic({static_cast<int64_t>(large_size / 4)});
    fusectl::Value* x = g.addInput("X", type);
    std::vector<fusectl::Value*> ws;
    for (auto [name, recipe, size] :
         {std::tuple{"W0", small.get(), small_size}, std::tuple{"W1", large.get(), large_size}}) {
      fusectl::Buffer bytes =
          deferred ? fusectl::Buffer::deferred(
                         size, std::shared_ptr<const fusectl::ByteRecipe>(
                                   recipe == small.get() ? small : large))
                   : fusectl::Buffer::fromVector(recipeBytes(*recipe, size));
      ws.push_back(g.addInitializer(
          name, fusectl::Tensor(DType::Float, {static_cast<int64_t>(size / 4)}, bytes)));
    }
    fusectl::Value* y = g.createNode({"Add", "", {x, ws[1]}, {"Y"}, "add", {}})->output(0);
    g.addOutput(y);
    g.addOutput(ws[0]);
    return model;
  };
  auto eager = build(false);
  auto lazy = build(true);
  TempDir dir;
  fusectl::saveModel(*eager, dir / "eager.onnx");
  fusectl::saveModel(*lazy, dir / "lazy.onnx");
  CHECK(slurp(dir / "lazy.onnx") == slurp(dir / "eager.onnx"));

  fusectl::SaveOptions external;
  external.external_data_file = "eager.data";
  fusectl::saveModel(*eager, dir / "eager_x.onnx", external);
  external.external_data_file = "lazy.data";
  fusectl::saveModel(*lazy, dir / "lazy_x.onnx", external);
  CHECK(slurp(dir / "lazy.data") == slurp(dir / "eager.data"));
  CHECK(slurp(dir / "lazy.data").size() > large_size);

  for (const fusectl::Value* v : lazy->graph->initializers())
    CHECK(v->initializer()->buffer().isPending());
  CHECK(small->calls == 2);
  CHECK(large->calls == 2);

  CHECK(fusectl::modelToBinary(*lazy) == fusectl::modelToBinary(*eager));
  // Tensors outside the main graph go through protobuf messages (exportTensor).
  fusectl::saveTensorFile(*lazy->graph->findValue("W0")->initializer(), "W0", dir / "lazy.pb");
  fusectl::saveTensorFile(*eager->graph->findValue("W0")->initializer(), "W0", dir / "eager.pb");
  CHECK(slurp(dir / "lazy.pb") == slurp(dir / "eager.pb"));
  CHECK(small->calls == 4);
}

TEST_CASE("a weight that fails while a second thread writes the initializers fails the save",
          "[onnx_io][tensor]") {
  // 48 MiB of initializers: the writer puts them on their own thread. The recipe of the last
  // one throws there; the caller must get that error, and no file may be left behind.
  class FailingRecipe : public fusectl::ByteRecipe {
   public:
    void produce(uint8_t*, size_t) const override {
      throw fusectl::Error(fusectl::ErrorKind::Internal, "recipe failed on purpose");
    }
  };
  auto model = std::make_unique<fusectl::Model>();
  model->opset_imports.push_back({"", 13});
  fusectl::Graph& g = *model->graph;
  const int64_t n = 4 << 20;  // floats: 16 MiB per tensor
  for (int i = 0; i < 3; ++i) {
    fusectl::Buffer bytes =
        i < 2 ? fusectl::Buffer::fromVector(std::vector<uint8_t>(static_cast<size_t>(n) * 4, 1))
              : fusectl::Buffer::deferred(static_cast<size_t>(n) * 4,
                                          std::make_shared<FailingRecipe>());
    g.addOutput(g.addInitializer("W" + std::to_string(i), fusectl::Tensor(DType::Float, {n}, bytes)));
  }
  TempDir dir;
  try {
    fusectl::saveModel(*model, dir / "model.onnx");
    FAIL("saveModel succeeded with a failing weight");
  } catch (const fusectl::Error& e) {
    CHECK(std::string(e.what()).find("recipe failed on purpose") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "model.onnx"));
  CHECK(dir.files().empty());
  CHECK_THROWS_WITH(fusectl::modelToBinary(*model), Catch::Contains("recipe failed on purpose"));
}

TEST_CASE("Attribute copies deep-copy subgraphs", "[onnx_io][attribute]") {
  auto sub = std::make_unique<fusectl::Graph>("body");
  sub->addOutput(sub->addInput("a", {}));
  fusectl::Attribute a = fusectl::Attribute::ofGraph("body", std::move(sub));
  fusectl::Attribute b = a;
  REQUIRE(b.g);
  CHECK(b.g.get() != a.g.get());
  CHECK(b.g->name == "body");
  CHECK(b.g->inputs().size() == 1);
  CHECK(fusectl::attrKindName(fusectl::AttrKind::Graphs) == "graphs");
}

TEST_CASE("external data: save, reload, same bytes; data files written atomically",
          "[onnx_io][external]") {
  TempDir dir;
  auto model = weightsModel();
  fusectl::SaveOptions options;
  options.external_data_file = "model.weights";
  options.size_threshold = 1024;
  fusectl::saveModel(*model, dir / "model.onnx", options);
  CHECK(dir.files() == std::vector<std::string>{"model.onnx", "model.weights"});

  onnx::ModelProto saved;
  REQUIRE(saved.ParseFromString(slurp(dir / "model.onnx")));
  int external = 0;
  for (const auto& t : saved.graph().initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) {
      CHECK(t.name() == "W3");  // 12 bytes, under the threshold
      continue;
    }
    ++external;
    std::map<std::string, std::string> kv;
    for (const auto& e : t.external_data()) kv[e.key()] = e.value();
    CHECK(kv["location"] == "model.weights");
    CHECK(std::stoull(kv["offset"]) % 64 == 0);
    CHECK(kv["length"] == "4000");
  }
  CHECK(external == 3);

  auto reloaded = fusectl::loadModel(dir / "model.onnx", noInference());
  for (const fusectl::Value* v : model->graph->initializers()) {
    const fusectl::Value* r = reloaded->graph->findValue(v->name());
    REQUIRE(r);
    CHECK(r->initializer()->identical(*v->initializer()));
  }
  CHECK(fusectl::modelToBinary(*reloaded) == fusectl::modelToBinary(*model));

  // Saving the reloaded (memory-mapped) model over its own data file is safe.
  fusectl::saveModel(*reloaded, dir / "again.onnx", options);
  auto again = fusectl::loadModel(dir / "again.onnx", noInference());
  CHECK(again->graph->findValue("W1")->initializer()->identical(
      *model->graph->findValue("W1")->initializer()));

  fusectl::SaveOptions escaping = options;
  escaping.external_data_file = "../outside.bin";
  CHECK_THROWS_AS(fusectl::saveModel(*model, dir / "bad.onnx", escaping), fusectl::Error);
  escaping.external_data_file = "/tmp/absolute.bin";
  CHECK_THROWS_AS(fusectl::saveModel(*model, dir / "bad.onnx", escaping), fusectl::Error);
  fusectl::SaveOptions text = options;
  CHECK_THROWS_AS(fusectl::saveModel(*model, dir / "bad.onnxtxt", text), fusectl::Error);
  CHECK(!fs::exists(dir / "bad.onnx"));
}

TEST_CASE("saving is deterministic and matches modelToBinary", "[onnx_io][determinism]") {
  TempDir dir;
  auto model =
      fusectl::loadModel(FUSECTL_SOURCE_DIR "/testdata/models/resnet_mini.onnx", noInference());
  fusectl::saveModel(*model, dir / "a.onnx");
  fusectl::saveModel(*model, dir / "b.onnx");
  std::string a = slurp(dir / "a.onnx");
  CHECK(a == slurp(dir / "b.onnx"));
  CHECK(a == fusectl::modelToBinary(*model));
  // The hand-assembled main graph is exactly what protobuf itself would write.
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(a));
  CHECK(proto.SerializeAsString() == a);
  CHECK(fusectl::modelToText(*model) == fusectl::modelToText(*model));
}

TEST_CASE("writeFileAtomically replaces files whole and leaves nothing behind on failure",
          "[onnx_io][files]") {
  TempDir dir;
  fusectl::writeFileAtomically(dir / "out.bin", "first");
  fusectl::writeFileAtomically(dir / "out.bin", "second version");
  CHECK(slurp(dir / "out.bin") == "second version");
  CHECK(dir.files() == std::vector<std::string>{"out.bin"});
  try {
    fusectl::writeFileAtomically(dir / "no/such/folder/out.bin", "x");
    FAIL("wrote into a missing folder");
  } catch (const fusectl::Error& e) {
    CHECK(e.kind() == fusectl::ErrorKind::Io);
  }
  CHECK(dir.files() == std::vector<std::string>{"out.bin"});
}

TEST_CASE("tensor .pb files: raw and typed data, names", "[onnx_io][files]") {
  TempDir dir;
  fusectl::Tensor t =
      fusectl::Tensor::fromValues(DType::Float, {2, 2}, std::vector<float>{1, -2, 3.5f, 4});
  fusectl::saveTensorFile(t, "input_0", dir / "t.pb");
  std::string name;
  fusectl::Tensor back = fusectl::loadTensorFile(dir / "t.pb", &name);
  CHECK(name == "input_0");
  CHECK(back.identical(t));

  fusectl::Tensor s = fusectl::Tensor::ofStrings({2}, {"x", "y\"z"});
  fusectl::saveTensorFile(s, "", dir / "s.pb");
  CHECK(fusectl::loadTensorFile(dir / "s.pb").identical(s));

  onnx::TensorProto typed;  // typed fields, as older files have them
  typed.set_data_type(onnx::TensorProto::FLOAT16);
  typed.add_dims(3);
  for (int v : {0x3c00, 0x4000, 0xbc00}) typed.add_int32_data(v);
  std::ofstream(dir / "typed.pb", std::ios::binary) << typed.SerializeAsString();
  fusectl::Tensor h = fusectl::loadTensorFile(dir / "typed.pb");
  CHECK(h.dtype() == DType::Float16);
  CHECK(h.valueAsDouble(1) == 2.0);
  CHECK(h.valueAsDouble(2) == -1.0);

  onnx::TensorProto bools;
  bools.set_data_type(onnx::TensorProto::BOOL);
  bools.add_dims(2);
  bools.add_int32_data(1);
  bools.add_int32_data(0);
  std::ofstream(dir / "bools.pb", std::ios::binary) << bools.SerializeAsString();
  fusectl::Tensor b = fusectl::loadTensorFile(dir / "bools.pb");
  CHECK(b.byteSize() == 2);
  CHECK(b.valueAsInt64(0) == 1);

  std::ofstream(dir / "junk.pb", std::ios::binary) << std::string("\xff\xff\xff", 3);
  CHECK_THROWS_AS(fusectl::loadTensorFile(dir / "junk.pb"), fusectl::Error);

  fs::path node_test = fs::path(FUSECTL_SOURCE_DIR) / ".." / "shared" / "onnx-node-tests" / "node" /
                       "test_add" / "test_data_set_0" / "input_0.pb";
  if (fs::exists(node_test)) {
    fusectl::Tensor in = fusectl::loadTensorFile(node_test.string(), &name);
    CHECK(in.dtype() == DType::Float);
    CHECK(in.numel() == 60);
  }
}

TEST_CASE("subgraphs capture outer values through every level", "[onnx_io][subgraph]") {
  // The If comes before the node producing S: import sorts, and captures still resolve.
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 13]>
nested (bool c, float[2] X) => (float[2] Y) {
  Y = If (c) <
    then_branch = t1 () => (float[2] r1) {
      r1 = If (c) <
        then_branch = t2 () => (float[2] r2) { r2 = Add (S, X) },
        else_branch = e2 () => (float[2] r3) { r3 = Neg (S) }
      >
    },
    else_branch = e1 () => (float[2] r4) { r4 = Identity (X) }
  >
  S = Relu (X)
})";
  auto model = fusectl::parseModelText(text, "nested.onnxtxt", noInference());
  fusectl::Graph& g = *model->graph;
  REQUIRE(g.verify().empty());
  REQUIRE(g.numNodes() == 2);
  CHECK(g.firstNode()->opType() == "Relu");
  fusectl::Node* outer_if = g.lastNode();
  std::vector<std::string> implicit;
  for (const fusectl::Value* v : outer_if->implicitInputs()) implicit.push_back(v->name());
  std::sort(implicit.begin(), implicit.end());
  CHECK(implicit == std::vector<std::string>{"S", "X", "c"});

  const fusectl::Graph* t1 = outer_if->attr("then_branch")->g.get();
  REQUIRE(t1);
  CHECK(t1->parent() == &g);
  const fusectl::Node* inner_if = t1->firstNode();
  const fusectl::Graph* t2 = inner_if->attr("then_branch")->g.get();
  CHECK(t2->parent() == t1);
  const fusectl::Value* s_in_t2 = t2->findValue("S");
  REQUIRE(s_in_t2);
  CHECK(s_in_t2->kind() == fusectl::Value::Kind::OuterRef);
  const fusectl::Value* s_in_t1 = s_in_t2->outerValue();
  CHECK(s_in_t1->graph() == t1);
  CHECK(s_in_t1->kind() == fusectl::Value::Kind::OuterRef);
  CHECK(s_in_t1->outerValue() == g.findValue("S"));
  CHECK(std::find(inner_if->implicitInputs().begin(), inner_if->implicitInputs().end(), s_in_t1) !=
        inner_if->implicitInputs().end());
  CHECK(g.findValue("S")->uses().size() == 1);  // the outer If's implicit use

  // Round trips keep it; the saved order is topological.
  onnx::ModelProto saved = toProto(*model);
  CHECK(saved.graph().node(0).op_type() == "Relu");
  CHECK(onnx_compare::compareModels(parseText(text), saved).empty());
  auto again =
      fusectl::parseModelText(fusectl::modelToText(*model), "again.onnxtxt", noInference());
  CHECK(fusectl::modelToBinary(*again) == fusectl::modelToBinary(*model));
}

TEST_CASE("IR 3 models keep initializers that are also graph inputs", "[onnx_io][import]") {
  onnx::ModelProto m = parseText(R"(<ir_version: 3, opset_import: ["" : 9]>
g (float[2] X, float[N] W) => (float[2] Y) <float[2] W = {1.0, 2.0}> { Y = Add (X, W) })");
  auto model = fromProto(m);
  const fusectl::Value* w = model->graph->findValue("W");
  REQUIRE(w);
  CHECK(w->isInitializer());
  CHECK(w->isGraphInput());
  CHECK(!w->isConstant());
  CHECK(w->type.shape.str() == "[N]");  // the declared input type, not the tensor's
  CHECK(model->graph->inputs().size() == 2);
  CHECK(onnx_compare::compareModels(m, toProto(*model)).empty());
}

TEST_CASE("the text printer covers what ONNX 1.12 syntax cannot express", "[onnx_io][text]") {
  onnx::ModelProto m = parseText(R"(<ir_version: 8, opset_import: ["" : 13, "com.x" : 1]>
main (float[N, 2] X, float[2] K) => (float[N, 2] Y)
<float[2] W = {1.0, 2.0}>
{
  A = Add (X, W)
  B = com.x.Op (A)
  C = com.x.Opt (A, A)
  Y = Identity (C)
})");
  auto& g = *m.mutable_graph();
  auto renameAll = [&](const std::string& from, const std::string& to) {
    std::function<void(onnx::GraphProto&)> visit = [&](onnx::GraphProto& gp) {
      for (auto* list : {gp.mutable_input(), gp.mutable_output(), gp.mutable_value_info()})
        for (auto& v : *list)
          if (v.name() == from) v.set_name(to);
      for (auto& t : *gp.mutable_initializer())
        if (t.name() == from) t.set_name(to);
      for (auto& n : *gp.mutable_node()) {
        for (auto& s : *n.mutable_input())
          if (s == from) s = to;
        for (auto& s : *n.mutable_output())
          if (s == from) s = to;
        for (auto& a : *n.mutable_attribute())
          if (a.has_g()) visit(*a.mutable_g());
      }
    };
    visit(g);
  };
  renameAll("A", "/layer.0/Add_output:0");
  renameAll("X", "float");
  renameAll("B", "2 \"quoted\" name");
  renameAll("W", "onnx::Add_7");
  g.set_name("torch-jit-export");
  g.set_doc_string("graph \"doc\"\nline two");
  g.mutable_input(1)->set_doc_string("a \"documented\" input");
  g.mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("2*N");
  auto* seq_input = g.add_input();
  seq_input->set_name("S");
  seq_input->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(1);

  auto* add = g.mutable_node(0);
  add->set_name("/layer.0/Add");
  add->set_doc_string("adds \"quoted\" things\n");
  auto* op = g.mutable_node(1);
  auto attr = [&](const std::string& name, onnx::AttributeProto::AttributeType type) {
    auto* a = op->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  };
  attr("nan", onnx::AttributeProto::FLOAT)->set_f(std::numeric_limits<float>::quiet_NaN());
  attr("inf", onnx::AttributeProto::FLOAT)->set_f(-std::numeric_limits<float>::infinity());
  attr("tiny", onnx::AttributeProto::FLOAT)->set_f(1e-40f);
  attr("negzero", onnx::AttributeProto::FLOAT)->set_f(-0.0f);
  attr("third", onnx::AttributeProto::FLOAT)->set_f(1.0f / 3.0f);
  attr("empty_ints", onnx::AttributeProto::INTS);
  attr("quote", onnx::AttributeProto::STRING)->set_s("say \"hi\"");
  attr("floats_nan", onnx::AttributeProto::FLOATS)
      ->add_floats(std::numeric_limits<float>::quiet_NaN());
  auto* documented = attr("documented", onnx::AttributeProto::INT);
  documented->set_i(3);
  documented->set_doc_string("why \"3\"");
  auto* sparse = attr("sparse", onnx::AttributeProto::SPARSE_TENSOR)->mutable_sparse_tensor();
  sparse->add_dims(4);
  sparse->mutable_values()->set_data_type(1);
  sparse->mutable_values()->add_dims(1);
  sparse->mutable_values()->add_float_data(5.f);
  sparse->mutable_indices()->set_data_type(7);
  sparse->mutable_indices()->add_dims(1);
  sparse->mutable_indices()->add_int64_data(2);
  attr("tp", onnx::AttributeProto::TYPE_PROTO)
      ->mutable_tp()
      ->mutable_tensor_type()
      ->set_elem_type(7);
  auto* half = attr("half", onnx::AttributeProto::TENSOR)->mutable_t();
  half->set_data_type(onnx::TensorProto::FLOAT16);
  half->add_dims(1);
  half->set_raw_data(std::string("\x00\x3c", 2));
  auto* tensors = attr("tensors", onnx::AttributeProto::TENSORS)->add_tensors();
  tensors->set_data_type(onnx::TensorProto::INT64);
  tensors->add_dims(1);
  tensors->add_int64_data(9);
  auto* graphs = attr("graphs", onnx::AttributeProto::GRAPHS)->add_graphs();
  graphs->set_name("captures");
  auto* sub_node = graphs->add_node();
  sub_node->set_op_type("Neg");
  sub_node->add_input("/layer.0/Add_output:0");  // an outer value, through a graphs attribute
  sub_node->add_output("neg");
  graphs->add_output()->set_name("neg");

  auto* opt = g.mutable_node(2);
  opt->set_input(0, "");  // a leading omitted input
  opt->add_output("");    // a trailing omitted output

  auto tensor = [&](const std::string& name, int type) {
    auto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    t->add_dims(2);
    return t;
  };
  float special[2] = {std::numeric_limits<float>::infinity(), 1e-39f};
  tensor("special", onnx::TensorProto::FLOAT)
      ->set_raw_data(std::string(reinterpret_cast<char*>(special), 8));
  tensor("h", onnx::TensorProto::FLOAT16)->set_raw_data(std::string("\x00\x3c\x00\xc0", 4));
  tensor("bf", onnx::TensorProto::BFLOAT16)->set_raw_data(std::string("\x80\x3f\x00\x40", 4));
  auto* strs = tensor("strs", onnx::TensorProto::STRING);
  strs->add_string_data("plain");
  strs->add_string_data("with \"quote\"");
  double dd[2] = {4.9e-324, -0.1};
  tensor("dd", onnx::TensorProto::DOUBLE)
      ->set_raw_data(std::string(reinterpret_cast<char*>(dd), 16));
  auto* doc_tensor = tensor("doc_t", onnx::TensorProto::INT64);
  doc_tensor->set_raw_data(std::string(16, '\x01'));
  doc_tensor->set_doc_string("documented tensor");
  float exact[2] = {0.1f, 16777217.0f};
  tensor("exact", onnx::TensorProto::FLOAT)
      ->set_raw_data(std::string(reinterpret_cast<char*>(exact), 8));
  auto* q = g.add_quantization_annotation();
  q->set_tensor_name("Y");
  auto* sp = g.add_sparse_initializer();
  sp->add_dims(3);
  sp->mutable_values()->set_name("sparse_w");
  sp->mutable_values()->set_data_type(1);

  m.set_producer_name("maker \"x\"");
  m.set_doc_string("model doc\nwith lines");
  m.set_model_version(5);
  auto* meta = m.add_metadata_props();
  meta->set_key("k \"1\"");
  meta->set_value("v");
  auto* fn = m.add_functions();
  fn->set_name("MyFn");
  fn->set_domain("com.x");
  auto* training = m.add_training_info();
  training->mutable_algorithm()->set_name("algo");

  auto model = fromProto(m);
  REQUIRE(model->graph->verify().empty());
  CHECK(model->graph->firstNode()->name() == "/layer.0/Add");
  CHECK(onnx_compare::compareModels(m, toProto(*model)).empty());
  INFO(onnx_compare::compareModels(m, toProto(*model)));

  const std::string text = fusectl::modelToText(*model);
  INFO(text);
  onnx::ModelProto plain;  // what another 1.12 parser sees: valid syntax
  CHECK(onnx::OnnxParser::Parse(plain, text.c_str()).IsOK());
  auto reparsed = fusectl::parseModelText(text, "printed.onnxtxt", noInference());
  CHECK(onnx_compare::compareModels(m, toProto(*reparsed)) == "");
  CHECK(fusectl::modelToBinary(*reparsed) == fusectl::modelToBinary(*model));
  CHECK(fusectl::modelToText(*reparsed) == text);
  CHECK(text.find("third = 0.33333334,") != std::string::npos);  // shortest exact float digits
  CHECK(text.find("#@ node 0 name \"/layer.0/Add\"") != std::string::npos);
}

TEST_CASE("load formats: sniffing text in a .onnx file, explicit formats", "[onnx_io][import]") {
  TempDir dir;
  std::string text = slurp(FUSECTL_SOURCE_DIR "/testdata/fixtures/matmul_add.onnxtxt");
  std::ofstream(dir / "text_model.onnx") << text;
  auto sniffed = fusectl::loadModel(dir / "text_model.onnx", noInference());
  CHECK(sniffed->graph->numNodes() == 2);
  fusectl::LoadOptions binary = noInference();
  binary.format = fusectl::ModelFormat::Binary;
  CHECK_THROWS_AS(fusectl::loadModel(dir / "text_model.onnx", binary), fusectl::Error);
  fusectl::saveModel(*sniffed, dir / "out.onnxtxt");
  CHECK(fusectl::loadModel(dir / "out.onnxtxt", noInference())->graph->numNodes() == 2);
  fusectl::SaveOptions as_text;
  as_text.format = fusectl::ModelFormat::Text;
  fusectl::saveModel(*sniffed, dir / "forced.onnx", as_text);
  CHECK(slurp(dir / "forced.onnx").rfind("<", 0) == 0);
  CHECK_THROWS_AS(fusectl::loadModel(dir / "missing.onnx"), fusectl::Error);
}
