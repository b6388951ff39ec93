// Passes: one named transformation each, run by the PassManager.
//
// A pass is a small class with run(const Graph&, PassContext&) that returns whether it changed
// anything; "unchanged" must mean byte-identical output (tests check it). The graph is a const
// view: every edit goes through a Rewriter on the context (rewriter.h), which keeps names, the
// op-type index, opset imports and the report right. All passes are listed
// once in passes.def, which feeds the registry, `fusectl passes` and docs/passes.md; a pass's
// info() returns the PassInfo generated from its passes.def line (`<Class>Info`, see
// libpasses/src/pass_factories.h), and its file defines `create<Class>()`. docs/passes.md has
// the steps for adding one.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/pattern.h"
#include "fusectl/passes/report.h"

namespace fusectl::passes {

struct PassInfo {
  std::string_view name;         // CLI name, e.g. "fold-conv-bn"
  std::string_view description;  // one line
  Portability portability;       // what its output needs
  int level;                     // lowest -O level that runs it (1, 2 or 3)
};

// Everything a pass may consult or record besides the graph.
class PassContext {
 public:
  PassContext(Model& model, Report& report) : model_(model), report_(report) {}

  // The model and the graph the pass runs on (the main graph), read-only: a Rewriter on this
  // context edits them.
  const Model& model() const { return model_; }
  const Graph& graph() const { return *model_.graph; }
  int64_t opset(std::string_view domain = "") const { return model_.opsetVersion(domain); }
  Report& report() { return report_; }

  // Options from the pipeline text (`fuse-epilogue{act=relu}`), for the running pass.
  const std::map<std::string, std::string>& options() const { return options_; }
  void setOptions(std::map<std::string, std::string> o) { options_ = std::move(o); }
  std::string option(const std::string& key, const std::string& def = "") const;

  // --emit standard: passes whose output needs the fusectl domain must not fire.
  bool standardOnly() const { return standard_only_; }
  void setStandardOnly(bool v) { standard_only_ = v; }

  // --max-rewrites=N bisects a bad rewrite: every rewrite asks first; false once N are spent.
  bool allowRewrite();
  void setRewriteBudget(int64_t n) { rewrite_budget_ = n; }
  // Rewrites allowed so far: what --max-rewrites counts (bisect.h numbers rewrites by it).
  int64_t rewritesAllowed() const { return rewrites_allowed_; }

  // --gate: rewrites the numeric gate undid, as (pass, label of the match's root). The pattern
  // drivers (applyPattern/applyPatterns) skip such a match (counter "refused_by_gate"); passes
  // that are not pattern based make no fusion sites and are never refused.
  void setRefusedRewrites(const std::set<std::pair<std::string, std::string>>* refused) {
    refused_ = refused;
  }
  bool refused(const Node& root) const {
    return refused_ && !refused_->empty() && refused_->count({current_pass_, root.label()}) > 0;
  }

  // Whether near-miss reasons are wanted (they cost string formatting).
  bool explain() const { return explain_; }
  void setExplain(bool v) { explain_ = v; }

  // Counters of the running pass ("folded", "skipped_multi_use"...), collected per pass run.
  void count(const std::string& counter, int64_t n = 1) { counters_[counter] += n; }
  std::map<std::string, int64_t> takeCounters() { return std::move(counters_); }

  // A pass whose edits let inference know dims the model's types do not show yet (fold-constants:
  // a Reshape whose target has become a constant) asks for inference over the whole model once
  // its run is over; the pipeline runs it after the pass has been through every scope, when the
  // main graph is the model's again. Without it the Shapes of such values fold only when the
  // written model is loaded again: -O3 twice on torchvision's Swin-T went 2232 -> 1883 nodes.
  void requestShapeInference() { shape_inference_requested_ = true; }
  bool takeShapeInferenceRequest() {
    const bool requested = shape_inference_requested_;
    shape_inference_requested_ = false;
    return requested;
  }

  // The pass currently running, for report entries.
  const std::string& currentPass() const { return current_pass_; }
  void setCurrentPass(std::string p) { current_pass_ = std::move(p); }

 private:
  friend class Rewriter;  // the one writer of model_
  Model& model_;
  Report& report_;
  std::map<std::string, std::string> options_;
  std::map<std::string, int64_t> counters_;
  std::string current_pass_;
  const std::set<std::pair<std::string, std::string>>* refused_ = nullptr;
  int64_t rewrite_budget_ = -1;  // -1: unlimited
  int64_t rewrites_allowed_ = 0;
  bool standard_only_ = false;
  bool explain_ = true;
  bool shape_inference_requested_ = false;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual const PassInfo& info() const = 0;
  // Returns true when the graph changed. `graph` is ctx.graph(); edit it through
  // Rewriter(ctx).
  virtual bool run(const Graph& graph, PassContext& ctx) = 0;
  // The patterns the pass anchors on, for `fusectl match --catalog` and for reporting every
  // candidate; empty for passes that are not pattern based.
  virtual std::vector<Pattern> patterns() const { return {}; }
};

}  // namespace fusectl::passes
