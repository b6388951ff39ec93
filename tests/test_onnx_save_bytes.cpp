// Saved bytes against protobuf's own: the main graph is encoded by hand (onnx_export.cpp), and
// every byte must equal what protobuf's deterministic serializer writes for the ModelProto that
// exportModel() fills, for every attribute kind, type and tensor header the encoder handles,
// edge values included, and for the kinds it leaves to protobuf placed in between.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "onnx_convert.h"
#include "test_files.h"

namespace fs = std::filesystem;
using fusectl::Attribute;
using fusectl::AttrKind;
using fusectl::Dim;
using fusectl::DType;
using fusectl::Graph;
using fusectl::Node;
using fusectl::Shape;
using fusectl::Tensor;
using fusectl::Value;
using fusectl::ValueType;

namespace {

using TempDir = fusectl::testing::TempDir;

using fusectl::testing::slurp;

// The reference: the ModelProto exportModel() fills, serialized by protobuf.
std::string protobufBytes(const fusectl::Model& model, bool write_value_info) {
  onnx::ModelProto proto;
  fusectl::onnx_convert::ExportOptions options;
  options.write_value_info = write_value_info;
  fusectl::onnx_convert::exportModel(model, &proto, options);
  return fusectl::onnx_convert::serializeDeterministic(proto);
}

// "" when equal; else where they part, which a multi-megabyte string comparison would not say.
std::string firstDifference(const std::string& actual, const std::string& expected) {
  if (actual == expected) return "";
  size_t at = 0;
  while (at < actual.size() && at < expected.size() && actual[at] == expected[at]) ++at;
  return fmt::format("{} bytes, expected {}; first difference at byte {}", actual.size(),
                     expected.size(), at);
}

void checkSavedBytes(const fusectl::Model& model) {
  for (bool write_value_info : {true, false}) {
    INFO("write_value_info " << write_value_info);
    std::string expected = protobufBytes(model, write_value_info);
    TempDir dir;
    fusectl::SaveOptions options;
    options.write_value_info = write_value_info;
    fusectl::saveModel(model, dir / "model.onnx", options);
    CHECK(firstDifference(slurp(dir / "model.onnx"), expected) == "");
    if (write_value_info) CHECK(firstDifference(fusectl::modelToBinary(model), expected) == "");
  }
  // Independent of exportModel(): protobuf parses the bytes and writes them back unchanged, so
  // every field is where protobuf itself puts it.
  std::string saved = fusectl::modelToBinary(model);
  onnx::ModelProto parsed;
  REQUIRE(parsed.ParseFromString(saved));
  CHECK(firstDifference(fusectl::onnx_convert::serializeDeterministic(parsed), saved) == "");
}

float floatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

ValueType tensorType(DType dtype, Shape shape) {
  ValueType t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

ValueType sequenceOfFloatTensors() {
  onnx::TypeProto proto;
  proto.mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      static_cast<int32_t>(DType::Float));
  ValueType t;
  t.opaque_type_proto = proto.SerializeAsString();
  return t;
}

Attribute withDoc(Attribute a, std::string doc) {
  a.doc_string = std::move(doc);
  return a;
}

Attribute reference(std::string name, AttrKind kind, std::string ref_attr_name) {
  Attribute a;
  a.name = std::move(name);
  a.kind = kind;
  a.ref_attr_name = std::move(ref_attr_name);
  return a;
}

std::unique_ptr<Graph> reluBody(const std::string& name) {
  auto body = std::make_unique<Graph>(name);
  Value* x = body->addInput(name + "_x", tensorType(DType::Float, Shape::ofStatic({2})));
  Value* w = body->addInitializer(name + "_w",
                                  Tensor::fromValues(DType::Float, {2}, std::vector<float>{1, 2}));
  Node* add = body->createNode({"Add", "", {x, w}, {name + "_sum"}, "", {}});
  Node* relu = body->createNode({"Relu", "", {add->output(0)}, {name + "_y"}, name + "_relu", {}});
  body->addOutput(relu->output(0));
  return body;
}

// One of everything the encoder writes by hand, each edge value once, with what it leaves to
// protobuf (tensor, graph and type attributes, string tensors, non-tensor types) in between.
std::unique_ptr<fusectl::Model> everyKindModel() {
  auto model = std::make_unique<fusectl::Model>();
  model->ir_version = 9;
  model->opset_imports = {{"", 18}, {"com.example", 1}};
  model->producer_name = "test_onnx_save_bytes";
  model->producer_version = "1";
  model->doc_string = "every hand-encoded field";
  model->metadata_props = {{"key", "value"}, {"", ""}};
  Graph& g = *model->graph;
  g.name = "every_kind";
  g.doc_string = "graph doc";

  Value* x = g.addInput("X", tensorType(DType::Float, Shape({Dim::symbolic("batch"), Dim::known(3),
                                                             Dim::unknown(), Dim::known(0)})));
  Value* any_rank = g.addInput("any_rank", tensorType(DType::Int64, Shape::unknownRank()));
  Value* seq = g.addInput("seq", sequenceOfFloatTensors());
  seq->doc_string = "a sequence";

  // Initializers: over the save buffer (1 MiB) in one piece, empty, scalar, documented, a long
  // name (a two-byte length), and a string tensor protobuf writes, in between.
  std::vector<float> big(300000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f - 7.f;
  Value* w_big = g.addInitializer("W_big", Tensor::fromValues(DType::Float, {1, 300000}, big));
  Value* w_empty = g.addInitializer("W_empty", Tensor(DType::Float, {0, 4}));
  Tensor strings = Tensor::ofStrings({2}, {"", "text"});
  Value* w_strings = g.addInitializer("W_strings", strings);
  Tensor scalar = Tensor::fromValues(DType::Int64, {}, std::vector<int64_t>{-5});
  scalar.doc_string = "a negative scalar";
  Value* w_scalar = g.addInitializer("W_scalar", scalar);
  Value* w_long = g.addInitializer(
      std::string(200, 'w'), Tensor::fromValues(DType::Int8, {3}, std::vector<int8_t>{-1, 0, 1}));

  std::vector<Attribute> scalars = {
      Attribute::ofFloat("zero", 0.f),
      Attribute::ofFloat("negative_zero", -0.f),
      Attribute::ofFloat("negative", -1.5f),
      Attribute::ofFloat("nan", std::numeric_limits<float>::quiet_NaN()),
      Attribute::ofFloat("nan_payload", floatFromBits(0xffc00001u)),
      Attribute::ofFloat("infinity", -std::numeric_limits<float>::infinity()),
      Attribute::ofFloat("denormal", std::numeric_limits<float>::denorm_min()),
      Attribute::ofInt("int_zero", 0),
      Attribute::ofInt("int_minus_one", -1),
      Attribute::ofInt("int_min", std::numeric_limits<int64_t>::min()),
      Attribute::ofInt("int_max", std::numeric_limits<int64_t>::max()),
      Attribute::ofInt("int_127", 127),
      Attribute::ofInt("int_128", 128),
      Attribute::ofString("empty", ""),
      Attribute::ofString("utf8_and_nul", std::string("\xc3\xbc\0z", 4)),
      withDoc(Attribute::ofString("long", std::string(300, 's')), "documented"),
      Attribute::ofString("", "an attribute without a name"),
  };
  std::vector<Attribute> lists = {
      Attribute::ofFloats("no_floats", {}),
      Attribute::ofFloats("floats", {-1.f, 0.f, std::numeric_limits<float>::quiet_NaN(), 3.5f}),
      Attribute::ofInts("no_ints", {}),
      Attribute::ofInts("ints", {0, -1, 1, std::numeric_limits<int64_t>::min(), 1 << 20}),
      Attribute::ofStrings("no_strings", {}),
      withDoc(Attribute::ofStrings("strings", {"", "b", std::string(130, 'c')}), "list doc"),
  };
  // Over 16 KiB: a three-byte length for the attribute and for its node.
  std::vector<int64_t> many(5000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i * i) - 100000;
  lists.push_back(Attribute::ofInts("many", many));

  Tensor attr_tensor = Tensor::fromValues(DType::Float, {2}, std::vector<float>{0.5f, -0.5f});
  attr_tensor.doc_string = "tensor attribute doc";
  onnx::TypeProto type_attr;
  type_attr.mutable_tensor_type()->set_elem_type(static_cast<int32_t>(DType::Int32));
  Attribute type_proto;
  type_proto.name = "type";
  type_proto.kind = AttrKind::TypeProto;
  type_proto.s = type_attr.SerializeAsString();
  std::vector<Attribute> mixed = {
      Attribute::ofInt("before", 1),
      Attribute::ofTensor("value", attr_tensor),
      reference("int_ref", AttrKind::Int, "outer_int"),
      withDoc(reference("floats_ref", AttrKind::Floats, "outer_floats"), "ref doc"),
      reference("tensor_ref", AttrKind::Tensor, "outer_tensor"),
      Attribute::ofGraph("then_branch", reluBody("then")),
      type_proto,
      Attribute::ofGraph("else_branch", reluBody("else")),
      Attribute::ofFloat("after", 2.f),
  };
  Attribute undefined;
  undefined.name = "undefined";
  undefined.doc_string = "no kind";

  Node* a = g.createNode({"Scalars", "com.example", {x, nullptr, w_big}, {"A", ""}, "", scalars});
  a->doc_string = "node doc";
  a->output(0)->type =
      tensorType(DType::Float, Shape({Dim::symbolic("batch"), Dim::symbolic("2*seq"),
                                      Dim::unknown(), Dim::known(-1), Dim::known(1LL << 40)}));
  Node* b = g.createNode(
      {"Lists", "", {a->output(0), w_empty, w_strings, nullptr}, {"", "B", ""}, "lists", lists});
  b->output(1)->type = tensorType(DType::Float, Shape::unknownRank());
  b->output(1)->doc_string = "unknown rank";
  std::vector<std::string> c_outputs = {"C",           "C_untyped_doc", "C_untyped",
                                        "C_rank_only", "C_seq",         "C_inner_seq"};
  Node* c = g.createNode({"Mixed", "com.example", {b->output(1), w_scalar, any_rank, seq},
                          c_outputs, std::string(150, 'n'), mixed});
  c->output(0)->type = tensorType(DType::Int64, Shape::scalar());
  c->output(1)->doc_string = "no type at all";
  c->output(3)->type = tensorType(DType::Undefined, Shape({Dim::known(2)}));
  c->output(3)->doc_string = "rank without an element type";
  c->output(4)->type = sequenceOfFloatTensors();
  c->output(5)->type = sequenceOfFloatTensors();
  c->output(5)->doc_string = "a value_info protobuf writes";
  Node* d =
      g.createNode({"Undefined", "", {c->output(0), w_long}, {"D"}, "undefined", {undefined}});
  d->output(0)->type = tensorType(DType::Float16, Shape::ofStatic({}));
  g.createNode({"Empty", "", {}, {}, "", {}});
  Node* e = g.createNode({"Last", "", {}, {"E"}, "", {}});
  e->output(0)->type = tensorType(DType::Bool, Shape({Dim::unknown()}));
  g.addOutput(d->output(0));
  g.addOutput(c->output(4));

  onnx::TensorAnnotation annotation;
  annotation.set_tensor_name("A");
  g.quantization_annotations.push_back(annotation.SerializeAsString());
  onnx::SparseTensorProto sparse;
  sparse.add_dims(4);
  g.sparse_initializers.push_back(sparse.SerializeAsString());
  return model;
}

// A Conv-like node per block, far more bytes than the save buffer holds, so that fields of
// every kind straddle its flushes.
std::unique_ptr<fusectl::Model> manyNodesModel(int blocks) {
  auto model = std::make_unique<fusectl::Model>();
  model->opset_imports = {{"", 13}};
  Graph& g = *model->graph;
  Value* v = g.addInput("input", tensorType(DType::Float, Shape::ofStatic({1, 8, 16, 16})));
  for (int i = 0; i < blocks; ++i) {
    std::string id = std::to_string(i);
    Value* w = g.addInitializer("w" + id, Tensor(DType::Float, {8, 8, 3, 3}));
    Node* conv = g.createNode({"Conv", "", {v, w, nullptr}, {"conv" + id}, "conv" + id,
                               {Attribute::ofInts("kernel_shape", {3, 3}),
                                Attribute::ofInts("pads", {1, 1, 1, 1}),
                                Attribute::ofString("auto_pad", "NOTSET"),
                                Attribute::ofFloat("alpha", static_cast<float>(i) * -0.1f),
                                Attribute::ofInt("group", i % 3 - 1)}});
    conv->output(0)->type =
        tensorType(DType::Float, Shape({Dim::known(1), Dim::symbolic("c" + std::to_string(i % 7)),
                                        Dim::unknown(), Dim::known(16)}));
    v = conv->output(0);
  }
  g.addOutput(v);
  return model;
}

}  // namespace

TEST_CASE("saved bytes equal protobuf's serialization for every hand-encoded field",
          "[onnx_io][save_bytes]") {
  auto model = everyKindModel();
  checkSavedBytes(*model);
}

TEST_CASE("saved bytes equal protobuf's across many buffer flushes", "[onnx_io][save_bytes]") {
  auto model = manyNodesModel(30000);
  checkSavedBytes(*model);
}

TEST_CASE("saved bytes equal protobuf's for the testdata models", "[onnx_io][save_bytes]") {
  fusectl::LoadOptions no_inference;
  no_inference.infer_shapes = false;
  for (const auto& entry : fs::directory_iterator(FUSECTL_SOURCE_DIR "/testdata/models")) {
    if (entry.path().extension() != ".onnx") continue;
    INFO(entry.path().string());
    for (bool infer : {false, true}) {
      auto model =
          fusectl::loadModel(entry.path().string(), infer ? fusectl::LoadOptions{} : no_inference);
      checkSavedBytes(*model);
    }
  }
}

TEST_CASE("a model over protobuf's 2 GB limit fails before anything is written",
          "[onnx_io][save_bytes]") {
  TempDir dir;
  // A sparse file, mapped: 2.2 GB of weights that take neither memory nor disk.
  constexpr uint64_t kWeightBytes = 2200ull * 1000 * 1000;
  std::string weights_path = dir / "weights.bin";
  int fd = ::open(weights_path.c_str(), O_CREAT | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(kWeightBytes)) == 0);
  ::close(fd);
  auto model = std::make_unique<fusectl::Model>();
  model->opset_imports = {{"", 13}};
  Graph& g = *model->graph;
  Value* w = g.addInitializer("W", Tensor(DType::UInt8, {static_cast<int64_t>(kWeightBytes)},
                                          fusectl::Buffer::mapFile(weights_path, 0, kWeightBytes)));
  g.addOutput(g.createNode({"Identity", "", {w}, {"Y"}, "", {}})->output(0));

  fusectl::SaveOptions inline_weights;  // an external file, but no tensor big enough for it
  inline_weights.external_data_file = "model.data";
  inline_weights.size_threshold = kWeightBytes + 1;
  try {
    fusectl::saveModel(*model, dir / "model.onnx", inline_weights);
    FAIL("saveModel accepted a model over 2 GB");
  } catch (const fusectl::Error& e) {
    CHECK(e.kind() == fusectl::ErrorKind::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("over protobuf's 2 GB limit; save it with external data"));
  }
  CHECK(dir.numFiles() == 1);  // the weights alone: no model, no data file, no temporary
  CHECK_THROWS_AS(fusectl::modelToBinary(*model), fusectl::Error);
}
