// The numbers of one rewritten node, measured on its own: what `fusectl optimize --gate` judges
// each fusion site by (numeric_gate.h in libpasses drives it; libkernels only measures).
//
// For a node N of the optimized model that took over a value of the original model (a fusion's
// replacement keeps the name of the value it replaced), both models run once on the same
// inputs with the values around N exposed as extra outputs; then N alone runs on its inputs as
// the original model computed them (a value the original does not have, such as a constant or
// a node the rewrite added, comes from the optimized model), and its output 0 is compared with
// the original's value of that name. So each site is judged by the error it adds itself, not by
// the drift of everything upstream of it.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"

namespace fusectl::kernels {

struct NodeNumbers {
  std::string node;       // the label asked for
  bool measured = false;  // false: `detail` says why it could not be
  double cosine = 1;
  double max_abs_error = 0;
  double p99_abs_error = 0;  // the 99th percentile of |replacement - original| over the elements
  double scale = 0;          // the largest finite |original| (the gate's max-rel divides by it)
  int64_t elements = 0;
  DType dtype = DType::Undefined;  // the node's output type (the gate scales its limits by it)
  std::string detail;
};

// One entry per label of `nodes` (nodes of `optimized`'s main graph), in that order. `inputs`
// feed both models (the same interface). An input named in `from_optimized` is read from the
// optimized model's run even where the original has a value of that name (a rewrite redefined
// it). A label that names no node, a node whose output has
// no counterpart in the original, a non-numeric output or one whose dims differ from the
// original's is reported not measured, with the reason. Errors running either model propagate.
std::vector<NodeNumbers> measureReplacementNodes(const Model& original, const Model& optimized,
                                                 const std::vector<std::string>& nodes,
                                                 const std::vector<NamedTensor>& inputs,
                                                 const std::set<std::string>& from_optimized = {},
                                                 const ExecutorOptions& options = {});

}  // namespace fusectl::kernels
