// CUDA kernel tests: one model (usually one node, in ONNX textual syntax) run on the CPU
// backend and on the CUDA backend with the same random inputs, outputs compared by normalised
// mean squared error (sum (a - b)^2 / sum b^2, the CPU run as b). Without a GPU (or a build
// without CUDA) the test says so and returns: Catch2 v2 has no skip, so the reason is a WARN
// in the output and the CTest run lists the case as passed.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/cuda_backend.h"
#include "fusectl/kernels/cuda_device.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/memory_plan.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace fusectl::testing {

// True when a CUDA device is usable; otherwise WARNs the reason, for the caller to return.
inline bool cudaDeviceOrSkip() {
  if (fusectl::cuda::deviceCount() > 0) return true;
  WARN("skipped: no CUDA device (" << fusectl::cuda::describe() << ")");
  return false;
}

inline double normalizedMse(const kernels::HostTensor& got, const kernels::HostTensor& ref) {
  REQUIRE(got.dims() == ref.dims());
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double b = kernels::elementAsDouble(ref, i), a = kernels::elementAsDouble(got, i);
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den > 0 ? num / den : num;
}

struct CudaRun {
  std::vector<kernels::NamedTensor> cpu, cuda;
  kernels::ExecutionStats stats;  // the CUDA run's
};

// Runs `model` on both backends with seeded inputs (`shapes` overriding input dims); checks
// every output's dtype, dims and normalised MSE <= max_nmse, and, unless `fallbacks_allowed`,
// that no node fell back to the CPU.
inline CudaRun checkCudaAgainstCpu(const Model& model, double max_nmse,
                                   bool fallbacks_allowed = false, uint64_t seed = 7,
                                   const std::vector<std::pair<std::string, Shape>>& shapes = {}) {
  CudaRun r;
  const auto inputs = kernels::makeRandomInputs(*model.graph, seed, shapes);
  r.cpu = kernels::runModel(model, inputs);
  kernels::ExecutorOptions options;
  options.backend = &kernels::cudaBackend();
  r.cuda = kernels::runModel(model, inputs, options, &r.stats);
  REQUIRE(r.cuda.size() == r.cpu.size());
  for (size_t i = 0; i < r.cpu.size(); ++i) {
    INFO("output " << r.cpu[i].name);
    REQUIRE(r.cuda[i].tensor.dtype() == r.cpu[i].tensor.dtype());
    REQUIRE(r.cuda[i].tensor.dims() == r.cpu[i].tensor.dims());
    CHECK(normalizedMse(r.cuda[i].tensor, r.cpu[i].tensor) <= max_nmse);
  }
  if (!fallbacks_allowed) CHECK(r.stats.fallback_nodes == 0);
  return r;
}

inline CudaRun checkCudaAgainstCpu(const std::string& model_text, double max_nmse,
                                   bool fallbacks_allowed = false, uint64_t seed = 7) {
  const auto model = parseModelText(model_text, "<cuda test>");
  return checkCudaAgainstCpu(*model, max_nmse, fallbacks_allowed, seed);
}

// The CUDA registry under the CUDA device id and nothing a run needs: an executor over it only
// resolves kernels, which is where a missing (op, opset, dtype) or a declining `accepts` shows.
// Needs no GPU.
class CudaPlacement final : public kernels::Backend {
 public:
  kernels::Device device() const override { return kernels::Device::Cuda; }
  std::shared_ptr<kernels::DeviceAllocator> allocator() const override {
    return kernels::hostAllocator();
  }
  const kernels::KernelRegistry& kernels() const override { return kernels::cudaKernelRegistry(); }
  void synchronize() const override {}
  void copyToHost(void*, const void*, size_t) const override { throw std::logic_error("no run"); }
  void copyFromHost(void*, const void*, size_t) const override { throw std::logic_error("no run"); }
};

// The nodes of `model` the CUDA backend would run on the CPU (Executor::cpuFallbacks).
inline std::vector<const Node*> cudaFallbackNodes(const Model& model) {
  CudaPlacement placement;
  kernels::ExecutorOptions options;
  options.backend = &placement;
  const kernels::Executor executor(model, options);
  return executor.cpuFallbacks();
}

}  // namespace fusectl::testing
