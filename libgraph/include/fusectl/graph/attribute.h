// Node attributes: every ONNX attribute kind, subgraphs included.
//
// Sparse tensors and type protos are kinds no pass inspects; they are kept as serialized
// protobuf bytes so that they survive a load/save round trip exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/rare_string.h"
#include "fusectl/graph/rare_tensor.h"
#include "fusectl/graph/rare_vector.h"
#include "fusectl/graph/tensor.h"

namespace fusectl {

class Graph;

// Numbered as ONNX's AttributeProto.AttributeType.
enum class AttrKind : int32_t {
  Undefined = 0,
  Float = 1,
  Int = 2,
  String = 3,
  Tensor = 4,
  Graph = 5,
  Floats = 6,
  Ints = 7,
  Strings = 8,
  Tensors = 9,
  Graphs = 10,
  SparseTensor = 11,
  SparseTensors = 12,
  TypeProto = 13,
  TypeProtos = 14,
};

std::string_view attrKindName(AttrKind k);  // "float", "ints", "graph"...

class Attribute {
 public:
  Attribute() = default;
  Attribute(const Attribute& o);  // deep-copies subgraphs
  Attribute& operator=(const Attribute& o);
  Attribute(Attribute&&) noexcept;
  Attribute& operator=(Attribute&&) noexcept;
  ~Attribute();

  static Attribute ofFloat(std::string name, float v);
  static Attribute ofInt(std::string name, int64_t v);
  static Attribute ofString(std::string name, std::string v);
  static Attribute ofTensor(std::string name, Tensor v);
  static Attribute ofGraph(std::string name, std::unique_ptr<Graph> g);
  static Attribute ofFloats(std::string name, std::vector<float> v);
  static Attribute ofInts(std::string name, std::vector<int64_t> v);
  static Attribute ofStrings(std::string name, std::vector<std::string> v);

  std::string name;
  AttrKind kind = AttrKind::Undefined;
  RareString doc_string;
  // Set in function bodies: the attribute takes the value of the function's attribute of this
  // name. Kept only for round trips.
  RareString ref_attr_name;

  float f = 0.f;
  int64_t i = 0;
  // The kinds few attributes have are held through one pointer each (rare_string.h,
  // rare_tensor.h, rare_vector.h): a million-node graph has about a million attributes.
  RareString s;  // String; also the serialized proto for SparseTensor and TypeProto
  RareTensor t;
  std::unique_ptr<Graph> g;
  RareVector<float> floats;
  std::vector<int64_t> ints;
  RareVector<std::string> strings;  // Strings; serialized protos for SparseTensors/TypeProtos
  RareVector<Tensor> tensors;
  RareVector<std::unique_ptr<Graph>> graphs;
};

// True when a and b hold the same value: the same kind, ref_attr_name and payload, floats
// compared bit for bit (NaN equals the same NaN, -0.0 differs from 0.0). Names are not
// compared. Graph-valued attributes are compared with `same_graph`; without it they never
// compare equal.
bool sameAttributeValue(const Attribute& a, const Attribute& b,
                        const std::function<bool(const Graph&, const Graph&)>& same_graph = {});

}  // namespace fusectl
