// Seeded inputs: reproducible random data for a graph's inputs, so that two models (or two
// builds of fusectl) can be run on the same data without shipping tensor files. `fusectl run`,
// `fusectl verify`, `optimize --verify` and compareModels (compare.h) draw their inputs here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"

namespace fusectl::kernels {

// Concrete dims for a graph input: `override` when given (must be static, and of the declared
// rank when the rank is declared), else the declared dims with every symbolic or unknown dim
// set to 1. Throws naming the input for an unknown rank without an override.
std::vector<int64_t> concreteInputDims(const Value& input, const Shape* override = nullptr);

// Random data for every graph input that is not an initializer, in graph input order.
// Deterministic on every platform: each input's stream is a PCG32 seeded from (seed, input
// name), so two graphs with the same input names get the same data whatever their input order.
// Values: floating types uniform in [-1, 1) (float16/bfloat16 rounded from float32), integers
// uniform in [0, 10), or 0/1 where the input's name says it is a flag (contains "mask",
// "token_type" or "segment", any case: a transformer's attention mask or token types), bool 0/1.
// An integer input's uses narrow that range, whatever its name (looking through Reshape,
// Unsqueeze, Cast and other ops that pass values on): Gather indices into a constant table stay
// below its length on the gathered axis, and a value cast to a floating type and then used in
// Sub/Mul/Add/Div (a mask on its way to additive logits), or cast to bool, or compared by Equal
// with a constant of 0s and 1s (a mask on its way to a Where; not a value that also indexes a
// Gather: token ids compared with the padding id), is 0/1. A mask that reaches a
// fusectl op directly counts by its name only.
// `shapes` overrides input dims by name (an unknown name throws).
std::vector<NamedTensor> makeRandomInputs(
    const Graph& graph, uint64_t seed,
    const std::vector<std::pair<std::string, Shape>>& shapes = {});

// The same data for one input (what makeRandomInputs generates for it).
HostTensor makeRandomInput(const Value& input, uint64_t seed, const Shape* override = nullptr);

}  // namespace fusectl::kernels
