// Shape rules for elementwise ops: unary, broadcasting binary, comparisons, variadic, Where, Cast.
//
// Before opset 7 the binary ops broadcast only B onto A (the `broadcast`/`axis` attributes), so
// their output has A's shape; from 7 on they broadcast both ways like NumPy. Integer arithmetic
// on small tensors also carries known values (Shape -> Mul/Add/Div -> Reshape patterns).
#include <algorithm>
#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "fusectl/graph/fused_ops.h"
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

bool sameAsInput(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  return true;
}

bool toBool(RuleContext& ctx) {
  ctx.setOutput(0, DType::Bool, ctx.inShape(0));
  return true;
}

// Output shape of a binary op, honouring pre-opset-7 unidirectional broadcasting.
Shape binaryShape(RuleContext& ctx) {
  const Shape& a = ctx.inShape(0);
  const Shape& b = ctx.inShape(1);
  if (ctx.opset < 7) return a.hasRank() ? a : b;
  return broadcastOrWarn(ctx, a, b);
}

using DimOp = Dim (*)(const Dim&, const Dim&);

// Applies `op` element by element with scalar (size-1) broadcasting, on known values.
void propagateBinary(RuleContext& ctx, DimOp op) {
  if (!dtypeIsInteger(ctx.inDType(0)) && ctx.inDType(0) != DType::Bool) return;
  const KnownValues* a = ctx.inValues(0);
  const KnownValues* b = ctx.inValues(1);
  if (!a || !b) return;
  size_t na = a->elems.size(), nb = b->elems.size();
  if (na != nb && na != 1 && nb != 1) return;
  KnownValues out;
  out.scalar = a->scalar && b->scalar;
  const size_t n = na == 0 || nb == 0 ? 0 : std::max(na, nb);  // [0] with [1] broadcasts to [0]
  for (size_t i = 0; i < n; ++i)
    out.elems.push_back(op(a->elems[na == 1 ? 0 : i], b->elems[nb == 1 ? 0 : i]));
  ctx.setValues(0, std::move(out));
}

Dim addDims(const Dim& a, const Dim& b) { return a + b; }
Dim subDims(const Dim& a, const Dim& b) { return a - b; }
Dim mulDims(const Dim& a, const Dim& b) { return a * b; }
// Integer Div truncates toward zero, like C; symbolic values divide only when exact.
Dim divDims(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) {
    if (b.value() == 0 || (b.value() == -1 && a.value() == INT64_MIN)) return Dim::unknown();
    return Dim::known(a.value() / b.value());
  }
  return a / b;
}
Dim modDims(const Dim& a, const Dim& b) {
  if (!a.isStatic() || !b.isStatic() || b.value() == 0) return Dim::unknown();
  if (b.value() == -1) return Dim::known(0);  // INT64_MIN % -1 traps on x86
  int64_t r = a.value() % b.value();  // fmod=0: the sign follows the divisor
  if (r != 0 && ((r < 0) != (b.value() < 0))) r += b.value();
  return Dim::known(r);
}
Dim maxDims(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) return Dim::known(std::max(a.value(), b.value()));
  if (a.provablyEqual(b)) return a;
  return Dim::unknown();
}
Dim minDims(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) return Dim::known(std::min(a.value(), b.value()));
  if (a.provablyEqual(b)) return a;
  return Dim::unknown();
}
// Symbolic dims are never negative, which settles comparisons against negative constants
// (PyTorch's Expand export compares a shape with -1).
Dim equalDims(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) return Dim::known(a.value() == b.value());
  if (a.provablyEqual(b)) return Dim::known(1);
  if ((a.isSymbolic() && b.isStatic() && b.value() < 0) ||
      (b.isSymbolic() && a.isStatic() && a.value() < 0))
    return Dim::known(0);
  return Dim::unknown();
}
Dim lessDims(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) return Dim::known(a.value() < b.value());
  return Dim::unknown();
}
Dim greaterDims(const Dim& a, const Dim& b) { return lessDims(b, a); }

template <DimOp Op>
bool arithmetic(RuleContext& ctx) {
  DType t = ctx.inDType(0) != DType::Undefined ? ctx.inDType(0) : ctx.inDType(1);
  ctx.setOutput(0, t, binaryShape(ctx));
  if constexpr (Op != nullptr) propagateBinary(ctx, Op);
  return true;
}

bool pow(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(0), binaryShape(ctx));
  return true;
}

template <DimOp Op>
bool comparison(RuleContext& ctx) {
  ctx.setOutput(0, DType::Bool, binaryShape(ctx));
  if constexpr (Op != nullptr) propagateBinary(ctx, Op);
  return true;
}

// PRelu's slope broadcasts onto X, never the other way.
bool prelu(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(0), ctx.inShape(0));
  return true;
}

template <DimOp Op>
bool variadic(RuleContext& ctx) {
  DType t = DType::Undefined;
  Shape s;
  bool first = true;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.hasInput(i)) continue;
    if (t == DType::Undefined) t = ctx.inDType(i);
    s = first ? ctx.inShape(i) : broadcastOrWarn(ctx, s, ctx.inShape(i));
    first = false;
  }
  ctx.setOutput(0, t, std::move(s));
  if constexpr (Op != nullptr)
    if (ctx.numInputs() == 2) propagateBinary(ctx, Op);
  return true;
}

bool where(RuleContext& ctx) {
  DType t = ctx.inDType(1) != DType::Undefined ? ctx.inDType(1) : ctx.inDType(2);
  Shape s = broadcastOrWarn(ctx, ctx.inShape(0), ctx.inShape(1));
  s = broadcastOrWarn(ctx, s, ctx.inShape(2));
  ctx.setOutput(0, t, std::move(s));
  const KnownValues* c = ctx.inValues(0);
  const KnownValues* x = ctx.inValues(1);
  const KnownValues* y = ctx.inValues(2);
  if (!c || !x || !y) return true;
  size_t n = std::max({c->elems.size(), x->elems.size(), y->elems.size()});
  auto at = [n](const KnownValues* kv, size_t i) -> const Dim* {
    if (kv->elems.size() == n) return &kv->elems[i];
    return kv->elems.size() == 1 ? &kv->elems[0] : nullptr;
  };
  KnownValues out;
  out.scalar = c->scalar && x->scalar && y->scalar;
  for (size_t i = 0; i < n; ++i) {
    const Dim *ci = at(c, i), *xi = at(x, i), *yi = at(y, i);
    if (!ci || !xi || !yi) return true;
    out.elems.push_back(!ci->isStatic() ? Dim::unknown() : ci->value() ? *xi : *yi);
  }
  ctx.setValues(0, std::move(out));
  return true;
}

bool neg(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  if (const KnownValues* kv = ctx.inValues(0)) {
    KnownValues out{kv->scalar, {}};
    for (const Dim& d : kv->elems) out.elems.push_back(Dim::known(0) - d);
    ctx.setValues(0, std::move(out));
  }
  return true;
}

bool identity(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  if (const KnownValues* kv = ctx.inValues(0)) ctx.setValues(0, *kv);
  return true;
}

// Integer values survive a cast to another integer type, and to a float type while they are
// exact there (window functions cast a size to float and feed it to Range).
void castValues(RuleContext& ctx, DType to) {
  const KnownValues* kv = ctx.inValues(0);
  if (!kv) return;
  if (dtypeIsInteger(to)) {
    ctx.setValues(0, *kv);
    return;
  }
  if (!dtypeIsFloat(to)) return;
  for (const Dim& d : kv->elems)
    if (!d.isStatic() || d.value() > (1 << 24) || d.value() < -(1 << 24)) return;
  ctx.setValues(0, *kv);
}

// Cast-1 names the type as a string ("FLOAT"); later versions use the TensorProto number.
bool cast(RuleContext& ctx) {
  DType to = DType::Undefined;
  if (const Attribute* a = ctx.node.attr("to")) {
    if (a->kind == AttrKind::Int) {
      to = static_cast<DType>(a->i);
    } else if (a->kind == AttrKind::String) {
      std::string lower;
      for (char c : a->s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      to = dtypeFromName(lower).value_or(DType::Undefined);
    }
  }
  ctx.setOutput(0, to, ctx.inShape(0));
  castValues(ctx, to);
  return true;
}

bool castLike(RuleContext& ctx) {
  DType to = ctx.inDType(1);
  ctx.setOutput(0, to, ctx.inShape(0));
  castValues(ctx, to);
  return true;
}

// Before opset 10 the mask has the input's type; from 10 on it is bool.
bool dropout(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  if (ctx.hasOutput(1))
    ctx.setOutput(1, ctx.opset < 10 ? ctx.inDType(0) : DType::Bool, ctx.inShape(0));
  return true;
}

}  // namespace

void registerElementwiseRules(RuleRegistry& r) {
  for (const char* op :
       {"Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Ceil", "Celu",
        "Clip", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
        "Hardmax", "LeakyRelu", "Log", "LogSoftmax", "LpNormalization", "LRN",
        "MeanVarianceNormalization", "Mish", "Reciprocal", "Relu", "Round", "Selu", "Shrink",
        "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt", "Tan",
        "Tanh", "ThresholdedRelu"})
    r.add("", op, sameAsInput);
  for (const char* op : {"IsNaN", "IsInf", "Not"}) r.add("", op, toBool);
  r.add("", "Neg", neg);
  r.add("", "Identity", identity);
  r.add("", "Add", arithmetic<addDims>);
  r.add("", "Sub", arithmetic<subDims>);
  r.add("", "Mul", arithmetic<mulDims>);
  r.add("", "Div", arithmetic<divDims>);
  r.add("", "Mod", arithmetic<modDims>);
  for (const char* op : {"BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    r.add("", op, arithmetic<nullptr>);
  r.add("", "Pow", pow);
  r.add("", "PRelu", prelu);
  r.add("", "Equal", comparison<equalDims>);
  r.add("", "Less", comparison<lessDims>);
  r.add("", "Greater", comparison<greaterDims>);
  for (const char* op : {"LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})
    r.add("", op, comparison<nullptr>);
  r.add("", "Max", variadic<maxDims>);
  r.add("", "Min", variadic<minDims>);
  r.add("", "Sum", variadic<addDims>);
  r.add("", "Mean", variadic<nullptr>);
  r.add("", "Where", where);
  r.add("", "Cast", cast);
  r.add("", "CastLike", castLike);
  r.add("", "Dropout", dropout);
  // ONNX Runtime's contrib activations keep the input's shape too.
  for (const char* op : {"Gelu", "FastGelu", "QuickGelu"}) r.add("com.microsoft", op, sameAsInput);
}

}  // namespace fusectl::shape_rules
