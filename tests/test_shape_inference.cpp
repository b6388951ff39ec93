// fusectl's own type and shape inference: per-op rules at different opsets, symbolic dims,
// known-value propagation, subgraphs, the libonnx fallback, merge policy and speed.
#include <limits>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/shape_inference.h"
#include "fusectl/graph/slice_range.h"

using namespace fusectl;

namespace {

ValueType type(DType t, const char* shape) { return ValueType{t, *Shape::parse(shape), {}}; }

// Builds a model node by node; every node has one output unless told otherwise.
struct ModelBuilder {
  Model model;
  Graph& g = *model.graph;
  int counter = 0;

  explicit ModelBuilder(int64_t opset) { model.setOpsetVersion("", opset); }

  Value* input(const std::string& name, DType t, const char* shape) {
    return g.addInput(name, type(t, shape));
  }
  Value* ints(std::vector<int64_t> v) {
    auto n = static_cast<int64_t>(v.size());
    return g.addInitializer("c" + std::to_string(counter++),
                            Tensor::fromValues<int64_t>(DType::Int64, {n}, v));
  }
  Value* scalarInt(int64_t v) {
    return g.addInitializer("c" + std::to_string(counter++),
                            Tensor::fromValues<int64_t>(DType::Int64, {}, {v}));
  }
  Value* floats(std::vector<float> v, std::vector<int64_t> dims) {
    return g.addInitializer("c" + std::to_string(counter++),
                            Tensor::fromValues<float>(DType::Float, std::move(dims), v));
  }
  Node* node(const std::string& op, std::vector<Value*> in, std::vector<Attribute> attrs = {},
             size_t outputs = 1, const std::string& domain = "") {
    std::vector<std::string> names;
    for (size_t k = 0; k < outputs; ++k) names.push_back("t" + std::to_string(counter++) + "_");
    return g.createNode({op, domain, std::move(in), std::move(names), "", std::move(attrs)});
  }
  Value* op(const std::string& op_type, std::vector<Value*> in, std::vector<Attribute> attrs = {}) {
    return node(op_type, std::move(in), std::move(attrs))->output(0);
  }
  ShapeInferenceStats infer(ShapeInferenceOptions o = {}) { return inferShapes(model, o); }
};

Attribute ints(const char* name, std::vector<int64_t> v) { return Attribute::ofInts(name, v); }
Attribute i(const char* name, int64_t v) { return Attribute::ofInt(name, v); }
Attribute str(const char* name, const char* v) { return Attribute::ofString(name, v); }
std::string shapeOf(const Value* v) { return v->shape().str(); }
std::string typeOf(const Value* v) { return v->type.str(); }

}  // namespace

TEST_CASE("shape inference: Conv, BatchNormalization, pools and Gemm on a CNN") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "batchx3x224x224");
  Value* w = b.floats(std::vector<float>(16 * 3 * 7 * 7), {16, 3, 7, 7});
  Value* c = b.op("Conv", {x, w}, {ints("strides", {2, 2}), ints("pads", {3, 3, 3, 3})});
  Value* s = b.floats(std::vector<float>(16), {16});
  Value* bn = b.op("BatchNormalization", {c, s, s, s, s});
  Value* r = b.op("Relu", {bn});
  Value* mp = b.op("MaxPool", {r}, {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
                                    ints("pads", {1, 1, 1, 1})});
  Value* same = b.op("Conv", {mp, b.floats(std::vector<float>(8 * 16 * 3 * 3), {8, 16, 3, 3})},
                     {str("auto_pad", "SAME_UPPER"), ints("strides", {2, 2})});
  Value* gap = b.op("GlobalAveragePool", {same});
  Value* flat = b.op("Flatten", {gap});
  Value* fc = b.op("Gemm", {flat, b.floats(std::vector<float>(10 * 8), {10, 8})},
                   {i("transB", 1)});
  b.infer();
  CHECK(typeOf(c) == "float[batch,16,112,112]");
  CHECK(typeOf(bn) == "float[batch,16,112,112]");
  CHECK(shapeOf(mp) == "[batch,16,56,56]");
  CHECK(shapeOf(same) == "[batch,8,28,28]");
  CHECK(shapeOf(gap) == "[batch,8,1,1]");
  CHECK(shapeOf(flat) == "[batch,8]");
  CHECK(typeOf(fc) == "float[batch,10]");
}

TEST_CASE("shape inference: symbolic spatial dims survive convolutions and pools") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "1x4xhxw");
  Value* w = b.floats(std::vector<float>(4 * 4 * 3 * 3), {4, 4, 3, 3});
  Value* same = b.op("Conv", {x, w}, {ints("pads", {1, 1, 1, 1})});
  Value* valid = b.op("Conv", {x, w});
  Value* strided = b.op("Conv", {x, w}, {ints("strides", {2, 2})});
  Value* padded = b.op("Conv", {x, w}, {ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})});
  Value* same_upper = b.op("Conv", {x, w}, {ints("strides", {2, 2}), str("auto_pad", "SAME_UPPER")});
  Value* twice = b.op("Conv", {padded, w}, {ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})});
  // ceil_mode: no window can start in the right padding when stride + pad_end <= kernel, so the
  // ceiling is exact; otherwise the count depends on h and stays unknown.
  Value* ceil = b.op("MaxPool", {x}, {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
                                      i("ceil_mode", 1)});
  Value* ceil_padded = b.op("MaxPool", {x}, {ints("kernel_shape", {1, 1}), ints("strides", {2, 2}),
                                             i("ceil_mode", 1), ints("pads", {1, 1, 1, 1})});
  Value* ceil_unit = b.op("MaxPool", {x}, {ints("kernel_shape", {1, 1}), i("ceil_mode", 1),
                                           ints("pads", {0, 0, 1, 1})});
  b.infer();
  CHECK(shapeOf(same) == "[1,4,h,w]");
  CHECK(shapeOf(valid) == "[1,4,h-2,w-2]");
  CHECK(shapeOf(strided) == "[1,4,floor((h+1)/2)-1,floor((w+1)/2)-1]");
  CHECK(shapeOf(padded) == "[1,4,floor((h+1)/2),floor((w+1)/2)]");
  CHECK(shapeOf(same_upper) == shapeOf(padded));
  CHECK(shapeOf(twice) == "[1,4,floor((floor((h+1)/2)+1)/2),floor((floor((w+1)/2)+1)/2)]");
  CHECK(shapeOf(ceil) == "[1,4,floor(h/2),floor(w/2)]");
  CHECK(shapeOf(ceil_padded) == "[1,4,?,?]");
  // Stride 1 with the end pad as wide as the window: the last window always lies in the padding.
  CHECK(shapeOf(ceil_unit) == "[1,4,h,w]");
  // The symbolic forms agree with the static rule wherever h is known.
  for (int64_t h = 3; h <= 40; ++h) {
    ModelBuilder s(13);
    const std::string dims = "1x4x" + std::to_string(h) + "x" + std::to_string(h + 1);
    Value* xs = s.input("x", DType::Float, dims.c_str());
    Value* ws = s.floats(std::vector<float>(4 * 4 * 3 * 3), {4, 4, 3, 3});
    Value* st = s.op("Conv", {xs, ws}, {ints("strides", {2, 2})});
    Value* pd = s.op("Conv", {xs, ws}, {ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})});
    Value* ce = s.op("MaxPool", {xs}, {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
                                       i("ceil_mode", 1)});
    s.infer();
    INFO("h = " << h);
    CHECK(st->shape()[2].value() == (h + 1) / 2 - 1);
    CHECK(pd->shape()[2].value() == (h + 1) / 2);
    CHECK(ce->shape()[2].value() == h / 2);
    CHECK(pd->shape()[3].value() == (h + 2) / 2);
  }
}

// A graph output's declared dim names are its interface. Inference spells what it can of them
// as expressions of the input's dims (PP-OCR det's output H became "32*floor(...)" in `fusectl
// convert`'s output), and passes rely on that; the file written keeps the declared names for the
// dims still symbolic. A dim known exactly, or declared without a name, is written as inferred.
TEST_CASE("shape inference: graph outputs are written with their declared dim names") {
  const char* text = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[N,4,H,W] x) => (float[B,4,OH,?] y, float[N,4,H,W] z) {
  w = Constant <value = float[4,4,1,1] {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1}> ()
  t = Conv <strides = [2, 2]> (x, w)
  y = Relu (t)
  z = Identity (x)
}
)";
  auto model = parseModelText(text, "outputs.onnxtxt");
  const auto& outs = model->graph->outputs();
  REQUIRE(outs.size() == 2);
  CHECK(outs[0]->shape().str() == "[N,4,floor((H+1)/2),floor((W+1)/2)]");
  auto written = [](const Model& m) {
    onnx::ModelProto proto;
    REQUIRE(proto.ParseFromString(modelToBinary(m)));
    std::vector<std::string> dims;
    for (const auto& d : proto.graph().output(0).type().tensor_type().shape().dim())
      dims.push_back(d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param());
    return dims;
  };
  CHECK(written(*model) == std::vector<std::string>{"B", "4", "OH", "floor((W+1)/2)"});
  CHECK(written(*parseModelText(modelToText(*model), "again.onnxtxt")) ==
        std::vector<std::string>{"B", "4", "OH", "floor((W+1)/2)"});
  CHECK(written(*model->clone()) == std::vector<std::string>{"B", "4", "OH", "floor((W+1)/2)"});
  setInputShapesAndInfer(*model, {{"x", *Shape::parse("2x4x9x8")}});
  CHECK(written(*model) == std::vector<std::string>{"2", "4", "5", "4"});
}

// A Loop body input declared with dims the Loop's initial value contradicts is a false
// declaration, and passes act on body types: the golden mutation sweep made X [2,1] under a body
// declaring x [2,8], and fuse-layer-norm fused a norm whose gamma broadcast [2,1] to [2,8]. Such
// a declaration is relaxed to what both agree on; one the initial value only leaves less known
// about stands.
TEST_CASE("shape inference: a Loop body input's declaration gives way where the Loop contradicts it") {
  auto loopModel = [](const char* initial) {
    return fmt::format(R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64 M, bool C0, float[{}] X) => (float[2,?] Y) {{
  Y = Loop (M, C0, X) <body = loop_body (int64 i, bool c, float[2,8] x) => (bool c_out, float[2,8] y) {{
    c_out = Identity (c)
    y = Relu (x)
  }}>
}}
)", initial);
  };
  auto bodyInput = [](const Model& m) {
    const Graph* body = m.graph->firstNode()->attr("body")->g.get();
    return body->inputs()[2]->shape().str();
  };
  auto contradicted = parseModelText(loopModel("2,1"), "loop.onnxtxt");
  CHECK(bodyInput(*contradicted) == "[2,?]");
  // Declared again, inferred again: the warning names both shapes.
  contradicted->graph->firstNode()->attr("body")->g->inputs()[2]->type.shape =
      *Shape::parse("2x8");
  const ShapeInferenceStats stats = inferShapes(*contradicted);
  CHECK(bodyInput(*contradicted) == "[2,?]");
  bool warned = false;
  for (const std::string& w : stats.warnings)
    warned = warned || w.find("body input 'x' is declared [2,8] but is given [2,1]") != std::string::npos;
  CHECK(warned);
  CHECK(bodyInput(*parseModelText(loopModel("2,8"), "loop.onnxtxt")) == "[2,8]");
  CHECK(bodyInput(*parseModelText(loopModel("2,N"), "loop.onnxtxt")) == "[2,8]");
}

TEST_CASE("shape inference: MaxPool ceil_mode, dilations and Indices") {
  ModelBuilder b(12);
  Value* x = b.input("x", DType::Float, "1x1x4x4");
  Node* ceil = b.node("MaxPool", {x}, {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
                                       i("ceil_mode", 1)}, 2);
  // The last window would start inside the padding: dropped (2 -> 1 would be wrong the other way).
  Value* x2 = b.input("x2", DType::Float, "1x1x2x2");
  Value* reduce = b.op("MaxPool", {x2}, {ints("kernel_shape", {1, 1}), ints("strides", {2, 2}),
                                         i("ceil_mode", 1), ints("pads", {1, 1, 1, 1})});
  Value* dil = b.op("MaxPool", {x}, {ints("kernel_shape", {2, 2}), ints("dilations", {2, 2})});
  Value* avg = b.op("AveragePool", {x}, {ints("kernel_shape", {2, 2}), str("auto_pad", "VALID")});
  b.infer();
  CHECK(shapeOf(ceil->output(0)) == "[1,1,2,2]");
  CHECK(typeOf(ceil->output(1)) == "int64[1,1,2,2]");
  CHECK(shapeOf(reduce) == "[1,1,2,2]");
  CHECK(shapeOf(dil) == "[1,1,2,2]");
  CHECK(shapeOf(avg) == "[1,1,3,3]");
}

TEST_CASE("shape inference: ConvTranspose with output_padding, output_shape and SAME") {
  ModelBuilder b(11);
  Value* x = b.input("x", DType::Float, "batchx1x3x3");
  Value* w = b.floats(std::vector<float>(1 * 2 * 3 * 3), {1, 2, 3, 3});
  Value* plain = b.op("ConvTranspose", {x, w});
  Value* padded = b.op("ConvTranspose", {x, w}, {ints("strides", {3, 2}),
                                                 ints("output_padding", {1, 1})});
  Value* shaped = b.op("ConvTranspose", {x, w}, {ints("strides", {3, 2}),
                                                 ints("output_shape", {10, 8})});
  Value* same = b.op("ConvTranspose", {x, w}, {ints("strides", {2, 2}),
                                               str("auto_pad", "SAME_UPPER")});
  Value* grouped = b.op("ConvTranspose", {b.input("x2", DType::Float, "1x2xhxw"),
                                          b.floats(std::vector<float>(2 * 2 * 3 * 3), {2, 2, 3, 3})},
                        {i("group", 2), ints("strides", {2, 2})});
  b.infer();
  CHECK(shapeOf(plain) == "[batch,2,5,5]");
  CHECK(shapeOf(padded) == "[batch,2,10,8]");
  CHECK(shapeOf(shaped) == "[batch,2,10,8]");
  CHECK(shapeOf(same) == "[batch,2,6,6]");
  CHECK(shapeOf(grouped) == "[1,4,2*h+1,2*w+1]");
}

TEST_CASE("shape inference: BatchNormalization outputs by opset") {
  for (int64_t opset : {9, 15}) {
    ModelBuilder b(opset);
    Value* x = b.input("x", DType::Float, "2x3x4x4");
    Value* s = b.floats({1, 1, 1}, {3});
    size_t outs = opset < 14 ? 5 : 3;
    Node* bn = b.node("BatchNormalization", {x, s, s, s, s}, {}, outs);
    b.infer();
    CHECK(shapeOf(bn->output(0)) == "[2,3,4,4]");
    for (size_t k = 1; k < outs; ++k) CHECK(typeOf(bn->output(k)) == "float[3]");
  }
}

TEST_CASE("shape inference: MatMul broadcasting, 1-D operands and mismatches") {
  ModelBuilder b(13);
  Value* h = b.input("h", DType::Float, "batch,seq,64");
  Value* w = b.floats(std::vector<float>(64 * 32), {64, 32});
  Value* proj = b.op("MatMul", {h, w});
  Value* batched = b.op("MatMul", {b.input("a", DType::Float, "2x1x3x4"),
                                   b.input("bb", DType::Float, "5x4x6")});
  Value* vec_l = b.op("MatMul", {b.input("v", DType::Float, "4"), b.input("m", DType::Float, "3x4x6")});
  Value* vec_r = b.op("MatMul", {b.input("m2", DType::Float, "3x6x4"), b.input("v2", DType::Float, "4")});
  Value* dot = b.op("MatMul", {b.input("v3", DType::Float, "4"), b.input("v4", DType::Float, "4")});
  Value* bad = b.op("MatMul", {b.input("p", DType::Float, "2x3"), b.input("q", DType::Float, "4x5")});
  Value* qi = b.op("MatMulInteger", {b.input("ia", DType::UInt8, "2x3"), b.input("ib", DType::UInt8, "3x5")});
  auto stats = b.infer();
  CHECK(shapeOf(proj) == "[batch,seq,32]");
  CHECK(shapeOf(batched) == "[2,5,3,6]");
  CHECK(shapeOf(vec_l) == "[3,6]");
  CHECK(shapeOf(vec_r) == "[3,6]");
  CHECK(shapeOf(dot) == "[]");
  CHECK(shapeOf(bad) == "[2,5]");
  CHECK(typeOf(qi) == "int32[2,5]");
  REQUIRE(stats.warnings.size() == 1);
  CHECK(stats.warnings[0].find("inner dims differ") != std::string::npos);
}

TEST_CASE("shape inference: Reshape keeps symbolic dims (0 copies, -1 infers)") {
  ModelBuilder b(14);
  Value* h = b.input("h", DType::Float, "batch,seq,64");
  Value* heads = b.op("Reshape", {h, b.ints({0, 0, 4, 16})});
  Value* rows = b.op("Reshape", {h, b.ints({-1, 64})});
  Value* back = b.op("Reshape", {rows, b.ints({0, -1})});
  Value* merged = b.op("Reshape", {heads, b.ints({0, -1, 64})});
  Value* flat = b.op("Reshape", {h, b.ints({-1})});
  Value* zero = b.op("Reshape", {b.input("e", DType::Float, "0x4"), b.ints({0, 4})},
                     {i("allowzero", 1)});
  Value* unknown = b.op("Reshape", {h, b.input("target", DType::Int64, "3")});
  b.infer();
  CHECK(shapeOf(heads) == "[batch,seq,4,16]");
  CHECK(shapeOf(rows) == "[batch*seq,64]");
  CHECK(shapeOf(back) == "[batch*seq,64]");
  CHECK(shapeOf(merged) == "[batch,seq,64]");
  CHECK(shapeOf(flat) == "[64*batch*seq]");
  CHECK(shapeOf(zero) == "[0,4]");
  CHECK(shapeOf(unknown) == "[?,?,?]");
}

TEST_CASE("shape inference: Shape->Gather->Concat chains feed Reshape symbolically") {
  ModelBuilder b(13);
  Value* h = b.input("h", DType::Float, "batch,seq,64");
  Value* shape = b.op("Shape", {h});
  Value* batch = b.op("Unsqueeze", {b.op("Gather", {shape, b.scalarInt(0)}, {i("axis", 0)}),
                                    b.ints({0})});
  Value* seq = b.op("Unsqueeze", {b.op("Gather", {shape, b.scalarInt(1)}), b.ints({0})});
  Value* target = b.op("Concat", {batch, seq, b.ints({4, 16})}, {i("axis", 0)});
  Value* split_heads = b.op("Reshape", {h, target});
  Value* t = b.op("Transpose", {split_heads}, {ints("perm", {0, 2, 1, 3})});
  Value* scores = b.op("MatMul", {t, b.op("Transpose", {t}, {ints("perm", {0, 1, 3, 2})})});
  // seq*batch computed with Mul on scalars, then used as a dim.
  Value* bs = b.op("Mul", {b.op("Gather", {shape, b.scalarInt(0)}), b.op("Gather", {shape, b.scalarInt(1)})});
  Value* rows = b.op("Reshape", {h, b.op("Concat", {b.op("Unsqueeze", {bs, b.ints({0})}), b.ints({64})},
                                         {i("axis", 0)})});
  Value* tail = b.op("Slice", {shape, b.ints({1}), b.ints({3})});
  Value* with_tail = b.op("Reshape", {b.op("Reshape", {h, b.ints({-1, 64})}),
                                      b.op("Concat", {b.ints({-1}), tail}, {i("axis", 0)})});
  Value* ones = b.op("ConstantOfShape", {shape});
  b.infer();
  CHECK(typeOf(shape) == "int64[3]");
  CHECK(shapeOf(target) == "[4]");
  CHECK(shapeOf(split_heads) == "[batch,seq,4,16]");
  CHECK(shapeOf(t) == "[batch,4,seq,16]");
  CHECK(shapeOf(scores) == "[batch,4,seq,seq]");
  CHECK(shapeOf(rows) == "[batch*seq,64]");
  CHECK(shapeOf(with_tail) == "[batch,seq,64]");
  CHECK(typeOf(ones) == "float[batch,seq,64]");
}

TEST_CASE("shape inference: PyTorch's Expand export (Where(Equal(shape,-1),1,shape)) stays symbolic") {
  ModelBuilder b(13);
  Value* h = b.input("h", DType::Float, "batch,seq,64");
  Value* bias = b.input("bias", DType::Float, "1,1,64");
  Value* shape = b.op("Shape", {h});
  Value* neg = b.op("Mul", {b.op("ConstantOfShape", {b.ints({3})}, {Attribute::ofTensor("value",
                                     Tensor::fromValues<int64_t>(DType::Int64, {1}, {1}))}),
                            b.scalarInt(-1)});
  Value* eq = b.op("Equal", {shape, neg});
  Value* target = b.op("Where", {eq, b.ints({1, 1, 1}), shape});
  Value* expanded = b.op("Expand", {bias, target});
  Value* range = b.op("Range", {b.scalarInt(0), b.op("Gather", {shape, b.scalarInt(1)}), b.scalarInt(1)});
  Value* static_range = b.op("Range", {b.scalarInt(2), b.scalarInt(11), b.scalarInt(3)});
  b.infer();
  CHECK(typeOf(eq) == "bool[3]");
  CHECK(shapeOf(expanded) == "[batch,seq,64]");
  CHECK(typeOf(range) == "int64[seq]");
  CHECK(typeOf(static_range) == "int64[3]");
}

TEST_CASE("shape inference: Transpose, Flatten, Tile, Pad, Expand") {
  ModelBuilder b(11);
  Value* x = b.input("x", DType::Float, "batch,seq,64");
  Value* t = b.op("Transpose", {x});
  Value* f = b.op("Flatten", {x}, {i("axis", 1)});
  Value* f0 = b.op("Flatten", {x}, {i("axis", 0)});
  Value* fneg = b.op("Flatten", {x}, {i("axis", -1)});
  Value* tile = b.op("Tile", {x, b.ints({2, 1, 3})});
  Value* pad = b.op("Pad", {x, b.ints({0, 1, 2, 0, 3, 4})});
  Value* e = b.op("Expand", {b.input("y", DType::Float, "3,1"), b.ints({2, 1, 6})});
  b.infer();
  CHECK(shapeOf(t) == "[64,seq,batch]");
  CHECK(shapeOf(f) == "[batch,64*seq]");
  CHECK(shapeOf(f0) == "[1,64*batch*seq]");
  CHECK(shapeOf(fneg) == "[batch*seq,64]");
  CHECK(shapeOf(tile) == "[2*batch,seq,192]");
  CHECK(shapeOf(pad) == "[batch,seq+4,70]");
  CHECK(shapeOf(e) == "[2,3,6]");
}

TEST_CASE("shape inference: Pad by opset (attribute, input, axes input)") {
  ModelBuilder b2(2);
  Value* p2 = b2.op("Pad", {b2.input("x", DType::Float, "2x3")}, {ints("pads", {1, 0, 1, 2})});
  b2.infer();
  CHECK(shapeOf(p2) == "[4,5]");
  ModelBuilder b18(18);
  Value* x = b18.input("x", DType::Float, "2x3x4");
  Value* p18 = b18.op("Pad", {x, b18.ints({1, 2}), nullptr, b18.ints({-1})});
  b18.infer();
  CHECK(shapeOf(p18) == "[2,3,7]");
}

TEST_CASE("shape inference: ReduceMean axes attribute at 13, input at 18") {
  ModelBuilder b13(13);
  Value* x = b13.input("x", DType::Float, "batch,seq,64");
  Value* m13 = b13.op("ReduceMean", {x}, {ints("axes", {-1})});
  Value* all13 = b13.op("ReduceMean", {x}, {i("keepdims", 0)});
  Value* s13 = b13.op("ReduceSum", {x, b13.ints({1})}, {i("keepdims", 0)});  // input since 13
  b13.infer();
  CHECK(shapeOf(m13) == "[batch,seq,1]");
  CHECK(shapeOf(all13) == "[]");
  CHECK(shapeOf(s13) == "[batch,64]");

  ModelBuilder b18(18);
  Value* y = b18.input("x", DType::Float, "batch,seq,64");
  Value* m18 = b18.op("ReduceMean", {y, b18.ints({-1})});
  Value* noop = b18.op("ReduceMax", {y}, {i("noop_with_empty_axes", 1)});
  Value* all18 = b18.op("ReduceL2", {y});
  Value* dyn = b18.op("ReduceMean", {y, b18.input("axes", DType::Int64, "1")});
  Value* dyn0 = b18.op("ReduceMean", {y, b18.input("axes2", DType::Int64, "1")}, {i("keepdims", 0)});
  Value* am = b18.op("ArgMax", {y}, {i("axis", 1), i("keepdims", 0)});
  Node* topk = b18.node("TopK", {y, b18.ints({5})}, {}, 2);
  b18.infer();
  CHECK(shapeOf(m18) == "[batch,seq,1]");
  CHECK(shapeOf(noop) == "[batch,seq,64]");
  CHECK(shapeOf(all18) == "[1,1,1]");
  CHECK(shapeOf(dyn) == "[?,?,?]");
  CHECK(shapeOf(dyn0) == "[?,?]");
  CHECK(typeOf(am) == "int64[batch,64]");
  CHECK(typeOf(topk->output(0)) == "float[batch,seq,5]");
  CHECK(typeOf(topk->output(1)) == "int64[batch,seq,5]");
}

TEST_CASE("shape inference: Split by attribute (11), input (13) and num_outputs (18)") {
  ModelBuilder b11(11);
  Node* s11 = b11.node("Split", {b11.input("x", DType::Float, "6x4")}, {ints("split", {2, 4})}, 2);
  Node* eq11 = b11.node("Split", {b11.input("y", DType::Float, "batchx6")}, {i("axis", 1)}, 3);
  b11.infer();
  CHECK(shapeOf(s11->output(0)) == "[2,4]");
  CHECK(shapeOf(s11->output(1)) == "[4,4]");
  CHECK(shapeOf(eq11->output(2)) == "[batch,2]");

  ModelBuilder b13(13);
  Node* s13 = b13.node("Split", {b13.input("x", DType::Float, "6x4"), b13.ints({1, 5})}, {}, 2);
  Node* sym = b13.node("Split", {b13.input("y", DType::Float, "2*seqx4")}, {}, 2);
  b13.infer();
  CHECK(shapeOf(s13->output(0)) == "[1,4]");
  CHECK(shapeOf(s13->output(1)) == "[5,4]");
  CHECK(shapeOf(sym->output(0)) == "[seq,4]");

  ModelBuilder b18(18);
  Node* s18 = b18.node("Split", {b18.input("x", DType::Float, "7x4")}, {i("num_outputs", 3)}, 3);
  b18.infer();
  CHECK(shapeOf(s18->output(0)) == "[3,4]");
  CHECK(shapeOf(s18->output(2)) == "[1,4]");
}

TEST_CASE("shape inference: Squeeze and Unsqueeze axes attribute at 11, input at 13") {
  ModelBuilder b11(11);
  Value* x = b11.input("x", DType::Float, "1,seq,1,64");
  Value* sq = b11.op("Squeeze", {x}, {ints("axes", {0, -2})});
  Value* all = b11.op("Squeeze", {b11.input("y", DType::Float, "1x3x1")});
  Value* unk = b11.op("Squeeze", {x});  // seq might be 1
  Value* us = b11.op("Unsqueeze", {sq}, {ints("axes", {0, 3})});
  b11.infer();
  CHECK(shapeOf(sq) == "[seq,64]");
  CHECK(shapeOf(all) == "[3]");
  CHECK(shapeOf(unk) == "?");
  CHECK(shapeOf(us) == "[1,seq,64,1]");

  ModelBuilder b13(13);
  Value* y = b13.input("x", DType::Float, "1,seq,1,64");
  Value* sq13 = b13.op("Squeeze", {y, b13.ints({0, 2})});
  Value* us13 = b13.op("Unsqueeze", {sq13, b13.ints({-1})});
  b13.infer();
  CHECK(shapeOf(sq13) == "[seq,64]");
  CHECK(shapeOf(us13) == "[seq,64,1]");
}

TEST_CASE("shape inference: Concat sums symbolic dims, Slice clamps") {
  ModelBuilder b(13);
  Value* past = b.input("past", DType::Float, "batch,past,64");
  Value* cur = b.input("cur", DType::Float, "batch,seq,64");
  Value* kv = b.op("Concat", {past, cur}, {i("axis", 1)});
  Value* x = b.input("x", DType::Float, "10x20x30");
  Value* s = b.op("Slice", {x, b.ints({1, -5}), b.ints({1000, -1}), b.ints({0, 2})});
  Value* stepped = b.op("Slice", {x, b.ints({-1}), b.ints({-1000}), b.ints({1}), b.ints({-3})});
  Value* full = b.op("Slice", {kv, b.ints({0}), b.ints({INT64_MAX}), b.ints({1})});
  Value* shift = b.op("Slice", {cur, b.ints({0}), b.ints({-1}), b.ints({1})});
  Value* bounded = b.op("Slice", {cur, b.ints({0}), b.ints({4}), b.ints({1})});
  b.infer();
  CHECK(shapeOf(kv) == "[batch,past+seq,64]");
  CHECK(shapeOf(s) == "[9,20,4]");
  CHECK(shapeOf(stepped) == "[10,7,30]");
  CHECK(shapeOf(full) == "[batch,past+seq,64]");
  CHECK(shapeOf(shift) == "[batch,seq-1,64]");
  CHECK(shapeOf(bounded) == "[batch,?,64]");
}

TEST_CASE("shape inference: Slice by attributes before opset 10") {
  ModelBuilder b(9);
  Value* s = b.op("Slice", {b.input("x", DType::Float, "10x20")},
                  {ints("starts", {2}), ints("ends", {-2}), ints("axes", {1})});
  b.infer();
  CHECK(shapeOf(s) == "[10,16]");
}

TEST_CASE("shape inference: elementwise dtypes and broadcasting") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "batch,seq,64");
  Value* m = b.input("mask", DType::Float, "batch,1,1,seq");
  Value* add = b.op("Add", {x, b.floats(std::vector<float>(64), {64})});
  Value* cmp = b.op("Less", {x, b.floats({0}, {1})});
  Value* nt = b.op("Not", {cmp});
  Value* where = b.op("Where", {cmp, x, b.floats({0}, {})});
  Value* mx = b.op("Max", {x, b.floats(std::vector<float>(64), {64}), b.input("z", DType::Float, "1,seq,1")});
  Value* cast = b.op("Cast", {x}, {i("to", static_cast<int64_t>(DType::Float16))});
  Value* like = b.op("CastLike", {x, b.input("h", DType::Float16, "1")});
  Value* masked = b.op("Add", {m, b.input("s", DType::Float, "batch,4,seq,seq")});
  Value* bad = b.op("Mul", {b.input("p", DType::Float, "2"), b.input("q", DType::Float, "3")});
  Node* drop = b.node("Dropout", {x}, {}, 2);
  Value* prelu = b.op("PRelu", {x, b.floats({0.1f}, {1})});
  auto stats = b.infer();
  CHECK(typeOf(add) == "float[batch,seq,64]");
  CHECK(typeOf(cmp) == "bool[batch,seq,64]");
  CHECK(typeOf(nt) == "bool[batch,seq,64]");
  CHECK(typeOf(where) == "float[batch,seq,64]");
  CHECK(typeOf(mx) == "float[batch,seq,64]");
  CHECK(typeOf(cast) == "float16[batch,seq,64]");
  CHECK(typeOf(like) == "float16[batch,seq,64]");
  CHECK(shapeOf(masked) == "[batch,4,seq,seq]");
  CHECK(shapeOf(bad) == "[?]");
  CHECK(typeOf(drop->output(1)) == "bool[batch,seq,64]");
  CHECK(typeOf(prelu) == "float[batch,seq,64]");
  REQUIRE(stats.warnings.size() == 1);
  CHECK(stats.warnings[0].find("cannot broadcast") != std::string::npos);
}

TEST_CASE("shape inference: legacy broadcasting (opset < 7) keeps A's shape") {
  ModelBuilder b(6);
  Value* a = b.op("Add", {b.input("a", DType::Float, "2x3x4"), b.input("b", DType::Float, "3")},
                  {i("broadcast", 1), i("axis", 1)});
  Node* drop = b.node("Dropout", {a}, {}, 2);
  b.infer();
  CHECK(shapeOf(a) == "[2,3,4]");
  CHECK(typeOf(drop->output(1)) == "float[2,3,4]");
}

TEST_CASE("shape inference: quantization dtypes by opset") {
  ModelBuilder b(21);
  Value* x = b.input("x", DType::Float, "2x3");
  Value* scale = b.floats({0.1f}, {});
  Value* zp8 = b.g.addInitializer("zp", Tensor::fromValues<int8_t>(DType::Int8, {}, {0}));
  Value* q = b.op("QuantizeLinear", {x, scale, zp8});
  Value* q_default = b.op("QuantizeLinear", {x, scale});
  Value* q_attr = b.op("QuantizeLinear", {x, scale}, {i("output_dtype", static_cast<int64_t>(DType::Int16))});
  Value* scale16 = b.input("s16", DType::Float16, "");
  Value* dq = b.op("DequantizeLinear", {q, scale16, zp8});
  Value* qmm = b.op("QLinearMatMul", {q, scale, zp8, b.input("w", DType::Int8, "3x5"), scale, zp8,
                                      scale, b.input("yzp", DType::UInt8, "")});
  b.infer();
  CHECK(typeOf(q) == "int8[2,3]");
  CHECK(typeOf(q_default) == "uint8[2,3]");
  CHECK(typeOf(q_attr) == "int16[2,3]");
  CHECK(typeOf(dq) == "float16[2,3]");
  CHECK(typeOf(qmm) == "uint8[2,5]");

  ModelBuilder old(13);
  Value* dq13 = old.op("DequantizeLinear", {old.input("q", DType::Int8, "4"), old.input("s", DType::Float16, "")});
  old.infer();
  CHECK(typeOf(dq13) == "float[4]");
}

TEST_CASE("shape inference: LayerNormalization statistics and RMSNormalization") {
  ModelBuilder b(17);
  Value* x = b.input("x", DType::Float16, "batch,seq,64");
  Value* s = b.input("scale", DType::Float16, "64");
  Node* ln = b.node("LayerNormalization", {x, s, s}, {i("axis", -1)}, 3);
  Value* rms = b.op("RMSNormalization", {x, s});
  Value* sm = b.op("Softmax", {x}, {i("axis", -1)});
  b.infer();
  CHECK(typeOf(ln->output(0)) == "float16[batch,seq,64]");
  CHECK(typeOf(ln->output(1)) == "float[batch,seq,1]");
  CHECK(typeOf(ln->output(2)) == "float[batch,seq,1]");
  CHECK(typeOf(rms) == "float16[batch,seq,64]");
  CHECK(typeOf(sm) == "float16[batch,seq,64]");
}

TEST_CASE("shape inference: Constant, ConstantOfShape, Shape start/end, Size, NonZero") {
  ModelBuilder b(15);
  Value* c = b.op("Constant", {}, {Attribute::ofInts("value_ints", {2, 3})});
  Value* cf = b.op("Constant", {}, {Attribute::ofFloat("value_float", 1.f)});
  Value* ct = b.op("Constant", {}, {Attribute::ofTensor("value",
                                      Tensor::fromValues<int32_t>(DType::Int32, {2, 2}, {1, 2, 3, 4}))});
  Value* filled = b.op("ConstantOfShape", {c}, {Attribute::ofTensor("value",
                                       Tensor::fromValues<int64_t>(DType::Int64, {1}, {7}))});
  Value* x = b.input("x", DType::Float, "batch,seq,64");
  Value* tail = b.op("Shape", {x}, {i("start", -2)});
  Value* size = b.op("Size", {x});
  Value* nz = b.op("NonZero", {x});
  Value* reshaped = b.op("Reshape", {b.input("y", DType::Float, "6"), c});
  b.infer();
  CHECK(typeOf(c) == "int64[2]");
  CHECK(typeOf(cf) == "float[]");
  CHECK(typeOf(ct) == "int32[2,2]");
  CHECK(typeOf(filled) == "int64[2,3]");
  CHECK(typeOf(tail) == "int64[2]");
  CHECK(typeOf(size) == "int64[]");
  CHECK(typeOf(nz) == "int64[3,?]");
  CHECK(shapeOf(reshaped) == "[2,3]");
}

TEST_CASE("shape inference: Resize and Upsample by opset") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "1x3xhx8");
  Value* scaled = b.op("Resize", {x, nullptr, b.floats({1, 1, 2, 0.5f}, {4})});
  Value* sized = b.op("Resize", {x, nullptr, nullptr, b.ints({1, 3, 10, 12})});
  b.infer();
  CHECK(shapeOf(scaled) == "[1,3,2*h,4]");
  CHECK(shapeOf(sized) == "[1,3,10,12]");

  ModelBuilder b18(18);
  Value* y = b18.input("x", DType::Float, "1x3x4x8");
  Value* axes = b18.op("Resize", {y, nullptr, nullptr, b18.ints({8, 4})},
                       {ints("axes", {2, 3}), str("keep_aspect_ratio_policy", "not_larger")});
  b18.infer();
  CHECK(shapeOf(axes) == "[1,3,2,4]");

  ModelBuilder b10(10);
  Value* r10 = b10.op("Resize", {b10.input("x", DType::Float, "1x1x2x2"), b10.floats({1, 1, 2, 3}, {4})});
  b10.infer();
  CHECK(shapeOf(r10) == "[1,1,4,6]");

  ModelBuilder b7(7);
  Value* up = b7.op("Upsample", {b7.input("x", DType::Float, "1x1x2x2")},
                    {Attribute::ofFloats("scales", {1, 1, 2, 2})});
  b7.infer();
  CHECK(shapeOf(up) == "[1,1,4,4]");
}

TEST_CASE("shape inference: DepthToSpace, SpaceToDepth, Gather, Einsum, OneHot") {
  ModelBuilder b(13);
  Value* d2s = b.op("DepthToSpace", {b.input("x", DType::Float, "1x8x2x3")}, {i("blocksize", 2)});
  Value* s2d = b.op("SpaceToDepth", {b.input("y", DType::Float, "1x2x4x6")}, {i("blocksize", 2)});
  Value* emb = b.op("Gather", {b.floats(std::vector<float>(100 * 16), {100, 16}),
                               b.input("ids", DType::Int64, "batch,seq")});
  Value* ein = b.op("Einsum", {b.input("q", DType::Float, "batch,4,seq,16"),
                               b.input("k", DType::Float, "batch,4,seq,16")},
                    {str("equation", "bhid,bhjd->bhij")});
  Value* ein2 = b.op("Einsum", {b.input("m", DType::Float, "3x4"), b.input("n", DType::Float, "4x5")},
                     {str("equation", "ij,jk")});
  Value* oh = b.op("OneHot", {b.input("idx", DType::Int64, "batch"), b.scalarInt(10),
                              b.floats({0, 1}, {2})});
  b.infer();
  CHECK(shapeOf(d2s) == "[1,2,4,6]");
  CHECK(shapeOf(s2d) == "[1,8,2,3]");
  CHECK(shapeOf(emb) == "[batch,seq,16]");
  CHECK(shapeOf(ein) == "[batch,4,seq,seq]");
  CHECK(shapeOf(ein2) == "[3,5]");
  CHECK(typeOf(oh) == "float[batch,10]");
}

TEST_CASE("shape inference: If and Loop type their subgraphs and outputs") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "batch,8");
  Value* cond = b.input("cond", DType::Bool, "");
  auto then_g = std::make_unique<Graph>("then");
  Value* tx = then_g->addOuterRef("x", x);
  then_g->addOutput(then_g->createNode({"Relu", "", {tx}, {"then_out"}, "", {}})->output(0));
  auto else_g = std::make_unique<Graph>("else");
  Value* ex = else_g->addOuterRef("x", x);
  else_g->addOutput(else_g->createNode({"Neg", "", {ex}, {"else_out"}, "", {}})->output(0));
  Graph* then_ptr = then_g.get();
  std::vector<Attribute> attrs;
  attrs.push_back(Attribute::ofGraph("then_branch", std::move(then_g)));
  attrs.push_back(Attribute::ofGraph("else_branch", std::move(else_g)));
  Value* out = b.op("If", {cond}, std::move(attrs));

  // Loop carrying a [batch,8] state and stacking a scan output per iteration.
  auto body = std::make_unique<Graph>("body");
  body->addInput("iter", ValueType{});
  Value* bc = body->addInput("cond_in", ValueType{});
  Value* state = body->addInput("state", ValueType{});
  Value* next = body->createNode({"Add", "", {state, state}, {"next"}, "", {}})->output(0);
  Value* cond_out = body->createNode({"Identity", "", {bc}, {"cond_out"}, "", {}})->output(0);
  Value* scan = body->createNode({"ReduceSum", "", {next}, {"scan"}, "", {ints("axes", {1})}})->output(0);
  body->addOutput(cond_out);
  body->addOutput(next);
  body->addOutput(scan);
  Graph* body_ptr = body.get();
  std::vector<Attribute> lattrs;
  lattrs.push_back(Attribute::ofGraph("body", std::move(body)));
  Node* loop = b.node("Loop", {b.scalarInt(5), nullptr, x}, std::move(lattrs), 2);
  auto stats = b.infer();
  CHECK(typeOf(then_ptr->outputs()[0]) == "float[batch,8]");
  CHECK(typeOf(out) == "float[batch,8]");
  CHECK(typeOf(body_ptr->findValue("next")) == "float[batch,8]");
  CHECK(typeOf(loop->output(0)) == "float[batch,8]");
  CHECK(typeOf(loop->output(1)) == "float[5,batch,1]");
  CHECK(stats.nodes_unknown == 0);
}

TEST_CASE("shape inference: Scan slices its inputs and stacks its outputs") {
  ModelBuilder b(11);
  Value* init = b.input("init", DType::Float, "4");
  Value* xs = b.input("xs", DType::Float, "seq,4");
  auto body = std::make_unique<Graph>("body");
  Value* acc = body->addInput("acc", ValueType{});
  Value* x = body->addInput("x", ValueType{});
  Value* sum = body->createNode({"Add", "", {acc, x}, {"sum"}, "", {}})->output(0);
  Value* dbl = body->createNode({"Mul", "", {sum, sum}, {"dbl"}, "", {}})->output(0);
  body->addOutput(sum);
  body->addOutput(dbl);
  std::vector<Attribute> attrs;
  attrs.push_back(Attribute::ofGraph("body", std::move(body)));
  attrs.push_back(i("num_scan_inputs", 1));
  attrs.push_back(ints("scan_output_axes", {1}));
  Node* scan = b.node("Scan", {init, xs}, std::move(attrs), 2);
  b.infer();
  CHECK(typeOf(scan->output(0)) == "float[4]");
  CHECK(typeOf(scan->output(1)) == "float[4,seq]");
}

TEST_CASE("shape inference: a Scan state that the body broadcasts is typed for every step") {
  // The initial state is a scalar; the first step broadcasts it against [2,3], so from the
  // second step on the state is [2,3]. Typing the body's state as the scalar would be true of
  // the first step only, and a pass would rewrite the body for a shape it does not run at.
  ModelBuilder b(13);
  Value* init = b.input("init", DType::Float, "");
  Value* xs = b.input("xs", DType::Float, "seq,2,3");
  auto body = std::make_unique<Graph>("body");
  Value* state = body->addInput("state", ValueType{});
  Value* x = body->addInput("x", ValueType{});
  Value* next = body->createNode({"Add", "", {state, x}, {"next"}, "", {}})->output(0);
  Value* t = body->createNode({"Transpose", "", {state}, {"t"}, "", {ints("perm", {})}})->output(0);
  body->addOutput(next);
  body->addOutput(t);
  Graph* body_ptr = body.get();
  std::vector<Attribute> attrs;
  attrs.push_back(Attribute::ofGraph("body", std::move(body)));
  attrs.push_back(i("num_scan_inputs", 1));
  Node* scan = b.node("Scan", {init, xs}, std::move(attrs), 2);
  b.infer();
  CHECK(body_ptr->inputs()[0]->dtype() == DType::Float);
  CHECK(!body_ptr->inputs()[0]->shape().hasRank());
  CHECK(!scan->output(0)->shape().hasRank());  // a scalar when seq is 0, else [2,3]
  // An empty perm reverses the axes, as the kernel reads it: not a rank-0 result.
  CHECK(!t->shape().hasRank());
}

TEST_CASE("shape inference: a Transpose with an empty perm reverses the axes") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "2x3x4");
  Value* t = b.op("Transpose", {x}, {ints("perm", {})});
  b.infer();
  CHECK(shapeOf(t) == "[4,3,2]");
}

TEST_CASE("shape inference: old opset spellings (Cast-1 string type, Concat-1 default axis)") {
  ModelBuilder b(1);
  Value* x = b.input("x", DType::Float, "2x3");
  Value* c = b.op("Cast", {x}, {str("to", "FLOAT16")});
  Value* cat = b.op("Concat", {x, x});
  b.infer();
  CHECK(typeOf(c) == "float16[2,3]");
  CHECK(shapeOf(cat) == "[2,6]");
}

TEST_CASE("shape inference: every op fusectl optimizes or runs has its own rule") {
  for (const char* op :
       {"Conv", "ConvTranspose", "BatchNormalization", "MaxPool", "AveragePool",
        "GlobalAveragePool", "GlobalMaxPool", "Gemm", "MatMul", "MatMulInteger", "QLinearMatMul",
        "QLinearConv", "ConvInteger", "QuantizeLinear", "DequantizeLinear", "Add", "Sub", "Mul",
        "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu",
        "LeakyRelu", "PRelu", "Clip", "HardSigmoid", "HardSwish", "Gelu", "Elu", "Selu",
        "Softplus", "Mish", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Mod",
        "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less", "Greater", "LessOrEqual",
        "GreaterOrEqual", "And", "Or", "Not", "Xor", "Softmax", "LogSoftmax",
        "LayerNormalization", "InstanceNormalization", "RMSNormalization", "ReduceMean",
        "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ArgMax", "ArgMin", "TopK",
        "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice",
        "Gather", "GatherElements", "Expand", "Tile", "Pad", "Shape", "Size", "ConstantOfShape",
        "Constant", "Range", "Identity", "Dropout", "Cast", "CastLike", "Resize", "Upsample",
        "DepthToSpace", "SpaceToDepth", "CumSum", "Trilu", "Einsum", "NonZero", "If", "Loop",
        "Scan"}) {
    INFO(op);
    for (int64_t opset : {1, 13, 21}) CHECK(hasShapeRule("", op, opset));
  }
}

TEST_CASE("shape inference: ops without a rule fall back to libonnx, never fail") {
  ModelBuilder b(13);
  Value* det = b.op("Det", {b.input("x", DType::Float, "batch,3,3")});
  Value* custom = b.node("MyOp", {det}, {}, 1, "com.example")->output(0);
  auto stats = b.infer();
  CHECK(typeOf(det) == "float[batch]");
  CHECK(stats.nodes_fallback == 1);
  CHECK(stats.nodes_unknown == 1);
  CHECK(typeOf(custom) == "undefined?");
  CHECK_FALSE(hasShapeRule("", "Det", 13));
  CHECK(hasShapeRule("", "Conv", 1));
  CHECK(hasShapeRule("ai.onnx", "RMSNormalization", 23));

  ModelBuilder off(13);
  Value* det2 = off.op("Det", {off.input("x", DType::Float, "3,3")});
  ShapeInferenceOptions o;
  o.onnx_fallback = false;
  CHECK(off.infer(o).nodes_unknown == 1);
  CHECK_FALSE(det2->type.shape.hasRank());
}

TEST_CASE("shape inference: overwrite replaces declared types, fill mode only fills gaps") {
  for (bool overwrite : {true, false}) {
    ModelBuilder b(13);
    Value* x = b.input("x", DType::Float, "batch,8");
    Value* r = b.op("Relu", {x});
    Value* s = b.op("Sigmoid", {x});
    r->type = type(DType::Float, "4,8");
    s->type = type(DType::Undefined, "?,8");
    ShapeInferenceOptions o;
    o.overwrite = overwrite;
    b.infer(o);
    CHECK(typeOf(r) == (overwrite ? "float[batch,8]" : "float[4,8]"));
    CHECK(typeOf(s) == "float[batch,8]");
  }
}

TEST_CASE("shape inference: setInputShapesAndInfer validates and re-infers") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "batch,3,8,8");
  Value* w = b.floats(std::vector<float>(4 * 3), {4, 3, 1, 1});
  Value* c = b.op("Conv", {x, w});
  b.g.addOutput(c);
  b.infer();
  CHECK(shapeOf(c) == "[batch,4,8,8]");
  try {
    setInputShapesAndInfer(b.model, {{"images", *Shape::parse("1x3x8x8")}});
    FAIL("no error for an unknown input");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Usage);
    CHECK(std::string(e.what()).find("'images'") != std::string::npos);
    CHECK(std::string(e.what()).find("x") != std::string::npos);
  }
  CHECK_THROWS_AS(setInputShapesAndInfer(b.model, {{"x", *Shape::parse("1x3x8")}}), Error);
  auto stats = setInputShapesAndInfer(b.model, {{"x", *Shape::parse("2x3x16x16")}});
  CHECK(shapeOf(x) == "[2,3,16,16]");
  CHECK(shapeOf(c) == "[2,4,16,16]");
  CHECK(stats.nodes_inferred == 1);
}

TEST_CASE("shape inference: a million-node Conv/BN/Relu/Add chain infers every node") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "batch,8,16,16");
  Value* w = b.floats(std::vector<float>(8 * 8 * 3 * 3), {8, 8, 3, 3});
  Value* s = b.floats(std::vector<float>(8, 1.f), {8});
  Value* cur = x;
  for (int k = 0; k < 250000; ++k) {
    Value* c = b.op("Conv", {cur, w, s}, {ints("pads", {1, 1, 1, 1}), ints("kernel_shape", {3, 3})});
    Value* bn = b.op("BatchNormalization", {c, s, s, s, s});
    cur = b.op("Add", {b.op("Relu", {bn}), cur});
  }
  b.g.addOutput(cur);
  REQUIRE(b.g.numNodes() == 1000000);
  // CPU time, so that a loaded CI machine does not fail the test; one allocation per node
  // (the output shape) is all inference adds.
  std::clock_t start = std::clock();
  auto stats = b.infer();
  double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  WARN("1M-node inference: " << seconds << " s CPU");
  CHECK(stats.nodes_inferred == 1000000);
  CHECK(typeOf(cur) == "float[batch,8,16,16]");
}

namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every node output has a dtype and a rank after inference.
void checkAllTyped(const Graph& g, const std::string& where) {
  for (const Node* n : g.nodes()) {
    for (const Value* v : n->outputs()) {
      if (!v || !v->type.isTensor()) continue;
      INFO(where << ": " << n->label() << " (" << n->opType() << ") output " << v->name() << " is "
                 << v->type.str());
      CHECK(v->dtype() != DType::Undefined);
      CHECK(v->shape().hasRank());
    }
    for (const Attribute& a : n->attributes())
      if (a.g) checkAllTyped(*a.g, where);
  }
}

}  // namespace

TEST_CASE("shape inference: testdata models are fully typed, symbolic dims carried") {
  fs::path dir = fs::path(FUSECTL_SOURCE_DIR) / "testdata" / "models";
  if (!fs::exists(dir)) {
    WARN("skipped: " << dir << " does not exist");
    return;
  }
  std::map<std::string, std::string> final_shapes = {
      {"bert_layer", "[batch,seq,64]"}, {"llama_layer", "[batch,seq,64]"}};
  size_t models = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".onnx") continue;
    ++models;
    std::string name = entry.path().stem().string();
    auto model = loadModel(entry.path().string());
    // Inference from scratch, not from the exporter's value_info.
    for (Node* n : model->graph->nodes())
      for (Value* v : n->outputs())
        if (v) v->type = ValueType{};
    auto stats = inferShapes(*model);
    INFO(name << ": " << stats.warnings.size() << " warnings"
              << (stats.warnings.empty() ? "" : ", first: " + stats.warnings[0]));
    CHECK(stats.warnings.empty());
    CHECK(stats.nodes_unknown == 0);
    CHECK(stats.nodes_fallback == 0);
    checkAllTyped(*model->graph, name);
    auto expected = final_shapes.find(name);
    if (expected != final_shapes.end()) {
      REQUIRE(!model->graph->outputs().empty());
      CHECK(model->graph->outputs()[0]->shape().str() == expected->second);
    }
  }
  CHECK(models > 0);
}

namespace {

// One conformance test's verdict for one way of running it.
enum class Verdict { Exact, Compatible, Wrong };

struct ConformanceCase {
  std::string suite, name;
  fs::path dir;
};

// Expected output dtype and dims from output_<i>.pb.
struct ExpectedOutput {
  DType dtype;
  std::vector<int64_t> dims;
};

// Loads the test's model with the declared output types and value_info removed; with
// `inputs_as_constants`, each graph input that has a data file becomes an initializer with
// that data, so that shapes computed from inputs (Reshape targets, Resize scales...) are known.
std::unique_ptr<Model> loadForInference(const ConformanceCase& c, bool inputs_as_constants) {
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(readFile(c.dir / "model.onnx")));
  onnx::GraphProto* g = proto.mutable_graph();
  g->clear_value_info();
  for (auto& out : *g->mutable_output()) out.clear_type();
  if (inputs_as_constants) {
    std::set<std::string> initializers;
    for (const auto& t : g->initializer()) initializers.insert(t.name());
    std::vector<std::string> data_inputs;  // non-initializer inputs, in order
    for (const auto& in : g->input())
      if (!initializers.count(in.name())) data_inputs.push_back(in.name());
    std::set<std::string> bound;
    for (size_t i = 0;; ++i) {
      fs::path file = c.dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb");
      if (!fs::exists(file)) break;
      onnx::TensorProto t;
      REQUIRE(t.ParseFromString(readFile(file)));
      if (t.name().empty() && i < data_inputs.size()) t.set_name(data_inputs[i]);
      bound.insert(t.name());
      *g->add_initializer() = t;
    }
    auto* inputs = g->mutable_input();
    for (int k = inputs->size() - 1; k >= 0; --k)
      if (bound.count(inputs->Get(k).name())) inputs->DeleteSubrange(k, 1);
  }
  LoadOptions opts;
  opts.infer_shapes = false;
  return parseModelBinary(proto.SerializeAsString(), c.name, c.dir.string(), opts);
}

Verdict judge(const Value* v, const ExpectedOutput& e, std::string* detail) {
  std::string want = std::string(dtypeName(e.dtype)) + Shape::ofStatic(e.dims).str();
  *detail = "inferred " + v->type.str() + ", expected " + want;
  if (v->dtype() != e.dtype) return Verdict::Wrong;
  const Shape& s = v->shape();
  if (!s.hasRank()) return Verdict::Compatible;
  if (s.rank() != e.dims.size()) return Verdict::Wrong;
  bool exact = true;
  for (size_t i = 0; i < s.rank(); ++i) {
    if (s[i].isStatic() && s[i].value() != e.dims[i]) return Verdict::Wrong;
    if (!s[i].isStatic()) exact = false;
  }
  return exact ? Verdict::Exact : Verdict::Compatible;
}

}  // namespace

// The ONNX backend node tests: our inferred dtype and dims of every graph output must equal
// those of the expected output_<i>.pb, once the inputs' data is available (inputs as constants).
// With inputs left as inputs, what is inferred must never contradict the expected outputs.
TEST_CASE("shape inference: ONNX conformance tests' output shapes") {
  fs::path root = fs::path(FUSECTL_SOURCE_DIR) / ".." / "shared" / "onnx-node-tests";
  if (!fs::exists(root / "MANIFEST.tsv")) {
    WARN("skipped: no conformance data at " << root);
    return;
  }
  // test -> why its shape cannot match. None is needed today: every in-scope test matches.
  const std::map<std::string, std::string> exceptions = {};
  std::vector<ConformanceCase> cases;
  {
    std::ifstream manifest(root / "MANIFEST.tsv");
    std::string line;
    std::getline(manifest, line);  // header
    while (std::getline(manifest, line)) {
      std::vector<std::string> cols;
      std::stringstream ss(line);
      for (std::string col; std::getline(ss, col, '\t');) cols.push_back(col);
      if (cols.size() < 11 || cols[10] != "yes") continue;
      cases.push_back({cols[6], cols[0], root / cols[6] / cols[0]});
    }
  }
  REQUIRE(!cases.empty());
  std::map<std::string, std::map<Verdict, size_t>> as_constants, as_inputs;
  std::map<std::string, size_t> totals;
  for (const ConformanceCase& c : cases) {
    std::vector<ExpectedOutput> expected;
    for (size_t i = 0;; ++i) {
      fs::path file = c.dir / "test_data_set_0" / ("output_" + std::to_string(i) + ".pb");
      if (!fs::exists(file)) break;
      onnx::TensorProto t;
      REQUIRE(t.ParseFromString(readFile(file)));
      expected.push_back({static_cast<DType>(t.data_type()), {t.dims().begin(), t.dims().end()}});
    }
    ++totals[c.suite];
    bool excepted = exceptions.count(c.name) > 0;
    for (bool constants : {true, false}) {
      INFO(c.suite << "/" << c.name << (constants ? " (inputs as constants)" : " (inputs)"));
      std::unique_ptr<Model> model;
      REQUIRE_NOTHROW(model = loadForInference(c, constants));
      ShapeInferenceStats stats;
      REQUIRE_NOTHROW(stats = inferShapes(*model));
      // Valid models: any warning is a rule that misreads the op.
      INFO((stats.warnings.empty() ? "" : "warning: " + stats.warnings[0]));
      if (!excepted) CHECK(stats.warnings.empty());
      const auto& outs = model->graph->outputs();
      REQUIRE(outs.size() == expected.size());
      Verdict worst = Verdict::Exact;
      for (size_t i = 0; i < outs.size(); ++i) {
        std::string detail;
        Verdict v = judge(outs[i], expected[i], &detail);
        if (v > worst) worst = v;
        INFO("output " << i << ": " << detail);
        if (!excepted) CHECK(v != Verdict::Wrong);
        if (!excepted && constants) CHECK(v == Verdict::Exact);
      }
      (constants ? as_constants : as_inputs)[c.suite][worst]++;
      if (!constants && worst != Verdict::Exact && std::getenv("FUSECTL_LIST_PARTIAL"))
        WARN("partial: " << c.suite << "/" << c.name);
    }
  }
  for (const auto& [suite, n] : totals) {
    WARN("conformance " << suite << ": " << as_constants[suite][Verdict::Exact] << "/" << n
                        << " exact with inputs as constants; with inputs: "
                        << as_inputs[suite][Verdict::Exact] << " exact, "
                        << as_inputs[suite][Verdict::Compatible] << " partial, "
                        << as_inputs[suite][Verdict::Wrong] << " wrong");
  }
}

// Found by tests/fuzz (fuzz_optimized_outputs): known values divided by -1 (INT64_MIN / -1 and
// INT64_MIN % -1 trap on x86) and an empty value broadcast against a scalar (read element 0 of
// an empty list).
TEST_CASE("shape inference: known values through Div and Mod by -1, and empty ones") {
  ModelBuilder b(13);
  Value* x = b.input("x", DType::Float, "[6]");
  const int64_t min = std::numeric_limits<int64_t>::min();
  Value* minus6 = b.op("Div", {b.ints({6}), b.scalarInt(-1)});
  Value* six = b.op("Mul", {minus6, b.scalarInt(-1)});
  Value* by_min = b.op("Reshape", {x, b.op("Div", {b.ints({min}), b.scalarInt(-1)})});
  Value* zero = b.op("Mod", {b.ints({min}), b.scalarInt(-1)});
  Value* from_mod = b.op("Reshape", {x, b.op("Add", {zero, b.ints({6})})});
  Value* empty = b.op("Div", {b.ints({}), b.scalarInt(2)});
  Value* from_empty = b.op("Reshape", {x, b.op("Concat", {empty, b.ints({6})}, {i("axis", 0)})});
  Value* from_six = b.op("Reshape", {x, six});
  b.infer();
  CHECK(shapeOf(from_six) == "[6]");
  CHECK(shapeOf(by_min) == "[?]");
  CHECK(shapeOf(from_mod) == "[6]");
  CHECK(shapeOf(from_empty) == "[6]");
}

TEST_CASE("sliceRange takes what ONNX's Slice takes, at every start, end and step",
          "[shape_inference][executor]") {
  // The reference walks the indices one by one, in 128 bits so that no step overflows, after
  // the clamps the operator text gives: starts into [0, dim] for positive steps and
  // [0, dim - 1] for negative ones, ends into [0, dim] and [-1, dim - 1].
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> bounds = {lo, lo + 1, -7, -4, -3, -2, -1, 0, 1, 2, 3, 4, 7, hi};
  const std::vector<int64_t> steps = {lo, -5, -2, -1, 1, 2, 3, 5, hi};
  for (int64_t dim = 0; dim <= 5; ++dim) {
    for (int64_t start : bounds) {
      for (int64_t end : bounds) {
        for (int64_t step : steps) {
          __int128 s = start < 0 ? static_cast<__int128>(start) + dim : start;
          __int128 e = end < 0 ? static_cast<__int128>(end) + dim : end;
          int64_t count = 0;
          __int128 first = 0;
          if (step > 0) {
            s = std::min<__int128>(std::max<__int128>(s, 0), dim);
            e = std::min<__int128>(std::max<__int128>(e, 0), dim);
            for (__int128 i = s; i < e; i += step) count += 1;
          } else if (dim > 0) {
            s = std::min<__int128>(std::max<__int128>(s, 0), dim - 1);
            e = std::min<__int128>(std::max<__int128>(e, -1), dim - 1);
            for (__int128 i = s; i > e; i += step) count += 1;
          }
          first = s;
          const fusectl::SliceRange got = fusectl::sliceRange(dim, start, end, step);
          INFO("dim " << dim << ", start " << start << ", end " << end << ", step " << step);
          REQUIRE(got.count == count);
          if (count > 0) REQUIRE(got.first == static_cast<int64_t>(first));
        }
      }
    }
  }
}
