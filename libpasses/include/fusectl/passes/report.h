// The optimization report: the answer to "why wasn't my pattern fused?".
//
// For the whole model, every candidate anchor of every pattern in the pipeline either became a
// FusionSite or is a RejectedCandidate with the first legality condition that failed. Written
// as JSON following docs/schemas/report.schema.json ("schema": "fusectl.report/1").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

enum class Portability {
  Standard,  // output is standard ONNX (ai.onnx ops only)
  Fusectl,   // output uses fusectl-domain ops (with model-local ONNX functions defining them)
  Ort,       // output uses ONNX Runtime's com.microsoft contrib ops (--emit ort)
};
std::string_view portabilityName(Portability p);  // "standard", "fusectl", "ort"

struct FusionSite {
  std::string pass;
  std::string pattern;
  std::vector<std::string> replaced_nodes;  // labels of the nodes the fusion removed
  std::string new_node;                     // label of the node that replaces them ("" if none)
  std::string new_op;                       // "FusedConv", "Conv", ...
  Portability portability = Portability::Standard;
  // Bytes of intermediate tensors that no longer travel through memory (static shapes only).
  uint64_t activation_bytes_saved = 0;
  // Where: "" for the main graph, else the body's path ("loop_node/body"; PassContext::scope).
  std::string scope;
  // Label of the node the pattern anchored on: with `pass`, what identifies the rewrite to
  // refuse when --gate undoes it (PassManagerOptions::refused_rewrites). Not in the JSON.
  std::string anchor;
  // Labels of further nodes the rewrite made that stand, with new_node, for the replaced nodes,
  // shared by several sites: merge-parallel-matmuls' merged MatMul (and bias Add), which each
  // member's Slice reads (Rewriter::noteHelperNode). profile links a later fusion of them back
  // to every site they serve. Not in the JSON.
  std::vector<std::string> helper_nodes;
};

struct PassStatistics {
  std::string pass;
  int iteration = 0;  // 1-based run number of this pass within a fixpoint group
  double seconds = 0;
  bool changed = false;
  size_t nodes_before = 0, nodes_after = 0;
  size_t intermediates_before = 0, intermediates_after = 0;
  std::map<std::string, int64_t> counters;  // "matches", "rewrites", "skipped_multi_use"...
};

struct GraphFigures {
  size_t nodes = 0;
  size_t intermediate_tensors = 0;  // node outputs that are not graph outputs
  uint64_t parameter_bytes = 0;     // initializer bytes
  uint64_t parameters = 0;          // initializer elements
  std::vector<std::pair<std::string, size_t>> op_histogram;  // "Conv" or "fusectl::FusedConv"
  static GraphFigures of(const Graph& g);
};

// One run of a fixpoint group: how many rounds it took and whether it converged before the cap.
struct FixpointRun {
  std::string group;  // the group's pipeline text, "fixpoint(a,b)"
  int iterations = 0;
  bool converged = true;  // false: still changing when max_fixpoint_iterations was reached
};

// `fusectl optimize --verify`: the original and the optimized model run on the same seeded
// inputs; per output, the worst figures over all runs (verifyOptimized, optimize.h).
struct VerificationOutput {
  std::string name;
  double max_abs_error = 0, max_rel_error = 0, cosine = 1;  // may be non-finite
  int64_t mismatches = 0;
  bool passed = true;
  std::string detail;  // the first failure, "" when passed
};

struct Verification {
  bool ran = false;  // false: written as null
  bool passed = true;
  uint64_t seed = 0;
  int runs = 1;
  double atol = 0, rtol = 0, min_cosine = 0;
  std::string rtol_scale = "tensor";  // what rtol multiplies: "element" or "tensor" (compare.h)
  std::vector<VerificationOutput> outputs;
};

// A gate on the fusion sites: `--expect PATTERN=COUNT` (kind "expect") or
// `--fail-if-unfused PATTERN` (kind "fail-if-unfused"). PATTERN is a pass or pattern name.
struct Expectation {
  std::string kind;
  std::string pattern;
  int64_t expected = -1;  // expect: the count demanded; fail-if-unfused: -1 (written as null)
  int64_t found = 0;      // expect: fusion sites; fail-if-unfused: legality rejections
  bool passed = true;
  std::string detail;  // one line for people
};

// `fusectl optimize --gate`: each fusion site's replacement node measured on its own against the
// original model's value (kernels::measureReplacementNodes), and the rewrites outside the
// thresholds undone (numeric_gate.h).
struct GatedSite {
  std::string pass, pattern, anchor;
  std::string new_node, new_op;
  bool measured = false;
  double cosine = 1, max_abs_error = 0, p99_abs_error = 0;  // may be non-finite
  double max_rel_error = 0;  // max_abs_error over the largest |original| (0 when that is 0)
  // "kept": within the thresholds; "undone": outside them, the rewrite refused in the written
  // model; "unmeasured": `detail` says why (the site stays); "superseded": a later rewrite
  // replaced this node, and that rewrite's site is measured instead.
  std::string verdict;
  std::string detail;
  int round = 1;  // the optimization round whose model it was measured in
};

struct NumericGate {
  bool ran = false;  // false: written as null
  double min_cosine = 0, max_rel_error = 0, max_abs_error = 0, max_p99_abs_error = 0;
  uint64_t seed = 0;
  int rounds = 0;  // optimizations run: 1 + one per round that undid something
  std::vector<GatedSite> sites;
  size_t undone() const;
};

// One file of a model: as named in the report, its SHA-256 (lower-case hex) and size. The
// library computes none of these: whoever reads and writes the files fills them in.
struct FileDigest {
  std::string file;
  std::string sha256;
  uint64_t bytes = 0;
};

class Report {
 public:
  void addFusion(FusionSite site) { fusions.push_back(std::move(site)); }
  // Room for `more` further fusion sites, for a sweep that may add up to that many: a 1M-node
  // graph has 250,000 folds, and growing the list by doubling copied it through ~100 MB of
  // fresh memory. Unused room costs address space, not pages.
  void expectFusions(size_t more) { fusions.reserve(fusions.size() + more); }
  // Keeps the first of identical rejections (a fixpoint group sees the same candidate again).
  void addRejection(NearMiss miss, std::string pass, std::string scope = "");
  // Drops rejections whose anchor a later run of the same pass and pattern fused after all
  // (the PassManager calls this once at the end).
  void pruneRejectionsFusedLater();
  // Counts fusion sites per pattern name.
  std::map<std::string, size_t> fusionsByPattern() const;
  // Counts fusion sites per scope ("" the main graph, "loop_node/body" a body).
  std::map<std::string, size_t> fusionsByScope() const;
  uint64_t activationBytesSaved() const;

  std::string tool_version;
  FileDigest input, output;  // output.file stays "" when no output was written
  // The external-data files that come with the input and the output (their weights), each
  // with its location relative to the model's folder: a model is all of its files.
  std::vector<FileDigest> input_external_data, output_external_data;
  std::string pipeline;  // printed pipeline text
  GraphFigures before, after;
  std::vector<PassStatistics> passes;
  std::vector<FusionSite> fusions;
  struct Rejection {
    std::string pass;
    NearMiss miss;
    std::string scope;  // as FusionSite::scope
  };
  std::vector<Rejection> rejections;
  std::vector<FixpointRun> fixpoints;
  Verification verification;
  std::vector<Expectation> expectations;
  NumericGate gate;
  // Values whose meaning a rewrite changed while their name stayed (Rewriter::noteRedefined),
  // with the pass that did it. Not in the JSON: --gate reads it.
  std::map<std::string, std::string> redefined_values;

  // Fusion sites whose pass or pattern is `name`.
  size_t countFusions(const std::string& name) const;
  // Rejections of `name` (pass or pattern) by a legality condition; a candidate whose
  // surroundings have another shape (constraint "structure") is not one.
  std::vector<const Rejection*> legalityRejections(const std::string& name) const;

  std::string toJson() const;  // deterministic: stable key and element order

 private:
  std::unordered_set<std::string> rejection_keys_;
};

}  // namespace fusectl::passes
