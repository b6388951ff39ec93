// FunctionDef -> onnx.FunctionProto bytes (onnx_function.h).
//
// The body's nodes are converted by the model writer's graph export (onnx_convert.h), so a node
// in a function is written exactly as one in a graph; only the function's own fields are set
// here.
#include "fusectl/graph/onnx_function.h"

#include <onnx/onnx_pb.h>

#include <cstring>

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

std::optional<std::pair<std::string, std::string>> functionIdOf(const std::string& bytes) {
  onnx::FunctionProto f;
  if (!f.ParseFromString(bytes)) return std::nullopt;
  return std::make_pair(f.domain(), f.name());
}

}  // namespace fusectl
