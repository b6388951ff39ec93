// Halving --max-rewrites to find the first rewrite that breaks the numbers (bisect.h).
#include "fusectl/passes/bisect.h"

#include <fmt/format.h>

#include "fusectl/passes/pipeline.h"

namespace fusectl::passes {
namespace {

struct Run {
  std::unique_ptr<Model> model;
  Report report;
  int64_t rewrites = 0;
};

// optimize() with a rewrite budget, also returning how many rewrites were made.
Run optimizeWithBudget(const Model& original, const OptimizeRequest& request,
                       const Pipeline& pipeline, int64_t budget) {
  Run run;
  run.model = original.clone();
  PassManagerOptions options = request.pass_manager;
  options.max_rewrites = budget;
  options.explain = true;  // the sites and reasons are what a bisect prints
  run.report.tool_version = FUSECTL_VERSION;
  PassManager pm(std::move(options));
  pm.run(*run.model, pipeline, run.report);
  run.rewrites = pm.rewritesMade();
  return run;
}

// The pass whose run changed between the two reports: the first statistics entry that
// differs in whether it changed the graph or in its node count.
std::string passThatDiffers(const Report& before, const Report& after) {
  const size_t n = std::min(before.passes.size(), after.passes.size());
  for (size_t i = 0; i < n; ++i) {
    const PassStatistics& a = before.passes[i];
    const PassStatistics& b = after.passes[i];
    if (a.changed != b.changed || a.nodes_after != b.nodes_after || a.counters != b.counters)
      return b.pass;
  }
  return n < after.passes.size() ? after.passes[n].pass : "";
}

}  // namespace

BisectResult bisectRewrites(const Model& original, const OptimizeRequest& request,
                            const BisectCheck& check) {
  const Pipeline pipeline = planOptimization(request).pipeline;
  BisectResult result;
  auto probe = [&](Run& run, int64_t budget) {
    BisectProbe p = check(*run.model);
    result.steps.push_back({budget, p});
    return p;
  };

  Run full = optimizeWithBudget(original, request, pipeline, -1);
  result.total_rewrites = full.rewrites;
  if (probe(full, -1).acceptable) {
    result.last_good = std::move(full.model);
    result.last_good_report = std::move(full.report);
    return result;
  }
  Run none = optimizeWithBudget(original, request, pipeline, 0);
  if (!probe(none, 0).acceptable) {
    result.first_bad = -1;
    result.last_good = std::move(none.model);
    result.last_good_report = std::move(none.report);
    return result;
  }
  // Invariant: the model with `good` rewrites passes, the one with `bad` fails.
  int64_t good = 0, bad = full.rewrites;
  Run good_run = std::move(none);
  BisectProbe bad_probe = result.steps.front().probe;
  Run bad_run = std::move(full);
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    Run run = optimizeWithBudget(original, request, pipeline, mid);
    BisectProbe p = probe(run, mid);
    if (p.acceptable) {
      good = mid;
      good_run = std::move(run);
    } else {
      bad = mid;
      bad_probe = p;
      bad_run = std::move(run);
    }
  }
  result.first_bad = bad;
  result.bad_probe = bad_probe;
  // Rewrites append their sites to the report in order: the bad run's extra sites are the
  // bad rewrite's.
  const std::vector<FusionSite>& before = good_run.report.fusions;
  const std::vector<FusionSite>& after = bad_run.report.fusions;
  for (size_t i = before.size(); i < after.size(); ++i) result.sites.push_back(after[i]);
  result.pass = result.sites.empty() ? passThatDiffers(good_run.report, bad_run.report)
                                     : result.sites.front().pass;
  result.diff = diffGraphs(*good_run.model->graph, *bad_run.model->graph);
  result.last_good = std::move(good_run.model);
  result.last_good_report = std::move(good_run.report);
  return result;
}

}  // namespace fusectl::passes
