// Every op libonnx knows, and every fusectl op, as a one-node model with inputs of every rank:
// loading, optimizing and running it must end in a result or an Error, never in a crash.
//
// Shape inference hands ops that fusectl has no rule for (and ops whose rule gives up) to
// libonnx's own inference functions. Those assume a model the ONNX checker has passed: they
// index an input's dims before checking its rank, and read input types without a null check.
// The fuzzer found three such crashes one at a time (LabelEncoder, Scan, STFT); this sweep asks
// every schema in the registry, every version, so that the rest are found at once and a newer
// libonnx with new assumptions fails here instead of in a user's `fusectl dump`.
//
// A model that loads is also run as `fusectl run` runs it, and the models run in forked
// children (sweep_harness.h), because a crash is what is being looked for.

#include <algorithm>
#include <cstdint>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include "fusectl/graph/fused_ops.h"
#include "sweep_harness.h"

namespace {

// The input type a sweep gives a formal parameter: float where allowed (most inference functions
// are written against it), else int64, else the alphabetically first allowed type; with
// `unusual`, the alphabetically last one (a string, a uint, a sequence...).
std::string chooseType(const onnx::OpSchema::FormalParameter& p, bool unusual) {
  std::vector<std::string> types;
  for (const auto* t : p.GetTypes()) types.push_back(*t);
  std::sort(types.begin(), types.end());
  if (types.empty()) return {};
  if (unusual) return types.back();
  for (const char* preferred : {"tensor(float)", "tensor(int64)"})
    if (std::find(types.begin(), types.end(), preferred) != types.end()) return preferred;
  return types.front();
}

struct SweepAttribute {
  std::string name;
  onnx::AttributeProto::AttributeType type;
  bool required = false;
};

// Required attributes get a plain value (1, "a", [1]); with `all` set, every attribute gets
// `all` (lists: `all` and its negation).
void setAttributes(const std::vector<SweepAttribute>& attributes, int64_t all,
                   onnx::NodeProto* node) {
  for (const SweepAttribute& attr : attributes) {
    if (!attr.required && all == 0) continue;
    int64_t value = all != 0 ? all : 1;
    auto* a = node->add_attribute();
    a->set_name(attr.name);
    a->set_type(attr.type);
    switch (attr.type) {
      case onnx::AttributeProto::INT: a->set_i(value); break;
      case onnx::AttributeProto::FLOAT: a->set_f(static_cast<float>(value)); break;
      case onnx::AttributeProto::STRING: a->set_s("a"); break;
      case onnx::AttributeProto::INTS:
        a->add_ints(value);
        if (all != 0) a->add_ints(-value);
        break;
      case onnx::AttributeProto::FLOATS: a->add_floats(static_cast<float>(value)); break;
      case onnx::AttributeProto::STRINGS: a->add_strings("a"); break;
      case onnx::AttributeProto::TENSOR:
        a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
        a->mutable_t()->add_float_data(1.0f);
        break;
      default: break;  // graphs, sparse tensors, type protos: left out, the loader refuses
    }
  }
}

// rank < 0: no shape at all; dim < 0: dims of unknown size.
void setType(const std::string& type, int rank, int64_t dim, onnx::ValueInfoProto* info) {
  onnx::TypeProto tp =
      onnx::Utils::DataTypeUtils::ToTypeProto(onnx::Utils::DataTypeUtils::ToType(type));
  if (tp.has_tensor_type()) {
    tp.mutable_tensor_type()->clear_shape();
    if (rank >= 0) {
      auto* shape = tp.mutable_tensor_type()->mutable_shape();
      for (int i = 0; i < rank; ++i) {
        auto* d = shape->add_dim();
        if (dim >= 0) d->set_dim_value(dim);  // else a dim with neither value nor name
      }
    }
  }
  *info->mutable_type() = tp;
}

// An initializer of `type` (a numeric tensor type) and `rank`, 3 elements along each dim,
// holding -1, 0, 2^40, 1, ... (as the type allows): shape-like inputs with values an inference
// function must not trust. False when the type is not a numeric tensor.
bool addConstant(const std::string& type, int rank, const std::string& name,
                 onnx::GraphProto* graph) {
  if (type.rfind("tensor(", 0) != 0) return false;
  std::string elem_name = type.substr(7, type.size() - 8);
  for (char& c : elem_name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  onnx::TensorProto::DataType elem = onnx::TensorProto::UNDEFINED;
  if (!onnx::TensorProto::DataType_Parse(elem_name, &elem)) return false;
  if (elem == onnx::TensorProto::STRING || elem == onnx::TensorProto::UNDEFINED) return false;
  auto* t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(elem);
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    t->add_dims(3);
    count *= 3;
  }
  const int64_t pattern[] = {-1, 0, int64_t{1} << 40, 1, 2};
  for (int64_t i = 0; i < count; ++i) {
    int64_t v = pattern[i % 5];
    switch (elem) {
      case onnx::TensorProto::FLOAT: t->add_float_data(static_cast<float>(v)); break;
      case onnx::TensorProto::DOUBLE: t->add_double_data(static_cast<double>(v)); break;
      case onnx::TensorProto::INT64: t->add_int64_data(v); break;
      case onnx::TensorProto::UINT64: t->add_uint64_data(static_cast<uint64_t>(v)); break;
      default: t->add_int32_data(static_cast<int32_t>(v)); break;  // also fp16/bool bit patterns
    }
  }
  return true;
}

struct Variant {
  std::string label;
  std::vector<int> ranks;  // one per input; -1 unranked
  int64_t dim = 2;  // < 0: unknown
  // An input given as an initializer of rank `ranks[constant_input]` holding -1, 0, 2^40, ...
  int constant_input = -1;
  // Every attribute the schema declares (not only the required ones) set to this value, or to
  // a list of it and its negation; 0 leaves optional attributes out.
  int64_t all_attributes = 0;
  bool unusual_types = false;     // chooseType's `unusual`
  bool optional_absent = false;   // optional inputs named "" (not given)
  size_t max_inputs = SIZE_MAX;   // fewer inputs than the schema asks for
  int absent_input = -1;          // this input named "" (not given), required or not
};

// `required`: how many inputs precede the first optional one.
std::vector<Variant> variantsFor(size_t inputs, size_t required) {
  std::vector<Variant> out;
  for (int r = -1; r <= 5; ++r)
    out.push_back({fmt::format("all inputs rank {}", r), std::vector<int>(inputs, r)});
  out.push_back({"all inputs rank 3 of 0-sized dims", std::vector<int>(inputs, 3), 0});
  out.push_back({"all inputs rank 3 of unknown dims", std::vector<int>(inputs, 3), -1});
  out.push_back({"all inputs rank 4 of 1-sized dims", std::vector<int>(inputs, 4), 1});
  out.push_back({"all inputs rank 2 of 5-sized dims", std::vector<int>(inputs, 2), 5});
  for (int r : {0, 2, 4}) {
    Variant v{fmt::format("all inputs of the last allowed type, rank {}", r),
              std::vector<int>(inputs, r)};
    v.unusual_types = true;
    out.push_back(v);
  }
  Variant absent{"optional inputs absent, the others rank 3", std::vector<int>(inputs, 3)};
  absent.optional_absent = true;
  out.push_back(absent);
  for (size_t n = 0; n < inputs; ++n) {
    Variant fewer{fmt::format("only the first {} inputs, rank 3", n), std::vector<int>(inputs, 3)};
    fewer.max_inputs = n;
    out.push_back(fewer);
  }
  for (size_t j = 0; j < inputs; ++j) {
    for (int r : {-1, 0, 1, 5}) {
      std::vector<int> ranks(inputs, 3);
      ranks[j] = r;
      out.push_back({fmt::format("input {} rank {}, others rank 3", j, r), ranks});
    }
    Variant absent_j{fmt::format("input {} not given, others rank 3", j),
                     std::vector<int>(inputs, 3)};
    absent_j.absent_input = static_cast<int>(j);
    out.push_back(absent_j);
    // Without the trailing optional inputs, which send some inference functions down another
    // path: MaxUnpool reads dim 1 of its indices only when output_shape is not given.
    for (int r : {-1, 0, 1}) {
      if (j >= required || required == inputs) break;
      std::vector<int> ranks(inputs, 3);
      ranks[j] = r;
      Variant v{fmt::format("only the {} required inputs, input {} rank {}, others rank 3",
                            required, j, r),
                ranks};
      v.max_inputs = required;
      out.push_back(v);
    }
    for (int r : {0, 1, 2}) {
      std::vector<int> ranks(inputs, 3);
      ranks[j] = r;
      out.push_back({fmt::format("input {} a constant of rank {}, others rank 3", j, r), ranks, 3,
                     static_cast<int>(j)});
    }
  }
  for (int64_t value : {int64_t{1000}, int64_t{-1000}}) {
    for (int r : {1, 3})
      out.push_back({fmt::format("every attribute {}, inputs rank {}", value, r),
                     std::vector<int>(inputs, r), 2, -1, value});
  }
  return out;
}

struct SweepInput {
  std::string type;          // chooseType(..., false)
  std::string unusual_type;  // chooseType(..., true)
  bool optional = false;
};

// An op as the sweep spells it: from a libonnx schema or from fused_ops.def.
struct SweepOp {
  std::string domain;
  std::string name;
  int version = 1;
  std::vector<SweepInput> inputs;  // variadic ones twice
  size_t outputs = 1;
  std::vector<SweepAttribute> attributes;

  std::string label() const {
    return fmt::format("{}{}{}-{}", domain, domain.empty() ? "" : "::", name, version);
  }
};

// The schema as a one-node model.
std::string modelBytes(const SweepOp& op, const Variant& v) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* opset = model.add_opset_import();
  opset->set_domain(op.domain);
  opset->set_version(op.version);
  if (!op.domain.empty()) {
    auto* onnx_opset = model.add_opset_import();
    onnx_opset->set_domain("");
    onnx_opset->set_version(13);
  }
  auto* graph = model.mutable_graph();
  graph->set_name("sweep");
  auto* node = graph->add_node();
  node->set_op_type(op.name);
  node->set_domain(op.domain);
  node->set_name("n");
  setAttributes(op.attributes, v.all_attributes, node);
  for (size_t i = 0; i < op.inputs.size() && i < v.max_inputs; ++i) {
    const SweepInput& in = op.inputs[i];
    if ((v.optional_absent && in.optional) || static_cast<int>(i) == v.absent_input) {
      node->add_input("");
      continue;
    }
    std::string name = fmt::format("x{}", i);
    node->add_input(name);
    const std::string& type = v.unusual_types ? in.unusual_type : in.type;
    if (static_cast<int>(i) == v.constant_input && addConstant(type, v.ranks[i], name, graph))
      continue;
    setType(type, v.ranks[i], v.dim, graph->add_input());
    graph->mutable_input()->rbegin()->set_name(name);
  }
  for (size_t i = 0; i < op.outputs; ++i) {
    std::string name = fmt::format("y{}", i);
    node->add_output(name);
    graph->add_output()->set_name(name);
  }
  return model.SerializeAsString();
}

// Every variant of `op`, appended to `cases`.
void addCases(const SweepOp& op, std::vector<fusectl::sweep::SweepCase>& cases) {
  size_t required = 0;
  while (required < op.inputs.size() && !op.inputs[required].optional) ++required;
  for (const Variant& v : variantsFor(op.inputs.size(), required))
    cases.push_back(fusectl::sweep::SweepCase::of(fmt::format("{} ({})", op.label(), v.label),
                                                  modelBytes(op, v)));
}

// The schema as the sweep spells it; nullopt when an input has no type the sweep can make.
std::optional<SweepOp> fromSchema(const onnx::OpSchema& schema) {
  SweepOp op;
  op.domain = schema.domain();
  op.name = schema.Name();
  op.version = schema.SinceVersion();
  for (const auto& p : schema.inputs()) {
    size_t copies = p.GetOption() == onnx::OpSchema::Variadic ? 2 : 1;
    SweepInput in{chooseType(p, false), chooseType(p, true),
                  p.GetOption() == onnx::OpSchema::Optional};
    if (in.type.empty()) return std::nullopt;
    for (size_t c = 0; c < copies; ++c) op.inputs.push_back(in);
  }
  op.outputs = std::max<size_t>(1, schema.outputs().size());
  for (const auto& [name, attr] : schema.attributes())
    op.attributes.push_back({name, attr.type, attr.required});
  return op;
}

// A fusectl op (or one spelling of an epilogue op) as the sweep spells it: every input float
// (int64 as the unusual type), every attribute it declares required.
SweepOp fromFusedOp(const fusectl::FusedOpInfo& info, const std::string& spelling) {
  SweepOp op;
  op.domain = fusectl::kFusectlDomain;
  op.name = spelling;
  for (const auto& in : info.inputs)
    op.inputs.push_back({"tensor(float)", "tensor(int64)", in.optional});
  op.outputs = std::max<size_t>(1, info.outputs.size());
  for (const auto& a : info.attributes)
    op.attributes.push_back(
        {std::string(a.name), static_cast<onnx::AttributeProto::AttributeType>(a.kind), true});
  return op;
}

}  // namespace

TEST_CASE("every op libonnx knows, with inputs of every rank, loads and runs or is refused",
          "[shape_inference][onnx_fallback][executor]") {
  std::vector<fusectl::sweep::SweepCase> cases;
  for (const onnx::OpSchema& schema : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
    if (schema.Deprecated()) continue;
    if (std::optional<SweepOp> op = fromSchema(schema)) addCases(*op, cases);
  }
  fusectl::sweep::runAndCheck("libonnx schemas", cases, 25);  // 45% ran when written
}

TEST_CASE("every fusectl op, with inputs of every rank, loads and runs or is refused",
          "[shape_inference][executor]") {
  std::vector<fusectl::sweep::SweepCase> cases;
  for (const fusectl::FusedOpInfo& info : fusectl::allFusedOps()) {
    addCases(fromFusedOp(info, std::string(info.name)), cases);
    if (info.takesEpilogue())
      fusectl::forEachFusedSpelling(info.name, [&](const std::string& spelling) {
        addCases(fromFusedOp(info, spelling), cases);
      });
  }
  // 2.1% ran when written: the inputs of most variants do not fit each other.
  fusectl::sweep::runAndCheck("fusectl ops", cases, 1);
}
