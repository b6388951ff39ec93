// NameTable<T>: the graph's name -> Value/Node index, an open-addressing hash table.
//
// A graph of a million nodes holds millions of names. std::unordered_map spends three cache
// misses per lookup (bucket, node, key) and an allocation per entry; this table keeps
// (hash, pointer) pairs in one array, compares the stored hash before touching the object's
// name, and deletes by shifting back (no tombstones), so lookups stay short under edits.
// Keys are not stored: an entry's key is its object's name(), which must not change while the
// object is in the table (rename = erase, change, insert).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string_view>

#include "fusectl/support/zeroed_array.h"

namespace fusectl {

template <typename T>
class NameTable {
 public:
  T* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = hashOf(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.ptr) return nullptr;
      if (s.hash == h && s.ptr->name() == key) return s.ptr;
    }
  }
  bool contains(std::string_view key) const { return find(key) != nullptr; }

  // Starts loading the slot where `key` is or would go. A million-name table lives far outside
  // the caches, so each find or insert waits for memory; a caller that knows the next names
  // (an importer reading ahead) lets those waits overlap with its work.
  void prefetch(std::string_view key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hashOf(key) & mask_]);
  }

  // Adds p under p->name(); false (and no change) when that name is present.
  bool insert(T* p) {
    if ((size_ + 1) * 10 > slots_.size() * 7) rehash(std::max<size_t>(16, slots_.size() * 2));
    const std::string_view key = p->name();
    const uint64_t h = hashOf(key);
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.ptr) break;
      if (s.hash == h && s.ptr->name() == key) return false;
    }
    slots_[i] = {h, p};
    ++size_;
    return true;
  }

  // Removes the entry named `key`, if any.
  bool erase(std::string_view key) {
    if (slots_.empty()) return false;
    const uint64_t h = hashOf(key);
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.ptr) return false;
      if (s.hash == h && s.ptr->name() == key) break;
    }
    removeAt(i);
    return true;
  }

  // Removes p's own entry. The probe compares pointers, so it reads no other object's name:
  // erasing a million values otherwise waits on a million cache misses into other values.
  // False when p is not in the table (none or another object holds its name).
  bool eraseEntryOf(const T* p) {
    if (slots_.empty()) return false;
    size_t i = hashOf(p->name()) & mask_;
    for (;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.ptr) return false;
      if (s.ptr == p) break;
    }
    removeAt(i);
    return true;
  }

  size_t size() const { return size_; }
  void reserve(size_t n) {
    size_t want = 16;
    while (want * 7 < n * 10) want *= 2;
    if (want > slots_.size()) rehash(want);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    T* ptr = nullptr;
  };
  static uint64_t hashOf(std::string_view key) { return std::hash<std::string_view>{}(key); }

  void removeAt(size_t i) {
    // Backward shift: pull later entries of the probe run into the hole when their home slot
    // does not lie cyclically in (hole, j].
    for (size_t j = (i + 1) & mask_; slots_[j].ptr; j = (j + 1) & mask_) {
      const size_t home = slots_[j].hash & mask_;
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
  }

  void rehash(size_t capacity) {  // capacity: a power of two
    ZeroedArray<Slot> old(std::move(slots_));
    slots_ = ZeroedArray<Slot>(capacity);
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (!s.ptr) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].ptr) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  ZeroedArray<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace fusectl
