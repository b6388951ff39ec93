// ai.onnx.ml Binarizer and ArrayFeatureExtractor (opset 1), the two feature-preprocessing ops
// of classic-ML pipelines (scikit-learn exports) that the ONNX node suite tests.
//   Binarizer:              Y = X > threshold ? 1 : 0, in X's type
//   ArrayFeatureExtractor:  Z[..., j] = X[..., Y[j]], Y indices into X's last axis; a 1-D X
//                           gives [1, len(Y)] (as ONNX Runtime shapes it)
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void binarizerKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const double threshold = ctx.attrFloat("threshold", 0.0f);
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::Float: {
      const float* in = x.data<float>();
      float* out = y.mutableData<float>();
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] > threshold ? 1.0f : 0.0f;
      return;
    }
    case DType::Double: {
      const double* in = x.data<double>();
      double* out = y.mutableData<double>();
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] > threshold ? 1.0 : 0.0;
      return;
    }
    case DType::Int64: {
      const int64_t* in = x.data<int64_t>();
      int64_t* out = y.mutableData<int64_t>();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(in[i]) > threshold ? 1 : 0;
      return;
    }
    case DType::Int32: {
      const int32_t* in = x.data<int32_t>();
      int32_t* out = y.mutableData<int32_t>();
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] > threshold ? 1 : 0;
      return;
    }
    default:
      ctx.fail(
          fmt::format("X must be float, double, int64 or int32, got {}", dtypeName(x.dtype())));
  }
}

void arrayFeatureExtractorKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& idx = ctx.requireInput(1);
  if (x.rank() == 0) ctx.fail("X must have rank >= 1");
  if (idx.dtype() != DType::Int64) ctx.fail("Y must be an int64 tensor");
  const int64_t last = x.dims().back(), count = idx.numel();
  const int64_t* ind = idx.data<int64_t>();
  for (int64_t j = 0; j < count; ++j)
    if (ind[j] < 0 || ind[j] >= last)
      ctx.fail(fmt::format("index {} is out of range for a last axis of {}", ind[j], last));
  std::vector<int64_t> dims = x.dims();
  if (dims.size() == 1) dims.insert(dims.begin(), 1);
  dims.back() = count;
  const int64_t rows = x.numel() / std::max<int64_t>(last, 1);
  HostTensor& z = ctx.allocateOutput(0, x.dtype(), dims);
  if (x.dtype() == DType::String) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < count; ++j)
        z.strings()[static_cast<size_t>(r * count + j)] =
            x.strings()[static_cast<size_t>(r * last + ind[j])];
    return;
  }
  if (dtypeIsSubByte(x.dtype())) ctx.fail("packed sub-byte element types are not supported");
  const size_t es = dtypeSize(x.dtype());
  const auto* in = static_cast<const uint8_t*>(x.raw());
  auto* out = static_cast<uint8_t*>(z.mutableRaw());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(out + (r * count + j) * es, in + (r * last + ind[j]) * es, es);
}

}  // namespace
}  // namespace cpu

void registerMlFeatureKernels(KernelRegistry& r) {
  r.add({"ai.onnx.ml", "Binarizer", 1, 1000, cpu::binarizerKernel});
  r.add({"ai.onnx.ml", "ArrayFeatureExtractor", 1, 1000, cpu::arrayFeatureExtractorKernel});
}

}  // namespace fusectl::kernels
