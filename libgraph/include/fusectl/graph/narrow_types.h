// Element codes of the narrow ONNX types (float8 variants, float8e8m0, float4e2m1, int4/uint4,
// int2/uint2): decoding, exact rounding into them, and sub-byte packing.
//
// Rules follow the ONNX Cast/QuantizeLinear specification (operators.md, "Float8 types",
// "4 bit integer types", "FLOAT4E2M1") and agree with the node tests' data:
//  - rounding to a float format is round-to-nearest, ties to even, on the exact value;
//  - a finite value beyond the largest finite one (after rounding), or an infinity, becomes
//    +-max when saturating, else Inf where the format has one (E5M2) or NaN (the others);
//  - the FNUZ formats have one NaN (0x80) and no negative zero: -0 and negative values that
//    round to zero become 0x00;
//  - float4e2m1 has no Inf or NaN: it always saturates, and NaN becomes 0x8 as in the
//    reference implementation;
//  - float8e8m0 is an unsigned power of two 2^(code-127), 0xFF is NaN; the sign is dropped.
#pragma once

#include <cstdint>

#include "fusectl/graph/dtype.h"

namespace fusectl {

// True for the float8/float4/e8m0 codes this header converts (all 1-byte or packed codes).
bool dtypeIsNarrowFloat(DType t);
// True for types whose elements need this header to read or write (narrow floats and the
// packed integers).
bool dtypeIsNarrow(DType t);

// The value of one code of a narrow float type (the unpacked 4-bit code for Float4E2M1).
double narrowFloatToDouble(uint8_t code, DType t);

// How float8e8m0 rounds a value that is not a power of two (Cast's round_mode attribute).
enum class E8M0Rounding { Up, Down, Nearest };

// The code of `t` nearest to v (see the rules above). For Float4E2M1 the code is 4 bits.
uint8_t doubleToNarrowFloat(double v, DType t, bool saturate,
                            E8M0Rounding e8m0 = E8M0Rounding::Up);

// Element `index` of a packed Int4/UInt4/Int2/UInt2/Float4E2M1 array (low bits first): the
// integer value for the integer types (sign-extended), the raw 4-bit code for Float4E2M1.
int64_t loadPacked(const uint8_t* bytes, int64_t index, DType t);
// Writes the low dtypeBits(t) bits of `code` into element `index`, keeping its neighbours.
void storePacked(uint8_t* bytes, int64_t index, DType t, uint32_t code);

// The range of a packed integer type: [-8, 7], [0, 15], [-2, 1] or [0, 3].
int64_t packedIntMin(DType t);
int64_t packedIntMax(DType t);

}  // namespace fusectl
