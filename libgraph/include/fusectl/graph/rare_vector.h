// RareVector: a vector member that is empty on almost every object that has it.
//
// An Attribute holds one value of one kind, yet it has a member for every kind: floats,
// strings, tensors and subgraphs are set on a few attributes of a model, and each empty
// std::vector still costs 24 bytes on every attribute, of which a million-node graph has about
// a million (bench/README.md: fresh memory is the largest cost of a large model). A RareVector
// is one pointer, null when empty. It reads as a const std::vector<T>& wherever one is
// expected and has the part of std::vector's API that attribute code uses; T may be move-only.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "fusectl/graph/deep_copy_ptr.h"

namespace fusectl {

template <typename T>
class RareVector {
 public:
  using value_type = T;
  using size_type = size_t;
  using reference = T&;
  using const_reference = const T&;
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;

  RareVector() = default;
  explicit RareVector(std::vector<T> v) { assign(std::move(v)); }
  RareVector& operator=(std::vector<T> v) {
    assign(std::move(v));
    return *this;
  }
  // Without it `= {}` and `= {x}` would be ambiguous between the overloads above.
  RareVector& operator=(std::initializer_list<T> v) { return *this = std::vector<T>(v); }

  const std::vector<T>& vec() const { return items_ ? *items_ : emptyVector(); }
  operator const std::vector<T>&() const { return vec(); }  // NOLINT: reads as a vector

  bool empty() const { return !items_ || items_->empty(); }
  size_t size() const { return items_ ? items_->size() : 0; }
  const T* data() const { return items_ ? items_->data() : nullptr; }
  T* data() { return items_ ? items_->data() : nullptr; }

  // Value-initialized iterators compare equal, so an empty RareVector needs no storage to be
  // iterated.
  iterator begin() { return items_ ? items_->begin() : iterator(); }
  iterator end() { return items_ ? items_->end() : iterator(); }
  const_iterator begin() const { return items_ ? items_->cbegin() : const_iterator(); }
  const_iterator end() const { return items_ ? items_->cend() : const_iterator(); }

  T& operator[](size_t i) { return (*items_)[i]; }
  const T& operator[](size_t i) const { return (*items_)[i]; }
  T& front() { return items_->front(); }
  const T& front() const { return items_->front(); }
  T& back() { return items_->back(); }
  const T& back() const { return items_->back(); }

  void push_back(const T& v) { storage().push_back(v); }
  void push_back(T&& v) { storage().push_back(std::move(v)); }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    return storage().emplace_back(std::forward<Args>(args)...);
  }
  void reserve(size_t n) {
    if (n > 0) storage().reserve(n);
  }
  void resize(size_t n) {
    if (n == 0) {
      clear();
    } else {
      storage().resize(n);
    }
  }
  void resize(size_t n, const T& v) {
    if (n == 0) {
      clear();
    } else {
      storage().resize(n, v);
    }
  }
  template <typename It>
  void assign(It first, It last) {
    assign(std::vector<T>(first, last));
  }
  void clear() { items_.reset(); }
  void swap(RareVector& o) noexcept { items_.swap(o.items_); }

  friend bool operator==(const RareVector& a, const RareVector& b) { return a.vec() == b.vec(); }
  friend bool operator!=(const RareVector& a, const RareVector& b) { return !(a == b); }
  friend bool operator==(const RareVector& a, const std::vector<T>& b) { return a.vec() == b; }
  friend bool operator!=(const RareVector& a, const std::vector<T>& b) { return a.vec() != b; }
  friend bool operator==(const std::vector<T>& a, const RareVector& b) { return a == b.vec(); }
  friend bool operator!=(const std::vector<T>& a, const RareVector& b) { return a != b.vec(); }

 private:
  void assign(std::vector<T> v) {
    if (v.empty()) {
      items_.reset();
    } else {
      items_ = std::make_unique<std::vector<T>>(std::move(v));
    }
  }
  std::vector<T>& storage() {
    if (!items_) items_ = std::make_unique<std::vector<T>>();
    return *items_;
  }
  static const std::vector<T>& emptyVector() {
    static const std::vector<T> empty;
    return empty;
  }
  DeepCopyPtr<std::vector<T>> items_;  // null when empty, unless a reserve() went unused
};

}  // namespace fusectl
