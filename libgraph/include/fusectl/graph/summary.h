// Model statistics: interface, op histogram, weight sizes. Used by `fusectl dump` and by anyone
// who wants to know what a model contains without walking the graph.
//
// A ModelSummary copies what it reports, so it outlives the Model. Counts cover the main graph
// and, where a field says so, every subgraph (If/Loop/Scan bodies) nested in it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl {

struct ValueSummary {
  std::string name;
  ValueType type;
  bool is_initializer = false;  // a graph input that also has an initializer (IR < 4 style)
};

struct OpCount {
  std::string domain;  // "" for ai.onnx
  std::string op_type;
  size_t count = 0;
};

struct ModelSummary {
  int64_t ir_version = 0;
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::vector<OpsetImport> opset_imports;  // sorted by domain, "" (ai.onnx) first
  std::string graph_name;
  std::vector<ValueSummary> inputs;   // main graph, in declaration order
  std::vector<ValueSummary> outputs;  // main graph, in declaration order

  size_t node_count = 0;        // main graph
  size_t total_node_count = 0;  // main graph and every nested subgraph
  size_t subgraph_count = 0;    // graphs held by node attributes, at any depth
  // Every graph; sorted by count (descending), then domain, then op type.
  std::vector<OpCount> op_histogram;
  // Initializers of every graph. Bytes are the stored tensor bytes (string tensors: the sum of
  // their string lengths); parameters are the total element count of all initializers.
  size_t initializer_count = 0;
  uint64_t initializer_bytes = 0;
  int64_t parameter_count = 0;
  size_t function_count = 0;  // model-local functions
};

ModelSummary summarizeModel(const Model& model);

// "Conv" for ai.onnx, "com.example.MyOp" otherwise (the ONNX textual-syntax spelling).
std::string qualifiedOpType(std::string_view domain, std::string_view op_type);
// "ai.onnx" for the empty domain, the domain itself otherwise.
std::string_view displayDomain(std::string_view domain);
// An attribute's value as short text: "3", "0.001", "\"fast\"", "[1,1,1,1]",
// "int64[2]{-1,64}" (tensor values only when it has at most `max_elements`), "graph then_g".
// Lists longer than `max_elements` are cut with ",..." and their length.
std::string formatAttributeValue(const Attribute& attr, size_t max_elements = 16);
// Human-readable size: "512 B", "1.5 KiB", "3.2 MiB", "1.0 GiB".
std::string formatByteSize(uint64_t bytes);
// Bytes an initializer occupies (string tensors: the sum of their string lengths).
uint64_t tensorStoredBytes(const Tensor& t);

}  // namespace fusectl
