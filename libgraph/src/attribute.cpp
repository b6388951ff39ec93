// Attribute: value semantics over every ONNX attribute kind, deep-copying subgraphs.
#include "fusectl/graph/attribute.h"

#include <cstring>

#include "fusectl/graph/graph.h"

namespace fusectl {

// A million-node graph holds about a million attributes: a member that every attribute pays
// for but few use belongs behind a pointer (rare_vector.h). 312 bytes before that was done.
static_assert(sizeof(Attribute) <= 160, "Attribute grew: hold rarely set members by pointer");

std::string_view attrKindName(AttrKind k) {
  switch (k) {
    case AttrKind::Undefined: return "undefined";
    case AttrKind::Float: return "float";
    case AttrKind::Int: return "int";
    case AttrKind::String: return "string";
    case AttrKind::Tensor: return "tensor";
    case AttrKind::Graph: return "graph";
    case AttrKind::Floats: return "floats";
    case AttrKind::Ints: return "ints";
    case AttrKind::Strings: return "strings";
    case AttrKind::Tensors: return "tensors";
    case AttrKind::Graphs: return "graphs";
    case AttrKind::SparseTensor: return "sparse_tensor";
    case AttrKind::SparseTensors: return "sparse_tensors";
    case AttrKind::TypeProto: return "type_proto";
    case AttrKind::TypeProtos: return "type_protos";
  }
  return "unknown";
}

Attribute::Attribute(const Attribute& o)
    : name(o.name),
      kind(o.kind),
      doc_string(o.doc_string),
      ref_attr_name(o.ref_attr_name),
      f(o.f),
      i(o.i),
      s(o.s),
      t(o.t),
      floats(o.floats),
      ints(o.ints),
      strings(o.strings),
      tensors(o.tensors) {
  // The copy keeps the original's parent, so its outer references bind to the same values;
  // whoever moves the copy into another graph re-parents it.
  if (o.g) g = o.g->clone(o.g->parent());
  graphs.reserve(o.graphs.size());
  for (const auto& sub : o.graphs) graphs.push_back(sub ? sub->clone(sub->parent()) : nullptr);
}

Attribute& Attribute::operator=(const Attribute& o) {
  if (this != &o) {
    Attribute copy(o);
    *this = std::move(copy);
  }
  return *this;
}

Attribute::Attribute(Attribute&&) noexcept = default;
Attribute& Attribute::operator=(Attribute&&) noexcept = default;
Attribute::~Attribute() = default;

Attribute Attribute::ofFloat(std::string name, float v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Float;
  a.f = v;
  return a;
}

Attribute Attribute::ofInt(std::string name, int64_t v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Int;
  a.i = v;
  return a;
}

Attribute Attribute::ofString(std::string name, std::string v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::String;
  a.s = std::move(v);
  return a;
}

namespace {
bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
}  // namespace

bool sameAttributeValue(const Attribute& a, const Attribute& b,
                        const std::function<bool(const Graph&, const Graph&)>& same_graph) {
  if (a.kind != b.kind || a.ref_attr_name != b.ref_attr_name) return false;
  switch (a.kind) {
    case AttrKind::Float: return std::memcmp(&a.f, &b.f, sizeof(float)) == 0;
    case AttrKind::Int: return a.i == b.i;
    case AttrKind::String:
    case AttrKind::SparseTensor:
    case AttrKind::TypeProto: return a.s == b.s;
    case AttrKind::Tensor: return a.t.identical(b.t);
    case AttrKind::Graph:
      if (!a.g || !b.g) return !a.g && !b.g && same_graph;
      return same_graph && same_graph(*a.g, *b.g);
    case AttrKind::Floats: return sameBits(a.floats, b.floats);
    case AttrKind::Ints: return a.ints == b.ints;
    case AttrKind::Strings:
    case AttrKind::SparseTensors:
    case AttrKind::TypeProtos: return a.strings == b.strings;
    case AttrKind::Tensors:
      if (a.tensors.size() != b.tensors.size()) return false;
      for (size_t i = 0; i < a.tensors.size(); ++i)
        if (!a.tensors[i].identical(b.tensors[i])) return false;
      return true;
    case AttrKind::Graphs:
      if (!same_graph || a.graphs.size() != b.graphs.size()) return false;
      for (size_t i = 0; i < a.graphs.size(); ++i)
        if (!same_graph(*a.graphs[i], *b.graphs[i])) return false;
      return true;
    case AttrKind::Undefined: return true;  // nothing beyond ref_attr_name to compare
  }
  return false;
}

Attribute Attribute::ofTensor(std::string name, Tensor v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Tensor;
  a.t = std::move(v);
  return a;
}

Attribute Attribute::ofGraph(std::string name, std::unique_ptr<Graph> v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Graph;
  a.g = std::move(v);
  return a;
}

Attribute Attribute::ofFloats(std::string name, std::vector<float> v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Floats;
  a.floats = std::move(v);
  return a;
}

Attribute Attribute::ofInts(std::string name, std::vector<int64_t> v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Ints;
  a.ints = std::move(v);
  return a;
}

Attribute Attribute::ofStrings(std::string name, std::vector<std::string> v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = AttrKind::Strings;
  a.strings = std::move(v);
  return a;
}

}  // namespace fusectl
