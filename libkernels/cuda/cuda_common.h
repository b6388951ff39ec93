// What every CUDA kernel file shares: the backend's stream, error checks that throw
// fusectl::Error, the launch counter `profile` reports, the epilogue kernel of FusedGemm,
// FusedMatMul and FusedConv, and the broadcast index that elementwise kernels walk.
//
// One CUDA backend serves the process (cuda_backend.cpp): its stream, cuBLASLt and cuDNN
// handles and workspace are created on first use and live until exit. Kernels queue work on
// stream() and never synchronise; the executor synchronises once at the end of a run, and a
// copy to the host (Backend::copyToHost) waits for the work before it.
//
// Host code only here, so the g++-compiled files (cuBLASLt, cuDNN, registration) and the nvcc
// ones include it alike; device helpers are in cuda_device_util.cuh.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <initializer_list>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fusectl/graph/fused_ops.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels::cuda {

// The stream of the process's CUDA backend (created with the backend, non-blocking).
cudaStream_t stream();
// A device workspace of at least `bytes` that stays valid until the next call with more bytes
// (cuBLASLt's and cuDNN's scratch): one allocation that grows, never one per node.
void* workspace(size_t bytes);

// Throws fusectl::Error(Internal) "CUDA <what>: <cudaGetErrorString>" unless err is success.
void check(cudaError_t err, const char* what);
// Checks the launch just made (cudaGetLastError) and counts it as one kernel launch.
void launched(const char* kernel);
// Counts `n` kernel launches made by a library (cuBLASLt, cuDNN: one per call).
void countLaunches(uint64_t n = 1);
// Kernel launches since the process started; the backend reports the difference per run.
uint64_t launchCount();

// The dtypes the CUDA kernels take (each registers the ones it handles); others run on the
// CPU (the executor's fallback).
inline bool cudaFloatType(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16;
}

// Blocks of `threads` covering n elements, capped so that a grid-stride loop covers the rest.
inline unsigned gridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// Output-to-input index mapping for up to kMaxInputs inputs broadcast (multidirectionally, as
// ONNX's binary ops) to one output of at most kMaxRank dims. Dims are merged where every
// input is contiguous across them, so the common cases (same shape; a per-channel or
// per-column bias) come out rank 1 or 2.
struct BroadcastIndex {
  static constexpr int kMaxRank = 6;
  static constexpr int kMaxInputs = 8;
  int rank = 0;
  int num_inputs = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t strides[kMaxInputs][kMaxRank] = {};  // element strides; 0 along a broadcast dim
  int64_t numel = 1;

  // Throws fusectl::Error(InvalidInput) when the shapes do not broadcast or the merged rank
  // exceeds kMaxRank. `out_dims` receives the broadcast shape.
  static BroadcastIndex make(const std::vector<const std::vector<int64_t>*>& inputs,
                             std::vector<int64_t>& out_dims);
  // Whether input i is read at the same flat index as the output (no broadcast along any dim).
  bool contiguous(int i) const;
};

// Y = act(Y + bias + residual) in place over a rows x cols row-major Y (the epilogue contract
// of epilogue.h on the device). bias is per row (Conv: per output channel, with `inner` =
// spatial size per channel, rows = N*C) or per column; either pointer may be null. float or
// half Y; the bias float, or half (bias_dtype) with a half Y; the residual of Y's dtype.
struct DeviceEpilogue {
  const void* bias = nullptr;
  DType bias_dtype = DType::Float;
  bool bias_per_row = false;
  int64_t bias_period = 0;  // per-row bias: index = row % bias_period (channels)
  const void* residual = nullptr;
  Activation activation = Activation::None;
  float alpha = 0.f, beta = 0.f;
  bool empty() const { return !bias && !residual && activation == Activation::None; }
};
void applyEpilogue(void* y, DType dtype, int64_t rows, int64_t cols, const DeviceEpilogue& e);

// The float types the CUDA kernels register: what cudaFloatType() accepts.
inline const std::initializer_list<DType> kCudaFloatTypes = {DType::Float, DType::Float16,
                                                             DType::BFloat16};

// Registers `fn` as the CUDA kernel of (domain, op) for opsets [since, until] and each of
// `dtypes` (kernelDType of the node); `host_inputs` and `accepts` as KernelInfo's.
inline void addCudaKernel(KernelRegistry& r, const std::string& domain, const std::string& op,
                          int64_t since, int64_t until, KernelFn fn,
                          std::initializer_list<DType> dtypes = kCudaFloatTypes,
                          uint64_t host_inputs = 0,
                          std::function<bool(const Node&)> accepts = {}) {
  for (DType t : dtypes) {
    KernelInfo info;
    info.domain = domain;
    info.op_type = op;
    info.since_opset = since;
    info.until_opset = until;
    info.fn = fn;
    info.dtype = t;
    info.device = Device::Cuda;
    info.host_inputs = host_inputs;
    info.accepts = accepts;
    r.add(std::move(info));
  }
}

// Reads a small host-side integer tensor (a shape, axes, starts...) that the executor brought
// to the host for this kernel (KernelInfo::host_inputs).
std::vector<int64_t> hostInts(const HostTensor& t);

}  // namespace fusectl::kernels::cuda
