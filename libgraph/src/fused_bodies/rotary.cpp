// ONNX function bodies of fusectl::RotaryEmbedding, InterleavedRotaryEmbedding (below),
// QKNormRotaryEmbedding and QKNormInterleavedRotaryEmbedding, from
// standard ops, computing what the exporters' own nodes compute:
//   [X1, X2] = Split(X, axis = -1) into equal halves (any opset; num_outputs from 18 on)
//   Y        = Add(Mul(X, Cos), Mul(Concat(Neg(X2), X1, axis = -1), Sin))
// The QK-norm body normalises first, over the last axis:
//   N = Mul(Div(X, Sqrt(Add(mean(Mul(X, X)), Constant(value_float = @epsilon)))), Scale)
// with the mean a ReduceMean (axes attribute) before opset 13 and ReduceSum (axes input) divided
// by the last dim from 13 on, since from opset 18 ReduceMean takes its axes as an input, which
// checkers that stop at opset 17 (libonnx 1.12) reject.
#include "fused_op_body.h"

namespace fusectl {

Value* rotateHalf(Body& b, Value* x, Value* cos, Value* sin, const std::string& out) {
  std::vector<Value*> halves = b.multiNode("Split", {x}, {"", ""});
  b.intAttr("axis", -1);
  if (b.opset() >= 18) b.intAttr("num_outputs", 2);
  Value* rotated = b.node("Concat", {b.node("Neg", {halves[1]}), halves[0]});
  b.intAttr("axis", -1);
  return b.node("Add", {b.node("Mul", {x, cos}), b.node("Mul", {rotated, sin})}, out);
}

namespace {

Value* lastAxisMean(Body& b, Value* x) {
  if (b.opset() < 13) {
    Value* mean = b.node("ReduceMean", {x});
    b.intsAttr("axes", {-1});
    return mean;
  }
  Value* sum = b.node("ReduceSum", {x, b.intsConstant({-1})});
  Value* last = b.node("Shape", {x});
  Value* count = b.node("Slice", {last, b.intsConstant({-1}), b.intsConstant({INT64_MAX})});
  Value* count_f = b.node("Cast", {count});
  b.intAttr("to", 1);
  return b.node("Div", {sum, count_f});
}

// Interleaved: R = Reshape(Concat(Unsqueeze(Neg(X[..., 1::2]), -1), Unsqueeze(X[..., 0::2], -1),
// axis = -1), Shape(X)), as GPT-J's export writes it; Y = Add(Mul(X, Cos), Mul(R, Sin)).
Value* rotateEveryTwo(Body& b, Value* x, Value* cos, Value* sin, const std::string& out) {
  const int64_t opset = b.opset();
  auto everyOther = [&](int64_t start) {
    return b.node("Slice", {x, b.intsConstant({start}), b.intsConstant({INT64_MAX}),
                            b.intsConstant({-1}), b.intsConstant({2})});
  };
  auto lastAxis = [&](Value* v) {
    if (opset >= 13) return b.node("Unsqueeze", {v, b.intsConstant({-1})});
    Value* u = b.node("Unsqueeze", {v});
    b.intsAttr("axes", {-1});
    return u;
  };
  Value* odd = everyOther(1);
  Value* even = everyOther(0);
  Value* pairs = b.node("Concat", {lastAxis(b.node("Neg", {odd})), lastAxis(even)});
  b.intAttr("axis", -1);
  Value* rotated = b.node("Reshape", {pairs, b.node("Shape", {x})});
  return b.node("Add", {b.node("Mul", {x, cos}), b.node("Mul", {rotated, sin})}, out);
}

// N = Mul(Div(X, Sqrt(Add(mean(Mul(X, X)), epsilon))), Scale) over the last axis.
Value* qkNorm(Body& b, Value* x, Value* scale) {
  Value* eps = b.floatAttrConstant("epsilon");
  Value* ms = lastAxisMean(b, b.node("Mul", {x, x}));
  Value* normed = b.node("Div", {x, b.node("Sqrt", {b.node("Add", {ms, eps})})});
  return b.node("Mul", {normed, scale});
}

using Rotation = Value* (*)(Body&, Value*, Value*, Value*, const std::string&);

// The function of one rotary op: inputs X[, Scale], Cos, Sin; Y = rotate(X or its QK-norm).
std::string rotaryFunction(const FusedOpInfo& op, int64_t opset, bool qk_norm, Rotation rotate) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  if (qk_norm) declareAttributes(f, op, opset);
  Body b(opset);
  Value* x = b.input("X");
  Value* scale = qk_norm ? b.input("Scale") : nullptr;
  Value* cos = b.input("Cos");
  Value* sin = b.input("Sin");
  Value* rows = qk_norm ? qkNorm(b, x, scale) : x;
  f.body = b.finish(rotate(b, rows, cos, sin, "Y"));
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", op.name, op.formula);
  return functionToBinary(f);
}

}  // namespace

std::string buildRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset) {
  return rotaryFunction(op, opset, /*qk_norm=*/false, rotateHalf);
}

std::string buildInterleavedRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset) {
  return rotaryFunction(op, opset, /*qk_norm=*/false, rotateEveryTwo);
}

std::string buildQKNormRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset) {
  return rotaryFunction(op, opset, /*qk_norm=*/true, rotateHalf);
}

std::string buildQKNormInterleavedRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset) {
  return rotaryFunction(op, opset, /*qk_norm=*/true, rotateEveryTwo);
}

}  // namespace fusectl
