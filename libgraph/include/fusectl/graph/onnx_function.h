// ONNX functions (onnx.FunctionProto) built as IR graphs and written by libgraph's ONNX writer.
//
// Model::functions holds functions as serialized FunctionProto bytes, so that those a model
// brings survive a round trip untouched; a function fusectl defines itself (the fusectl ops'
// bodies, fused_ops.h) is built as a FunctionDef and serialized with functionToBinary.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/graph.h"

namespace fusectl {

struct FunctionDef {
  std::string name;
  std::string domain;
  std::vector<std::string> attributes;  // the attributes a call may give, by name
  std::vector<OpsetImport> opset_imports;
  std::string doc_string;
  // The inputs, outputs and nodes in order; only names are written (a function's values are
  // untyped), and node attributes refer to the call's with Attribute::ref_attr_name.
  std::unique_ptr<Graph> body;
};

// Deterministic FunctionProto bytes: the nodes as the model writer writes a node, tensor
// attributes with their data in the typed fields (float_data, int64_data...) rather than
// raw_data, as hand-written functions have them.
std::string functionToBinary(const FunctionDef& function);

// The serialized function `float_function`, computing in float32, as the function `name` over
// `dtype`: each formal input named in `cast` is Cast to float32 on entry (as "<input>_float"),
// the body runs unchanged on those copies, and each formal output named in `cast` is computed
// as "<output>_float" and Cast to `dtype` on exit. Deterministic, like functionToBinary; throws
// Error(Internal) when the body already uses a name it would give or holds a subgraph.
std::string castWrappedFunction(const std::string& float_function, const std::string& name,
                                DType dtype, const std::vector<std::string>& cast,
                                const std::string& doc_string);

// (domain, name) of a serialized FunctionProto; nullopt when the bytes do not parse.
std::optional<std::pair<std::string, std::string>> functionIdOf(const std::string& bytes);

}  // namespace fusectl
