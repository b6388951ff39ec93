// Portable export of fusectl-domain operators: each one gets a model-local ONNX function
// (onnx.FunctionProto, domain "fusectl") that defines it with standard ops, so the saved model
// passes the ONNX checker and runs in any runtime that supports functions (ONNX Runtime does).
//
// A function body cannot branch on an attribute or on a missing input, so one FusedConv op type
// cannot be one function. attachFusectlFunctions therefore renames each FusedConv/FusedGemm to
// the spelling of what it computes, <base>[_NoBias][_Add][_<activation>] ("FusedConv_Add_Relu",
// "FusedGemm_Silu"), and adds one function per spelling used. The nodes keep their attributes,
// and fusectl's kernels are registered under every spelling, so our executor runs the exported
// model too. docs/ops.md describes the operators and the function bodies.
// fusectl::Gelu keeps its name and gets the function Gelu (Erf and standard arithmetic).
#pragma once

#include <string>

#include "fusectl/graph/graph.h"

namespace fusectl::passes {

// For every (domain "fusectl", op type) used in the main graph or any subgraph: renames
// FusedConv/FusedGemm nodes to their spelling, makes their activation_params explicit (and, below
// opset 12, mirrors them in a tensor attribute `activation_params_tensor` that the function
// reads), and appends the missing functions to model.functions sorted by name. Adds the
// imports the functions need ("fusectl": 1; the default domain is the model's) and raises
// ir_version to 8 (model-local functions). Idempotent: a second call changes nothing.
// Throws fusectl::Error(Unsupported) for a fusectl op it cannot define and the model does not
// define either, or for a model without a default-domain opset import.
void attachFusectlFunctions(Model& model);

// The spelling attachFusectlFunctions gives a FusedConv/FusedGemm node (any of its spellings),
// e.g. "FusedConv_Add_Relu"; throws fusectl::Error(InvalidInput) for an unknown activation.
std::string fusedOpSpelling(const Node& node);

}  // namespace fusectl::passes
