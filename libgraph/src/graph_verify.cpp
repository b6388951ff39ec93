// Graph::verify(): recomputes what Graph's mutation API keeps in step (use lists, name maps,
// the topological node list, the op-type index) from scratch and compares. Passes run it under
// `--verify-each`, so a pass that bypasses the API is caught by the pass after it.
#include "fusectl/graph/graph.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusectl/graph/error.h"

namespace fusectl {

std::string Graph::verify() const {
  const std::string where = name.empty() ? std::string("graph") : fmt::format("graph '{}'", name);
  // Values: ownership, names, kinds.
  for (size_t i = 0; i < values_.size(); ++i) {
    Value* v = values_[i];
    if (v->graph_ != this) return fmt::format("{}: value '{}' belongs to another graph", where, v->name_);
    if (v->slot_ != i) return fmt::format("{}: value '{}' has a stale slot", where, v->name_);
    if (value_by_name_.find(v->name_) != v)
      return fmt::format("{}: name map does not point at value '{}'", where, v->name_);
    if (v->kind_ == Value::Kind::NodeOutput) {
      if (!v->producer_ || v->producer_->graph_ != this)
        return fmt::format("{}: value '{}' has no producer in this graph", where, v->name_);
      if (v->producer_->output(static_cast<size_t>(v->producer_output_)) != v)
        return fmt::format("{}: value '{}' is not output {} of its producer '{}'", where,
                           v->name_, v->producer_output_, v->producer_->label());
    } else if (v->producer_) {
      return fmt::format("{}: value '{}' is a {} but has a producer", where, v->name_,
                         v->kind_ == Value::Kind::GraphInput ? "graph input" : "non-node value");
    }
    if (v->kind_ == Value::Kind::OuterRef) {
      if (!parent_) return fmt::format("{}: outer reference '{}' in a graph without parent", where, v->name_);
      const Graph* g = parent_;
      bool found = false;
      for (; g && !found; g = g->parent_) found = g->findValue(v->name_) == v->outer_;
      if (!found)
        return fmt::format("{}: outer reference '{}' does not resolve to an enclosing value", where,
                           v->name_);
    }
    if ((v->kind_ == Value::Kind::Initializer) != (v->initializer_ != nullptr))
      return fmt::format("{}: value '{}' initializer flag and data disagree", where, v->name_);
  }
  const std::vector<Value*>& inits = initializers();
  for (size_t i = 0; i < inits.size(); ++i) {
    if (inits[i]->graph_ != this || inits[i]->kind_ != Value::Kind::Initializer ||
        inits[i]->init_index_ != i)
      return fmt::format("{}: initializer list entry {} ('{}') is stale", where, i, inits[i]->name_);
  }
  if (value_by_name_.size() != values_.size())
    return fmt::format("{}: name map has {} entries for {} values", where, value_by_name_.size(),
                       values_.size());

  // Nodes: list order is topological, inputs defined before use, use lists exact. Per-value
  // facts live in vectors indexed by Value::slot_ (checked above), not in hash maps: verify()
  // runs after every pass under --verify-each, on graphs of a million nodes.
  std::vector<char> produced(values_.size(), 0);
  std::vector<size_t> expected_uses(values_.size(), 0);
  std::vector<const Node*> linked;
  linked.reserve(num_nodes_);
  auto producedBefore = [&](const Value* v) {
    return !v->producer_ || produced[v->slot_] != 0;
  };
  size_t count = 0;
  const Node* prev = nullptr;
  for (const Node* n = first_; n; n = n->next_) {
    if (n->prev_ != prev) return fmt::format("{}: node list broken at '{}'", where, n->label());
    prev = n;
    if (n->graph_ != this) return fmt::format("{}: node '{}' belongs to another graph", where, n->label());
    ++count;
    for (size_t i = 0; i < n->inputs_.size(); ++i) {
      const Value* v = n->inputs_[i];
      if (!v) continue;
      if (v->graph_ != this)
        return fmt::format("{}: node '{}' input {} '{}' is not a value of this graph", where,
                           n->label(), i, v->name_);
      if (!producedBefore(v))
        return fmt::format("{}: node '{}' reads '{}' before its producer '{}' (not topological, "
                           "or a cycle)", where, n->label(), v->name_, v->producer_->label());
      ++expected_uses[v->slot_];
      bool listed = std::find(v->uses_.begin(), v->uses_.end(),
                              Use{const_cast<Node*>(n), static_cast<int>(i)}) != v->uses_.end();
      if (!listed)
        return fmt::format("{}: use list of '{}' lacks node '{}' input {}", where, v->name_,
                           n->label(), i);
    }
    for (const Value* v : n->implicitInputs()) {
      if (v->graph_ != this)
        return fmt::format("{}: node '{}' captures '{}' from another graph", where, n->label(), v->name_);
      if (!producedBefore(v))
        return fmt::format("{}: node '{}' captures '{}' before its producer '{}'", where,
                           n->label(), v->name_, v->producer_->label());
      ++expected_uses[v->slot_];
    }
    for (size_t i = 0; i < n->outputs_.size(); ++i) {
      const Value* v = n->outputs_[i];
      if (v && (v->producer_ != n || v->producer_output_ != static_cast<int>(i)))
        return fmt::format("{}: output {} '{}' of node '{}' names another producer", where, i,
                           v->name_, n->label());
    }
    for (const Attribute& a : n->attrs_) {
      auto check = [&](const Graph* sub) -> std::string {
        if (!sub) return fmt::format("{}: node '{}' attribute '{}' has no graph", where, n->label(), a.name);
        if (sub->parent_ != this)
          return fmt::format("{}: subgraph of node '{}' attribute '{}' has the wrong parent",
                             where, n->label(), a.name);
        for (const Value* ref : sub->outer_refs_) {
          const Value* outer = ref->outer_;
          if (outer && outer->graph_ == this &&
              std::find(n->implicitInputs().begin(), n->implicitInputs().end(), outer) ==
                  n->implicitInputs().end())
            return fmt::format("{}: node '{}' does not list captured '{}' as implicit input",
                               where, n->label(), outer->name_);
        }
        return sub->verify();
      };
      if (a.kind == AttrKind::Graph) {
        if (std::string m = check(a.g.get()); !m.empty()) return m;
      } else if (a.kind == AttrKind::Graphs) {
        for (const auto& g : a.graphs)
          if (std::string m = check(g.get()); !m.empty()) return m;
      }
    }
    for (const Value* v : n->outputs_)
      if (v) produced[v->slot_] = 1;
    linked.push_back(n);
  }
  if (prev != last_) return fmt::format("{}: node list tail is stale", where);
  if (count != num_nodes_)
    return fmt::format("{}: node count {} but {} nodes are linked", where, num_nodes_, count);
  for (const Value* v : values_) {
    const size_t expected = expected_uses[v->slot_];
    if (v->uses_.size() != expected)
      return fmt::format("{}: value '{}' lists {} uses but {} node inputs read it", where,
                         v->name_, v->uses_.size(), expected);
  }
  for (const Value* v : outputs_) {
    if (!v || v->graph_ != this) return fmt::format("{}: a graph output is not a value of this graph", where);
  }
  std::vector<uint32_t> output_count(values_.size(), 0);
  std::vector<char> listed_input(values_.size(), 0);
  for (const Value* v : outputs_) ++output_count[v->slot_];
  for (const Value* v : inputs_) {
    if (!v || v->graph_ != this) return fmt::format("{}: a graph input is not a value of this graph", where);
    listed_input[v->slot_] = 1;
  }
  for (const Value* v : values_) {
    if (output_count[v->slot_] != v->graph_output_count_)
      return fmt::format("{}: value '{}' output count is stale", where, v->name_);
    if ((listed_input[v->slot_] != 0) != v->is_graph_input_)
      return fmt::format("{}: value '{}' graph-input flag is stale", where, v->name_);
  }

  // Op-type index: every node in exactly its own bucket, in order, counts right.
  std::sort(linked.begin(), linked.end());
  size_t indexed = 0;
  for (const auto& [key, bucket] : op_index_) {
    size_t c = 0;
    const Node* p = nullptr;
    for (const Node* n = bucket.head; n; n = n->op_next_) {
      if (n->op_prev_ != p) return fmt::format("{}: op-type index chain broken at '{}'", where, n->label());
      if (opKey(*n->op_type_, *n->domain_) != key)
        return fmt::format("{}: node '{}' ({}) is indexed under another op type", where,
                           n->label(), *n->op_type_);
      if (!std::binary_search(linked.begin(), linked.end(), n)) return fmt::format("{}: op-type index holds an erased node", where);
      p = n;
      ++c;
    }
    if (p != bucket.tail || c != bucket.count)
      return fmt::format("{}: op-type index bucket count/tail is stale", where);
    indexed += c;
  }
  if (indexed != num_nodes_)
    return fmt::format("{}: op-type index holds {} nodes, graph has {}", where, indexed, num_nodes_);
  return "";
}

void Graph::verifyOrThrow() const {
  std::string message = verify();
  if (!message.empty()) throwInternal("graph verification failed: " + message);
}

}  // namespace fusectl
