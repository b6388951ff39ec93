// Cast into and out of the narrow types (float8 variants, float8e8m0, float4e2m1, packed
// int4/uint4/int2/uint2), and the element access QuantizeLinear/DequantizeLinear share.
#pragma once

#include "fusectl/graph/narrow_types.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels::cpu {

// Cast's conversion when x or out has a narrow type. Floats round to nearest even (saturating
// per `saturate`, float8e8m0 per `e8m0`); integers go to int4/int2 as C casts do, truncating
// and wrapping modulo 2^bits, as the ONNX reference does.
void castNarrow(const KernelContext& ctx, const HostTensor& x, HostTensor& out, bool saturate,
                E8M0Rounding e8m0);

// Element i of an integer, narrow float or packed tensor, as a double.
double elementValue(const KernelContext& ctx, const HostTensor& t, int64_t i);

// Cast's `round_mode` attribute (opset 24+): "up" (the default), "down" or "nearest".
E8M0Rounding e8m0Rounding(const KernelContext& ctx);

}  // namespace fusectl::kernels::cpu
