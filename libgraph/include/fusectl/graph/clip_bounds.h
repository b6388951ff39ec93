// Clip's bounds where a model gives none, for every Clip fusectl runs: the Clip kernels (CPU and
// CUDA), a Clip fused into a GEMM or convolution epilogue, and a Clip in an Elementwise program.
// One definition keeps a fusion exact for every input, +-inf included: before this, the kernels
// left an absent bound out (inf stayed inf) while the epilogues clamped at +-FLT_MAX.
//
// The operator text defines the defaults as numeric_limits<T>::lowest() and max() of the input's
// element type (Clip-11 and later, whose bounds are inputs); Clip-6's attributes default to
// float's lowest() and max() whatever the element type. ONNX Runtime reads them so. The ONNX
// reference implementation (numpy.clip with None) differs only where an input is +-inf.
#pragma once

#include <cfloat>
#include <limits>
#include <utility>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/graph.h"

namespace fusectl {

// {lower, upper} for a floating-point element type; `attribute_form` for Clip before opset 11.
inline std::pair<double, double> clipDefaultBounds(DType type, bool attribute_form) {
  if (attribute_form) return {-FLT_MAX, FLT_MAX};
  switch (type) {
    case DType::Float16: return {-65504.0, 65504.0};
    case DType::BFloat16: return {-3.3895313892515355e38, 3.3895313892515355e38};
    case DType::Double:
      return {std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max()};
    default: return {-FLT_MAX, FLT_MAX};
  }
}

// Clip's {lower, upper} before its bound inputs are read: in the attribute form its `min` and
// `max` attributes (clipDefaultBounds where absent), else the element type's limits, which a
// bound input then replaces. What every Clip reader starts from.
inline std::pair<double, double> clipBoundsBeforeInputs(const Node& clip, DType type,
                                                        bool attribute_form) {
  const auto [lo, hi] = clipDefaultBounds(type, attribute_form);
  if (!attribute_form) return {lo, hi};
  return {clip.attrFloat("min", static_cast<float>(lo)),
          clip.attrFloat("max", static_cast<float>(hi))};
}

}  // namespace fusectl
