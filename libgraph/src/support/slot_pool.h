// SlotPool<T>: fixed-size slots for a graph's Nodes and Values, carved from large chunks of
// zeroed memory (zeroed_array.h). Private to libgraph; graph.cpp's object pools use it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "fusectl/support/zeroed_array.h"

namespace fusectl {

// Memory for a pool chunk. Chunks of megabytes are mapped directly, marked for transparent huge
// pages and faulted in by the background prefault thread (zeroed_array.h): a million-node graph
// otherwise takes a page fault per 4 KiB of nodes and values, and page faults were a quarter of
// load time.
class Chunk {
 public:
  explicit Chunk(size_t bytes) : bytes_(bytes), data_(zeroed_memory::allocate(bytes)) {}
  Chunk(Chunk&& o) noexcept : bytes_(o.bytes_), data_(std::exchange(o.data_, nullptr)) {}
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
  Chunk& operator=(Chunk&&) = delete;
  ~Chunk() {
    if (data_) zeroed_memory::release(data_, bytes_);
  }
  void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_;
};

// Fixed-size slots handed out from chunks that grow geometrically. A million-node import makes
// a few dozen allocations here instead of two million, and objects of one graph sit close
// together in memory.
template <typename T>
class SlotPool {
 public:
  void* allocate() {
    if (!free_.empty()) {
      void* p = free_.back();
      free_.pop_back();
      return p;
    }
    if (used_ == capacity_) grow(next_chunk_);
    return static_cast<Slot*>(chunks_.back().data()) + used_++;
  }
  void release(void* p) { free_.push_back(p); }
  // Makes the next chunk hold at least n more objects.
  void reserve(size_t n) {
    if (capacity_ - used_ < n) grow(n);
  }

 private:
  struct alignas(T) Slot {
    unsigned char bytes[sizeof(T)];
  };
  void grow(size_t n) {
    chunks_.emplace_back(n * sizeof(Slot));
    capacity_ = n;
    used_ = 0;
    next_chunk_ = std::min<size_t>(next_chunk_ * 2, size_t{1} << 16);
  }
  std::vector<Chunk> chunks_;
  std::vector<void*> free_;
  size_t used_ = 0;
  size_t capacity_ = 0;
  size_t next_chunk_ = 64;
};

}  // namespace fusectl
