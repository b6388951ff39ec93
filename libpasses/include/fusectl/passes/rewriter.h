// The Rewriter: how passes edit the graph.
//
// It wraps Graph's mutation API with what passes need on top: the rewrite budget
// (--max-rewrites), a record of nodes erased during the current sweep (so a driver never
// touches a match whose nodes are gone), fusion-site reporting, and traceable names (a fused
// node's doc string lists the nodes it replaced).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/hash_buckets.h"
#include "fusectl/passes/pass.h"
#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

class Rewriter {
 public:
  Rewriter(Graph& graph, PassContext& ctx) : graph_(graph), ctx_(ctx) {}

  Graph& graph() { return graph_; }
  PassContext& context() { return ctx_; }

  // True when none of the match's nodes was erased in this sweep (for drivers that match
  // everything first and rewrite later, as fuse-epilogue's does).
  bool stillValid(const Match& m) const;
  bool erased(const Node* n) const {
    return erased_.find(pointerHash(n), [n](const Node* k) { return k == n; }) != nullptr;
  }

  Node* createNode(Graph::NodeSpec spec, Node* position = nullptr);
  Value* addConstant(const std::string& name_hint, Tensor t);  // a new initializer
  void replaceAllUsesWith(Value* from, Value* to) { graph_.replaceAllUsesWith(from, to); }
  // Erases `n` (all its outputs must be unused) and then every producer, and every initializer
  // that is not a graph input, left without uses; remembers the nodes as erased. Read what you
  // need from those initializers before erasing. Returns the number of nodes erased.
  size_t eraseWithDeadProducers(Node* n);
  void eraseNode(Node* n);
  // The "remove node" action: every reader of n's output 0 reads n's input `input` instead,
  // then n is erased. The caller checks that this keeps the graph's interface (n's output
  // being a graph output while its input is a graph input, for instance, must not be bypassed).
  void bypass(Node* n, size_t input = 0);

  // Replaces the matched nodes by `replacement` (a new node, or one of the matched nodes edited
  // in place, which then counts as replaced but stays): moves it right before the
  // producer of `replaced_output` (a value produced by the match) so the order stays
  // topological, rewires that value's readers to the replacement's output 0, erases what became
  // dead, stamps the replacement's doc string with the replaced node labels, and reports the
  // site with the bytes of the match's internal tensors that no longer exist.
  void commitFusion(const std::string& pattern, const Match& m, Value* replaced_output,
                    Node* replacement, Portability portability);

  // Reports a candidate that did not fuse.
  void reject(const NearMiss& miss) { ctx_.report().addRejection(miss, ctx_.currentPass()); }

  // This sweep has up to `sites` candidates: the report makes room for them at the first
  // fusion (Report::expectFusions), not before, so a sweep that fuses nothing reserves nothing.
  void expectFusionSites(size_t sites) { expected_sites_ = sites; }

 private:
  static uint64_t pointerHash(const Node* n) { return reinterpret_cast<uintptr_t>(n); }
  void markErased(const Node* n) { erased_.insert(pointerHash(n), n); }

  Graph& graph_;
  PassContext& ctx_;
  size_t expected_sites_ = 0;
  // Nodes erased in this sweep, each once (a fold erases a few nodes per site, and
  // std::unordered_set's allocation per entry was a visible cost at a million sites).
  HashBuckets<const Node> erased_{64};
};

// Why bypassing `n` (its output 0 replaced by its input `input`) would change the graph's
// interface, or "" when it would not. It would when output 0 is a graph output and the input is
// a graph input or an initializer (the output's name would move onto it), or is itself a graph
// output (one value cannot carry two output names).
std::string bypassBreaksInterface(const Node& n, size_t input = 0);

// Greedy driver for a pattern pass: takes the pattern's anchors (patternAnchors: the root-type
// nodes as they are now) and visits them in order, matching each on the graph as the earlier
// rewrites of this sweep left it, and rewriting at once: each site is matched once and edited
// while its nodes are still in cache (on a 1M-node graph, matching everything first and
// revisiting it later cost a third of the pass). An anchor erased by an earlier rewrite is
// skipped (counter "skipped_overlap"). Before each rewrite it asks ctx.allowRewrite()
// (--max-rewrites); then `rewrite` edits through the Rewriter and returns true when it changed
// the graph. Near misses go to the report as rejections.
// Counters: "candidates", "matches", "rewrites". Returns the number of rewrites.
size_t applyPattern(Graph& graph, PassContext& ctx, const Pattern& pattern,
                    const std::function<bool(Rewriter&, const Match&)>& rewrite);

// applyPattern for alternative forms of one rewrite whose roots have the same op types (the
// anchors are the first form's): at each anchor the first form that matches is rewritten, and
// `rewrite` is told which (its index in `forms`). When none matches, the most telling miss is
// reported: a failed condition or constraint before a structural mismatch, else the earlier
// form's.
size_t applyPatterns(Graph& graph, PassContext& ctx, const std::vector<const Pattern*>& forms,
                     const std::function<bool(Rewriter&, size_t, const Match&)>& rewrite);

}  // namespace fusectl::passes
