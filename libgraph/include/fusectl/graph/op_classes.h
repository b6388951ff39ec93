// Op classes: the one table that fusion passes consult for legality (after TVM's FuseOps).
//
// A fusion asks "may this op join an elementwise group?" or "may this activation become the
// epilogue of a FusedConv/FusedGemm?" here, never from a private list in the pass. Ops not in
// the table are Opaque: nothing fuses across them.
//
// The fusectl-domain rows and the epilogue activations come from the fused-op table
// (fused_ops.def), so a new fused op or activation needs no edit here.
//
// The class says what an op is; attribute- and value-level conditions (Clip bounds constant,
// Gelu approximate="none", a Cast that keeps the type) stay with the pass that checks them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl {

enum class OpClass : uint8_t {
  ElementwiseUnary,   // y[i] = f(x[i]): Abs, Exp, Sqrt, Cast...
  ElementwiseBinary,  // y[i] = f(a[i'], b[i'']) with multidirectional broadcasting: Add, Mul...
  Activation,         // unary nonlinearities, some with attribute parameters: Relu, Clip...
  Injective,          // layout and data movement, each output element reads one input element:
                      // Reshape, Transpose, Concat, Slice, Gather...
  Reduction,          // reduces axes: ReduceSum, ArgMax, GlobalAveragePool...
  Normalization,      // a reduction followed by an elementwise scale: Softmax, LayerNorm, BN
  Compute,            // out-elementwise-fusable: Conv, Gemm, MatMul accept an epilogue
  Opaque,             // everything else: control flow, pooling windows, NMS, random...
};

std::string_view opClassName(OpClass c);  // "elementwise-unary", "compute", ...

struct OpClassInfo {
  std::string_view domain;  // "" for ai.onnx
  std::string_view op_type;
  OpClass op_class;
  // An activation the FusedConv/FusedGemm epilogue implements (fused_ops.def).
  bool epilogue_activation = false;
  // Compute ops whose output can take a fused bias/residual/activation epilogue.
  bool accepts_epilogue = false;
};

// The whole table, sorted by (domain, op_type).
const std::vector<OpClassInfo>& allOpClasses();
// nullptr for an op not in the table.
const OpClassInfo* findOpClass(std::string_view domain, std::string_view op_type);
// Opaque for an op not in the table.
OpClass opClassOf(std::string_view domain, std::string_view op_type);
inline OpClass opClassOf(const Node& n) { return opClassOf(n.domain(), n.opType()); }

// Unary, binary or activation: may join an elementwise fusion group.
bool isElementwise(OpClass c);
// An activation the fused epilogue can apply (Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid,
// HardSwish, Gelu, Tanh); the pass still checks its attributes and constant inputs.
bool isEpilogueActivation(const Node& n);
// A compute op whose kernel can run a fused epilogue: Conv, Gemm, MatMul and the fusectl-domain
// FusedConv/FusedGemm (not ConvTranspose, whose col2im scatter has no tile epilogue).
bool acceptsEpilogue(const Node& n);
// An op whose outputs may differ between two runs on the same inputs (RandomNormal, Bernoulli,
// Multinomial..., and Dropout, random in training mode): never folded or merged.
bool isNondeterministic(const Node& n);

}  // namespace fusectl
