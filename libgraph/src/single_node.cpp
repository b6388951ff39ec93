// singleNodeModel (single_node.h).
#include "fusectl/graph/single_node.h"

#include <map>
#include <string>

namespace fusectl {

std::unique_ptr<Model> singleNodeModel(const Model& model, const Node& node) {
  auto single = std::make_unique<Model>();
  single->ir_version = model.ir_version;
  single->opset_imports = model.opset_imports;
  single->functions = model.functions;
  Graph& g = *single->graph;
  Graph::NodeSpec spec;
  spec.op_type = node.opType();
  spec.domain = node.domain();
  spec.name = node.name();
  spec.attributes = node.attributes();
  std::map<std::string, Value*> made;
  for (const Value* in : node.inputs()) {
    if (!in) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    Value*& v = made[in->name()];
    if (!v) {
      v = in->isConstant() ? g.addInitializer(in->name(), *in->initializer())
                           : g.addInput(in->name(), in->type);
    }
    spec.inputs.push_back(v);
  }
  for (const Value* out : node.outputs()) spec.output_names.push_back(out ? out->name() : "");
  Node* copy = g.createNode(std::move(spec));
  for (Value* out : copy->outputs())
    if (out) g.addOutput(out);
  return single;
}

}  // namespace fusectl
