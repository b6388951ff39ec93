// The ONNX function body of fusectl::SwiGLU: Y = G * Sigmoid(G) * U, as the kernel computes it
// (SiLU of the gate first, then the product with the up projection); SwiGLUPacked splits its
// input's last dim into the two first.
#include "fused_op_body.h"

namespace fusectl {

std::string buildSwiGLUFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  Body b(opset);
  Value* g = b.input(op.inputs.at(0).name);
  Value* u = b.input(op.inputs.at(1).name);
  Value* silu = b.node("Mul", {g, b.node("Sigmoid", {g})});
  f.body = b.finish(b.node("Mul", {silu, u}, std::string(op.outputs.at(0).name)));
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", op.name, op.formula);
  return functionToBinary(f);
}

std::string buildSwiGLUPackedFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  Body b(opset);
  Value* x = b.input(op.inputs.at(0).name);
  std::vector<Value*> halves = b.multiNode("Split", {x}, {"", ""});
  b.intAttr("axis", -1);
  if (opset >= 18) b.intAttr("num_outputs", 2);
  Value* g = halves[0];
  Value* silu = b.node("Mul", {g, b.node("Sigmoid", {g})});
  f.body = b.finish(b.node("Mul", {silu, halves[1]}, std::string(op.outputs.at(0).name)));
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", op.name, op.formula);
  return functionToBinary(f);
}

}  // namespace fusectl
