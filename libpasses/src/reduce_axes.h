// The axes a Reduce* node reduces, read the same way whichever spelling the model's opset uses:
// an `axes` attribute (ReduceMean/ReduceMax/... up to opset 17, ReduceSum up to 12) or a second
// input (opset 18+, ReduceSum 13+). canonicalize leaves the spelling as the opset requires (an
// opset-18 model cannot carry the attribute); the norm and attention passes read axes here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl::passes {

// The axes as written (possibly negative, in the order given), or nullopt when they are not
// known: the axes input is not a constant, or it is not a 1-D int64 tensor. An empty vector means
// "every axis" (no axes at all), unless the node has noop_with_empty_axes=1, which makes the node
// an identity: then nullopt too, since no axis list describes it.
std::optional<std::vector<int64_t>> constantReduceAxes(const Node& reduce);

// `axes` made non-negative and sorted for a tensor of `rank` (an empty list: every axis), or
// nullopt when one is out of range or repeated.
std::optional<std::vector<int64_t>> normalizedAxes(const std::vector<int64_t>& axes, size_t rank);

// Whether the node reduces exactly the last `count` axes of its rank-`rank` input.
bool reducesLastAxes(const Node& reduce, size_t rank, size_t count);

}  // namespace fusectl::passes
