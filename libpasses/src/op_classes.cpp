// The op-class table. One row per op; keep it sorted within each block for review, the lookup
// does not depend on order.
#include "fusectl/passes/op_classes.h"

#include <algorithm>
#include <iterator>
#include <tuple>

namespace fusectl::passes {

namespace {

using C = OpClass;

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
  add("fusectl", {"FusedConv", "FusedGemm"}, C::Compute);
  add("fusectl", {"Gelu"}, C::Activation);  // fuse-gelu's exact Gelu below opset 20

  for (OpClassInfo& r : t) {
    r.epilogue_activation =
        (r.domain.empty() && (r.op_type == "Relu" || r.op_type == "Clip" ||
                              r.op_type == "LeakyRelu" || r.op_type == "Sigmoid" ||
                              r.op_type == "HardSigmoid" || r.op_type == "HardSwish" ||
                              r.op_type == "Gelu" || r.op_type == "Tanh")) ||
        (r.domain == "fusectl" && r.op_type == "Gelu");
    r.accepts_epilogue = r.op_type == "Conv" || r.op_type == "Gemm" || r.op_type == "MatMul" ||
                         r.op_type == "FusedConv" || r.op_type == "FusedGemm";
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

}  // namespace fusectl::passes
