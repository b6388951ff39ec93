// CausalConvWithState (opset 27): a depthwise causal 1-D convolution that carries its left
// context between calls, as Mamba-style and short-conv layers use while decoding.
//
//   padded[b, c, :]  = concat(past_state[b, c, :] or zeros(k - 1), input[b, c, :])
//   output[b, c, t]  = act(bias[c] + sum_j weight[c, 0, j] * padded[b, c, t + j])
//   present_state    = the last k - 1 positions of padded
//
// act is the identity, or SiLU (x * sigmoid(x), also spelled "swish"). Accumulation is in
// float, the result stored in the input's type, as the reference computes it.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// v rounded to the precision of t (float16, bfloat16), as float again.
float roundToType(DType t, float v) {
  if (t == DType::Float || t == DType::Double) return v;
  uint16_t bits = 0;
  fromFloat(&v, t, &bits, 1);
  float back = 0;
  toFloat(t, &bits, &back, 1);
  return back;
}

void causalConvWithStateKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  const HostTensor* bias = ctx.input(2);
  const HostTensor* past = ctx.input(3);
  if (!isFloatComputeType(x.dtype())) ctx.fail("input must be a float tensor");
  if (x.rank() != 3)
    ctx.fail(fmt::format("input dims {} must be [batch, channels, length]", formatDims(x.dims())));
  const int64_t batch = x.dim(0), channels = x.dim(1), length = x.dim(2);
  if (w.rank() != 3 || w.dim(0) != channels || w.dim(1) != 1 || w.dim(2) < 1)
    ctx.fail(fmt::format("weight dims {} must be [{}, 1, k] with k >= 1", formatDims(w.dims()),
                         channels));
  const int64_t k = w.dim(2), ctx_len = k - 1;
  if (bias && (bias->rank() != 1 || bias->dim(0) != channels))
    ctx.fail(fmt::format("bias dims {} must be [{}]", formatDims(bias->dims()), channels));
  if (past && (past->rank() != 3 || past->dim(0) != batch || past->dim(1) != channels ||
               past->dim(2) != ctx_len))
    ctx.fail(fmt::format("past_state dims {} must be [{}, {}, {}]", formatDims(past->dims()), batch,
                         channels, ctx_len));
  const std::string act = ctx.attrString("activation", "none");
  const bool silu = act == "silu" || act == "swish";
  if (!silu && act != "none") ctx.fail("activation '" + act + "' is not one of none, silu, swish");

  FloatView xv(x), wv(w), bv(bias), pv(past);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink ov(out);
  const bool want_state = ctx.numOutputs() > 1 && ctx.outputWanted(1);
  HostTensor* state =
      want_state ? &ctx.allocateOutput(1, x.dtype(), {batch, channels, ctx_len}) : nullptr;
  std::vector<float> state_buf(static_cast<size_t>(batch * channels * ctx_len));
  const int64_t padded_len = ctx_len + length;
  parallelFor(batch * channels, ctx.numThreads(), 4, [&](int64_t begin, int64_t end) {
    std::vector<float> padded(static_cast<size_t>(padded_len));
    for (int64_t bc = begin; bc < end; ++bc) {
      const int64_t c = bc % channels;
      for (int64_t j = 0; j < ctx_len; ++j)
        padded[static_cast<size_t>(j)] = pv ? pv[bc * ctx_len + j] : 0.0f;
      for (int64_t t = 0; t < length; ++t)
        padded[static_cast<size_t>(ctx_len + t)] = xv[bc * length + t];
      const float* wc = wv.data() + c * k;
      const float b0 = bv ? bv[c] : 0.0f;
      float* o = ov.data() + bc * length;
      for (int64_t t = 0; t < length; ++t) {
        float acc = b0;
        for (int64_t j = 0; j < k; ++j) acc += wc[j] * padded[static_cast<size_t>(t + j)];
        if (silu) {
          // The reference stores the convolution in the input's type before the activation.
          const float stored = roundToType(x.dtype(), acc);
          o[t] = stored / (1.0f + std::exp(-stored));
        } else {
          o[t] = acc;
        }
      }
      for (int64_t j = 0; j < ctx_len; ++j)
        state_buf[static_cast<size_t>(bc * ctx_len + j)] =
            padded[static_cast<size_t>(padded_len - ctx_len + j)];
    }
  });
  ov.commit();
  if (state) fromFloat(state_buf.data(), x.dtype(), state->mutableRaw(), state->numel());
}

}  // namespace
}  // namespace cpu

void registerCausalConvKernels(KernelRegistry& r) {
  r.add({"", "CausalConvWithState", 27, 1000, cpu::causalConvWithStateKernel});
}

}  // namespace fusectl::kernels
