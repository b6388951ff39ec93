// The ONNX function body of fusectl::QuickGelu, the Gelu approximation fuse-gelu writes at any
// opset, from standard ops, computed as the exporters spell it (fusectl::GeluTanh is an
// activation op: its body is activationBody's, fused_ops_functions.cpp).
#include "fused_op_body.h"

namespace fusectl {

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
