// Depthwise 2-D convolution of one channel plane with its epilogue, vectorised (AVX-512).
#pragma once

#include <cstdint>

#include "compute_common.h"
#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cpu {

// The input plane a caller will convolve next, for depthwisePlaneAvx512 to fetch towards the
// core while it computes this one: its window walks 3-9 input rows at once, one block of
// columns at a time, which the hardware prefetcher does not follow, so without this each plane
// arrived from L3 or memory at their latency. Empty: nothing to fetch.
struct NextPlane {
  const float* input = nullptr;
  int64_t bytes = 0;
};

// y (one output plane) = act(conv(x plane, w taps) + bias[channel] + residual plane), row by
// row with the row in registers. `residual` points at this plane's residual (or null);
// ep.bias is indexed by `channel`. A 1-D window at stride 1 is one line, taken whole. Returns
// false, touching nothing, when it cannot take the case (no AVX-512, a 3-D window, a 1-D one
// with a stride, a horizontal stride other than 1 or 2).
bool depthwisePlaneAvx512(const float* x, const float* w, float* y, const Window& win,
                          const Epilogue& ep, int64_t channel, const float* residual,
                          const NextPlane& next = {});

// Whether depthwisePlaneAvx512 takes this window (it returns false exactly where this does):
// for a caller that must choose its schedule before it has a plane to hand over.
bool depthwisePlaneAvx512Takes(const Window& win);

// The portable convolution of one plane (1-D or 2-D, any stride, dilation and padding), for
// the windows or CPUs depthwisePlaneAvx512 does not take: y is overwritten, and no epilogue is
// applied (Epilogue::apply after it). Defined in conv.cpp.
void depthwise2d(const float* x, const float* w, float* y, const Window& win);

// The same convolution for `count` (1..16) consecutive channels of one image at once, with the
// channels across the vector: x and y point at the first channel's plane, `residual` at its
// residual plane (or null). Each channel block is turned into a zero-padded [rows][columns][16]
// scratch image, every tap is then one full-vector FMA per output pixel, and the results go
// back to planes. On small planes (7x7, 14x14) a plane's rows fill under half of a vector's 16
// columns or leave a partial one, and the row kernel pays its taps and its activation for the
// idle lanes too; across channels no lane is idle. Square 3x3 and 5x5 windows at stride 1 or 2
// only; returns false, touching nothing, otherwise (or without AVX-512).
bool depthwiseChannelsAvx512(const float* x, const float* w, float* y, const Window& win,
                             const Epilogue& ep, int64_t channel, int64_t count,
                             const float* residual);

// Whether depthwiseChannelsAvx512 is the faster of the two for this window (measured:
// bench_gemm --only depthwise).
bool depthwiseChannelsPay(const Window& win);

// Output rows [oh_begin, oh_end) of the same convolution over every channel of one image,
// where its input, its output or both are channels-last ([H][W][C], HostTensor::channelsLast):
// x and y point at the image, x_nhwc and y_nhwc give each one's layout, C is the channel count
// of both (one output channel per input channel), w holds C filters. Channels go 16 to a
// vector: a channels-last side is read or written 16 channels of a pixel per vector, with
// nothing to transpose; a planar side goes through 16x16 register transposes as in
// depthwiseChannelsAvx512. Output rows go in bands whose padded input stays in L2, so planes
// of any size take it. `residual` (laid out like a planar y, from the image's start, or null)
// only with a planar y; ep.bias is indexed by channel. AVX-512 for depthwiseChannelsLastTakes'
// windows, a scalar loop for any other 2-D window.
void depthwiseChannelsLast(const float* x, bool x_nhwc, const float* w, float* y, bool y_nhwc,
                           const Window& win, const Epilogue& ep, int64_t C,
                           const float* residual, int64_t oh_begin, int64_t oh_end);

// Whether depthwiseChannelsLast runs vectorised for this window (square 3x3 and 5x5 at stride
// 1 or 2, undilated, with AVX-512): where a convolution offers to read or write channels-last.
bool depthwiseChannelsLastTakes(const Window& win);

// Whether depthwiseChannelsLast may write a channels-last y over its channels-last x (y == x),
// one call covering all output rows (threads splitting the rows would each read rows another
// has overwritten): a window it takes, at stride 1, whose output has the input's size. Its
// output then lands in lines the read has just brought into cache, not in a pooled buffer last
// touched a run ago (MobileNetV2's first 192-channel depthwise convolution at 28x28: 0.086 ->
// 0.048 ms a run, one thread).
bool depthwiseChannelsLastInPlace(const Window& win);

}  // namespace fusectl::kernels::cpu
