#include "fusectl/graph/zeroed_array.h"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "fusectl/graph/background_prefault.h"

namespace fusectl::zeroed_memory {

namespace {
// From this size on, memory is mapped: a whole number of huge pages.
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

void* allocate(size_t bytes, bool* mapped) {
#if defined(__linux__)
  if (bytes >= kHugePage) {
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
    prefaultInBackground(p, rounded);
    *mapped = true;
    return p;
  }
#endif
  void* p = std::calloc(1, bytes);
  if (!p) throw std::bad_alloc();
  *mapped = false;
  return p;
}

void release(void* p, size_t bytes, bool mapped) {
#if defined(__linux__)
  if (mapped) {
    ::munmap(p, (bytes + kHugePage - 1) / kHugePage * kHugePage);
    return;
  }
#else
  (void)bytes;
  (void)mapped;
#endif
  std::free(p);
}

}  // namespace fusectl::zeroed_memory
