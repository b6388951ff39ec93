// Constant tensors: initializers, Constant values and tensor attributes.
//
// Weight bytes are the bulk of a model, so a Tensor never owns a private copy unless it is
// written to. Its bytes live in a shared, immutable Buffer: the string protobuf parsed them into
// (moved, not copied), a memory-mapped external-data file, or a fresh allocation. Copying a
// Tensor shares the buffer; mutableBytes() copies on write.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/rare_string.h"

namespace fusectl {

// Immutable bytes with a keep-alive owner (a std::string, an mmap region, a vector...).
class Buffer {
 public:
  Buffer(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  static std::shared_ptr<const Buffer> fromString(std::string bytes);
  static std::shared_ptr<const Buffer> fromVector(std::vector<uint8_t> bytes);
  // Maps [offset, offset+length) of a file read-only; throws fusectl::Error on failure.
  static std::shared_ptr<const Buffer> mapFile(const std::string& path, uint64_t offset,
                                               uint64_t length);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class Tensor;
  std::shared_ptr<const void> owner_;
  const uint8_t* data_;
  size_t size_;
  // Set for private heap bytes (fromString/fromVector): a Tensor that is the Buffer's only
  // holder may then write in place instead of copying on every mutableBytes().
  bool writable_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> dims);  // zero-filled
  Tensor(DType dtype, std::vector<int64_t> dims, std::shared_ptr<const Buffer> bytes);
  static Tensor ofStrings(std::vector<int64_t> dims, std::vector<std::string> values);

  template <typename T>
  static Tensor fromValues(DType dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
    std::vector<uint8_t> raw(values.size() * sizeof(T));
    if (!raw.empty()) std::memcpy(raw.data(), values.data(), raw.size());
    return Tensor(dtype, std::move(dims), Buffer::fromVector(std::move(raw)));
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t numel() const;  // 1 for a scalar
  size_t byteSize() const { return bytes_ ? bytes_->size() : 0; }

  // Little-endian, densely packed, row-major bytes (ONNX raw_data layout).
  const uint8_t* bytes() const { return bytes_ ? bytes_->data() : nullptr; }
  const std::shared_ptr<const Buffer>& buffer() const { return bytes_; }
  uint8_t* mutableBytes();  // detaches from a shared buffer first
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(bytes()); }
  template <typename T>
  T* mutableData() { return reinterpret_cast<T*>(mutableBytes()); }

  const std::vector<std::string>& strings() const { return strings_; }  // DType::String only

  // Same dtype, dims and bytes (or strings).
  bool identical(const Tensor& o) const;
  // A hash of what identical() compares: identical tensors hash alike (for bucketing
  // candidates before comparing them).
  size_t contentHash() const;
  // Value as float64, for int/float dtypes; index into the flattened tensor.
  double valueAsDouble(int64_t index) const;
  int64_t valueAsInt64(int64_t index) const;

  RareString doc_string;

 private:
  DType dtype_ = DType::Undefined;
  std::vector<int64_t> dims_;
  std::shared_ptr<const Buffer> bytes_;
  std::vector<std::string> strings_;
};

}  // namespace fusectl
