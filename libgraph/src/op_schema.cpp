#include "fusectl/graph/op_schema.h"

#include <onnx/defs/schema.h>

#include <climits>
#include <string>

namespace fusectl {

std::optional<Attribute> schemaDefaultAttribute(std::string_view op_type, std::string_view domain,
                                                std::string_view name, int64_t opset) {
  const std::string dom = domain == "ai.onnx" ? std::string() : std::string(domain);
  const int version = opset > 0 && opset < INT_MAX ? static_cast<int>(opset) : INT_MAX;
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(std::string(op_type), version, dom);
  if (!schema) return std::nullopt;
  const auto& attributes = schema->attributes();
  auto it = attributes.find(std::string(name));
  if (it == attributes.end() || it->second.required) return std::nullopt;
  const onnx::AttributeProto& d = it->second.default_value;
  using AP = onnx::AttributeProto;
  switch (d.type()) {
    case AP::FLOAT: return Attribute::ofFloat(std::string(name), d.f());
    case AP::INT: return Attribute::ofInt(std::string(name), d.i());
    case AP::STRING: return Attribute::ofString(std::string(name), d.s());
    case AP::FLOATS:
      return Attribute::ofFloats(std::string(name), {d.floats().begin(), d.floats().end()});
    case AP::INTS:
      return Attribute::ofInts(std::string(name), {d.ints().begin(), d.ints().end()});
    default: return std::nullopt;
  }
}

}  // namespace fusectl
