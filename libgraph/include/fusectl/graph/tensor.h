// Constant tensors: initializers, Constant values and tensor attributes.
//
// Weight bytes are the bulk of a model, so a Tensor never owns a private copy unless it is
// written to. Its bytes live in a shared, immutable Buffer: the string protobuf parsed them into
// (moved, not copied), a memory-mapped external-data file, a fresh allocation, or a recipe that
// computes them when first read. Copying a Tensor shares the buffer; mutableBytes() copies on
// write.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/rare_string.h"
#include "fusectl/graph/rare_vector.h"

namespace fusectl {

class Buffer;

// How to compute a deferred Buffer's bytes (Buffer::deferred).
class ByteRecipe {
 public:
  virtual ~ByteRecipe() = default;
  // Writes the buffer's `size` bytes to dst. Called at most once per reader that streams the
  // bytes (Buffer::copyTo) plus once when they are first read through data(); it must give the
  // same bytes every time, and may run on several threads at once.
  virtual void produce(uint8_t* dst, size_t size) const = 0;
  // The buffers produce() reads, so that a reader done with the bytes can let their pages go
  // (releaseResidentPages) as it would the pages of bytes that were never deferred.
  virtual std::vector<const Buffer*> sources() const { return {}; }
};

// Immutable bytes with a keep-alive owner (a std::string, an mmap region, a vector...). A value
// type: a Tensor holds its Buffer inline, because a million-node graph has over a million
// initializers and a separately allocated buffer object each was ~100 MB of fresh memory.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  static Buffer fromString(std::string bytes);
  static Buffer fromVector(std::vector<uint8_t> bytes);
  // Maps [offset, offset+length) of a file read-only; throws fusectl::Error on failure.
  static Buffer mapFile(const std::string& path, uint64_t offset, uint64_t length);
  // `size` bytes that `recipe` computes when data() is first called; until then they take no
  // memory. A pass that rewrites weights (fold-conv-bn scales every Conv's W) hands over a
  // recipe over the old bytes instead of new ones: on a million-node graph those are 600 MB of
  // fresh pages that a writer would only copy to the file once.
  static Buffer deferred(size_t size, std::shared_ptr<const ByteRecipe> recipe);
  // [offset, offset+length) of this buffer, sharing its owner (not for deferred bytes).
  Buffer slice(size_t offset, size_t length) const;

  // Computes deferred bytes on first use (thread-safe) and keeps them.
  const uint8_t* data() const { return data_ || size_ == 0 ? data_ : deferredData(); }
  size_t size() const { return size_; }
  // Keeps data() valid while held.
  const std::shared_ptr<const void>& owner() const { return owner_; }
  // Deferred and not computed yet.
  bool isPending() const;
  // Copies the bytes to dst; bytes still pending are produced there and not kept (for writers
  // that stream each tensor once).
  void copyTo(uint8_t* dst) const;

 private:
  friend class Tensor;
  friend bool releaseResidentPages(const Buffer& buffer);  // buffer_residency.h
  struct Deferred;  // tensor.cpp: the recipe and, once computed, the bytes; owned by owner_
  const uint8_t* deferredData() const;
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  // Set for private heap bytes (fromString/fromVector): a Tensor that holds the only reference
  // to the owner may then write in place instead of copying on every mutableBytes().
  bool writable_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> dims);  // zero-filled
  Tensor(DType dtype, std::vector<int64_t> dims, Buffer bytes);
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
  size_t byteSize() const { return bytes_.size(); }

  // Little-endian, densely packed, row-major bytes (ONNX raw_data layout).
  const uint8_t* bytes() const { return bytes_.data(); }
  const Buffer& buffer() const { return bytes_; }
  // Writes byteSize() bytes to dst without computing and keeping pending deferred bytes.
  void copyBytesTo(uint8_t* dst) const;
  uint8_t* mutableBytes();  // detaches from a shared buffer first
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(bytes()); }
  template <typename T>
  T* mutableData() { return reinterpret_cast<T*>(mutableBytes()); }

  const std::vector<std::string>& strings() const { return strings_.vec(); }  // DType::String

  // Same dtype, dims and bytes (or strings).
  bool identical(const Tensor& o) const;
  // A hash of what identical() compares: identical tensors hash alike (for bucketing
  // candidates before comparing them).
  size_t contentHash() const;
  // A hash of dtype, dims and three 64-byte windows of the bytes (first, middle, last), or of
  // the strings: tensors whose sample hashes differ are not identical(); equal ones may still
  // differ. Reads 192 bytes where contentHash reads all (dedup-initializers hashes in full only
  // the tensors whose samples collide).
  size_t sampleHash() const;
  // Value as float64, for int/float dtypes; index into the flattened tensor.
  double valueAsDouble(int64_t index) const;
  int64_t valueAsInt64(int64_t index) const;

  RareString doc_string;

 private:
  DType dtype_ = DType::Undefined;
  std::vector<int64_t> dims_;
  Buffer bytes_;
  RareVector<std::string> strings_;  // out of line: initializers are almost never strings
};

}  // namespace fusectl
