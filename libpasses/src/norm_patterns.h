// What the norm fusions (fuse-layer-norm, fuse-rms-norm, fuse-skip-norm) share: the legality
// conditions of a norm chain and the constants a fused norm node takes.
//
// A norm chain reduces with ReduceMean over some axes of its input x; the fused ops normalise
// over the axes from `axis` to the last, so the chain qualifies only when its axes are exactly
// the trailing ones of x's rank (keepdims on), the same in every ReduceMean of the chain.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/pattern.h"
#include "reduce_axes.h"

namespace fusectl::passes {

using constraints::readOnlyBy;


// Where a chain normalises x: the first normalised axis (non-negative) and the normalised dims
// x.shape[axis:], all static.
struct NormGeometry {
  int64_t axis = 0;
  std::vector<int64_t> dims;
};

// The geometry of `reduce` applied to a value of x's shape, or nullopt with `why`.
std::optional<NormGeometry> normGeometry(const Node& reduce, const Value& x, Why& why);

// Every ReduceMean among `reduces` normalises the trailing axes of leaf `x_leaf`, all the same
// axes, keeping the reduced dims; x's normalised dims are static.
Constraint trailingReduceAxes(std::vector<std::string> reduces, std::string x_leaf);
// Every capture's output 0 has one dtype, a fusible float (fusibleFloatTypes: a float16 chain
// rounds after every op, the fused norm computes in float32 and rounds once; an fp16 export
// that wraps its norms in Casts to float leaves a float32 chain inside them).
Constraint floatChain(std::vector<std::string> captures);
// Leaf `eps_leaf` (what node `add` adds to the variance) is a one-element constant.
Constraint constantEpsilon(std::string eps_leaf, std::string add);
// Leaf `leaf` (what node `reader` multiplies or adds) is a constant of x's dtype that broadcasts over
// the normalised axes only (1 or the dim there, 1 before them), so that the chain's output keeps
// x's shape and the value is one row of parameters. `role` names it in reasons ("scale").
Constraint rowParameter(std::string leaf, std::string reader, std::string reduce,
                        std::string x_leaf, std::string role);

// A standard LayerNormalization that a fused norm can replace: stash_type 1 (float
// statistics) and no saved statistics (Mean, InvStdDev outputs) in use; else false with `why`.
bool standardLayerNormReplaceable(const Node& n, Why& why);

// The one value of a one-element constant.
float scalarValue(const Value& v);
// A row parameter (rowParameter held) as a tensor of its own dtype of exactly `dims`.
Tensor rowTensor(const Tensor& t, const std::vector<int64_t>& dims);
// A tensor of `dtype` and `dims` filled with `value` (a unit scale, a zero bias).
Tensor filledTensor(DType dtype, const std::vector<int64_t>& dims, float value);

}  // namespace fusectl::passes
