// merge-transposes: compose consecutive Transposes into one and remove identity permutations.
//
//   x -> Transpose<perm=p1> -> t -> Transpose<perm=p2> -> y  =>  x -> Transpose<perm=q> -> y
//   x -> Transpose<perm=identity> -> y                       =>  x
//
// The math: Transpose(x, p) has out.dims[i] = x.dims[p[i]] (out axis i is input axis p[i]).
// Chaining, y axis i is t axis p2[i], which is x axis p1[p2[i]]: q[i] = p1[p2[i]]. A missing
// perm reverses the axes, so it needs the input's rank, and it is the identity only for rank
// <= 1.
//
// Conditions (each failure is a reported rejection):
//  1. Both perms are known: given, or omitted with the input's rank known; and each is a
//     permutation of the same rank.
//  2. Merging: the second Transpose reads x directly; the first stays while other nodes (or the
//     graph's outputs) read t, so merging is legal with any number of consumers.
//  3. Removing an identity Transpose keeps the interface (bypassBreaksInterface): when that
//     fails after a merge, the merged Transpose stays with the identity perm.
// Nodes are visited in topological order, so a chain of any length collapses in one run.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

class MergeTransposesPass : public Pass {
 public:
  const PassInfo& info() const override { return MergeTransposesPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    if (graph.nodesOfType("Transpose").empty()) return false;
    Rewriter rw(ctx);
    bool changed = false;
    // Topological order, so that a chain's first Transpose is merged before the next.
    for (Node* n : graph.nodesSnapshot()) {
      if (rw.erased(n) || !n->is("Transpose")) continue;
      changed |= merge(rw, n);
      if (!rw.erased(n)) changed |= removeIdentity(rw, n);
    }
    return changed;
  }

 private:
  void reject(Rewriter& rw, const Node& n, const char* constraint, const std::string& reason) {
    rw.reject(NearMiss{"merge-transposes", n.label(), constraint, n.label(), reason});
  }

  // Transpose(Transpose(x, p1), p2) -> Transpose(x, q).
  bool merge(Rewriter& rw, Node* second) {
    PassContext& ctx = rw.context();
    Value* t = second->input(0);
    Node* first = t ? t->producer() : nullptr;
    if (!first || !first->is("Transpose")) return false;
    std::string why;
    std::optional<std::vector<int64_t>> p1 = transposePerm(*first, ctx.explain() ? &why : nullptr);
    std::optional<std::vector<int64_t>> p2;
    if (p1) p2 = transposePerm(*second, ctx.explain() ? &why : nullptr);
    if (!p1 || !p2 || p1->size() != p2->size()) {
      if (ctx.explain() && p1 && p2) {
        why = fmt::format("{} perm has {} entries but {} has {}", second->label(), p2->size(),
                          first->label(), p1->size());
      }
      if (ctx.explain()) reject(rw, *second, "known-perms", why);
      return false;
    }
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    std::vector<int64_t> q(p2->size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = (*p1)[static_cast<size_t>((*p2)[i])];
    rw.rewireInput(second, 0, first->input(0));
    rw.setAttribute(second, Attribute::ofInts("perm", q));
    ctx.count("merged");
    if (!t->hasUses() && !t->isGraphOutput()) rw.eraseWithDeadProducers(first);
    return true;
  }

  bool removeIdentity(Rewriter& rw, Node* n) {
    PassContext& ctx = rw.context();
    std::optional<std::vector<int64_t>> perm = transposePerm(*n, nullptr);
    if (!perm || !isIdentityPermutation(*perm)) return false;
    if (std::string why = bypassBreaksInterface(*n); !why.empty()) {
      if (ctx.explain()) reject(rw, *n, "keeps-interface", why);
      return false;
    }
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    rw.bypass(n);
    ctx.count("removed_identity");
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createMergeTransposesPass() {
  return std::make_unique<MergeTransposesPass>();
}

}  // namespace fusectl::passes
