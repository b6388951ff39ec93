// ONNX function bodies of the norm ops (LayerNorm, RMSNorm, SkipLayerNorm, SkipRMSNorm;
// fused_ops.def), written from standard ops so that `--emit fusectl` output runs anywhere.
//
// A function cannot turn the call's `axis` into a list of axes, so every body works on X
// flattened to [rows, cols] at `axis` (Flatten takes @axis), normalises over axis 1 and
// reshapes back to X's shape:
//   Sum  = Add(X, Skip)                                  (Skip ops)
//   R    = Flatten(Sum or X, axis = @axis)
//   LN:  D = Sub(R, ReduceMean(R)); V = ReduceMean(Mul(D, D))
//   RMS: D = R;                     V = ReduceMean(Mul(R, R))
//   N    = Div(D, Sqrt(Add(V, Constant(value_float = @epsilon))))   (@epsilon_tensor before 12)
//   Y    = Reshape(Add(Mul(N, Reshape(Scale, [-1])), Reshape(B, [-1])), Shape(Sum or X))
// Means are ReduceMean with an axes attribute before opset 18, ReduceSum / count from 18 on.
// The Skip bodies output Y and Sum. libonnx 1.12's checker rejects a call that leaves a
// function output off ("Output 1 is out of bounds"), so attachFusectlFunctions names a Sum
// output (unread) on every Skip node that has none.
// The call must give both attributes (the passes always do): an absent @axis would leave
// Flatten's own default (1) in force.
//
// GroupNorm is the chain PyTorch's exporter writes, at any rank >= 3:
//   G = Reshape(Constant(value_int = @num_groups), [1])
//   N = InstanceNormalization(Reshape(X, Concat([0], G, [-1])), Expand(1, G), Expand(0, G))
//   P = Concat(Shape(Scale), Expand([1], [rank(X) - 2]))          (the shape [C, 1, ..., 1])
//   Y = Add(Mul(Reshape(N, Shape(X)), Reshape(Scale, P)), Reshape(B, P))
// Constant's value_int needs opset 12, so fuse-group-norm does not fire below it.
//
// ChannelLayerNorm normalises axis 1 of X as it is (a function cannot transpose a tensor of
// unknown rank to put the channels last):
//   D = Sub(X, mean_1(X)); V = mean_1(Mul(D, D)); N = Div(D, Sqrt(Add(V, @epsilon)))
//   Y = Add(Mul(N, Reshape(Scale, [C, 1, ..., 1])), Reshape(B, [C, 1, ..., 1]))
#include "fused_op_body.h"
#include "fused_ops_composite.h"

namespace fusectl {
namespace {

// From opset 18 ReduceMean takes its axes as an input, which checkers that stop at opset 17
// (libonnx 1.12) reject; ReduceSum has taken them as an input since 13, so the mean is a sum
// divided by the column count there.
Value* meanOverColumns(Body& b, Value* rows) {
  if (b.opset() >= 18) {
    Value* cols = b.node("Gather", {b.node("Shape", {rows}), b.scalarConstant(DType::Int64, int64_t{1})});
    Value* count = b.node("Cast", {cols});
    b.intAttr("to", 1);
    Value* sum = b.node("ReduceSum", {rows, b.intsConstant({1})});
    return b.node("Div", {sum, count});
  }
  Value* mean = b.node("ReduceMean", {rows});
  b.intsAttr("axes", {1});
  return mean;
}

std::string buildNorm(const FusedOpInfo& op, int64_t opset, bool skip, bool rms) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  declareAttributes(f, op, opset);
  Body b(opset);
  Value* x = b.input("X");
  Value* skip_in = skip ? b.input("Skip") : nullptr;
  Value* scale = b.input("Scale");
  Value* bias = rms ? nullptr : b.input("B");

  Value* sum = skip ? b.node("Add", {x, skip_in}, "Sum") : x;
  Value* rows = b.node("Flatten", {sum});
  b.refAttr("axis", "axis", AttrKind::Int);
  Value* centred = rows;
  if (!rms) centred = b.node("Sub", {rows, meanOverColumns(b, rows)});
  Value* var = meanOverColumns(b, b.node("Mul", {centred, centred}));
  Value* eps = b.floatAttrConstant("epsilon");
  Value* normed = b.node("Div", {centred, b.node("Sqrt", {b.node("Add", {var, eps})})});
  Value* flat = b.intsConstant({-1});
  Value* y = b.node("Mul", {normed, b.node("Reshape", {scale, flat})});
  if (bias) y = b.node("Add", {y, b.node("Reshape", {bias, flat})});
  Value* out = b.node("Reshape", {y, b.node("Shape", {sum})}, "Y");
  f.body = skip ? b.finish(std::vector<Value*>{out, sum}) : b.finish(out);
  return functionToBinary(f);
}

// [C, 1, ..., 1] for a per-channel parameter `scale` ([C]) of a tensor of shape `x_shape`
// ([N, C, ...], rank unknown when the body is written).
Value* perChannelShape(Body& b, Value* x_shape, Value* scale) {
  Value* one = b.intsConstant({1});
  Value* spatial_rank =
      b.node("Sub", {b.node("Size", {x_shape}), b.scalarConstant(DType::Int64, int64_t{2})});
  Value* unit_dims = b.node("Expand", {one, b.node("Reshape", {spatial_rank, one})});
  Value* shape = b.node("Concat", {b.node("Shape", {scale}), unit_dims});
  b.intAttr("axis", 0);
  return shape;
}

// The mean over axis 1, kept: ReduceMean with an axes attribute before opset 18, ReduceSum over
// axis 1 divided by the channel count from 18 on (meanOverColumns says why).
Value* meanOverChannels(Body& b, Value* x) {
  if (b.opset() >= 18) {
    Value* channels =
        b.node("Gather", {b.node("Shape", {x}), b.scalarConstant(DType::Int64, int64_t{1})});
    Value* count = b.node("Cast", {channels});
    b.intAttr("to", 1);
    return b.node("Div", {b.node("ReduceSum", {x, b.intsConstant({1})}), count});
  }
  Value* mean = b.node("ReduceMean", {x});
  b.intsAttr("axes", {1});
  return mean;
}

}  // namespace

std::string buildChannelLayerNormFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  declareAttributes(f, op, opset);
  Body b(opset);
  Value* x = b.input("X");
  Value* scale = b.input("Scale");
  Value* bias = b.input("B");
  Value* centred = b.node("Sub", {x, meanOverChannels(b, x)});
  Value* var = meanOverChannels(b, b.node("Mul", {centred, centred}));
  Value* eps = b.floatAttrConstant("epsilon");
  Value* normed = b.node("Div", {centred, b.node("Sqrt", {b.node("Add", {var, eps})})});
  Value* per_channel = perChannelShape(b, b.node("Shape", {x}), scale);
  Value* y = b.node("Mul", {normed, b.node("Reshape", {scale, per_channel})});
  f.body = b.finish(b.node("Add", {y, b.node("Reshape", {bias, per_channel})}, "Y"));
  return functionToBinary(f);
}

std::string buildGroupNormFunction(const FusedOpInfo& op, int64_t opset) {
  return buildGroupNormFunctionWith(std::string(op.name), Activation::None, opset);
}

std::string buildGroupNormFunctionWith(const std::string& name, Activation activation,
                                       int64_t opset) {
  FunctionDef f = startFunction(name, opset);
  const bool activated = activation != Activation::None;
  // The plain function keeps the attributes it always had, so its bytes do not change.
  f.attributes = {"num_groups", "epsilon"};
  if (activated) {
    f.attributes.emplace_back("activation");
    f.attributes.emplace_back("activation_params");
    if (opset < 12) f.attributes.emplace_back("activation_params_tensor");
  }
  Body b(opset);
  Value* x = b.input("X");
  Value* scale = b.input("Scale");
  Value* bias = b.input("B");

  Value* groups = b.node("Constant", {});
  b.refAttr("value_int", "num_groups", AttrKind::Int);
  Value* one = b.intsConstant({1});
  Value* g = b.node("Reshape", {groups, one});
  Value* grouped_shape = b.node("Concat", {b.intsConstant({0}), g, b.intsConstant({-1})});
  b.intAttr("axis", 0);
  Value* grouped = b.node("Reshape", {x, grouped_shape});
  Value* ones = b.node("Expand", {b.floatConstant(1.f), g});
  Value* zeros = b.node("Expand", {b.floatConstant(0.f), g});
  Value* normed = b.node("InstanceNormalization", {grouped, ones, zeros});
  b.refAttr("epsilon", "epsilon", AttrKind::Float);
  Value* x_shape = b.node("Shape", {x});
  Value* back = b.node("Reshape", {normed, x_shape});

  Value* per_channel = perChannelShape(b, x_shape, scale);
  Value* y = b.node("Mul", {back, b.node("Reshape", {scale, per_channel})});
  Value* out = b.node("Add", {y, b.node("Reshape", {bias, per_channel})}, activated ? "normed" : "Y");
  if (activated) out = activationBody(b, activation, out, "Y");
  f.body = b.finish(out);
  if (activated) {
    f.doc_string = fmt::format("fusectl {}: Y = {}(GroupNorm(X, Scale, B)); see docs/ops.md", name,
                               activationName(activation));
  }
  return functionToBinary(f);
}

std::string buildLayerNormFunction(const FusedOpInfo& op, int64_t opset) {
  return buildNorm(op, opset, /*skip=*/false, /*rms=*/false);
}
std::string buildRMSNormFunction(const FusedOpInfo& op, int64_t opset) {
  return buildNorm(op, opset, false, true);
}
std::string buildSkipLayerNormFunction(const FusedOpInfo& op, int64_t opset) {
  return buildNorm(op, opset, true, false);
}
std::string buildSkipRMSNormFunction(const FusedOpInfo& op, int64_t opset) {
  return buildNorm(op, opset, true, true);
}

}  // namespace fusectl
