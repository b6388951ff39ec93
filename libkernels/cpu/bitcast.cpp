// BitCast (opset 26): the input's bytes reinterpreted as another element type of the same width.
// No value is converted, so the kernel is a copy; the only legality check is the bit width,
// because a width change would change the element count the output dims promise.
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void bitCastKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t to_attr = ctx.attrInt("to", 0);
  if (!dtypeIsKnown(static_cast<int32_t>(to_attr)))
    ctx.fail(fmt::format("attribute 'to' = {} is not an ONNX element type", to_attr));
  const DType to = static_cast<DType>(to_attr);
  if (to == DType::String || x.dtype() == DType::String)
    ctx.fail("BitCast does not apply to strings");
  if (dtypeBits(to) != dtypeBits(x.dtype()))
    ctx.fail(fmt::format("cannot reinterpret {} ({} bits) as {} ({} bits): widths differ",
                         dtypeName(x.dtype()), dtypeBits(x.dtype()), dtypeName(to), dtypeBits(to)));
  HostTensor& out = ctx.allocateOutput(0, to, x.dims());
  const size_t bytes = x.byteSize();
  if (bytes != 0) std::memcpy(out.mutableRaw(), x.raw(), bytes);
}

}  // namespace
}  // namespace cpu

void registerBitCastKernels(KernelRegistry& r) {
  r.add({"", "BitCast", 26, 1000, cpu::bitCastKernel});
}

}  // namespace fusectl::kernels
