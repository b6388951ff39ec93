// How `run`, `profile`, `verify` and `optimize` turn their --input and --shape flags into the
// graph's inputs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"

namespace fusectl::cli {

struct BoundInputs {
  std::vector<kernels::NamedTensor> tensors;  // every non-initializer input in graph order,
                                              // then overridden initializers
  std::vector<std::string> sources;           // per tensor: its file, or "random, seed N"
  // per tensor: seeded with dims that neither the model nor --shape fixed (set to 1)
  std::vector<bool> dims_defaulted;
};

// Each spec is NAME=FILE when NAME is a graph input, else FILE for the next non-initializer
// input in order (.npy or .pb, readTensorFile); inputs no spec names are seeded
// (makeRandomInput, with the --shape override for symbolic dims). Usage errors name the spec.
BoundInputs bindInputs(const Graph& graph, const std::vector<std::string>& specs, uint64_t seed,
                       const std::vector<std::pair<std::string, Shape>>& shapes);
// What to append to an error of a run on these inputs when some integer or bool input was
// seeded, since such values can be ones the model refuses (a sample rate an If does not branch
// on, a shape, a length), or some seeded input had dims set to 1 that a model may not take (an
// image 1 pixel wide): "; on seeded inputs (sr, x with unknown dims at 1): give ones the model
// accepts with --input NAME=FILE or dims with --shape NAME=DIMS"; "" otherwise (seeded floats
// of the declared dims are what models are traced with).
std::string seededInputsNote(const BoundInputs& bound);
// The same for `runs` input sets (`verify --runs`): each file is read once and every set holds
// it; the inputs no spec names are seeded with seed + run.
std::vector<BoundInputs> bindInputRuns(const Graph& graph, const std::vector<std::string>& specs,
                                       uint64_t seed, int runs,
                                       const std::vector<std::pair<std::string, Shape>>& shapes);

}  // namespace fusectl::cli
