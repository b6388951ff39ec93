// Type and shape inference driver: walks graphs in topological order and runs one rule per node.
//
// Each node goes to fusectl's own rule for its op when there is one (shape_rules/), else to
// libonnx's per-node inference, else its outputs are left as they were. Nothing here throws on
// a bad model: inconsistencies become warnings in ShapeInferenceStats. The fast path (an op with
// a rule, float tensors) allocates only the output shapes, so a million-node chain takes well
// under a second.
#include "fusectl/graph/shape_inference.h"

#include <algorithm>

#include <fmt/format.h>

#include "fusectl/graph/captured_value.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "shape_rules/rules.h"

namespace fusectl {
namespace shape_rules {

namespace {
constexpr size_t kMaxWarnings = 200;

bool isIntegerLike(DType t) { return dtypeIsInteger(t) || t == DType::Bool; }

// Constant's value_int / value_ints / value_float / value_floats as a tensor.
std::optional<Tensor> constantAttrTensor(const Node& n) {
  for (const Attribute& a : n.attributes()) {
    if (a.name == "value_int") return Tensor::fromValues<int64_t>(DType::Int64, {}, {a.i});
    if (a.name == "value_ints")
      return Tensor::fromValues<int64_t>(DType::Int64, {static_cast<int64_t>(a.ints.size())},
                                         a.ints);
    if (a.name == "value_float") return Tensor::fromValues<float>(DType::Float, {}, {a.f});
    if (a.name == "value_floats")
      return Tensor::fromValues<float>(DType::Float, {static_cast<int64_t>(a.floats.size())},
                                       a.floats);
  }
  return std::nullopt;
}
}  // namespace

void RuleRegistry::add(std::string_view domain, std::string_view op_type, RuleFn fn) {
  if (domain.empty() || domain == "ai.onnx") onnx_[op_type] = fn;
  else other_[std::string(domain) + "/" + std::string(op_type)] = fn;
}

RuleFn RuleRegistry::find(std::string_view domain, std::string_view op_type) const {
  if (domain.empty() || domain == "ai.onnx") {
    auto it = onnx_.find(op_type);
    return it == onnx_.end() ? nullptr : it->second;
  }
  // A spelled fusectl op (an Elementwise program's function name) has its base op's rule.
  const std::string_view op = domain == kFusectlDomain ? fusedOpBaseName(op_type) : op_type;
  auto it = other_.find(std::string(domain) + "/" + std::string(op));
  return it == other_.end() ? nullptr : it->second;
}

const RuleRegistry& ruleRegistry() {
  static const RuleRegistry registry = [] {
    RuleRegistry r;
    registerElementwiseRules(r);
    registerNnRules(r);
    registerLinalgRules(r);
    registerTensorRules(r);
    registerReduceRules(r);
    registerQuantizeRules(r);
    registerMiscRules(r);
    registerControlFlowRules(r);
    registerFusectlOpRules(r);
    registerStdTransformerOpRules(r);
    registerNewerOnnxOpRules(r);
    return r;
  }();
  return registry;
}

const ValueType RuleContext::kAbsent{};

std::optional<std::vector<int64_t>> RuleContext::inInts(size_t i) const {
  const KnownValues* kv = inValues(i);
  if (!kv || !kv->allStatic()) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(kv->elems.size());
  for (const Dim& d : kv->elems) out.push_back(d.value());
  return out;
}

std::optional<std::vector<double>> RuleContext::inDoubles(size_t i) const {
  const Tensor* t = inConstant(i);
  if (t && t->dtype() != DType::String && (dtypeIsFloat(t->dtype()) || isIntegerLike(t->dtype()))) {
    std::vector<double> out;
    for (int64_t k = 0; k < t->numel(); ++k) out.push_back(t->valueAsDouble(k));
    return out;
  }
  if (auto ints = inInts(i)) return std::vector<double>(ints->begin(), ints->end());
  return std::nullopt;
}

InferenceState::InferenceState(const Model& m, const ShapeInferenceOptions& o,
                               ShapeInferenceStats& s)
    : model(m), options(o), stats(s), rules_(ruleRegistry()) {
  onnx_opset_ = model.opsetVersion("");
}

int64_t InferenceState::opsetOf(const std::string& domain) {
  if (domain.empty()) return onnx_opset_;
  for (const auto& [d, v] : opsets_)
    if (d == domain) return v;
  opsets_.emplace_back(domain, model.opsetVersion(domain));
  return opsets_.back().second;
}

void InferenceState::warn(const Node* n, const std::string& message) {
  if (stats.warnings.size() >= kMaxWarnings) {
    ++suppressed_warnings_;
    return;
  }
  stats.warnings.push_back(n ? fmt::format("{} ({}): {}", n->label(), n->opType(), message)
                             : message);
}

const Tensor* InferenceState::constantOf(const Value* v) {
  v = capturedValue(v);
  // Initializers that are also graph inputs (IR < 4) are used too, as libonnx does: their
  // data is the model's own default.
  if (const Tensor* t = v->initializer()) return t;
  const Node* p = v->producer();
  if (!p || !p->is("Constant")) return nullptr;
  if (const Attribute* a = p->attr("value"); a && a->kind == AttrKind::Tensor)
    return &a->t.tensor();
  auto cached = synthesized_.find(v);
  if (cached != synthesized_.end()) return &cached->second;
  if (auto t = constantAttrTensor(*p)) return &synthesized_.emplace(v, std::move(*t)).first->second;
  return nullptr;
}

const KnownValues* InferenceState::knownValuesOf(const Value* v) {
  v = capturedValue(v);
  auto it = known_.find(v);
  if (it != known_.end()) return &it->second;
  const Tensor* t = constantOf(v);
  if (!t || !isIntegerLike(t->dtype()) || t->dims().size() > 1 || t->numel() < 0 ||
      static_cast<size_t>(t->numel()) > kMaxKnownValues)
    return nullptr;
  KnownValues kv;
  kv.scalar = t->dims().empty();
  for (int64_t k = 0; k < t->numel(); ++k) kv.elems.push_back(Dim::known(t->valueAsInt64(k)));
  return &known_.emplace(v, std::move(kv)).first->second;
}

// Overwrite: the inferred type wins, but a dim it leaves unknown keeps a known value of the
// same rank (value_info often knows more than any rule can). Fill: the existing type wins and
// only its unknown parts are filled in.
void InferenceState::assign(Value* v, ValueType inferred) {
  if (inferred.shape.hasRank()) {
    for (Dim& d : inferred.shape.dims()) {
      if (d.isStatic() && d.value() < 0) {
        warn(v->producer(), fmt::format("negative dim {} inferred for '{}'", d.value(), v->name()));
        d = Dim::unknown();
      }
    }
  }
  ValueType& t = v->type;
  if (!t.isTensor() && inferred.isTensor()) return;  // keep sequences/optionals as declared
  if (t.dtype == DType::Undefined && !t.shape.hasRank() && t.isTensor()) {
    t = std::move(inferred);
    return;
  }
  bool overwrite = options.overwrite;
  if (inferred.dtype != DType::Undefined && (overwrite || t.dtype == DType::Undefined))
    t.dtype = inferred.dtype;
  if (!inferred.isTensor() && (overwrite || t.isTensor())) t.opaque_type_proto = inferred.opaque_type_proto;
  Shape& old = t.shape;
  Shape& inf = inferred.shape;
  if (!inf.hasRank()) return;
  if (!old.hasRank()) {
    old = std::move(inf);
    return;
  }
  if (old.rank() != inf.rank()) {
    if (overwrite) old = std::move(inf);
    else warn(v->producer(), fmt::format("'{}' is declared {} but inferred {}", v->name(),
                                          old.str(), inf.str()));
    return;
  }
  for (size_t i = 0; i < old.rank(); ++i) {
    Dim& o = old[i];
    Dim& n = inf[i];
    if (n.isUnknown()) continue;
    if (o.isUnknown() || overwrite) {
      o = std::move(n);
    } else if (o.isStatic() && n.isStatic() && o.value() != n.value()) {
      warn(v->producer(), fmt::format("'{}' is declared {} but inferred {}", v->name(),
                                      old.str(), inferred.shape.str()));
    }
  }
}

void InferenceState::inferGraph(Graph& g) {
  for (Value* r : g.outerRefs())
    if (Value* outer = r->outerValue()) assign(r, outer->type);
  for (Node* n : g.nodes()) inferNode(n);
}

void InferenceState::inferNode(Node* n) {
  int64_t opset = opsetOf(n->domain());
  RuleContext ctx(*this, *n, opset);
  try {
    if (RuleFn rule = rules_.find(n->domain(), n->opType())) {
      if (rule(ctx)) {
        ++stats.nodes_inferred;
        return;
      }
    }
    // Other ops' subgraphs still get types for their own values.
    for (const Attribute& a : n->attributes()) {
      if (a.g) inferGraph(*a.g);
      for (const auto& sub : a.graphs)
        if (sub) inferGraph(*sub);
    }
    if (options.onnx_fallback && inferWithOnnx(ctx)) {
      ++stats.nodes_fallback;
      return;
    }
  } catch (const std::exception& e) {
    warn(n, e.what());
  }
  ++stats.nodes_unknown;
}

void clearNodeOutputShapes(Graph& g) {
  for (Node* n : g.nodes()) {
    for (Value* v : n->outputs())
      if (v) v->type.shape = Shape();
    for (Attribute& a : n->mutableAttributes()) {
      if (a.g) clearNodeOutputShapes(*a.g);
      for (auto& sub : a.graphs)
        if (sub) clearNodeOutputShapes(*sub);
    }
  }
}

}  // namespace shape_rules

ShapeInferenceStats inferShapes(Model& model, const ShapeInferenceOptions& options) {
  ShapeInferenceStats stats;
  shape_rules::InferenceState state(model, options, stats);
  state.inferGraph(*model.graph);
  if (size_t more = state.suppressedWarnings())
    stats.warnings.push_back(fmt::format("... and {} more warnings", more));
  return stats;
}

ShapeInferenceStats setInputShapesAndInfer(
    Model& model, const std::vector<std::pair<std::string, Shape>>& input_shapes,
    const ShapeInferenceOptions& options) {
  Graph& g = *model.graph;
  std::vector<std::string> warnings;
  bool changed = false;
  for (const auto& entry : input_shapes) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in the lambda.
    const std::string& name = entry.first;
    const Shape& shape = entry.second;
    auto it = std::find_if(g.inputs().begin(), g.inputs().end(),
                           [&](const Value* v) { return v->name() == name; });
    if (it == g.inputs().end()) {
      std::string valid;
      for (const Value* v : g.inputs()) {
        if (v->isInitializer()) continue;
        valid += valid.empty() ? "" : ", ";
        valid += v->name();
      }
      throw Error(ErrorKind::Usage, fmt::format("--shape: the model has no input '{}' (inputs: {})",
                                                name, valid.empty() ? "none" : valid));
    }
    Value* v = *it;
    const Shape& old = v->type.shape;
    if (!shape.hasRank())
      throw Error(ErrorKind::Usage, fmt::format("--shape: no shape given for input '{}'", name));
    if (old.hasRank() && old.rank() != shape.rank())
      throw Error(ErrorKind::Usage,
                  fmt::format("--shape: input '{}' has rank {} ({}), but {} has rank {}", name,
                              old.rank(), old.str(), shape.str(), shape.rank()));
    for (size_t i = 0; old.hasRank() && i < old.rank(); ++i) {
      if (old[i].isStatic() && shape[i].isStatic() && old[i].value() != shape[i].value())
        warnings.push_back(fmt::format("input '{}': dim {} is {} in the model, set to {}", name,
                                       i, old[i].value(), shape[i].value()));
    }
    if (old != shape) changed = true;
    v->type.shape = shape;
  }
  // Shapes inferred from the old input shapes (or value_info written for them) are stale;
  // dtypes do not depend on shapes and stay.
  if (changed) shape_rules::clearNodeOutputShapes(g);
  ShapeInferenceStats stats = inferShapes(model, options);
  stats.warnings.insert(stats.warnings.begin(), warnings.begin(), warnings.end());
  return stats;
}

// Every rule handles all versions of its op, so the opset does not matter here.
bool hasShapeRule(std::string_view domain, std::string_view op_type, int64_t /*opset*/) {
  return shape_rules::ruleRegistry().find(domain, op_type) != nullptr;
}

}  // namespace fusectl
