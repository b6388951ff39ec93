// Model-local ONNX functions for fusectl operators (fusectl_functions.h, docs/ops.md).
//
// Each FusedConv/FusedGemm spelling <base>[_NoBias][_Add][_<act>] becomes:
//   acc = Conv(X, W[, B])           <Conv's attributes by reference: @strides, @pads...>
//      or Gemm(A, B[, C])           <@alpha, @beta, @transA, @transB>
//   sum = Add(acc, Z)               (_Add)
//   Y   = act(sum)                  (_<act>, standard ops only, see activationBody)
// An attribute the call does not give is absent in the body too (ONNX function semantics), so
// Conv's defaults apply exactly as for the original Conv. The activation parameters are read
// from the call's activation_params with Constant<value_floats = @activation_params> (opset 12+)
// or from the tensor attribute activation_params_tensor (older opsets, whose Constant has only
// `value`), then taken apart with Gather.
// fusectl::Gelu becomes the function Gelu: Y = 0.5 * X * (1 + Erf(X * (1/sqrt(2)))).
#include "fusectl/passes/fusectl_functions.h"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <fmt/format.h>

#include <limits>
#include <map>
#include <optional>
#include <set>

#include "fusectl/graph/error.h"

namespace fusectl::passes {
namespace {

// The kernels' activations (libkernels/cpu/epilogue.h), with their parameter counts.
struct ActivationInfo {
  const char* name;
  size_t params;
};
constexpr ActivationInfo kActivations[] = {
    {"Relu", 0},        {"Clip", 2},      {"LeakyRelu", 1}, {"Sigmoid", 0}, {"HardSigmoid", 2},
    {"HardSwish", 0},   {"Silu", 0},      {"Gelu", 0},      {"Tanh", 0},
};

const ActivationInfo* findActivation(const std::string& name) {
  for (const ActivationInfo& a : kActivations)
    if (name == a.name) return &a;
  return nullptr;
}

// The kernels' defaults when activation_params is absent or short (Epilogue::setActivation).
std::vector<float> defaultParams(const std::string& act) {
  const float inf = std::numeric_limits<float>::infinity();
  if (act == "Clip") return {-inf, inf};
  if (act == "LeakyRelu") return {0.01f};
  if (act == "HardSigmoid") return {0.2f, 0.5f};
  return {};
}

struct Variant {
  bool conv = true;
  bool bias = true;
  bool residual = false;
  std::string activation;  // "" for none
};

bool isFusedNode(const Node& n) {
  if (n.domain() != "fusectl") return false;
  const std::string& op = n.opType();
  for (const char* base : {"FusedConv", "FusedGemm"}) {
    std::string_view b(base);
    if (op == b || (op.size() > b.size() && op.compare(0, b.size(), b) == 0 && op[b.size()] == '_'))
      return true;
  }
  return false;
}

Variant variantOf(const Node& n) {
  Variant v;
  const std::string& op = n.opType();
  v.conv = op.rfind("FusedConv", 0) == 0;
  if (op == "FusedConv" || op == "FusedGemm") {
    v.bias = n.input(2) != nullptr;
    v.residual = n.input(3) != nullptr;
  } else {  // already spelled (a second export): the name says where the operands are
    v.bias = op.find("_NoBias") == std::string::npos;
    v.residual = op.find("_Add") != std::string::npos;
  }
  v.activation = n.attrString("activation", "");
  if (v.activation == "None" || v.activation == "Identity") v.activation.clear();
  if (!v.activation.empty() && !findActivation(v.activation)) {
    throwInvalid(fmt::format("{}: unknown activation '{}'", n.label(), v.activation));
  }
  return v;
}

std::string spelling(const Variant& v) {
  std::string name = v.conv ? "FusedConv" : "FusedGemm";
  if (!v.bias) name += "_NoBias";
  if (v.residual) name += "_Add";
  if (!v.activation.empty()) name += "_" + v.activation;
  return name;
}

// ---- building the FunctionProto ----

class Body {
 public:
  Body(onnx::FunctionProto& f, int64_t opset) : f_(f), opset_(opset) {}

  int64_t opset() const { return opset_; }

  // A node reading `inputs`; returns its output's name (`out` or a fresh one).
  std::string node(const std::string& op, std::vector<std::string> inputs,
                   std::string out = "") {
    if (out.empty()) out = fmt::format("t{}", next_++);
    onnx::NodeProto* n = f_.add_node();
    n->set_op_type(op);
    for (std::string& i : inputs) n->add_input(std::move(i));
    n->add_output(out);
    last_ = n;
    return out;
  }
  // Adds to the last node an attribute taking the call's attribute `ref`.
  void refAttr(const std::string& name, const std::string& ref,
               onnx::AttributeProto::AttributeType type) {
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name(name);
    a->set_ref_attr_name(ref);
    a->set_type(type);
  }
  void floatAttr(const std::string& name, float value) {
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  std::string floatConstant(float value) {
    std::string out = node("Constant", {});
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(value);
    return out;
  }
  std::string indexConstant(int64_t value) {
    std::string out = node("Constant", {});
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    a->mutable_t()->add_int64_data(value);
    return out;
  }
  // activation_params[i] as a scalar tensor.
  std::string param(size_t i) {
    if (params_.empty()) {
      params_ = node("Constant", {});
      if (opset_ >= 12) {
        refAttr("value_floats", "activation_params", onnx::AttributeProto::FLOATS);
      } else {
        refAttr("value", "activation_params_tensor", onnx::AttributeProto::TENSOR);
      }
    }
    return node("Gather", {params_, indexConstant(static_cast<int64_t>(i))});
  }
  // min(max(x, lo), hi), as Clip where Clip takes tensor bounds (opset 11+).
  std::string clamp(const std::string& x, const std::string& lo, const std::string& hi,
                    const std::string& out) {
    if (opset_ >= 11) return node("Clip", {x, lo, hi}, out);
    return node("Min", {node("Max", {x, lo}), hi}, out);
  }

 private:
  onnx::FunctionProto& f_;
  int64_t opset_;
  onnx::NodeProto* last_ = nullptr;
  std::string params_;
  int next_ = 0;
};

// Y = act(x), computed as the kernel does (libkernels/cpu/epilogue.h).
void activationBody(Body& b, const std::string& act, const std::string& x,
                    const std::string& y) {
  if (act == "Relu" || act == "Sigmoid" || act == "Tanh") {
    b.node(act, {x}, y);
  } else if (act == "Clip") {
    b.clamp(x, b.param(0), b.param(1), y);
  } else if (act == "LeakyRelu") {
    b.node("PRelu", {x, b.param(0)}, y);  // the same function, with a tensor slope
  } else if (act == "HardSigmoid") {
    std::string lin = b.node("Add", {b.node("Mul", {x, b.param(0)}), b.param(1)});
    b.clamp(lin, b.floatConstant(0.f), b.floatConstant(1.f), y);
  } else if (act == "HardSwish") {
    if (b.opset() >= 14) {
      b.node("HardSwish", {x}, y);
    } else {
      std::string gate = b.node("HardSigmoid", {x});
      b.floatAttr("alpha", 1.f / 6.f);
      b.floatAttr("beta", 0.5f);
      b.node("Mul", {x, gate}, y);
    }
  } else if (act == "Silu") {
    b.node("Mul", {x, b.node("Sigmoid", {x})}, y);
  } else if (act == "Gelu") {
    // 0.5 * x * (1 + erf(x / sqrt(2))), also from opset 20 on: checkers and runtimes that
    // predate the Gelu op (libonnx 1.12) accept Erf.
    std::string e = b.node("Erf", {b.node("Mul", {x, b.floatConstant(0.70710678118654752f)})});
    std::string g = b.node("Mul", {x, b.node("Add", {e, b.floatConstant(1.f)})});
    b.node("Mul", {g, b.floatConstant(0.5f)}, y);
  } else {
    throwInternal("fusectl functions: no body for activation " + act);
  }
}

std::string serialize(const google::protobuf::MessageLite& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// A fusectl-domain function `name` whose body uses the default domain at `opset`.
void startFunction(onnx::FunctionProto& f, const std::string& name, int64_t opset) {
  f.set_name(name);
  f.set_domain("fusectl");
  onnx::OperatorSetIdProto* import = f.add_opset_import();
  import->set_domain("");
  import->set_version(opset);
}

std::string buildGeluFunction(int64_t opset) {
  onnx::FunctionProto f;
  startFunction(f, "Gelu", opset);
  f.add_input("X");
  f.add_output("Y");
  Body b(f, opset);
  activationBody(b, "Gelu", "X", "Y");
  f.set_doc_string("fusectl Gelu: Y = 0.5 * X * (1 + erf(X / sqrt(2))); see docs/ops.md");
  return serialize(f);
}

std::string buildFunction(const std::string& name, const Variant& v, int64_t opset) {
  onnx::FunctionProto f;
  startFunction(f, name, opset);

  const std::string op = v.conv ? "Conv" : "Gemm";
  std::vector<std::string> inputs = v.conv ? std::vector<std::string>{"X", "W", "B"}
                                           : std::vector<std::string>{"A", "B", "C"};
  if (!v.bias) inputs.pop_back();
  std::vector<std::string> compute_inputs = inputs;
  if (v.residual) inputs.push_back("Z");
  for (const std::string& i : inputs) f.add_input(i);
  f.add_output("Y");

  using AT = onnx::AttributeProto;
  std::vector<std::pair<std::string, AT::AttributeType>> op_attrs;
  if (v.conv) {
    op_attrs = {{"auto_pad", AT::STRING}, {"dilations", AT::INTS}, {"group", AT::INT},
                {"kernel_shape", AT::INTS}, {"pads", AT::INTS}, {"strides", AT::INTS}};
  } else {
    op_attrs = {{"alpha", AT::FLOAT}, {"beta", AT::FLOAT}, {"transA", AT::INT},
                {"transB", AT::INT}};
  }
  for (const auto& a : op_attrs) f.add_attribute(a.first);
  f.add_attribute("activation");
  f.add_attribute("activation_params");
  if (opset < 12) f.add_attribute("activation_params_tensor");

  Body b(f, opset);
  const bool last_is_compute = !v.residual && v.activation.empty();
  std::string acc = b.node(op, compute_inputs, last_is_compute ? "Y" : "acc");
  for (const auto& a : op_attrs) b.refAttr(a.first, a.first, a.second);
  std::string sum = acc;
  if (v.residual) sum = b.node("Add", {acc, "Z"}, v.activation.empty() ? "Y" : "sum");
  if (!v.activation.empty()) activationBody(b, v.activation, sum, "Y");

  std::string what = fmt::format("{}({})", op, fmt::join(compute_inputs, ", "));
  if (v.residual) what += " + Z";
  if (!v.activation.empty()) what = fmt::format("{}({})", v.activation, what);
  f.set_doc_string(fmt::format("fusectl {}: Y = {}; see docs/ops.md", name, what));
  return serialize(f);
}

// Subgraphs first: `fn` may replace the node.
template <typename Fn>
void forEachNode(Graph& g, Fn&& fn) {
  for (Node* n : g.nodesSnapshot()) {
    for (Attribute& a : n->mutableAttributes()) {
      if (a.g) forEachNode(*a.g, fn);
      for (auto& sub : a.graphs)
        if (sub) forEachNode(*sub, fn);
    }
    fn(*n);
  }
}

// Gives `n` the op type `name` and exactly the inputs its function takes: a spelled node lists
// no omitted input (X, W, Z for _NoBias_Add), since ONNX 1.12 cannot bind an omitted input of a
// function call. The graph has no "remove input" edit, so such a node is rebuilt in place.
void respell(Node& n, const std::string& name, const Variant& v) {
  Graph& g = *n.graph();
  // The bias and residual of a plain FusedConv/FusedGemm are inputs 2 and 3; a spelled node
  // already lists its inputs without gaps.
  const bool plain = n.opType() == "FusedConv" || n.opType() == "FusedGemm";
  std::vector<Value*> inputs = {n.input(0), n.input(1)};
  if (v.bias) inputs.push_back(n.input(2));
  if (v.residual) inputs.push_back(plain ? n.input(3) : n.input(inputs.size()));
  if (inputs == n.inputs()) {
    if (n.opType() != name) g.setOpType(&n, name, "fusectl");
    return;
  }
  Value* out = n.output(0);
  const std::string out_name = out->name();
  Graph::NodeSpec spec;
  spec.op_type = name;
  spec.domain = "fusectl";
  spec.inputs = std::move(inputs);
  spec.output_names = {g.uniqueValueName(out_name)};
  spec.attributes = n.attributes();
  Node* rebuilt = g.createNode(std::move(spec), &n);
  rebuilt->doc_string = n.doc_string;
  rebuilt->output(0)->type = out->type;
  rebuilt->output(0)->doc_string = out->doc_string;
  g.replaceAllUsesWith(out, rebuilt->output(0));
  const std::string node_name = n.name();
  g.eraseNode(&n);
  if (rebuilt->output(0)->name() != out_name) g.renameValue(rebuilt->output(0), out_name);
  if (!node_name.empty()) g.renameNode(rebuilt, node_name);
}

}  // namespace

std::string fusedOpSpelling(const Node& node) { return spelling(variantOf(node)); }

void attachFusectlFunctions(Model& model) {
  const int64_t opset = model.opsetVersion("");
  std::set<std::pair<std::string, std::string>> defined;  // (domain, name) in model.functions
  for (const std::string& bytes : model.functions) {
    onnx::FunctionProto f;
    if (f.ParseFromString(bytes)) defined.insert({f.domain(), f.name()});
  }

  // Sorted: functions are appended in name order. No Variant: fusectl::Gelu.
  std::map<std::string, std::optional<Variant>> needed;
  auto requireOpset = [&] {
    if (opset <= 0) {
      throwUnsupported("the model imports no default-domain opset; the fusectl functions need "
                       "one");
    }
  };
  forEachNode(*model.graph, [&](Node& n) {
    if (n.domain() != "fusectl") return;
    if (n.opType() == "Gelu") {
      requireOpset();
      needed.emplace("Gelu", std::nullopt);
      return;
    }
    if (!isFusedNode(n)) {
      if (!defined.count({n.domain(), n.opType()})) {
        throwUnsupported(fmt::format("{}: no portable ONNX function is known for fusectl::{}",
                                     n.label(), n.opType()));
      }
      return;
    }
    requireOpset();
    Variant v = variantOf(n);
    if (!v.activation.empty()) {
      size_t count = findActivation(v.activation)->params;
      if (count > 0) {
        std::vector<float> params = n.attrFloats("activation_params");
        std::vector<float> defaults = defaultParams(v.activation);
        for (size_t i = params.size(); i < count; ++i) params.push_back(defaults[i]);
        params.resize(count);
        n.setAttr(Attribute::ofFloats("activation_params", params));
        if (opset < 12) {
          n.setAttr(Attribute::ofTensor(
              "activation_params_tensor",
              Tensor::fromValues(DType::Float, {static_cast<int64_t>(count)}, params)));
        }
      }
    }
    std::string name = spelling(v);
    needed.emplace(name, v);
    respell(n, name, v);  // last: it may replace n
  });

  for (const auto& [name, v] : needed) {
    if (defined.count({"fusectl", name})) continue;
    model.functions.push_back(v ? buildFunction(name, *v, opset) : buildGeluFunction(opset));
  }
  if (!needed.empty()) {
    if (model.opsetVersion("fusectl") == 0) model.setOpsetVersion("fusectl", 1);
    if (model.ir_version < 8) model.ir_version = 8;
  }
}

}  // namespace fusectl::passes
