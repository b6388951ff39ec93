// Chains of layout ops (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Identity) as strided
// views of the buffer they start from, so that a pass can tell when a whole chain only
// renames the dims of its first value: then one Reshape (a view, not a copy) says the same.
//
// emit-ort uses it around the attentions it hands ONNX Runtime: torch's nn.MultiheadAttention
// splits its heads as Slice -> Reshape [S, H, D] -> Transpose(1, 0, 2) -> Unsqueeze, and the
// Transpose(0, 2, 1, 3) + Reshape to [B, S, H*D] that MultiHeadAttention needs undoes it; with
// batch 1 the four copies in between are one Reshape of the Slice.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl::passes {

// A value's elements as `sizes` over a row-major buffer, element i of dim d `strides[d]`
// apart.
struct StridedLayout {
  std::vector<int64_t> sizes, strides;

  static StridedLayout rowMajor(const std::vector<int64_t>& sizes);
  // The elements in the buffer's own order (dims of extent 1 have no say).
  bool isRowMajor() const;
  StridedLayout transposed(const std::vector<int64_t>& perm) const;
  // The same elements, in the same order, as `new_sizes`; nullopt when no strides express that
  // (a reshape across dims a transpose left out of order), or the element counts differ.
  std::optional<StridedLayout> reshaped(const std::vector<int64_t>& new_sizes) const;
};

// One step of a chain: a transpose by `perm`, or (perm empty) a reshape to `sizes`.
struct LayoutStep {
  std::vector<int64_t> perm;
  std::vector<int64_t> sizes;
};

// The step `n` takes: Transpose by its permutation; Reshape, Squeeze, Unsqueeze, Flatten and
// Identity (ONNX domain) as a reshape to their static output shape. nullopt for any other
// node, or an output shape that is not static.
std::optional<LayoutStep> layoutStepOf(const Node& n);

// `layout` after `steps`, or nullopt when a reshape is not expressible.
std::optional<StridedLayout> applyLayoutSteps(StridedLayout layout,
                                              const std::vector<LayoutStep>& steps);

// Walking up from `v` through layout ops with static shapes (at most `max_steps`), the farthest
// value whose row-major buffer holds, in order, the elements `v` has after `then`; nullptr when
// no value does (not even `v` itself).
Value* rowMajorSource(Value* v, const std::vector<LayoutStep>& then, size_t max_steps = 16);

// Walking down from `v` through layout ops each the only reader of the value before it (none a
// graph output), the farthest value whose elements are, in order, those of a row-major buffer
// that `before` takes to `v`'s layout; `v` itself when the chain has no such value. `before` are
// the steps from that buffer's shape to `v`'s, whose first shape is `source_sizes`.
Value* rowMajorSink(Value* v, const std::vector<int64_t>& source_sizes,
                       const std::vector<LayoutStep>& before, size_t max_steps = 16);

}  // namespace fusectl::passes
