// RareTensor: a Tensor member that is unset on almost every object that has it.
//
// Only tensor-valued attributes (Constant's value, ConstantOfShape's value...) hold a Tensor,
// yet an 80-byte Tensor member sits in every Attribute, of which a million-node graph has about
// a million (bench/README.md: fresh memory is the largest cost of a large model). A RareTensor
// is one pointer, null while it holds a default-constructed Tensor. It reads as a
// const Tensor& wherever one is expected and forwards the Tensor calls attribute code makes;
// mutableTensor() gives the Tensor to write, created on first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/deep_copy_ptr.h"
#include "fusectl/graph/tensor.h"

namespace fusectl {

class RareTensor {
 public:
  RareTensor() = default;
  explicit RareTensor(Tensor t) : tensor_(std::make_unique<Tensor>(std::move(t))) {}
  RareTensor& operator=(Tensor t) {
    mutableTensor() = std::move(t);
    return *this;
  }

  const Tensor& tensor() const { return tensor_ ? *tensor_ : emptyTensor(); }
  operator const Tensor&() const { return tensor(); }  // NOLINT: reads as a Tensor
  Tensor& mutableTensor() {
    if (!tensor_) tensor_ = std::make_unique<Tensor>();
    return *tensor_;
  }

  DType dtype() const { return tensor().dtype(); }
  const std::vector<int64_t>& dims() const { return tensor().dims(); }
  int64_t numel() const { return tensor().numel(); }
  size_t byteSize() const { return tensor().byteSize(); }
  const uint8_t* bytes() const { return tensor().bytes(); }
  const Buffer& buffer() const { return tensor().buffer(); }
  void copyBytesTo(uint8_t* dst) const { tensor().copyBytesTo(dst); }
  uint8_t* mutableBytes() { return mutableTensor().mutableBytes(); }
  template <typename T>
  const T* data() const { return tensor().data<T>(); }
  template <typename T>
  T* mutableData() { return mutableTensor().mutableData<T>(); }
  const std::vector<std::string>& strings() const { return tensor().strings(); }
  bool identical(const Tensor& o) const { return tensor().identical(o); }
  size_t contentHash() const { return tensor().contentHash(); }
  double valueAsDouble(int64_t index) const { return tensor().valueAsDouble(index); }
  int64_t valueAsInt64(int64_t index) const { return tensor().valueAsInt64(index); }

 private:
  static const Tensor& emptyTensor() {
    static const Tensor empty;
    return empty;
  }
  DeepCopyPtr<Tensor> tensor_;  // null: a default-constructed Tensor
};

}  // namespace fusectl
