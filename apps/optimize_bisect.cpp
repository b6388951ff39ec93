// `fusectl optimize --bisect` (optimize_bisect.h).
#include "optimize_bisect.h"

#include <fmt/format.h>

#include <iostream>

#include "fusectl/graph/onnx_io.h"
#include "commands.h"
#include "fusectl/passes/bisect.h"
#include "input_binding.h"
#include "verify_optimized.h"

namespace fusectl::cli {

using namespace fusectl::passes;

namespace {

std::string describeSite(const FusionSite& s) {
  return fmt::format("{} '{}' ({}) replaced {} node(s): {}", s.new_op, s.new_node, s.pattern,
                     s.replaced_nodes.size(), fmt::join(s.replaced_nodes, ", "));
}

// The first output that failed, as one line.
std::string failureOf(const Verification& v) {
  for (const VerificationOutput& o : v.outputs)
    if (!o.passed) return fmt::format("output '{}': {}", o.name, o.detail);
  return "";
}

}  // namespace

int runOptimizeBisect(const BisectOptions& opts) {
  LoadOptions load = loadOptions();
  load.input_shapes = opts.shapes;
  const std::unique_ptr<Model> original = loadModel(opts.model, load);
  // The same inputs for every probe: the halving compares like with like.
  kernels::ComparisonInputs inputs;
  inputs.given.push_back(bindInputs(*original->graph, opts.inputs, opts.seed, opts.shapes).tensors);
  BisectCheck check = [&](const Model& candidate) {
    const Verification v = verifyOptimized(*original, candidate, inputs, opts.tolerance);
    return BisectProbe{v.passed, failureOf(v)};
  };
  BisectResult r = bisectRewrites(*original, opts.request, check);

  std::string out = fmt::format("fusectl optimize --bisect {}: {} rewrite(s), {} pipeline run(s)\n",
                                opts.model, r.total_rewrites, r.steps.size());
  for (const BisectStep& s : r.steps) {
    out += fmt::format("  --max-rewrites {:>6}: {}{}\n",
                       s.max_rewrites < 0 ? std::string("all") : std::to_string(s.max_rewrites),
                       s.probe.acceptable ? "agrees" : "differs",
                       s.probe.acceptable ? "" : " (" + s.probe.detail + ")");
  }
  if (r.first_bad == 0) {
    out += "every rewrite keeps the outputs within tolerance\n";
  } else if (r.first_bad < 0) {
    out += "even the model with no rewrite differs from the original: the tolerance or the "
           "inputs, not a rewrite, are the problem\n";
  } else {
    out += fmt::format("first bad rewrite: {} of {}, by pass {}\n", r.first_bad,
                       r.total_rewrites, r.pass.empty() ? "(unknown)" : r.pass);
    for (const FusionSite& s : r.sites) out += "  site: " + describeSite(s) + "\n";
    out += "  check: " + r.bad_probe.detail + "\n";
    out += r.diff.toText(fmt::format("{} rewrites", r.first_bad - 1),
                         fmt::format("{} rewrites", r.first_bad));
  }
  if (!opts.output.empty() && r.first_bad >= 0) {
    saveModel(*r.last_good, opts.output);
    out += fmt::format("wrote {} with the first {} rewrite(s)\n", opts.output,
                       r.first_bad == 0 ? r.total_rewrites : r.first_bad - 1);
  }
  if (!opts.quiet) std::cout << out << std::flush;
  return r.first_bad == 0 ? 0 : 1;
}

}  // namespace fusectl::cli
