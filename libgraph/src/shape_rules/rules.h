// Internal interface between the shape-inference driver and the per-op shape rules.
//
// A rule reads its node's input types (and, where a shape depends on data, the values of small
// integer inputs) through RuleContext and writes output types back through it; the driver owns
// the merge policy (overwrite or fill gaps), the statistics and the libonnx fallback. Rules are
// registered explicitly by one function per file, not by static initialisers, because
// libgraph is a static library and the linker would drop a file nothing refers to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/shape_inference.h"

namespace fusectl::shape_rules {

// The element values of a small (rank 0 or 1) integer tensor, as dims, so that values computed
// from shapes stay symbolic: Shape(x) of x:[batch,seq,64] is {batch, seq, 64}. This is ONNX's
// "partial data propagation"; Reshape, Expand, ConstantOfShape... read shapes from it.
struct KnownValues {
  bool scalar = false;
  std::vector<Dim> elems;
  bool allStatic() const {
    for (const Dim& d : elems)
      if (!d.isStatic()) return false;
    return true;
  }
};

// Larger integer tensors are not worth tracking element by element.
constexpr size_t kMaxKnownValues = 1024;

class RuleContext;
// Returns false when the rule cannot handle this node (an unsupported variant); the driver then
// tries libonnx. A rule that can only say part of the answer still returns true.
using RuleFn = bool (*)(RuleContext&);

class RuleRegistry {
 public:
  // `domain` "" is ai.onnx. Names must outlive the registry (string literals).
  void add(std::string_view domain, std::string_view op_type, RuleFn fn);
  RuleFn find(std::string_view domain, std::string_view op_type) const;

 private:
  std::unordered_map<std::string_view, RuleFn> onnx_;
  std::unordered_map<std::string, RuleFn> other_;  // "domain/op_type"
};

void registerElementwiseRules(RuleRegistry& r);
void registerNnRules(RuleRegistry& r);
void registerLinalgRules(RuleRegistry& r);
void registerTensorRules(RuleRegistry& r);
void registerReduceRules(RuleRegistry& r);
void registerQuantizeRules(RuleRegistry& r);
void registerMiscRules(RuleRegistry& r);
void registerControlFlowRules(RuleRegistry& r);
void registerFusectlOpRules(RuleRegistry& r);
void registerStdTransformerOpRules(RuleRegistry& r);
void registerNewerOnnxOpRules(RuleRegistry& r);  // newer_onnx_ops.cpp
const RuleRegistry& ruleRegistry();

// Driver state shared by every node of one inferShapes call, subgraphs included.
class InferenceState {
 public:
  InferenceState(const Model& model, const ShapeInferenceOptions& options,
                 ShapeInferenceStats& stats);

  void inferGraph(Graph& g);
  // Writes an inferred type under the overwrite/fill policy; negative dims become unknown.
  void assign(Value* v, ValueType inferred);
  void warn(const Node* n, const std::string& message);
  const Tensor* constantOf(const Value* v);
  const KnownValues* knownValuesOf(const Value* v);
  void setKnownValues(const Value* v, KnownValues kv) { known_[v] = std::move(kv); }
  size_t suppressedWarnings() const { return suppressed_warnings_; }

  const Model& model;
  const ShapeInferenceOptions& options;
  ShapeInferenceStats& stats;

 private:
  void inferNode(Node* n);
  int64_t opsetOf(const std::string& domain);

  const RuleRegistry& rules_;
  std::unordered_map<const Value*, KnownValues> known_;
  std::unordered_map<const Value*, Tensor> synthesized_;  // Constant value_int, value_floats...
  std::vector<std::pair<std::string, int64_t>> opsets_;
  int64_t onnx_opset_ = 0;
  size_t suppressed_warnings_ = 0;
};

// What a rule sees of its node.
class RuleContext {
 public:
  RuleContext(InferenceState& state, Node& node, int64_t opset)
      : node(node), opset(opset), state_(state) {}

  Node& node;
  const int64_t opset;

  size_t numInputs() const { return node.numInputs(); }
  bool hasInput(size_t i) const { return node.input(i) != nullptr; }
  const ValueType& inType(size_t i) const {
    const Value* v = node.input(i);
    return v ? v->type : kAbsent;
  }
  DType inDType(size_t i) const { return inType(i).dtype; }
  const Shape& inShape(size_t i) const { return inType(i).shape; }
  // Rank, or -1 when unknown or absent.
  int64_t inRank(size_t i) const {
    const Shape& s = inShape(i);
    return s.hasRank() ? static_cast<int64_t>(s.rank()) : -1;
  }
  // The tensor behind a constant input: an initializer or a Constant node's value.
  const Tensor* inConstant(size_t i) const {
    const Value* v = node.input(i);
    return v ? state_.constantOf(v) : nullptr;
  }
  // Element values of a small integer input, possibly symbolic; nullptr when not known.
  const KnownValues* inValues(size_t i) const {
    const Value* v = node.input(i);
    return v ? state_.knownValuesOf(v) : nullptr;
  }
  // The input's values when all are static integers.
  std::optional<std::vector<int64_t>> inInts(size_t i) const;
  // The input's values as doubles (float or integer constants, or static known values).
  std::optional<std::vector<double>> inDoubles(size_t i) const;

  size_t numOutputs() const { return node.numOutputs(); }
  bool hasOutput(size_t i) const { return node.output(i) != nullptr; }
  void setOutput(size_t i, DType dtype, Shape shape) {
    if (Value* v = node.output(i)) state_.assign(v, ValueType{dtype, std::move(shape), {}});
  }
  void setOutputType(size_t i, ValueType t) {
    if (Value* v = node.output(i)) state_.assign(v, std::move(t));
  }
  void setValues(size_t i, KnownValues kv) {
    if (Value* v = node.output(i)) state_.setKnownValues(v, std::move(kv));
  }
  void warn(const std::string& message) { state_.warn(&node, message); }
  void inferSubgraph(Graph& g) { state_.inferGraph(g); }
  InferenceState& state() { return state_; }

 private:
  static const ValueType kAbsent;
  InferenceState& state_;
};

// ---- helpers shared by the rule files ----

// Normalises a possibly negative axis; nullopt when out of [-rank, rank).
std::optional<size_t> normalizeAxis(int64_t axis, int64_t rank);
Shape unknownDims(size_t rank);
// The ints attribute without a copy; nullptr when absent or of another kind.
const std::vector<int64_t>* intsAttr(const Node& n, std::string_view name);
// Broadcasts, recording a warning and giving a rank-known unknown shape when impossible.
Shape broadcastOrWarn(RuleContext& ctx, const Shape& a, const Shape& b);
// Output i takes input j's dtype and shape.
void propagateInput(RuleContext& ctx, size_t out, size_t in);
// [N, M, spatial...] of a convolution of x by weights w, from the node's window attributes.
Shape convShape(RuleContext& ctx, const Shape& x, const Shape& w);
// NumPy matmul of a by b (1-D operands promoted and dropped again).
Shape matmulShape(RuleContext& ctx, const Shape& a, const Shape& b);
// Forgets the shapes (not the dtypes) of every node output in g and its subgraphs.
void clearNodeOutputShapes(Graph& g);
// libonnx per-node inference; false when it has no schema or fails.
bool inferWithOnnx(RuleContext& ctx);

}  // namespace fusectl::shape_rules
