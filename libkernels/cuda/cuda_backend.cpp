// The CUDA backend: an arena of device memory, one stream, events for node timing, pinned
// staging for host copies, and the launch counter. Host code (g++), over the CUDA runtime.
#include "fusectl/kernels/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "cuda_common.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/cuda_device.h"

namespace fusectl::kernels {

void registerCudaKernels(KernelRegistry& r);  // register_cuda.cpp

namespace cuda {
namespace {

std::atomic<uint64_t> g_launches{0};
cudaStream_t g_stream = nullptr;

}  // namespace

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky launch error so the next call reports its own
  throw Error(ErrorKind::Internal, std::string("CUDA ") + what + ": " + cudaGetErrorString(err));
}

void launched(const char* kernel) {
  check(cudaGetLastError(), kernel);
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

void countLaunches(uint64_t n) { g_launches.fetch_add(n, std::memory_order_relaxed); }
uint64_t launchCount() { return g_launches.load(std::memory_order_relaxed); }

cudaStream_t stream() { return g_stream; }

void* workspace(size_t bytes) {
  static std::mutex mu;
  static void* buffer = nullptr;
  static size_t capacity = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (bytes > capacity) {
    if (buffer) {
      check(cudaStreamSynchronize(g_stream), "synchronize before growing the workspace");
      cudaFree(buffer);
      buffer = nullptr;
      capacity = 0;
    }
    const size_t rounded = std::max<size_t>(bytes, size_t{32} << 20);
    check(cudaMalloc(&buffer, rounded), "workspace allocation");
    capacity = rounded;
  }
  return buffer;
}

std::vector<int64_t> hostInts(const HostTensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::Int64: out[i] = t.data<int64_t>()[i]; break;
      case DType::Int32: out[i] = t.data<int32_t>()[i]; break;
      default: throw Error(ErrorKind::InvalidInput, "expected an int32 or int64 tensor");
    }
  }
  return out;
}

}  // namespace cuda

namespace {

// Device memory for the executor's BufferPool: carved from large cudaMalloc'd chunks, so the
// first run of a model costs a few allocations, not one per activation, and later runs none
// (the pool reuses what it holds). Freed ranges coalesce with their neighbours.
class CudaArena final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      char* p = it->first;
      const size_t left = it->second - bytes;
      free_.erase(it);
      if (left) free_[p + bytes] = left;
      return p;
    }
    const size_t chunk = std::max(bytes, kChunk);
    void* p = nullptr;
    if (cudaMalloc(&p, chunk) != cudaSuccess) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    chunks_.push_back(p);
    if (chunk > bytes) free_[static_cast<char*>(p) + bytes] = chunk - bytes;
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    char* p = static_cast<char*>(ptr);
    auto next = free_.lower_bound(p);
    if (next != free_.end() && p + bytes == next->first) {  // merge with the range after
      bytes += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {  // and the one before (chunks are separate allocations, so
      auto prev = std::prev(next);  // ranges touching across chunks never occur in practice)
      if (prev->first + prev->second == p) {
        prev->second += bytes;
        return;
      }
    }
    free_[p] = bytes;
  }

 private:
  static constexpr size_t kChunk = size_t{256} << 20;
  std::mutex mu_;
  std::map<char*, size_t> free_;
  std::vector<void*> chunks_;  // kept until exit: device memory is released with the process
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    cuda::check(cudaSetDevice(0), "set device");
    cuda::check(cudaStreamCreateWithFlags(&cuda::g_stream, cudaStreamNonBlocking),
                "stream creation");
    arena_ = std::make_shared<CudaArena>();
  }

  Device device() const override { return Device::Cuda; }
  std::shared_ptr<DeviceAllocator> allocator() const override { return arena_; }
  const KernelRegistry& kernels() const override { return cudaKernelRegistry(); }
  void synchronize() const override {
    cuda::check(cudaStreamSynchronize(cuda::g_stream), "synchronize");
  }

  // Pageable host memory cannot be copied asynchronously; the bytes go through a pinned
  // staging buffer, in pieces of at most kStaging.
  void copyToHost(void* host_dst, const void* device_src, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(staging_mu_);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(bytes - done, kStaging);
      cuda::check(cudaMemcpyAsync(staging(), static_cast<const char*>(device_src) + done, n,
                                  cudaMemcpyDeviceToHost, cuda::g_stream),
                  "copy to host");
      synchronize();
      std::memcpy(static_cast<char*>(host_dst) + done, staging(), n);
      done += n;
    }
  }
  void copyFromHost(void* device_dst, const void* host_src, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(staging_mu_);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(bytes - done, kStaging);
      synchronize();  // the previous piece has left the staging buffer
      std::memcpy(staging(), static_cast<const char*>(host_src) + done, n);
      cuda::check(cudaMemcpyAsync(static_cast<char*>(device_dst) + done, staging(), n,
                                  cudaMemcpyHostToDevice, cuda::g_stream),
                  "copy to device");
      done += n;
    }
    synchronize();  // the contract: the destination holds the data on return
  }

  int markTime() const override {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (used_events_ == events_.size()) {
      cudaEvent_t e = nullptr;
      cuda::check(cudaEventCreate(&e), "event creation");
      events_.push_back(e);
    }
    cuda::check(cudaEventRecord(events_[used_events_], cuda::g_stream), "event record");
    return static_cast<int>(used_events_++);
  }
  double elapsedSeconds(int from, int to) const override {
    std::lock_guard<std::mutex> lock(events_mu_);
    float ms = 0.f;
    cuda::check(cudaEventElapsedTime(&ms, events_[static_cast<size_t>(from)],
                                     events_[static_cast<size_t>(to)]),
                "event timing");
    return ms * 1e-3;
  }
  void clearMarks() const override {
    std::lock_guard<std::mutex> lock(events_mu_);
    used_events_ = 0;
  }
  uint64_t launches() const override { return cuda::launchCount(); }

 private:
  static constexpr size_t kStaging = size_t{16} << 20;
  void* staging() const {
    if (!staging_) cuda::check(cudaMallocHost(&staging_, kStaging), "pinned staging allocation");
    return staging_;
  }

  std::shared_ptr<CudaArena> arena_;
  mutable std::mutex staging_mu_;
  mutable void* staging_ = nullptr;
  mutable std::mutex events_mu_;
  mutable std::vector<cudaEvent_t> events_;
  mutable size_t used_events_ = 0;
};

}  // namespace

const Backend& cudaBackend() {
  static std::once_flag once;
  static const CudaBackend* backend = nullptr;
  std::call_once(once, [] {
    if (fusectl::cuda::deviceCount() > 0) backend = new CudaBackend();  // never destroyed
  });
  if (!backend) throw Error(ErrorKind::Unsupported, "no CUDA backend: " + fusectl::cuda::describe());
  return *backend;
}

const KernelRegistry& cudaKernelRegistry() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    registerCudaKernels(*r);
    return r;
  }();
  return *registry;
}

}  // namespace fusectl::kernels
