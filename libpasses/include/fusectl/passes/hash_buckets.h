// HashBuckets: a flat multimap from a precomputed 64-bit hash to items, for passes that bucket
// a million candidates (dedup-initializers, eliminate-common-subexpressions) and for the
// Rewriter's set of erased nodes.
//
// std::unordered_map<size_t, std::vector<T*>> costs two allocations per distinct key and a
// pointer chase per lookup; on a 1M-node graph that was most of those passes' time. Here every
// entry lives in one open-addressing array (linear probing, load factor <= 1/2) sized once from
// the expected count, so inserting and probing allocate nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fusectl/support/zeroed_array.h"

namespace fusectl::passes {

template <typename T>
class HashBuckets {
 public:
  explicit HashBuckets(size_t expected) {
    size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    slots_ = ZeroedArray<Slot>(capacity);
    mask_ = capacity - 1;
  }

  // Calls fn(item) for items inserted with this hash until fn returns true; returns that item,
  // or nullptr. The order of the calls is unspecified: callers keep at most one item per
  // equivalence class, so at most one can answer true.
  template <typename Fn>
  T* find(uint64_t hash, Fn&& fn) const {
    for (size_t i = start(hash);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.item) return nullptr;
      if (s.hash == hash && fn(s.item)) return s.item;
    }
  }

  void insert(uint64_t hash, T* item) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(hash, item);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    T* item = nullptr;
  };

  size_t start(uint64_t hash) const {
    // std::hash mixes and pointers can have weak low bits: spread them first.
    return static_cast<size_t>((hash * 0x9e3779b97f4a7c15ULL) >> 20) & mask_;
  }

  void place(uint64_t hash, T* item) {
    size_t i = start(hash);
    while (slots_[i].item) i = (i + 1) & mask_;
    slots_[i] = {hash, item};
    ++size_;
  }

  void grow() {
    ZeroedArray<Slot> old(std::move(slots_));
    slots_ = ZeroedArray<Slot>(old.size() * 2);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.item) place(s.hash, s.item);
  }

  ZeroedArray<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace fusectl::passes
