// The typed fused-op table built from fused_ops.def, and the spelling codec.
#include "fusectl/graph/fused_ops.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

namespace fusectl {

namespace {

std::vector<ActivationInfo> buildActivations() {
  std::vector<ActivationInfo> t;
  t.push_back({Activation::None, "", 0, {0.f, 0.f}, "y", "", false, ""});
#define FUSECTL_ACTIVATION(Name, Params, Default0, Default1, Computes, ParamsDoc, OnnxOp, \
                           BodyDoc)                                                         \
  t.push_back({Activation::Name, #Name, Params, {Default0, Default1}, Computes, ParamsDoc,  \
               OnnxOp, BodyDoc});
#include "fusectl/graph/fused_ops.def"
  return t;
}

// The epilogue's own attributes, after the compute op's.
void addEpilogueAttributes(FusedOpInfo& op) {
  op.attributes.push_back({"activation", AttrKind::String, false});
  op.attributes.push_back({"activation_params", AttrKind::Floats, false});
}

std::vector<FusedOpInfo> buildFusedOps() {
  std::vector<FusedOpInfo> t;
#define FUSECTL_INPUTS(...) \
  std::vector<FusedOpInput> { __VA_ARGS__ }
#define FUSECTL_ATTRIBUTES(...) \
  std::vector<FusedOpAttribute> { __VA_ARGS__ }
// The parameters are spelled apart from FusedOpInfo's members, which they would replace.
#define FUSECTL_FUSED_OP(Name, Class, Formula, Compute, Inputs, Attributes, Rule, Notes) \
  {                                                                                   \
    FusedOpInfo op;                                                                   \
    op.name = #Name;                                                                  \
    op.op_class = OpClass::Class;                                                     \
    op.formula = Formula;                                                             \
    op.compute = Compute;                                                             \
    op.inputs = Inputs;                                                               \
    op.attributes = Attributes;                                                       \
    op.shape_rule = FusedShapeRule::Rule;                                             \
    op.notes = Notes;                                                                 \
    op.kind = op.compute.empty() ? FusedOpKind::Activation : FusedOpKind::Epilogue;  \
    op.outputs = {{"Y", "T", false, ""}};                                            \
    t.push_back(std::move(op));                                                       \
  }
#define FUSECTL_OUTPUTS(...) \
  std::vector<FusedOpOutput> { __VA_ARGS__ }
#define FUSECTL_COMPOSITE_OP(Name, Class, Formula, Inputs, Outputs, Attributes, Rule, Notes) \
  {                                                                                        \
    FusedOpInfo op;                                                                        \
    op.name = #Name;                                                                       \
    op.kind = FusedOpKind::Composite;                                                      \
    op.op_class = OpClass::Class;                                                          \
    op.formula = Formula;                                                                  \
    op.inputs = Inputs;                                                                    \
    op.outputs = Outputs;                                                                  \
    op.attributes = Attributes;                                                            \
    op.shape_rule = FusedShapeRule::Rule;                                                  \
    op.notes = Notes;                                                                      \
    t.push_back(std::move(op));                                                            \
  }
#include "fusectl/graph/fused_ops.def"
#undef FUSECTL_OUTPUTS
#undef FUSECTL_INPUTS
#undef FUSECTL_ATTRIBUTES
  for (FusedOpInfo& op : t) {
    if (op.isComposite()) continue;
    for (FusedOpAttribute& a : op.attributes) a.by_reference = true;
    if (op.takesEpilogue()) {
      addEpilogueAttributes(op);
      for (const ActivationInfo& a : allActivations())
        if (a.activation != Activation::None) op.epilogue_activations.push_back(a.activation);
    } else {
      op.activation = parseActivation(op.name).value_or(Activation::None);
    }
  }
  return t;
}

constexpr std::string_view kNoBias = "_NoBias";
constexpr std::string_view kAdd = "_Add";

// Removes `prefix` from the front of `s` when it is there.
bool consume(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// decodeFusedSpelling of a name without a dtype suffix.
std::optional<FusedSpelling> decodeFloat32Spelling(std::string_view op_type) {
  const size_t base_end = op_type.find('_');
  const FusedOpInfo* op = findFusedOp(op_type.substr(0, base_end));
  if (!op || !op->takesEpilogue()) return std::nullopt;
  FusedSpelling s;
  s.op = op;
  s.plain = base_end == std::string_view::npos;
  if (s.plain) return s;
  std::string_view rest = op_type.substr(base_end);
  s.bias = !consume(rest, kNoBias);
  s.residual = consume(rest, kAdd);
  if (rest.empty()) return s;
  if (!consume(rest, "_")) return std::nullopt;
  for (Activation a : op->epilogue_activations) {
    if (activationName(a) == rest) {
      s.activation = a;
      return s;
    }
  }
  return std::nullopt;
}

// The element types whose nodes are spelled with a suffix (fused_ops.h).
constexpr DType kSuffixedDTypes[] = {DType::Float16, DType::BFloat16};

// ("LayerNorm", Float16) for "LayerNorm_float16", by the text alone; (op_type, nullopt) without
// a suffix.
std::pair<std::string_view, std::optional<DType>> splitDTypeSuffix(std::string_view op_type) {
  for (DType t : kSuffixedDTypes) {
    const std::string_view name = dtypeName(t);
    if (op_type.size() > name.size() + 1 &&
        op_type.substr(op_type.size() - name.size()) == name &&
        op_type[op_type.size() - name.size() - 1] == '_')
      return {op_type.substr(0, op_type.size() - name.size() - 1), t};
  }
  return {op_type, std::nullopt};
}

constexpr std::string_view kElementwisePrefix = "Elementwise_";

// "Elementwise_" and 16 lower-case hex digits (elementwiseSpelling).
bool isElementwiseSpelling(std::string_view op_type) {
  if (op_type.size() != kElementwisePrefix.size() + 16 ||
      op_type.substr(0, kElementwisePrefix.size()) != kElementwisePrefix)
    return false;
  for (char c : op_type.substr(kElementwisePrefix.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

constexpr std::string_view kExpandDepthwisePrefix = "ExpandDepthwiseConv_";

// "None" for no activation: the spelling has a name in both places.
std::string_view spelledActivation(Activation a) {
  return a == Activation::None ? std::string_view("None") : activationName(a);
}

// The activation a spelling's part `name` is exactly the spelledActivation of, or nullopt.
std::optional<Activation> activationSpelledAs(std::string_view name) {
  const std::optional<Activation> a = parseActivation(name);
  if (!a || spelledActivation(*a) != name) return std::nullopt;
  return a;
}

// A name attachFusectlFunctions can give a float32 node: an op, an epilogue spelling, an
// Elementwise spelling or an ExpandDepthwiseConv one.
bool isFloat32Spelling(std::string_view op_type) {
  return findFusedOp(op_type) || decodeFloat32Spelling(op_type) ||
         isElementwiseSpelling(op_type) || decodeExpandDepthwiseSpelling(op_type) ||
         decodeGroupNormSpelling(op_type);
}

constexpr std::string_view kGroupNormPrefix = "GroupNorm_";

}  // namespace

const std::vector<ActivationInfo>& allActivations() {
  static const std::vector<ActivationInfo> table = buildActivations();
  return table;
}

const ActivationInfo& activationInfo(Activation a) {
  return allActivations()[static_cast<size_t>(a)];
}

std::optional<Activation> parseActivation(std::string_view name) {
  if (name == "None" || name == "Identity") return Activation::None;
  for (const ActivationInfo& a : allActivations())
    if (a.name == name) return a.activation;
  return std::nullopt;
}

const std::vector<FusedOpInfo>& allFusedOps() {
  static const std::vector<FusedOpInfo> table = buildFusedOps();
  return table;
}

const FusedOpInfo* findFusedOp(std::string_view op_type) {
  for (const FusedOpInfo& op : allFusedOps())
    if (op.name == op_type) return &op;
  return nullptr;
}

std::string fusedSpellingName(std::string_view base, bool bias, bool residual, Activation act) {
  std::string name(base);
  if (!bias) name += kNoBias;
  if (residual) name += kAdd;
  if (act != Activation::None) name += "_" + std::string(activationName(act));
  return name;
}

std::optional<FusedSpelling> decodeFusedSpelling(std::string_view op_type) {
  return decodeFloat32Spelling(splitDTypeSuffix(op_type).first);
}

std::optional<FusedOperandSlots> fusedOperandSlots(std::string_view op_type) {
  const std::optional<FusedSpelling> s = decodeFusedSpelling(op_type);
  if (!s) return std::nullopt;
  FusedOperandSlots slots;
  if (s->plain) {
    slots.bias = 2;
    slots.residual = 3;
    return slots;
  }
  slots.exact_inputs = 2;
  if (s->bias) slots.bias = slots.exact_inputs++;
  if (s->residual) slots.residual = slots.exact_inputs++;
  return slots;
}

std::string elementwiseSpelling(std::string_view program) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char c : program) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{}{:016x}", kElementwisePrefix, h);
}

std::string expandDepthwiseSpelling(Activation expand_activation, Activation activation) {
  return fmt::format("{}{}_{}", kExpandDepthwisePrefix, spelledActivation(expand_activation),
                     spelledActivation(activation));
}

std::optional<std::pair<Activation, Activation>> decodeExpandDepthwiseSpelling(
    std::string_view op_type) {
  if (!consume(op_type, kExpandDepthwisePrefix)) return std::nullopt;
  // Activation names have no '_', so the pair splits at the only one.
  const size_t split = op_type.find('_');
  if (split == std::string_view::npos) return std::nullopt;
  const std::optional<Activation> a = activationSpelledAs(op_type.substr(0, split));
  const std::optional<Activation> b = activationSpelledAs(op_type.substr(split + 1));
  if (!a || !b) return std::nullopt;
  return std::pair{*a, *b};
}

std::string groupNormSpelling(Activation activation) {
  if (activation == Activation::None) return "GroupNorm";
  return fmt::format("{}{}", kGroupNormPrefix, activationName(activation));
}

std::optional<Activation> decodeGroupNormSpelling(std::string_view op_type) {
  if (!consume(op_type, kGroupNormPrefix)) return std::nullopt;
  const std::optional<Activation> a = activationSpelledAs(op_type);
  if (!a || *a == Activation::None) return std::nullopt;  // a plain GroupNorm has no suffix
  return a;
}

std::string_view fusedOpBaseName(std::string_view op_type) {
  const auto [float32_spelling, dtype] = splitDTypeSuffix(op_type);
  if (isElementwiseSpelling(float32_spelling)) return "Elementwise";
  if (decodeExpandDepthwiseSpelling(float32_spelling)) return "ExpandDepthwiseConv";
  if (decodeGroupNormSpelling(float32_spelling)) return "GroupNorm";
  if (dtype && isFloat32Spelling(float32_spelling)) return float32_spelling;
  return op_type;
}

std::optional<DType> fusedSpellingDType(std::string_view op_type) {
  const auto [float32_spelling, dtype] = splitDTypeSuffix(op_type);
  if (!dtype || !isFloat32Spelling(float32_spelling)) return std::nullopt;
  return dtype;
}

std::string fusedDTypeSpelling(std::string_view float32_spelling, DType dtype) {
  std::string name(float32_spelling);
  for (DType t : kSuffixedDTypes)
    if (t == dtype) name += "_" + std::string(dtypeName(t));
  return name;
}

}  // namespace fusectl
