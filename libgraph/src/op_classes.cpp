// The op-class table. One row per op; keep it sorted within each block for review, the lookup
// does not depend on order.
#include "fusectl/graph/op_classes.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <tuple>

#include "fusectl/graph/fused_ops.h"

namespace fusectl {

namespace {

using C = OpClass;

// The activation a node of this op hands to an epilogue: a standard op named for one of the
// table's activations, or a fusectl activation op.
std::optional<Activation> epilogueActivationOf(std::string_view domain, std::string_view op) {
  if (domain.empty()) {
    for (const ActivationInfo& a : allActivations())
      if (a.onnx_op && a.name == op) return a.activation;
    return std::nullopt;
  }
  const FusedOpInfo* fused = domain == kFusectlDomain ? findFusedOp(op) : nullptr;
  if (!fused || fused->activation == Activation::None) return std::nullopt;
  return fused->activation;
}

std::vector<OpClassInfo> buildTable() {
  std::vector<OpClassInfo> t;
  auto add = [&](std::string_view domain, std::initializer_list<std::string_view> ops, OpClass c) {
    for (std::string_view op : ops) t.push_back({domain, op, c});
  };
  add("", {"Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Cast",
           "CastLike", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Identity", "IsInf", "IsNaN",
           "Log", "Neg", "Not", "Reciprocal", "Round", "Sign", "Sin", "Sinh", "Sqrt", "Tan"},
      C::ElementwiseUnary);
  add("", {"Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal",
           "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul",
           "Or", "Pow", "Sub", "Sum", "Where", "Xor"},
      C::ElementwiseBinary);
  add("", {"Celu", "Clip", "Elu", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "Mish",
           "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softplus", "Softsign", "Tanh",
           "ThresholdedRelu"},
      C::Activation);
  add("", {"Concat", "DepthToSpace", "Expand", "Flatten", "Gather", "GatherElements", "GatherND",
           "Pad", "Reshape", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose",
           "Unsqueeze"},
      C::Injective);
  add("", {"ArgMax", "ArgMin", "GlobalAveragePool", "GlobalMaxPool", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
           "ReduceSum", "ReduceSumSquare"},
      C::Reduction);
  add("", {"BatchNormalization", "GroupNormalization", "InstanceNormalization",
           "LayerNormalization", "LogSoftmax", "LpNormalization", "MeanVarianceNormalization",
           "Softmax"},
      C::Normalization);
  add("", {"Conv", "ConvInteger", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger",
           "QLinearConv", "QLinearMatMul"},
      C::Compute);
  for (const FusedOpInfo& op : allFusedOps()) t.push_back({kFusectlDomain, op.name, op.op_class});

  for (OpClassInfo& r : t) {
    r.epilogue_activation = epilogueActivationOf(r.domain, r.op_type).has_value();
    r.accepts_epilogue = r.op_type == "Conv" || r.op_type == "Gemm" || r.op_type == "MatMul" ||
                         (r.domain == kFusectlDomain && findFusedOp(r.op_type) &&
                          findFusedOp(r.op_type)->takesEpilogue());
  }
  std::sort(t.begin(), t.end(), [](const OpClassInfo& a, const OpClassInfo& b) {
    return std::tie(a.domain, a.op_type) < std::tie(b.domain, b.op_type);
  });
  return t;
}

}  // namespace

std::string_view opClassName(OpClass c) {
  switch (c) {
    case C::ElementwiseUnary: return "elementwise-unary";
    case C::ElementwiseBinary: return "elementwise-binary";
    case C::Activation: return "activation";
    case C::Injective: return "injective";
    case C::Reduction: return "reduction";
    case C::Normalization: return "normalization";
    case C::Compute: return "compute";
    case C::Opaque: return "opaque";
  }
  return "opaque";
}

const std::vector<OpClassInfo>& allOpClasses() {
  static const std::vector<OpClassInfo> table = buildTable();
  return table;
}

const OpClassInfo* findOpClass(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  const auto& t = allOpClasses();
  auto it = std::lower_bound(t.begin(), t.end(), std::make_pair(domain, op_type),
                             [](const OpClassInfo& a, const std::pair<std::string_view,
                                                                      std::string_view>& k) {
                               return std::tie(a.domain, a.op_type) < std::tie(k.first, k.second);
                             });
  if (it == t.end() || it->domain != domain || it->op_type != op_type) return nullptr;
  return &*it;
}

OpClass opClassOf(std::string_view domain, std::string_view op_type) {
  const OpClassInfo* info = findOpClass(domain, op_type);
  return info ? info->op_class : OpClass::Opaque;
}

bool isElementwise(OpClass c) {
  return c == C::ElementwiseUnary || c == C::ElementwiseBinary || c == C::Activation;
}

bool isEpilogueActivation(const Node& n) {
  const OpClassInfo* info = findOpClass(n.domain(), n.opType());
  return info && info->epilogue_activation;
}

bool acceptsEpilogue(const Node& n) {
  const OpClassInfo* info = findOpClass(n.domain(), n.opType());
  return info && info->accepts_epilogue;
}

bool isNondeterministic(const Node& n) {
  static const std::string_view kRandom[] = {"Bernoulli",   "Dropout",           "Multinomial",
                                             "RandomNormal", "RandomNormalLike", "RandomUniform",
                                             "RandomUniformLike"};
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  return std::find(std::begin(kRandom), std::end(kRandom), n.opType()) != std::end(kRandom);
}

}  // namespace fusectl
