// `fusectl optimize --bisect`: the CLI side of passes::bisectRewrites (bisect.h). The check it
// hands the library runs the original and each candidate on the same inputs (--input files,
// else seeded) and compares them with verify's tolerances (verifyOptimized).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/shape.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/passes/optimize.h"

namespace fusectl::cli {

struct BisectOptions {
  std::string model;
  std::string output;  // "" for none: where the largest passing prefix is written
  passes::OptimizeRequest request;
  std::vector<std::string> inputs;  // --input specs (input_binding.h)
  uint64_t seed = 0;
  std::vector<std::pair<std::string, Shape>> shapes;
  kernels::Tolerance tolerance;
  bool quiet = false;
};

// Prints what it found on stdout; returns the exit code: 0 when the whole pipeline's result
// passes the check, 1 when a rewrite (or no rewrite at all) fails it.
int runOptimizeBisect(const BisectOptions& opts);

}  // namespace fusectl::cli
