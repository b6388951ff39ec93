// Pipelines as text, and the PassManager that runs them.
//
// Grammar (docs/passes.md):
//   pipeline := element ("," element)*
//   element  := NAME options? | "fixpoint" "(" pipeline ")"
//   options  := "{" KEY "=" VALUE ("," KEY "=" VALUE)* "}"   (keys the pass declares)
// e.g. `eliminate-identity,fixpoint(fold-conv-bn,fuse-bias-add),fuse-epilogue{act=relu}`.
// A pipeline prints back to the same text it was parsed from (canonical spacing).
// -O levels expand to pipelines built from passes.def: cleanup runs before folding before
// fusion, and passes that enable each other sit in a fixpoint group with an iteration cap.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/pass.h"
#include "fusectl/passes/report.h"

namespace fusectl::passes {

struct PipelineElement {
  std::string pass;                           // empty for a fixpoint group
  std::map<std::string, std::string> options;
  std::vector<PipelineElement> group;         // members of a fixpoint group
  bool isGroup() const { return pass.empty(); }
};

class Pipeline {
 public:
  // Throws fusectl::Error(Usage) on a syntax error, an unknown pass name, an option the pass
  // does not declare (passes.def) or a value not of the option's type.
  static Pipeline parse(std::string_view text);
  // -O0 .. -O3; `disabled` passes are dropped.
  static Pipeline forLevel(int level, const std::vector<std::string>& disabled = {});
  std::string str() const;
  std::vector<PipelineElement> elements;
  bool empty() const { return elements.empty(); }
};

struct PassManagerOptions {
  int max_fixpoint_iterations = 8;
  bool verify_each = false;                 // Graph::verify() after every pass
  std::vector<std::string> print_before;    // pass names; "all" for every pass
  std::vector<std::string> print_after;     // pass names; "all" for every pass
  bool print_changed = false;               // print after every pass run that changed the graph
  std::string dump_dir;                     // write <dir>/<NN>-<pass>.onnx and .onnxtxt
  int64_t max_rewrites = -1;                // -1 unlimited (bisecting aid)
  bool standard_only = false;               // --emit standard
  bool emit_ort = false;                    // --emit ort: emit-ort runs after the pipeline
  bool explain = true;                      // record rejected candidates in the report
  // Rewrites not to make, as (pass, label of the node the pattern anchors on): what --gate
  // passes back after measuring a site outside its thresholds (numeric_gate.h).
  std::set<std::pair<std::string, std::string>> refused_rewrites;
  // Attach the ONNX functions that define the fusectl ops left in the model (fused_ops.h), as a
  // saved model needs; false keeps the nodes as the passes wrote them (golden tests).
  bool attach_functions = true;
  // Called with one line per pass run when verbose (-v): time, matches, rewrites, nodes and
  // intermediate tensors before/after.
  std::function<void(const std::string&)> log;
  // Where --print-before/--print-after/--print-changed output goes (defaults to stderr): the
  // model in ONNX textual syntax under a "# *** after PASS ***" header.
  std::function<void(const std::string&)> print;
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions options = {}) : options_(std::move(options)) {}
  // Runs the pipeline on the model's main graph, filling `report` (per-pass statistics,
  // fusions, rejections, before/after figures). Returns true when anything changed.
  // With verify_each, a broken invariant throws fusectl::Error(Internal) naming the pass.
  bool run(Model& model, const Pipeline& pipeline, Report& report);
  // The rewrites the last run() made (each counted as --max-rewrites counts them).
  int64_t rewritesMade() const { return rewrites_made_; }

 private:
  PassManagerOptions options_;
  int64_t rewrites_made_ = 0;
};

}  // namespace fusectl::passes
