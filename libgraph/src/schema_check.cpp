// Checks each node against its op's schema when a model is loaded, so that no pass, shape rule
// or kernel meets a Conv with one input, a Div whose first input is empty or a Conv whose
// `strides` is a string.
//
// What is checked, mirroring onnx::OpSchema::Verify:
//  1. the input count lies within the schema's [min, max]; a required (single) input is not
//     empty; nor is an entry of a homogeneous variadic input (Concat, Sum: ONNX leaves that
//     open, but no kernel can read a missing operand);
//  2. the output count lies within [min, max]; a required output is not empty;
//  3. an attribute the schema knows has the schema's type; a required attribute is present;
//     an attribute named as one of the op's inputs (an attribute an older version had, which
//     this one takes as an input and ignores as an attribute) is refused.
// Other attributes the schema does not know stay preserved, as unknown ops do.
//
// Which schema: libonnx's for the standard domains, the newest at or below the model's opset
// for the node's domain. libonnx 1.12 knows ai.onnx up to opset 17; for a newer opset its
// newest schema may predate changes (ReduceMean-18 takes axes as an input, Split-18 gained
// num_outputs), so there only what later opsets never relaxed is checked: the minimum counts,
// empty required inputs and the types of the attributes libonnx knows. The full node-test
// suite (opsets 18 to 25) passes that, but for the ops kRelaxedAfterLibonnx lists. Ops libonnx
// does not know (Gelu-20) and deprecated schemas are not checked. Domain "fusectl" is checked
// against fused_ops.h, including that a dtype-suffixed spelling ("LayerNorm_float16") has that
// element type where the node's type is known. Everything else (com.microsoft, custom domains)
// is preserved unchecked.
#include "fusectl/graph/schema_check.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <climits>
#include <string_view>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/graph.h"

namespace fusectl {
namespace {

// Ops whose inputs a later opset than libonnx knows made optional: OptionalHasElement-18 takes
// none. Checked only at the opsets libonnx knows.
constexpr std::string_view kRelaxedAfterLibonnx[] = {"OptionalHasElement"};

// Ops whose `axes` attribute became an input at opset 18, after libonnx's newest schema: an
// `axes` attribute there is ignored by the op (and by fusectl's kernels), so a pass reading it
// would rewrite a node for axes it does not reduce.
constexpr std::string_view kAxesInputFrom18[] = {
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

// ONNX spells an unchecked implementation detail with two leading underscores.
bool isInternalAttribute(std::string_view name) { return name.rfind("__", 0) == 0; }

std::string countRange(int lo, int hi) {
  if (lo == hi) return std::to_string(lo);
  if (hi == INT_MAX) return fmt::format("at least {}", lo);
  return fmt::format("{} to {}", lo, hi);
}

std::string plural(size_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

class SchemaChecker {
 public:
  explicit SchemaChecker(const Model& model) : model_(model) {}

  std::optional<SchemaViolation> checkGraph(const Graph& g, const std::string& scope) {
    for (const Node* n : g.nodes()) {
      if (std::optional<std::string> reason = checkNode(*n))
        return SchemaViolation{n, scope, std::move(*reason)};
      for (const Attribute& a : n->attributes()) {
        auto sub = [&](const Graph* body) -> std::optional<SchemaViolation> {
          if (!body) return std::nullopt;
          return checkGraph(*body, fmt::format("{}subgraph '{}' of node '{}' ({}): ", scope,
                                               body->name, n->label(), n->opType()));
        };
        if (a.kind == AttrKind::Graph) {
          if (auto v = sub(a.g.get())) return v;
        } else if (a.kind == AttrKind::Graphs) {
          for (const auto& body : a.graphs)
            if (auto v = sub(body.get())) return v;
        }
      }
    }
    return std::nullopt;
  }

 private:
  std::optional<std::string> checkNode(const Node& n) {
    if (n.domain() == kFusectlDomain) return checkFusedNode(n);
    const std::string domain = n.domain() == "ai.onnx" ? std::string() : n.domain();
    const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    auto range = ranges.find(domain);
    if (range == ranges.end()) return std::nullopt;  // a domain libonnx does not define
    const int64_t opset = model_.opsetVersion(domain);
    if (opset < range->second.first) return std::nullopt;  // not imported: the importer's call
    const bool exact = opset <= range->second.second;
    if (!exact && domain.empty()) {
      for (std::string_view op : kRelaxedAfterLibonnx)
        if (n.opType() == op) return std::nullopt;
      if (opset >= 18 && n.hasAttr("axes")) {
        for (std::string_view op : kAxesInputFrom18)
          if (n.opType() == op)
            return fmt::format("attribute 'axes' is an input of {}-18: the op ignores it as an "
                               "attribute",
                               n.opType());
      }
    }
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(
        n.opType(), exact ? static_cast<int>(opset) : range->second.second, domain);
    if (!schema || schema->Deprecated()) return std::nullopt;
    return checkOnnxNode(n, *schema, exact);
  }

  static std::optional<std::string> checkOnnxNode(const Node& n, const onnx::OpSchema& s,
                                                  bool exact) {
    const std::string op = fmt::format("{}-{}", n.opType(), s.since_version());
    const size_t num_in = n.numInputs();
    if (static_cast<int64_t>(num_in) < s.min_input() ||
        (exact && static_cast<int64_t>(num_in) > s.max_input()))
      return fmt::format("{}, but {} takes {}", plural(num_in, "input"), op,
                         countRange(s.min_input(), s.max_input()));
    const auto& formal_in = s.inputs();
    for (size_t i = 0; i < num_in && !formal_in.empty(); ++i) {
      const auto& param = formal_in[std::min(i, formal_in.size() - 1)];
      if (i >= formal_in.size() && param.GetOption() != onnx::OpSchema::Variadic) break;
      if (n.input(i)) continue;
      if (param.GetOption() == onnx::OpSchema::Single)
        return fmt::format("input {} ('{}') is required by {} but empty", i, param.GetName(), op);
      if (param.GetOption() == onnx::OpSchema::Variadic && param.GetIsHomogeneous())
        return fmt::format("input {} (variadic '{}') of {} is empty", i, param.GetName(), op);
    }

    const size_t num_out = n.numOutputs();
    if (static_cast<int64_t>(num_out) < s.min_output() ||
        (exact && static_cast<int64_t>(num_out) > s.max_output()))
      return fmt::format("{}, but {} gives {}", plural(num_out, "output"), op,
                         countRange(s.min_output(), s.max_output()));
    const auto& formal_out = s.outputs();
    for (size_t i = 0; i < num_out && i < formal_out.size(); ++i) {
      if (!n.output(i) && formal_out[i].GetOption() == onnx::OpSchema::Single)
        return fmt::format("output {} ('{}') of {} is required but empty", i,
                           formal_out[i].GetName(), op);
    }

    const auto& known = s.attributes();
    for (const Attribute& a : n.attributes()) {
      if (isInternalAttribute(a.name) || !a.ref_attr_name.empty()) continue;
      auto it = known.find(a.name);
      if (it == known.end()) {
        // A value this version takes as an input (ReduceSum-13's axes, Clip-11's min): given as
        // an attribute it is ignored by the op, but not by a reader of the attribute.
        const bool is_input =
            exact && std::any_of(formal_in.begin(), formal_in.end(),
                                 [&](const auto& param) { return param.GetName() == a.name; });
        if (is_input)
          return fmt::format("attribute '{}' is an input of {}: the op ignores it as an "
                             "attribute",
                             a.name, op);
        continue;
      }
      const AttrKind expected = static_cast<AttrKind>(it->second.type);
      if (a.kind != expected)
        return fmt::format("attribute '{}' is {}, but {} wants {}", a.name, attrKindName(a.kind),
                           op, attrKindName(expected));
    }
    if (exact) {
      for (const auto& [name, attribute] : known) {
        if (attribute.required && !n.hasAttr(name))
          return fmt::format("attribute '{}' is required by {} but missing", name, op);
      }
    }
    return std::nullopt;
  }

  // A dtype-suffixed spelling calls a function that Casts from that type (fused_ops.h), so a
  // node of another type would run a function typed for values it does not have.
  static std::optional<std::string> checkDTypeSuffix(const Node& n) {
    const std::optional<DType> spelled = fusedSpellingDType(n.opType());
    if (!spelled) return std::nullopt;
    auto mismatch = [&](const Value* v, std::string_view which) -> std::optional<std::string> {
      if (v->dtype() == *spelled) return std::nullopt;
      return fmt::format("the spelling is for {} but {} '{}' is {}", dtypeName(*spelled), which,
                         v->name(), dtypeName(v->dtype()));
    };
    if (n.output(0) && n.output(0)->dtype() != DType::Undefined)
      return mismatch(n.output(0), "output 0");
    if (n.input(0) && n.input(0)->dtype() != DType::Undefined)
      return mismatch(n.input(0), "input 0");
    return std::nullopt;  // untyped: shape inference types it later
  }

  static std::optional<std::string> checkFusedNode(const Node& n) {
    const FusedOpInfo* op = findFusedOp(fusedOpBaseName(n.opType()));
    if (!op) {
      std::optional<FusedSpelling> spelling = decodeFusedSpelling(n.opType());
      if (!spelling) return std::nullopt;  // a fusectl op this build does not know
      op = spelling->op;
    }
    const size_t num_in = n.numInputs();
    size_t required = 0;
    for (const FusedOpInput& in : op->inputs) required += in.optional ? 0 : 1;
    if (num_in < required || num_in > op->inputs.size())
      return fmt::format("{}, but fusectl.{} takes {}", plural(num_in, "input"), op->name,
                         countRange(static_cast<int>(required),
                                    static_cast<int>(op->inputs.size())));
    for (size_t i = 0; i < num_in; ++i) {
      if (!n.input(i) && !op->inputs[i].optional)
        return fmt::format("input {} ('{}') is required by fusectl.{} but empty", i,
                           op->inputs[i].name, op->name);
    }
    // Optional outputs may be left off at the end (SkipLayerNorm's Sum).
    size_t required_out = 0;
    for (const FusedOpOutput& out : op->outputs) required_out += out.optional ? 0 : 1;
    if (n.numOutputs() < required_out || n.numOutputs() > op->outputs.size())
      return fmt::format("{}, but fusectl.{} gives {}", plural(n.numOutputs(), "output"),
                         op->name,
                         countRange(static_cast<int>(required_out),
                                    static_cast<int>(op->outputs.size())));
    for (size_t i = 0; i < n.numOutputs(); ++i) {
      if (!n.output(i) && !op->outputs[i].optional)
        return fmt::format("output {} ('{}') of fusectl.{} is required but empty", i,
                           op->outputs[i].name, op->name);
    }
    if (std::optional<std::string> mismatch = checkDTypeSuffix(n)) return mismatch;
    for (const Attribute& a : n.attributes()) {
      if (!a.ref_attr_name.empty()) continue;
      for (const FusedOpAttribute& known : op->attributes) {
        if (known.name == a.name && known.kind != a.kind)
          return fmt::format("attribute '{}' is {}, but fusectl.{} wants {}", a.name,
                             attrKindName(a.kind), op->name, attrKindName(known.kind));
      }
    }
    return std::nullopt;
  }

  const Model& model_;
};

}  // namespace

std::string SchemaViolation::message() const {
  return fmt::format("{}node '{}' ({}): {}", scope, node->label(), node->opType(), reason);
}

std::optional<SchemaViolation> findSchemaViolation(const Model& model) {
  if (!model.graph) return std::nullopt;
  return SchemaChecker(model).checkGraph(*model.graph, "");
}

void checkSchemasOrThrow(const Model& model, const std::string& display_name) {
  if (std::optional<SchemaViolation> v = findSchemaViolation(model))
    throwInvalid(display_name + ": " + v->message());
}

}  // namespace fusectl
