// Numeric comparison of two tensors: error statistics and an allclose verdict.
//
// The verdict follows numpy.testing.assert_allclose(actual, expected, rtol, atol,
// equal_nan=True): element-wise |actual - expected| <= atol + rtol * |expected|; NaN matches only
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

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-4;
  double min_cosine = -std::numeric_limits<double>::infinity();  // disabled by default
  bool exact_integers = true;
};

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

  // One line for reports: "ok" or what failed first, e.g. "12 of 400 elements differ (first at
  // [0,3]: 0.51 vs 0.5); max abs 0.01, max rel 0.02, cosine 0.99998".
  std::string describe(const std::vector<int64_t>& dims = {}) const;
};

CompareResult compareTensors(const HostTensor& actual, const HostTensor& expected,
                             const Tolerance& tolerance = {});

// Element i of a numeric tensor as double (float16/bfloat16 decoded, bool as 0/1). Throws
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

}  // namespace fusectl::kernels
