// Element-type tables: sizes and the names ONNX's textual syntax uses.
#include "fusectl/graph/dtype.h"

#include <array>

namespace fusectl {
namespace {

struct DTypeInfo {
  std::string_view name;
  size_t size;
};

// Indexed by the ONNX enum value; names follow onnx/defs/parser.h where it has them and the
// lower-cased TensorProto enum names otherwise.
constexpr std::array<DTypeInfo, 23> kDTypes = {{
    {"undefined", 0},      {"float", 4},        {"uint8", 1},          {"int8", 1},
    {"uint16", 2},         {"int16", 2},        {"int32", 4},          {"int64", 8},
    {"string", 0},         {"bool", 1},         {"float16", 2},        {"double", 8},
    {"uint32", 4},         {"uint64", 8},       {"complex64", 8},      {"complex128", 16},
    {"bfloat16", 2},       {"float8e4m3fn", 1}, {"float8e4m3fnuz", 1}, {"float8e5m2", 1},
    {"float8e5m2fnuz", 1}, {"uint4", 1},        {"int4", 1},
}};

}  // namespace

bool dtypeIsKnown(int32_t value) {
  return value >= 1 && value < static_cast<int32_t>(kDTypes.size());
}

size_t dtypeSize(DType t) {
  auto v = static_cast<int32_t>(t);
  return dtypeIsKnown(v) ? kDTypes[static_cast<size_t>(v)].size : 0;
}

size_t dtypeStorageBytes(DType t, int64_t count) {
  if (count <= 0) return 0;
  auto n = static_cast<size_t>(count);
  if (t == DType::Int4 || t == DType::UInt4) return (n + 1) / 2;
  return n * dtypeSize(t);
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
    case DType::Float8E5M2FNUZ: return true;
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
    case DType::Int4: return true;
    default: return false;
  }
}

}  // namespace fusectl
