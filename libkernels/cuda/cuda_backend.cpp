// The CUDA backend: an arena of device memory, one stream, events for node timing, pinned
// staging for host copies, the launch counter and recorded runs (CUDA Graphs). Host code
// (g++), over the CUDA runtime.
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
  // A grown workspace never frees the smaller one: a recorded run (a CUDA Graph) holds the
  // address it was recorded with, and replays it after any other executor grew the workspace.
  static std::vector<void*> outgrown;
  if (bytes > capacity) {
    if (buffer) outgrown.push_back(buffer);
    const size_t rounded = std::max<size_t>(bytes, size_t{32} << 20);
    void* grown = nullptr;
    check(cudaMalloc(&grown, rounded), "workspace allocation");
    buffer = grown;
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

// A recorded run: the CUDA Graph captured from the stream and its executable instance.
class CudaRecordedRun final : public Backend::RecordedRun {
 public:
  CudaRecordedRun(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~CudaRecordedRun() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
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

  // Relaxed capture: host-side set-up a kernel may still do while queueing (an allocation
  // served by the arena) is allowed and not recorded; a synchronisation or a synchronous copy
  // fails the capture, which the executor reports as its reason not to record.
  bool canCapture() const override { return true; }
  void beginCapture() const override {
    cuda::check(cudaStreamBeginCapture(cuda::g_stream, cudaStreamCaptureModeRelaxed),
                "begin recording");
  }
  std::unique_ptr<RecordedRun> endCapture() const override {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(cuda::g_stream, &graph);
    if (ended != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      cuda::check(ended, "end recording");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) {
      cudaGraphDestroy(graph);
      cuda::check(made, "graph instantiation");
    }
    return std::make_unique<CudaRecordedRun>(graph, exec);
  }
  void abortCapture() const noexcept override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cuda::g_stream, &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(cuda::g_stream, &graph);
      if (graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // the capture's error, so the next call reports its own
  }
  void replay(const RecordedRun& run) const override {
    cuda::check(cudaGraphLaunch(static_cast<const CudaRecordedRun&>(run).exec(), cuda::g_stream),
                "graph launch");
  }
  std::shared_ptr<void> allocatePinned(size_t bytes) const override {
    void* p = nullptr;
    cuda::check(cudaMallocHost(&p, bytes), "pinned allocation");
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  }
  void copyFromPinnedAsync(void* device_dst, const void* pinned_src, size_t bytes) const override {
    cuda::check(cudaMemcpyAsync(device_dst, pinned_src, bytes, cudaMemcpyHostToDevice,
                                cuda::g_stream),
                "copy to device");
  }
  void copyToPinnedAsync(void* pinned_dst, const void* device_src, size_t bytes) const override {
    cuda::check(cudaMemcpyAsync(pinned_dst, device_src, bytes, cudaMemcpyDeviceToHost,
                                cuda::g_stream),
                "copy to host");
  }

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
