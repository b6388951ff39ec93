// Row-wise CUDA kernels: Softmax and LogSoftmax, the layer norms (ONNX LayerNormalization,
// fusectl LayerNorm, RMSNorm and their skip variants), BatchNormalization in inference mode,
// and ReduceMean/Sum/Max/Min. A row that is reduced gets a block; the block reads it from
// global memory (L2 after the first pass) once per statistic and writes the result once, so a
// fused skip norm reads X and Skip and writes Y (and Sum) in one launch where the unfused
// graph runs an Add and then the norm's five to nine nodes.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_common.h"
#include "cuda_device_util.cuh"
#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {
namespace {

int threadsForRow(int64_t cols) {
  return cols >= 4096 ? 1024 : cols >= 1024 ? 512 : cols >= 256 ? 256 : 128;
}

// Softmax over rows of `cols` contiguous values.
template <typename T>
__global__ void softmaxRowsKernel(const T* __restrict__ x, T* __restrict__ y, int64_t cols,
                                  bool log_softmax) {
  __shared__ float scratch[32];
  const T* in = x + blockIdx.x * cols;
  T* out = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, toFloat(in[j]));
  m = blockMax(m, scratch);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(toFloat(in[j]) - m);
  s = blockSum(s, scratch);
  const float log_s = logf(s), inv = 1.f / s;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = toFloat(in[j]) - m;
    out[j] = fromFloat<T>(log_softmax ? v - log_s : expf(v) * inv);
  }
}

// Softmax along an axis with `inner` elements after it: one thread per (outer, inner) pair.
template <typename T>
__global__ void softmaxStridedKernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer,
                                     int64_t axis_len, int64_t inner, bool log_softmax) {
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = i / inner, k = i - o * inner;
    const T* in = x + o * axis_len * inner + k;
    T* out = y + o * axis_len * inner + k;
    float m = -INFINITY;
    for (int64_t j = 0; j < axis_len; ++j) m = fmaxf(m, toFloat(in[j * inner]));
    float s = 0.f;
    for (int64_t j = 0; j < axis_len; ++j) s += expf(toFloat(in[j * inner]) - m);
    const float log_s = logf(s), inv = 1.f / s;
    for (int64_t j = 0; j < axis_len; ++j) {
      const float v = toFloat(in[j * inner]) - m;
      out[j * inner] = fromFloat<T>(log_softmax ? v - log_s : expf(v) * inv);
    }
  }
}

void runSoftmax(KernelContext& ctx, bool log_softmax) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const int64_t default_axis = ctx.opset() >= 13 ? -1 : 1;
  int64_t axis = ctx.attrInt("axis", default_axis);
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) ctx.fail("axis out of range");
  if (axis < 0) axis += rank;
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  if (x.numel() == 0) return;
  int64_t outer = 1, axis_len = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t v = x.dim(static_cast<size_t>(d));
    if (d < axis) outer *= v;
    else if (d == axis || ctx.opset() < 13) axis_len *= v;  // before 13: all dims from axis on
    else inner *= v;
  }
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (inner == 1) {
      softmaxRowsKernel<<<static_cast<unsigned>(outer), threadsForRow(axis_len), 0, stream()>>>(
          x.data<T>(), y.mutableData<T>(), axis_len, log_softmax);
    } else {
      softmaxStridedKernel<<<gridFor(outer * inner, 256), 256, 0, stream()>>>(
          x.data<T>(), y.mutableData<T>(), outer, axis_len, inner, log_softmax);
    }
  });
  launched(log_softmax ? "LogSoftmax" : "Softmax");
}

// One block per row: sum = x + skip (when skip), then LayerNorm (two passes for mean and
// variance, as the CPU kernel, so a large mean does not eat the variance's digits) or RMSNorm.
// scale/bias hold `cols` values or one; skip holds the whole tensor or one row.
template <typename T>
__global__ void normRowsKernel(const T* __restrict__ x, const T* __restrict__ skip,
                               bool skip_per_row, const T* __restrict__ scale,
                               bool scale_scalar, const T* __restrict__ bias, bool bias_scalar,
                               T* __restrict__ y, T* __restrict__ sum, float* __restrict__ mean_out,
                               float* __restrict__ inv_std_out, int64_t cols, float eps,
                               bool rms, bool round_each_step) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* in = x + row * cols;
  const T* sk = skip ? skip + (skip_per_row ? 0 : row * cols) : nullptr;
  auto value = [&](int64_t j) {
    float v = toFloat(in[j]);
    if (sk) v += toFloat(sk[j]);
    return v;
  };
  float mean = 0.f;
  if (!rms) {
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += value(j);
    mean = blockSum(s, scratch) / static_cast<float>(cols);
  }
  float q = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float d = value(j) - mean;
    q += d * d;
  }
  const float inv_std = rsqrtf(blockSum(q, scratch) / static_cast<float>(cols) + eps);
  T* out = y + row * cols;
  T* sum_row = sum ? sum + row * cols : nullptr;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = value(j);
    if (sum_row) sum_row[j] = fromFloat<T>(v);
    float r;
    if (round_each_step) {
      // ai.onnx LayerNormalization in a 16-bit type, as its function body (and the CPU kernel)
      // rounds: Normalized cast to T, then the Mul by Scale in T; the Add of B rounds on store.
      const float normalized = toFloat(fromFloat<T>((v - mean) * inv_std));
      r = toFloat(fromFloat<T>(normalized * toFloat(scale[scale_scalar ? 0 : j])));
    } else {
      r = (v - mean) * inv_std * toFloat(scale[scale_scalar ? 0 : j]);
    }
    if (bias) r += toFloat(bias[bias_scalar ? 0 : j]);
    out[j] = fromFloat<T>(r);
  }
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[row] = mean;
    if (inv_std_out) inv_std_out[row] = inv_std;
  }
}

struct NormKind {
  bool rms = false;
  bool skip = false;
  bool onnx = false;  // ai.onnx LayerNormalization: B optional, Mean and InvStdDev outputs
};

void runNorm(KernelContext& ctx, NormKind kind) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) ctx.fail("axis out of range for rank " + std::to_string(rank));
  const float eps = ctx.attrFloat("epsilon", 1e-5f);
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? rows : cols) *= x.dim(static_cast<size_t>(d));
  size_t next = 1;
  const HostTensor* skip = nullptr;
  bool skip_per_row = false;
  if (kind.skip) {
    skip = &ctx.requireInput(next++);
    skip_per_row = skip->dims() != x.dims();
    if (skip_per_row && skip->numel() != cols) {
      ctx.fail("Skip must have X's shape or hold one row of the normalised shape");
    }
  }
  const HostTensor& scale = ctx.requireInput(next++);
  const HostTensor* bias = kind.rms ? nullptr : ctx.input(next++);
  if (!kind.rms && !kind.onnx && !bias) ctx.fail("B is required");
  for (const HostTensor* p : {&scale, bias}) {
    if (p && p->numel() != cols && p->numel() != 1) {
      ctx.fail("Scale and B must hold the normalised shape (" + std::to_string(cols) + " values)");
    }
    if (p && p->dtype() != x.dtype()) ctx.fail("Scale and B must have X's dtype");
  }
  if (skip && skip->dtype() != x.dtype()) ctx.fail("Skip must have X's dtype");
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  void* sum = nullptr;
  float* stats[2] = {nullptr, nullptr};
  if (kind.skip && ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    sum = ctx.allocateOutput(1, x.dtype(), x.dims()).mutableRaw();
  }
  if (kind.onnx) {
    if (ctx.attrInt("stash_type", 1) != 1) ctx.fail("stash_type other than float has no CUDA kernel");
    std::vector<int64_t> stat_dims(x.dims().begin(), x.dims().begin() + axis);
    stat_dims.resize(static_cast<size_t>(rank), 1);
    for (size_t out = 1; out <= 2; ++out) {
      if (out < ctx.numOutputs() && ctx.outputWanted(out)) {
        stats[out - 1] = ctx.allocateOutput(out, DType::Float, stat_dims).mutableData<float>();
      }
    }
  }
  if (x.numel() == 0) return;
  const int threads = threadsForRow(cols);
  const unsigned grid = static_cast<unsigned>(rows);
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    normRowsKernel<<<grid, threads, 0, stream()>>>(
        x.data<T>(), skip ? skip->data<T>() : nullptr, skip_per_row, scale.data<T>(),
        scale.numel() == 1, bias ? bias->data<T>() : nullptr, bias && bias->numel() == 1,
        y.mutableData<T>(), static_cast<T*>(sum), stats[0], stats[1], cols, eps, kind.rms,
        kind.onnx && x.dtype() != DType::Float);
  });
  launched(ctx.node().opType().c_str());
}

template <typename T>
__global__ void batchNormKernel(const T* __restrict__ x, const T* __restrict__ scale,
                                const T* __restrict__ bias, const T* __restrict__ mean,
                                const T* __restrict__ var, T* __restrict__ y, int64_t channels,
                                int64_t spatial, int64_t n, float eps) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = (i / spatial) % channels;
    const float inv = rsqrtf(toFloat(var[c]) + eps);
    y[i] = fromFloat<T>((toFloat(x[i]) - toFloat(mean[c])) * inv * toFloat(scale[c]) +
                        toFloat(bias[c]));
  }
}

void runBatchNorm(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  for (size_t i = 1; i < ctx.numOutputs(); ++i) {
    if (ctx.outputWanted(i)) ctx.fail("training mode (running statistics) has no CUDA kernel");
  }
  if (ctx.attrInt("training_mode", 0) != 0) ctx.fail("training mode has no CUDA kernel");
  const int64_t channels = x.dim(1);
  for (size_t i = 1; i <= 4; ++i) {
    const HostTensor& p = ctx.requireInput(i);
    if (p.numel() != channels || p.dtype() != x.dtype()) {
      ctx.fail("scale, B, mean and var must hold one value of X's dtype per channel");
    }
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t spatial = n / (x.dim(0) * channels);
  const float eps = ctx.attrFloat("epsilon", 1e-5f);
  const unsigned grid = gridFor(n, 256);
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    batchNormKernel<<<grid, 256, 0, stream()>>>(
        x.data<T>(), ctx.requireInput(1).data<T>(), ctx.requireInput(2).data<T>(),
        ctx.requireInput(3).data<T>(), ctx.requireInput(4).data<T>(), y.mutableData<T>(),
        channels, spatial, n, eps);
  });
  launched("BatchNormalization");
}

enum class ReduceOp : int { Mean, Sum, Max, Min };

__device__ __forceinline__ float reduceInit(ReduceOp op) {
  return op == ReduceOp::Max ? -INFINITY : op == ReduceOp::Min ? INFINITY : 0.f;
}
__device__ __forceinline__ float reduceStep(ReduceOp op, float acc, float v) {
  switch (op) {
    case ReduceOp::Max: return (isnan(acc) || isnan(v)) ? NAN : fmaxf(acc, v);
    case ReduceOp::Min: return (isnan(acc) || isnan(v)) ? NAN : fminf(acc, v);
    default: return acc + v;
  }
}

// The reduced dims of one output element, walked as a strided view.
struct ReduceView {
  static constexpr int kMaxRank = 8;
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};
  int64_t reduced_dims[kMaxRank] = {}, reduced_strides[kMaxRank] = {};
  int64_t outputs = 1, count = 1;
};

// One block per output element when the reduced elements are the contiguous tail of a row;
// otherwise one thread per output element.
template <typename T>
__global__ void reduceRowsKernel(const T* __restrict__ x, T* __restrict__ y, int64_t count,
                                 ReduceOp op) {
  __shared__ float scratch[32];
  const T* in = x + blockIdx.x * count;
  float acc = reduceInit(op);
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) acc = reduceStep(op, acc, toFloat(in[j]));
  if (op == ReduceOp::Max || op == ReduceOp::Min) {
    // Combine through the sum helpers' pattern with the matching operator.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) acc = reduceStep(op, acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (lane == 0) scratch[warp] = acc;
    __syncthreads();
    const int warps = (blockDim.x + 31) >> 5;
    acc = lane < warps ? scratch[lane] : reduceInit(op);
    for (int o = 16; o > 0; o >>= 1) acc = reduceStep(op, acc, __shfl_xor_sync(0xffffffffu, acc, o));
  } else {
    acc = blockSum(acc, scratch);
  }
  if (threadIdx.x == 0) {
    y[blockIdx.x] = fromFloat<T>(op == ReduceOp::Mean ? acc / static_cast<float>(count) : acc);
  }
}

template <typename T>
__global__ void reduceStridedKernel(const T* __restrict__ x, T* __restrict__ y, ReduceView v,
                                    ReduceOp op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < v.outputs;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, base = 0;
    for (int d = v.kept_rank - 1; d >= 0; --d) {
      const int64_t q = rest / v.kept_dims[d];
      base += (rest - q * v.kept_dims[d]) * v.kept_strides[d];
      rest = q;
    }
    float acc = reduceInit(op);
    for (int64_t r = 0; r < v.count; ++r) {
      int64_t rr = r, offset = base;
      for (int d = v.reduced_rank - 1; d >= 0; --d) {
        const int64_t q = rr / v.reduced_dims[d];
        offset += (rr - q * v.reduced_dims[d]) * v.reduced_strides[d];
        rr = q;
      }
      acc = reduceStep(op, acc, toFloat(x[offset]));
    }
    y[i] = fromFloat<T>(op == ReduceOp::Mean ? acc / static_cast<float>(v.count) : acc);
  }
}

void runReduce(KernelContext& ctx, ReduceOp op, int64_t axes_input_since) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes;
  bool noop = false;
  if (ctx.opset() >= axes_input_since) {
    if (const HostTensor* a = ctx.input(1)) axes = hostInts(*a);
    noop = ctx.attrInt("noop_with_empty_axes", 0) != 0;
  } else {
    axes = ctx.attrInts("axes");
  }
  if (axes.empty() && noop) {
    ctx.setOutput(0, x.reshaped(x.dims()));
    return;
  }
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) ctx.fail("axes out of range");
    mask[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  }
  const bool keepdims = ctx.attrInt("keepdims", 1) != 0;
  std::vector<int64_t> out_dims;
  ReduceView v;
  int64_t stride = 1;
  std::vector<int64_t> strides(static_cast<size_t>(rank));
  for (int64_t d = rank - 1; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = stride;
    stride *= x.dim(static_cast<size_t>(d));
  }
  bool tail = true;  // the reduced dims are exactly the last ones
  bool seen_reduced = false;
  for (int64_t d = 0; d < rank; ++d) {
    const size_t i = static_cast<size_t>(d);
    if (mask[i]) {
      seen_reduced = true;
      if (keepdims) out_dims.push_back(1);
      if (v.reduced_rank == ReduceView::kMaxRank) ctx.fail("rank too large");
      v.reduced_dims[v.reduced_rank] = x.dim(i);
      v.reduced_strides[v.reduced_rank++] = strides[i];
      v.count *= x.dim(i);
    } else {
      if (seen_reduced) tail = false;
      out_dims.push_back(x.dim(i));
      if (v.kept_rank == ReduceView::kMaxRank) ctx.fail("rank too large");
      v.kept_dims[v.kept_rank] = x.dim(i);
      v.kept_strides[v.kept_rank++] = strides[i];
      v.outputs *= x.dim(i);
    }
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), out_dims);
  if (v.outputs == 0) return;
  if (v.count == 0) ctx.fail("reduction over an empty axis has no CUDA kernel");
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (tail) {
      reduceRowsKernel<<<static_cast<unsigned>(v.outputs), threadsForRow(v.count), 0, stream()>>>(
          x.data<T>(), y.mutableData<T>(), v.count, op);
    } else {
      reduceStridedKernel<<<gridFor(v.outputs, 256), 256, 0, stream()>>>(
          x.data<T>(), y.mutableData<T>(), v, op);
    }
  });
  launched(ctx.node().opType().c_str());
}

}  // namespace

void registerNormKernels(KernelRegistry& r) {
  addCudaKernel(r, "", "Softmax", 1, 1000, [](KernelContext& ctx) { runSoftmax(ctx, false); });
  addCudaKernel(r, "", "LogSoftmax", 1, 1000, [](KernelContext& ctx) { runSoftmax(ctx, true); });
  addCudaKernel(r, "", "LayerNormalization", 17, 1000,
                [](KernelContext& ctx) { runNorm(ctx, {false, false, true}); },
                kCudaFloatTypes, 0,
                [](const Node& n) { return n.attrInt("stash_type", 1) == 1; });
  addCudaKernel(r, "fusectl", "LayerNorm", 1, 1000,
                [](KernelContext& ctx) { runNorm(ctx, {false, false, false}); });
  addCudaKernel(r, "fusectl", "RMSNorm", 1, 1000,
                [](KernelContext& ctx) { runNorm(ctx, {true, false, false}); });
  addCudaKernel(r, "fusectl", "SkipLayerNorm", 1, 1000,
                [](KernelContext& ctx) { runNorm(ctx, {false, true, false}); });
  addCudaKernel(r, "fusectl", "SkipRMSNorm", 1, 1000,
                [](KernelContext& ctx) { runNorm(ctx, {true, true, false}); });
  // Inference only, parameters of X's dtype; training outputs and mixed dtypes: CPU.
  addCudaKernel(r, "", "BatchNormalization", 1, 1000, runBatchNorm,
                kCudaFloatTypes, 0, [](const Node& n) {
                  if (n.attrInt("training_mode", 0) != 0 || n.numOutputs() > 1) return false;
                  for (size_t i = 1; i < n.numInputs(); ++i) {
                    if (!n.input(i) || n.input(i)->dtype() != n.input(0)->dtype()) return false;
                  }
                  return n.numInputs() == 5;
                });
  addCudaKernel(r, "", "ReduceMean", 1, 1000,
                [](KernelContext& ctx) { runReduce(ctx, ReduceOp::Mean, 18); },
                kCudaFloatTypes, 0b10);
  addCudaKernel(r, "", "ReduceSum", 1, 1000,
                [](KernelContext& ctx) { runReduce(ctx, ReduceOp::Sum, 13); },
                kCudaFloatTypes, 0b10);
  addCudaKernel(r, "", "ReduceMax", 1, 1000,
                [](KernelContext& ctx) { runReduce(ctx, ReduceOp::Max, 18); },
                kCudaFloatTypes, 0b10);
  addCudaKernel(r, "", "ReduceMin", 1, 1000,
                [](KernelContext& ctx) { runReduce(ctx, ReduceOp::Min, 18); },
                kCudaFloatTypes, 0b10);
}

}  // namespace fusectl::kernels::cuda
