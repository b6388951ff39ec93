#include "fusectl/support/background_prefault.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fusectl/support/temp_file_registry.h"
#endif

namespace fusectl {

#if defined(__linux__)

namespace {

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;
#endif
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;
#endif

// One madvise() call's worth: small enough that a newly queued range or heap growth is seen
// soon, large enough (a few huge pages) that the calls themselves cost nothing.
constexpr size_t kStep = size_t{8} << 20;
// Idle polling of the program break backs off from 1 ms to this.
constexpr auto kLongestPoll = std::chrono::milliseconds(16);

uintptr_t pageSize() {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

uintptr_t programBreak() { return static_cast<uintptr_t>(::syscall(SYS_brk, 0)); }

struct Range {
  uintptr_t begin;
  uintptr_t end;
  int advice;
};

// Never destroyed: the thread may still be running while static destructors run at exit.
struct Prefaulter {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Range> queue;
  std::atomic<uint64_t> done_bytes{0};
  uintptr_t heap_done = 0;  // the heap below this is faulted in (or was there at start)

  // Faults in at most one step; returns whether there was anything to do.
  bool step() {
    const uintptr_t brk = programBreak();
    if (brk < heap_done) heap_done = brk;  // the heap was trimmed
    if (brk > heap_done) {
      const uintptr_t end = std::min(brk, heap_done + kStep);
      populate(heap_done, end, MADV_POPULATE_WRITE);
      heap_done = end;
      return true;
    }
    Range r{};
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (queue.empty()) return false;
      // Round robin over the queued ranges: a graph fills its node and value chunks at the
      // same time, and each should stay ahead of its consumer.
      r = queue.front();
      queue.pop_front();
      if (r.end - r.begin > kStep) {
        queue.push_back({r.begin + kStep, r.end, r.advice});
        r.end = r.begin + kStep;
      }
    }
    populate(r.begin, r.end, r.advice);
    return true;
  }

  void populate(uintptr_t begin, uintptr_t end, int advice) {
    // ENOMEM (unmapped meanwhile), EFAULT, EPERM: the range is simply not faulted in.
    if (::madvise(reinterpret_cast<void*>(begin), end - begin, advice) == 0)
      done_bytes.fetch_add(end - begin, std::memory_order_relaxed);
  }

  void run() {
    auto poll = std::chrono::milliseconds(1);
    for (;;) {
      if (step()) {
        poll = std::chrono::milliseconds(1);
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait_for(lock, poll, [&] { return !queue.empty(); });
      poll = std::min<std::chrono::milliseconds>(poll * 2, kLongestPoll);
    }
  }

  void enqueue(const void* data, size_t size, int advice) {
    const uintptr_t page = pageSize();
    const auto begin = reinterpret_cast<uintptr_t>(data) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(data) + size + page - 1) / page * page;
    if (begin >= end) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back({begin, end, advice});
    }
    wake.notify_one();
  }
};

std::atomic<Prefaulter*> running{nullptr};

// Whether this kernel knows MADV_POPULATE_WRITE: asked on one page of our own.
bool kernelCanPopulate() {
  const uintptr_t page = pageSize();
  void* probe = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return false;
  const bool ok = ::madvise(probe, page, MADV_POPULATE_WRITE) == 0;
  ::munmap(probe, page);
  return ok;
}

}  // namespace

bool startBackgroundPrefault() {
  static std::once_flag once;
  static bool started = false;
  std::call_once(once, [] {
    if (!kernelCanPopulate()) return;
    auto* p = new Prefaulter();
    const uintptr_t page = pageSize();
    p->heap_done = (programBreak() + page - 1) / page * page;
    threadWithoutCleanupSignals([p] { p->run(); }).detach();
    running.store(p, std::memory_order_release);
    started = true;
  });
  return started;
}

void prefaultInBackground(void* data, size_t size) {
  if (Prefaulter* p = running.load(std::memory_order_acquire))
    p->enqueue(data, size, MADV_POPULATE_WRITE);
}

void prefaultMappingInBackground(const void* data, size_t size) {
  if (Prefaulter* p = running.load(std::memory_order_acquire))
    p->enqueue(data, size, MADV_POPULATE_READ);
}

uint64_t backgroundPrefaultedBytes() {
  Prefaulter* p = running.load(std::memory_order_acquire);
  return p ? p->done_bytes.load(std::memory_order_relaxed) : 0;
}

#else  // not Linux

bool startBackgroundPrefault() { return false; }
void prefaultInBackground(void*, size_t) {}
void prefaultMappingInBackground(const void*, size_t) {}
uint64_t backgroundPrefaultedBytes() { return 0; }

#endif

}  // namespace fusectl
