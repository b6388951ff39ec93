// DynamicQuantizeLinear: uint8 quantization with the scale and zero point computed from the
// data. The range is widened to include 0: scale = (max(0, max x) - min(0, min x)) / 255,
// zero_point = saturate(round(-min / scale)), y = saturate(round(x / scale) + zero_point), with
// rounding half to even as the spec's reference does.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void dynamicQuantizeLinearKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("x must be a float tensor");
  FloatView xv(x);
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < xv.size(); ++i) {
    lo = std::min(lo, xv[i]);
    hi = std::max(hi, xv[i]);
  }
  const float scale = (hi - lo) / 255.0f;
  // An infinite range makes -lo / scale inf / inf: NaN, zero point 0.
  const float zp =
      scale == 0 ? 0.0f : static_cast<float>(saturateQuantized(std::nearbyint(-lo / scale), 0, 255));
  HostTensor& y = ctx.allocateOutput(0, DType::UInt8, x.dims());
  for (int64_t i = 0; i < xv.size(); ++i) {
    const float q = scale == 0 ? zp : std::nearbyint(xv[i] / scale) + zp;
    y.mutableData<uint8_t>()[i] = static_cast<uint8_t>(saturateQuantized(q, 0, 255));
  }
  ctx.allocateOutput(1, DType::Float, {}).mutableData<float>()[0] = scale;
  ctx.allocateOutput(2, DType::UInt8, {}).mutableData<uint8_t>()[0] = static_cast<uint8_t>(zp);
}

}  // namespace
}  // namespace cpu

void registerDynamicQuantizeKernels(KernelRegistry& r) {
  r.add({"", "DynamicQuantizeLinear", 11, 1000, cpu::dynamicQuantizeLinearKernel});
}

}  // namespace fusectl::kernels
