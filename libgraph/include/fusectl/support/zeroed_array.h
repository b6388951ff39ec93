// ZeroedArray<T>: a fixed-size array that starts all zero bytes, for hash-table slots.
//
// A million-entry table is tens of MB. std::vector would write every byte of it on the
// calling thread before the first insert, and on the benchmark VMs first writes to fresh memory
// cost 2-3 s per GB. Arrays of 2 MiB and more come straight from mmap instead: the kernel's
// pages are zero already, they are marked for transparent huge pages, and the background
// prefault thread (background_prefault.h) faults them in while the caller starts using them.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace fusectl {

namespace zeroed_memory {
// `bytes` zero bytes. Throws std::bad_alloc. Release with the same `bytes`: the size alone
// decides whether the memory was mapped or came from the heap.
void* allocate(size_t bytes);
void release(void* p, size_t bytes);
}  // namespace zeroed_memory

template <typename T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "ZeroedArray holds plain slots whose all-zero bytes are their empty value");

 public:
  ZeroedArray() = default;
  explicit ZeroedArray(size_t n) : size_(n) {
    if (n) data_ = static_cast<T*>(zeroed_memory::allocate(n * sizeof(T)));
  }
  ZeroedArray(const ZeroedArray& o) : ZeroedArray(o.size_) {
    if (size_) std::memcpy(static_cast<void*>(data_), o.data_, size_ * sizeof(T));
  }
  ZeroedArray(ZeroedArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ZeroedArray& operator=(ZeroedArray o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~ZeroedArray() {
    if (data_) zeroed_memory::release(data_, size_ * sizeof(T));
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fusectl
