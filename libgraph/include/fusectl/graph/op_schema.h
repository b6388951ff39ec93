// What ONNX's operator schemas (libonnx) say about an op, for code that must not hard-code it.
#pragma once

#include <optional>
#include <string_view>

#include "fusectl/graph/attribute.h"

namespace fusectl {

// The default value ONNX's schema gives attribute `name` of op `op_type` (domain "" or
// "ai.onnx" for the standard ops), from the newest schema libonnx knows at or below `opset`
// (0: the newest it knows); nullopt for an unknown op, an unknown attribute, or one without a
// default (required attributes). Only the plain kinds: float, int, string, floats, ints.
std::optional<Attribute> schemaDefaultAttribute(std::string_view op_type, std::string_view domain,
                                                std::string_view name, int64_t opset = 0);

}  // namespace fusectl
