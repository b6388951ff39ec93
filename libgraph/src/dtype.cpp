// Element-type tables: sizes and the names ONNX's textual syntax uses.
#include "fusectl/graph/dtype.h"

#include <array>
#include <limits>

namespace fusectl {
namespace {

struct DTypeInfo {
  std::string_view name;
  size_t size;
};

// Indexed by the ONNX enum value; names follow onnx/defs/parser.h where it has them and the
// lower-cased TensorProto enum names otherwise.
constexpr std::array<DTypeInfo, 27> kDTypes = {{
    {"undefined", 0},      {"float", 4},        {"uint8", 1},          {"int8", 1},
    {"uint16", 2},         {"int16", 2},        {"int32", 4},          {"int64", 8},
    {"string", 0},         {"bool", 1},         {"float16", 2},        {"double", 8},
    {"uint32", 4},         {"uint64", 8},       {"complex64", 8},      {"complex128", 16},
    {"bfloat16", 2},       {"float8e4m3fn", 1}, {"float8e4m3fnuz", 1}, {"float8e5m2", 1},
    {"float8e5m2fnuz", 1}, {"uint4", 1},        {"int4", 1},          {"float4e2m1", 1},
    {"float8e8m0", 1},     {"uint2", 1},        {"int2", 1},
}};

}  // namespace

bool dtypeIsKnown(int32_t value) {
  return value >= 1 && value < static_cast<int32_t>(kDTypes.size());
}

size_t dtypeSize(DType t) {
  auto v = static_cast<int32_t>(t);
  return dtypeIsKnown(v) ? kDTypes[static_cast<size_t>(v)].size : 0;
}

int dtypeBits(DType t) {
  switch (t) {
    case DType::Int4:
    case DType::UInt4:
    case DType::Float4E2M1: return 4;
    case DType::Int2:
    case DType::UInt2: return 2;
    default: return static_cast<int>(8 * dtypeSize(t));
  }
}

bool dtypeIsSubByte(DType t) {
  const int bits = dtypeBits(t);
  return bits > 0 && bits < 8;
}

size_t dtypeStorageBytes(DType t, int64_t count) {
  if (count <= 0) return 0;
  auto n = static_cast<size_t>(count);
  if (dtypeIsSubByte(t)) {
    const size_t per_byte = 8 / static_cast<size_t>(dtypeBits(t));
    return (n + per_byte - 1) / per_byte;
  }
  // Saturates instead of wrapping: callers compare the result with a limit, and a count from a
  // file (2^62 four-byte elements) once wrapped to 0 bytes and passed one.
  const size_t size = dtypeSize(t);
  if (size != 0 && n > std::numeric_limits<size_t>::max() / size)
    return std::numeric_limits<size_t>::max();
  return n * size;
}

int64_t dtypeMinIrVersion(DType t) {
  switch (t) {
    case DType::BFloat16: return 4;
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ: return 9;
    case DType::UInt4:
    case DType::Int4: return 10;
    case DType::Float4E2M1: return 11;
    case DType::Float8E8M0: return 12;
    case DType::UInt2:
    case DType::Int2: return 13;
    default: return 3;
  }
}

std::string_view dtypeName(DType t) {
  auto v = static_cast<int32_t>(t);
  return dtypeIsKnown(v) ? kDTypes[static_cast<size_t>(v)].name : kDTypes[0].name;
}

std::optional<DType> dtypeFromName(std::string_view name) {
  for (size_t i = 1; i < kDTypes.size(); ++i)
    if (kDTypes[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

bool dtypeIsFloat(DType t) {
  switch (t) {
    case DType::Float:
    case DType::Double:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
    case DType::Float4E2M1: return true;
    default: return false;
  }
}

bool dtypeIsInteger(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
    case DType::UInt16:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt32:
    case DType::UInt64:
    case DType::UInt4:
    case DType::Int4:
    case DType::UInt2:
    case DType::Int2: return true;
    default: return false;
  }
}

}  // namespace fusectl
