// The Rewriter (all pass edits go through it) and the pattern drivers.
#include "fusectl/passes/rewriter.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "fusectl/graph/error.h"
#include "fusectl/graph/shape_inference.h"
#include "fusectl/passes/fusion_stamp.h"

namespace fusectl::passes {

Rewriter::Rewriter(PassContext& ctx) : graph_(*ctx.model_.graph), ctx_(ctx) {}

bool Rewriter::stillValid(const Match& m) const {
  for (Node* n : m.nodes())
    if (!n || erased(n)) return false;
  return true;
}

namespace {
uint64_t staticBytesOf(const Value* v);  // below
}  // namespace

Node* Rewriter::create(NewNode node, std::string_view output_hint, const ValueType& type,
                       Node* position, std::string_view second_hint,
                       const ValueType* second_type, size_t second_index) {
  std::string name = std::move(node.name);
  // The order of the two unique-name picks matters: both draw on the graph's one name counter,
  // and the names a pass has always produced depend on it.
  if (node.naming == NodeNaming::TakeOver && !name.empty()) name = graph_.uniqueNodeName(name);
  std::vector<std::string> outputs = {graph_.uniqueValueName(output_hint)};
  if (second_type) {
    outputs.resize(second_index);  // the optional outputs before it, omitted ("")
    outputs.push_back(graph_.uniqueValueName(second_hint));
  }
  for (const std::string& hint : node.extra_outputs) outputs.push_back(graph_.uniqueValueName(hint));
  if (node.naming == NodeNaming::Unique && !name.empty()) name = graph_.uniqueNodeName(name);
  const std::string domain = node.domain;
  Node* n = graph_.createNode({std::move(node.op_type), std::move(node.domain),
                               std::move(node.inputs), std::move(outputs), std::move(name),
                               std::move(node.attributes)},
                              position);
  n->output(0)->type = type;
  if (second_type) n->output(second_index)->type = *second_type;
  n->doc_string = std::move(node.doc_string);
  // A node of another domain (fusectl, com.microsoft) makes the model import it, version 1.
  if (!domain.empty() && domain != "ai.onnx" && ctx_.model_.opsetVersion(domain) == 0)
    ctx_.model_.setOpsetVersion(domain, 1);
  return n;
}

Node* Rewriter::addNode(NewNode node, std::string_view output_hint, const ValueType& type,
                        Node* position) {
  return create(std::move(node), output_hint, type, position);
}

Node* Rewriter::replaceNode(Node* old, NewNode node) {
  Value* y = old->output(0);
  const std::string name = y->name();
  node.name = old->name();
  node.naming = NodeNaming::TakeOver;
  node.doc_string = old->doc_string;
  const std::string node_name = old->name();
  Node* n = addNode(std::move(node), name + "_canonical", y->type, old);
  replaceByEquivalent(old, n);
  if (n->output(0)->name() != name && !graph_.findValue(name)) renameValue(n->output(0), name);
  // The new node is the same node in another spelling: it keeps the old one's name, so that a
  // later fusion's replaced nodes (and `profile`, which looks them up in the original model)
  // name what the model calls it.
  if (!node_name.empty() && n->name() != node_name && !graph_.findNode(node_name)) {
    renameNode(n, node_name);
  }
  return n;
}

Node* Rewriter::insertAfterValue(Value* v, NewNode node, std::string_view output_hint,
                                 const ValueType& type) {
  Node* producer = v->producer();
  if (!producer) {
    throwInternal(fmt::format("rewriter: insertAfterValue on '{}', which no node produces",
                              v->name()));
  }
  Node* n = create(std::move(node), output_hint, type, producer->next());
  Value* out = n->output(0);
  graph_.replaceAllUsesWith(v, out);
  // The new node's own reading of v was redirected too: give it v back.
  for (size_t i = 0; i < n->numInputs(); ++i)
    if (n->input(i) == out) graph_.setNodeInput(n, i, v);
  return n;
}

Node* Rewriter::replaceMatch(std::string_view pattern, const Match& m, Value* replaced,
                             NewNode node) {
  if (!replaced) {
    throwInternal(fmt::format("rewriter: fusion '{}' has no replaced value", pattern));
  }
  const std::string replaced_name = replaced->name();
  const std::string node_name = node.name;
  const bool take_over_node_name = node.naming == NodeNaming::TakeOver && !node_name.empty();
  Node* n = create(std::move(node), replaced_name, replaced->type, replaced->producer());
  commitFusion(pattern, m, replaced, n);
  takeOverValueName(n->output(0), replaced_name);
  if (take_over_node_name && n->name() != node_name && !graph_.findNode(node_name))
    graph_.renameNode(n, node_name);
  recordFinalLabel(n);
  return n;
}

Node* Rewriter::replaceMatchKeeping(std::string_view pattern, const Match& m, Value* replaced,
                                    Value* kept, NewNode node, size_t kept_output) {
  if (!replaced || !kept || kept->isGraphOutput() || !kept->producer()) {
    throwInternal(fmt::format("rewriter: fusion '{}' keeps no value, or one that is a graph "
                              "output or has no producer",
                              pattern));
  }
  const std::string replaced_name = replaced->name();
  const std::string kept_name = kept->name();
  if (kept_output == 0) throwInternal(fmt::format("rewriter: fusion '{}' keeps its value as output 0", pattern));
  Node* n = create(std::move(node), replaced_name, replaced->type, kept->producer(), kept_name,
                   &kept->type, kept_output);
  const std::vector<Node*>& matched = m.nodes();
  for (Node* reader : kept->consumers()) {
    if (std::find(matched.begin(), matched.end(), reader) != matched.end()) continue;
    for (size_t i = 0; i < reader->numInputs(); ++i)
      if (reader->input(i) == kept) graph_.setNodeInput(reader, i, n->output(kept_output));
  }
  commitFusion(pattern, m, replaced, n, kept, /*move=*/false);
  takeOverValueName(n->output(0), replaced_name);
  takeOverValueName(n->output(kept_output), kept_name);
  recordFinalLabel(n);
  return n;
}

void Rewriter::replaceMatchInPlace(std::string_view pattern, const Match& m, Value* replaced,
                                   Node* kept) {
  if (!replaced || !kept || !kept->output(0)) {
    throwInternal(fmt::format("rewriter: fusion '{}' has no replaced value or no kept output",
                              pattern));
  }
  const std::string replaced_name = replaced->name();
  kept->output(0)->type = replaced->type;
  commitFusion(pattern, m, replaced, kept);
  takeOverValueName(kept->output(0), replaced_name);
  recordFinalLabel(kept);
}

// The site was recorded before the replacement took over the replaced value's and node's
// names; the report must name the node as it is in the written model (an unnamed node's label
// is its first output's name, which only now is the replaced one).
void Rewriter::recordFinalLabel(const Node* replacement) {
  if (!ctx_.report().fusions.empty()) ctx_.report().fusions.back().new_node = replacement->label();
}

void Rewriter::takeOverValueName(Value* v, const std::string& name) {
  if (v->name() != name && !graph_.findValue(name)) graph_.renameValue(v, name);
}

void Rewriter::reinferShapes() { inferShapes(ctx_.model_); }

Value* Rewriter::addConstant(std::string_view name_hint, Tensor t) {
  return graph_.addInitializer(graph_.uniqueValueName(name_hint), std::move(t));
}

void Rewriter::setConstantInput(Node* n, size_t input, Tensor t, std::string_view name_hint) {
  Value* old = n->input(input);
  if (old && old->isInitializer() && old->uses().size() == 1 && !old->isGraphInput() &&
      !old->isGraphOutput()) {
    old->setInitializer(std::move(t));
    return;
  }
  rewireInput(n, input, addConstant(name_hint, std::move(t)));
}

void Rewriter::replaceWithConstants(Node* n, std::vector<std::pair<Value*, Tensor>> outputs) {
  std::vector<std::pair<Value*, std::string>> renames;
  for (auto& [v, t] : outputs) {
    std::string name = v->name();
    const bool graph_output = v->isGraphOutput();
    Value* c = addConstant(name, std::move(t));
    graph_.replaceAllUsesWith(v, c);  // a graph output's name moves onto c
    if (!graph_output) renames.emplace_back(c, std::move(name));
  }
  eraseWithDeadProducers(n);
  // The erased outputs freed their names: the constants take them, so readers keep reading a
  // value of the same name.
  for (auto& [c, name] : renames) takeOverValueName(c, name);
}

void Rewriter::replaceConstant(Value* constant, Value* by) {
  graph_.replaceAllUsesWith(constant, by);
  graph_.removeInitializer(constant);
}

bool Rewriter::rewireInput(Node* n, size_t input, Value* v) {
  Value* old = n->input(input);
  graph_.setNodeInput(n, input, v);
  if (!old || old == v || !old->isInitializer() || old->hasUses() || old->isGraphInput() ||
      old->isGraphOutput()) {
    return false;
  }
  graph_.removeInitializer(old);
  return true;
}

void Rewriter::renameValue(Value* v, const std::string& name) { graph_.renameValue(v, name); }

void Rewriter::renameNode(Node* n, const std::string& name) { graph_.renameNode(n, name); }

void Rewriter::setAttribute(Node* n, Attribute a) { n->setAttr(std::move(a)); }

void Rewriter::replaceByEquivalent(Node* n, Node* same) {
  for (size_t i = 0; i < n->numOutputs(); ++i)
    if (Value* v = n->output(i)) graph_.replaceAllUsesWith(v, same->output(i));
  eraseWithDeadProducers(n);
}

size_t Rewriter::eraseDeadNodes() { return graph_.eraseDeadNodes(); }

size_t Rewriter::eraseUnusedInitializers() { return graph_.eraseUnusedInitializers(); }

namespace {
bool isDead(const Node* n) {
  for (Value* v : n->outputs())
    if (v && (v->hasUses() || v->isGraphOutput())) return false;
  return true;
}
}  // namespace

size_t Rewriter::eraseWithDeadProducers(Node* n) {
  std::unordered_set<const Node*> erased_here;
  return eraseWithDeadProducers(n, erased_here);
}

size_t Rewriter::eraseWithDeadProducers(Node* n, std::unordered_set<const Node*>& erased_here) {
  if (!isDead(n)) {
    throwInternal(fmt::format("rewriter: cannot erase {}: its outputs are still used",
                              n->label()));
  }
  size_t count = 0;
  std::vector<Node*> work{n};
  // erased_here: the nodes erased by this call (and the caller's earlier ones), which the work
  // list may name twice (a producer of two inputs). Not erased(): that set is keyed by address,
  // and a node this Rewriter made after an earlier erasure can sit at an erased node's address;
  // taking it for erased left emit-ort's dead head-merge chains in the graph.
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    if (erased_here.count(x) || !isDead(x)) continue;
    erased_here.insert(x);
    std::vector<Value*> inputs;
    for (Value* v : x->inputs())
      if (v && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    for (Value* v : x->implicitInputs())
      if (v && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    // Constants read by x alone are removed below: their name-table entries, cache misses in a
    // big graph, load while x is erased.
    for (Value* v : inputs)
      if (v->isInitializer() && v->uses().size() == 1) graph_.prefetchValueName(v->name());
    if (dead_producers_ && x != n) {
      uint64_t bytes = 0;
      for (Value* v : x->outputs()) bytes += staticBytesOf(v);
      dead_producers_->emplace_back(x->label(), bytes);
    }
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
    // A body's output cannot take over the name of a value captured from an enclosing graph
    // either: the capture is by that name.
    return fmt::format("{} output '{}' is a graph output and its input '{}' is {}; removing it "
                       "would change the graph's interface",
                       n.label(), y->name(), x->name(),
                       x->isGraphInput()                          ? "a graph input"
                       : x->kind() == Value::Kind::OuterRef ? "captured from an enclosing graph"
                                                                  : "a constant");
  }
  if (x->isGraphOutput()) {
    return fmt::format("{} output '{}' and its input '{}' are both graph outputs", n.label(),
                       y->name(), x->name());
  }
  return "";
}

namespace {
uint64_t staticBytesOf(const Value* v) {
  if (!v || !v->type.isTensor()) return 0;
  std::optional<int64_t> numel = v->shape().staticNumel();
  if (!numel) return 0;
  return dtypeStorageBytes(v->dtype(), *numel);
}
}  // namespace

void Rewriter::commitFusion(std::string_view pattern, const Match& m, Value* replaced_output,
                            Node* replacement, const Value* kept, bool move) {
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
      if (v != replaced_output && v != kept) bytes += staticBytesOf(v);
    before.push_back({n, n->label(), bytes});
  }
  std::string root_label = m.root() ? m.root()->label() : std::string();
  Node* anchor = replaced_output->producer();
  if (move && anchor && anchor != replacement) graph_.moveBefore(replacement, anchor);
  graph_.replaceAllUsesWith(replaced_output, replacement->output(0));
  // Consumers come after producers in a match's usual order; erase from the back so that a
  // node is dead by the time it is visited.
  std::vector<std::pair<std::string, uint64_t>> dead_producers;
  dead_producers_ = &dead_producers;
  // The matched nodes were all live when matched, so "erased" here means erased by this commit
  // (erased() would also take a node made in this sweep at an erased node's address for gone).
  std::unordered_set<const Node*> erased_now;
  for (auto it = before.rbegin(); it != before.rend(); ++it)
    if (!erased_now.count(it->node) && isDead(it->node))
      eraseWithDeadProducers(it->node, erased_now);
  dead_producers_ = nullptr;

  FusionSite site;
  site.pass = ctx_.currentPass();
  site.pattern = pattern;
  site.anchor = std::move(root_label);
  for (const Before& b : before) {
    // A node rewritten in place (the replacement is one of the matched nodes) counts as
    // replaced: its output now carries the match's result.
    if (!erased_now.count(b.node) && b.node != replacement) continue;
    site.replaced_nodes.push_back(b.label);
    site.activation_bytes_saved += b.internal_bytes;
  }
  for (const auto& [label, bytes] : dead_producers) {
    bool matched = false;
    for (const Before& b : before) matched = matched || b.label == label;
    if (matched) continue;
    site.replaced_nodes.push_back(label);
    site.activation_bytes_saved += bytes;
  }
  // new_node is set by recordFinalLabel, once the replacement has its final names.
  site.new_op = replacement->domain().empty() ? replacement->opType()
                                              : replacement->domain() + "::" +
                                                    replacement->opType();
  site.portability =
      replacement->domain() == "fusectl"         ? Portability::Fusectl
      : replacement->domain() == "com.microsoft" ? Portability::Ort
                                                 : Portability::Standard;
  replacement->doc_string = appendFusionStamp(
      replacement->doc_string, formatFusionStamp(site.pass, site.replaced_nodes));
  if (expected_sites_ != 0) {
    ctx_.report().expectFusions(expected_sites_);
    expected_sites_ = 0;
  }
  ctx_.report().addFusion(std::move(site));
}

namespace {

// Matches one anchor against a list of alternative forms; see applyPatterns.
class FormMatcher {
 public:
  FormMatcher(const Graph& graph, PassContext& ctx, const std::vector<const Pattern*>& forms,
              const DriverOptions& driver)
      : graph_(graph), ctx_(ctx) {
    options_.explain = ctx.explain();
    options_.report_structural = driver.report_structural;
    matchers_.reserve(forms.size());
    for (const Pattern* p : forms) matchers_.emplace_back(*p);
  }

  size_t none() const { return matchers_.size(); }

  // The index of the first form that matches at `anchor` (filling `m`), or none(); then the
  // most telling miss goes to the report.
  size_t match(Node* anchor, Match& m) {
    std::optional<NearMiss> reported;
    for (size_t f = 0; f < matchers_.size(); ++f) {
      NearMiss miss;
      bool missed = false;
      if (matchers_[f].match(graph_, anchor, options_, m, options_.explain ? &miss : nullptr,
                             &missed)) {
        return f;
      }
      if (missed && (!reported || (reported->constraint == "structure" &&
                                   miss.constraint != "structure"))) {
        reported = std::move(miss);
      }
    }
    if (reported) ctx_.report().addRejection(std::move(*reported), ctx_.currentPass());
    return none();
  }

  // Whether form `f` still matches at `anchor`, quietly (the miss was reported before).
  bool rematch(size_t f, Node* anchor, Match& m) const {
    return matchers_[f].match(graph_, anchor, options_, m, nullptr, nullptr);
  }

 private:
  const Graph& graph_;
  PassContext& ctx_;
  MatchOptions options_;
  std::vector<AnchorMatcher> matchers_;
};

}  // namespace

size_t applyPattern(const Graph& graph, PassContext& ctx, const Pattern& pattern,
                    const std::function<bool(Rewriter&, const Match&)>& rewrite,
                    const DriverOptions& driver) {
  return applyPatterns(
      graph, ctx, {&pattern},
      [&](Rewriter& rw, size_t, const Match& m) { return rewrite(rw, m); }, driver);
}

size_t applyPatterns(const Graph& graph, PassContext& ctx,
                     const std::vector<const Pattern*>& forms,
                     const std::function<bool(Rewriter&, size_t, const Match&)>& rewrite,
                     const DriverOptions& driver) {
  if (&graph != &ctx.graph()) {
    throwInternal("applyPatterns: the graph is not the one the pass context edits");
  }
  std::vector<Node*> anchors = patternAnchors(graph, *forms.at(0));
  if (driver.candidate) {
    anchors.erase(std::remove_if(anchors.begin(), anchors.end(),
                                 [&](const Node* a) { return !driver.candidate(*a); }),
                  anchors.end());
  }
  FormMatcher matcher(graph, ctx, forms, driver);
  ctx.count("candidates", static_cast<int64_t>(anchors.size()));
  Rewriter rw(ctx);
  rw.expectFusionSites(anchors.size());
  size_t matches = 0;
  size_t rewrites = 0;
  if (!driver.match_all_first) {
    for (Node* anchor : anchors) {
      if (rw.erased(anchor)) {
        ctx.count("skipped_overlap");
        continue;
      }
      Match m;
      const size_t form = matcher.match(anchor, m);
      if (form == matcher.none()) continue;
      ++matches;
      if (ctx.refused(*anchor)) {
        ctx.count("refused_by_gate");
        continue;
      }
      if (!ctx.allowRewrite()) {
        ctx.count("skipped_max_rewrites");
        break;
      }
      if (rewrite(rw, form, m)) ++rewrites;
    }
  } else {
    std::vector<std::pair<size_t, Match>> found;
    for (Node* anchor : anchors) {
      Match m;
      const size_t form = matcher.match(anchor, m);
      if (form != matcher.none()) found.emplace_back(form, std::move(m));
    }
    matches = found.size();
    for (const auto& [form, m] : found) {
      Match fresh;
      if (!rw.stillValid(m) || !matcher.rematch(form, m.root(), fresh)) {
        ctx.count("skipped_overlap");
        continue;
      }
      if (ctx.refused(*fresh.root())) {
        ctx.count("refused_by_gate");
        continue;
      }
      if (!ctx.allowRewrite()) {
        ctx.count("skipped_max_rewrites");
        break;
      }
      if (rewrite(rw, form, fresh)) ++rewrites;
    }
  }
  ctx.count("matches", static_cast<int64_t>(matches));
  ctx.count("rewrites", static_cast<int64_t>(rewrites));
  return rewrites;
}

void Rewriter::noteHelperNode(const Node& helper) {
  Report& r = ctx_.report();
  if (r.fusions.empty()) throwInternal("rewriter: a helper node noted before any fusion site");
  r.fusions.back().helper_nodes.push_back(helper.label());
}

}  // namespace fusectl::passes
