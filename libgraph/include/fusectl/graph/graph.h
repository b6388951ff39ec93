// The fusectl IR: a Model owns a Graph of Nodes connected by SSA Values.
//
// Built for graphs of a million nodes that passes rewrite in place:
//  - every Value has one producer (a Node output, a graph input, an initializer, or a value
//    captured from an enclosing graph) and a use list, so consumers are found in O(1);
//  - nodes sit in an intrusive list kept in topological order, and in an op-type index
//    (op type -> nodes, in creation order) so a pass anchored on Conv never scans the graph;
//  - all edits go through Graph's mutation API, which keeps use lists, names and the index
//    consistent; Graph::verify() checks that they are.
// Subgraphs (If/Loop/Scan bodies) are Graphs owned by attributes. A subgraph refers to a value
// of an enclosing graph through a local "outer reference" Value; the node owning the subgraph
// lists the captured outer values as implicit inputs, so they count as uses.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fusectl/graph/attribute.h"
#include "fusectl/graph/dtype.h"
#include "fusectl/graph/rare_string.h"
#include "fusectl/graph/shape.h"
#include "fusectl/graph/tensor.h"
#include "fusectl/support/name_table.h"

namespace fusectl {

class Graph;
class Node;

struct ValueType {
  DType dtype = DType::Undefined;
  Shape shape;  // unknown rank by default
  // Non-tensor types (sequence, map, optional, sparse tensor) are kept as a serialized
  // onnx.TypeProto; empty for tensors.
  RareString opaque_type_proto;
  bool isTensor() const { return opaque_type_proto.empty(); }
  bool operator==(const ValueType& o) const {
    return dtype == o.dtype && shape == o.shape && opaque_type_proto == o.opaque_type_proto;
  }
  std::string str() const;  // "float[batch,3,224,224]"
};

// One consumer slot: node->input(input) == this value. input == kImplicitUse marks a value
// captured by one of the node's subgraphs.
struct Use {
  static constexpr int kImplicitUse = -1;
  Node* node;
  int input;
  bool operator==(const Use& o) const { return node == o.node && input == o.input; }
};

// A value's consumer slots. Most values have exactly one consumer, so the list keeps one use
// inline and allocates only from the second on: a million-node graph then allocates no use
// list for most of its millions of values (the same 24 bytes as a std::vector, without its
// heap block).
class UseList {
 public:
  UseList() : one_{nullptr, 0} {}
  UseList(const UseList&) = delete;
  UseList& operator=(const UseList&) = delete;
  UseList(UseList&& o) noexcept { takeFrom(o); }
  UseList& operator=(UseList&& o) noexcept {
    if (this != &o) {
      release();
      takeFrom(o);
    }
    return *this;
  }
  ~UseList() { release(); }

  const Use* begin() const { return capacity_ > 1 ? heap_ : &one_; }
  const Use* end() const { return begin() + size_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Use& front() const { return *begin(); }
  const Use& operator[](size_t i) const { return begin()[i]; }

  void push_back(Use u);
  void eraseAt(size_t i);  // keeps the order of the others
  void clear() {
    release();
    size_ = 0;
    capacity_ = 1;
  }

 private:
  Use* mutableBegin() { return capacity_ > 1 ? heap_ : &one_; }
  void release() {
    if (capacity_ > 1) delete[] heap_;
  }
  void takeFrom(UseList& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    if (capacity_ > 1) heap_ = o.heap_;
    else one_ = o.one_;
    o.size_ = 0;
    o.capacity_ = 1;
  }
  union {
    Use one_;
    Use* heap_;
  };
  uint32_t size_ = 0;
  uint32_t capacity_ = 1;  // 1: the inline slot
};

class Value {
 public:
  enum class Kind : uint8_t { NodeOutput, GraphInput, Initializer, OuterRef };

  const std::string& name() const { return name_; }
  Kind kind() const { return kind_; }
  Graph* graph() const { return graph_; }
  Node* producer() const { return producer_; }  // nullptr unless kind() == NodeOutput
  int producerOutputIndex() const { return producer_output_; }

  const UseList& uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  // Distinct consumer nodes (a node reading the value twice counts once).
  std::vector<Node*> consumers() const;
  // The single consumer node, if exactly one node reads this value and it is not a graph output.
  Node* uniqueConsumer() const;

  bool isGraphInput() const { return is_graph_input_; }
  bool isGraphOutput() const { return graph_output_count_ > 0; }
  bool isInitializer() const { return initializer_ != nullptr; }
  // A value with a fixed tensor: an initializer that is not also an overridable graph input.
  bool isConstant() const { return initializer_ && !is_graph_input_; }
  const Tensor* initializer() const { return initializer_.get(); }
  void setInitializer(Tensor t);  // for initializer values only; replaces the data
  Value* outerValue() const { return outer_; }  // the captured value, for OuterRef

  DType dtype() const { return type.dtype; }
  const Shape& shape() const { return type.shape; }

  ValueType type;
  RareString doc_string;

 private:
  friend class Graph;
  friend class Node;
  Value() = default;

  // Small members packed together: a million-node graph has a few million Values.
  std::string name_;
  Graph* graph_ = nullptr;
  Node* producer_ = nullptr;
  UseList uses_;
  std::unique_ptr<Tensor> initializer_;
  Value* outer_ = nullptr;
  int32_t producer_output_ = -1;
  uint32_t graph_output_count_ = 0;
  uint32_t slot_ = 0;        // index in Graph::values_, for O(1) removal
  uint32_t init_index_ = 0;  // index in Graph::initializers_, for initializers
  Kind kind_ = Kind::NodeOutput;
  bool is_graph_input_ = false;
};

class Node {
 public:
  const std::string& opType() const { return *op_type_; }
  const std::string& domain() const { return *domain_; }  // "" for ai.onnx
  bool is(std::string_view op_type, std::string_view domain = "") const {
    return *op_type_ == op_type && *domain_ == domain;
  }
  const std::string& name() const { return name_; }
  // The name, or "<op_type>(<first output>)" for an unnamed node: for messages and reports.
  std::string label() const;
  Graph* graph() const { return graph_; }

  // Inputs may contain nullptr for an omitted optional input ("" in ONNX).
  const std::vector<Value*>& inputs() const { return inputs_; }
  size_t numInputs() const { return inputs_.size(); }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  size_t numOutputs() const { return outputs_.size(); }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  // Outer values read by this node's subgraphs.
  const std::vector<Value*>& implicitInputs() const {
    return implicit_inputs_ ? *implicit_inputs_ : kNoValues;
  }

  const std::vector<Attribute>& attributes() const { return attrs_; }
  std::vector<Attribute>& mutableAttributes() { return attrs_; }  // not for subgraph edits
  const Attribute* attr(std::string_view name) const;
  bool hasAttr(std::string_view name) const { return attr(name) != nullptr; }
  // Typed getters: the default when absent; fusectl::Error when present with the wrong kind.
  int64_t attrInt(std::string_view name, int64_t def) const;
  float attrFloat(std::string_view name, float def) const;
  std::string attrString(std::string_view name, std::string def) const;
  std::vector<int64_t> attrInts(std::string_view name, std::vector<int64_t> def = {}) const;
  std::vector<float> attrFloats(std::string_view name, std::vector<float> def = {}) const;
  void setAttr(Attribute a);  // replaces an attribute of the same name
  // Calls fn(Graph&) for each subgraph the node's attributes hold (If/Loop/Scan bodies).
  template <typename Fn>
  void forEachSubgraph(Fn&& fn) const {
    for (const Attribute& a : attrs_) {
      if (a.g) fn(*a.g);
      for (const auto& g : a.graphs)
        if (g) fn(*g);
    }
  }
  bool removeAttr(std::string_view name);

  // Neighbours in the graph's topological list.
  Node* next() const { return next_; }
  Node* prev() const { return prev_; }

  RareString doc_string;

 private:
  friend class Graph;
  Node() = default;

  inline static const std::string kNoText;
  inline static const std::vector<Value*> kNoValues;
  // Interned (graph.cpp): a model has a few dozen distinct op types and a million nodes.
  const std::string* op_type_ = &kNoText;
  const std::string* domain_ = &kNoText;
  std::string name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::unique_ptr<std::vector<Value*>> implicit_inputs_;  // null when none (most nodes)
  std::vector<Attribute> attrs_;
  Graph* graph_ = nullptr;
  Node* prev_ = nullptr;
  Node* next_ = nullptr;
  Node* op_prev_ = nullptr;  // op-type index chain
  Node* op_next_ = nullptr;
};

// Iteration over an intrusive node chain. Iterators stay valid when other nodes are erased,
// but not the node they point at: erase through a snapshot (Graph::nodesSnapshot) or advance
// first.
template <Node* Node::*Next>
class NodeChain {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Node*;
    using difference_type = std::ptrdiff_t;
    using pointer = Node**;
    using reference = Node*;
    explicit iterator(Node* n) : n_(n) {}
    Node* operator*() const { return n_; }
    iterator& operator++() { n_ = n_->*Next; return *this; }
    bool operator==(const iterator& o) const { return n_ == o.n_; }
    bool operator!=(const iterator& o) const { return n_ != o.n_; }
   private:
    Node* n_;
  };
  NodeChain(Node* head, size_t size) : head_(head), size_(size) {}
  iterator begin() const { return iterator(head_); }
  iterator end() const { return iterator(nullptr); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  Node* head_;
  size_t size_;
};

class Graph {
 public:
  explicit Graph(std::string name = "");
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Deep copy; outer references are re-bound by name to `parent` (or left dangling to their
  // original outer values when parent is nullptr).
  std::unique_ptr<Graph> clone(Graph* parent = nullptr) const;

  std::string name;
  std::string doc_string;
  Graph* parent() const { return parent_; }
  void setParent(Graph* p) { parent_ = p; }
  // Nodes of this graph that own subgraphs (If/Loop/Scan bodies, any op with a graph
  // attribute), in no particular order. Kept by createNode, clone, Node::setAttr and eraseNode;
  // a subgraph attached through mutableAttributes() is not seen.
  const std::vector<Node*>& subgraphOwners() const { return subgraph_owners_; }

  // ---- values ----
  Value* addInput(const std::string& name, ValueType type);
  Value* addInitializer(const std::string& name, Tensor t);  // type from the tensor
  // Marks an existing initializer as also being a graph input (IR < 4 style, overridable).
  void markInitializerAsInput(Value* v);
  Value* addOuterRef(const std::string& name, Value* outer);
  void addOutput(Value* v);
  void setOutput(size_t index, Value* v);
  void removeOutput(size_t index);
  void removeInput(Value* v);  // the value must be unused; it is destroyed
  void removeInitializer(Value* v);  // the value must be unused and not a graph input
  // Drops an outer reference nothing reads any more; the owning node's implicit inputs are the
  // caller's to update (setNodeImplicitInputs on the enclosing graph).
  void removeOuterRef(Value* v);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<Value*>& initializers() const;  // in file order
  const std::vector<Value*>& outerRefs() const { return outer_refs_; }
  Value* findValue(std::string_view name) const;
  // Hints that a value or node of this name is about to be looked up or added (memory
  // prefetch; no effect on the graph).
  void prefetchValueName(std::string_view name) const { value_by_name_.prefetch(name); }
  void prefetchNodeName(std::string_view name) const { node_by_name_.prefetch(name); }
  // Every value of the graph, in an unspecified order.
  const std::vector<Value*>& allValues() const { return values_; }

  // ---- nodes ----
  struct NodeSpec {
    std::string op_type;
    std::string domain;
    std::vector<Value*> inputs;            // nullptr for an omitted optional input
    std::vector<std::string> output_names; // "" = omitted optional output; see uniqueValueName
    std::string name;
    std::vector<Attribute> attributes;
  };
  // Inserted before `position`, or at the end of the topological list when nullptr.
  Node* createNode(NodeSpec spec, Node* position = nullptr);
  Node* createNodeAfter(NodeSpec spec, Node* anchor);
  // Erases a node whose outputs are no longer used (and not graph outputs).
  void eraseNode(Node* n);
  // Erases `n`, then every producer left without uses, recursively. Returns nodes erased.
  size_t eraseNodeAndDeadProducers(Node* n);
  // Erases every node none of whose outputs reaches a graph output. Returns nodes erased.
  size_t eraseDeadNodes();
  // Erases initializers with no use that are not graph inputs. Returns how many.
  size_t eraseUnusedInitializers();

  void setNodeInput(Node* n, size_t index, Value* v);  // grows the input list when needed
  void appendNodeInput(Node* n, Value* v);
  void setNodeImplicitInputs(Node* n, std::vector<Value*> values);
  void setOpType(Node* n, std::string op_type, std::string domain = "");

  // Every use of `from` (node inputs, implicit uses, graph outputs) now reads `to`. When `from`
  // is a graph output, `to` takes over its name so the graph's interface is unchanged, and
  // `from` is renamed to a fresh name.
  void replaceAllUsesWith(Value* from, Value* to);

  void renameValue(Value* v, const std::string& new_name);  // throws if taken
  void renameNode(Node* n, const std::string& new_name);
  // A value name that no value of this graph, of an enclosing graph or of a nested subgraph
  // has: ONNX forbids a subgraph node output from shadowing an enclosing name, in either
  // direction of creation.
  std::string uniqueValueName(std::string_view hint) const;
  std::string uniqueNodeName(std::string_view hint) const;

  void moveBefore(Node* n, Node* position);
  void moveAfter(Node* n, Node* anchor);
  // Re-sorts the node list topologically, keeping the existing order where it is already
  // valid. Throws fusectl::Error (InvalidInput) naming a node on a cycle.
  void topologicalSort();

  NodeChain<&Node::next_> nodes() const { return {first_, num_nodes_}; }
  size_t numNodes() const { return num_nodes_; }
  Node* firstNode() const { return first_; }
  Node* lastNode() const { return last_; }
  std::vector<Node*> nodesSnapshot() const;
  // Nodes of one op type, in creation order, in O(result) time.
  NodeChain<&Node::op_next_> nodesOfType(std::string_view op_type,
                                         std::string_view domain = "") const;
  // Op types present, as (domain, op_type) -> count, sorted.
  std::vector<std::pair<std::pair<std::string, std::string>, size_t>> opHistogram() const;
  // A node of that name (while it exists, the earliest created of those sharing it), or nullptr.
  Node* findNode(std::string_view name) const;

  // Pre-sizes the name maps and object pools for about this many values and nodes, so that an
  // importer building a million-node graph does not rehash or allocate object by object.
  void reserve(size_t num_values, size_t num_nodes);

  // Checks every invariant; returns "" when they hold, else one precise message.
  std::string verify() const;
  void verifyOrThrow() const;  // fusectl::Error(Internal) with verify()'s message

  // Kept as serialized protobuf for round trips; no pass reads them.
  std::vector<std::string> sparse_initializers;
  std::vector<std::string> quantization_annotations;
  // The dims each graph output was declared with in the file, by output name. Inference replaces
  // a declared name it can express itself (PP-OCR det's output H becomes
  // "32*floor((...(H+1)/2...)/2)"), which passes rely on; the export writes the declared name
  // back for a dim that is still symbolic, so that the output's interface is the file's.
  std::unordered_map<std::string, Shape> declared_output_shapes;

 private:
  struct OpBucket {
    Node* head = nullptr;
    Node* tail = nullptr;
    size_t count = 0;
  };
  static std::string opKey(std::string_view op_type, std::string_view domain);
  Value* newValue(const std::string& name, Value::Kind kind);
  void destroyValue(Value* v);
  void addUse(Value* v, Node* n, int input);
  void removeUse(Value* v, Node* n, int input);
  // Calls fn(subgraph, ref) for each outer reference in n's subgraphs that captures `outer`.
  template <typename Fn>
  static void forEachCapturingRef(Node* n, Value* outer, Fn&& fn);
  void linkNode(Node* n, Node* position);
  void unlinkNode(Node* n);
  void indexNode(Node* n);
  void unindexNode(Node* n);

  // Pooled memory for Nodes and Values (graph.cpp): one allocation per chunk, not per object,
  // and the whole graph is released chunk by chunk.
  struct ObjectPools;
  std::unique_ptr<ObjectPools> pools_;
  Node* allocNode();
  void freeNode(Node* n);
  Value* allocValue();
  void freeValue(Value* v);

  Graph* parent_ = nullptr;
  std::vector<Node*> subgraph_owners_;
  // Records n in subgraph_owners_ when it owns a subgraph, and makes this graph the parent of
  // its subgraphs (also from Node::setAttr).
  void noteSubgraphOwner(Node* n);
  friend class Node;
  std::vector<Value*> values_;  // owning, through pools_
  NameTable<Value> value_by_name_;
  NameTable<Node> node_by_name_;  // the first node of each name (node names may repeat)
  // Nodes whose name another node already holds in node_by_name_ (ONNX allows repeats).
  std::unordered_map<std::string, std::vector<Node*>> repeated_node_names_;
  void registerNodeName(Node* n);
  void unregisterNodeName(Node* n);
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  // Removal leaves a hole (nullptr) at the value's init_index_, closed by the next
  // initializers() call: a pass removing thousands of initializers stays linear.
  mutable std::vector<Value*> initializers_;
  mutable size_t initializer_holes_ = 0;
  void closeInitializerHoles() const;
  std::vector<Value*> outer_refs_;
  Node* first_ = nullptr;
  Node* last_ = nullptr;
  size_t num_nodes_ = 0;
  std::unordered_map<std::string, OpBucket> op_index_;
  mutable uint64_t name_counter_ = 0;
};

struct OpsetImport {
  std::string domain;  // "" for ai.onnx
  int64_t version = 0;
};

class Model {
 public:
  int64_t ir_version = 8;
  std::vector<OpsetImport> opset_imports;
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc_string;
  std::vector<std::pair<std::string, std::string>> metadata_props;
  std::vector<std::string> functions;      // serialized onnx.FunctionProto
  std::vector<std::string> training_info;  // serialized onnx.TrainingInfoProto
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  // The external-data files the loaded model's tensors were read from, as their locations
  // (relative to the model's folder), sorted. Not saved: a record of where the model came from.
  std::vector<std::string> external_data_files;

  // Version of `domain` imported by the model ("" and "ai.onnx" are the same); 0 when absent.
  int64_t opsetVersion(std::string_view domain = "") const;
  void setOpsetVersion(std::string_view domain, int64_t version);

  // A deep copy (Graph::clone) whose initializers share their bytes with this model's until
  // either side writes them: two versions of one model cost one set of weights.
  std::unique_ptr<Model> clone() const;
};

}  // namespace fusectl
