// Device helpers shared by the .cu kernels: loads and stores of float or half as float, the
// epilogue activations (the same formulas as epilogue.h), warp and block reductions, and the
// broadcast walk of cuda_common.h's BroadcastIndex.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <utility>

#include "cuda_common.h"
#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {

// Storage types: float, __half (float16) and __nv_bfloat16 (bfloat16); kernels compute in float.
__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T fromFloat(float v);
template <> __device__ __forceinline__ float fromFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Host side: calls fn(T{}) with the storage type of `t` (float, __half, __nv_bfloat16), so a
// kernel launch is written once for all three; throws fusectl::Error(Unsupported) for others.
template <typename Fn> decltype(auto) withFloatType(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float: return std::forward<Fn>(fn)(float{});
    case DType::Float16: return std::forward<Fn>(fn)(__half{});
    case DType::BFloat16: return std::forward<Fn>(fn)(__nv_bfloat16{});
    default:
      throw Error(ErrorKind::Unsupported,
                  "CUDA kernels take float, float16 and bfloat16, not " +
                      std::string(dtypeName(t)));
  }
}

__device__ __forceinline__ float sigmoidf(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  const float e = expf(x);
  return e / (1.f + e);
}

// Activation::* as an int (the enum is uint8_t-based and host-side).
__device__ __forceinline__ float activate(float y, int activation, float alpha, float beta) {
  switch (static_cast<Activation>(activation)) {
    case Activation::None: return y;
    case Activation::Relu: return y > 0.f ? y : 0.f;
    case Activation::Clip: return fminf(fmaxf(y, alpha), beta);
    case Activation::LeakyRelu: return y < 0.f ? alpha * y : y;
    case Activation::Sigmoid: return sigmoidf(y);
    case Activation::HardSigmoid: return fminf(fmaxf(alpha * y + beta, 0.f), 1.f);
    case Activation::HardSwish: return y * fminf(fmaxf(y * (1.f / 6.f) + 0.5f, 0.f), 1.f);
    case Activation::Silu: return y * sigmoidf(y);
    case Activation::Gelu: return 0.5f * y * (1.f + erff(y * 0.70710678118654752f));
    case Activation::Tanh: return tanhf(y);
    case Activation::GeluTanh:
      return 0.5f * y * (1.f + tanhf(0.7978845608028654f * (y + 0.044715f * y * y * y)));
  }
  return y;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float blockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : 0.f;
  return warpSum(v);
}
__device__ __forceinline__ float blockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warpMax(v);
}

// The flat index into input `k` of output element `i`.
__device__ __forceinline__ int64_t broadcastOffset(const BroadcastIndex& b, int k, int64_t i) {
  int64_t offset = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    const int64_t dim = b.out_dims[d];
    const int64_t q = i / dim;
    offset += (i - q * dim) * b.strides[k][d];
    i = q;
  }
  return offset;
}

}  // namespace fusectl::kernels::cuda
