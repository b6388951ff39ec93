// Function body of fusectl::Attention (fused_ops.def) in standard ops, so that a model written
// with `--emit fusectl` runs in any ONNX runtime.
//
// Grouped-query attention without repeating K and V: Q [B, Hq, S, D] is viewed as
// [B, Hkv, G, S, D] and K, V as [B, Hkv, 1, T, D], so one broadcasting MatMul serves every
// query head of a group. The causal mask is computed from the shapes (key t is hidden from
// query s when t > s + T - S) and ANDed with the `causal` attribute, since a function body
// cannot branch on an attribute. Needs opset 11 or later (Range; Softmax(axis = -1), which
// normalises the last axis alone at every opset); below 12, where Constant has no value_float
// or value_int, the attributes are read from their tensor twins (`scale_tensor`, ...: Body::
// attrConstant, written on the call by attachFusectlFunctions). fuse-attention fires only from
// opset 11, and fuse-packed-attention only on its output.
#include <cmath>

#include "fused_op_body.h"

namespace fusectl {

namespace {

// Y [B, Hq, S, Dv] of q [B, Hq, S, D], k [B, Hkv, T, D], v [B, Hkv, T, Dv] and the additive
// mask, named `y_name`; the `scale` and `causal` attributes by reference.
Value* attentionHeads(Body& b, Value* q, Value* k, Value* v, Value* mask,
                      const std::string& y_name) {
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

  Value* scale = b.floatAttrConstant("scale");
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
  Value* causal_flag = b.intAttrConstant("causal");
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
  return b.node("Reshape", {y5, concat({dims(q_shape, 0, 3), rest})}, y_name);
}

}  // namespace

std::string buildAttentionFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  declareAttributes(f, op, opset);
  Body b(opset);
  Value* q = b.input("Q");
  Value* k = b.input("K");
  Value* v = b.input("V");
  Value* mask = b.input("M");
  f.body = b.finish(attentionHeads(b, q, k, v, mask, "Y"));
  return functionToBinary(f);
}

namespace {

// AttentionPacked: X [B, S, (Hq + 2 Hkv) * D] viewed as [B, Hq + 2 Hkv, S, D], its head ranges
// sliced into Q, K and V, then Attention's body and the head merge back to [B, S, Hq * D].
// AttentionPackedRotary (`rotary`): Q and K rotated by RotaryEmbedding's body first.
std::string packedAttentionFunction(const FusedOpInfo& op, int64_t opset, bool rotary) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  declareAttributes(f, op, opset);
  Body b(opset);
  Value* x = b.input("X");
  Value* mask = b.input("M");
  Value* cos = rotary ? b.input("Cos") : nullptr;
  Value* sin = rotary ? b.input("Sin") : nullptr;
  Value* one = b.intsConstant({1});
  auto heads = [&](const char* attr) {
    return b.node("Reshape", {b.intAttrConstant(attr), one});  // [1]
  };
  Value* hq = heads("num_heads");
  Value* hkv = heads("kv_num_heads");
  Value* k_start = hq;
  Value* v_start = b.node("Add", {hq, hkv});
  Value* all = b.node("Add", {v_start, hkv});
  Value* split_shape = b.node("Concat", {b.intsConstant({0, 0}), all, b.intsConstant({-1})});
  b.intAttr("axis", 0);
  Value* x4 = b.node("Reshape", {x, split_shape});  // [B, S, Hq + 2 Hkv, D]
  Value* xt = b.node("Transpose", {x4});
  b.intsAttr("perm", {0, 2, 1, 3});
  Value* head_axis = b.intsConstant({1});
  auto heads_between = [&](Value* from, Value* to) {
    return b.node("Slice", {xt, from, to, head_axis});
  };
  Value* q = heads_between(b.intsConstant({0}), k_start);
  Value* k = heads_between(k_start, v_start);
  Value* v = heads_between(v_start, all);
  if (rotary) {
    q = rotateHalf(b, q, cos, sin, "");
    k = rotateHalf(b, k, cos, sin, "");
  }
  Value* y4 = attentionHeads(b, q, k, v, mask, "");
  Value* merged = b.node("Transpose", {y4});
  b.intsAttr("perm", {0, 2, 1, 3});
  Value* y = b.node("Reshape", {merged, b.intsConstant({0, 0, -1})}, "Y");
  f.body = b.finish(y);
  return functionToBinary(f);
}

}  // namespace

std::string buildAttentionPackedFunction(const FusedOpInfo& op, int64_t opset) {
  return packedAttentionFunction(op, opset, /*rotary=*/false);
}

std::string buildAttentionPackedRotaryFunction(const FusedOpInfo& op, int64_t opset) {
  return packedAttentionFunction(op, opset, /*rotary=*/true);
}

}  // namespace fusectl
