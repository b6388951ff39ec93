// Load-time check of every node against its operator schema (schema_check.cpp).
#pragma once

#include <optional>
#include <string>

namespace fusectl {

class Model;
class Node;

// One node that breaks its op's schema: the node, where it sits ("" for the main graph,
// otherwise "subgraph 'body' of node 'loop' (Loop): ") and why, formatted only when printed.
struct SchemaViolation {
  const Node* node = nullptr;
  std::string scope;
  std::string reason;  // "1 input, but Conv-11 takes 2 to 3"

  std::string message() const;  // "<scope>node 'conv' (Conv): <reason>"
};

// The first node, in graph order and depth first into subgraphs, whose input or output count,
// empty required inputs, attribute types or missing required attributes break its schema:
// libonnx's OpSchema for the model's opset (standard domains, as far as libonnx knows the op
// and the opset), fused_ops.h for domain "fusectl" (where a dtype-suffixed spelling must also
// match the node's element type). Other ops are not checked.
std::optional<SchemaViolation> findSchemaViolation(const Model& model);

// Throws Error(InvalidInput) "<display_name>: <violation>" for the first violation.
void checkSchemasOrThrow(const Model& model, const std::string& display_name);

}  // namespace fusectl
