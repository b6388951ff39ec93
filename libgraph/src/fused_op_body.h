// Internal to libgraph: how the ONNX function bodies of the fusectl ops are written
// (fused_ops_functions.cpp for the epilogue and activation ops, fused_ops_composite.cpp and
// fused_bodies/ for the composite ops).
//
// The bodies are IR graphs written by functionToBinary (onnx_function.h). Their bytes are part
// of every optimized file that uses the op, so a body builder must be deterministic: the same
// node order and the same fresh names (t0, t1...) every time.
#pragma once

#include <fmt/format.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_function.h"
#include "fusectl/graph/tensor.h"

namespace fusectl {

// A function body under construction: default-domain nodes over named inputs.
class Body {
 public:
  explicit Body(int64_t opset) : graph_(std::make_unique<Graph>()), opset_(opset) {}

  int64_t opset() const { return opset_; }
  Value* input(std::string_view name) { return graph_->addInput(std::string(name), {}); }
  std::unique_ptr<Graph> finish(Value* y) { return finish(std::vector<Value*>{y}); }
  // A body with several outputs (a composite op's outputs, in fused_ops.def order).
  std::unique_ptr<Graph> finish(const std::vector<Value*>& outputs) {
    for (Value* y : outputs) graph_->addOutput(y);
    return std::move(graph_);
  }

  // A default-domain node reading `inputs`; returns its output (named `out` or fresh).
  Value* node(const std::string& op, std::vector<Value*> inputs, std::string out = "") {
    if (out.empty()) out = fmt::format("t{}", next_++);
    Graph::NodeSpec spec;
    spec.op_type = op;
    spec.inputs = std::move(inputs);
    spec.output_names = {std::move(out)};
    last_ = graph_->createNode(std::move(spec));
    return last_->output(0);
  }
  // A node with several outputs, named `outs` (fresh names where a name is "").
  std::vector<Value*> multiNode(const std::string& op, std::vector<Value*> inputs,
                                std::vector<std::string> outs) {
    for (std::string& o : outs)
      if (o.empty()) o = fmt::format("t{}", next_++);
    Graph::NodeSpec spec;
    spec.op_type = op;
    spec.inputs = std::move(inputs);
    spec.output_names = std::move(outs);
    last_ = graph_->createNode(std::move(spec));
    return last_->outputs();
  }
  // The node made last, for attributes this class has no helper for.
  Node* last() { return last_; }
  // Adds to the last node an attribute taking the call's attribute `ref`.
  void refAttr(std::string_view name, std::string_view ref, AttrKind kind) {
    Attribute a;
    a.name = std::string(name);
    a.kind = kind;
    a.ref_attr_name = std::string(ref);
    last_->setAttr(std::move(a));
  }
  void floatAttr(const std::string& name, float value) {
    last_->setAttr(Attribute::ofFloat(name, value));
  }
  void intAttr(const std::string& name, int64_t value) {
    last_->setAttr(Attribute::ofInt(name, value));
  }
  void intsAttr(const std::string& name, std::vector<int64_t> values) {
    last_->setAttr(Attribute::ofInts(name, std::move(values)));
  }
  // A Constant node holding `t`.
  Value* tensorConstant(Tensor t) {
    Value* out = node("Constant", {});
    last_->setAttr(Attribute::ofTensor("value", std::move(t)));
    return out;
  }
  Value* intsConstant(std::vector<int64_t> values) {
    const int64_t n = static_cast<int64_t>(values.size());
    return tensorConstant(Tensor::fromValues(DType::Int64, {n}, std::move(values)));
  }
  template <typename T>
  Value* scalarConstant(DType dtype, T value) {
    Value* out = node("Constant", {});
    Tensor scalar = Tensor::fromValues(dtype, {}, std::vector<T>{value});
    last_->setAttr(Attribute::ofTensor("value", std::move(scalar)));
    return out;
  }
  Value* floatConstant(float value) { return scalarConstant(DType::Float, value); }
  // The call's attribute that param() reads from now on: "activation_params" unless told
  // otherwise (ExpandDepthwiseConv's expansion reads "expand_activation_params"); below opset 12
  // its tensor twin, the name + "_tensor".
  void readParamsFrom(std::string attribute) { params_attribute_ = std::move(attribute); }
  // params[i] as a scalar tensor, params the attribute readParamsFrom named.
  Value* param(size_t i) {
    Value*& params = params_[params_attribute_];
    if (!params) params = attrConstant(params_attribute_, "value_floats", AttrKind::Floats);
    Value* index = scalarConstant(DType::Int64, static_cast<int64_t>(i));
    return node("Gather", {params, index});
  }
  // The call's float attribute `name` (the norms' epsilon) as a scalar tensor.
  Value* floatAttrConstant(const std::string& name) {
    return attrConstant(name, "value_float", AttrKind::Float);
  }
  // The call's int attribute `name` (Attention's causal, the packed heads) as a scalar tensor.
  Value* intAttrConstant(const std::string& name) {
    return attrConstant(name, "value_int", AttrKind::Int);
  }
  // min(max(x, lo), hi), as Clip where Clip takes tensor bounds (opset 11+).
  Value* clamp(Value* x, Value* lo, Value* hi, const std::string& out) {
    if (opset_ >= 11) return node("Clip", {x, lo, hi}, out);
    return node("Min", {node("Max", {x, lo}), hi}, out);
  }

 private:
  // A Constant holding the call's attribute `name`: Constant(<value_attr> = @name) from opset
  // 12; before, where Constant has only `value`, Constant(value = @<name>_tensor), the tensor
  // twin attachFusectlFunctions writes on the call (makeParamsExplicit, writeTensorTwins).
  Value* attrConstant(const std::string& name, const char* value_attr, AttrKind kind) {
    Value* out = node("Constant", {});
    if (opset_ >= 12) refAttr(value_attr, name, kind);
    else refAttr("value", name + "_tensor", AttrKind::Tensor);
    return out;
  }

  std::unique_ptr<Graph> graph_;
  int64_t opset_;
  Node* last_ = nullptr;
  std::string params_attribute_ = "activation_params";
  std::map<std::string, Value*> params_;  // the Constant each params attribute is read into
  int next_ = 0;
};

// The scalar attributes bodies read through a Constant (Body::floatAttrConstant,
// intAttrConstant): below opset 12, where Constant has only `value`, the call carries each one's
// tensor twin, the name + "_tensor" (attachFusectlFunctions), and the function declares it.
inline bool readsTensorTwin(std::string_view attribute) {
  return attribute == "epsilon" || attribute == "scale" || attribute == "causal" ||
         attribute == "num_heads" || attribute == "kv_num_heads";
}

// The op's attributes as the function's, and below opset 12 the tensor twins of those its body
// reads through a Constant (readsTensorTwin).
inline void declareAttributes(FunctionDef& f, const FusedOpInfo& op, int64_t opset) {
  for (const FusedOpAttribute& a : op.attributes) f.attributes.emplace_back(a.name);
  if (opset >= 12) return;
  for (const FusedOpAttribute& a : op.attributes)
    if (readsTensorTwin(a.name)) f.attributes.emplace_back(std::string(a.name) + "_tensor");
}

// A fusectl-domain function `name` whose body uses the default domain at `opset`.
inline FunctionDef startFunction(const std::string& name, int64_t opset) {
  FunctionDef f;
  f.name = name;
  f.domain = std::string(kFusectlDomain);
  f.opset_imports.push_back({"", opset});
  return f;
}

// y = act(x) from standard ops, as the kernels' epilogue computes it (fused_ops_functions.cpp).
Value* activationBody(Body& b, Activation act, Value* x, const std::string& y);

// y = x * cos + rotate_half(x) * sin over x's last axis, as RotaryEmbedding's exporters write it
// (fused_bodies/rotary.cpp); AttentionPackedRotary's body rotates its q and k heads with it.
Value* rotateHalf(Body& b, Value* x, Value* cos, Value* sin, const std::string& out);

}  // namespace fusectl
