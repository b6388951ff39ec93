// Internal to libgraph: the function-body builders of the composite fusectl ops
// (fused_ops.def, FUSECTL_COMPOSITE_OP).
//
// Each family of ops writes its builders in a file of its own under fused_bodies/ (norms.cpp,
// attention.cpp...) and lists them once in compositeBodyBuilders() (fused_ops_composite.cpp),
// explicitly rather than by static initialisers, because libgraph is a static library and the
// linker would drop a file nothing refers to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/fused_ops.h"

namespace fusectl {

// Returns the serialized FunctionDef (functionToBinary) named `op.name` in kFusectlDomain, whose
// body computes the op from standard ops at `opset`: every input of op.inputs in order, every
// output of op.outputs in order, attributes by reference (refAttr) where the op has them.
using CompositeBodyBuilder = std::string (*)(const FusedOpInfo& op, int64_t opset);

struct CompositeBody {
  std::string_view op;  // the composite op's name
  CompositeBodyBuilder build;
};

const std::vector<CompositeBody>& compositeBodyBuilders();
// nullptr when `op` has no builder.
CompositeBodyBuilder findCompositeBodyBuilder(std::string_view op);

struct ElementwiseProgram;
// fusectl::Elementwise has a body per program instead (fused_bodies/elementwise.cpp): the
// function `name` taking inputs X0..X<num_inputs - 1>, its body the ops the program stands for.
std::string buildElementwiseFunction(const std::string& name, const ElementwiseProgram& program,
                                     size_t num_inputs, int64_t opset);

// fusectl::ExpandDepthwiseConv has a body per activation pair (fused_bodies/expand_depthwise.cpp):
// the function `name`, Y = activation(Conv(expand_activation(Conv(X, W, B)), DW, DB)).
std::string buildExpandDepthwiseFunction(const std::string& name, Activation expand_activation,
                                         Activation activation, int64_t opset);

// fusectl::GroupNorm with an activation (fused_bodies/norms.cpp): the function `name`, the
// GroupNorm body followed by `activation` reading the call's activation_params. With
// Activation::None, the plain GroupNorm function (named GroupNorm).
std::string buildGroupNormFunctionWith(const std::string& name, Activation activation,
                                       int64_t opset);

}  // namespace fusectl
