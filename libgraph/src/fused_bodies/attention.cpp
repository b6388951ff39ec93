// Function body of fusectl::Attention (fused_ops.def) in standard ops, so that a model written
// with `--emit fusectl` runs in any ONNX runtime.
//
// Grouped-query attention without repeating K and V: Q [B, Hq, S, D] is viewed as
// [B, Hkv, G, S, D] and K, V as [B, Hkv, 1, T, D], so one broadcasting MatMul serves every
// query head of a group. The causal mask is computed from the shapes (key t is hidden from
// query s when t > s + T - S) and ANDed with the `causal` attribute, since a function body
// cannot branch on an attribute. Needs opset 13 or later (Constant value_float, Range,
// Softmax on the last axis alone); fuse-attention fires only there.
#include <cmath>

#include "fused_op_body.h"

namespace fusectl {

std::string buildAttentionFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  for (const FusedOpAttribute& a : op.attributes) f.attributes.emplace_back(a.name);
  Body b(opset);
  Value* q = b.input("Q");
  Value* k = b.input("K");
  Value* v = b.input("V");
  Value* mask = b.input("M");

  auto concat = [&](std::vector<Value*> parts) {
    Value* out = b.node("Concat", std::move(parts));
    b.intAttr("axis", 0);
    return out;
  };
  auto dims = [&](Value* shape, int64_t from, int64_t to) {
    return b.node("Slice", {shape, b.intsConstant({from}), b.intsConstant({to})});
  };
  Value* q_shape = b.node("Shape", {q});
  Value* k_shape = b.node("Shape", {k});
  Value* v_shape = b.node("Shape", {v});
  Value* batch_kv_heads = dims(k_shape, 0, 2);  // [B, Hkv]
  Value* q_len = dims(q_shape, 2, 3);
  Value* k_len = dims(k_shape, 2, 3);
  Value* rest = b.intsConstant({-1});
  Value* one = b.intsConstant({1});

  // Scores [B, Hkv, G, S, T] = Q5 * K5^T, then viewed as [B, Hq, S, T].
  Value* q5 = b.node("Reshape", {q, concat({batch_kv_heads, rest, dims(q_shape, 2, 4)})});
  Value* k5 = b.node("Reshape", {k, concat({batch_kv_heads, one, dims(k_shape, 2, 4)})});
  Value* k5t = b.node("Transpose", {k5});
  b.intsAttr("perm", {0, 1, 2, 4, 3});
  Value* scores5 = b.node("MatMul", {q5, k5t});
  Value* scores = b.node("Reshape", {scores5, concat({dims(q_shape, 0, 3), k_len})});

  Value* scale = b.node("Constant", {});
  b.refAttr("value_float", "scale", AttrKind::Float);
  Value* masked = b.node("Add", {b.node("Mul", {scores, scale}), mask});

  // Causal: key t is hidden from query s when t > s + (T - S).
  Value* scalar_shape = b.tensorConstant(Tensor::fromValues(DType::Int64, {0}, std::vector<int64_t>{}));
  Value* s_scalar = b.node("Reshape", {q_len, scalar_shape});
  Value* t_scalar = b.node("Reshape", {k_len, scalar_shape});
  Value* zero = b.scalarConstant(DType::Int64, int64_t{0});
  Value* step = b.scalarConstant(DType::Int64, int64_t{1});
  Value* rows = b.node("Range", {zero, s_scalar, step});
  Value* cols = b.node("Range", {zero, t_scalar, step});
  Value* last_visible = b.node("Add", {rows, b.node("Sub", {t_scalar, s_scalar})});
  Value* column = b.intsConstant({-1, 1});
  Value* future = b.node("Greater", {cols, b.node("Reshape", {last_visible, column})});
  Value* causal_flag = b.node("Constant", {});
  b.refAttr("value_int", "causal", AttrKind::Int);
  Value* causal_bool = b.node("Cast", {causal_flag});
  b.intAttr("to", static_cast<int64_t>(9));  // BOOL
  Value* hidden = b.node("And", {future, causal_bool});
  Value* neg_inf = b.floatConstant(-INFINITY);
  Value* logits = b.node("Where", {hidden, neg_inf, masked});
  Value* probs = b.node("Softmax", {logits});
  b.intAttr("axis", -1);

  // Y [B, Hkv, G, S, Dv] = P5 * V5, then viewed as [B, Hq, S, Dv].
  Value* p5 = b.node("Reshape", {probs, concat({batch_kv_heads, rest, q_len, k_len})});
  Value* v5 = b.node("Reshape", {v, concat({batch_kv_heads, one, dims(v_shape, 2, 4)})});
  Value* y5 = b.node("MatMul", {p5, v5});
  Value* y = b.node("Reshape", {y5, concat({dims(q_shape, 0, 3), rest})}, "Y");
  f.body = b.finish(y);
  return functionToBinary(f);
}

}  // namespace fusectl
