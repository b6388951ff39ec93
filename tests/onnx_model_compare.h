// Semantic comparison of two ONNX ModelProtos, for round-trip tests of fusectl's ONNX I/O.
//
// "Same graph" means: same model fields, opsets and metadata; same nodes in the same order
// (or, when the original was not topologically sorted, the same set of nodes) with the same
// op types, domains, names, inputs, outputs and attributes; initializers in the same order with
// identical bits once typed fields are normalized to raw little-endian bytes; same graph inputs
// and outputs with the same types. value_info is not compared: it is derived data that fusectl
// rewrites from its own types.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/shape.h"

namespace onnx_compare {

inline std::string serializedBytes(const google::protobuf::MessageLite& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

// Tensor data as raw little-endian bytes (strings joined with their lengths), or "" plus a
// note when the tensor lives in external data.
inline std::string normalizedData(const onnx::TensorProto& t) {
  using fusectl::DType;
  if (t.data_type() == static_cast<int>(DType::String)) {
    std::string out;
    for (const auto& s : t.string_data()) out += std::to_string(s.size()) + ":" + s;
    return out;
  }
  if (t.has_raw_data()) return t.raw_data();
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  switch (static_cast<DType>(t.data_type())) {
    case DType::Float:
    case DType::Complex64:
      for (float v : t.float_data()) put(&v, 4);
      break;
    case DType::Double:
    case DType::Complex128:
      for (double v : t.double_data()) put(&v, 8);
      break;
    case DType::Int64:
      for (int64_t v : t.int64_data()) put(&v, 8);
      break;
    case DType::UInt64:
      for (uint64_t v : t.uint64_data()) put(&v, 8);
      break;
    case DType::UInt32:
      for (uint64_t v : t.uint64_data()) {
        auto w = static_cast<uint32_t>(v);
        put(&w, 4);
      }
      break;
    case DType::Int32:
      for (int32_t v : t.int32_data()) put(&v, 4);
      break;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
      for (int32_t v : t.int32_data()) {
        auto w = static_cast<uint16_t>(v);
        put(&w, 2);
      }
      break;
    default:
      for (int32_t v : t.int32_data()) {
        auto w = static_cast<uint8_t>(v);
        put(&w, 1);
      }
  }
  return out;
}

inline std::string compareTensor(const onnx::TensorProto& a, const onnx::TensorProto& b,
                                 const std::string& where, bool compare_name) {
  if (compare_name && a.name() != b.name())
    return fmt::format("{}: tensor name '{}' vs '{}'", where, a.name(), b.name());
  if (a.data_type() != b.data_type())
    return fmt::format("{}: data_type {} vs {}", where, a.data_type(), b.data_type());
  if (std::vector<int64_t>(a.dims().begin(), a.dims().end()) !=
      std::vector<int64_t>(b.dims().begin(), b.dims().end()))
    return fmt::format("{}: dims differ", where);
  if (normalizedData(a) != normalizedData(b)) return fmt::format("{}: tensor data differs", where);
  if (a.doc_string() != b.doc_string()) return fmt::format("{}: tensor doc_string differs", where);
  return "";
}

// Types as fusectl reads them: symbolic dims canonicalized, negative dim values unknown.
inline std::string typeKey(const onnx::ValueInfoProto& v) {
  if (!v.has_type()) return "none";
  const auto& t = v.type();
  if (!t.has_tensor_type()) return "opaque:" + serializedBytes(t);
  std::string key = std::to_string(t.tensor_type().elem_type());
  if (!t.tensor_type().has_shape()) return key + "[?rank]";
  key += "[";
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      key += std::to_string(d.dim_value());
    else if (d.has_dim_param())
      key += fusectl::Dim::symbolic(d.dim_param()).str();
    else
      key += "?";
    key += ",";
  }
  return key + "]";
}

inline std::string compareGraph(const onnx::GraphProto& a, const onnx::GraphProto& b,
                                const std::string& where, bool compare_types);

inline int attributeType(const onnx::AttributeProto& a) {
  if (a.has_type() && a.type() != onnx::AttributeProto::UNDEFINED) return a.type();
  // IR < 3: the filled field says what it is.
  if (a.has_f()) return onnx::AttributeProto::FLOAT;
  if (a.has_i()) return onnx::AttributeProto::INT;
  if (a.has_s()) return onnx::AttributeProto::STRING;
  if (a.has_t()) return onnx::AttributeProto::TENSOR;
  if (a.has_g()) return onnx::AttributeProto::GRAPH;
  if (a.floats_size()) return onnx::AttributeProto::FLOATS;
  if (a.ints_size()) return onnx::AttributeProto::INTS;
  if (a.strings_size()) return onnx::AttributeProto::STRINGS;
  if (a.tensors_size()) return onnx::AttributeProto::TENSORS;
  if (a.graphs_size()) return onnx::AttributeProto::GRAPHS;
  return onnx::AttributeProto::UNDEFINED;
}

inline std::string compareAttribute(const onnx::AttributeProto& a, const onnx::AttributeProto& b,
                                    const std::string& where, bool compare_types) {
  using AP = onnx::AttributeProto;
  std::string at = where + " attribute '" + a.name() + "'";
  if (a.name() != b.name()) return fmt::format("{}: name vs '{}'", at, b.name());
  int type = attributeType(a);
  if (type != attributeType(b)) return fmt::format("{}: type {} vs {}", at, type, attributeType(b));
  if (a.doc_string() != b.doc_string() || a.ref_attr_name() != b.ref_attr_name())
    return at + ": doc_string or ref_attr_name differs";
  auto bitsEqual = [](float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; };
  switch (type) {
    case AP::FLOAT:
      if (!bitsEqual(a.f(), b.f())) return fmt::format("{}: {} vs {}", at, a.f(), b.f());
      break;
    case AP::INT:
      if (a.i() != b.i()) return fmt::format("{}: {} vs {}", at, a.i(), b.i());
      break;
    case AP::STRING:
      if (a.s() != b.s()) return at + ": string differs";
      break;
    case AP::TENSOR: return compareTensor(a.t(), b.t(), at, false);
    case AP::GRAPH: return compareGraph(a.g(), b.g(), at, compare_types);
    case AP::FLOATS:
      if (a.floats_size() != b.floats_size()) return at + ": floats count differs";
      for (int i = 0; i < a.floats_size(); ++i)
        if (!bitsEqual(a.floats(i), b.floats(i))) return at + ": floats differ";
      break;
    case AP::INTS:
      if (std::vector<int64_t>(a.ints().begin(), a.ints().end()) !=
          std::vector<int64_t>(b.ints().begin(), b.ints().end()))
        return at + ": ints differ";
      break;
    case AP::STRINGS:
      if (std::vector<std::string>(a.strings().begin(), a.strings().end()) !=
          std::vector<std::string>(b.strings().begin(), b.strings().end()))
        return at + ": strings differ";
      break;
    case AP::TENSORS:
      if (a.tensors_size() != b.tensors_size()) return at + ": tensor count differs";
      for (int i = 0; i < a.tensors_size(); ++i)
        if (auto d = compareTensor(a.tensors(i), b.tensors(i), at, false); !d.empty()) return d;
      break;
    case AP::GRAPHS:
      if (a.graphs_size() != b.graphs_size()) return at + ": graph count differs";
      for (int i = 0; i < a.graphs_size(); ++i)
        if (auto d = compareGraph(a.graphs(i), b.graphs(i), at, compare_types); !d.empty())
          return d;
      break;
    default:
      if (serializedBytes(a.sparse_tensor()) != serializedBytes(b.sparse_tensor()) ||
          serializedBytes(a.tp()) != serializedBytes(b.tp()) ||
          a.sparse_tensors_size() != b.sparse_tensors_size() ||
          a.type_protos_size() != b.type_protos_size())
        return at + ": value differs";
  }
  return "";
}

inline std::string normalizedDomain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

inline std::string compareNode(const onnx::NodeProto& a, const onnx::NodeProto& b,
                               const std::string& where, bool compare_types) {
  std::string at = fmt::format("{} node '{}' ({})", where, a.name(), a.op_type());
  if (a.op_type() != b.op_type() || normalizedDomain(a.domain()) != normalizedDomain(b.domain()))
    return fmt::format("{}: op {}.{} vs {}.{}", at, a.domain(), a.op_type(), b.domain(),
                       b.op_type());
  if (a.name() != b.name()) return fmt::format("{}: name vs '{}'", at, b.name());
  if (a.doc_string() != b.doc_string()) return at + ": doc_string differs";
  if (std::vector<std::string>(a.input().begin(), a.input().end()) !=
      std::vector<std::string>(b.input().begin(), b.input().end()))
    return fmt::format("{}: inputs [{}] vs [{}]", at, fmt::join(a.input(), ","),
                       fmt::join(b.input(), ","));
  if (std::vector<std::string>(a.output().begin(), a.output().end()) !=
      std::vector<std::string>(b.output().begin(), b.output().end()))
    return fmt::format("{}: outputs [{}] vs [{}]", at, fmt::join(a.output(), ","),
                       fmt::join(b.output(), ","));
  if (a.attribute_size() != b.attribute_size()) return at + ": attribute count differs";
  for (int i = 0; i < a.attribute_size(); ++i)
    if (auto d = compareAttribute(a.attribute(i), b.attribute(i), at, compare_types); !d.empty())
      return d;
  return "";
}

// Every name a node reads, its subgraphs' reads included.
inline void namesRead(const onnx::NodeProto& n, std::set<std::string>& out) {
  for (const auto& i : n.input()) out.insert(i);
  for (const auto& a : n.attribute()) {
    auto visit = [&](const onnx::GraphProto& g) {
      for (const auto& sub : g.node()) namesRead(sub, out);
      for (const auto& o : g.output()) out.insert(o.name());
    };
    if (a.has_g()) visit(a.g());
    for (const auto& g : a.graphs()) visit(g);
  }
}

inline bool isTopologicallySorted(const onnx::GraphProto& g) {
  std::set<std::string> produced;
  for (const auto& n : g.node())
    for (const auto& o : n.output()) produced.insert(o);
  std::set<std::string> seen;
  for (const auto& n : g.node()) {
    std::set<std::string> reads;
    namesRead(n, reads);
    for (const auto& i : reads)
      if (produced.count(i) && !seen.count(i)) return false;
    for (const auto& o : n.output()) seen.insert(o);
  }
  return true;
}

inline std::string compareValueInfos(
    const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& a,
    const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& b, const std::string& at,
    bool compare_types) {
  if (a.size() != b.size()) return fmt::format("{}: count {} vs {}", at, a.size(), b.size());
  for (int i = 0; i < a.size(); ++i) {
    if (a.Get(i).name() != b.Get(i).name())
      return fmt::format("{} #{}: '{}' vs '{}'", at, i, a.Get(i).name(), b.Get(i).name());
    if (compare_types && typeKey(a.Get(i)) != typeKey(b.Get(i)))
      return fmt::format("{} '{}': type {} vs {}", at, a.Get(i).name(), typeKey(a.Get(i)),
                         typeKey(b.Get(i)));
    if (a.Get(i).doc_string() != b.Get(i).doc_string())
      return fmt::format("{} '{}': doc_string differs", at, a.Get(i).name());
  }
  return "";
}

inline std::string compareGraph(const onnx::GraphProto& a, const onnx::GraphProto& b,
                                const std::string& where, bool compare_types) {
  std::string at = where.empty() ? "graph" : where + " graph";
  if (a.name() != b.name()) return fmt::format("{}: name '{}' vs '{}'", at, a.name(), b.name());
  if (a.doc_string() != b.doc_string()) return at + ": doc_string differs";
  if (auto d = compareValueInfos(a.input(), b.input(), at + " input", compare_types); !d.empty())
    return d;
  if (auto d = compareValueInfos(a.output(), b.output(), at + " output", compare_types); !d.empty())
    return d;
  if (a.initializer_size() != b.initializer_size())
    return fmt::format("{}: {} vs {} initializers", at, a.initializer_size(), b.initializer_size());
  for (int i = 0; i < a.initializer_size(); ++i)
    if (auto d = compareTensor(a.initializer(i), b.initializer(i),
                               at + " initializer '" + a.initializer(i).name() + "'", true);
        !d.empty())
      return d;
  if (a.sparse_initializer_size() != b.sparse_initializer_size() ||
      a.quantization_annotation_size() != b.quantization_annotation_size())
    return at + ": sparse_initializer or quantization_annotation differs";
  for (int i = 0; i < a.sparse_initializer_size(); ++i)
    if (serializedBytes(a.sparse_initializer(i)) != serializedBytes(b.sparse_initializer(i)))
      return at + ": sparse_initializer differs";
  for (int i = 0; i < a.quantization_annotation_size(); ++i)
    if (serializedBytes(a.quantization_annotation(i)) !=
        serializedBytes(b.quantization_annotation(i)))
      return at + ": quantization_annotation differs";
  if (a.node_size() != b.node_size())
    return fmt::format("{}: {} vs {} nodes", at, a.node_size(), b.node_size());
  if (isTopologicallySorted(a)) {
    for (int i = 0; i < a.node_size(); ++i)
      if (auto d = compareNode(a.node(i), b.node(i), at, compare_types); !d.empty()) return d;
    return "";
  }
  // The original order was not topological: fusectl sorts it, so match nodes by their outputs.
  std::map<std::string, const onnx::NodeProto*> by_key;
  auto key = [](const onnx::NodeProto& n) {
    return fmt::format("{}|{}|{}", fmt::join(n.output(), ","), n.op_type(), n.name());
  };
  for (const auto& n : b.node()) by_key[key(n)] = &n;
  for (const auto& n : a.node()) {
    auto it = by_key.find(key(n));
    if (it == by_key.end())
      return fmt::format("{}: node '{}' ({}) is missing", at, n.name(), n.op_type());
    if (auto d = compareNode(n, *it->second, at, compare_types); !d.empty()) return d;
  }
  return "";
}

// "" when `b` holds the same model as `a`, else the first difference.
inline std::string compareModels(const onnx::ModelProto& a, const onnx::ModelProto& b,
                                 bool compare_types = true) {
  if (a.ir_version() != b.ir_version())
    return fmt::format("ir_version {} vs {}", a.ir_version(), b.ir_version());
  if (a.producer_name() != b.producer_name() || a.producer_version() != b.producer_version() ||
      a.domain() != b.domain() || a.model_version() != b.model_version() ||
      a.doc_string() != b.doc_string())
    return "model producer/domain/version/doc_string differ";
  if (a.opset_import_size() != b.opset_import_size()) return "opset_import count differs";
  for (int i = 0; i < a.opset_import_size(); ++i)
    if (a.opset_import(i).domain() != b.opset_import(i).domain() ||
        a.opset_import(i).version() != b.opset_import(i).version())
      return fmt::format("opset_import #{} differs", i);
  if (a.metadata_props_size() != b.metadata_props_size()) return "metadata_props count differs";
  for (int i = 0; i < a.metadata_props_size(); ++i)
    if (a.metadata_props(i).key() != b.metadata_props(i).key() ||
        a.metadata_props(i).value() != b.metadata_props(i).value())
      return "metadata_props differ";
  if (a.functions_size() != b.functions_size() || a.training_info_size() != b.training_info_size())
    return "functions or training_info count differs";
  for (int i = 0; i < a.functions_size(); ++i)
    if (serializedBytes(a.functions(i)) != serializedBytes(b.functions(i)))
      return "functions differ";
  for (int i = 0; i < a.training_info_size(); ++i)
    if (serializedBytes(a.training_info(i)) != serializedBytes(b.training_info(i)))
      return "training_info differs";
  return compareGraph(a.graph(), b.graph(), "", compare_types);
}

}  // namespace onnx_compare
