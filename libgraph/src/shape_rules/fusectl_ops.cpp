// Shape rules of the fusectl ops (domain "fusectl", fused_ops.def). An op whose entry declares
// SameAsInput gets it from the table; a composite op with a rule of its own (shape_rule None)
// is registered below, one line per op, its rule written in this file.
#include "fusectl/graph/fused_ops.h"
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Every output present takes input 0's dtype and shape (a norm's Y and its saved sum alike).
bool everyOutputAsInput(RuleContext& ctx) {
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    if (ctx.hasOutput(i)) propagateInput(ctx, i, 0);
  return true;
}

// Attention: Y is [B, Hq, S, Dv] from Q [B, Hq, S, D] and V [B, Hkv, T, Dv], Q's dtype.
bool attentionShape(RuleContext& ctx) {
  const Shape& q = ctx.inShape(0);
  const Shape& v = ctx.inShape(2);
  if (!q.hasRank() || !v.hasRank() || q.rank() != 4 || v.rank() != 4) {
    ctx.setOutput(0, ctx.inDType(0), unknownDims(4));
    return true;
  }
  ctx.setOutput(0, ctx.inDType(0), Shape({q[0], q[1], q[2], v[3]}));
  return true;
}

// AttentionPacked and AttentionPackedRotary: Y is [B, S, Hq * D] from X [B, S, (Hq + 2 Hkv) * D],
// X's dtype.
bool attentionPackedShape(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  if (!x.hasRank() || x.rank() != 3) {
    ctx.setOutput(0, ctx.inDType(0), unknownDims(3));
    return true;
  }
  const int64_t hq = ctx.node.attrInt("num_heads", 0);
  const int64_t hkv = ctx.node.attrInt("kv_num_heads", hq);
  const Dim& width = x[2];
  Dim out = Dim::unknown();
  // Head counts from the file, bounded before hq + 2 * hkv is formed.
  constexpr int64_t kMaxHeads = int64_t{1} << 30;
  if (hq > 0 && hq <= kMaxHeads && hkv > 0 && hkv <= kMaxHeads && width.isStatic()) {
    const int64_t heads = hq + 2 * hkv;
    if (width.value() % heads == 0) out = Dim::known(width.value() / heads * hq);
  }
  ctx.setOutput(0, ctx.inDType(0), Shape({x[0], x[1], out}));
  return true;
}

// SwiGLUPacked: Y is X with its last dim halved.
bool swigluPackedShape(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  if (!x.hasRank() || x.rank() == 0) {
    ctx.setOutput(0, ctx.inDType(0), x);
    return true;
  }
  std::vector<Dim> dims(x.dims().begin(), x.dims().end());
  Dim& last = dims.back();
  last = last.isStatic() && last.value() % 2 == 0 ? Dim::known(last.value() / 2) : Dim::unknown();
  ctx.setOutput(0, ctx.inDType(0), Shape(std::move(dims)));
  return true;
}

// ExpandDepthwiseConv: the depthwise Conv's output over X's plane (the 1x1 expansion keeps it),
// with DW's channels: [N, E, OH, OW].
bool expandDepthwiseShape(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(0), convShape(ctx, ctx.inShape(0), ctx.inShape(3)));
  return true;
}

// Elementwise: Y is every input's shape broadcast together (ONNX's multidirectional rule), in
// input 0's dtype. Inputs left out (empty names) take no part.
bool elementwiseShape(RuleContext& ctx) {
  Shape y = ctx.inShape(0);
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i)) y = broadcastOrWarn(ctx, y, ctx.inShape(i));
  ctx.setOutput(0, ctx.inDType(0), std::move(y));
  return true;
}

}  // namespace

void registerFusectlOpRules(RuleRegistry& r) {
  for (const FusedOpInfo& op : allFusedOps())
    if (op.shape_rule == FusedShapeRule::SameAsInput) r.add(kFusectlDomain, op.name, everyOutputAsInput);
  r.add(kFusectlDomain, "Attention", attentionShape);
  r.add(kFusectlDomain, "AttentionPacked", attentionPackedShape);
  r.add(kFusectlDomain, "AttentionPackedRotary", attentionPackedShape);
  r.add(kFusectlDomain, "SwiGLUPacked", swigluPackedShape);
  r.add(kFusectlDomain, "Elementwise", elementwiseShape);
  r.add(kFusectlDomain, "ExpandDepthwiseConv", expandDepthwiseShape);
}

}  // namespace fusectl::shape_rules
