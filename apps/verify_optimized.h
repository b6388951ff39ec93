// `optimize --verify`: the two models compared on the same inputs (kernels::compareModels), worded
// for the report. It sits in the app because it joins libkernels' comparison with libpasses'
// report, and libpasses uses libkernels only to fold constants (docs/architecture.md).
#pragma once

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/passes/report.h"

namespace fusectl::cli {

// Runs `original` and `optimized` on the same inputs and says, per output, how the optimized
// model differs. Seeded inputs are made before either model is prepared, so an input that
// cannot be generated is reported before an op without a kernel.
passes::Verification verifyOptimized(const Model& original, const Model& optimized,
                                     const kernels::ComparisonInputs& inputs,
                                     const kernels::Tolerance& tolerance);

}  // namespace fusectl::cli
