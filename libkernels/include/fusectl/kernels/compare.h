// Numeric comparison: of two tensors (compareTensors), and of two models run on the same inputs
// (compareModels, the engine of `fusectl verify`, `optimize --verify` and the pass goldens).
//
// The verdict follows numpy.testing.assert_allclose(actual, expected, rtol, atol,
// equal_nan=True): element-wise |actual - expected| <= atol + rtol * |expected| (or, with
// Tolerance::rtol_scale = Tensor, atol + rtol * max |expected| over the tensor); NaN matches only
// NaN at the same position; an infinity matches only the same infinity. Integer and bool tensors
// are compared exactly when Tolerance::exact_integers is set (the default). Dtypes and shapes
// must be equal for a pass; values are still compared when only the dtype differs.
//
// Statistics are computed in double over positions where both values are finite:
//  - max_abs_error = max |a - e| (+inf when some position mismatches by NaN or infinity);
//  - max_rel_error = max |a - e| / |e| over positions with e != 0 (zeros are judged by atol);
//  - cosine = <a, e> / (|a| |e|); 1 when both are all zero, 0 when only one is.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/kernel.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace fusectl::kernels {

// What rtol multiplies: each element's own |expected| (numpy's allclose), or the largest finite
// |expected| of the whole tensor. A rewrite that reorders a sum (a folded BatchNormalization, a
// Winograd convolution, a fused epilogue) changes each output by rounding of the size of the
// values summed, not of the output element: a torchvision ResNet-50's logits (rms 0.63) differ
// by up to 6.7e-5 after -O3 and by 3.9e-5 between ONNX Runtime's own optimization levels, which
// an element-wise rtol fails on the logits near zero. Tensor judges that drift against the
// tensor's scale (the norm-wise relative error of numerical analysis); the CLI's verify, optimize
// --verify and profile default to it, the conformance suite keeps Element (the node tests'
// reference tolerances are numpy's).
enum class RtolScale { Element, Tensor };

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-4;
  RtolScale rtol_scale = RtolScale::Element;
  double min_cosine = -std::numeric_limits<double>::infinity();  // disabled by default
  bool exact_integers = true;
  // A float16/bfloat16 tensor is judged with atol and rtol of at least this many machine
  // epsilons of its type (float16 2^-10, bfloat16 2^-7: 16 make 1.5625e-2 and 0.125): two
  // correct half computations of the same value differ by their roundings, which a float32
  // tolerance would count as errors (a fused half node rounds once where the chain it replaced
  // rounded after every op). 16, not fewer: a 12-layer float16 BERT-base encoder, fused against
  // unfused, differs by up to 0.0117 on outputs of standard deviation 1 (cosine 0.999998), an
  // absolute drift of the residual stream that 8 epsilons (7.8e-3) failed on one element in
  // 24576. 0 applies atol and rtol as given.
  double half_min_epsilons = 16;

  // The tolerance a tensor of `t` is judged by.
  Tolerance forDType(DType t) const;
};

// "element" or "tensor", as the CLI's --rtol-scale and the JSON reports spell it.
const char* rtolScaleName(RtolScale scale);

struct CompareResult {
  bool dtype_match = true;
  bool shape_match = true;
  int64_t count = 0;               // elements compared
  int64_t mismatches = 0;          // elements outside the tolerance, NaN/Inf mismatches included
  int64_t nonfinite_mismatches = 0;  // NaN or infinity on one side without the same on the other
  int64_t first_mismatch = -1;     // flat index of the first mismatching element
  double first_actual = 0;
  double first_expected = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  double cosine = 1;
  bool passed = true;  // dtype and shape equal, no mismatch, cosine >= min_cosine
  // When only the element-wise bound failed (dtypes equal, the cosine passed, every mismatch
  // finite, a tolerance-compared type): the smallest atol with which every element passes at
  // the same rtol, which describe() offers; else -1.
  double atol_needed = -1;
  // max |a - e| / max |e| over the finite positions (0 when e is all zero): the rtol with which
  // every element passes under RtolScale::Tensor at atol 0, which describe() offers when the
  // element-wise bound failed.
  double max_error_of_scale = 0;

  // One line for reports: "ok" or what failed first, e.g. "12 of 400 elements differ (first at
  // [0,3]: 0.51 vs 0.5); max abs 0.01, max rel 0.02, cosine 0.99998".
  std::string describe(const std::vector<int64_t>& dims = {}) const;
};

CompareResult compareTensors(const HostTensor& actual, const HostTensor& expected,
                             const Tolerance& tolerance = {});

// Element i of a numeric tensor as double (float16/bfloat16 and the narrow types of
// narrow_types.h decoded, bool as 0/1). Throws
// Unsupported for string and other non-numeric dtypes.
double elementAsDouble(const HostTensor& t, int64_t i);

// min / max / mean / std over the finite elements, with NaN and infinity counts, for reports.
struct TensorSummary {
  int64_t count = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  double min = 0, max = 0, mean = 0, stddev = 0;  // over finite elements; 0 when there are none
};
TensorSummary summarizeTensor(const HostTensor& t);

// ---- Two models on the same inputs ----
//
// A is the reference, B the model checked against it (e.g. the original and the optimized one):
// each output of A is compared with B's output of the same name, compareTensors(B's, A's).

// What both models run on.
struct ComparisonInputs {
  // `runs` input sets made from A's graph with seeds seed, seed + 1, ... (makeRandomInputs);
  // `shapes` fixes input dims by name (`--shape`).
  uint64_t seed = 0;
  int runs = 1;
  std::vector<std::pair<std::string, Shape>> shapes;
  // When not empty: these input sets instead, one run each (seed, runs and shapes unused).
  std::vector<std::vector<NamedTensor>> given;
  ExecutorOptions execution;  // for both models (threads...)
  // Where B runs when not null (`verify --device cuda`): A stays on execution's backend, the
  // reference, and B's outputs are compared with it.
  const Backend* backend_b = nullptr;
};

// One output of A over every run: the worst figures (largest errors, smallest cosine, summed
// mismatches) and the first failure.
struct OutputComparison {
  std::string name;
  DType dtype = DType::Undefined;  // A's, in the first run
  std::vector<int64_t> dims;       // A's, in the first run
  double max_abs_error = 0, max_rel_error = 0, cosine = 1;  // errors may be +inf
  int64_t mismatches = 0;
  bool passed = true;
  bool missing = false;  // B has no output of this name: nothing was compared
  // The first failing run (-1: none), its seed (seeded runs), compareTensors(B's, A's) in that
  // run and both tensors' dims there, for callers that word the failure their own way.
  int failed_run = -1;
  uint64_t failed_seed = 0;
  CompareResult failure;
  DType failed_dtype_b = DType::Undefined;
  std::vector<int64_t> failed_dims_a, failed_dims_b;
  // The first failure in words, "" when passed: e.g. "shape [2] in B vs [3] in A", "dtype
  // int64 in B vs float in A; ...", or CompareResult::describe(); prefixed with "run R (seed
  // S): " when there was more than one run; "B has no output of this name".
  std::string detail;
};

struct Comparison {
  std::vector<OutputComparison> outputs;  // in A's output order
  int runs = 0;
  bool passed = true;  // every output passed
};

// Runs A and B on the same inputs and compares every output of A with B's. Executors for both
// are built first (an op without a kernel throws fusectl::Error(Unsupported) naming the node),
// then each run's inputs are made and both models run. B's outputs that A lacks are ignored;
// checkSameInterface rejects such pairs up front when that matters.
Comparison compareModels(const Model& a, const Model& b, const ComparisonInputs& inputs,
                         const Tolerance& tolerance);

// compareModels' comparison for outputs a caller already has: `a` (A's outputs, in its output
// order) and `b` from one run of each model on the same inputs. fusectl profile compares the
// outputs of its timed runs this way instead of running both models again.
Comparison compareRunOutputs(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b,
                          const Tolerance& tolerance);

// Both graphs take the same non-initializer inputs (names and dtypes) and have the same output
// names; else throws fusectl::Error(InvalidInput) naming the models by the labels given, e.g.
// "input mismatch: 'x' is an input of a.onnx but not of b.onnx".
void checkSameInterface(const Graph& a, const Graph& b, const std::string& a_label,
                        const std::string& b_label);

}  // namespace fusectl::kernels
