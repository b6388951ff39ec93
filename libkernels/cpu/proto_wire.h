// Just enough of the protobuf wire format to read ONNX TypeProto attributes and the
// SequenceProto/OptionalProto files of the node-test suite: libkernels does not link the
// ONNX protobuf library (libgraph keeps it private), and these messages need only field walks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/error.h"

namespace fusectl::kernels::wire {

struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t varint = 0;
  std::string_view bytes;  // for wire type 2
};

inline uint64_t readVarint(std::string_view& in) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) throwInvalid("truncated protobuf varint");
    const uint8_t b = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  throwInvalid("protobuf varint longer than 10 bytes");
}

// The next field of a message in `in` (consumed); false at the end.
inline bool nextField(std::string_view& in, Field& f) {
  if (in.empty()) return false;
  const uint64_t key = readVarint(in);
  f.number = static_cast<uint32_t>(key >> 3);
  f.wire_type = static_cast<uint32_t>(key & 7);
  f.varint = 0;
  f.bytes = {};
  switch (f.wire_type) {
    case 0: f.varint = readVarint(in); break;
    case 1:
    case 5: {
      const size_t n = f.wire_type == 1 ? 8 : 4;
      if (in.size() < n) throwInvalid("truncated protobuf fixed field");
      in.remove_prefix(n);
      break;
    }
    case 2: {
      const uint64_t n = readVarint(in);
      if (n > in.size()) throwInvalid("protobuf field runs past the end of its message");
      f.bytes = in.substr(0, static_cast<size_t>(n));
      in.remove_prefix(static_cast<size_t>(n));
      break;
    }
    default: throwInvalid("protobuf wire type " + std::to_string(f.wire_type) + " is not supported");
  }
  return true;
}

// What an onnx.TypeProto says about a run-time value.
struct ValueKind {
  enum class Of { Tensor, Sequence, Optional, Other } of = Of::Other;
  DType element = DType::Undefined;  // the innermost tensor's elem_type
  bool optional_of_sequence = false;
};

inline DType tensorElemType(std::string_view tensor_type) {
  Field f;
  while (nextField(tensor_type, f)) {
    if (f.number == 1 && f.wire_type == 0) return static_cast<DType>(f.varint);
  }
  return DType::Undefined;
}

// TypeProto: tensor_type = 1, sequence_type = 4, optional_type = 9; Sequence and Optional
// hold their elem_type (a TypeProto) in field 1.
inline ValueKind decodeTypeProto(std::string_view type, int depth = 0) {
  ValueKind k;
  if (depth > 8) return k;
  Field f;
  while (nextField(type, f)) {
    if (f.wire_type != 2) continue;
    if (f.number == 1) {
      k.of = ValueKind::Of::Tensor;
      k.element = tensorElemType(f.bytes);
    } else if (f.number == 4 || f.number == 9) {
      std::string_view inner = f.bytes;
      Field e;
      ValueKind elem;
      while (nextField(inner, e)) {
        if (e.number == 1 && e.wire_type == 2) elem = decodeTypeProto(e.bytes, depth + 1);
      }
      k.of = f.number == 4 ? ValueKind::Of::Sequence : ValueKind::Of::Optional;
      k.element = elem.element;
      k.optional_of_sequence = f.number == 9 && elem.of == ValueKind::Of::Sequence;
    }
  }
  return k;
}

}  // namespace fusectl::kernels::wire
