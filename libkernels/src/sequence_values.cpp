// HostTensor's sequence and empty-optional kinds (kernel.h says why they share the type).
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

namespace {
const std::vector<HostTensor>& noItems() {
  static const std::vector<HostTensor> none;
  return none;
}
}  // namespace

HostTensor HostTensor::sequence(DType element_dtype, std::vector<HostTensor> items) {
  HostTensor t;
  t.kind_ = Kind::Sequence;
  t.dtype_ = element_dtype == DType::Undefined ? DType::Float : element_dtype;
  t.dims_ = {0};
  t.items_ = std::make_shared<const std::vector<HostTensor>>(std::move(items));
  return t;
}

HostTensor HostTensor::emptyOptional(DType element_dtype, bool of_sequence) {
  HostTensor t;
  t.kind_ = Kind::EmptyOptional;
  t.dtype_ = element_dtype == DType::Undefined ? DType::Float : element_dtype;
  t.dims_ = {0};
  t.optional_of_sequence_ = of_sequence;
  return t;
}

const std::vector<HostTensor>& HostTensor::items() const { return items_ ? *items_ : noItems(); }

}  // namespace fusectl::kernels
