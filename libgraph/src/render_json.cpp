// `fusectl dump --format json`: the layout of docs/schemas/dump.schema.json ("fusectl.dump/1").
//
// The top-level object is written by hand so that the node list can be streamed: each node is
// built as a small JSON object, printed on one line and dropped before the next one.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <ostream>

#include "fusectl/graph/render.h"
#include "fusectl/graph/summary.h"

namespace fusectl {
namespace {

using Json = nlohmann::ordered_json;

// Floats go through their shortest decimal text so that 0.1f is written 0.1, not 0.100000001.
Json floatJson(float f) {
  double d = std::strtod(fmt::format("{}", f).c_str(), nullptr);
  return Json(d);
}

Json dimJson(const Dim& d) {
  if (d.isStatic()) return Json(d.value());
  if (d.isSymbolic()) return Json(d.symbol());
  return Json(nullptr);
}

Json typeFields(Json j, const ValueType& t) {
  j["type"] = t.str();
  if (!t.isTensor() || t.dtype == DType::Undefined) {
    j["dtype"] = nullptr;
  } else {
    j["dtype"] = std::string(dtypeName(t.dtype));
  }
  if (!t.isTensor() || !t.shape.hasRank()) {
    j["shape"] = nullptr;
  } else {
    Json dims = Json::array();
    for (const Dim& d : t.shape.dims()) dims.push_back(dimJson(d));
    j["shape"] = std::move(dims);
  }
  return j;
}

Json valueJson(const Value* v) {
  if (!v) return Json(nullptr);
  Json j = typeFields(Json{{"name", v->name()}}, v->type);
  if (v->isInitializer()) j["initializer"] = true;
  return j;
}

Json valueSummaryJson(const ValueSummary& v) {
  Json j = typeFields(Json{{"name", v.name}}, v.type);
  if (v.is_initializer) j["initializer"] = true;
  return j;
}

Json valueListJson(const std::vector<Value*>& values) {
  Json a = Json::array();
  for (const Value* v : values) a.push_back(valueJson(v));
  return a;
}

Json tensorJson(const Tensor& t) {
  Json j{{"dtype", std::string(dtypeName(t.dtype()))}, {"dims", t.dims()}};
  // Small constants (Reshape targets, axes...) carry their values; the text form has them too.
  constexpr int64_t kMaxValues = 16;
  int64_t n = t.numel();
  if (n < 0 || n > kMaxValues) return j;
  if (t.dtype() == DType::String) {
    j["values"] = t.strings();
    return j;
  }
  bool is_float = dtypeIsFloat(t.dtype());
  bool is_int = dtypeIsInteger(t.dtype()) || t.dtype() == DType::Bool;
  if ((!is_float && !is_int) || tensorStoredBytes(t) < dtypeStorageBytes(t.dtype(), n)) return j;
  Json values = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    if (!is_float) {
      values.push_back(t.valueAsInt64(i));
    } else if (t.dtype() == DType::Double) {
      values.push_back(t.valueAsDouble(i));
    } else {
      values.push_back(floatJson(static_cast<float>(t.valueAsDouble(i))));
    }
  }
  j["values"] = std::move(values);
  return j;
}

Json graphJson(const Graph& g);

Json attributeJson(const Attribute& a) {
  Json j{{"name", a.name}, {"type", std::string(attrKindName(a.kind))}};
  Json& v = j["value"];
  switch (a.kind) {
    case AttrKind::Float: v = floatJson(a.f); break;
    case AttrKind::Int: v = a.i; break;
    case AttrKind::String: v = a.s; break;
    case AttrKind::Tensor: v = tensorJson(a.t); break;
    case AttrKind::Graph: v = a.g ? graphJson(*a.g) : Json(nullptr); break;
    case AttrKind::Floats:
      v = Json::array();
      for (float f : a.floats) v.push_back(floatJson(f));
      break;
    case AttrKind::Ints: v = a.ints; break;
    case AttrKind::Strings: v = a.strings; break;
    case AttrKind::Tensors:
      v = Json::array();
      for (const Tensor& t : a.tensors) v.push_back(tensorJson(t));
      break;
    case AttrKind::Graphs:
      v = Json::array();
      for (const auto& g : a.graphs) v.push_back(g ? graphJson(*g) : Json(nullptr));
      break;
    default: v = nullptr; break;  // sparse tensors and type protos are kept opaque
  }
  return j;
}

Json nodeJson(const Node& n) {
  Json j{{"name", n.name()}, {"op_type", n.opType()}, {"domain", n.domain()}};
  j["inputs"] = valueListJson(n.inputs());
  j["outputs"] = valueListJson(n.outputs());
  if (!n.implicitInputs().empty()) j["implicit_inputs"] = valueListJson(n.implicitInputs());
  Json attrs = Json::array();
  for (const Attribute& a : n.attributes()) attrs.push_back(attributeJson(a));
  j["attributes"] = std::move(attrs);
  return j;
}

// Subgraphs are nested whole inside their attribute.
Json graphJson(const Graph& g) {
  Json j{{"name", g.name}};
  j["inputs"] = valueListJson(g.inputs());
  j["outputs"] = valueListJson(g.outputs());
  j["initializer_count"] = g.initializers().size();
  Json nodes = Json::array();
  for (const Node* n : g.nodes()) nodes.push_back(nodeJson(*n));
  j["nodes"] = std::move(nodes);
  return j;
}

std::string dumpJson(const Json& j) {
  // Invalid UTF-8 in names is replaced rather than thrown on: a dump must not fail on it.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

void renderJson(const Model& model, std::ostream& out, const RenderOptions& options) {
  ModelSummary s = summarizeModel(model);

  Json header{{"ir_version", s.ir_version},
              {"producer_name", s.producer_name},
              {"producer_version", s.producer_version},
              {"domain", s.domain},
              {"model_version", s.model_version}};
  Json opsets = Json::array();
  for (const OpsetImport& o : s.opset_imports) {
    opsets.push_back(Json{{"domain", o.domain}, {"version", o.version}});
  }
  header["opset_imports"] = std::move(opsets);
  Json metadata = Json::object();
  for (const auto& [key, value] : model.metadata_props) metadata[key] = value;
  header["metadata"] = std::move(metadata);
  header["function_count"] = s.function_count;

  Json graph{{"name", s.graph_name}};
  Json inputs = Json::array();
  for (const ValueSummary& v : s.inputs) inputs.push_back(valueSummaryJson(v));
  graph["inputs"] = std::move(inputs);
  Json outputs = Json::array();
  for (const ValueSummary& v : s.outputs) outputs.push_back(valueSummaryJson(v));
  graph["outputs"] = std::move(outputs);

  Json stats{{"node_count", s.node_count},
             {"total_node_count", s.total_node_count},
             {"subgraph_count", s.subgraph_count},
             {"initializer_count", s.initializer_count},
             {"initializer_bytes", s.initializer_bytes},
             {"parameter_count", s.parameter_count}};
  Json histogram = Json::array();
  for (const OpCount& c : s.op_histogram) {
    histogram.push_back(Json{{"domain", c.domain}, {"op_type", c.op_type}, {"count", c.count}});
  }
  stats["op_histogram"] = std::move(histogram);

  out << "{\n";
  out << "  \"schema\": \"" << kDumpSchemaId << "\",\n";
  out << "  \"schema_version\": " << kDumpSchemaVersion << ",\n";
  out << "  \"model\": " << dumpJson(header) << ",\n";
  out << "  \"graph\": " << dumpJson(graph) << ",\n";
  out << "  \"stats\": " << dumpJson(stats);
  if (!options.summary_only && model.graph) {
    out << ",\n  \"nodes\": [";
    const char* sep = "\n    ";
    std::string line;
    for (const Node* n : model.graph->nodes()) {
      line = sep;
      line += dumpJson(nodeJson(*n));
      out.write(line.data(), static_cast<std::streamsize>(line.size()));
      sep = ",\n    ";
    }
    out << (model.graph->numNodes() ? "\n  ]" : "]");
  }
  out << "\n}\n";
}

}  // namespace fusectl
