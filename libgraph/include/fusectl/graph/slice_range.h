// Which elements Slice takes along one axis, for every Slice fusectl computes: the shape rule,
// the CPU kernel and the CUDA kernel. One definition keeps them in step: each had its own copy,
// and an overflow fixed in one (steps of INT64_MAX or INT64_MIN from a file) stayed in another.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace fusectl {

struct SliceRange {
  int64_t first = 0;  // the first index taken (when count > 0)
  int64_t count = 0;  // how many elements are taken
};

// x[start:end:step] on an axis of `dim` elements (step != 0), with ONNX's negative indices and
// clamping. Counted without forming end - start + step or -step, which overflow for the
// extreme steps; an empty axis takes nothing whichever way it is walked.
inline SliceRange sliceRange(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, end > start ? (end - start - 1) / step + 1 : 0};
  }
  if (dim == 0) return {0, 0};
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  if (start <= end) return {start, 0};
  return {start, step == std::numeric_limits<int64_t>::min() ? 1 : (start - end - 1) / -step + 1};
}

}  // namespace fusectl
