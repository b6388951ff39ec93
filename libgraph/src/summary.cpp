// Model statistics for `fusectl dump`: one pass over every graph, nothing kept from the model.
#include "fusectl/graph/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

namespace fusectl {
namespace {

struct Counter {
  std::map<std::pair<std::string, std::string>, size_t> ops;
  ModelSummary* out;

  void visit(const Graph& g) {
    for (const Value* v : g.initializers()) {
      const Tensor* t = v->initializer();
      if (!t) continue;
      ++out->initializer_count;
      out->initializer_bytes += tensorStoredBytes(*t);
      out->parameter_count += t->numel();
    }
    for (const auto& [key, count] : g.opHistogram()) ops[key] += count;
    out->total_node_count += g.numNodes();
    for (const Node* n : g.nodes()) {
      for (const Attribute& a : n->attributes()) {
        if (a.kind == AttrKind::Graph && a.g) {
          ++out->subgraph_count;
          visit(*a.g);
        } else if (a.kind == AttrKind::Graphs) {
          for (const auto& sub : a.graphs) {
            if (!sub) continue;
            ++out->subgraph_count;
            visit(*sub);
          }
        }
      }
    }
  }
};

ValueSummary summarizeValue(const Value* v) {
  return ValueSummary{v->name(), v->type, v->isInitializer()};
}

// Shortest text that reads back as the same number: 0.1f prints "0.1", not "0.100000001".
std::string formatFloat(float v) { return fmt::format("{}", v); }
std::string formatDouble(double v) { return fmt::format("{}", v); }

template <typename T, typename Fmt>
std::string formatList(const std::vector<T>& items, size_t max_elements, Fmt&& fmt_one) {
  std::string s = "[";
  size_t shown = std::min(items.size(), max_elements);
  for (size_t i = 0; i < shown; ++i) {
    if (i) s += ',';
    s += fmt_one(items[i]);
  }
  if (shown < items.size()) s += fmt::format(",... ({} total)", items.size());
  s += ']';
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string formatTensor(const Tensor& t, size_t max_elements) {
  std::string s = fmt::format("{}[{}]", dtypeName(t.dtype()), fmt::join(t.dims(), ","));
  int64_t n = t.numel();
  if (n < 0 || static_cast<uint64_t>(n) > max_elements) return s;
  if (t.dtype() == DType::String) {
    std::vector<std::string> quoted;
    for (const std::string& str : t.strings()) quoted.push_back(quote(str));
    return fmt::format("{}{{{}}}", s, fmt::join(quoted, ","));
  }
  bool is_float = dtypeIsFloat(t.dtype());
  bool is_int = dtypeIsInteger(t.dtype()) || t.dtype() == DType::Bool;
  if (!is_float && !is_int) return s;
  if (tensorStoredBytes(t) < dtypeStorageBytes(t.dtype(), n)) return s;
  s += '{';
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += ',';
    if (!is_float) {
      s += std::to_string(t.valueAsInt64(i));
    } else if (t.dtype() == DType::Double) {
      s += formatDouble(t.valueAsDouble(i));
    } else {
      s += formatFloat(static_cast<float>(t.valueAsDouble(i)));
    }
  }
  s += '}';
  return s;
}

}  // namespace

uint64_t tensorStoredBytes(const Tensor& t) {
  if (t.dtype() != DType::String) return t.byteSize();
  uint64_t total = 0;
  for (const std::string& s : t.strings()) total += s.size();
  return total;
}

ModelSummary summarizeModel(const Model& model) {
  ModelSummary s;
  s.ir_version = model.ir_version;
  s.producer_name = model.producer_name;
  s.producer_version = model.producer_version;
  s.domain = model.domain;
  s.model_version = model.model_version;
  s.opset_imports = model.opset_imports;
  std::stable_sort(s.opset_imports.begin(), s.opset_imports.end(),
                   [](const OpsetImport& a, const OpsetImport& b) { return a.domain < b.domain; });
  s.function_count = model.functions.size();
  if (!model.graph) return s;

  const Graph& g = *model.graph;
  s.graph_name = g.name;
  for (const Value* v : g.inputs()) s.inputs.push_back(summarizeValue(v));
  for (const Value* v : g.outputs()) s.outputs.push_back(summarizeValue(v));
  s.node_count = g.numNodes();

  Counter counter{{}, &s};
  counter.visit(g);
  for (auto& [key, count] : counter.ops) s.op_histogram.push_back({key.first, key.second, count});
  std::stable_sort(s.op_histogram.begin(), s.op_histogram.end(),
                   [](const OpCount& a, const OpCount& b) { return a.count > b.count; });
  return s;
}

std::string qualifiedOpType(std::string_view domain, std::string_view op_type) {
  if (domain.empty() || domain == "ai.onnx") return std::string(op_type);
  std::string s(domain);
  s += '.';
  s += op_type;
  return s;
}

std::string_view displayDomain(std::string_view domain) {
  return domain.empty() ? std::string_view("ai.onnx") : domain;
}

std::string formatAttributeValue(const Attribute& a, size_t max_elements) {
  auto graph_text = [](const std::unique_ptr<Graph>& g) {
    if (!g) return std::string("graph");
    return g->name.empty() ? std::string("graph") : "graph " + g->name;
  };
  switch (a.kind) {
    case AttrKind::Float: return formatFloat(a.f);
    case AttrKind::Int: return std::to_string(a.i);
    case AttrKind::String: return quote(a.s);
    case AttrKind::Tensor: return formatTensor(a.t, max_elements);
    case AttrKind::Graph: return graph_text(a.g);
    case AttrKind::Floats:
      return formatList(a.floats.vec(), max_elements, [](float f) { return formatFloat(f); });
    case AttrKind::Ints:
      return formatList(a.ints, max_elements, [](int64_t i) { return std::to_string(i); });
    case AttrKind::Strings: return formatList(a.strings.vec(), max_elements, quote);
    case AttrKind::Tensors:
      return formatList(a.tensors.vec(), max_elements,
                        [&](const Tensor& t) { return formatTensor(t, max_elements); });
    case AttrKind::Graphs: return formatList(a.graphs.vec(), max_elements, graph_text);
    default: return fmt::format("<{}>", attrKindName(a.kind));
  }
}

std::string formatByteSize(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

}  // namespace fusectl
