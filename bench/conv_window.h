// The window the kernel benchmarks' depthwise convolutions use, built in one place.
#pragma once

#include <cstdint>

#include "compute_common.h"

namespace fusectl::bench {

// A k x k window over an H x W plane at `stride`, undilated, padded by k / 2 on every side:
// the depthwise convolutions of MobileNetV2 and EfficientNet-B0.
inline kernels::cpu::Window halfKernelPaddedWindow(int64_t H, int64_t W, int64_t k,
                                                   int64_t stride) {
  const int64_t pad = k / 2;
  kernels::cpu::Window win;
  win.in = {H, W};
  win.kernel = {k, k};
  win.strides = {stride, stride};
  win.dilations = {1, 1};
  win.pad_begin = {pad, pad};
  win.pad_end = {pad, pad};
  win.out = {(H + 2 * pad - k) / stride + 1, (W + 2 * pad - k) / stride + 1};
  return win;
}

}  // namespace fusectl::bench
