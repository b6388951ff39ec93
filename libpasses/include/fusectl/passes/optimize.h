// The optimizer as one library call: everything `fusectl optimize` does between loading a model
// and saving it, so that the CLI only parses flags and prints.
//
//   OptimizeRequest request;
//   request.level = 3;
//   request.expect = {"fold-conv-bn=8"};
//   Report report = optimize(*model, request);  // throws fusectl::Error(Usage) on a bad request
//   if (!gatesPassed(report)) ...               // a failed gate is a result, not an error
//
// optimize() builds the pipeline (an -O level or pipeline text, less the disabled passes), runs
// it with the PassManager, attaches the ONNX functions that define the fusectl-domain ops it
// emitted (renaming FusedConv to the spelling of what it computes; Report::after describes the
// model as it will be written), and evaluates the gates into Report::expectations. The report
// then holds everything but the file digests and the verification, which need files: the
// caller fills Report::input/output (FileDigest) and, when it compares the two models
// (kernels::compareModels), Report::verification.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/report.h"

namespace fusectl::passes {

struct OptimizeRequest {
  std::optional<int> level;          // -O LEVEL (0-3); -O2 when neither this nor `passes` is set
  std::string passes;                // pipeline text instead of a level (docs/passes.md)
  std::vector<std::string> disable;  // passes left out (of a level's or of `passes`' pipeline)
  // Options for passes of the pipeline, each written as in pipeline text
  // ("merge-parallel-matmuls{narrow=true}"): set on every element of that pass, a level's
  // included. A pass not in the pipeline, or an option it does not declare, is a usage error.
  std::vector<std::string> pass_options;
  // Gates on the result, names of a pass or pattern in the pipeline. expect: "PATTERN=COUNT",
  // exactly COUNT fusion sites; fail_if_unfused: "PATTERN", no candidate kept from fusing by a
  // legality condition.
  std::vector<std::string> expect;
  std::vector<std::string> fail_if_unfused;
  // How the pipeline runs: verify_each, print_after, dump_dir, max_rewrites, standard_only
  // (--emit standard: passes whose output needs the fusectl domain do not run, and gates on them
  // are refused), log... `explain` (rejected candidates in the report) is turned on as well
  // when a fail_if_unfused gate needs it.
  PassManagerOptions pass_manager;
};

// What a request resolves to, checked: the pipeline that will run, and the gates (Expectation
// with kind, pattern and expected count; results not yet filled in).
struct OptimizePlan {
  Pipeline pipeline;
  std::vector<Expectation> gates;
};

// Checks a request without a model and resolves it; optimize() calls it first. Throws
// fusectl::Error(Usage) with the message `fusectl optimize` prints, checking in this order:
// pass_manager.print_after names (checkPrintAfterNames), level and `passes` not both, the
// pipeline text and the disabled names, then each --expect and each --fail-if-unfused.
OptimizePlan planOptimization(const OptimizeRequest& request);

// The first check of planOptimization on its own: every --print-after name is a pass or "all".
// The CLI runs it before it parses its --shape flags, to report errors in the order it always
// has.
void checkPrintAfterNames(const std::vector<std::string>& names);

// Runs the request on `model` (see the top of this file) and returns the report, with
// tool_version, pipeline, figures, statistics, fusions, rejections and the gates' results.
Report optimize(Model& model, const OptimizeRequest& request);

// Whether every gate in report.expectations passed.
bool gatesPassed(const Report& report);

}  // namespace fusectl::passes
