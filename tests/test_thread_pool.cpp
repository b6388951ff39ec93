// The kernels' persistent worker pool: every chunk runs exactly once, nested and concurrent
// regions neither deadlock nor lose work, and a task's exception reaches the caller.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../libkernels/cpu/compute_common.h"
#include "../libkernels/cpu/thread_pool.h"

using fusectl::kernels::cpu::parallelFor;
using fusectl::kernels::cpu::runOnWorkers;

TEST_CASE("worker pool runs every chunk exactly once, repeatedly", "[threads]") {
  for (int round = 0; round < 200; ++round) {
    const int count = 1 + round % 7;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    runOnWorkers(count, [&](int i) { hits[static_cast<size_t>(i)].fetch_add(1); });
    for (auto& h : hits) REQUIRE(h.load() == 1);
  }
}

TEST_CASE("parallelFor covers every index once without overlap", "[threads]") {
  for (int64_t n : {1, 2, 3, 17, 1000, 100003}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    parallelFor(n, 4, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& s : seen) REQUIRE(s.load() == 1);
  }
}

TEST_CASE("nested regions run inline instead of deadlocking", "[threads]") {
  std::atomic<int> inner{0};
  runOnWorkers(4, [&](int) { runOnWorkers(3, [&](int) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 12);
}

TEST_CASE("regions from several threads at once all complete", "[threads]") {
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 100; ++r) runOnWorkers(3, [&](int i) { total.fetch_add(i + 1); });
    });
  }
  for (auto& t : callers) t.join();
  CHECK(total.load() == 4L * 100 * (1 + 2 + 3));
}

TEST_CASE("a task's exception reaches the caller and the pool keeps working", "[threads]") {
  auto failing = [](int i) {
    if (i == 2) throw std::runtime_error("chunk 2 failed");
  };
  CHECK_THROWS_WITH(runOnWorkers(4, failing), "chunk 2 failed");
  std::atomic<int> after{0};
  runOnWorkers(4, [&](int) { after.fetch_add(1); });
  CHECK(after.load() == 4);
}
