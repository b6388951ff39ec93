// fuse-elementwise: what the specific fusions left of elementwise arithmetic (a mask's
// (1 - m) * -10000, a squeeze-excite gate's x * sigmoid(s), an activation nobody took, a scale
// and shift) goes into fusectl::Elementwise nodes, each one straight-line program over its
// inputs (elementwise_program.h) that one kernel runs in one pass over memory.
//
//   a ─> Sub(1, a) ─> Mul(·, -10000) ─┐
//   b ────────────────────────────────> Add ─> Y    =>   Elementwise(a, b) ─> Y
//      program: t0 = Sub(1, x0); t1 = Mul(t0, -10000); t2 = Add(t1, x1)
//
// Grouping (after TVM's FuseOps): the nodes are visited from the last to the first; a node not
// yet in a group roots one, and the group takes in every producer whose output only the group
// reads (it is post-dominated by the root inside the group), until nothing more qualifies, so
// a group is a tree or a DAG with one output. A group of one node stays as it is.
//
// A node may join when, each failure a reported rejection where it keeps a neighbour out:
//  1. its op is in the program's instruction set (op classes elementwise-unary/-binary and
//     activation; Max/Min of exactly two inputs; Clip with constant bounds; the exact Gelu);
//  2. its output is float32, float16 or bfloat16 (fusibleFloatTypes) and its inputs are of that
//     type (the kernel computes half in float32: the group's roundings after each op become one);
//  3. its output is no graph output and is read by group members only (one output leaves the
//     group), and has the group output's shape: a smaller value would be computed again for
//     every output element it broadcasts to (a [1, 1, 1, S] mask chain 12 x S times over), so
//     it stays out and the program broadcasts it as an input. Equal dims prove it, or, where
//     dims are unknown, the broadcasting of the elementwise ops between the two
//     (SameShapeClasses);
//  4. the group stays within 64 instructions and 8 tensor inputs (the kernel's registers and
//     fusectl::Elementwise's inputs);
//  and the model imports opset 7 or later (before it the binary ops broadcast one way, along an
//  `axis`).
// One-element constants of the group's type become numbers in the program when that cannot change the
// output's rank; other constants (a bias, a per-channel scale) are inputs.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "constant_math.h"
#include "fusectl/graph/clip_bounds.h"
#include "fusectl/graph/elementwise_program.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

constexpr const char* kPattern = "elementwise";

// What one node computes as an instruction: its op and parameters, and which of its inputs are
// the operands.
struct Translation {
  EwOp op = EwOp::Neg;
  std::array<float, 2> params{};
  std::vector<Value*> operands;
};

// A one-element constant's value, of a fusible float type (a float16/bfloat16 value is exact in
// float32, so the program's float32 constant is the model's constant).
std::optional<float> constantScalar(const Value* v) {
  if (!v || !constraints::isFusibleFloat(v->dtype())) return std::nullopt;
  std::optional<double> c = scalarConstant(v);
  if (!c) return std::nullopt;
  return static_cast<float>(*c);
}

// The instruction `n` stands for, or nullopt with `why` (conditions 1 and 2).
std::optional<Translation> translate(const Node& n, int64_t opset, std::string& why) {
  Translation t;
  const std::string& op = n.opType();
  const bool fusectl_gelu = n.domain() == "fusectl" && op == "Gelu";
  if (!n.domain().empty() && !fusectl_gelu) {
    why = fmt::format("{} is a {}-domain op outside the program's instruction set",
                      n.label(), n.domain());
    return std::nullopt;
  }
  if (n.numOutputs() != 1 || !n.output(0)) {
    why = fmt::format("{} has {} outputs; an instruction has one", n.label(), n.numOutputs());
    return std::nullopt;
  }
  std::optional<EwOp> ew = fusectl_gelu ? std::optional<EwOp>(EwOp::Gelu) : findEwOp(op);
  if (op == "Gelu" && !fusectl_gelu) {
    if (n.attrString("approximate", "none") != "none") {
      why = fmt::format("{} is the tanh Gelu, which the instruction set does not have",
                        n.label());
      return std::nullopt;
    }
    ew = EwOp::Gelu;
  }
  if (!ew) {
    why = fmt::format("{} ({}) is not in the program's instruction set", n.label(), op);
    return std::nullopt;
  }
  t.op = *ew;
  const EwOpInfo& info = ewOpInfo(t.op);
  switch (t.op) {
    case EwOp::LeakyRelu: t.params[0] = n.attrFloat("alpha", 0.01f); break;
    case EwOp::Elu: t.params[0] = n.attrFloat("alpha", 1.0f); break;
    case EwOp::Selu:
      t.params[0] = n.attrFloat("alpha", 1.67326319217681884765625f);
      t.params[1] = n.attrFloat("gamma", 1.05070102214813232421875f);
      break;
    case EwOp::HardSigmoid:
      t.params[0] = n.attrFloat("alpha", 0.2f);
      t.params[1] = n.attrFloat("beta", 0.5f);
      break;
    case EwOp::Clip: {
      // The Clip kernel's defaults (fusectl/graph/clip_bounds.h), in the program's float.
      const bool attribute_form = opset < 11;
      const auto [start_lo, start_hi] =
          clipBoundsBeforeInputs(n, n.output(0)->dtype(), attribute_form);
      t.params[0] = static_cast<float>(start_lo);
      t.params[1] = static_cast<float>(start_hi);
      if (attribute_form) break;
      for (size_t i = 1; i <= 2 && i < n.numInputs(); ++i) {
        if (!n.input(i)) continue;
        std::optional<float> bound = constantScalar(n.input(i));
        if (!bound) {
          why = fmt::format("{} bound '{}' is not a one-element float constant", n.label(),
                            n.input(i)->name());
          return std::nullopt;
        }
        t.params[i - 1] = *bound;
      }
      break;
    }
    default: break;
  }
  const size_t operands = static_cast<size_t>(info.operands);
  const size_t inputs = t.op == EwOp::Clip ? std::min<size_t>(n.numInputs(), 1) : n.numInputs();
  if (inputs != operands) {
    why = fmt::format("{} has {} inputs; the instruction {} takes {}", n.label(), n.numInputs(),
                      info.name, operands);
    return std::nullopt;
  }
  for (size_t i = 0; i < operands; ++i) {
    Value* v = n.input(i);
    if (!v) {
      why = fmt::format("{} input {} is empty", n.label(), i);
      return std::nullopt;
    }
    t.operands.push_back(v);
  }
  const DType type = n.output(0)->dtype();
  if (!constraints::isFusibleFloat(type)) {
    why = fmt::format("{} writes type {}; Elementwise computes float32, float16 or bfloat16",
                      n.label(), dtypeName(type));
    return std::nullopt;
  }
  for (const Value* v : t.operands) {
    if (v->dtype() != type) {
      why = fmt::format("{} reads '{}' of type {} and writes {}; an Elementwise group has one "
                        "type", n.label(), v->name(), dtypeName(v->dtype()), dtypeName(type));
      return std::nullopt;
    }
  }
  return t;
}

// Values whose shapes are provably one another's even where their dims are not known (a
// convolution's output over a dynamic plane, [N, C, ?, ?]): an elementwise node's output has the
// shape of an operand that every other operand broadcasts into (each of their dims is 1 or
// provably that operand's, or the two are in one class already). So x * gate[N, C, 1, 1] and
// x + that product are in x's class, and both may join a group whose output is x + x * gate.
class SameShapeClasses {
 public:
  // `order` topological; call only for opset 7 and later (trailing-axis broadcasting).
  explicit SameShapeClasses(const std::vector<Node*>& order) {
    for (const Node* n : order) {
      const bool elementwise = n->domain().empty() && isElementwise(opClassOf(*n));
      if (!elementwise || n->numOutputs() != 1 || !n->output(0) || n->numInputs() == 0) continue;
      for (size_t i = 0; i < n->numInputs(); ++i) {
        const Value* u = n->input(i);
        if (!u || !u->shape().hasRank()) continue;
        bool dominates = true;
        for (size_t j = 0; j < n->numInputs() && dominates; ++j)
          if (j != i && n->input(j)) dominates = broadcastsInto(n->input(j), u);
        const Shape& out = n->output(0)->shape();
        if (dominates && (!out.hasRank() || out.rank() == u->shape().rank())) {
          parent_[n->output(0)] = find(u);
          break;
        }
      }
    }
  }

  bool same(const Value* a, const Value* b) {
    return dimsProvablyEqual(a->shape(), b->shape()) || find(a) == find(b);
  }

 private:
  std::unordered_map<const Value*, const Value*> parent_;

  const Value* find(const Value* v) {
    auto it = parent_.find(v);
    if (it == parent_.end()) return v;
    const Value* root = find(it->second);
    it->second = root;
    return root;
  }

  // Every dim of w is 1 or u's (aligned from the last), or w has u's shape by class.
  bool broadcastsInto(const Value* w, const Value* u) {
    if (find(w) == find(u)) return true;
    const Shape& ws = w->shape();
    const Shape& us = u->shape();
    if (!ws.hasRank() || ws.rank() > us.rank()) return false;
    const size_t offset = us.rank() - ws.rank();
    for (size_t d = 0; d < ws.rank(); ++d) {
      const Dim& wd = ws[d];
      if (wd.isStatic() && wd.value() == 1) continue;
      if (!wd.provablyEqual(us[offset + d])) return false;
    }
    return true;
  }
};

// One arithmetic instruction per element, no more than reading an operand costs: computed once
// per output element inside a group, such an op costs what reading its output broadcast would.
bool cheapPerElement(EwOp op) {
  switch (op) {
    case EwOp::Add:
    case EwOp::Sub:
    case EwOp::Mul:
    case EwOp::Neg:
    case EwOp::Abs:
    case EwOp::Relu:
    case EwOp::Max:
    case EwOp::Min: return true;
    default: return false;
  }
}

struct Candidate {
  Translation t;
  size_t position = 0;  // index in node order
  int group = -1;
};

class FuseElementwisePass : public Pass {
 public:
  const PassInfo& info() const override { return FuseElementwisePassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const int64_t opset = ctx.opset();
    std::vector<Node*> order;
    for (Node* n : graph.nodes()) order.push_back(n);
    // Which nodes may join a group, with what they compute; the others that are elementwise by
    // class keep their reason for the report (given only where they keep a neighbour out).
    std::unordered_map<const Node*, Candidate> candidates;
    std::unordered_map<const Node*, std::string> declined;
    for (size_t i = 0; i < order.size(); ++i) {
      Node* n = order[i];
      const bool elementwise = isElementwise(opClassOf(*n)) ||
                               (n->domain().empty() && (n->is("Max") || n->is("Min")));
      if (!elementwise) continue;
      std::string why;
      if (std::optional<Translation> t = translate(*n, opset, why)) {
        candidates.emplace(n, Candidate{std::move(*t), i, -1});
      } else {
        declined.emplace(n, std::move(why));
      }
    }
    if (candidates.empty()) return false;
    Rewriter rw(ctx);
    if (opset > 0 && opset < 7) {
      NearMiss miss;
      miss.pattern = kPattern;
      miss.constraint = "opset";
      miss.anchor = miss.node = order.front()->label();
      miss.reason = fmt::format("the model imports opset {}: before 7 the binary ops broadcast "
                                "one way along an axis, which the program does not express",
                                opset);
      rw.reject(miss);
      return false;
    }

    SameShapeClasses shapes(order);
    shapes_ = &shapes;
    bool changed = false;
    int next_group = 0;
    for (size_t i = order.size(); i-- > 0;) {
      Node* root = order[i];
      auto it = candidates.find(root);
      if (it == candidates.end() || it->second.group >= 0) continue;
      const int id = next_group++;
      std::vector<Node*> members = grow(rw, candidates, declined, root, id);
      if (members.size() < 2) continue;
      ctx.count("candidates");
      if (ctx.refused(*root)) {
        ctx.count("refused_by_gate");
        continue;
      }
      if (!ctx.allowRewrite()) break;
      if (fuse(rw, candidates, members)) changed = true;
    }
    flushRejections(rw);
    shapes_ = nullptr;
    return changed;
  }

 private:
  SameShapeClasses* shapes_ = nullptr;  // of the running sweep
  // A node kept out of the group of `root`, reported when the sweep is over (flushRejections).
  struct Deferred {
    std::string root, node, constraint, reason;
  };
  std::vector<Deferred> deferred_;
  std::set<std::string> fused_labels_;  // every node a rewrite of this sweep replaced

  void reject(Rewriter& rw, const Node& root, const Node& node, std::string constraint,
              std::string reason) {
    deferred_.push_back({root.label(), node.label(), std::move(constraint), std::move(reason)});
    rw.context().count("declined");
  }

  // The report drops the near misses of an anchor that fused (pruneRejectionsFusedLater), so
  // each is anchored on whichever of the two did not fuse: the node kept out (the group fused
  // without it) or the root (the group stayed a lone node). When both fused, in groups of
  // their own, nothing is left to explain.
  void flushRejections(Rewriter& rw) {
    for (Deferred& d : deferred_) {
      NearMiss miss;
      miss.pattern = kPattern;
      if (!fused_labels_.count(d.node)) {
        miss.anchor = d.node;
      } else if (!fused_labels_.count(d.root)) {
        miss.anchor = d.root;
      } else {
        continue;
      }
      miss.node = d.node;
      miss.constraint = std::move(d.constraint);
      miss.reason = std::move(d.reason);
      rw.reject(miss);
    }
    deferred_.clear();
    fused_labels_.clear();
  }

  // The group rooted at `root`: the root, then every producer whose output only the group reads
  // (condition 3), within the caps (condition 4). Marks the members with `id`.
  std::vector<Node*> grow(Rewriter& rw, std::unordered_map<const Node*, Candidate>& cands,
                          const std::unordered_map<const Node*, std::string>& declined,
                          Node* root, int id) {
    std::vector<Node*> members = {root};
    std::set<const Node*> in_group = {root};
    cands.at(root).group = id;
    // The values the group reads from outside, to hold the input cap.
    auto externalInputs = [&](const std::vector<Node*>& ms, const std::set<const Node*>& set) {
      std::set<const Value*> ext;
      for (const Node* m : ms)
        for (const Value* v : cands.at(m).t.operands)
          if (!v->producer() || !set.count(v->producer())) {
            if (!v->isConstant() || v->initializer()->numel() != 1) ext.insert(v);
          }
      return ext.size();
    };
    std::set<const Node*> reported;
    // Ops outside the instruction set next to the group: reported only when the group fused
    // something (next to a lone node they kept nothing out).
    std::vector<std::string> pending;
    std::vector<const Node*> pending_nodes;
    bool grew = true;
    while (grew) {
      grew = false;
      for (size_t m = 0; m < members.size(); ++m) {
        for (const Value* v : cands.at(members[m]).t.operands) {
          Node* p = v->producer();
          if (!p || in_group.count(p)) continue;
          auto pc = cands.find(p);
          if (pc == cands.end()) {
            auto d = declined.find(p);
            if (d != declined.end() && reported.insert(p).second) {
              pending.push_back(d->second);
              pending_nodes.push_back(p);
            }
            continue;
          }
          if (pc->second.group >= 0) continue;  // the root of a group already formed
          if (v->isGraphOutput()) {
            if (reported.insert(p).second)
              reject(rw, *root, *p, "unique-consumer",
                     fmt::format("{} output '{}' is a graph output; one output leaves a group",
                                 p->label(), v->name()));
            continue;
          }
          std::vector<Node*> outside;
          for (Node* reader : v->consumers())
            if (!in_group.count(reader)) outside.push_back(reader);
          if (!outside.empty()) continue;  // may qualify once those readers join
          // A producer of a smaller value (a [1, 1, 1, S] mask before it meets [B, H, S, S]
          // scores) would run once per output element instead of once per its own: it stays
          // out, and its output is an input the program broadcasts. A cheap one whose shape is
          // unknown where the output's is (Silero's |STFT|: Sqrt(Mul(re, re) + Mul(im, im)) over
          // [?, 129, ?]) joins: at worst it costs what reading its output broadcast would.
          const bool cheap_and_maybe_same =
              cheapPerElement(pc->second.t.op) &&
              !provablyDiffer(v->shape(), root->output(0)->shape());
          if (!cheap_and_maybe_same && !shapes_->same(v, root->output(0))) {
            if (reported.insert(p).second)
              reject(rw, *root, *p, "same-shape",
                     fmt::format("{} output '{}' {} is not provably the shape {} of the group's "
                                 "output: inside the group it would be computed once per output "
                                 "element",
                                 p->label(), v->name(), v->shape().str(),
                                 root->output(0)->shape().str()));
            continue;
          }
          if (members.size() >= kMaxElementwiseInstructions) {
            if (reported.insert(p).second)
              reject(rw, *root, *p, "group-size",
                     fmt::format("the group of {} already has {} instructions, the most a "
                                 "program runs",
                                 root->label(), kMaxElementwiseInstructions));
            continue;
          }
          std::vector<Node*> trial = members;
          trial.push_back(p);
          std::set<const Node*> trial_set = in_group;
          trial_set.insert(p);
          if (externalInputs(trial, trial_set) > kMaxElementwiseInputs) {
            if (reported.insert(p).second)
              reject(rw, *root, *p, "group-size",
                     fmt::format("taking {} in would give the group of {} more than {} tensor "
                                 "inputs",
                                 p->label(), root->label(), kMaxElementwiseInputs));
            continue;
          }
          members.push_back(p);
          in_group.insert(p);
          pc->second.group = id;
          grew = true;
        }
      }
    }
    // Producers left out because something outside reads them: a near miss worth naming when
    // they are candidates themselves (they root a group of their own).
    for (const Node* m : members) {
      for (const Value* v : cands.at(m).t.operands) {
        Node* p = v->producer();
        if (!p || in_group.count(p) || reported.count(p) || !cands.count(p)) continue;
        if (cands.at(p).group >= 0 && cands.at(p).group != id) continue;
        std::string readers;
        size_t outside = 0;
        for (Node* reader : v->consumers()) {
          if (in_group.count(reader)) continue;
          if (++outside <= 3) readers += fmt::format("{}{}", outside > 1 ? ", " : "", reader->label());
        }
        if (outside == 0) continue;
        reported.insert(p);
        reject(rw, *root, *p, "unique-consumer",
               fmt::format("{} output '{}' is also read outside the group of {} ({}{}); one "
                           "output leaves a group",
                           p->label(), v->name(), root->label(), readers,
                           outside > 3 ? fmt::format(" and {} more", outside - 3) : ""));
      }
    }
    if (members.size() < 2) return members;
    for (size_t k = 0; k < pending.size(); ++k)
      reject(rw, *root, *pending_nodes[k], "instruction-set", pending[k]);
    std::sort(members.begin(), members.end(), [&](const Node* a, const Node* b) {
      return cands.at(a).position < cands.at(b).position;
    });
    return members;
  }

  // Writes the group as one Elementwise node.
  bool fuse(Rewriter& rw, const std::unordered_map<const Node*, Candidate>& cands,
            const std::vector<Node*>& members) {
    Node* root = members.back();
    std::map<const Node*, int> temp_of;
    for (size_t i = 0; i < members.size(); ++i) temp_of[members[i]] = static_cast<int>(i);
    // The tensor inputs' ranks decide which one-element constants may become numbers: one of a
    // higher rank than every tensor input would raise the output's rank.
    size_t max_rank = 0;
    bool ranks_known = true;
    for (const Node* m : members) {
      for (const Value* v : cands.at(m).t.operands) {
        if (v->producer() && temp_of.count(v->producer())) continue;
        if (v->isConstant() && v->initializer()->numel() == 1) continue;
        if (!v->shape().hasRank()) ranks_known = false;
        else max_rank = std::max(max_rank, v->shape().rank());
      }
    }
    ElementwiseProgram program;
    std::vector<Value*> inputs;
    auto inputIndex = [&](Value* v) {
      auto at = std::find(inputs.begin(), inputs.end(), v);
      if (at != inputs.end()) return static_cast<int>(at - inputs.begin());
      inputs.push_back(v);
      return static_cast<int>(inputs.size() - 1);
    };
    for (const Node* m : members) {
      const Translation& t = cands.at(m).t;
      EwInstruction ins;
      ins.op = t.op;
      ins.params = t.params;
      for (size_t k = 0; k < t.operands.size(); ++k) {
        Value* v = t.operands[k];
        EwOperand& a = ins.args[k];
        if (v->producer() && temp_of.count(v->producer())) {
          a.kind = EwOperand::Kind::Temp;
          a.index = temp_of.at(v->producer());
        } else if (std::optional<float> c = constantScalar(v);
                   c && (v->shape().rank() == 0 || (ranks_known && v->shape().rank() <= max_rank))) {
          a.kind = EwOperand::Kind::Constant;
          a.value = *c;
        } else {
          a.kind = EwOperand::Kind::Input;
          a.index = inputIndex(v);
        }
      }
      program.instructions.push_back(ins);
    }
    if (inputs.empty() || inputs.size() > kMaxElementwiseInputs) {
      reject(rw, *root, *root, inputs.empty() ? "tensor-input" : "group-size",
             inputs.empty() ? fmt::format("the group of {} reads only constants (fold-constants' "
                                          "work)", root->label())
                            : fmt::format("the group of {} has {} tensor inputs, more than {}",
                                          root->label(), inputs.size(), kMaxElementwiseInputs));
      return false;
    }
    for (const Node* m : members) fused_labels_.insert(m->label());
    NewNode node;
    node.op_type = "Elementwise";
    node.domain = "fusectl";
    node.inputs = inputs;
    node.name = root->name();
    node.attributes.push_back(Attribute::ofString("program", program.str()));
    Match site(members.size());
    site[0] = root;  // the root first: the site is named after it
    for (size_t i = 0, k = 1; i + 1 < members.size(); ++i) site[k++] = members[i];
    rw.replaceMatch(kPattern, site, root->output(0), std::move(node));
    rw.context().count("fused_groups");
    rw.context().count("fused_ops", static_cast<int64_t>(members.size()));
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseElementwisePass() {
  return std::make_unique<FuseElementwisePass>();
}

}  // namespace fusectl::passes
