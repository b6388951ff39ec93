// The Rewriter (all pass edits go through it) and the greedy pattern driver.
#include "fusectl/passes/rewriter.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "fusectl/graph/error.h"

namespace fusectl::passes {

bool Rewriter::stillValid(const Match& m) const {
  for (Node* n : m.nodes())
    if (!n || erased(n)) return false;
  return true;
}

Node* Rewriter::createNode(Graph::NodeSpec spec, Node* position) {
  return graph_.createNode(std::move(spec), position);
}

Value* Rewriter::addConstant(const std::string& name_hint, Tensor t) {
  return graph_.addInitializer(graph_.uniqueValueName(name_hint), std::move(t));
}

namespace {
bool isDead(const Node* n) {
  for (Value* v : n->outputs())
    if (v && (v->hasUses() || v->isGraphOutput())) return false;
  return true;
}
}  // namespace

size_t Rewriter::eraseWithDeadProducers(Node* n) {
  if (!isDead(n)) {
    throwInternal(fmt::format("rewriter: cannot erase {}: its outputs are still used",
                              n->label()));
  }
  size_t count = 0;
  std::vector<Node*> work{n};
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    if (erased(x) || !isDead(x)) continue;
    std::vector<Value*> inputs;
    for (Value* v : x->inputs())
      if (v && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    for (Value* v : x->implicitInputs())
      if (v && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    // Constants read by x alone are removed below: their name-table entries, cache misses in a
    // big graph, load while x is erased.
    for (Value* v : inputs)
      if (v->isInitializer() && v->uses().size() == 1) graph_.prefetchValueName(v->name());
    graph_.eraseNode(x);
    markErased(x);
    ++count;
    for (Value* v : inputs) {
      if (v->graph() != &graph_) continue;  // captured from an outer graph
      if (Node* p = v->producer()) {
        work.push_back(p);
      } else if (v->isInitializer() && !v->isGraphInput() && !v->hasUses() &&
                 !v->isGraphOutput()) {
        graph_.removeInitializer(v);
      }
    }
  }
  return count;
}

void Rewriter::eraseNode(Node* n) {
  graph_.eraseNode(n);
  markErased(n);
}

void Rewriter::bypass(Node* n, size_t input) {
  Value* in = n->input(input);
  Value* out = n->output(0);
  if (!in || !out) {
    throwInternal(fmt::format("rewriter: cannot bypass {}: no input {} or no output", n->label(),
                              input));
  }
  graph_.replaceAllUsesWith(out, in);
  eraseWithDeadProducers(n);
}

std::string bypassBreaksInterface(const Node& n, size_t input) {
  Value* x = n.input(input);
  Value* y = n.output(0);
  if (!x || !y) return fmt::format("{} has no input {} or no output", n.label(), input);
  if (!y->isGraphOutput()) return "";
  if (!x->producer()) {
    return fmt::format("{} output '{}' is a graph output and its input '{}' is {}; removing it "
                       "would change the graph's interface",
                       n.label(), y->name(), x->name(),
                       x->isGraphInput() ? "a graph input" : "a constant");
  }
  if (x->isGraphOutput()) {
    return fmt::format("{} output '{}' and its input '{}' are both graph outputs", n.label(),
                       y->name(), x->name());
  }
  return "";
}

namespace {
uint64_t staticBytes(const Value* v) {
  if (!v || !v->type.isTensor()) return 0;
  std::optional<int64_t> numel = v->shape().staticNumel();
  if (!numel) return 0;
  return dtypeStorageBytes(v->dtype(), *numel);
}
}  // namespace

void Rewriter::commitFusion(const std::string& pattern, const Match& m, Value* replaced_output,
                            Node* replacement, Portability portability) {
  if (!replaced_output || !replacement || !replacement->output(0)) {
    throwInternal(fmt::format("rewriter: fusion '{}' has no replaced value or no replacement "
                              "output (an output name \"\" means an omitted output)",
                              pattern));
  }
  struct Before {
    Node* node;
    std::string label;
    uint64_t internal_bytes;
  };
  std::vector<Before> before;
  for (Node* n : m.nodes()) {
    if (!n) continue;
    uint64_t bytes = 0;
    for (Value* v : n->outputs())
      if (v != replaced_output) bytes += staticBytes(v);
    before.push_back({n, n->label(), bytes});
  }
  Node* anchor = replaced_output->producer();
  if (anchor && anchor != replacement) graph_.moveBefore(replacement, anchor);
  graph_.replaceAllUsesWith(replaced_output, replacement->output(0));
  // Consumers come after producers in a match's usual order; erase from the back so that a
  // node is dead by the time it is visited.
  for (auto it = before.rbegin(); it != before.rend(); ++it)
    if (!erased(it->node) && isDead(it->node)) eraseWithDeadProducers(it->node);

  FusionSite site;
  site.pass = ctx_.currentPass();
  site.pattern = pattern;
  for (const Before& b : before) {
    // A node rewritten in place (the replacement is one of the matched nodes) counts as
    // replaced: its output now carries the match's result.
    if (!erased(b.node) && b.node != replacement) continue;
    site.replaced_nodes.push_back(b.label);
    site.activation_bytes_saved += b.internal_bytes;
  }
  site.new_node = replacement->label();
  site.new_op = replacement->domain().empty() ? replacement->opType()
                                              : replacement->domain() + "::" +
                                                    replacement->opType();
  site.portability = portability;
  std::string stamp = fmt::format("fusectl {}: fused {}", site.pass,
                                  fmt::join(site.replaced_nodes, ", "));
  replacement->doc_string = replacement->doc_string.empty()
                                ? stamp
                                : replacement->doc_string + "\n" + stamp;
  if (expected_sites_ != 0) {
    ctx_.report().expectFusions(expected_sites_);
    expected_sites_ = 0;
  }
  ctx_.report().addFusion(std::move(site));
}

size_t applyPattern(Graph& graph, PassContext& ctx, const Pattern& pattern,
                    const std::function<bool(Rewriter&, const Match&)>& rewrite) {
  return applyPatterns(graph, ctx, {&pattern},
                       [&](Rewriter& rw, size_t, const Match& m) { return rewrite(rw, m); });
}

size_t applyPatterns(Graph& graph, PassContext& ctx, const std::vector<const Pattern*>& forms,
                     const std::function<bool(Rewriter&, size_t, const Match&)>& rewrite) {
  MatchOptions options;
  options.explain = ctx.explain();
  const std::vector<Node*> anchors = patternAnchors(graph, *forms.at(0));
  std::vector<AnchorMatcher> matchers;
  matchers.reserve(forms.size());
  for (const Pattern* p : forms) matchers.emplace_back(*p);
  ctx.count("candidates", static_cast<int64_t>(anchors.size()));
  Rewriter rw(graph, ctx);
  rw.expectFusionSites(anchors.size());
  size_t matches = 0;
  size_t rewrites = 0;
  for (Node* anchor : anchors) {
    if (rw.erased(anchor)) {
      ctx.count("skipped_overlap");
      continue;
    }
    Match m;
    std::optional<NearMiss> reported;
    size_t matched = forms.size();
    for (size_t f = 0; f < forms.size() && matched == forms.size(); ++f) {
      NearMiss miss;
      bool missed = false;
      if (matchers[f].match(graph, anchor, options, m, options.explain ? &miss : nullptr,
                            &missed)) {
        matched = f;
      } else if (missed && (!reported || (reported->constraint == "structure" &&
                                          miss.constraint != "structure"))) {
        reported = std::move(miss);
      }
    }
    if (matched == forms.size()) {
      if (reported) ctx.report().addRejection(std::move(*reported), ctx.currentPass());
      continue;
    }
    ++matches;
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      break;
    }
    if (rewrite(rw, matched, m)) ++rewrites;
  }
  ctx.count("matches", static_cast<int64_t>(matches));
  ctx.count("rewrites", static_cast<int64_t>(rewrites));
  return rewrites;
}

}  // namespace fusectl::passes
