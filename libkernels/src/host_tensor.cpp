// HostTensor storage: owned (64-byte aligned, zero-filled) or borrowed with a keep-alive.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "fusectl/graph/error.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

namespace {

constexpr size_t kAlignment = 64;

int64_t checkedNumel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throwInvalid("tensor dimension " + std::to_string(d) + " is negative");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      throwInvalid("tensor element count overflows int64");
    }
    n *= d;
  }
  return n;
}

// Zero-filled, aligned, never null (a zero-byte tensor still gets a valid pointer).
std::shared_ptr<void> allocateAligned(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? kAlignment : rounded);
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace

HostTensor::HostTensor(DType dtype, std::vector<int64_t> dims)
    : dtype_(dtype), dims_(std::move(dims)) {
  const int64_t n = checkedNumel(dims_);
  if (dtype_ == DType::String) {
    strings_.resize(static_cast<size_t>(n));
    return;
  }
  auto storage = allocateAligned(dtypeStorageBytes(dtype_, n));
  data_ = storage.get();
  storage_ = std::move(storage);
}

HostTensor HostTensor::borrow(DType dtype, std::vector<int64_t> dims, const void* data,
                              std::shared_ptr<const void> keep_alive) {
  HostTensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  checkedNumel(t.dims_);
  t.data_ = const_cast<void*>(data);
  t.storage_ = std::move(keep_alive);
  return t;
}

HostTensor HostTensor::fromTensor(const Tensor& src) {
  if (src.dtype() == DType::String) {
    HostTensor t(DType::String, src.dims());
    t.strings_ = src.strings();
    return t;
  }
  const size_t expected = dtypeStorageBytes(src.dtype(), src.numel());
  if (src.byteSize() < expected) {
    throwInvalid("tensor of " + std::string(dtypeName(src.dtype())) + " with " +
                 std::to_string(src.numel()) + " elements has only " +
                 std::to_string(src.byteSize()) + " bytes");
  }
  if (!borrowable(src)) {
    HostTensor t(src.dtype(), src.dims());
    if (expected == src.byteSize()) {
      if (expected) src.copyBytesTo(static_cast<uint8_t*>(t.data_));
    } else {
      std::memcpy(t.data_, src.bytes(), expected);
    }
    t.identity_ = identityOf(src);
    return t;
  }
  return borrow(src.dtype(), src.dims(), src.bytes(), src.buffer().owner());
}

// Kernels read typed pointers: an empty or misaligned buffer (e.g. raw_data at an odd offset of
// a mapped file) is copied instead of borrowed, and so are bytes a pass deferred (fold-conv-bn's
// scaled weights), which a copy computes without the model keeping them.
bool HostTensor::borrowable(const Tensor& src) {
  if (src.dtype() == DType::String || src.buffer().isPending()) return false;
  const uint8_t* bytes = src.bytes();
  const size_t align = std::max<size_t>(dtypeSize(src.dtype()), 1);
  return bytes != nullptr && reinterpret_cast<uintptr_t>(bytes) % align == 0;
}

const void* HostTensor::identityOf(const Tensor& src) {
  if (src.buffer().isPending()) return src.buffer().owner().get();
  return src.bytes();
}

Tensor HostTensor::toTensor() const {
  if (dtype_ == DType::String) return Tensor::ofStrings(dims_, strings_);
  if (channels_last_) throwInternal("HostTensor::toTensor: the tensor is laid out channels-last");
  const size_t n = byteSize();
  std::vector<uint8_t> bytes(n);
  if (n) std::memcpy(bytes.data(), data_, n);
  return Tensor(dtype_, dims_, Buffer::fromVector(std::move(bytes)));
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

size_t HostTensor::byteSize() const {
  if (dtype_ == DType::String || dtype_ == DType::Undefined) return 0;
  return dtypeStorageBytes(dtype_, numel());
}

HostTensor HostTensor::reshaped(std::vector<int64_t> dims) const {
  if (checkedNumel(dims) != numel()) {
    throwInternal("HostTensor::reshaped: element count changes from " + std::to_string(numel()) +
                  " to " + std::to_string(checkedNumel(dims)));
  }
  if (channels_last_) throwInternal("HostTensor::reshaped: the tensor is laid out channels-last");
  HostTensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

HostTensor HostTensor::released(const HostTensor& t) {
  if (t.kind_ != Kind::Tensor || t.dtype_ == DType::String) {
    throwInternal("HostTensor::released: only a tensor of bytes can be released");
  }
  return released(t.dtype_, t.dims_, t.identity());
}

HostTensor HostTensor::released(DType dtype, std::vector<int64_t> dims, const void* identity) {
  if (dtype == DType::String || !identity) {
    throwInternal("HostTensor::released: needs bytes that name it");
  }
  HostTensor r;
  r.dtype_ = dtype;
  r.dims_ = std::move(dims);
  checkedNumel(r.dims_);
  r.identity_ = identity;
  return r;
}

HostTensor OutputAllocator::wrap(DType dtype, std::vector<int64_t> dims, void* data,
                                 std::shared_ptr<const void> storage) {
  HostTensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.data_ = data;
  t.storage_ = std::move(storage);
  if (dtype == DType::String) t.strings_.resize(static_cast<size_t>(t.numel()));
  return t;
}

std::string formatDims(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace fusectl::kernels
