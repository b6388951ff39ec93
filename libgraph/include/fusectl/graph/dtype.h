// Element types, numbered exactly as ONNX's TensorProto.DataType so that conversion is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fusectl {

enum class DType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  UInt2 = 25,
  Int2 = 26,
};

// Bytes per element; 0 for String and Undefined. Sub-byte types (Int4/UInt4/Float4E2M1 packed
// two per byte, Int2/UInt2 four per byte, low bits first) report 1: use dtypeStorageBytes for
// buffer sizes.
size_t dtypeSize(DType t);
// Bits per element as stored: 2 or 4 for the packed sub-byte types, 8 * dtypeSize otherwise.
int dtypeBits(DType t);
// True for the types packed several to a byte (dtypeBits < 8).
bool dtypeIsSubByte(DType t);
// Bytes needed to store `count` elements of `t` (handles sub-byte packing); 0 for String;
// SIZE_MAX where the count would overflow size_t (over any limit, never wrapped).
size_t dtypeStorageBytes(DType t, int64_t count);
// Lower-case ONNX textual-syntax name: "float", "int64", "float16", "bool"...
std::string_view dtypeName(DType t);
// Inverse of dtypeName; nullopt for an unknown name.
std::optional<DType> dtypeFromName(std::string_view name);
// True for values 1..26 that ONNX defines (IR version 13).
bool dtypeIsKnown(int32_t value);
// The IR version that introduced `t` (3 for the original types, 9 float8, 10 int4, 11 float4,
// 12 float8e8m0, 13 int2): a writer must not declare an older IR version for a graph using it.
int64_t dtypeMinIrVersion(DType t);
bool dtypeIsFloat(DType t);    // Float, Double, Float16, BFloat16, Float8*, Float4E2M1
bool dtypeIsInteger(DType t);  // signed or unsigned integers, not Bool

}  // namespace fusectl
