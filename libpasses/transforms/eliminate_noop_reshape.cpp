// eliminate-noop-reshape: remove Reshape/Flatten nodes that keep their input's shape, and let a
// Reshape of a Reshape read the first one's input.
//
//   x:[N,3,4] -> Reshape(s=[0,3,-1]) -> y:[N,3,4]        =>  x
//   x:[N,12]  -> Flatten<axis=1> -> y:[N,12]             =>  x
//   x -> Reshape(s1) -> r -> Reshape(s2) -> y            =>  x -> Reshape(s2) -> y
//
// No-op conditions (each failure worth telling is a reported rejection):
//  1. The output shape provably equals the input's for every value of the symbolic dims. For a
//     Reshape with a constant target (the `shape` attribute before opset 5): same rank, and per
//     entry i: 0 (without allowzero) copies dim i; a positive k needs input dim i static k; one
//     -1 is proven once all other entries are (equal element counts then force it). Otherwise
//     the inferred output shape must provably equal the input's. Flatten keeps a rank-2 input
//     with axis 1 (axis 0 / axis 2 when the leading / trailing dim is 1).
//  2. The interface survives (bypassBreaksInterface): an output that is a graph output while
//     the input is a graph input, a constant or another graph output is kept.
// Merge conditions, for Reshape(r, s2) with r = Reshape(x, s1) or Flatten(x):
//  1. The result depends on the intermediate r only through its element count, which x shares:
//     true when s2 has no 0 entry that copies a dim of r (allowzero=1 has none). A 0 at entry i
//     stays when dim i of x provably equals dim i of r (e.g. s1[i] is a copying 0 as well), and
//     becomes the static value of r's dim i when that is known (a new shape constant);
//     otherwise the merge is rejected, naming the entry. s2 must then be a constant.
//  2. Opset >= 5 (the `shape` attribute form is not rewritten).
// Other readers of r keep the first node; it is erased once nothing reads r. Nodes are visited
// in topological order, so a chain of Reshapes collapses in one run (and the merged Reshape is
// then checked for being a no-op).
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

std::optional<std::vector<int64_t>> constantInts(const Value* v) {
  if (!v || !v->isConstant()) return std::nullopt;
  const Tensor& t = *v->initializer();
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32) return std::nullopt;
  if (t.dims().size() > 1) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = t.valueAsInt64(static_cast<int64_t>(i));
  return out;
}

// The target shape of a Reshape when it is a constant (input 1, or the attribute before opset 5).
std::optional<std::vector<int64_t>> reshapeTarget(const Node& n, int64_t opset) {
  if (opset > 0 && opset < 5) {
    if (!n.hasAttr("shape")) return std::nullopt;
    return n.attrInts("shape");
  }
  return constantInts(n.input(1));
}

bool allowZero(const Node& n, int64_t opset) {
  return opset >= 14 && n.attrInt("allowzero", 0) != 0;
}

enum class Verdict { Noop, Changes, Unproven };

// Whether every dim of `out` provably equals the same dim of `in`.
bool provablySameShape(const Shape& in, const Shape& out) {
  if (!in.hasRank() || !out.hasRank() || in.rank() != out.rank()) return false;
  for (size_t i = 0; i < in.rank(); ++i)
    if (!in[i].provablyEqual(out[i])) return false;
  return true;
}

Verdict reshapeVerdict(const Node& n, int64_t opset, std::string* why) {
  Value* x = n.input(0);
  Value* y = n.output(0);
  const Shape& in = x->shape();
  std::optional<std::vector<int64_t>> target = reshapeTarget(n, opset);
  if (!target) {
    if (provablySameShape(in, y->shape())) return Verdict::Noop;
    if (in.hasRank() && y->shape().hasRank() && in.rank() != y->shape().rank())
      return Verdict::Changes;
    if (why) *why = fmt::format("{} target shape '{}' is not a constant and the inferred output "
                                "shape {} is not provably the input shape {}",
                                n.label(), n.input(1) ? n.input(1)->name() : "", y->shape().str(),
                                in.str());
    return Verdict::Unproven;
  }
  if (!in.hasRank()) {
    if (why) *why = fmt::format("{} input '{}' has unknown rank", n.label(), x->name());
    return Verdict::Unproven;
  }
  if (target->size() != in.rank()) return Verdict::Changes;
  const bool allowzero = allowZero(n, opset);
  int infer = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t t = (*target)[i];
    const Dim& d = in[i];
    if (t == 0 && !allowzero) continue;  // copies dim i
    if (t == -1) {
      if (infer >= 0) return Verdict::Changes;  // invalid; the kernel rejects it
      infer = static_cast<int>(i);
      continue;
    }
    if (d.isStatic()) {
      if (d.value() != t) return Verdict::Changes;
      continue;
    }
    if (why) *why = fmt::format("{} sets dim {} to {} but the input's dim {} is '{}'", n.label(),
                                i, t, i, d.str());
    return Verdict::Unproven;
  }
  if (infer >= 0) {
    // All other dims equal the input's; the -1 dim is numel(x) / their product, which is the
    // input's dim unless that product is 0 (then the kernel fails on either graph).
    for (size_t i = 0; i < in.rank(); ++i) {
      if (static_cast<int>(i) != infer && in[i].isStatic() && in[i].value() == 0) {
        if (why) *why = fmt::format("{} infers dim {} next to a zero dim", n.label(), infer);
        return Verdict::Unproven;
      }
    }
  }
  return Verdict::Noop;
}

Verdict flattenVerdict(const Node& n, std::string* why) {
  const Shape& in = n.input(0)->shape();
  if (!in.hasRank()) {
    if (why) *why = fmt::format("{} input '{}' has unknown rank", n.label(), n.input(0)->name());
    return Verdict::Unproven;
  }
  if (in.rank() != 2) return Verdict::Changes;
  int64_t axis = n.attrInt("axis", 1);
  if (axis < 0) axis += 2;
  if (axis == 1) return Verdict::Noop;
  const Dim& one = axis == 0 ? in[0] : in[1];  // the dim that must be 1
  if (one.isStatic()) return one.value() == 1 ? Verdict::Noop : Verdict::Changes;
  if (why) *why = fmt::format("{} with axis {} keeps the shape only if dim {} ('{}') is 1",
                              n.label(), axis, axis == 0 ? 0 : 1, one.str());
  return Verdict::Unproven;
}

class EliminateNoopReshapePass : public Pass {
 public:
  const PassInfo& info() const override { return EliminateNoopReshapePassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    if (graph.nodesOfType("Reshape").empty() && graph.nodesOfType("Flatten").empty()) return false;
    Rewriter rw(ctx);
    const int64_t opset = ctx.opset();
    bool changed = false;
    // Topological order (not the op-type index's creation order): a chain's first Reshape is
    // visited before the next one.
    for (Node* n : graph.nodesSnapshot()) {
      if (rw.erased(n)) continue;
      if (n->is("Reshape")) {
        changed |= mergeReshape(rw, n, opset);
        changed |= removeNoop(rw, n, opset);
      } else if (n->is("Flatten")) {
        changed |= removeNoop(rw, n, opset);
      }
    }
    return changed;
  }

 private:
  static void reject(Rewriter& rw, const Node& n, const char* pattern, const char* constraint,
                     const std::string& reason) {
    rw.reject(NearMiss{pattern, n.label(), constraint, n.label(), reason});
  }

  bool removeNoop(Rewriter& rw, Node* n, int64_t opset) {
    PassContext& ctx = rw.context();
    if (!n->input(0) || !n->output(0)) return false;
    std::string why;
    std::string* want = ctx.explain() ? &why : nullptr;
    Verdict v = n->is("Reshape") ? reshapeVerdict(*n, opset, want) : flattenVerdict(*n, want);
    if (v == Verdict::Changes) return false;
    if (v == Verdict::Unproven) {
      if (ctx.explain()) reject(rw, *n, "noop", "same-shape", why);
      return false;
    }
    if (std::string broken = bypassBreaksInterface(*n); !broken.empty()) {
      if (ctx.explain()) reject(rw, *n, "noop", "keeps-interface", broken);
      return false;
    }
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    ctx.count(n->is("Reshape") ? "removed_reshape" : "removed_flatten");
    rw.bypass(n);
    return true;
  }

  // Reshape(Reshape(x, s1) or Flatten(x), s2) -> Reshape(x, s2').
  bool mergeReshape(Rewriter& rw, Node* second, int64_t opset) {
    PassContext& ctx = rw.context();
    Value* r = second->input(0);
    Node* first = r ? r->producer() : nullptr;
    if (!first || !(first->is("Reshape") || first->is("Flatten"))) {
      return false;
    }
    if (!first->input(0)) return false;
    if (opset > 0 && opset < 5) {
      if (ctx.explain()) {
        reject(rw, *second, "merge", "opset",
               fmt::format("{} is a Reshape-{} (shape attribute); merging needs opset 5",
                           second->label(), opset));
      }
      return false;
    }
    Value* x = first->input(0);
    Value* s2 = second->input(1);
    std::optional<std::vector<int64_t>> target;
    bool new_target = false;
    if (!allowZero(*second, opset)) {
      target = constantInts(s2);
      if (!target) {
        if (ctx.explain()) {
          reject(rw, *second, "merge", "constant-target",
                 fmt::format("{} target shape '{}' is not a constant; a 0 in it would copy a "
                             "dim of '{}'",
                             second->label(), s2 ? s2->name() : "", r->name()));
        }
        return false;
      }
      const Shape& rs = r->shape();
      const Shape& xs = x->shape();
      for (size_t i = 0; i < target->size(); ++i) {
        if ((*target)[i] != 0) continue;
        bool same = rs.hasRank() && xs.hasRank() && i < rs.rank() && i < xs.rank() &&
                    rs[i].provablyEqual(xs[i]);
        if (!same && first->is("Reshape") && !allowZero(*first, opset)) {
          std::optional<std::vector<int64_t>> t1 = reshapeTarget(*first, opset);
          same = t1 && i < t1->size() && (*t1)[i] == 0;  // both copy dim i of x
        }
        if (same) continue;
        if (rs.hasRank() && i < rs.rank() && rs[i].isStatic() && rs[i].value() > 0) {
          (*target)[i] = rs[i].value();
          new_target = true;
          continue;
        }
        if (ctx.explain()) {
          reject(rw, *second, "merge", "no-copied-dim",
                 fmt::format("{} target entry {} is 0 and copies dim {} of '{}' ('{}'), which "
                             "is not provably dim {} of '{}'",
                             second->label(), i, i, r->name(),
                             rs.hasRank() && i < rs.rank() ? rs[i].str() : "?", i, x->name()));
        }
        return false;
      }
    }
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    if (new_target) {
      const std::string old_name = s2->name();
      Value* s = rw.addConstant(old_name, Tensor::fromValues<int64_t>(
                                              DType::Int64,
                                              {static_cast<int64_t>(target->size())}, *target));
      // The new target takes the old one's name when that one is gone.
      if (rw.rewireInput(second, 1, s)) rw.renameValue(s, old_name);
    }
    rw.rewireInput(second, 0, x);
    ctx.count("merged");
    if (!r->hasUses() && !r->isGraphOutput()) rw.eraseWithDeadProducers(first);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateNoopReshapePass() {
  return std::make_unique<EliminateNoopReshapePass>();
}

}  // namespace fusectl::passes
