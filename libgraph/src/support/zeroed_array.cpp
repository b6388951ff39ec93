#include "fusectl/support/zeroed_array.h"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "fusectl/support/background_prefault.h"

namespace fusectl::zeroed_memory {

namespace {
// From this size on, memory is mapped, as a whole number of huge pages; below it, it comes from
// the heap. Mapping never falls back to the heap (it throws), so the size says which it was.
constexpr size_t kHugePage = size_t{2} << 20;

bool isMapped(size_t bytes) {
#if defined(__linux__)
  return bytes >= kHugePage;
#else
  (void)bytes;
  return false;
#endif
}

size_t mappedBytes(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
}  // namespace

void* allocate(size_t bytes) {
#if defined(__linux__)
  if (isMapped(bytes)) {
    const size_t rounded = mappedBytes(bytes);
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
    prefaultInBackground(p, rounded);
    return p;
  }
#endif
  void* p = std::calloc(1, bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

void release(void* p, size_t bytes) {
#if defined(__linux__)
  if (isMapped(bytes)) {
    ::munmap(p, mappedBytes(bytes));
    return;
  }
#endif
  std::free(p);
}

}  // namespace fusectl::zeroed_memory
