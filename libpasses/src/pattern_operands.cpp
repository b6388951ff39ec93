// What a complete binding must satisfy besides its edges: node conditions (`Conv[group=1]`) and
// leaf operands (`$x:input`, `$w:const`, `0.5`), and which ops take their operands in any order.
//
// Each check comes in two halves: a test that formats nothing, run on every candidate, and the
// reason, built only when someone listens (docs/patterns.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "fusectl/graph/op_schema.h"
#include "fusectl/graph/summary.h"
#include "pattern_internal.h"

namespace fusectl::passes {

namespace {

// Both numeric kinds compare as float, since an attribute is stored as one or the other.
bool attributeMatches(const Attribute& have, const Attribute& want) {
  auto numbers = [](const Attribute& a, std::vector<double>& out) {
    switch (a.kind) {
      case AttrKind::Int: out = {static_cast<double>(a.i)}; return true;
      case AttrKind::Float: out = {static_cast<double>(a.f)}; return true;
      case AttrKind::Ints: out.assign(a.ints.begin(), a.ints.end()); return true;
      case AttrKind::Floats: out.assign(a.floats.begin(), a.floats.end()); return true;
      default: return false;
    }
  };
  if (want.kind == AttrKind::String) return have.kind == AttrKind::String && have.s == want.s;
  const bool want_list = want.kind == AttrKind::Ints || want.kind == AttrKind::Floats;
  const bool have_list = have.kind == AttrKind::Ints || have.kind == AttrKind::Floats;
  std::vector<double> h, w;
  if (want_list != have_list || !numbers(have, h) || !numbers(want, w)) return false;
  if (h.size() != w.size()) return false;
  for (size_t i = 0; i < h.size(); ++i)
    if (static_cast<float>(h[i]) != static_cast<float>(w[i])) return false;
  return true;
}

// The node's attribute, or its ONNX schema default (kept in `by_default`); nullptr when neither.
const Attribute* attributeOrDefault(const Node& n, const std::string& name,
                                    std::optional<Attribute>& by_default) {
  if (const Attribute* have = n.attr(name)) return have;
  by_default = schemaDefaultAttribute(n.opType(), n.domain(), name);
  return by_default ? &*by_default : nullptr;
}

DType outputDType(const Node& n) {
  const Value* out = n.output(0);
  return out ? out->dtype() : DType::Undefined;
}

// A constant's elements as doubles, read in place: an initializer, or a Constant node's value
// (`value` tensor, or value_float(s) / value_int(s)).
class ConstantElements {
 public:
  explicit ConstantElements(const Value& v) {
    if (v.isConstant()) {
      tensor_ = v.initializer();
      return;
    }
    const Node* p = v.producer();
    if (!p || !p->domain().empty() || p->opType() != "Constant") return;
    for (const Attribute& a : p->attributes()) {
      if (a.name == "value" && a.kind == AttrKind::Tensor) tensor_ = &a.t.tensor();
      if (a.name == "value_float" || a.name == "value_int" || a.name == "value_floats" ||
          a.name == "value_ints") {
        attr_ = &a;
      }
    }
  }

  bool known() const { return tensor_ || attr_; }
  DType dtype() const {
    if (tensor_) return tensor_->dtype();
    return attr_->kind == AttrKind::Float || attr_->kind == AttrKind::Floats ? DType::Float
                                                                            : DType::Int64;
  }
  bool numeric() const { return attr_ || (tensor_ && tensor_->dtype() != DType::String); }
  int64_t count() const {
    if (tensor_) return tensor_->numel();
    switch (attr_->kind) {
      case AttrKind::Floats: return static_cast<int64_t>(attr_->floats.size());
      case AttrKind::Ints: return static_cast<int64_t>(attr_->ints.size());
      default: return 1;
    }
  }
  double at(int64_t i) const {
    if (tensor_) return tensor_->valueAsDouble(i);
    switch (attr_->kind) {
      case AttrKind::Float: return attr_->f;
      case AttrKind::Int: return static_cast<double>(attr_->i);
      case AttrKind::Floats: return attr_->floats[static_cast<size_t>(i)];
      default: return static_cast<double>(attr_->ints[static_cast<size_t>(i)]);
    }
  }

 private:
  const Tensor* tensor_ = nullptr;
  const Attribute* attr_ = nullptr;
};

bool isConstantValue(const Value& v) { return ConstantElements(v).known(); }

// Equal within the rounding of the constant's own dtype: exporters store roundings (float32
// sqrt(2), float16 0.044715), which a pattern writes as the exact number. Integers and bools
// compare exactly.
bool withinRounding(double have, double want, DType stored) {
  double tolerance = 0;
  switch (stored) {
    case DType::Float: tolerance = 1e-6; break;
    case DType::Double: tolerance = 1e-12; break;
    case DType::Float16: tolerance = 1e-3; break;
    case DType::BFloat16: tolerance = 8e-3; break;
    default: return have == want;
  }
  return std::fabs(have - want) <= tolerance * std::fabs(want);
}

// The index of the first element that differs from `want`, or -1 when all are equal.
int64_t firstDifferent(const ConstantElements& c, double want) {
  const DType d = c.dtype();
  for (int64_t i = 0, n = c.count(); i < n; ++i)
    if (!withinRounding(c.at(i), want, d)) return i;
  return -1;
}

bool constantEquals(const Value& v, double want) {
  ConstantElements c(v);
  return c.known() && c.numeric() && c.count() > 0 && firstDifferent(c, want) < 0;
}

}  // namespace

bool isCommutativeOp(std::string_view op_type) {
  // ONNX ops whose result does not depend on the order of their inputs (the variadic ones,
  // Max/Min/Sum/Mean, included).
  static constexpr std::string_view kCommutative[] = {
      "Add", "And", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Equal", "Max",
      "Mean", "Min", "Mul",        "Or",         "Sum",        "Xor"};
  return std::find(std::begin(kCommutative), std::end(kCommutative), op_type) !=
         std::end(kCommutative);
}

bool PatternNode::commutative() const {
  if (operands.size() < 2 || op_types.empty() || !normDomain(domain).empty()) return false;
  return std::all_of(op_types.begin(), op_types.end(),
                     [](const std::string& op) { return isCommutativeOp(op); });
}

bool conditionHolds(const NodeCondition& c, const Node& n) {
  if (c.attribute.empty()) {
    return std::find(c.dtypes.begin(), c.dtypes.end(), outputDType(n)) != c.dtypes.end();
  }
  std::optional<Attribute> by_default;
  const Attribute* have = attributeOrDefault(n, c.attribute, by_default);
  return have && attributeMatches(*have, c.value);
}

std::string conditionFailure(const NodeCondition& c, const Node& n) {
  if (c.attribute.empty()) {
    const DType d = outputDType(n);
    return fmt::format("{} output is {}, the pattern wants {}", n.label(),
                       d == DType::Undefined ? "of unknown type" : dtypeName(d),
                       dtypesText(c.dtypes));
  }
  std::optional<Attribute> by_default;
  const Attribute* have = attributeOrDefault(n, c.attribute, by_default);
  if (!have) {
    return fmt::format("{} has no attribute '{}', and its ONNX schema gives no default",
                       n.label(), c.attribute);
  }
  return fmt::format("{} has {}={}{}, the pattern wants {}", n.label(), c.attribute,
                     formatAttributeValue(*have, 8), by_default ? " (the default)" : "",
                     conditionText(c));
}

std::string conditionName(const NodeCondition& c, const PatternNode& pn) {
  const std::string who = pn.capture.empty() ? opsText(pn) : pn.capture;
  return c.attribute.empty() ? "dtype:" + who : "attr:" + who + "." + c.attribute;
}

bool leafFits(const PatternLeaf& leaf, const Value* v) {
  if (!v) return false;
  if (leaf.equals) return constantEquals(*v, *leaf.equals);
  switch (leaf.kind) {
    case LeafKind::GraphInput: return v->isGraphInput();
    case LeafKind::Constant: return isConstantValue(*v);
    case LeafKind::Any: break;
  }
  return true;
}

std::string leafFailure(const PatternLeaf& leaf, const Node& n, size_t slot, const Value* v) {
  const std::string at = fmt::format("{} input {}", n.label(), slot);
  if (!v) {
    return slot < n.numInputs() ? at + " is absent"
                                : fmt::format("{} has no input {}", n.label(), slot);
  }
  if (leaf.kind == LeafKind::GraphInput && !leaf.equals) {
    return fmt::format("{}: {}, not a graph input", at, valueOrigin(*v));
  }
  ConstantElements c(*v);
  if (!c.known()) return fmt::format("{}: {}, not a constant", at, valueOrigin(*v));
  if (!leaf.equals) return "";  // a constant: it fits
  const std::string want = numberText(*leaf.equals);
  if (!c.numeric()) return fmt::format("{}: '{}' is a string constant, the pattern wants {}", at,
                                       v->name(), want);
  if (c.count() == 0) {
    return fmt::format("{}: '{}' has no elements, the pattern wants {}", at, v->name(), want);
  }
  // An element as its dtype holds it: a float32 0.1 reads "0.1", not 0.10000000149011612.
  auto element = [&](int64_t i) {
    const DType d = c.dtype();
    const bool single = d == DType::Float || d == DType::Float16 || d == DType::BFloat16;
    return single ? fmt::format("{}", static_cast<float>(c.at(i))) : fmt::format("{}", c.at(i));
  };
  if (c.count() == 1) {
    return fmt::format("{}: '{}' is {}, the pattern wants {}", at, v->name(), element(0), want);
  }
  const int64_t i = firstDifferent(c, *leaf.equals);
  return fmt::format("{}: '{}' has element {} = {} (of {}), the pattern wants every one {}", at,
                     v->name(), i, element(i), c.count(), want);
}

std::string valueOrigin(const Value& v) {
  if (const Node* p = v.producer()) return fmt::format("'{}' is computed by {}", v.name(), p->label());
  if (v.isGraphInput()) return fmt::format("'{}' is a graph input", v.name());
  if (v.isInitializer()) return fmt::format("'{}' is a constant", v.name());
  if (v.kind() == Value::Kind::OuterRef) return fmt::format("'{}' comes from an outer graph", v.name());
  return fmt::format("'{}' has no producer", v.name());
}

}  // namespace fusectl::passes
