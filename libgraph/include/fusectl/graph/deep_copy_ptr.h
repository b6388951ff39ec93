// DeepCopyPtr<T>: an owning pointer whose copies copy the object (a null one copies as null).
//
// The storage of RareString, RareTensor and RareVector: members that are unset on almost every
// object that has them are one pointer, yet their owners copy like values.
#pragma once

#include <memory>
#include <utility>

namespace fusectl {

template <typename T>
class DeepCopyPtr {
 public:
  DeepCopyPtr() = default;
  DeepCopyPtr(std::unique_ptr<T> p) : p_(std::move(p)) {}  // NOLINT: from make_unique
  DeepCopyPtr(const DeepCopyPtr& o) : p_(copyOf(o)) {}
  DeepCopyPtr(DeepCopyPtr&&) noexcept = default;
  DeepCopyPtr& operator=(const DeepCopyPtr& o) {
    if (this != &o) p_ = copyOf(o);
    return *this;
  }
  DeepCopyPtr& operator=(DeepCopyPtr&&) noexcept = default;

  explicit operator bool() const { return p_ != nullptr; }
  T& operator*() const { return *p_; }
  T* operator->() const { return p_.get(); }
  void reset() { p_.reset(); }
  void swap(DeepCopyPtr& o) noexcept { p_.swap(o.p_); }

 private:
  static std::unique_ptr<T> copyOf(const DeepCopyPtr& o) {
    return o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
  }
  std::unique_ptr<T> p_;
};

}  // namespace fusectl
