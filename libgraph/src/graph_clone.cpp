// Graph::clone(): a deep copy whose subgraphs bind to the copy (their outer references resolve
// to the copy's values); initializers share their bytes with the original.
#include "fusectl/graph/graph.h"

#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fusectl {

std::unique_ptr<Graph> Graph::clone(Graph* parent) const {
  auto out = std::make_unique<Graph>(name);
  out->doc_string = doc_string;
  out->parent_ = parent;
  out->sparse_initializers = sparse_initializers;
  out->quantization_annotations = quantization_annotations;
  out->declared_output_shapes = declared_output_shapes;
  std::unordered_map<const Value*, Value*> map;
  map.reserve(values_.size());
  auto copyMeta = [](const Value* from, Value* to) {
    to->type = from->type;
    to->doc_string = from->doc_string;
  };
  for (const Value* v : outer_refs_) {
    Value* outer = v->outer_;
    if (parent) {
      for (Graph* g = parent; g; g = g->parent_)
        if (Value* found = g->findValue(v->name_)) { outer = found; break; }
    }
    Value* c = out->addOuterRef(v->name_, outer);
    copyMeta(v, c);
    map[v] = c;
  }
  for (const Value* v : initializers()) {
    Value* c = out->newValue(v->name_, Value::Kind::Initializer);
    c->initializer_ = std::make_unique<Tensor>(*v->initializer_);  // shares the bytes
    copyMeta(v, c);
    c->init_index_ = out->initializers_.size();
    out->initializers_.push_back(c);
    map[v] = c;
  }
  for (const Value* v : inputs_) {
    if (v->isInitializer()) {
      Value* c = map.at(v);
      c->is_graph_input_ = true;
      out->inputs_.push_back(c);
      continue;
    }
    Value* c = out->addInput(v->name_, v->type);
    copyMeta(v, c);
    map[v] = c;
  }
  for (const Node* n = first_; n; n = n->next_) {
    NodeSpec spec;
    spec.op_type = *n->op_type_;
    spec.domain = *n->domain_;
    spec.name = n->name_;
    for (const Value* v : n->inputs_) spec.inputs.push_back(v ? map.at(v) : nullptr);
    for (const Value* v : n->outputs_) spec.output_names.push_back(v ? v->name_ : std::string());
    Node* c = out->createNode(std::move(spec));
    c->doc_string = n->doc_string;
    for (size_t i = 0; i < n->outputs_.size(); ++i) {
      if (!n->outputs_[i]) continue;
      copyMeta(n->outputs_[i], c->outputs_[i]);
      map[n->outputs_[i]] = c->outputs_[i];
    }
    c->attrs_.reserve(n->attrs_.size());
    for (const Attribute& a : n->attrs_) {
      if (a.kind != AttrKind::Graph && a.kind != AttrKind::Graphs) {
        c->attrs_.push_back(a);
        continue;
      }
      // Subgraphs are cloned here rather than by Attribute's copy so they bind to the copy.
      Attribute ca;
      ca.name = a.name;
      ca.kind = a.kind;
      ca.doc_string = a.doc_string;
      ca.ref_attr_name = a.ref_attr_name;
      if (a.g) ca.g = a.g->clone(out.get());
      for (const auto& g : a.graphs) ca.graphs.push_back(g ? g->clone(out.get()) : nullptr);
      c->attrs_.push_back(std::move(ca));
    }
    out->noteSubgraphOwner(c);
    std::vector<Value*> implicit;
    for (const Value* v : n->implicitInputs()) implicit.push_back(map.at(v));
    out->setNodeImplicitInputs(c, std::move(implicit));
  }
  for (const Value* v : outputs_) out->addOutput(map.at(v));
  return out;
}

std::unique_ptr<Model> Model::clone() const {
  auto out = std::make_unique<Model>();
  out->ir_version = ir_version;
  out->opset_imports = opset_imports;
  out->producer_name = producer_name;
  out->producer_version = producer_version;
  out->domain = domain;
  out->model_version = model_version;
  out->doc_string = doc_string;
  out->metadata_props = metadata_props;
  out->functions = functions;
  out->training_info = training_info;
  out->graph = graph->clone();
  out->external_data_files = external_data_files;
  return out;
}

}  // namespace fusectl
