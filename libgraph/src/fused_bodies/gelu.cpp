// The ONNX function bodies of the Gelu approximations fuse-gelu writes before opset 20
// (fusectl::GeluTanh) or at any opset (fusectl::QuickGelu), from standard ops, computed as the
// exporters spell them.
#include "fused_op_body.h"

namespace fusectl {

// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x))).
std::string buildGeluTanhFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  Body b(opset);
  Value* x = b.input(op.inputs.at(0).name);
  Value* cube = b.node("Mul", {b.node("Mul", {x, x}), x});
  Value* inner = b.node("Add", {x, b.node("Mul", {cube, b.floatConstant(0.044715f)})});
  Value* t = b.node("Tanh", {b.node("Mul", {inner, b.floatConstant(0.7978845608f)})});
  Value* half_x = b.node("Mul", {x, b.floatConstant(0.5f)});
  Value* y = b.node("Mul", {half_x, b.node("Add", {t, b.floatConstant(1.f)})},
                    std::string(op.outputs.at(0).name));
  f.body = b.finish(y);
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", op.name, op.formula);
  return functionToBinary(f);
}

// x * sigmoid(1.702 * x).
std::string buildQuickGeluFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  Body b(opset);
  Value* x = b.input(op.inputs.at(0).name);
  Value* gate = b.node("Sigmoid", {b.node("Mul", {x, b.floatConstant(1.702f)})});
  f.body = b.finish(b.node("Mul", {x, gate}, std::string(op.outputs.at(0).name)));
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", op.name, op.formula);
  return functionToBinary(f);
}

}  // namespace fusectl
