// Shape rules for quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// QLinearConv, QLinearMatMul.
//
// Output element types: QuantizeLinear takes the zero point's type, else (opset 21) the
// `output_dtype` attribute, else uint8. DequantizeLinear gives float before opset 19 and the
// scale's type from 19 on. The QLinear ops take y_zero_point's type.
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

bool quantizeLinear(RuleContext& ctx) {
  DType t = ctx.hasInput(2) ? ctx.inDType(2) : DType::Undefined;
  if (t == DType::Undefined && ctx.node.attrInt("output_dtype", 0) != 0)
    t = static_cast<DType>(ctx.node.attrInt("output_dtype", 0));
  if (t == DType::Undefined && !ctx.hasInput(2)) t = DType::UInt8;
  ctx.setOutput(0, t, ctx.inShape(0));
  return true;
}

bool dequantizeLinear(RuleContext& ctx) {
  DType t = DType::Float;
  if (ctx.opset >= 19 && ctx.inDType(1) != DType::Undefined) t = ctx.inDType(1);
  ctx.setOutput(0, t, ctx.inShape(0));
  return true;
}

bool dynamicQuantizeLinear(RuleContext& ctx) {
  ctx.setOutput(0, DType::UInt8, ctx.inShape(0));
  ctx.setOutput(1, DType::Float, Shape::scalar());
  ctx.setOutput(2, DType::UInt8, Shape::scalar());
  return true;
}

// Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
bool qlinearConv(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(7), convShape(ctx, ctx.inShape(0), ctx.inShape(3)));
  return true;
}

// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
bool qlinearMatMul(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(7), matmulShape(ctx, ctx.inShape(0), ctx.inShape(3)));
  return true;
}

}  // namespace

void registerQuantizeRules(RuleRegistry& r) {
  r.add("", "QuantizeLinear", quantizeLinear);
  r.add("", "DequantizeLinear", dequantizeLinear);
  r.add("", "DynamicQuantizeLinear", dynamicQuantizeLinear);
  r.add("", "QLinearConv", qlinearConv);
  r.add("", "QLinearMatMul", qlinearMatMul);
}

}  // namespace fusectl::shape_rules
