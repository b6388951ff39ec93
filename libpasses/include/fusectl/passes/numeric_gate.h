// `fusectl optimize --gate cosine=C,max-rel=R,max-abs=A,p99-abs=P`: every fusion is checked
// numerically and the ones outside the thresholds are undone (FlashRT's cosine gate, per
// rewrite).
//
// optimizeWithGate runs optimize() on a copy of the original, has the caller measure the
// replacement node of every main-graph fusion site on its own (kernels::measureReplacementNodes:
// the node on the original model's own values of its inputs, against the original's value it
// took over), and runs the pipeline again with the rewrites outside the thresholds refused
// (PassManagerOptions::refused_rewrites: the pattern drivers skip that pass's match at that
// anchor), until a run has none outside. The written model is the last run's; the report's
// `gate` lists every site with its figures and verdict, the undone ones from the round that
// measured them. A site whose node's output a later rewrite redefined (prefold-rms-norm-weight
// moves a norm's weight into the MatMuls after it) is not compared with the original's value
// of that name: it is "superseded", and the readers' sites take the new value as their input.
//
// As with --bisect, the measuring is the caller's, so that libpasses needs no executor.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/optimize.h"
#include "fusectl/passes/report.h"

namespace fusectl::passes {

// The error limits are stated for float32 results. A float16 or bfloat16 site's result can be
// only as exact as its type, so it is held to them scaled by its type's machine epsilon over
// float32's (forDType: x8192 for float16, x65536 for bfloat16); the cosine is scale-free and
// applies as given.
//
// max-rel is the largest error over the largest |original| of the site's output, the limit by
// default; max-abs and p99-abs are absolute and off unless given. A rewrite that reorders a sum
// changes its output by rounding of the size of the values summed, so an absolute limit (1e-4
// was the default until 2026-12-05) passes or fails the same rewrite by its output's scale:
// ResNet-50's Conv+BatchNormalization sites err by up to 6.4e-5 on outputs up to 5.2 (1.2e-5
// of it), 64% of that absolute limit, which the same kernels on activations twice as large
// would exceed.
struct GateThresholds {
  double min_cosine = 0.99999;
  double max_rel_error = 1e-4;
  double max_abs_error = INFINITY;      // no absolute limit unless given
  double max_p99_abs_error = INFINITY;  // no p99 limit unless given

  GateThresholds forDType(DType t) const;
};

// "default" (the defaults above) or a comma-separated list of cosine=C, max-rel=R, max-abs=A
// and p99-abs=P, each optional (the others keep their defaults). Throws fusectl::Error(Usage)
// naming the bad item.
GateThresholds parseGateSpec(std::string_view spec);

struct SiteMeasurement {
  bool measured = false;
  double cosine = 1, max_abs_error = 0, p99_abs_error = 0;
  double scale = 0;  // the largest |original| of the output (0: max-rel is not applied)
  DType dtype = DType::Float;  // the replacement's output type (GateThresholds::forDType)
  std::string detail;  // why it was not measured
};

// Measures the nodes labelled `new_nodes` (each the new node of a fusion site) in `optimized`:
// one result per label, in order. `redefined` names the values whose meaning a rewrite changed
// under the same name (Report::redefined_values): an input among them must be read from the
// optimized model's run, not the original's.
using SiteMeasure = std::function<std::vector<SiteMeasurement>(
    const Model& optimized, const std::vector<std::string>& new_nodes,
    const std::set<std::string>& redefined)>;

struct GatedOptimization {
  std::unique_ptr<Model> model;
  Report report;  // the last run's, with `gate` filled in (gate.seed is the caller's)
};

// At most `max_runs` optimizations; a site still outside the thresholds after the last one (or
// one whose refusal did not take) stays in the model with the verdict "failed".
GatedOptimization optimizeWithGate(const Model& original, const OptimizeRequest& request,
                                   const GateThresholds& thresholds, const SiteMeasure& measure,
                                   int max_runs = 6);

// Whether the gate ran and no site has the verdict "failed".
bool numericGatePassed(const Report& report);

}  // namespace fusectl::passes
