// The Rewriter: the only way a pass edits the graph.
//
// A pass sees the graph as const (Pass::run(const Graph&, PassContext&)) and makes every edit
// through a Rewriter on its context, in whole actions: replace the matched nodes with one new
// node, replace a constant, rewire an input, rename, remove. Each action keeps right what a
// hand-written edit tends to forget: value and node names stay unique, and a replacement takes
// over the names its readers know; use lists and the op-type index (Graph's mutation API); the
// model's opset imports (creating a fusectl-domain node imports domain "fusectl" version 1);
// the report's fusion sites, with the bytes of intermediates that disappeared; the fused node's
// doc-string stamp (fusion_stamp.h); and the set of nodes erased in this sweep, so that a driver
// never touches a match whose nodes are gone. Every action but the two whole-graph sweeps
// (eraseDeadNodes, eraseUnusedInitializers) costs O(size of the nodes and values it touches):
// passes run them a million times on large graphs.
//
// The Rewriter does not ask the --max-rewrites budget: a pass (or applyPattern) asks
// ctx.allowRewrite() before a rewrite, which may take several actions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/hash_buckets.h"
#include "fusectl/passes/pass.h"
#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

// How a node the Rewriter creates is named (node names may repeat in ONNX; "" stays unnamed
// under every rule).
enum class NodeNaming {
  AsGiven,   // the name as given, even when another node has it
  Unique,    // a fresh variant of the name when it is taken (picked after the output's name)
  TakeOver,  // a fresh variant while the named node exists, then the name itself once the
             // replacement erased that node (picked before the output's name)
};

// A node for the Rewriter to create. Its one output is named and typed by the action.
struct NewNode {
  std::string op_type;
  std::string domain;          // "" for ai.onnx; "fusectl" makes the model import that domain
  std::vector<Value*> inputs;  // nullptr for an omitted optional input
  std::vector<Attribute> attributes;
  std::string name;
  NodeNaming naming = NodeNaming::AsGiven;
  // The doc string it starts with: the node it stands for passes its own on, so the stamps of
  // earlier rewrites stay (the action adds this one's after them).
  RareString doc_string;
  // Outputs after the ones the action gives, named after these hints (unique), untyped and
  // unread: outputs an op must have even where nothing reads them (GroupQueryAttention's
  // present key and value).
  std::vector<std::string> extra_outputs;
};

class Rewriter {
 public:
  // Edits the graph `ctx` runs its pass on (PassContext::graph()).
  explicit Rewriter(PassContext& ctx);

  const Graph& graph() const { return graph_; }
  PassContext& context() { return ctx_; }

  // Whether `n` was erased by an action of this Rewriter (for walks over a snapshot). Keyed by
  // address: a node made later at an erased node's address reads as erased too, which is what
  // a snapshot walk wants (that entry is gone) but is wrong for a node reached through the live
  // graph, which is never erased; do not ask about those.
  bool erased(const Node* n) const {
    return erased_.find(pointerHash(n), [n](const Node* k) { return k == n; }) != nullptr;
  }
  // True when none of the match's nodes was erased by this Rewriter.
  bool stillValid(const Match& m) const;

  // ---- Fusions: the matched nodes give way to one node ----

  // Replaces the matched nodes with a new node whose output 0 stands for `replaced` (a value
  // produced by the match): the node is created right before `replaced`'s producer, its output
  // takes `replaced`'s type, then its readers and its name (a fresh variant until the old value
  // is gone); the matched nodes left without readers are erased, with the producers and
  // constants only they kept alive. The node's doc string gets the stamp naming the replaced
  // nodes, and the report the fusion site (pattern `pattern`, portability fusectl when the node
  // is in the fusectl domain) with the bytes of the match's internal values that disappeared.
  Node* replaceMatch(std::string_view pattern, const Match& m, Value* replaced, NewNode node);
  // replaceMatch for a replacement with a second output, output `kept_output` (1 unless the op
  // puts it later, as SkipSimplifiedLayerNormalization's input_skip_bias_sum at 3; the outputs between
  // are omitted), that stands for `kept`: a value the match computes (before `replaced`) that
  // readers outside the match still need, such as the residual sum a SkipLayerNorm takes in.
  // The node is created where `kept`'s producer was, so that it comes before every reader of
  // either value; those outside the match read that output instead, which then takes `kept`'s
  // name. `kept` must be no graph output.
  Node* replaceMatchKeeping(std::string_view pattern, const Match& m, Value* replaced,
                            Value* kept, NewNode node, size_t kept_output = 1);
  // replaceMatch with one of the matched nodes, edited in place, as the replacement: it keeps
  // its name and place, its output 0 takes `replaced`'s type, readers and name, and it counts
  // as replaced in the fusion site.
  void replaceMatchInPlace(std::string_view pattern, const Match& m, Value* replaced,
                           Node* kept);
  // A node reading `v` (one of `node`'s inputs; v has a producer), placed right after v's
  // producer, that takes over every other use of v: its readers, and its place and name among
  // the graph outputs (v is then renamed). Its one output is named after `output_hint` and has
  // type `type`. For a fused node that computes a value in another shape than the one it
  // replaced (fuse-attention's Attention on [1, N, S, D] for heads folded into the batch, then
  // a Squeeze back to [N, S, D]); note it with noteHelperNode.
  Node* insertAfterValue(Value* v, NewNode node, std::string_view output_hint,
                         const ValueType& type);
  // A further new node of a replacement (the Mul of a BatchNormalization decomposed into Mul +
  // Add), inserted before `position`; its one output is named after `output_hint` (unique) and
  // has type `type`. The last node of the replacement comes from replaceMatch.
  Node* addNode(NewNode node, std::string_view output_hint, const ValueType& type,
                Node* position);

  // ---- Constants ----

  // A new initializer named after `name_hint` (unique).
  Value* addConstant(std::string_view name_hint, Tensor t);
  // Input `input` of `n` becomes a constant holding `t`: written into the present constant when
  // `n` is its only reader and it is no graph input or output (it keeps its name and place in
  // the file), else a new initializer named after `name_hint`; the old constant is removed
  // when nothing reads it any more.
  void setConstantInput(Node* n, size_t input, Tensor t, std::string_view name_hint);
  // Replaces outputs of `n` by constants: each (output, value) pair becomes an initializer that
  // its readers read and that takes over its name (a graph output stays one, under its name);
  // then `n` and what only it kept alive are erased. Outputs not listed must be unused.
  void replaceWithConstants(Node* n, std::vector<std::pair<Value*, Tensor>> outputs);
  // Every reader of the initializer `constant` reads `by` instead; `constant` is removed. It
  // must not be a graph input or output.
  void replaceConstant(Value* constant, Value* by);

  // ---- Inputs, names, attributes ----

  // Input `input` of `n` reads `v` (the input list grows when needed). The value it read
  // before, when an initializer that nothing reads any more and no graph input or output, is
  // removed; returns whether it was (its name is then free to take over).
  bool rewireInput(Node* n, size_t input, Value* v);
  // Renames; the name must be free (graph().findValue / findNode say whether it is).
  void renameValue(Value* v, const std::string& name);
  void renameNode(Node* n, const std::string& name);
  // Sets an attribute of `n`, replacing one of the same name.
  void setAttribute(Node* n, Attribute a);

  // ---- Removal ----

  // The "remove node" action: every reader of n's output 0 reads n's input `input` instead,
  // then n is erased. The caller checks that this keeps the graph's interface
  // (bypassBreaksInterface).
  void bypass(Node* n, size_t input = 0);
  // Replaces `old` by `node`, a respelling that computes the same value: readers of old's
  // output read the new node's, which takes over the output's name and old's node name; old and
  // what only it read are erased. Not replaceMatch: a respelling is no fusion, so it leaves no
  // fusion site in the report and no stamp in the doc string (canonicalize,
  // reshape-unit-transposes).
  Node* replaceNode(Node* old, NewNode node);
  // `n` computes what `same` computes (output i of one is output i of the other): readers of
  // n's outputs read same's, and n is erased. When one of n's outputs is a graph output, same's
  // output takes over its name (the caller checks that same's is not one too).
  void replaceByEquivalent(Node* n, Node* same);
  // Erases `n` (all its outputs must be unused) and then every producer, and every initializer
  // that is not a graph input, left without uses. Read what you need from those initializers
  // before erasing. Returns the number of nodes erased.
  size_t eraseWithDeadProducers(Node* n);
  // Erases every node that no graph output depends on; returns how many. These are not
  // recorded as erased: call it on its own, not during a walk over a snapshot.
  size_t eraseDeadNodes();
  // Removes the initializers nothing reads that are not graph inputs; returns how many.
  size_t eraseUnusedInitializers();

  // ---- Types ----

  // Infers every value's type again (inferShapes over the whole model, replacing what is
  // there): for a pass whose new nodes make dims known that the unfused graph hid from
  // inference (fuse-attention's output is [B, H, S, D] where the Softmax/Where/mask chain left
  // "?"), so that the passes after it see them. O(model): once per pass run, not per rewrite.
  void reinferShapes();

  // ---- Reporting ----

  // `v` keeps its name but from now on holds another value than the original model's of that
  // name (prefold-rms-norm-weight leaves a norm without its weight, which the MatMuls reading
  // it now carry): --gate must not compare it with the original's (Report::redefined_values).
  void noteRedefined(const Value& v) {
    ctx_.report().redefined_values.emplace(v.name(), ctx_.currentPass());
  }

  // The fusion site recorded last also stands on `helper`, a node this rewrite made besides
  // its fused node (FusionSite::helper_nodes).
  void noteHelperNode(const Node& helper);
  // Reports a candidate that did not fuse.
  void reject(const NearMiss& miss) { ctx_.report().addRejection(miss, ctx_.currentPass()); }
  // This sweep has up to `sites` candidates: the report makes room for them at the first
  // fusion (Report::expectFusions), not before, so a sweep that fuses nothing reserves nothing.
  void expectFusionSites(size_t sites) { expected_sites_ = sites; }

 private:
  static uint64_t pointerHash(const Node* n) { return reinterpret_cast<uintptr_t>(n); }
  void markErased(const Node* n) { erased_.insert(pointerHash(n), n); }
  // eraseWithDeadProducers, adding what it erases to `erased_here` and skipping what is there.
  size_t eraseWithDeadProducers(Node* n, std::unordered_set<const Node*>& erased_here);
  // A second output (named after `second_hint`, of `second_type`, at `second_index` with the
  // outputs between omitted) when second_type is given.
  Node* create(NewNode node, std::string_view output_hint, const ValueType& type,
               Node* position, std::string_view second_hint = {},
               const ValueType* second_type = nullptr, size_t second_index = 1);
  // Moves `replacement` before the producer of `replaced_output`, rewires that value's readers
  // to replacement output 0, erases what became dead, stamps the doc string and reports the
  // site.
  // `kept` (replaceMatchKeeping) is a matched value that lives on as a second output of the
  // replacement: its bytes are not saved. `move` false leaves the replacement where it was created.
  void commitFusion(std::string_view pattern, const Match& m, Value* replaced_output,
                    Node* replacement, const Value* kept = nullptr, bool move = true);
  // After commitFusion: the replacement's output takes `name` (the replaced value's, now gone)
  // when it is free.
  void takeOverValueName(Value* v, const std::string& name);
  void recordFinalLabel(const Node* replacement);

  Graph& graph_;
  PassContext& ctx_;
  size_t expected_sites_ = 0;
  // While commitFusion erases a match: the producers eraseWithDeadProducers takes with it
  // (label, bytes of its outputs), which the fusion removed as well (fuse-swiglu's packed form
  // leaves merge-parallel-matmuls' Slices without readers).
  std::vector<std::pair<std::string, uint64_t>>* dead_producers_ = nullptr;
  // Nodes erased in this sweep, each once (a fold erases a few nodes per site, and
  // std::unordered_set's allocation per entry was a visible cost at a million sites).
  HashBuckets<const Node> erased_{64};
};

// Why bypassing `n` (its output 0 replaced by its input `input`) would change the graph's
// interface, or "" when it would not. It would when output 0 is a graph output and the input is
// a graph input or an initializer (the output's name would move onto it), or is itself a graph
// output (one value cannot carry two output names).
std::string bypassBreaksInterface(const Node& n, size_t input = 0);

// How a pattern driver walks its anchors.
struct DriverOptions {
  // Structural mismatches are near misses too (MatchOptions::report_structural); when false
  // only failed conditions and constraints are reported.
  bool report_structural = true;
  // Greedy (false): each anchor is matched on the graph as the earlier rewrites of this sweep
  // left it, and rewritten at once. Snapshot (true): every anchor is matched first, on the graph
  // as the sweep found it (counters and rejections describe that graph), then each match whose
  // nodes all survived the earlier rewrites is matched again at its root and rewritten; the
  // others count as "skipped_overlap".
  bool match_all_first = false;
  // When set, only the anchors it accepts are matched, counted as candidates and reported
  // when they miss: a cheap test for passes whose anchors are mostly no instance at all
  // (canonicalize's spellings, a Conv with a tap that reads only padding).
  std::function<bool(const Node&)> candidate;
};

// Driver for a pattern pass: takes the pattern's anchors (patternAnchors: the root-type nodes
// as they are now) and visits them in order. Greedily (the default) each site is matched once
// and edited while its nodes are still in cache (on a 1M-node graph, matching everything first
// and revisiting it later cost a third of the pass); an anchor erased by an earlier rewrite is
// skipped (counter "skipped_overlap"). Before each rewrite it asks ctx.allowRewrite()
// (--max-rewrites); then `rewrite` edits through the Rewriter and returns true when it changed
// the graph. Near misses go to the report as rejections.
// Counters: "candidates", "matches", "rewrites". Returns the number of rewrites.
size_t applyPattern(const Graph& graph, PassContext& ctx, const Pattern& pattern,
                    const std::function<bool(Rewriter&, const Match&)>& rewrite,
                    const DriverOptions& driver = {});

// applyPattern for alternative forms of one rewrite whose roots have the same op types (the
// anchors are the first form's): at each anchor the first form that matches is rewritten, and
// `rewrite` is told which (its index in `forms`). When none matches, the most telling miss is
// reported: a failed condition or constraint before a structural mismatch, else the earlier
// form's.
size_t applyPatterns(const Graph& graph, PassContext& ctx,
                     const std::vector<const Pattern*>& forms,
                     const std::function<bool(Rewriter&, size_t, const Match&)>& rewrite,
                     const DriverOptions& driver = {});

// applyPattern for a pass whose anchors are mostly no instance at all (a Gemm between other
// ops, a MatMul without a Transpose): only failed conditions and constraints are reported as
// rejections, and each match is rewritten by rewrite(rw, match). Returns whether anything was
// rewritten.
template <typename Rewrite>
bool applyReportingConditions(const Graph& graph, PassContext& ctx, const Pattern& pattern,
                              Rewrite&& rewrite) {
  DriverOptions driver;
  driver.report_structural = false;
  return applyPattern(
             graph, ctx, pattern,
             [&](Rewriter& rw, const Match& m) {
               rewrite(rw, m);
               return true;
             },
             driver) > 0;
}

// applyPatterns for a pass whose patterns() are alternative forms of one fusion, each with a
// kind of the pass's own (kinds[i] for form i), rewritten by fuse(rw, pattern, kind, match).
// Only failed conditions and constraints are reported: every node of the forms' root op is an
// anchor, and most are no instance at all. Returns whether anything was rewritten.
template <typename Kind, size_t N, typename Fuse>
bool applyForms(const Graph& graph, PassContext& ctx, const std::vector<Pattern>& forms,
                const Kind (&kinds)[N], Fuse&& fuse) {
  std::vector<const Pattern*> ptrs;
  for (const Pattern& p : forms) ptrs.push_back(&p);
  DriverOptions driver;
  driver.report_structural = false;
  return applyPatterns(graph, ctx, ptrs,
                       [&](Rewriter& rw, size_t form, const Match& m) {
                         fuse(rw, forms[form], kinds[form], m);
                         return true;
                       },
                       driver) > 0;
}

}  // namespace fusectl::passes
