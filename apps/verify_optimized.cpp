#include "verify_optimized.h"

#include <fmt/format.h>

#include <utility>

#include "fusectl/kernels/seeded_inputs.h"

namespace fusectl::cli {

using passes::Verification;
using passes::VerificationOutput;

Verification verifyOptimized(const Model& original, const Model& optimized,
                             const kernels::ComparisonInputs& inputs,
                             const kernels::Tolerance& tolerance) {
  kernels::ComparisonInputs feed = inputs;
  if (feed.given.empty()) {
    for (int r = 0; r < inputs.runs; ++r) {
      feed.given.push_back(kernels::makeRandomInputs(
          *original.graph, inputs.seed + static_cast<uint64_t>(r), inputs.shapes));
    }
  }
  const kernels::Comparison comparison =
      kernels::compareModels(original, optimized, feed, tolerance);
  Verification v;
  v.ran = true;
  v.seed = inputs.seed;
  v.runs = comparison.runs;
  v.atol = tolerance.atol;
  v.rtol = tolerance.rtol;
  v.rtol_scale = kernels::rtolScaleName(tolerance.rtol_scale);
  v.min_cosine = tolerance.min_cosine;
  for (const kernels::OutputComparison& c : comparison.outputs) {
    VerificationOutput o;
    o.name = c.name;
    o.max_abs_error = c.max_abs_error;
    o.max_rel_error = c.max_rel_error;
    o.cosine = c.cosine;
    o.mismatches = c.mismatches;
    o.passed = c.passed;
    if (c.missing) {
      o.detail = "the optimized model has no output of this name";
    } else if (!c.passed) {
      o.detail = c.failure.shape_match
                     ? c.failure.describe(c.failed_dims_a)
                     : fmt::format("shape {} vs {} in the original",
                                   kernels::formatDims(c.failed_dims_b),
                                   kernels::formatDims(c.failed_dims_a));
    }
    v.passed = v.passed && o.passed;
    v.outputs.push_back(std::move(o));
  }
  return v;
}

}  // namespace fusectl::cli
