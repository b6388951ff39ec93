// Shape rules of the ops newer than Debian's libonnx 1.12 knows that this tree has kernels for:
// BitCast and CumProd (opset 26), CausalConvWithState and LinearAttention (27), ai.onnx.ml
// TreeEnsemble (ml opset 5) and ai.onnx.preview FlexAttention. Without them shape inference
// would leave their outputs untyped and the rules after them blind.
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// BitCast: the input's shape, the element type named by 'to'.
bool bitCast(RuleContext& ctx) {
  const int64_t to = ctx.node.attrInt("to", 0);
  if (!dtypeIsKnown(static_cast<int32_t>(to))) return false;
  ctx.setOutput(0, static_cast<DType>(to), ctx.inShape(0));
  return true;
}

bool cumProd(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  return true;
}

// CausalConvWithState: output as input [B, C, L]; present_state [B, C, k - 1].
bool causalConvWithState(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  const Shape& x = ctx.inShape(0);
  const Shape& w = ctx.inShape(1);
  if (x.hasRank() && x.rank() == 3 && w.hasRank() && w.rank() == 3)
    ctx.setOutput(1, ctx.inDType(0), Shape({x[0], x[1], w[2] - Dim::known(1)}));
  else
    ctx.setOutput(1, ctx.inDType(0), unknownDims(3));
  return true;
}

// LinearAttention: output [B, T, q_num_heads * d_v]; present_state [B, kv_num_heads, d_k, d_v]
// in past_state's type (query's without one); d_k from query, d_v from value.
bool linearAttention(RuleContext& ctx) {
  const Shape& q = ctx.inShape(0);
  const Shape& v = ctx.inShape(2);
  const int64_t hq = ctx.node.attrInt("q_num_heads", 0);
  const int64_t hkv = ctx.node.attrInt("kv_num_heads", 0);
  const DType state_type = ctx.hasInput(3) ? ctx.inDType(3) : ctx.inDType(0);
  if (hq <= 0 || hkv <= 0 || !q.hasRank() || q.rank() != 3 || !v.hasRank() || v.rank() != 3) {
    ctx.setOutput(0, ctx.inDType(0), unknownDims(3));
    ctx.setOutput(1, state_type, unknownDims(4));
    return true;
  }
  const Dim d_k = q[2] / Dim::known(hq);
  const Dim d_v = v[2] / Dim::known(hkv);
  ctx.setOutput(0, ctx.inDType(0), Shape({q[0], q[1], Dim::known(hq) * d_v}));
  ctx.setOutput(1, state_type, Shape({q[0], Dim::known(hkv), d_k, d_v}));
  return true;
}

// ai.onnx.ml TreeEnsemble: [rows, n_targets] in X's type.
bool treeEnsemble(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  const Dim rows = x.hasRank() && x.rank() == 2 ? x[0] : Dim();
  ctx.setOutput(0, ctx.inDType(0), Shape({rows, Dim::known(ctx.node.attrInt("n_targets", 0))}));
  return true;
}

// ai.onnx.preview FlexAttention: [B, Hq, L, Ev] in V's type.
bool flexAttention(RuleContext& ctx) {
  const Shape& q = ctx.inShape(0);
  const Shape& v = ctx.inShape(2);
  if (q.hasRank() && q.rank() == 4 && v.hasRank() && v.rank() == 4)
    ctx.setOutput(0, ctx.inDType(2), Shape({q[0], q[1], q[2], v[3]}));
  else
    ctx.setOutput(0, ctx.inDType(2), unknownDims(4));
  return true;
}

}  // namespace

void registerNewerOnnxOpRules(RuleRegistry& r) {
  r.add("", "BitCast", bitCast);
  r.add("", "CumProd", cumProd);
  r.add("", "CausalConvWithState", causalConvWithState);
  r.add("", "LinearAttention", linearAttention);
  r.add("ai.onnx.ml", "TreeEnsemble", treeEnsemble);
  r.add("ai.onnx.preview", "FlexAttention", flexAttention);
}

}  // namespace fusectl::shape_rules
