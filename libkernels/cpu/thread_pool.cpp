#include "thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace fusectl::kernels::cpu {
namespace {

thread_local bool t_inside_task = false;

// Waking a sleeping thread costs tens of microseconds, more than the regions of the small
// tensors of a real model, so workers spin this long after a region before they sleep, and
// the caller spins this long for the workers' chunks before it sleeps. The spins only shorten
// the waits: every decision is still taken under mutex_, as without them.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or kSpin has passed; true when done() held.
template <typename Done>
bool spinUntil(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpuRelax();
    }
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

class WorkerPool {
 public:
  static WorkerPool& instance() {
    // Leaked on purpose: workers must not be joined during static destruction, when a kernel
    // running in another static destructor could still want them.
    static WorkerPool* pool = new WorkerPool();
    return *pool;
  }

  // False when the pool is busy with another caller's region.
  bool tryRun(int count, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> owner(run_mutex_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    ensureWorkers(count - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      pending_.store(count, std::memory_order_relaxed);
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    wake_.notify_all();
    work();
    // The caller helped; now wait for the chunks other workers took, and for every worker to
    // leave work(), so that none reads task_ or count_ once the next region rewrites them.
    spinUntil([&] {
      return pending_.load(std::memory_order_acquire) == 0 &&
             working_.load(std::memory_order_acquire) == 0;
    });
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0 && in_work_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }

 private:
  void ensureWorkers(int wanted) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (static_cast<int>(workers_.size()) < wanted)
      workers_.emplace_back([this] { loop(); }).detach();
  }

  // Takes chunks until none is left.
  void work() {
    for (;;) {
      int i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= count_) return;
      t_inside_task = true;
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      t_inside_task = false;
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Under the mutex, so the notification cannot slip between the caller's check and wait.
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_all();
      }
    }
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      spinUntil([&] { return published_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen && task_ != nullptr; });
        seen = generation_;
        ++in_work_;
        working_.store(in_work_, std::memory_order_release);
      }
      work();
      std::lock_guard<std::mutex> lock(mutex_);
      working_.store(--in_work_, std::memory_order_release);
      if (in_work_ == 0) done_.notify_all();
    }
  }

  std::mutex run_mutex_;  // one region at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  // Written under mutex_ while no worker is in work(); read by workers that entered under it.
  int count_ = 0;
  uint64_t generation_ = 0;
  int in_work_ = 0;  // workers inside work(), guarded by mutex_
  // Mirrors of generation_ and in_work_ for the spins, written under mutex_.
  std::atomic<uint64_t> published_{0};
  std::atomic<int> working_{0};
  std::exception_ptr error_;  // the first exception a task threw, rethrown to the caller
  std::atomic<int> next_{0};
  std::atomic<int> pending_{0};
};

}  // namespace

void runOnWorkers(int count, const std::function<void(int)>& task) {
  if (count <= 0) return;
  if (count > 1 && !t_inside_task && WorkerPool::instance().tryRun(count, task)) return;
  for (int i = 0; i < count; ++i) task(i);
}

}  // namespace fusectl::kernels::cpu
