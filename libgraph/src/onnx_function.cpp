// FunctionDef -> onnx.FunctionProto bytes (onnx_function.h).
//
// The body's nodes are converted by the model writer's graph export (onnx_convert.h), so a node
// in a function is written exactly as one in a graph; only the function's own fields are set
// here.
#include "fusectl/graph/onnx_function.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusectl/graph/error.h"

#include "onnx_convert.h"

namespace fusectl {

namespace {

// Moves a tensor's raw_data into its typed field for the element types function bodies hold.
template <typename T, typename Field>
void moveRawInto(onnx::TensorProto& t, Field* field) {
  const std::string& raw = t.raw_data();
  const size_t n = raw.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    field->Add(v);
  }
  t.clear_raw_data();
}

void useTypedData(onnx::TensorProto& t) {
  if (!t.has_raw_data()) return;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: moveRawInto<float>(t, t.mutable_float_data()); break;
    case onnx::TensorProto::INT64: moveRawInto<int64_t>(t, t.mutable_int64_data()); break;
    default: break;  // other types keep raw_data, which readers accept as well
  }
}

}  // namespace

std::string functionToBinary(const FunctionDef& function) {
  onnx::GraphProto graph;
  onnx_convert::ExportOptions options;
  options.write_value_info = false;
  onnx_convert::exportGraph(*function.body, &graph, options);

  onnx::FunctionProto f;
  f.set_name(function.name);
  for (const onnx::ValueInfoProto& v : graph.input()) f.add_input(v.name());
  for (const onnx::ValueInfoProto& v : graph.output()) f.add_output(v.name());
  for (const std::string& a : function.attributes) f.add_attribute(a);
  f.mutable_node()->Swap(graph.mutable_node());
  for (onnx::NodeProto& n : *f.mutable_node())
    for (onnx::AttributeProto& a : *n.mutable_attribute())
      if (a.has_t()) useTypedData(*a.mutable_t());
  if (!function.doc_string.empty()) f.set_doc_string(function.doc_string);
  for (const OpsetImport& o : function.opset_imports) {
    onnx::OperatorSetIdProto* import = f.add_opset_import();
    import->set_domain(o.domain);
    import->set_version(o.version);
  }
  if (!function.domain.empty()) f.set_domain(function.domain);
  return onnx_convert::serializeDeterministic(f);
}

std::string castWrappedFunction(const std::string& float_function, const std::string& name,
                                DType dtype, const std::vector<std::string>& cast,
                                const std::string& doc_string) {
  onnx::FunctionProto body;
  if (!body.ParseFromString(float_function)) throwInternal(name + ": the function does not parse");
  auto casts = [&](const std::string& v) {
    return std::find(cast.begin(), cast.end(), v) != cast.end();
  };
  std::set<std::string> used(body.input().begin(), body.input().end());
  used.insert(body.output().begin(), body.output().end());
  for (const onnx::NodeProto& n : body.node()) {
    used.insert(n.input().begin(), n.input().end());
    used.insert(n.output().begin(), n.output().end());
    for (const onnx::AttributeProto& a : n.attribute())
      if (a.has_g() || a.graphs_size() > 0) throwInternal(name + ": the body holds a subgraph");
  }
  std::map<std::string, std::string> renamed;  // formal name -> its float32 value in the body
  const std::string suffix = "_" + std::string(dtypeName(DType::Float));
  auto rename = [&](const std::string& formal) {
    if (!casts(formal)) return;
    const std::string inner = formal + suffix;
    if (used.count(inner) || !renamed.emplace(formal, inner).second)
      throwInternal(fmt::format("{}: cannot name {}'s float32 copy {}", name, formal, inner));
  };
  for (const std::string& in : body.input()) rename(in);
  for (const std::string& out : body.output()) rename(out);

  onnx::FunctionProto f = body;
  f.set_name(name);
  f.clear_node();
  if (doc_string.empty()) f.clear_doc_string();
  else f.set_doc_string(doc_string);
  auto castNode = [&](const std::string& from, const std::string& to, DType to_type) {
    onnx::NodeProto* c = f.add_node();
    c->set_op_type("Cast");
    c->add_input(from);
    c->add_output(to);
    onnx::AttributeProto* a = c->add_attribute();
    a->set_name("to");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(static_cast<int64_t>(to_type));
  };
  for (const std::string& in : body.input())
    if (casts(in)) castNode(in, renamed.at(in), DType::Float);
  for (const onnx::NodeProto& n : body.node()) {
    onnx::NodeProto* copy = f.add_node();
    *copy = n;
    for (std::string& v : *copy->mutable_input())
      if (auto it = renamed.find(v); it != renamed.end()) v = it->second;
    for (std::string& v : *copy->mutable_output())
      if (auto it = renamed.find(v); it != renamed.end()) v = it->second;
  }
  for (const std::string& out : body.output())
    if (casts(out)) castNode(renamed.at(out), out, dtype);
  return onnx_convert::serializeDeterministic(f);
}

std::optional<std::pair<std::string, std::string>> functionIdOf(const std::string& bytes) {
  onnx::FunctionProto f;
  if (!f.ParseFromString(bytes)) return std::nullopt;
  return std::make_pair(f.domain(), f.name());
}

}  // namespace fusectl
