// What the executor needs from a device: its memory, its kernels, synchronisation, and copies
// to and from the host.
//
// The executor (executor.h) runs each node with the backend's kernel for it, found in
// kernels() by (domain, op, opset, kernelDType(node), device()). A node the device has no kernel
// for runs on the CPU instead: its inputs are copied to host buffers, the CPU kernel runs, and
// its outputs stay on the host until a device kernel reads them (then they are copied over).
// Graph inputs and initializers start on the host; graph outputs are returned on the host.
// ExecutionStats counts the fallbacks and copies.
//
// Tensors on a device are HostTensor objects whose pointers are the device's: only that
// device's kernels and the copy functions below may touch their bytes. The CPU backend is the
// default; its memory is the host's, so it never copies anything.
//
// Adding a device: an allocator for its memory (memory_plan.h's DeviceAllocator; the executor
// pools what it hands out), a KernelRegistry holding its kernels under its Device id, and the
// copies. A backend object must outlive every executor that uses it.
#pragma once

#include <cstddef>
#include <memory>

#include "fusectl/kernels/kernel.h"
#include "fusectl/kernels/memory_plan.h"

namespace fusectl::kernels {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // Whether CPU kernels can read this device's memory as it is; then nothing is ever copied.
  bool sharesHostMemory() const { return device() == Device::Cpu; }

  // Where the device's buffers come from; each executor pools them in a BufferPool of its own.
  virtual std::shared_ptr<DeviceAllocator> allocator() const = 0;
  // The registry holding this device's kernels (entries for other devices there are ignored).
  virtual const KernelRegistry& kernels() const = 0;
  // Returns once all work queued on the device has finished; the executor calls it at the end
  // of each run, so its wall time covers the device's work.
  virtual void synchronize() const = 0;
  // Synchronous copies of `bytes` bytes: they return once the destination holds the data, after
  // the device's earlier work on the source. Regions do not overlap.
  virtual void copyToHost(void* host_dst, const void* device_src, size_t bytes) const = 0;
  virtual void copyFromHost(void* device_dst, const void* host_src, size_t bytes) const = 0;

  // Device-side timing of the nodes of a profiled run. markTime() queues a timestamp on the
  // device after the work queued before it and returns its index (-1: the device keeps none,
  // and the executor times nodes with the host clock); after synchronize(), elapsedSeconds(a,
  // b) is the device time between marks a and b. clearMarks() forgets them (once per run).
  virtual int markTime() const { return -1; }
  virtual double elapsedSeconds(int from, int to) const { return 0; }
  virtual void clearMarks() const {}
  // Kernel launches queued on the device since the backend was created (a library call such
  // as a cuBLASLt matmul counts one); 0 on devices that do not count them.
  virtual uint64_t launches() const { return 0; }

  // Recorded runs (CUDA Graphs): the device work of one whole run queued once while the device
  // records it, then replayed with a single launch per run. The executor records a run when
  // ExecutorOptions::capture_graph asks for it (executor.h says when it may). Between
  // beginCapture() and endCapture() the device records what is queued instead of running it;
  // synchronize() and the synchronous copies above then fail (throw), which is how a run that
  // cannot be recorded shows. endCapture() returns the recording ready to replay, or throws;
  // abortCapture() ends a recording the executor gave up and never throws. The defaults: no
  // recording (canCapture() false, the rest throw Unsupported).
  class RecordedRun {
   public:
    virtual ~RecordedRun() = default;
  };
  virtual bool canCapture() const { return false; }
  virtual void beginCapture() const;
  virtual std::unique_ptr<RecordedRun> endCapture() const;
  virtual void abortCapture() const noexcept {}
  virtual void replay(const RecordedRun& run) const;
  // Page-locked host memory, and copies between it and device memory queued in order with the
  // device's work (no synchronisation): how a recorded run's inputs and outputs travel, inside
  // the recording. Both copies may be recorded.
  virtual std::shared_ptr<void> allocatePinned(size_t bytes) const;
  virtual void copyFromPinnedAsync(void* device_dst, const void* pinned_src, size_t bytes) const;
  virtual void copyToPinnedAsync(void* pinned_dst, const void* device_src, size_t bytes) const;
};

// The CPU: host memory, the given registry's Device::Cpu kernels, no synchronisation, and
// copies that are plain memcpy (never needed by the executor).
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const KernelRegistry& kernels = KernelRegistry::global());

  Device device() const override { return Device::Cpu; }
  std::shared_ptr<DeviceAllocator> allocator() const override;
  const KernelRegistry& kernels() const override { return kernels_; }
  void synchronize() const override {}
  void copyToHost(void* host_dst, const void* device_src, size_t bytes) const override;
  void copyFromHost(void* device_dst, const void* host_src, size_t bytes) const override;

 private:
  const KernelRegistry& kernels_;
};

// The CPU backend over KernelRegistry::global().
const Backend& cpuBackend();

}  // namespace fusectl::kernels
