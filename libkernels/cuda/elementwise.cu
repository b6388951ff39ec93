// Elementwise CUDA kernels: activations and other unary ops, broadcasting binary arithmetic,
// Where, Cast, SwiGLU and SwiGLUPacked, and the epilogue of the fused GEMM and convolution
// kernels. Each computes in float what the CPU kernel of the same op computes (elementwise.cpp,
// swiglu.cpp, epilogue.h), so the two agree to rounding; float16 and bfloat16 tensors are
// converted on load and store.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../cpu/compute_common.h"
#include "cuda_common.h"
#include "cuda_device_util.cuh"
#include "fusectl/graph/clip_bounds.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"

namespace fusectl::kernels::cuda {
namespace {

constexpr int kThreads = 256;

enum class UnaryOp : int {
  Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Neg, Abs, Erf, Reciprocal, Floor, Ceil, Sin, Cos,
  Softplus, Softsign, HardSwish, Gelu, GeluTanh, QuickGelu, LeakyRelu, Elu, Selu, HardSigmoid,
  Clip,
};

__device__ __forceinline__ float unary(UnaryOp op, float x, float a, float b) {
  switch (op) {
    case UnaryOp::Relu: return x > 0.f ? x : 0.f;
    case UnaryOp::Sigmoid: return sigmoidf(x);
    case UnaryOp::Tanh: return tanhf(x);
    case UnaryOp::Exp: return expf(x);
    case UnaryOp::Log: return logf(x);
    case UnaryOp::Sqrt: return sqrtf(x);
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return fabsf(x);
    case UnaryOp::Erf: return erff(x);
    case UnaryOp::Reciprocal: return 1.f / x;
    case UnaryOp::Floor: return floorf(x);
    case UnaryOp::Ceil: return ceilf(x);
    case UnaryOp::Sin: return sinf(x);
    case UnaryOp::Cos: return cosf(x);
    case UnaryOp::Softplus: return x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case UnaryOp::Softsign: return x / (1.f + fabsf(x));
    case UnaryOp::HardSwish: return x * fminf(fmaxf(x * (1.f / 6.f) + 0.5f, 0.f), 1.f);
    case UnaryOp::Gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case UnaryOp::GeluTanh:
      return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case UnaryOp::QuickGelu: return x * sigmoidf(1.702f * x);
    case UnaryOp::LeakyRelu: return x < 0.f ? a * x : x;
    case UnaryOp::Elu: return x < 0.f ? a * (expf(x) - 1.f) : x;
    case UnaryOp::Selu: return x <= 0.f ? b * (a * expf(x) - a) : b * x;
    case UnaryOp::HardSigmoid: return fminf(fmaxf(a * x + b, 0.f), 1.f);
    case UnaryOp::Clip: return fminf(fmaxf(x, a), b);
  }
  return x;
}

template <typename T>
__global__ void unaryKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, UnaryOp op,
                            float a, float b) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = fromFloat<T>(unary(op, toFloat(x[i]), a, b));
  }
}

enum class BinaryOp : int { Add, Sub, Mul, Div, Pow, Max, Min, PRelu };

__device__ __forceinline__ float binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return powf(a, b);
    case BinaryOp::Max: return (isnan(a) || isnan(b)) ? NAN : (a < b ? b : a);
    case BinaryOp::Min: return (isnan(a) || isnan(b)) ? NAN : (b < a ? b : a);
    case BinaryOp::PRelu: return a < 0.f ? a * b : a;
  }
  return a;
}

// Same shapes: flat indices.
template <typename T>
__global__ void binarySameKernel(const T* __restrict__ a, const T* __restrict__ b,
                                 T* __restrict__ y, int64_t n, BinaryOp op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = fromFloat<T>(binary(op, toFloat(a[i]), toFloat(b[i])));
  }
}

template <typename T>
__global__ void binaryBroadcastKernel(const T* __restrict__ a, const T* __restrict__ b,
                                      T* __restrict__ y, BroadcastIndex index, BinaryOp op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < index.numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float va = toFloat(a[broadcastOffset(index, 0, i)]);
    const float vb = toFloat(b[broadcastOffset(index, 1, i)]);
    y[i] = fromFloat<T>(binary(op, va, vb));
  }
}

template <typename T>
__global__ void whereKernel(const bool* __restrict__ c, const T* __restrict__ x,
                            const T* __restrict__ z, T* __restrict__ y, BroadcastIndex index) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < index.numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = c[broadcastOffset(index, 0, i)] ? x[broadcastOffset(index, 1, i)]
                                            : z[broadcastOffset(index, 2, i)];
  }
}

template <typename T>
__global__ void swigluKernel(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ y,
                             int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = toFloat(g[i]);
    y[i] = fromFloat<T>(v * sigmoidf(v) * toFloat(u[i]));
  }
}

// X = [rows, 2I], each row its gate then its up projection; Y = [rows, I].
template <typename T>
__global__ void swigluPackedKernel(const T* __restrict__ x, T* __restrict__ y, int64_t inter,
                                   int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / inter, j = i - r * inter;
    const T* g = x + r * 2 * inter;
    const float v = toFloat(g[j]);
    y[i] = fromFloat<T>(v * sigmoidf(v) * toFloat(g[inter + j]));
  }
}

template <typename From, typename To>
__global__ void castKernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = toFloat(x[i]);
    if constexpr (std::is_same_v<To, __half> || std::is_same_v<To, __nv_bfloat16> ||
                  std::is_same_v<To, float>) {
      y[i] = fromFloat<To>(v);
    } else if constexpr (std::is_same_v<To, bool>) {
      y[i] = v != 0.f;
    } else {
      y[i] = static_cast<To>(v);
    }
  }
}

template <typename T, typename B>
__global__ void epilogueKernel(T* __restrict__ y, int64_t rows, int64_t cols,
                               const B* __restrict__ bias, bool bias_per_row, int64_t period,
                               const T* __restrict__ residual, int activation, float alpha,
                               float beta) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = toFloat(y[i]);
    if (bias) {
      const int64_t r = i / cols;
      v += toFloat(bias[bias_per_row ? r % period : i - r * cols]);
    }
    if (residual) v += toFloat(residual[i]);
    y[i] = fromFloat<T>(activate(v, activation, alpha, beta));
  }
}

void runUnary(KernelContext& ctx, UnaryOp op, float a = 0.f, float b = 0.f) {
  const HostTensor& x = ctx.requireInput(0);
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  const int64_t n = x.numel();
  if (n == 0) return;
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    unaryKernel<<<gridFor(n, kThreads), kThreads, 0, stream()>>>(x.data<T>(), y.mutableData<T>(),
                                                                   n, op, a, b);
  });
  launched(ctx.node().opType().c_str());
}

template <typename T>
void launchBinary(const HostTensor& a, const HostTensor& b, HostTensor& y,
                  const BroadcastIndex& index, BinaryOp op) {
  if (index.contiguous(0) && index.contiguous(1)) {
    binarySameKernel<<<gridFor(index.numel, kThreads), kThreads, 0, stream()>>>(
        a.data<T>(), b.data<T>(), y.mutableData<T>(), index.numel, op);
  } else {
    binaryBroadcastKernel<<<gridFor(index.numel, kThreads), kThreads, 0, stream()>>>(
        a.data<T>(), b.data<T>(), y.mutableData<T>(), index, op);
  }
}

void runBinary(KernelContext& ctx, BinaryOp op) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  if (a.dtype() != b.dtype()) ctx.fail("inputs of different dtypes");
  std::vector<int64_t> dims;
  BroadcastIndex index;
  try {
    index = BroadcastIndex::make({&a.dims(), &b.dims()}, dims);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  HostTensor& y = ctx.allocateOutput(0, a.dtype(), dims);
  if (index.numel == 0) return;
  withFloatType(a.dtype(), [&](auto tag) { launchBinary<decltype(tag)>(a, b, y, index, op); });
  launched(ctx.node().opType().c_str());
}

void runWhere(KernelContext& ctx) {
  const HostTensor& c = ctx.requireInput(0);
  const HostTensor& x = ctx.requireInput(1);
  const HostTensor& z = ctx.requireInput(2);
  if (c.dtype() != DType::Bool || x.dtype() != z.dtype()) ctx.fail("Where takes bool, T, T");
  std::vector<int64_t> dims;
  BroadcastIndex index;
  try {
    index = BroadcastIndex::make({&c.dims(), &x.dims(), &z.dims()}, dims);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), dims);
  if (index.numel == 0) return;
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    whereKernel<<<gridFor(index.numel, kThreads), kThreads, 0, stream()>>>(
        c.data<bool>(), x.data<T>(), z.data<T>(), y.mutableData<T>(), index);
  });
  launched("Where");
}

void runSwiGLU(KernelContext& ctx) {
  const HostTensor& g = ctx.requireInput(0);
  const HostTensor& u = ctx.requireInput(1);
  if (g.dims() != u.dims() || g.dtype() != u.dtype()) ctx.fail("G and U differ in shape or dtype");
  HostTensor& y = ctx.allocateOutput(0, g.dtype(), g.dims());
  const int64_t n = g.numel();
  if (n == 0) return;
  withFloatType(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    swigluKernel<<<gridFor(n, kThreads), kThreads, 0, stream()>>>(g.data<T>(), u.data<T>(),
                                                                    y.mutableData<T>(), n);
  });
  launched("SwiGLU");
}

void runSwiGLUPacked(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> dims = cpu::swigluPackedOutputDims(ctx, x);
  const int64_t inter = dims.back();
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), dims);
  const int64_t n = y.numel();
  if (n == 0) return;
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    swigluPackedKernel<<<gridFor(n, kThreads), kThreads, 0, stream()>>>(
        x.data<T>(), y.mutableData<T>(), inter, n);
  });
  launched("SwiGLUPacked");
}

template <typename From>
void castFrom(KernelContext& ctx, const HostTensor& x, DType to) {
  HostTensor& y = ctx.allocateOutput(0, to, x.dims());
  const int64_t n = x.numel();
  if (n == 0) return;
  const unsigned grid = gridFor(n, kThreads);
  const From* in = x.data<From>();
  switch (to) {
    case DType::Float: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<float>(), n); break;
    case DType::Float16: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<__half>(), n); break;
    case DType::BFloat16: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<__nv_bfloat16>(), n); break;
    case DType::Int64: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<int64_t>(), n); break;
    case DType::Int32: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<int32_t>(), n); break;
    case DType::Int8: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<int8_t>(), n); break;
    case DType::UInt8: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<uint8_t>(), n); break;
    case DType::Bool: castKernel<<<grid, kThreads, 0, stream()>>>(in, y.mutableData<bool>(), n); break;
    default: ctx.fail("Cast to " + std::string(dtypeName(to)) + " has no CUDA kernel");
  }
  launched("Cast");
}

void runCast(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const DType to = ctx.node().opType() == "CastLike"
                       ? ctx.requireInput(1).dtype()
                       : static_cast<DType>(ctx.attrInt("to", 0));
  if (to == x.dtype()) {
    ctx.setOutput(0, x.reshaped(x.dims()));
    return;
  }
  withFloatType(x.dtype(), [&](auto tag) { castFrom<decltype(tag)>(ctx, x, to); });
}

// Clip's bounds: attributes before opset 11, optional scalar inputs (on the host) after.
void runClip(KernelContext& ctx) {
  const bool attribute_form = ctx.opset() < 11;
  const std::pair<double, double> start =
      clipBoundsBeforeInputs(ctx.node(), ctx.requireInput(0).dtype(), attribute_form);
  float lo = static_cast<float>(start.first), hi = static_cast<float>(start.second);
  if (!attribute_form) {
    for (size_t i = 1; i <= 2; ++i) {
      const HostTensor* t = ctx.input(i);
      if (!t || t->numel() == 0) continue;
      if (t->numel() != 1) ctx.fail("Clip bounds must be scalars");
      float v;
      switch (t->dtype()) {
        case DType::Float: v = t->data<float>()[0]; break;
        case DType::Float16: v = halfToFloat(t->data<uint16_t>()[0]); break;
        case DType::BFloat16: v = bfloat16ToFloat(t->data<uint16_t>()[0]); break;
        default: ctx.fail("Clip bounds must be float, float16 or bfloat16");
      }
      (i == 1 ? lo : hi) = v;
    }
  }
  runUnary(ctx, UnaryOp::Clip, lo, hi);
}

void runGelu(KernelContext& ctx) {
  const std::string approx = ctx.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh") ctx.fail("unknown approximate '" + approx + "'");
  runUnary(ctx, approx == "tanh" ? UnaryOp::GeluTanh : UnaryOp::Gelu);
}

void addUnary(KernelRegistry& r, const char* op, UnaryOp code) {
  addCudaKernel(r, "", op, 1, 1000, [code](KernelContext& ctx) { runUnary(ctx, code); });
}

}  // namespace

void applyEpilogue(void* y, DType dtype, int64_t rows, int64_t cols, const DeviceEpilogue& e) {
  const int64_t n = rows * cols;
  if (n == 0 || e.empty()) return;
  const int act = static_cast<int>(e.activation);
  const unsigned grid = gridFor(n, kThreads);
  // The bias is either float (a float32 bias folded into a half GEMM keeps its precision) or
  // of Y's own dtype; the residual always has Y's dtype.
  const bool bias_same_as_y = e.bias && e.bias_dtype == dtype;
  withFloatType(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<T*>(y);
    const auto* res = static_cast<const T*>(e.residual);
    if (bias_same_as_y) {
      epilogueKernel<<<grid, kThreads, 0, stream()>>>(out, rows, cols,
                                                      static_cast<const T*>(e.bias),
                                                      e.bias_per_row, e.bias_period, res, act,
                                                      e.alpha, e.beta);
    } else {
      if (e.bias && e.bias_dtype != DType::Float)
        throw Error(ErrorKind::Unsupported,
                    "epilogue bias of dtype " + std::string(dtypeName(e.bias_dtype)) +
                        " with Y of dtype " + std::string(dtypeName(dtype)));
      epilogueKernel<<<grid, kThreads, 0, stream()>>>(out, rows, cols,
                                                      static_cast<const float*>(e.bias),
                                                      e.bias_per_row, e.bias_period, res, act,
                                                      e.alpha, e.beta);
    }
  });
  launched("epilogue");
}

void registerElementwiseKernels(KernelRegistry& r) {
  addUnary(r, "Relu", UnaryOp::Relu);
  addUnary(r, "Sigmoid", UnaryOp::Sigmoid);
  addUnary(r, "Tanh", UnaryOp::Tanh);
  addUnary(r, "Exp", UnaryOp::Exp);
  addUnary(r, "Log", UnaryOp::Log);
  addUnary(r, "Sqrt", UnaryOp::Sqrt);
  addUnary(r, "Neg", UnaryOp::Neg);
  addUnary(r, "Abs", UnaryOp::Abs);
  addUnary(r, "Erf", UnaryOp::Erf);
  addUnary(r, "Reciprocal", UnaryOp::Reciprocal);
  addUnary(r, "Floor", UnaryOp::Floor);
  addUnary(r, "Ceil", UnaryOp::Ceil);
  addUnary(r, "Sin", UnaryOp::Sin);
  addUnary(r, "Cos", UnaryOp::Cos);
  addUnary(r, "Softplus", UnaryOp::Softplus);
  addUnary(r, "Softsign", UnaryOp::Softsign);
  addUnary(r, "HardSwish", UnaryOp::HardSwish);
  addCudaKernel(r, "", "Gelu", 20, 1000, runGelu);
  addCudaKernel(r, "fusectl", "Gelu", 1, 1000,
                [](KernelContext& ctx) { runUnary(ctx, UnaryOp::Gelu); });
  addCudaKernel(r, "fusectl", "GeluTanh", 1, 1000,
                [](KernelContext& ctx) { runUnary(ctx, UnaryOp::GeluTanh); });
  addCudaKernel(r, "fusectl", "QuickGelu", 1, 1000,
                [](KernelContext& ctx) { runUnary(ctx, UnaryOp::QuickGelu); });
  addCudaKernel(r, "", "LeakyRelu", 1, 1000, [](KernelContext& ctx) {
    runUnary(ctx, UnaryOp::LeakyRelu, ctx.attrFloat("alpha", 0.01f));
  });
  addCudaKernel(r, "", "Elu", 1, 1000, [](KernelContext& ctx) {
    runUnary(ctx, UnaryOp::Elu, ctx.attrFloat("alpha", 1.f));
  });
  addCudaKernel(r, "", "Selu", 1, 1000, [](KernelContext& ctx) {
    runUnary(ctx, UnaryOp::Selu, ctx.attrFloat("alpha", 1.67326319217681884765625f),
             ctx.attrFloat("gamma", 1.05070102214813232421875f));
  });
  addCudaKernel(r, "", "HardSigmoid", 1, 1000, [](KernelContext& ctx) {
    runUnary(ctx, UnaryOp::HardSigmoid, ctx.attrFloat("alpha", 0.2f), ctx.attrFloat("beta", 0.5f));
  });
  addCudaKernel(r, "", "Clip", 1, 1000, runClip, kCudaFloatTypes, 0b110);

  const std::pair<const char*, BinaryOp> binaries[] = {
      {"Add", BinaryOp::Add}, {"Sub", BinaryOp::Sub}, {"Mul", BinaryOp::Mul},
      {"Div", BinaryOp::Div}, {"Pow", BinaryOp::Pow}, {"PRelu", BinaryOp::PRelu}};
  // Operands of two dtypes (Pow's integer exponent) stay on the CPU.
  const auto same_dtypes = [](const Node& n) {
    return n.numInputs() == 2 && n.input(0) && n.input(1) &&
           n.input(0)->dtype() == n.input(1)->dtype();
  };
  for (const auto& [op, code] : binaries) {
    const BinaryOp c = code;
    addCudaKernel(r, "", op, 7, 1000, [c](KernelContext& ctx) { runBinary(ctx, c); },
                  kCudaFloatTypes, 0, same_dtypes);
  }
  // Max and Min are variadic; the CUDA kernel takes the common two-input form (others: CPU).
  for (const auto& [op, code] : {std::pair<const char*, BinaryOp>{"Max", BinaryOp::Max},
                                 {"Min", BinaryOp::Min}}) {
    const BinaryOp c = code;
    addCudaKernel(r, "", op, 8, 1000, [c](KernelContext& ctx) { runBinary(ctx, c); },
                  kCudaFloatTypes, 0, same_dtypes);
  }
  // Where on integers (shape arithmetic) and casts to other dtypes stay on the CPU.
  addCudaKernel(r, "", "Where", 9, 1000, runWhere, {DType::Bool}, 0, [](const Node& n) {
    return n.numInputs() == 3 && n.input(1) && cudaFloatType(n.input(1)->dtype());
  });
  addCudaKernel(r, "fusectl", "SwiGLU", 1, 1000, runSwiGLU);
  addCudaKernel(r, "fusectl", "SwiGLUPacked", 1, 1000, runSwiGLUPacked);
  const auto castable = [](DType t) {
    return cudaFloatType(t) || t == DType::Int64 || t == DType::Int32 || t == DType::Int8 ||
           t == DType::UInt8 || t == DType::Bool;
  };
  addCudaKernel(r, "", "Cast", 6, 1000, runCast, kCudaFloatTypes, 0,
                [castable](const Node& n) {
                  return castable(static_cast<DType>(n.attrInt("to", 0)));
                });
  addCudaKernel(r, "", "CastLike", 15, 1000, runCast, kCudaFloatTypes, 0,
                [castable](const Node& n) {
                  return n.numInputs() == 2 && n.input(1) && castable(n.input(1)->dtype());
                });
  addCudaKernel(r, "", "Identity", 1, 1000, [](KernelContext& ctx) {
    const HostTensor& x = ctx.requireInput(0);
    ctx.setOutput(0, x.reshaped(x.dims()));
  });
}

}  // namespace fusectl::kernels::cuda
