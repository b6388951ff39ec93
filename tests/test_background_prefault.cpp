// The background prefault thread: queued ranges and heap growth become resident without this
// thread touching them, and no byte of memory changes. Residency is read with mincore().
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "fusectl/support/background_prefault.h"
#include "fusectl/support/zeroed_array.h"

#if defined(__linux__)
namespace {

size_t residentPages(const void* data, size_t size) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> flags((size + page - 1) / page);
  if (::mincore(const_cast<void*>(data), size, flags.data()) != 0) return 0;
  size_t resident = 0;
  for (unsigned char f : flags) resident += f & 1;
  return resident;
}

// Waits up to 20 s (the thread faults in at 0.3 GB/s and more) for a condition to hold.
template <class Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return condition();
}

bool becomesResident(const void* data, size_t size) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return eventually([&] { return residentPages(data, size) == size / page; });
}

}  // namespace

TEST_CASE("background prefault makes queued memory and heap growth resident",
          "[graph][prefault]") {
  if (!fusectl::startBackgroundPrefault()) {
    WARN("skipped: this kernel has no MADV_POPULATE_WRITE (Linux before 5.14)");
    return;
  }
  CHECK(fusectl::startBackgroundPrefault());  // once per process; later calls are no-ops
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

  SECTION("a queued range, its written bytes kept") {
    const size_t size = size_t{24} << 20;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    auto* bytes = static_cast<unsigned char*>(p);
    std::memset(bytes, 0xAB, page);  // one page already written before the prefault
    REQUIRE(residentPages(p, size) < size / page);
    const uint64_t before = fusectl::backgroundPrefaultedBytes();
    fusectl::prefaultInBackground(p, size);
    REQUIRE(becomesResident(p, size));
    // The pages of a step are resident before madvise() returns and the step is counted.
    CHECK(eventually([&] { return fusectl::backgroundPrefaultedBytes() >= before + size; }));
    for (size_t i = 0; i < page; ++i) REQUIRE(bytes[i] == 0xAB);
    for (size_t i = page; i < size; i += 4099) REQUIRE(bytes[i] == 0);
    ::munmap(p, size);
  }

  SECTION("heap growth, seen without being queued") {
    const size_t size = size_t{16} << 20;
    void* top = ::sbrk(0);
    void* grown = ::sbrk(static_cast<intptr_t>(size));
    REQUIRE(grown != reinterpret_cast<void*>(-1));
    REQUIRE(grown == top);
    REQUIRE(becomesResident(grown, size));
  }

  SECTION("a range unmapped before its turn is skipped") {
    const size_t size = size_t{8} << 20;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    fusectl::prefaultInBackground(p, size);
    ::munmap(p, size);
    // The thread carries on with later ranges.
    void* q = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(q != MAP_FAILED);
    fusectl::prefaultInBackground(q, size);
    REQUIRE(becomesResident(q, size));
    ::munmap(q, size);
  }
}
#endif

TEST_CASE("ZeroedArray starts all zero, small or mapped, and copies and moves its slots",
          "[graph][prefault]") {
  struct Slot {
    uint64_t hash;
    const void* ptr;
  };
  for (size_t n : {size_t{2}, size_t{100}, size_t{1} << 18}) {  // 32 B .. 4 MiB (mapped)
    INFO("slots " << n);
    fusectl::ZeroedArray<Slot> a(n);
    REQUIRE(a.size() == n);
    for (const Slot& s : a) REQUIRE((s.hash == 0 && s.ptr == nullptr));
    a[n - 1] = {42, &a};
    a[0].hash = 7;
    fusectl::ZeroedArray<Slot> copy(a);
    CHECK(copy[n - 1].hash == 42);
    CHECK(copy[n - 1].ptr == &a);
    CHECK(copy[0].hash == 7);
    fusectl::ZeroedArray<Slot> moved(std::move(a));
    CHECK(a.empty());
    CHECK(moved[n - 1].hash == 42);
    moved = fusectl::ZeroedArray<Slot>(3);
    CHECK(moved.size() == 3);
    CHECK(moved[2].hash == 0);
  }
  CHECK(fusectl::ZeroedArray<Slot>().empty());
}
