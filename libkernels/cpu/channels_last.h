// Which nodes take a channels-last value (HostTensor::channelsLast) and where it pays, from
// their attributes and declared shapes before any run: the KernelInfo::reads_channels_last and
// writes_channels_last of Conv, FusedConv, GlobalAveragePool and Mul, in one place because a
// convolution's choice looks at the nodes around it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fusectl/graph/graph.h"

namespace fusectl::kernels::cpu {

// A rank-4 value of declared, static spatial dims of at most 28x28 (the planes where the
// layout measured faster; bench/README, "Channels-last between convolutions").
bool planeTakesChannelsLast(const Shape& x);

// A Conv or FusedConv node that takes either side channels-last: a one-group pointwise 2-D
// convolution, or a depthwise one whose window the vector channel blocks run.
bool convTakesChannelsLast(const Node& node);
bool convReadsChannelsLast(const Node& node, size_t input);
bool convWritesChannelsLast(const Node& node, size_t output);

// Mul of a [N, C, H, W] value by a per-channel scale [N or 1, C, 1, 1] (a squeeze-and-
// excitation's): the index of the [N, C, H, W] input, or -1 for any other Mul.
int channelScaleInput(const Node& mul);
bool mulReadsChannelsLast(const Node& node, size_t input);
bool mulWritesChannelsLast(const Node& node, size_t output);

// GlobalAveragePool and GlobalMaxPool over such a plane.
bool globalPoolReadsChannelsLast(const Node& node, size_t input);

// Kernels of those nodes on a channels-last input, vectorised where the CPU has AVX-512:
// rows[p][c] * scale[c] for `pixels` rows of C channels, written channels-last (out_stride 0:
// out[p][c]) or as planes (out[c * out_stride + p]); and the per-channel sums of `pixels` rows,
// added to sums[c].
void scaleChannelRows(const float* x, const float* scale, int64_t pixels, int64_t C, float* out,
                      int64_t out_stride);
void sumChannelRows(const float* x, int64_t pixels, int64_t C, float* sums);

}  // namespace fusectl::kernels::cpu
