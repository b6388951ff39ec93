// What the targets that run models (fuzz_executor, fuzz_optimized_outputs) share: which models
// they take on. Each keeps an input quick under ASan; the rest is a fault worth finding.
#pragma once

#include <cstdint>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace fusectl::fuzz {

// Tensors a run may make (the loader's and the executor's max_tensor_bytes).
constexpr uint64_t kRunMaxTensorBytes = uint64_t{1} << 20;

// Whether any node of `graph` or of its subgraphs, at any depth, satisfies `pred`.
template <typename Pred>
bool anyNode(const Graph& graph, const Pred& pred) {
  for (const Node* n : graph.nodes())
    if (pred(*n)) return true;
  for (const Node* owner : graph.subgraphOwners()) {
    bool found = false;
    owner->forEachSubgraph([&](const Graph& body) { found = found || anyNode(body, pred); });
    if (found) return true;
  }
  return false;
}

// Whether every input `fusectl run` would seed has at most `max_elements` elements (false when
// its dims cannot be made).
inline bool inputsAtMost(const Graph& graph, int64_t max_elements) {
  for (const Value* input : graph.inputs()) {
    if (input->isInitializer()) continue;
    std::vector<int64_t> dims;
    try {
      dims = kernels::concreteInputDims(*input);
    } catch (const Error&) {
      return false;
    }
    int64_t elements = 1;
    for (int64_t d : dims) {
      if (d < 0 || (d > 0 && elements > max_elements / d)) return false;
      elements *= d;
    }
    if (elements > max_elements) return false;
  }
  return true;
}

}  // namespace fusectl::fuzz
