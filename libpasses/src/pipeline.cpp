// Pipelines as text (parse/print), -O levels from passes.def, and the PassManager.
//
// The PassManager runs elements in order; a fixpoint group repeats its members until a round
// changes nothing, at most max_fixpoint_iterations rounds (a group still changing at the cap is
// recorded in the report, never looped on). Around each pass run it measures time and graph
// figures, collects the pass's counters, and on request verifies the graph (naming the pass
// that broke it, and catching a pass that says "unchanged" but changed the model), prints the
// model as ONNX text before/after it, and dumps it to <dump_dir>/<NN>-<pass>.onnx and .onnxtxt.
#include "fusectl/passes/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/shape_inference.h"
#include "fusectl/passes/registry.h"

namespace fusectl::passes {

namespace {

// ---------------------------------------------------------------------------------------------
// Parsing

bool isNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}
bool isValueChar(char c) {
  return !std::isspace(static_cast<unsigned char>(c)) && c != ',' && c != '{' && c != '}' &&
         c != '(' && c != ')' && c != '=';
}

class PipelineParser {
 public:
  explicit PipelineParser(std::string_view text) : text_(text) {}

  Pipeline parse() {
    Pipeline p;
    skipSpace();
    if (pos_ == text_.size()) return p;
    p.elements = parseList();
    skipSpace();
    if (pos_ != text_.size()) {
      fail(pos_, text_[pos_] == ')' ? "')' without a matching 'fixpoint('"
                                    : fmt::format("expected ',' or the end, found '{}'",
                                                  text_[pos_]));
    }
    return p;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw Error(ErrorKind::Usage, fmt::format("invalid pipeline \"{}\" at column {}: {}", text_,
                                              at + 1, what));
  }
  std::string here() const {
    return pos_ >= text_.size() ? "the end" : fmt::format("'{}'", text_[pos_]);
  }
  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::vector<PipelineElement> parseList() {
    std::vector<PipelineElement> out;
    out.push_back(parseElement());
    while (eat(',')) out.push_back(parseElement());
    return out;
  }

  PipelineElement parseElement() {
    skipSpace();
    size_t at = pos_;
    while (pos_ < text_.size() && isNameChar(text_[pos_])) ++pos_;
    std::string name(text_.substr(at, pos_ - at));
    if (name.empty()) fail(at, fmt::format("expected a pass name or 'fixpoint(', found {}",
                                           here()));
    PipelineElement e;
    if (name == "fixpoint") {
      if (!eat('(')) fail(pos_, fmt::format("expected '(' after 'fixpoint', found {}", here()));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ')') fail(pos_, "empty fixpoint group");
      e.group = parseList();
      if (!eat(')')) fail(pos_, fmt::format("expected ',' or ')' in fixpoint group, found {}",
                                            here()));
      return e;
    }
    try {
      checkPassName(name);
    } catch (const Error& err) {
      fail(at, err.what());
    }
    e.pass = name;
    if (eat('{')) {
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == '}') fail(pos_, "empty option list");
      do {
        skipSpace();
        size_t key_at = pos_;
        while (pos_ < text_.size() && isNameChar(text_[pos_])) ++pos_;
        std::string key(text_.substr(key_at, pos_ - key_at));
        if (key.empty()) fail(key_at, fmt::format("expected an option name, found {}", here()));
        if (!eat('=')) fail(pos_, fmt::format("expected '=' after option '{}', found {}", key,
                                              here()));
        skipSpace();
        size_t value_at = pos_;
        while (pos_ < text_.size() && isValueChar(text_[pos_])) ++pos_;
        std::string value(text_.substr(value_at, pos_ - value_at));
        if (value.empty()) fail(value_at, fmt::format("option '{}' has no value", key));
        if (!e.options.emplace(key, value).second) {
          fail(key_at, fmt::format("option '{}' given twice", key));
        }
        // Declared with the pass (passes.def): an option no pass reads is an error here, not
        // silently ignored at run time.
        try {
          checkPassOption(name, key, value);
        } catch (const Error& err) {
          fail(key_at, err.what());
        }
      } while (eat(','));
      if (!eat('}')) fail(pos_, fmt::format("expected ',' or '}}' in options, found {}", here()));
    }
    return e;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

void printElements(const std::vector<PipelineElement>& elements, std::string& out) {
  for (size_t i = 0; i < elements.size(); ++i) {
    if (i) out += ",";
    const PipelineElement& e = elements[i];
    if (e.isGroup()) {
      out += "fixpoint(";
      printElements(e.group, out);
      out += ")";
      continue;
    }
    out += e.pass;
    if (!e.options.empty()) {
      out += "{";
      bool first = true;
      for (const auto& [k, v] : e.options) {
        out += fmt::format("{}{}={}", first ? "" : ",", k, v);
        first = false;
      }
      out += "}";
    }
  }
}

std::string elementText(const PipelineElement& e) {
  std::string s;
  printElements({e}, s);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Running

size_t countIntermediates(const Graph& g) {
  size_t n = 0;
  for (Node* node : g.nodes())
    for (Value* v : node->outputs())
      if (v && !v->isGraphOutput()) ++n;
  return n;
}

// One If/Loop/Scan body: the attribute slot that owns it, and the path element naming it
// ("/Loop/body": owner node label, attribute name).
struct SubgraphSlot {
  Node* owner;
  std::unique_ptr<Graph>* slot;
  std::string name;
};

// The bodies of g's nodes in topological order, then attribute order: a deterministic walk
// (Graph::subgraphOwners is in no particular order).
std::vector<SubgraphSlot> subgraphSlots(const Graph& g) {
  std::vector<SubgraphSlot> out;
  if (g.subgraphOwners().empty()) return out;
  for (Node* n : g.nodes()) {
    for (Attribute& a : n->mutableAttributes()) {
      if (a.g) out.push_back({n, &a.g, fmt::format("{}/{}", n->label(), a.name)});
      for (size_t i = 0; i < a.graphs.size(); ++i)
        if (a.graphs[i])
          out.push_back({n, &a.graphs[i], fmt::format("{}/{}[{}]", n->label(), a.name, i)});
    }
  }
  return out;
}

std::string joinScope(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "/" + name;
}

size_t countBodies(const Graph& g) {
  size_t n = 0;
  for (const SubgraphSlot& body : subgraphSlots(g)) n += 1 + countBodies(**body.slot);
  return n;
}

// A body reads an enclosing value through an outer reference, and its owner lists that value
// as an implicit input: a use, which keeps the value and its producers alive. A rewrite in the
// body can leave a reference unread; it is dropped and the owner's implicit inputs are rebuilt
// from the references that remain, so that dead-code elimination in the enclosing graph can
// then erase what computed the value. Returns whether anything was dropped.
bool dropUnusedCaptures(Graph& g, Node* owner) {
  bool dropped = false;
  std::vector<Value*> keep;
  owner->forEachSubgraph([&](Graph& body) {
    for (Value* ref : std::vector<Value*>(body.outerRefs())) {
      if (!ref->hasUses() && !ref->isGraphOutput()) {
        body.removeOuterRef(ref);
        dropped = true;
        continue;
      }
      Value* outer = ref->outerValue();
      if (outer && std::find(keep.begin(), keep.end(), outer) == keep.end()) keep.push_back(outer);
    }
  });
  if (dropped) g.setNodeImplicitInputs(owner, std::move(keep));
  return dropped;
}

class Runner {
 public:
  Runner(const PassManagerOptions& o, Model& model, Report& report)
      : o_(o), model_(model), report_(report), ctx_(model, report) {
    ctx_.setStandardOnly(o.standard_only);
    ctx_.setExplain(o.explain);
    ctx_.setRewriteBudget(o.max_rewrites);
    ctx_.setRefusedRewrites(&o.refused_rewrites);
  }

  bool runList(const std::vector<PipelineElement>& elements, int iteration) {
    bool changed = false;
    for (const PipelineElement& e : elements)
      changed |= e.isGroup() ? runGroup(e) : runPass(e, iteration);
    return changed;
  }

  int64_t rewritesMade() const { return ctx_.rewritesAllowed(); }

  void dump(const std::string& stem) {
    if (o_.dump_dir.empty()) return;
    std::filesystem::path base = std::filesystem::path(o_.dump_dir) / stem;
    SaveOptions save;
    save.format = ModelFormat::Binary;
    saveModel(model_, base.string() + ".onnx", save);
    writeFileAtomically(base.string() + ".onnxtxt", modelToText(model_));
  }

 private:
  bool runGroup(const PipelineElement& group) {
    int cap = std::max(1, o_.max_fixpoint_iterations);
    bool changed = false;
    FixpointRun run;
    run.group = elementText(group);
    for (int it = 1; it <= cap; ++it) {
      run.iterations = it;
      bool round = runList(group.group, it);
      changed |= round;
      if (!round) break;
      if (it == cap) run.converged = false;
    }
    if (!run.converged) {
      log(fmt::format("{}: still changing after {} iterations (max_fixpoint_iterations); "
                      "stopped",
                      run.group, cap));
    }
    report_.fixpoints.push_back(std::move(run));
    return changed;
  }

  static bool listed(const std::vector<std::string>& names, const std::string& pass) {
    for (const std::string& p : names)
      if (p == pass || p == "all") return true;
    return false;
  }

  void printModel(const char* when, const std::string& pass, int iteration) const {
    std::string text = fmt::format("# *** {} {}{} ***\n{}", when, pass,
                                   iteration > 1 ? fmt::format(" (iteration {})", iteration) : "",
                                   modelToText(model_));
    if (o_.print) {
      o_.print(text);
    } else {
      std::fputs(text.c_str(), stderr);
    }
  }

  void log(const std::string& line) const {
    if (o_.log) o_.log(line);
  }

  bool runPass(const PipelineElement& e, int iteration) {
    std::unique_ptr<Pass> pass = createPass(e.pass);
    Graph& g = *model_.graph;
    if (o_.standard_only && pass->info().portability == Portability::Fusectl) {
      log(fmt::format("{}: skipped (its output needs the fusectl domain; --emit standard)",
                      e.pass));
      return false;
    }
    PassStatistics stats;
    stats.pass = e.pass;
    stats.iteration = iteration;
    stats.nodes_before = g.numNodes();
    // Only passes edit the graph, so the count after one run is the count before the next:
    // one walk of the node list per changing pass, not two per pass.
    if (!intermediates_known_) intermediates_ = countIntermediates(g);
    stats.intermediates_before = intermediates_;
    std::string snapshot;
    if (o_.verify_each) snapshot = modelToBinary(model_);
    if (listed(o_.print_before, e.pass)) printModel("before", e.pass, iteration);

    ctx_.setOptions(e.options);
    ctx_.setCurrentPass(e.pass);
    auto start = std::chrono::steady_clock::now();
    try {
      stats.changed = runInScopes(*pass, g, nullptr, "");
      if (ctx_.takeShapeInferenceRequest()) inferShapes(model_);
    } catch (const Error& err) {
      throw Error(err.kind(), fmt::format("pass '{}'{}: {}", e.pass, scopeSuffix(), err.what()));
    } catch (const std::exception& err) {
      throw Error(ErrorKind::Internal,
                  fmt::format("pass '{}'{}: {}", e.pass, scopeSuffix(), err.what()));
    }
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats.counters = ctx_.takeCounters();
    stats.nodes_after = g.numNodes();
    if (stats.changed) intermediates_ = countIntermediates(g);
    intermediates_known_ = true;
    stats.intermediates_after = intermediates_;

    if (o_.verify_each) {
      std::string broken = g.verify();
      if (!broken.empty()) {
        throw Error(ErrorKind::Internal,
                    fmt::format("pass '{}' broke the graph: {}", e.pass, broken));
      }
      if (!stats.changed && modelToBinary(model_) != snapshot) {
        throw Error(ErrorKind::Internal,
                    fmt::format("pass '{}' reported no change but changed the model", e.pass));
      }
    }

    std::string counters;
    for (const auto& [k, v] : stats.counters) counters += fmt::format(" {}={}", k, v);
    log(fmt::format("{}{}: {:.3f} ms, {}, nodes {} -> {}, intermediates {} -> {}{}", e.pass,
                    iteration > 1 ? fmt::format(" [{}]", iteration) : "", stats.seconds * 1e3,
                    stats.changed ? "changed" : "unchanged", stats.nodes_before,
                    stats.nodes_after, stats.intermediates_before, stats.intermediates_after,
                    counters));
    report_.passes.push_back(std::move(stats));
    bool changed = report_.passes.back().changed;

    if (listed(o_.print_after, e.pass) || (o_.print_changed && changed)) {
      printModel("after", e.pass, iteration);
    }
    ++seq_;
    dump(fmt::format("{:02}-{}", seq_, e.pass));
    return changed;
  }

  // Runs `pass` in every body below `g` first, depth first, then on `g` itself; `g` is the
  // graph `slot` owns (nullptr for the main graph, which the model owns). A pass whose
  // reasoning holds only for the main graph runs there only, and counts the bodies it skipped.
  // Returns whether anything changed.
  bool runInScopes(Pass& pass, Graph& g, std::unique_ptr<Graph>* slot, const std::string& path) {
    bool changed = false;
    if (handlesSubgraphs(pass)) {
      for (const SubgraphSlot& body : subgraphSlots(g)) {
        changed |= runInScopes(pass, **body.slot, body.slot, joinScope(path, body.name));
        changed |= dropUnusedCaptures(g, body.owner);
      }
    } else if (size_t bodies = countBodies(g)) {
      ctx_.count("bodies_skipped", static_cast<int64_t>(bodies));
    }
    if (!slot) return pass.run(ctx_.graph(), ctx_) || changed;
    // A pass and its Rewriter edit the model's graph (PassContext::graph()): for the length of
    // one run the body takes the main graph's place in the model, and the main graph waits in
    // the body's attribute. No graph moves (parents, names and uses stay as they are), nothing
    // walks the model from the top while a pass runs, and the guard swaps back on every exit.
    struct Swap {
      std::unique_ptr<Graph>& a;
      std::unique_ptr<Graph>& b;
      Swap(std::unique_ptr<Graph>& x, std::unique_ptr<Graph>& y) : a(x), b(y) { a.swap(b); }
      ~Swap() { a.swap(b); }
    } swap(model_.graph, *slot);
    current_scope_ = path;
    const size_t sites_before = report_.fusions.size();
    const size_t rejections_before = report_.rejections.size();
    bool ran = pass.run(ctx_.graph(), ctx_);
    // The Rewriter records sites and rejections without knowing which body it edits; labels are
    // unique across scopes, so tagging them here, after the run, loses nothing.
    for (size_t i = sites_before; i < report_.fusions.size(); ++i) report_.fusions[i].scope = path;
    for (size_t i = rejections_before; i < report_.rejections.size(); ++i)
      report_.rejections[i].scope = path;
    if (size_t sites = report_.fusions.size() - sites_before) {
      ctx_.count("fusions_in_bodies", static_cast<int64_t>(sites));
      log(fmt::format("{}: {} fusion site{} in {}", pass.info().name, sites, sites == 1 ? "" : "s",
                      path));
    }
    current_scope_.clear();
    return ran || changed;
  }

  // Passes that reason about values of the whole model and must not run inside bodies: a
  // body's shapes may change from one iteration to the next (a loop-carried value that grows),
  // which shape inference only approximates, so a Shape folded there could be wrong.
  static bool handlesSubgraphs(const Pass& pass) { return pass.info().name != "fold-shape-subgraphs"; }

  std::string scopeSuffix() const {
    return current_scope_.empty() ? "" : fmt::format(" in {}", current_scope_);
  }

  const PassManagerOptions& o_;
  Model& model_;
  Report& report_;
  PassContext ctx_;
  int seq_ = 0;
  std::string current_scope_;  // the body a pass runs in, for messages ("" the main graph)
  size_t intermediates_ = 0;  // node outputs that are not graph outputs, as of the last pass
  bool intermediates_known_ = false;
};

}  // namespace

Pipeline Pipeline::parse(std::string_view text) { return PipelineParser(text).parse(); }

std::string Pipeline::str() const {
  std::string out;
  printElements(elements, out);
  return out;
}

Pipeline Pipeline::forLevel(int level, const std::vector<std::string>& disabled) {
  if (level < 0 || level > 3) {
    throw Error(ErrorKind::Usage, fmt::format("unknown optimization level -O{} (use -O0 to -O3)",
                                              level));
  }
  for (const std::string& d : disabled) checkPassName(d);
  auto enabled = [&](const PassInfo& info) {
    return isBuiltinPass(info.name) &&
           std::find(disabled.begin(), disabled.end(), info.name) == disabled.end();
  };
  // Passes marked FUSECTL_PASS_AFTER_FIXPOINT in passes.def (fuse-elementwise, which takes what
  // the specific fusions leave) run once after their level's fixpoint group.
  static const std::vector<std::string_view> after_fixpoint = {
#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION)
#define FUSECTL_PASS_AFTER_FIXPOINT(NAME) NAME,
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS_AFTER_FIXPOINT
#undef FUSECTL_PASS
  };
  auto afterFixpoint = [](const PassInfo& info) {
    return std::find(after_fixpoint.begin(), after_fixpoint.end(), info.name) !=
           after_fixpoint.end();
  };
  Pipeline p;
  bool fusions = false;
  for (int k = 1; k <= level; ++k) {
    PipelineElement group;
    std::vector<PipelineElement> after;
    for (const PassInfo& info : allPasses()) {
      if (info.level != k || !enabled(info)) continue;
      PipelineElement e;
      e.pass = std::string(info.name);
      (afterFixpoint(info) ? after : group.group).push_back(std::move(e));
    }
    fusions |= k >= 2 && (!group.group.empty() || !after.empty());
    if (group.group.size() == 1) {
      p.elements.push_back(std::move(group.group.front()));
    } else if (!group.group.empty()) {
      p.elements.push_back(std::move(group));
    }
    for (PipelineElement& e : after) p.elements.push_back(std::move(e));
  }
  // Fusions make constants that other sites made too (a zero mask, a unit scale, a folded
  // bias) and leave dead values behind: merge the first, one last sweep for the second, so that
  // optimizing the result again changes nothing. reshape-unit-transposes, after the fixpoint,
  // leaves a Reshape before another where a unit Transpose fed one (Swin-T's and MaxViT's
  // window partitions): eliminate-noop-reshape merges the pair first. Fusions that read one
  // value the same way make the same helper nodes (fuse-attention's K Transpose and batch
  // views, for two cross-attentions over one memory with the same weights):
  // eliminate-common-subexpressions merges them, after the constants they read are one.
  if (fusions) {
    for (const char* name : {"eliminate-noop-reshape", "dedup-initializers",
                             "eliminate-common-subexpressions", "eliminate-dead-code"}) {
      const PassInfo* info = findPass(name);
      if (!info || !enabled(*info)) continue;
      PipelineElement e;
      e.pass = name;
      p.elements.push_back(std::move(e));
    }
  }
  return p;
}

namespace {

// A model with fusectl-domain nodes carries the ONNX functions that define them, so other
// runtimes can still execute it. That renames FusedConv to the spelling of what it computes
// (FusedConv_Add_Relu...): the "after" figures describe the model as it will be written.
void attachFunctionsForFusectlOps(Model& model, Report& report) {
  const std::string prefix = std::string(kFusectlDomain) + "::";
  const bool has_fusectl_ops =
      std::any_of(report.after.op_histogram.begin(), report.after.op_histogram.end(),
                  [&](const auto& op) { return op.first.rfind(prefix, 0) == 0; });
  attachFusectlFunctions(model);
  // Only fusectl-domain nodes are renamed; on a 1M-node graph a recount is 0.1 s.
  if (has_fusectl_ops) report.after = GraphFigures::of(*model.graph);
}

}  // namespace

bool PassManager::run(Model& model, const Pipeline& pipeline, Report& report) {
  if (!options_.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dump_dir, ec);
    if (ec) throwIo(fmt::format("{}: cannot create dump folder: {}", options_.dump_dir,
                                ec.message()));
  }
  report.pipeline = pipeline.str();
  report.before = GraphFigures::of(*model.graph);
  // A model saved by fusectl names its fused nodes by their functions; the passes match the ops.
  unspellFusectlNodes(model);
  Runner runner(options_, model, report);
  runner.dump("00-input");
  bool changed = runner.runList(pipeline.elements, 1);
  rewrites_made_ = runner.rewritesMade();
  report.after = GraphFigures::of(*model.graph);
  report.pruneRejectionsFusedLater();
  if (options_.attach_functions) attachFunctionsForFusectlOps(model, report);
  return changed;
}

}  // namespace fusectl::passes
