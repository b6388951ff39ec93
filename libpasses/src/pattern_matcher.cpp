// The read-only pattern matcher.
//
// Matching anchors on the root's op-type index and binds the other pattern nodes by walking
// the pattern's edges in a precomputed order (each step has one end already bound), in both
// directions: producer->consumer follows the producer's output use list, consumer->producer
// follows the consumer's input slot to its producer. When an edge offers several candidates
// (three MatMuls reading one value), the matcher backtracks, keeping the binding injective. A
// node of a commutative op written in call form, `Mul(a, b)`, is bound once per order of its
// operands (the order that an edge into it fixes, when one does), so backtracking also tries
// `Mul(b, a)`.
//
// A structural failure is reported at the deepest step reached, since that is the one a user
// can act on ("Conv_3 output 0 feeds Add_4, not BatchNormalization"); a complete binding is
// then checked against its leaf operands, the nodes' conditions and the constraints in order,
// and the first one that fails is the reason. Reasons are formatted only when explaining.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "fusectl/passes/pattern.h"
#include "pattern_internal.h"

namespace fusectl::passes {

// Operand orders are tried for commutative nodes of up to this many operands.
constexpr size_t kMaxPermutedOperands = 4;

struct SearchPlan {
  std::vector<size_t> edges;     // edge visiting order
  std::vector<bool> permuted;    // per pattern node: its operands are tried in every order
  bool has_operands = false;     // some node is written in call form (arity, leaves)
};

namespace {

// Edge visiting order: each edge has at least one end bound by the root or earlier edges.
SearchPlan searchPlan(const Pattern& p) {
  SearchPlan plan;
  std::vector<bool> bound(p.nodes.size(), false), used(p.edges.size(), false);
  if (p.nodes.empty()) return plan;
  bound[p.root] = true;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < p.edges.size(); ++i) {
      const PatternEdge& e = p.edges[i];
      if (used[i] || !(bound[e.from] || bound[e.to])) continue;
      used[i] = true;
      bound[e.from] = bound[e.to] = true;
      plan.edges.push_back(i);
      grew = true;
      break;  // restart so that edges stay in declaration order where possible
    }
  }
  plan.permuted.resize(p.nodes.size(), false);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const PatternNode& n = p.nodes[i];
    plan.has_operands |= !n.operands.empty();
    plan.permuted[i] = n.commutative() && n.operands.size() <= kMaxPermutedOperands;
  }
  return plan;
}

// What a pattern node accepts, for reasons: "BatchNormalization", "Relu|Clip", "any op".
std::string opsWanted(const PatternNode& n) {
  if (n.op_types.empty()) return n.domain.empty() ? "any op" : "an op of domain " + n.domain;
  return opsText(n);
}

std::string opOf(const Node& n) {
  return n.domain().empty() ? n.opType() : n.domain() + "::" + n.opType();
}

std::string labelList(const std::vector<Node*>& nodes, size_t cap = 5) {
  std::string s;
  for (size_t i = 0; i < nodes.size() && i < cap; ++i) s += (i ? ", " : "") + nodes[i]->label();
  if (nodes.size() > cap) s += fmt::format(", ... ({} more)", nodes.size() - cap);
  return s;
}

class Matcher {
 public:
  Matcher(const Graph& g, const Pattern& p, const SearchPlan& plan, bool explain)
      : g_(g), p_(p), plan_(plan), explain_(explain), bound_(p.nodes.size(), nullptr) {
    if (plan.has_operands) {
      perm_.resize(p.nodes.size() * kMaxPermutedOperands);
      values_.resize(p.leaves.size(), nullptr);
    }
  }

  // Returns true on a match (in `out`); otherwise fills `miss` when explaining.
  bool run(Node* anchor, Match& out, NearMiss* miss) {
    const PatternNode& rootp = p_.nodes[p_.root];
    if (!rootp.matchesOp(*anchor)) {
      if (miss && explain_) {
        fillMiss(*miss, anchor, "structure", anchor->label(),
                 fmt::format("{} is {}, not {}", anchor->label(), opOf(*anchor), opsWanted(rootp)));
      }
      return false;
    }
    if (bindAndSearch(p_.root, anchor, 0)) {
      out = Match(p_.nodes.size());
      for (size_t i = 0; i < bound_.size(); ++i) out[i] = result_[i];
      out.setRoot(p_.root);
      if (!p_.leaves.empty()) out.bindValues(&p_.leaves, std::move(result_values_));
      return true;
    }
    if (miss && explain_) {
      if (have_constraint_miss_) {
        fillMiss(*miss, anchor, constraint_name_, constraint_node_, constraint_reason_);
      } else {
        fillMiss(*miss, anchor, "structure", fail_node_, fail_reason_);
      }
    }
    return false;
  }

  bool constraintFailure() const { return have_constraint_miss_; }

 private:
  static constexpr int kMaxCompleteBindings = 16;
  static constexpr int kMaxSteps = 100000;

  void fillMiss(NearMiss& m, Node* anchor, std::string constraint, std::string node,
                std::string reason) const {
    m.pattern = p_.name;
    m.anchor = anchor->label();
    m.constraint = std::move(constraint);
    m.node = std::move(node);
    m.reason = std::move(reason);
  }

  bool isBound(const Node* n) const {
    return std::find(bound_.begin(), bound_.end(), n) != bound_.end();
  }
  bool exhausted() const {
    return steps_ > kMaxSteps || complete_bindings_ > kMaxCompleteBindings;
  }

  // The input slot that operand `position` of pattern node k reads under the current order.
  int slotOf(size_t k, int position) const {
    return plan_.permuted[k] ? perm_[k * kMaxPermutedOperands + position] : position;
  }

  // The edge as the graph sees it now: an operand edge into a permuted node reads the slot its
  // order gives, or any slot while that node is unbound.
  PatternEdge effective(const PatternEdge& e) const {
    if (!e.operand || !plan_.permuted[e.to]) return e;
    PatternEdge out = e;
    out.to_input = bound_[e.to] ? slotOf(e.to, e.to_input) : -1;
    return out;
  }

  // Records a structural failure at `step`; the deepest step wins, the first one at a depth.
  template <typename Fn>
  void failAt(size_t step, Node* about, Fn&& reason) {
    if (!explain_) return;
    if (have_fail_ && step <= fail_step_) return;
    have_fail_ = true;
    fail_step_ = step;
    fail_node_ = about->label();
    fail_reason_ = reason();
  }

  // Keeps the anchor's first failed leaf, condition or constraint: the reason it is reported
  // with. `name` and `reason` are called only when explaining, for the first failure.
  template <typename NameFn, typename ReasonFn>
  void noteConstraintMiss(NameFn&& name, const Node& about, ReasonFn&& reason) {
    if (have_constraint_miss_) return;
    have_constraint_miss_ = true;
    if (!explain_) return;
    constraint_name_ = name();
    constraint_node_ = about.label();
    constraint_reason_ = reason();
  }

  // A node written in call form has at least its operands' inputs; a permuted one exactly
  // those (the orders are over all of them).
  bool arityFits(size_t k, Node* n, size_t step) {
    const size_t written = p_.nodes[k].operands.size();
    if (written == 0) return true;
    const size_t have = n->numInputs();
    if (plan_.permuted[k] ? have == written : have >= written) return true;
    failAt(step, n, [&] {
      return fmt::format("{} has {} input{}, the pattern writes {} operands", n->label(), have,
                         have == 1 ? "" : "s", written);
    });
    return false;
  }

  // Binds pattern node k to n for the search from step `next` on; `position` and `slot` as for
  // enter().
  bool bindAndSearch(size_t k, Node* n, size_t next, int position = -1, int slot = -1) {
    if (plan_.has_operands) return enter(k, n, next, position, slot);
    bound_[k] = n;  // the plain path: no arity, no orders
    const bool ok = search(next);
    bound_[k] = nullptr;
    return ok;
  }

  // Binds pattern node k to n and searches on from `next`. A permuted node is tried in each
  // order of its operands; one with operand `position` at input `slot` when position >= 0 (the
  // edge that reached it).
  bool enter(size_t k, Node* n, size_t next, int position, int slot) {
    if (!arityFits(k, n, next == 0 ? 0 : next - 1)) return false;
    bound_[k] = n;
    bool ok = false;
    if (!plan_.permuted[k]) {
      ok = search(next);
    } else {
      uint8_t* order = &perm_[k * kMaxPermutedOperands];
      const size_t m = p_.nodes[k].operands.size();
      std::iota(order, order + m, uint8_t{0});
      do {
        if (position >= 0 && order[position] != slot) continue;
        ok = search(next);
        if (ok || exhausted()) break;
      } while (std::next_permutation(order, order + m));
    }
    bound_[k] = nullptr;
    return ok;
  }

  bool complete() {
    if (++complete_bindings_ > kMaxCompleteBindings) return false;
    Match m(p_.nodes.size());
    for (size_t i = 0; i < bound_.size(); ++i) m[i] = bound_[i];
    m.bindNames(&p_.nodes);
    m.setRoot(p_.root);
    if (plan_.has_operands) {
      if (!leavesFit()) return false;
      if (!p_.leaves.empty()) m.bindValues(&p_.leaves, values_);
    }
    // The nodes' own conditions next: they are part of what the pattern says it matches.
    for (size_t i = 0; i < p_.nodes.size(); ++i) {
      const PatternNode& pn = p_.nodes[i];
      for (const NodeCondition& c : pn.conditions) {
        if (conditionHolds(c, *bound_[i])) continue;
        noteConstraintMiss([&] { return conditionName(c, pn); }, *bound_[i],
                           [&] { return conditionFailure(c, *bound_[i]); });
        return false;
      }
    }
    for (const Constraint& c : p_.constraints) {
      Why why(explain_);
      if (c.holds(m, why)) continue;
      const Node& about = why.node() ? *why.node() : *m.root();
      noteConstraintMiss([&] { return c.name; }, about, [&] { return why.reason(); });
      return false;
    }
    result_ = bound_;
    if (!p_.leaves.empty()) result_values_ = values_;
    return true;
  }

  // Every leaf operand reads what its leaf says, and a leaf read twice reads one value.
  bool leavesFit() {
    std::fill(values_.begin(), values_.end(), nullptr);
    for (size_t k = 0; k < p_.nodes.size(); ++k) {
      const std::vector<PatternOperand>& operands = p_.nodes[k].operands;
      for (size_t pos = 0; pos < operands.size(); ++pos) {
        if (!operands[pos].leaf) continue;
        const Node& n = *bound_[k];
        const size_t slot = static_cast<size_t>(slotOf(k, static_cast<int>(pos)));
        Value* v = slot < n.numInputs() ? n.input(slot) : nullptr;
        const PatternLeaf& leaf = p_.leaves[operands[pos].index];
        Value*& seen = values_[operands[pos].index];
        auto name = [&] {
          const PatternNode& pn = p_.nodes[k];
          return fmt::format("operand:{}.{}", pn.capture.empty() ? opsText(pn) : pn.capture, pos);
        };
        if (!leafFits(leaf, v)) {
          noteConstraintMiss(name, n, [&] { return leafFailure(leaf, n, slot, v); });
          return false;
        }
        if (seen && seen != v) {
          noteConstraintMiss(name, n, [&] {
            return fmt::format("{} input {} '{}' is not ${}, which is '{}'", n.label(), slot,
                               v->name(), leaf.capture, seen->name());
          });
          return false;
        }
        seen = v;
      }
    }
    return true;
  }

  bool search(size_t step) {
    if (++steps_ > kMaxSteps) return false;
    if (step == plan_.edges.size()) return complete();
    const PatternEdge& e = p_.edges[plan_.edges[step]];
    PatternEdge permuted;
    const PatternEdge& edge = e.operand && plan_.permuted[e.to] ? (permuted = effective(e)) : e;
    Node* prod = bound_[e.from];
    Node* cons = bound_[e.to];
    if (prod && cons) return checkEdge(step, edge, prod, cons) && search(step + 1);
    if (prod) return extendToConsumer(step, e, prod);
    return extendToProducer(step, edge, cons);
  }

  bool checkEdge(size_t step, const PatternEdge& e, Node* prod, Node* cons) {
    Value* v = prod->output(e.from_output);
    if (v) {
      for (const Use& u : v->uses()) {
        if (u.node == cons && u.input != Use::kImplicitUse &&
            (e.to_input < 0 || u.input == e.to_input)) {
          return true;
        }
      }
    }
    failAt(step, prod, [&] {
      return e.to_input < 0
                 ? fmt::format("{} output {} does not feed {}", prod->label(), e.from_output,
                               cons->label())
                 : fmt::format("{} output {} does not feed {} at input {}", prod->label(),
                               e.from_output, cons->label(), e.to_input);
    });
    return false;
  }

  bool extendToConsumer(size_t step, const PatternEdge& e, Node* prod) {
    const PatternNode& want = p_.nodes[e.to];
    Value* v = prod->output(e.from_output);
    if (!v) {
      failAt(step, prod, [&] {
        return fmt::format("{} has no output {}", prod->label(), e.from_output);
      });
      return false;
    }
    // Into a permuted node the edge's operand may arrive at any input: each use is an order.
    const bool any_order = e.operand && plan_.permuted[e.to];
    std::vector<Node*> tried;
    for (const Use& u : v->uses()) {
      if (u.input == Use::kImplicitUse) continue;
      if (!any_order && e.to_input >= 0 && u.input != e.to_input) continue;
      Node* c = u.node;
      if (!any_order) {
        if (std::find(tried.begin(), tried.end(), c) != tried.end()) continue;
        tried.push_back(c);
      }
      if (isBound(c) || !want.matchesOp(*c)) continue;
      if (bindAndSearch(e.to, c, step + 1, any_order ? e.to_input : -1, u.input)) return true;
      if (exhausted()) return false;
    }
    failAt(step, prod, [&] { return consumerReason(effective(e), prod, v, want); });
    return false;
  }

  std::string consumerReason(const PatternEdge& e, Node* prod, Value* v,
                             const PatternNode& want) const {
    std::vector<Node*> consumers;
    for (const Use& u : v->uses()) {
      if (u.input == Use::kImplicitUse) continue;
      if (std::find(consumers.begin(), consumers.end(), u.node) == consumers.end())
        consumers.push_back(u.node);
    }
    std::string out = fmt::format("{} output {}", prod->label(), e.from_output);
    if (consumers.empty()) {
      return v->isGraphOutput() ? out + " is only read as a graph output"
                                : out + " has no consumers";
    }
    // Right op at the wrong slot?
    if (e.to_input >= 0) {
      for (const Use& u : v->uses()) {
        if (u.input != Use::kImplicitUse && u.input != e.to_input && !isBound(u.node) &&
            want.matchesOp(*u.node)) {
          return fmt::format("{} feeds {} at input {}, not input {}", out, u.node->label(),
                             u.input, e.to_input);
        }
      }
    }
    bool some_bound_match = false;
    for (Node* c : consumers) some_bound_match |= isBound(c) && want.matchesOp(*c);
    if (some_bound_match) {
      return fmt::format("{} feeds no other {} (consumers: {})", out, opsWanted(want),
                         labelList(consumers));
    }
    return fmt::format("{} feeds {}, not {}", out, labelList(consumers), opsWanted(want));
  }

  bool extendToProducer(size_t step, const PatternEdge& e, Node* cons) {
    const PatternNode& want = p_.nodes[e.from];
    size_t first = e.to_input < 0 ? 0 : static_cast<size_t>(e.to_input);
    size_t last = e.to_input < 0 ? cons->numInputs() : first + 1;
    for (size_t slot = first; slot < last; ++slot) {
      Value* v = cons->input(slot);
      if (!v || !v->producer() || v->producerOutputIndex() != e.from_output) continue;
      Node* p = v->producer();
      if (isBound(p) || !want.matchesOp(*p)) continue;
      if (bindAndSearch(e.from, p, step + 1)) return true;
      if (exhausted()) return false;
    }
    failAt(step, cons, [&] { return producerReason(e, cons, want); });
    return false;
  }

  std::string producerReason(const PatternEdge& e, Node* cons, const PatternNode& want) const {
    auto describeInput = [&](size_t slot) -> std::string {
      Value* v = cons->input(slot);
      if (!v) return fmt::format("input {} is absent", slot);
      if (!v->producer()) return fmt::format("input {} {}", slot, valueOrigin(*v));
      Node* p = v->producer();
      if (v->producerOutputIndex() != e.from_output) {
        return fmt::format("input {} comes from {} output {}, not output {}", slot, p->label(),
                           v->producerOutputIndex(), e.from_output);
      }
      return fmt::format("input {} comes from {}, not {}", slot, p->label(), opsWanted(want));
    };
    if (e.to_input >= 0) {
      if (static_cast<size_t>(e.to_input) >= cons->numInputs()) {
        return fmt::format("{} has no input {}", cons->label(), e.to_input);
      }
      return fmt::format("{} {}", cons->label(), describeInput(e.to_input));
    }
    // One input: say what it is, as for a named slot ("input 0 'X' is a graph input").
    size_t present = 0, only = 0;
    for (size_t slot = 0; slot < cons->numInputs(); ++slot)
      if (cons->input(slot)) ++present, only = slot;
    const Value* single = present == 1 ? cons->input(only) : nullptr;
    if (single && !(single->producer() && isBound(single->producer())))
      return fmt::format("{} {}", cons->label(), describeInput(only));
    std::vector<std::string> from;
    for (size_t slot = 0; slot < cons->numInputs(); ++slot) {
      Value* v = cons->input(slot);
      if (!v) continue;
      from.push_back(v->producer() ? v->producer()->label() : "'" + v->name() + "'");
    }
    std::string list;
    for (size_t i = 0; i < from.size(); ++i) list += (i ? ", " : "") + from[i];
    return fmt::format("no other input of {} comes from {} (inputs from {})", cons->label(),
                       opsWanted(want), list.empty() ? "nothing" : list);
  }

  const Graph& g_;
  const Pattern& p_;
  const SearchPlan& plan_;
  bool explain_;
  std::vector<Node*> bound_;
  std::vector<Node*> result_;
  std::vector<uint8_t> perm_;          // per node, the input slot of each operand position
  std::vector<Value*> values_;         // per leaf, the value bound in the binding under test
  std::vector<Value*> result_values_;  // ... in the match found
  int steps_ = 0;
  int complete_bindings_ = 0;
  bool have_fail_ = false;
  size_t fail_step_ = 0;
  std::string fail_node_, fail_reason_;
  bool have_constraint_miss_ = false;
  std::string constraint_name_, constraint_node_, constraint_reason_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

bool PatternNode::matchesOp(const Node& n) const {
  if (normDomain(n.domain()) != normDomain(domain)) {
    // `*` without a domain matches any op of any domain.
    if (!(op_types.empty() && domain.empty())) return false;
  }
  if (op_types.empty()) return true;
  for (const std::string& t : op_types)
    if (n.opType() == t) return true;
  return false;
}

Node* Match::get(std::string_view capture) const {
  if (!names_) return nullptr;
  for (size_t i = 0; i < names_->size() && i < nodes_.size(); ++i)
    if ((*names_)[i].capture == capture) return nodes_[i];
  return nullptr;
}

Value* Match::value(std::string_view capture) const {
  if (!leaves_ || capture.empty()) return nullptr;
  for (size_t i = 0; i < leaves_->size() && i < values_.size(); ++i)
    if ((*leaves_)[i].capture == capture) return values_[i];
  return nullptr;
}

std::optional<size_t> Pattern::indexOf(std::string_view capture) const {
  if (capture.empty()) return std::nullopt;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].capture == capture) return i;
  return std::nullopt;
}

std::optional<size_t> Pattern::leafIndexOf(std::string_view capture) const {
  if (capture.empty()) return std::nullopt;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (leaves[i].capture == capture) return i;
  return std::nullopt;
}

bool matchAt(const Graph& g, const Pattern& p, Node* anchor, Match& match, NearMiss* miss) {
  if (p.nodes.empty() || !anchor) return false;
  const SearchPlan plan = searchPlan(p);
  Matcher m(g, p, plan, miss != nullptr);
  if (!m.run(anchor, match, miss)) return false;
  match.bindNames(&p.nodes);
  return true;
}

std::vector<Node*> patternAnchors(const Graph& g, const Pattern& p) {
  std::vector<Node*> out;
  if (p.nodes.empty()) return out;
  const PatternNode& root = p.nodes[p.root];
  if (root.op_types.empty()) {
    for (Node* n : g.nodes())
      if (root.matchesOp(*n)) out.push_back(n);
  } else {
    for (const std::string& op : root.op_types)
      for (Node* n : g.nodesOfType(op, root.domain)) out.push_back(n);
  }
  return out;
}

AnchorMatcher::AnchorMatcher(const Pattern& p)
    : pattern_(p), plan_(std::make_shared<const SearchPlan>(searchPlan(p))) {}

bool AnchorMatcher::match(const Graph& g, Node* anchor, const MatchOptions& options,
                          Match& match, NearMiss* miss, bool* missed) const {
  if (missed) *missed = false;
  if (pattern_.nodes.empty() || !anchor) return false;
  const bool explain = options.explain && miss;
  Matcher m(g, pattern_, *plan_, explain);
  if (m.run(anchor, match, explain ? miss : nullptr)) {
    match.bindNames(&pattern_.nodes);
    return true;
  }
  if (explain && missed) *missed = options.report_structural || m.constraintFailure();
  return false;
}

MatchResult matchPattern(const Graph& g, const Pattern& p, const MatchOptions& options) {
  MatchResult r;
  if (p.nodes.empty()) return r;
  const SearchPlan plan = searchPlan(p);
  auto tryAnchor = [&](Node* anchor) {
    ++r.candidates;
    Matcher m(g, p, plan, options.explain);
    Match match;
    NearMiss miss;
    if (m.run(anchor, match, options.explain ? &miss : nullptr)) {
      match.bindNames(&p.nodes);
      r.matches.push_back(std::move(match));
    } else if (options.explain && (options.report_structural || m.constraintFailure())) {
      r.near_misses.push_back(std::move(miss));
    }
  };
  const PatternNode& root = p.nodes[p.root];
  if (root.op_types.empty()) {
    for (Node* n : g.nodes())
      if (root.matchesOp(*n)) tryAnchor(n);
  } else {
    for (const std::string& op : root.op_types)
      for (Node* n : g.nodesOfType(op, root.domain)) tryAnchor(n);
  }
  return r;
}

}  // namespace fusectl::passes
