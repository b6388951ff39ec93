// Depthwise 2-D convolution of one channel plane with its epilogue, vectorised (AVX-512).
#pragma once

#include <cstdint>

#include "compute_common.h"
#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cpu {

// y (one output plane) = act(conv(x plane, w taps) + bias[channel] + residual plane), row by
// row with the row in registers. `residual` points at this plane's residual (or null);
// ep.bias is indexed by `channel`. Returns false, touching nothing, when it cannot take the case
// (no AVX-512, a 1-D or 3-D window, a horizontal stride other than 1 or 2).
bool depthwisePlaneAvx512(const float* x, const float* w, float* y, const Window& win,
                          const Epilogue& ep, int64_t channel, const float* residual);

}  // namespace fusectl::kernels::cpu
