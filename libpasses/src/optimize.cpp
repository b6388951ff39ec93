// optimize() and planOptimization() (optimize.h): pipeline choice and gates, out of the CLI.
#include "fusectl/passes/optimize.h"

#include "fusectl/graph/schema_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "fusectl/graph/error.h"
#include "fusectl/passes/registry.h"

namespace fusectl::passes {

namespace {

[[noreturn]] void usage(const std::string& message) { throw Error(ErrorKind::Usage, message); }

void collectPasses(const std::vector<PipelineElement>& elements, std::vector<std::string>& out) {
  for (const PipelineElement& e : elements) {
    if (e.isGroup()) {
      collectPasses(e.group, out);
    } else if (std::find(out.begin(), out.end(), e.pass) == out.end()) {
      out.push_back(e.pass);
    }
  }
}

// `disable` also applies to a pipeline given as text: drop the pass, and a group left empty.
void dropDisabled(std::vector<PipelineElement>& elements, const std::vector<std::string>& off) {
  std::vector<PipelineElement> kept;
  for (PipelineElement& e : elements) {
    if (e.isGroup()) {
      dropDisabled(e.group, off);
      if (e.group.empty()) continue;
    } else if (std::find(off.begin(), off.end(), e.pass) != off.end()) {
      continue;
    }
    kept.push_back(std::move(e));
  }
  elements = std::move(kept);
}

// Sets `options` on every element running `pass`; how many there were.
size_t setPassOptions(std::vector<PipelineElement>& elements, const std::string& pass,
                      const std::map<std::string, std::string>& options) {
  size_t found = 0;
  for (PipelineElement& e : elements) {
    if (e.isGroup()) {
      found += setPassOptions(e.group, pass, options);
    } else if (e.pass == pass) {
      for (const auto& [key, value] : options) e.options[key] = value;
      ++found;
    }
  }
  return found;
}

// --pass-option TEXT: one pass with its options, in pipeline syntax (Pipeline::parse checks the
// name, the keys and the values' types).
void applyPassOptions(Pipeline& p, const std::vector<std::string>& texts) {
  for (const std::string& text : texts) {
    const Pipeline one = Pipeline::parse(text);
    if (one.elements.size() != 1 || one.elements[0].isGroup() || one.elements[0].options.empty())
      usage(fmt::format("--pass-option '{}': give one pass with its options, e.g. "
                        "'merge-parallel-matmuls{{narrow=true}}'",
                        text));
    const PipelineElement& e = one.elements[0];
    if (setPassOptions(p.elements, e.pass, e.options) == 0)
      usage(fmt::format("--pass-option '{}': pass '{}' is not in the pipeline ({})", text, e.pass,
                        p.str().empty() ? "empty" : p.str()));
  }
}

Pipeline buildPipeline(const OptimizeRequest& request) {
  Pipeline p;
  if (request.passes.empty()) {
    std::vector<std::string> disabled = request.disable;
    // For ONNX Runtime the q/k/v merge does not pay: its Gemm + Split on the merged weights ran
    // a BERT-base export 2-3% slower than three Gemms (ort_profile.js, `all`, 1 thread, two
    // interleaved runs: 179.5 / 180.2 ms merged, 176.5 / 176.2 not, 177.5 / 174.9 the
    // original). --passes still runs it when named.
    // AttentionPacked has no ONNX Runtime form: emit-ort maps Attention, not it.
    if (request.pass_manager.emit_ort) {
      disabled.push_back("merge-parallel-matmuls");
      disabled.push_back("fuse-packed-attention");
    }
    p = Pipeline::forLevel(request.level.value_or(2), disabled);
  } else {
    if (request.level) usage("give either -O LEVEL or --passes PIPELINE, not both");
    for (const std::string& d : request.disable) checkPassName(d);
    p = Pipeline::parse(request.passes);
    dropDisabled(p.elements, request.disable);
  }
  applyPassOptions(p, request.pass_options);
  if (request.pass_manager.emit_ort) {
    if (request.pass_manager.standard_only) usage("--emit is one of fusectl, standard or ort");
    // A model saved after -O3 reaches this pipeline with AttentionPacked nodes, which no contrib
    // op takes: written back as the head splits and the Attention they stand for, before the
    // other passes, they are lowered as the export's attention is.
    // Its merged projections, read through Slices then, are split again for the same reason
    // merge-parallel-matmuls is left out of the -O level above.
    std::vector<PipelineElement> before;
    for (const char* name : {"unpack-packed-attention", "unmerge-parallel-matmuls"}) {
      if (std::find(request.disable.begin(), request.disable.end(), name) !=
          request.disable.end())
        continue;
      PipelineElement e;
      e.pass = name;
      before.push_back(std::move(e));
    }
    p.elements.insert(p.elements.begin(), before.begin(), before.end());
    PipelineElement e;
    e.pass = "emit-ort";
    p.elements.push_back(std::move(e));
    // emit-ort writes the head layout ONNX Runtime's ops take around each attention, after the
    // fixpoint that would have tidied it: a MultiHeadAttention's [B, S, H*D] output went back to
    // [B, H, S, D] for the model's own head merge, two Transposes that cancel (GPT-2: each a copy
    // of the layer's activations in ONNX Runtime), and Reshape chains and their Shape arithmetic
    // around them. One more group cancels and folds those, then a sweep for what died.
    std::vector<PipelineElement> after(2);
    for (const char* name : {"merge-transposes", "eliminate-noop-reshape", "fold-shape-subgraphs"})
      after[0].group.push_back(PipelineElement{name, {}, {}});
    after[1].pass = "eliminate-dead-code";
    dropDisabled(after, request.disable);
    for (PipelineElement& a : after) p.elements.push_back(std::move(a));
  }
  return p;
}

// The names the gates accept: the passes that will run and their patterns. Under --emit
// standard a pass whose output needs the fusectl domain does not run, so a gate on it could
// never fail: its names go to `skipped` instead, for the error message.
struct GateNames {
  std::set<std::string> known;
  std::set<std::string> skipped;
};

GateNames gateNames(const std::vector<std::string>& passes, bool standard_only) {
  GateNames out;
  for (const std::string& p : passes) {
    const PassInfo* info = findPass(p);
    const bool skipped = standard_only && info && info->portability == Portability::Fusectl;
    std::set<std::string>& names = skipped ? out.skipped : out.known;
    names.insert(p);
    for (const Pattern& pattern : createPass(p)->patterns())
      if (!pattern.name.empty()) names.insert(pattern.name);
  }
  return out;
}

void checkGateName(const std::string& flag, const std::string& name, const GateNames& names) {
  if (names.known.count(name)) return;
  if (names.skipped.count(name)) {
    usage(fmt::format("{} '{}': does not run with --emit standard (its output needs the fusectl "
                      "domain), so this check could never fail",
                      flag, name));
  }
  const std::set<std::string>& known = names.known;
  usage(fmt::format("{} '{}': no pass or pattern of that name in the pipeline (known: {})", flag,
                    name, known.empty() ? std::string("none") : fmt::format("{}",
                                                                     fmt::join(known, ", "))));
}

std::vector<Expectation> parseGates(const OptimizeRequest& request, const GateNames& known) {
  std::vector<Expectation> out;
  for (const std::string& spec : request.expect) {
    size_t eq = spec.rfind('=');
    Expectation e;
    e.kind = "expect";
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      usage(fmt::format("--expect '{}': expected PATTERN=COUNT, e.g. fold-conv-bn=20", spec));
    }
    e.pattern = spec.substr(0, eq);
    const std::string count = spec.substr(eq + 1);
    if (count.size() > 9 || count.find_first_not_of("0123456789") != std::string::npos) {
      usage(fmt::format("--expect '{}': COUNT '{}' is not a non-negative integer", spec, count));
    }
    e.expected = std::stoll(count);
    checkGateName("--expect", e.pattern, known);
    out.push_back(std::move(e));
  }
  for (const std::string& name : request.fail_if_unfused) {
    checkGateName("--fail-if-unfused", name, known);
    Expectation e;
    e.kind = "fail-if-unfused";
    e.pattern = name;
    out.push_back(std::move(e));
  }
  return out;
}

void evaluateGates(Report& report) {
  for (Expectation& e : report.expectations) {
    if (e.kind == "expect") {
      e.found = static_cast<int64_t>(report.countFusions(e.pattern));
      e.passed = e.found == e.expected;
      e.detail = fmt::format("--expect {}={}: {} fusion site{}", e.pattern, e.expected, e.found,
                             e.found == 1 ? "" : "s");
      continue;
    }
    std::vector<const Report::Rejection*> left = report.legalityRejections(e.pattern);
    e.found = static_cast<int64_t>(left.size());
    e.passed = left.empty();
    e.detail = e.passed ? fmt::format("--fail-if-unfused {}: every legal candidate fused",
                                      e.pattern)
                        : fmt::format("--fail-if-unfused {}: {} candidate{} not fused; first: "
                                      "{} [{}]: {}",
                                      e.pattern, left.size(), left.size() == 1 ? "" : "s",
                                      left[0]->miss.anchor, left[0]->miss.constraint,
                                      left[0]->miss.reason);
  }
}

}  // namespace

void checkPrintAfterNames(const std::vector<std::string>& names) {
  for (const std::string& p : names)
    if (p != "all") checkPassName(p);
}

OptimizePlan planOptimization(const OptimizeRequest& request) {
  checkPrintAfterNames(request.pass_manager.print_after);
  OptimizePlan plan;
  plan.pipeline = buildPipeline(request);
  std::vector<std::string> pass_names;
  collectPasses(plan.pipeline.elements, pass_names);
  plan.gates = parseGates(request, gateNames(pass_names, request.pass_manager.standard_only));
  return plan;
}

Report optimize(Model& model, const OptimizeRequest& request) {
  OptimizePlan plan = planOptimization(request);
  // Passes read a node's operands as its schema promises them; a program can build a graph the
  // loader would refuse (an empty required input), so the facade checks what the loader checks.
  checkSchemasOrThrow(model, "model");
  PassManagerOptions pm = request.pass_manager;
  // Reasons cost string formatting; they are built only for someone who reads them.
  pm.explain = pm.explain || !request.fail_if_unfused.empty();
  Report report;
  report.tool_version = FUSECTL_VERSION;
  report.expectations = std::move(plan.gates);
  // The PassManager also attaches the ONNX functions of any fusectl ops it emitted.
  PassManager(std::move(pm)).run(model, plan.pipeline, report);
  evaluateGates(report);
  return report;
}

bool gatesPassed(const Report& report) {
  return std::all_of(report.expectations.begin(), report.expectations.end(),
                     [](const Expectation& e) { return e.passed; });
}

}  // namespace fusectl::passes
