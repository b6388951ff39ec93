// Graph, Node and Value: construction, mutation and the invariants that tie them together.
//
// Every mutation keeps four structures in step: the use lists of values, the name maps, the
// topological node list and the op-type index. verify() (graph_verify.cpp) recomputes them
// from scratch and compares, so a pass that bypasses this API is caught by `--verify-each`;
// clone() is in graph_clone.cpp.
#include "fusectl/graph/graph.h"

#include <algorithm>
#include <mutex>
#include <unordered_set>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "support/slot_pool.h"

namespace fusectl {

// ---------------------------------------------------------------------------------------------
// ValueType, Value

std::string ValueType::str() const {
  if (!isTensor()) return "non-tensor";
  return std::string(dtypeName(dtype)) + shape.str();
}

std::vector<Node*> Value::consumers() const {
  std::vector<Node*> out;
  out.reserve(uses_.size());
  for (const Use& u : uses_)
    if (std::find(out.begin(), out.end(), u.node) == out.end()) out.push_back(u.node);
  return out;
}

Node* Value::uniqueConsumer() const {
  if (uses_.empty() || isGraphOutput()) return nullptr;
  Node* first = uses_.front().node;
  for (const Use& u : uses_)
    if (u.node != first) return nullptr;
  return first;
}

void Value::setInitializer(Tensor t) {
  if (!initializer_) throwInternal(fmt::format("value '{}' is not an initializer", name_));
  type.dtype = t.dtype();
  // Folding passes replace data of the same shape: keep the shape's memory then.
  bool same_shape = type.shape.hasRank() && type.shape.rank() == t.dims().size();
  for (size_t i = 0; same_shape && i < t.dims().size(); ++i)
    same_shape = type.shape[i].isStatic() && type.shape[i].value() == t.dims()[i];
  if (!same_shape) type.shape = Shape::ofStatic(t.dims());
  *initializer_ = std::move(t);
}

// ---------------------------------------------------------------------------------------------
// Node

std::string Node::label() const {
  if (!name_.empty()) return name_;
  for (Value* v : outputs_)
    if (v) return fmt::format("{}({})", *op_type_, v->name());
  return *op_type_;
}

const Attribute* Node::attr(std::string_view name) const {
  for (const Attribute& a : attrs_)
    if (a.name == name) return &a;
  return nullptr;
}

namespace {
const Attribute* typedAttr(const Node& n, std::string_view name, AttrKind kind) {
  const Attribute* a = n.attr(name);
  if (a && a->kind != kind)
    throwInvalid(fmt::format("node '{}' ({}): attribute '{}' is {}, expected {}", n.label(),
                             n.opType(), name, attrKindName(a->kind), attrKindName(kind)));
  return a;
}
}  // namespace

int64_t Node::attrInt(std::string_view name, int64_t def) const {
  const Attribute* a = typedAttr(*this, name, AttrKind::Int);
  return a ? a->i : def;
}
float Node::attrFloat(std::string_view name, float def) const {
  const Attribute* a = typedAttr(*this, name, AttrKind::Float);
  return a ? a->f : def;
}
std::string Node::attrString(std::string_view name, std::string def) const {
  const Attribute* a = typedAttr(*this, name, AttrKind::String);
  return a ? a->s.str() : def;
}
std::vector<int64_t> Node::attrInts(std::string_view name, std::vector<int64_t> def) const {
  const Attribute* a = typedAttr(*this, name, AttrKind::Ints);
  return a ? a->ints : def;
}
std::vector<float> Node::attrFloats(std::string_view name, std::vector<float> def) const {
  const Attribute* a = typedAttr(*this, name, AttrKind::Floats);
  return a ? a->floats : def;
}

void Node::setAttr(Attribute a) {
  bool replaced = false;
  for (Attribute& existing : attrs_) {
    if (existing.name == a.name) {
      existing = std::move(a);
      replaced = true;
      break;
    }
  }
  if (!replaced) attrs_.push_back(std::move(a));
  if (graph_) graph_->noteSubgraphOwner(this);
}

bool Node::removeAttr(std::string_view name) {
  auto it = std::find_if(attrs_.begin(), attrs_.end(),
                         [&](const Attribute& a) { return a.name == name; });
  if (it == attrs_.end()) return false;
  attrs_.erase(it);
  return true;
}

namespace {
// Op types and domains, one copy per distinct name for the whole process (never freed: a few
// dozen strings in practice). std::unordered_set keeps element addresses stable.
const std::string* internedName(std::string_view name) {
  // Importers create runs of nodes with the same few names: a per-thread cache of recent
  // answers skips the lock and the hash.
  thread_local const std::string* recent[4] = {};
  thread_local unsigned next_slot = 0;
  for (const std::string* r : recent)
    if (r && *r == name) return r;
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();
  const std::string* found;
  {
    std::lock_guard<std::mutex> lock(mutex);
    found = &*names->emplace(name).first;
  }
  recent[next_slot++ % 4] = found;
  return found;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Graph: construction and values

// Nodes and Values live in slot pools (support/slot_pool.h), not one heap block each.
struct Graph::ObjectPools {
  SlotPool<Node> nodes;
  SlotPool<Value> values;
};

Node* Graph::allocNode() { return new (pools_->nodes.allocate()) Node(); }
void Graph::freeNode(Node* n) {
  n->~Node();
  pools_->nodes.release(n);
}
Value* Graph::allocValue() { return new (pools_->values.allocate()) Value(); }
void Graph::freeValue(Value* v) {
  v->~Value();
  pools_->values.release(v);
}

Graph::Graph(std::string graph_name)
    : name(std::move(graph_name)), pools_(std::make_unique<ObjectPools>()) {}

Graph::~Graph() {
  // Destructors only: the pools release the memory chunk by chunk.
  for (Node* n = first_; n; n = n->next_) n->~Node();
  for (Value* v : values_) v->~Value();
}

void Graph::reserve(size_t num_values, size_t num_nodes) {
  values_.reserve(num_values);
  value_by_name_.reserve(num_values);
  node_by_name_.reserve(num_nodes);
  pools_->values.reserve(num_values);
  pools_->nodes.reserve(num_nodes);
}

std::string Graph::opKey(std::string_view op_type, std::string_view domain) {
  std::string key;
  key.reserve(domain.size() + op_type.size() + 1);
  key.append(domain).push_back('\0');
  key.append(op_type);
  return key;
}

Value* Graph::newValue(const std::string& value_name, Value::Kind kind) {
  if (value_name.empty()) throwInvalid("a value must have a non-empty name");
  Value* v = allocValue();
  v->name_ = value_name;
  // One hash lookup: the key must view the value's own copy of the name.
  if (!value_by_name_.insert(v)) {
    freeValue(v);
    throwInvalid(fmt::format("value '{}' is defined more than once", value_name));
  }
  v->kind_ = kind;
  v->graph_ = this;
  v->slot_ = values_.size();
  values_.push_back(v);
  return v;
}

void Graph::destroyValue(Value* v) {
  value_by_name_.eraseEntryOf(v);
  Value* last = values_.back();
  values_[v->slot_] = last;
  last->slot_ = v->slot_;
  values_.pop_back();
  freeValue(v);
}

Value* Graph::addInput(const std::string& value_name, ValueType type) {
  Value* v = newValue(value_name, Value::Kind::GraphInput);
  v->type = std::move(type);
  v->is_graph_input_ = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::addInitializer(const std::string& value_name, Tensor t) {
  Value* v = newValue(value_name, Value::Kind::Initializer);
  v->type.dtype = t.dtype();
  v->type.shape = Shape::ofStatic(t.dims());
  v->initializer_ = std::make_unique<Tensor>(std::move(t));
  v->init_index_ = initializers_.size();
  initializers_.push_back(v);
  return v;
}

void Graph::markInitializerAsInput(Value* v) {
  if (!v->isInitializer() || v->is_graph_input_)
    throwInternal(fmt::format("'{}' is not an initializer that can become an input", v->name_));
  v->is_graph_input_ = true;
  inputs_.push_back(v);
}

Value* Graph::addOuterRef(const std::string& value_name, Value* outer) {
  Value* v = newValue(value_name, Value::Kind::OuterRef);
  v->outer_ = outer;
  if (outer) v->type = outer->type;
  outer_refs_.push_back(v);
  return v;
}

void Graph::addOutput(Value* v) {
  outputs_.push_back(v);
  ++v->graph_output_count_;
}

void Graph::setOutput(size_t index, Value* v) {
  if (index >= outputs_.size()) throwInternal("graph output index out of range");
  --outputs_[index]->graph_output_count_;
  outputs_[index] = v;
  ++v->graph_output_count_;
}

void Graph::removeOutput(size_t index) {
  if (index >= outputs_.size()) throwInternal("graph output index out of range");
  --outputs_[index]->graph_output_count_;
  outputs_.erase(outputs_.begin() + static_cast<std::ptrdiff_t>(index));
}

void Graph::removeInput(Value* v) {
  if (!v->is_graph_input_) throwInternal(fmt::format("'{}' is not a graph input", v->name_));
  if (!v->uses_.empty() || v->isGraphOutput())
    throwInternal(fmt::format("graph input '{}' is still used", v->name_));
  inputs_.erase(std::find(inputs_.begin(), inputs_.end(), v));
  if (v->isInitializer()) {
    v->is_graph_input_ = false;  // stays an initializer, just no longer overridable
    return;
  }
  destroyValue(v);
}

void Graph::removeInitializer(Value* v) {
  if (!v->isInitializer()) throwInternal(fmt::format("'{}' is not an initializer", v->name_));
  if (!v->uses_.empty() || v->isGraphOutput() || v->is_graph_input_)
    throwInternal(fmt::format("initializer '{}' is still used", v->name_));
  initializers_[v->init_index_] = nullptr;
  ++initializer_holes_;
  destroyValue(v);
}

void Graph::removeOuterRef(Value* v) {
  if (v->kind_ != Value::Kind::OuterRef)
    throwInternal(fmt::format("'{}' is not an outer reference", v->name_));
  if (!v->uses_.empty() || v->isGraphOutput())
    throwInternal(fmt::format("outer reference '{}' is still used", v->name_));
  outer_refs_.erase(std::find(outer_refs_.begin(), outer_refs_.end(), v));
  destroyValue(v);
}

const std::vector<Value*>& Graph::initializers() const {
  if (initializer_holes_ != 0) closeInitializerHoles();
  return initializers_;
}

void Graph::closeInitializerHoles() const {
  size_t kept = 0;
  for (Value* v : initializers_) {
    if (!v) continue;
    v->init_index_ = kept;
    initializers_[kept++] = v;
  }
  initializers_.resize(kept);
  initializer_holes_ = 0;
}

Value* Graph::findValue(std::string_view value_name) const {
  return value_by_name_.find(value_name);
}

// ---------------------------------------------------------------------------------------------
// Graph: uses and the node list

void UseList::push_back(Use u) {
  if (size_ == capacity_) {
    const uint32_t grown = capacity_ * 2 < 4 ? 4 : capacity_ * 2;
    Use* bigger = new Use[grown];
    std::copy(begin(), end(), bigger);
    release();
    heap_ = bigger;
    capacity_ = grown;
  }
  mutableBegin()[size_++] = u;
}

void UseList::eraseAt(size_t i) {
  Use* first = mutableBegin();
  std::copy(first + i + 1, first + size_, first + i);
  --size_;
}

void Graph::addUse(Value* v, Node* n, int input) {
  if (v) v->uses_.push_back(Use{n, input});
}

void Graph::removeUse(Value* v, Node* n, int input) {
  if (!v) return;
  auto& uses = v->uses_;
  // Search from the back: the most recent use is the likeliest to be removed (rewrites undo
  // what they just built), which keeps long use lists cheap.
  for (size_t i = uses.size(); i-- > 0;) {
    if (uses[i].node == n && uses[i].input == input) {
      uses.eraseAt(i);
      return;
    }
  }
  throwInternal(fmt::format("use list of '{}' lacks node '{}' input {}", v->name_, n->label(),
                            input));
}

void Graph::linkNode(Node* n, Node* position) {
  if (!position) {
    n->prev_ = last_;
    n->next_ = nullptr;
    if (last_) last_->next_ = n; else first_ = n;
    last_ = n;
  } else {
    n->next_ = position;
    n->prev_ = position->prev_;
    if (position->prev_) position->prev_->next_ = n; else first_ = n;
    position->prev_ = n;
  }
}

void Graph::unlinkNode(Node* n) {
  if (n->prev_) n->prev_->next_ = n->next_; else first_ = n->next_;
  if (n->next_) n->next_->prev_ = n->prev_; else last_ = n->prev_;
  n->prev_ = n->next_ = nullptr;
}

void Graph::indexNode(Node* n) {
  OpBucket& b = op_index_[opKey(*n->op_type_, *n->domain_)];
  n->op_prev_ = b.tail;
  n->op_next_ = nullptr;
  if (b.tail) b.tail->op_next_ = n; else b.head = n;
  b.tail = n;
  ++b.count;
}

void Graph::unindexNode(Node* n) {
  auto it = op_index_.find(opKey(*n->op_type_, *n->domain_));
  if (it == op_index_.end()) throwInternal("op-type index lacks node " + n->label());
  OpBucket& b = it->second;
  if (n->op_prev_) n->op_prev_->op_next_ = n->op_next_; else b.head = n->op_next_;
  if (n->op_next_) n->op_next_->op_prev_ = n->op_prev_; else b.tail = n->op_prev_;
  n->op_prev_ = n->op_next_ = nullptr;
  if (--b.count == 0) op_index_.erase(it);
}

Node* Graph::createNode(NodeSpec spec, Node* position) {
  if (position && position->graph_ != this) throwInternal("insert position is in another graph");
  Node* n = allocNode();
  n->graph_ = this;
  n->op_type_ = internedName(spec.op_type);
  n->domain_ = internedName(spec.domain == "ai.onnx" ? std::string_view() : spec.domain);
  n->name_ = std::move(spec.name);
  n->attrs_ = std::move(spec.attributes);
  n->outputs_.reserve(spec.output_names.size());
  try {
    for (std::string& out_name : spec.output_names) {
      if (out_name.empty()) {
        // ONNX allows an omitted optional output; keep its slot so output indices stay right.
        n->outputs_.push_back(nullptr);
        continue;
      }
      Value* v = newValue(out_name, Value::Kind::NodeOutput);
      v->producer_ = n;
      v->producer_output_ = static_cast<int>(n->outputs_.size());
      n->outputs_.push_back(v);
    }
  } catch (...) {
    for (Value* v : n->outputs_)
      if (v) destroyValue(v);
    freeNode(n);
    throw;
  }
  n->inputs_ = std::move(spec.inputs);
  for (size_t i = 0; i < n->inputs_.size(); ++i) addUse(n->inputs_[i], n, static_cast<int>(i));
  linkNode(n, position);
  indexNode(n);
  ++num_nodes_;
  registerNodeName(n);
  noteSubgraphOwner(n);
  return n;
}

void Graph::noteSubgraphOwner(Node* n) {
  bool owns = false;
  n->forEachSubgraph([&](Graph& sub) {
    sub.parent_ = this;
    owns = true;
  });
  if (owns && std::find(subgraph_owners_.begin(), subgraph_owners_.end(), n) ==
                  subgraph_owners_.end()) {
    subgraph_owners_.push_back(n);
  }
}

Node* Graph::createNodeAfter(NodeSpec spec, Node* anchor) {
  return createNode(std::move(spec), anchor ? anchor->next_ : first_);
}

void Graph::eraseNode(Node* n) {
  for (Value* v : n->outputs_) {
    if (v && (v->hasUses() || v->isGraphOutput()))
      throwInternal(fmt::format("cannot erase node '{}': output '{}' is still used", n->label(),
                                v->name_));
  }
  // The name-table entries below are cache misses in a big graph: start them all at once.
  for (Value* v : n->outputs_)
    if (v) value_by_name_.prefetch(v->name_);
  if (!n->name_.empty()) node_by_name_.prefetch(n->name_);
  for (size_t i = 0; i < n->inputs_.size(); ++i) removeUse(n->inputs_[i], n, static_cast<int>(i));
  for (Value* v : n->implicitInputs()) removeUse(v, n, Use::kImplicitUse);
  for (Value* v : n->outputs_)
    if (v) destroyValue(v);
  unregisterNodeName(n);
  unindexNode(n);
  unlinkNode(n);
  --num_nodes_;
  if (!subgraph_owners_.empty()) {
    auto it = std::find(subgraph_owners_.begin(), subgraph_owners_.end(), n);
    if (it != subgraph_owners_.end()) subgraph_owners_.erase(it);
  }
  freeNode(n);
}

size_t Graph::eraseNodeAndDeadProducers(Node* n) {
  std::vector<Node*> work{n};
  size_t erased = 0;
  while (!work.empty()) {
    Node* cur = work.back();
    work.pop_back();
    bool dead = true;
    for (Value* v : cur->outputs_)
      if (v && (v->hasUses() || v->isGraphOutput())) dead = false;
    if (!dead) continue;
    std::vector<Node*> producers;
    for (Value* v : cur->inputs_)
      if (v && v->producer_) producers.push_back(v->producer_);
    for (Value* v : cur->implicitInputs())
      if (v && v->producer_) producers.push_back(v->producer_);
    eraseNode(cur);
    ++erased;
    for (Node* p : producers)
      if (std::find(work.begin(), work.end(), p) == work.end()) work.push_back(p);
  }
  return erased;
}

size_t Graph::eraseDeadNodes() {
  // Reverse topological sweep: a node is live if any output is a graph output or feeds a live
  // node; consumers come after producers, so one backward pass decides everything.
  size_t erased = 0;
  for (Node* n = last_; n;) {
    Node* prev = n->prev_;
    bool live = false;
    for (Value* v : n->outputs_)
      if (v && (v->hasUses() || v->isGraphOutput())) live = true;
    if (!live) {
      eraseNode(n);
      ++erased;
    }
    n = prev;
  }
  return erased;
}

size_t Graph::eraseUnusedInitializers() {
  std::vector<Value*> dead;
  for (Value* v : initializers())
    if (!v->hasUses() && !v->isGraphOutput() && !v->is_graph_input_) dead.push_back(v);
  for (Value* v : dead) removeInitializer(v);
  return dead.size();
}

void Graph::setNodeInput(Node* n, size_t index, Value* v) {
  if (index >= n->inputs_.size()) n->inputs_.resize(index + 1, nullptr);
  removeUse(n->inputs_[index], n, static_cast<int>(index));
  n->inputs_[index] = v;
  addUse(v, n, static_cast<int>(index));
}

void Graph::appendNodeInput(Node* n, Value* v) { setNodeInput(n, n->inputs_.size(), v); }

void Graph::setNodeImplicitInputs(Node* n, std::vector<Value*> values) {
  for (Value* v : n->implicitInputs()) removeUse(v, n, Use::kImplicitUse);
  n->implicit_inputs_ =
      values.empty() ? nullptr : std::make_unique<std::vector<Value*>>(std::move(values));
  for (Value* v : n->implicitInputs()) addUse(v, n, Use::kImplicitUse);
}

void Graph::setOpType(Node* n, std::string op_type, std::string domain) {
  if (domain == "ai.onnx") domain.clear();
  unindexNode(n);
  n->op_type_ = internedName(op_type);
  n->domain_ = internedName(domain);
  indexNode(n);
}

void Graph::replaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  UseList uses = std::move(from->uses_);
  for (const Use& u : uses) {
    if (u.input == Use::kImplicitUse) {
      // Subgraphs capture by name through outer refs; retarget both the node's implicit list
      // and the outer refs inside its subgraphs. A subgraph that captures `to` already (two
      // identical constants merged, two equal nodes merged) reads that capture instead, since
      // two references cannot share a name.
      std::vector<Value*>& implicit = *u.node->implicit_inputs_;
      const bool had_to = std::find(implicit.begin(), implicit.end(), to) != implicit.end();
      if (had_to) {
        implicit.erase(std::remove(implicit.begin(), implicit.end(), from), implicit.end());
      } else {
        for (Value*& iv : implicit)
          if (iv == from) iv = to;
      }
      forEachCapturingRef(u.node, from, [&](Graph& sub, Value* ref) {
        Value* existing = nullptr;
        for (Value* r : sub.outer_refs_)
          if (r != ref && r->outer_ == to) existing = r;
        if (existing && !ref->isGraphOutput()) {
          sub.replaceAllUsesWith(ref, existing);
          sub.removeOuterRef(ref);
          return;
        }
        ref->outer_ = to;
        sub.renameValue(ref, to->name_);
      });
      if (!had_to) to->uses_.push_back(u);
      continue;
    }
    u.node->inputs_[static_cast<size_t>(u.input)] = to;
    to->uses_.push_back(u);
  }
  if (from->isGraphOutput()) {
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (outputs_[i] == from) setOutput(i, to);
    // The graph's interface is its output names: `to` takes the name over.
    std::string public_name = from->name_;
    renameValue(from, uniqueValueName(public_name));
    renameValue(to, public_name);
  }
}

void Graph::renameValue(Value* v, const std::string& new_name) {
  if (v->name_ == new_name) return;
  if (new_name.empty()) throwInvalid("a value must have a non-empty name");
  if (value_by_name_.contains(new_name))
    throwInvalid(fmt::format("cannot rename '{}' to '{}': name taken", v->name_, new_name));
  value_by_name_.eraseEntryOf(v);
  v->name_ = new_name;
  value_by_name_.insert(v);
  // Subgraphs capture outer values by name: their outer references follow the rename.
  for (const Use& u : v->uses_) {
    if (u.input != Use::kImplicitUse) continue;
    forEachCapturingRef(u.node, v, [&](Graph& sub, Value* ref) { sub.renameValue(ref, new_name); });
  }
}

template <typename Fn>
void Graph::forEachCapturingRef(Node* n, Value* outer, Fn&& fn) {
  n->forEachSubgraph([&](Graph& sub) {
    for (Value* ref : std::vector<Value*>(sub.outer_refs_))
      if (ref->outer_ == outer) fn(sub, ref);
  });
}

void Graph::registerNodeName(Node* n) {
  if (!n->name_.empty() && !node_by_name_.insert(n)) repeated_node_names_[n->name_].push_back(n);
}

// O(nodes sharing the name): passes that replace a node by one of the same name erase the old
// one while the new one waits in repeated_node_names_.
void Graph::unregisterNodeName(Node* n) {
  if (n->name_.empty()) return;
  const bool was_entry = node_by_name_.eraseEntryOf(n);
  if (repeated_node_names_.empty()) return;  // the common case: names are unique
  auto repeats = repeated_node_names_.find(n->name_);
  if (was_entry) {
    if (repeats == repeated_node_names_.end()) return;
    // Another node holds the name too: the lookup now points at the earliest registered one.
    Node* next = repeats->second.front();
    repeats->second.erase(repeats->second.begin());
    if (repeats->second.empty()) repeated_node_names_.erase(repeats);
    node_by_name_.insert(next);
    return;
  }
  if (repeats == repeated_node_names_.end()) return;
  auto& others = repeats->second;
  others.erase(std::remove(others.begin(), others.end(), n), others.end());
  if (others.empty()) repeated_node_names_.erase(repeats);
}

void Graph::renameNode(Node* n, const std::string& new_name) {
  unregisterNodeName(n);
  n->name_ = new_name;
  registerNodeName(n);
}

namespace {
bool nameTakenBelow(const Graph& g, std::string_view candidate) {
  bool taken = false;
  for (const Node* owner : g.subgraphOwners()) {
    owner->forEachSubgraph([&](const Graph& sub) {
      taken = taken || sub.findValue(candidate) || nameTakenBelow(sub, candidate);
    });
    if (taken) return true;
  }
  return false;
}

// Names are looked up in this graph, every enclosing one and every nested one: ONNX's SSA rule
// (the checker's, and ONNX Runtime's) refuses a subgraph node output that shadows an enclosing
// name, so a new outer name must not be one a subgraph already writes, nor the reverse.
bool nameTakenInScope(const Graph* g, std::string_view candidate) {
  if (nameTakenBelow(*g, candidate)) return true;
  for (; g; g = g->parent())
    if (g->findValue(candidate)) return true;
  return false;
}
}  // namespace

std::string Graph::uniqueValueName(std::string_view hint) const {
  std::string base(hint.empty() ? std::string_view("v") : hint);
  if (!nameTakenInScope(this, base)) return base;
  for (;;) {
    std::string candidate = fmt::format("{}_{}", base, ++name_counter_);
    if (!nameTakenInScope(this, candidate)) return candidate;
  }
}

std::string Graph::uniqueNodeName(std::string_view hint) const {
  std::string base(hint.empty() ? std::string_view("node") : hint);
  if (!node_by_name_.contains(base)) return base;
  for (;;) {
    std::string candidate = fmt::format("{}_{}", base, ++name_counter_);
    if (!node_by_name_.contains(candidate)) return candidate;
  }
}

void Graph::moveBefore(Node* n, Node* position) {
  if (n == position) return;
  unlinkNode(n);
  linkNode(n, position);
}

void Graph::moveAfter(Node* n, Node* anchor) {
  if (n == anchor) return;
  unlinkNode(n);
  linkNode(n, anchor ? anchor->next_ : first_);
}

void Graph::topologicalSort() {
  // Kahn's algorithm seeded in the current list order and processing ready nodes
  // first-in-first-out by their current position: an already sorted graph keeps its order
  // exactly, which keeps output deterministic and diffs small.
  std::vector<Node*> order;
  order.reserve(num_nodes_);
  std::unordered_map<Node*, size_t> position;
  position.reserve(num_nodes_);
  for (Node* n = first_; n; n = n->next_) {
    position.emplace(n, order.size());
    order.push_back(n);
  }
  std::vector<uint32_t> pending(order.size(), 0);
  auto producerIn = [&](Value* v) -> Node* {
    return (v && v->producer_ && v->graph_ == this) ? v->producer_ : nullptr;
  };
  for (size_t i = 0; i < order.size(); ++i) {
    Node* n = order[i];
    for (Value* v : n->inputs_)
      if (producerIn(v)) ++pending[i];
    for (Value* v : n->implicitInputs())
      if (producerIn(v)) ++pending[i];
  }
  // A min-heap on original position would be O(n log n); instead ready nodes are emitted by
  // scanning forward and revisiting only nodes released behind the cursor.
  std::vector<Node*> sorted;
  sorted.reserve(order.size());
  std::vector<bool> emitted(order.size(), false);
  std::vector<size_t> released_behind;
  auto emit = [&](size_t i) {
    emitted[i] = true;
    sorted.push_back(order[i]);
    for (Value* v : order[i]->outputs_) {
      if (!v) continue;
      for (const Use& u : v->uses_) {
        if (u.node->graph_ != this) continue;
        size_t j = position.at(u.node);
        if (--pending[j] == 0 && j < i) released_behind.push_back(j);
      }
    }
  };
  for (size_t i = 0; i < order.size(); ++i) {
    if (!emitted[i] && pending[i] == 0) emit(i);
    while (!released_behind.empty()) {
      std::sort(released_behind.begin(), released_behind.end(), std::greater<size_t>());
      size_t j = released_behind.back();
      released_behind.pop_back();
      if (!emitted[j] && pending[j] == 0) emit(j);
    }
  }
  if (sorted.size() != order.size()) {
    for (size_t i = 0; i < order.size(); ++i)
      if (!emitted[i])
        throwInvalid(fmt::format("graph has a cycle through node '{}' ({})", order[i]->label(),
                                 *order[i]->op_type_));
  }
  first_ = last_ = nullptr;
  for (Node* n : sorted) linkNode(n, nullptr);
}

std::vector<Node*> Graph::nodesSnapshot() const {
  std::vector<Node*> out;
  out.reserve(num_nodes_);
  for (Node* n = first_; n; n = n->next_) out.push_back(n);
  return out;
}

NodeChain<&Node::op_next_> Graph::nodesOfType(std::string_view op_type,
                                              std::string_view domain) const {
  if (domain == "ai.onnx") domain = "";
  auto it = op_index_.find(opKey(op_type, domain));
  if (it == op_index_.end()) return {nullptr, 0};
  return {it->second.head, it->second.count};
}

std::vector<std::pair<std::pair<std::string, std::string>, size_t>> Graph::opHistogram() const {
  std::vector<std::pair<std::pair<std::string, std::string>, size_t>> out;
  out.reserve(op_index_.size());
  for (const auto& [key, bucket] : op_index_) {
    size_t sep = key.find('\0');
    out.push_back({{key.substr(0, sep), key.substr(sep + 1)}, bucket.count});
  }
  std::sort(out.begin(), out.end());
  return out;
}

Node* Graph::findNode(std::string_view node_name) const {
  return node_by_name_.find(node_name);
}

// ---------------------------------------------------------------------------------------------
// Model

int64_t Model::opsetVersion(std::string_view op_domain) const {
  if (op_domain == "ai.onnx") op_domain = "";
  for (const OpsetImport& o : opset_imports) {
    std::string_view d = o.domain == "ai.onnx" ? std::string_view() : std::string_view(o.domain);
    if (d == op_domain) return o.version;
  }
  return 0;
}

void Model::setOpsetVersion(std::string_view op_domain, int64_t version) {
  if (op_domain == "ai.onnx") op_domain = "";
  for (OpsetImport& o : opset_imports) {
    std::string_view d = o.domain == "ai.onnx" ? std::string_view() : std::string_view(o.domain);
    if (d == op_domain) {
      o.version = version;
      return;
    }
  }
  opset_imports.push_back({std::string(op_domain), version});
}

}  // namespace fusectl
