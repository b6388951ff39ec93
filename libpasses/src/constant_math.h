// Helpers for passes that fold weights (Conv+BN, Gemm+BN, BN decomposition, bias absorption):
// constant tensors as doubles and back, BatchNormalization as a per-channel affine map, and the
// few constraints and naming steps these passes share.
//
// Folding computes in double and stores the result in the weight's own dtype, rounding once:
// float16/bfloat16 weights are never rounded through an intermediate half-precision value.
// Only the float dtypes below are folded; integer or float8 weights are left to the caller to
// reject (with a reason).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/pattern.h"
#include "fusectl/passes/rewriter.h"

namespace fusectl::passes {

// float, double, float16, bfloat16: the dtypes whose constants passes may fold.
bool isFoldableFloat(DType t);

// 1/v when v is a power of two whose reciprocal is a normal number of the float type `t`
// (float32, float64, float16, bfloat16), so that x * (1/v) is x / v bit for bit; nullopt
// otherwise (canonicalize's div-by-constant and the catalog rule that explains its refusals).
std::optional<double> exactReciprocal(double v, DType t);

// Every element of a numeric tensor as double (row-major).
std::vector<double> constantAsDoubles(const Tensor& t);

// A tensor of `dtype` (a foldable float) holding `values`, each rounded once to nearest-even.
Tensor tensorFromDoubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values);
// The same rounding, into dst (n elements of `dtype`, little-endian).
void storeDoubles(DType dtype, const double* values, size_t n, uint8_t* dst);

// A constant's values in double with its dims, for folding arithmetic.
struct DoubleTensor {
  std::vector<int64_t> dims;
  std::vector<double> values;  // row-major, product(dims) of them
};
DoubleTensor constantAsDoubleTensor(const Tensor& t);

// f(a, b) element-wise with ONNX multidirectional (NumPy) broadcasting; the dims must be
// broadcastable (the caller checked them: an internal error otherwise).
DoubleTensor broadcastApply(const DoubleTensor& a, const DoubleTensor& b,
                            double (*f)(double, double));

// BatchNormalization in inference form as one affine map per channel:
//   y = x * scale[c] + shift[c],  scale = gamma / sqrt(var + epsilon),  shift = beta - mean*scale
struct ChannelAffine {
  std::vector<double> scale;
  std::vector<double> shift;
};

// Whether `bn`'s parameters (inputs 1..4, already known to be constants) can be read as one
// value per channel: each must be a foldable float with shape [channels] (channels < 0: any
// common length), and `spatial` must not be 0 (opset < 9 per-element statistics). When they
// can, `out` (when given) holds the per-channel map, computed in double; else `why` says why
// (about `bn`). A rewrite that already checked passes a `Why` that is not listening.
bool batchNormAffine(const Node& bn, int64_t channels, ChannelAffine* out, Why& why);

// Constraints shared by the folding passes.
//
// Beyond constraints::batchNormInference: before opset 7 a BatchNormalization with is_test=0
// normalizes with batch statistics (opset 0, unknown, skips the check).
Constraint batchNormTestMode(std::string capture, int64_t opset);
// Input `input` of the capture, when present, is a constant; `role` names it in the reason
// ("Conv(C) bias 'B' is not a constant (it is a graph input)").
Constraint constantIfPresent(std::string capture, size_t input, std::string role);

// Why a value that is not a constant is not one: "it is a graph input", "it is computed by
// Relu(w)", "it is an initializer that is also a graph input, so it can be overridden"...
std::string nonConstantOrigin(const Value& v);

// A 2-D tensor of any fixed-size dtype transposed ([rows, cols] -> [cols, rows]), bytes moved
// as they are (fold-transpose-into-matmul, unflatten-gemm's transB weights).
Tensor transposed2d(const Tensor& w);

// The operand of binary node `n` that is not `mine`; nullptr when both are.
Value* otherOperand(const Node& n, const Value* mine);

// The value of a one-element constant (any numeric dtype, any rank), or nullopt.
std::optional<double> scalarConstant(const Value* v);
// Every element of an integer constant (int32/int64), or nullopt: Slice's starts/ends/axes.
std::optional<std::vector<int64_t>> intsConstant(const Value* v);

// A Pad's pads, [begin of each axis..., end of each axis...]: its `pads` attribute before opset
// 11 (nullopt for opset 1's `paddings`), its constant int input from 11 on (nullopt when
// computed). An opset-18 `axes` input is not applied: the pads are as written.
std::optional<std::vector<int64_t>> padAmounts(const Node& pad, int64_t opset);

// A Slice of one axis: its start and end as written (negative ones not yet resolved), the axis,
// normalised for an input of rank `rank`, and the step.
struct SliceRange {
  int64_t start, end, axis, step;
};
// From the Slice's constant inputs (opset >= 10) or its attributes (before); nullopt for a
// Slice of several axes or bounds that are not constants.
std::optional<SliceRange> sliceRange(const Node& slice, size_t rank);
// [start, end) of a step-1 Slice of the last axis of a value of `rank` dims whose last dim is
// `dim`: a negative bound counts from the end, and the end is clamped to dim (INT64_MAX ends are
// common); nullopt for any other Slice.
std::optional<std::pair<int64_t, int64_t>> lastAxisSpan(const Node& slice, size_t rank,
                                                        int64_t dim);

// A 1-D int64 constant (Reshape targets, Slice bounds and axes).
Tensor int64Vector(std::vector<int64_t> values);

// A new Slice [from, to) of x's last axis (rank known, step 1) before `position`, which
// lastAxisSpan reads back: node and output named after `hint` (unique), typed as x with the last
// dim to - from. `axes` is the constant [-1] that the caller's Slices of x share.
Value* addLastAxisSlice(Rewriter& rw, Value* x, int64_t from, int64_t to, Value* axes,
                        const std::string& hint, Node* position);

// Unsqueeze's axes (attribute before opset 13, constant input from 13), as written.
std::optional<std::vector<int64_t>> unsqueezeAxes(const Node& n);

// The epilogue activation a standard (ai.onnx) Gelu computes: "Gelu" for approximate = "none",
// "GeluTanh" for "tanh"; nullopt, with `why` set (about `gelu`), for any other approximation
// (fuse-epilogue, fuse-matmul-epilogue).
std::optional<std::string> standardGeluActivation(const Node& gelu, Why& why);

// What a fused epilogue computes for an activation node: the kernel's name for it ("Relu",
// "Clip", "GeluTanh"...) and its activation_params (Clip's bounds, absent ones the element
// type's limits, fusectl/graph/clip_bounds.h; LeakyRelu's alpha; HardSigmoid's alpha and
// beta). nullopt, with `why` set (about `act`), when a parameter is no constant scalar, the Gelu approximation is another
// one, or the activation has parameters and the model imports an opset below 8 (the portable
// function that carries them applies them with broadcasting ops). fuse-epilogue and
// fuse-matmul-epilogue.
struct EpilogueActivation {
  std::string name;
  std::vector<float> params;
};
std::optional<EpilogueActivation> epilogueActivation(Node& act, int64_t opset, Why& why);

// A Transpose's permutation: its perm, or the reversal its input's rank gives when perm is
// omitted; nullopt with `why` set (when given) when that is not a permutation, the rank is
// unknown, or perm's length is not the input's known rank.
std::optional<std::vector<int64_t>> transposePerm(const Node& n, std::string* why);
bool isIdentityPermutation(const std::vector<int64_t>& perm);
// The permutation of `rank` (>= 2) axes that swaps the last two and keeps the others: a batched
// matrix transpose.
std::vector<int64_t> lastTwoAxesSwapped(size_t rank);

}  // namespace fusectl::passes
