// The ONNX function bodies of fusectl::ExpandDepthwiseConv, one per activation pair:
//   E = expand_activation(Conv(X, W, B))           the 1x1 expansion, Conv's defaults
//   Y = activation(Conv(E, DW, DB))                <@group, @kernel_shape, @pads, @strides>
// The activations read their parameters from the call's expand_activation_params and
// activation_params (below opset 12 from their `_tensor` twins), as the epilogue ops' bodies do.
#include "fused_op_body.h"
#include "fused_ops_composite.h"

namespace fusectl {

std::string buildExpandDepthwiseFunction(const std::string& name, Activation expand_activation,
                                         Activation activation, int64_t opset) {
  const FusedOpInfo& op = *findFusedOp("ExpandDepthwiseConv");
  FunctionDef f = startFunction(name, opset);
  Body b(opset);
  std::vector<Value*> in;
  for (const FusedOpInput& i : op.inputs) in.push_back(b.input(i.name));
  for (const FusedOpAttribute& a : op.attributes) {
    f.attributes.emplace_back(a.name);
    if (opset < 12 && a.kind == AttrKind::Floats) f.attributes.emplace_back(std::string(a.name) + "_tensor");
  }

  const bool has_expand = expand_activation != Activation::None;
  const bool has_act = activation != Activation::None;
  Value* e = b.node("Conv", {in[0], in[1], in[2]}, has_expand ? "expanded" : "E");
  if (has_expand) {
    b.readParamsFrom("expand_activation_params");
    e = activationBody(b, expand_activation, e, "E");
    b.readParamsFrom("activation_params");
  }
  Value* y = b.node("Conv", {e, in[3], in[4]}, has_act ? "acc" : "Y");
  for (const char* attr : {"group", "kernel_shape", "pads", "strides"}) {
    const bool ints = std::string_view(attr) != "group";
    b.refAttr(attr, attr, ints ? AttrKind::Ints : AttrKind::Int);
  }
  if (has_act) y = activationBody(b, activation, y, "Y");
  f.body = b.finish(y);
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", name, op.formula);
  return functionToBinary(f);
}

}  // namespace fusectl
