// Model-local ONNX functions for the fusectl ops (fused_ops.h, docs/ops.md).
//
// Each epilogue-op spelling <base>[_NoBias][_Add][_<act>] becomes:
//   acc = Conv(X, W[, B])           <the compute op's attributes by reference: @strides...>
//      or Gemm(A, B[, C])           <@alpha, @beta, @transA, @transB>
//   sum = Add(acc, Z)               (_Add)
//   Y   = act(sum)                  (_<act>, standard ops only, see activationBody)
// An attribute the call does not give is absent in the body too (ONNX function semantics), so
// Conv's defaults apply exactly as for the original Conv. The activation parameters are read
// from the call's activation_params with Constant<value_floats = @activation_params> (opset 12+)
// or from the tensor attribute activation_params_tensor (older opsets, whose Constant has only
// `value`), then taken apart with Gather.
// An activation op (fusectl::Gelu) becomes the function of its name: Y = act(X). A composite op
// (LayerNorm, Attention...) becomes the function its builder in fused_ops_composite.cpp writes.
// A float16 or bfloat16 node gets the spelling of its float32 twin plus a dtype suffix
// (fused_ops.h), whose function is the float32 one wrapped by castWrappedFunction:
//   X_float = Cast<to = FLOAT>(X)  ...   <the float32 body on X_float...>   Y = Cast(Y_float)
// so the runtime computes in float32 and rounds each output once, as the kernels do; the float32
// bodies, whose Constants are float32, stay the only ones written.
//
// The bodies are IR graphs written by functionToBinary (onnx_function.h). Their bytes are part
// of every optimized file, so the node order, the fresh names (t0, t1...) and the doc strings
// stay as they are.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "fusectl/graph/elementwise_program.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/onnx_function.h"
#include "fused_op_body.h"
#include "fused_ops_composite.h"

namespace fusectl {

// y = act(x), computed as the kernel's epilogue does. Where a node takes two operands made here,
// the second is made first: the bytes of every exported model depend on that order.
Value* activationBody(Body& b, Activation act, Value* x, const std::string& y) {
  switch (act) {
    case Activation::Relu:
    case Activation::Sigmoid:
    case Activation::Tanh: return b.node(std::string(activationName(act)), {x}, y);
    case Activation::Clip: {
      Value* hi = b.param(1);
      Value* lo = b.param(0);
      return b.clamp(x, lo, hi, y);
    }
    case Activation::LeakyRelu:
      return b.node("PRelu", {x, b.param(0)}, y);  // the same function, with a tensor slope
    case Activation::HardSigmoid: {
      Value* lin = b.node("Add", {b.node("Mul", {x, b.param(0)}), b.param(1)});
      Value* one = b.floatConstant(1.f);
      Value* zero = b.floatConstant(0.f);
      return b.clamp(lin, zero, one, y);
    }
    case Activation::HardSwish: {
      if (b.opset() >= 14) return b.node("HardSwish", {x}, y);
      Value* gate = b.node("HardSigmoid", {x});
      b.floatAttr("alpha", 1.f / 6.f);
      b.floatAttr("beta", 0.5f);
      return b.node("Mul", {x, gate}, y);
    }
    case Activation::Silu: return b.node("Mul", {x, b.node("Sigmoid", {x})}, y);
    case Activation::Gelu: {
      // 0.5 * x * (1 + erf(x / sqrt(2))), also from opset 20 on: checkers and runtimes that
      // predate the Gelu op (libonnx 1.12) accept Erf.
      Value* e = b.node("Erf", {b.node("Mul", {x, b.floatConstant(0.70710678118654752f)})});
      Value* g = b.node("Mul", {x, b.node("Add", {e, b.floatConstant(1.f)})});
      return b.node("Mul", {g, b.floatConstant(0.5f)}, y);
    }
    case Activation::GeluTanh: {
      // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x))), as GPT-2 spells it.
      Value* cube = b.node("Mul", {b.node("Mul", {x, x}), x});
      Value* inner = b.node("Add", {x, b.node("Mul", {cube, b.floatConstant(0.044715f)})});
      Value* t = b.node("Tanh", {b.node("Mul", {inner, b.floatConstant(0.7978845608f)})});
      Value* half_x = b.node("Mul", {x, b.floatConstant(0.5f)});
      return b.node("Mul", {half_x, b.node("Add", {t, b.floatConstant(1.f)})}, y);
    }
    case Activation::None: break;
  }
  throwInternal(fmt::format("fusectl functions: no body for activation {}",
                            activationName(act)));
}

namespace {

// What one spelling computes. An activation op has no compute.
struct Variant {
  const FusedOpInfo* op = nullptr;
  bool bias = true;
  bool residual = false;
  Activation activation = Activation::None;
};

// The activation a node's string attribute `name` names.
Activation nodeActivation(const Node& n, const std::string& name) {
  const std::string act = n.attrString(name, "");
  std::optional<Activation> a = parseActivation(act);
  if (!a) throwInvalid(fmt::format("{}: unknown {} '{}'", n.label(), name, act));
  return *a;
}

Variant variantOf(const Node& n, const FusedSpelling& s) {
  Variant v{s.op, s.bias, s.residual, Activation::None};
  if (s.plain) {
    v.bias = n.input(2) != nullptr;
    v.residual = n.input(3) != nullptr;
  }
  v.activation = nodeActivation(n, "activation");
  return v;
}

std::string spelling(const Variant& v) {
  return fusedSpellingName(v.op->name, v.bias, v.residual, v.activation);
}

// Y = act(X) for an activation op.
std::string buildActivationFunction(const FusedOpInfo& op, int64_t opset) {
  FunctionDef f = startFunction(std::string(op.name), opset);
  Body b(opset);
  Value* x = b.input(op.inputs.at(0).name);
  f.body = b.finish(activationBody(b, op.activation, x, "Y"));
  f.doc_string = fmt::format("fusectl {}: {}; see docs/ops.md", op.name, op.formula);
  return functionToBinary(f);
}

std::string buildEpilogueFunction(const std::string& name, const Variant& v, int64_t opset) {
  const FusedOpInfo& op = *v.op;
  FunctionDef f = startFunction(name, opset);
  Body b(opset);
  // The compute op's operands, then the residual: without gaps.
  std::vector<Value*> compute_inputs;
  std::vector<std::string> compute_names;
  for (size_t i = 0; i < 3; ++i) {
    if (i == 2 && !v.bias) break;
    compute_names.emplace_back(op.inputs.at(i).name);
    compute_inputs.push_back(b.input(op.inputs.at(i).name));
  }
  Value* z = v.residual ? b.input(op.inputs.at(3).name) : nullptr;

  for (const FusedOpAttribute& a : op.attributes) f.attributes.emplace_back(a.name);
  if (opset < 12) f.attributes.emplace_back("activation_params_tensor");

  const bool has_act = v.activation != Activation::None;
  // MatMul takes no bias operand: FusedMatMul's C is an Add after it, which broadcasts the [N]
  // bias along the last axis exactly as the kernel's per-column bias does.
  Value* separate_bias = nullptr;
  if (op.compute == "MatMul" && compute_inputs.size() == 3) {
    separate_bias = compute_inputs.back();
    compute_inputs.pop_back();
  }
  const bool last_is_compute = !v.residual && !has_act && !separate_bias;
  Value* y = b.node(std::string(op.compute), compute_inputs, last_is_compute ? "Y" : "acc");
  for (const FusedOpAttribute& a : op.attributes)
    if (a.by_reference) b.refAttr(a.name, a.name, a.kind);
  if (separate_bias)
    y = b.node("Add", {y, separate_bias}, v.residual || has_act ? "biased" : "Y");
  if (v.residual) y = b.node("Add", {y, z}, has_act ? "sum" : "Y");
  if (has_act) y = activationBody(b, v.activation, y, "Y");
  f.body = b.finish(y);

  std::string what = fmt::format("{}({})", op.compute, fmt::join(compute_names, ", "));
  if (v.residual) what += " + Z";
  if (has_act) what = fmt::format("{}({})", activationName(v.activation), what);
  f.doc_string = fmt::format("fusectl {}: Y = {}; see docs/ops.md", name, what);
  return functionToBinary(f);
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

// Replaces `n` by a node of op `op_type` (n's domain) reading `inputs`, with n's attributes and
// doc string. Each of n's outputs carries on as the same output of the new node (type, doc
// string, readers and name); `extra` names further outputs, of output 0's type. The graph has no
// edit that removes an input or adds an output, so such a change rebuilds the node in place.
void rebuild(Node& n, const std::string& op_type, std::vector<Value*> inputs,
             const std::vector<std::string>& extra = {}) {
  Graph& g = *n.graph();
  const std::vector<Value*> old = n.outputs();
  Graph::NodeSpec spec;
  spec.op_type = op_type;
  spec.domain = n.domain();
  spec.inputs = std::move(inputs);
  spec.attributes = n.attributes();
  for (const Value* o : old) spec.output_names.push_back(o ? g.uniqueValueName(o->name()) : "");
  for (const std::string& e : extra) spec.output_names.push_back(g.uniqueValueName(e));
  Node* rebuilt = g.createNode(std::move(spec), &n);
  rebuilt->doc_string = n.doc_string;
  std::vector<std::string> names;
  for (size_t i = 0; i < old.size(); ++i) {
    names.push_back(old[i] ? old[i]->name() : "");
    if (!old[i]) continue;
    rebuilt->output(i)->type = old[i]->type;
    rebuilt->output(i)->doc_string = old[i]->doc_string;
    g.replaceAllUsesWith(old[i], rebuilt->output(i));
  }
  for (size_t i = old.size(); i < rebuilt->numOutputs(); ++i)
    rebuilt->output(i)->type = rebuilt->output(0)->type;
  const std::string node_name = n.name();
  g.eraseNode(&n);
  for (size_t i = 0; i < names.size(); ++i)
    if (!names[i].empty() && rebuilt->output(i)->name() != names[i])
      g.renameValue(rebuilt->output(i), names[i]);
  if (!node_name.empty()) g.renameNode(rebuilt, node_name);
}

// Gives `n` the op type `name` and exactly the inputs its function takes: a spelled node lists
// no omitted input (X, W, Z for _NoBias_Add), since ONNX 1.12 cannot bind an omitted input of a
// function call.
void respell(Node& n, const std::string& name, const Variant& v) {
  const FusedOperandSlots slots = *fusedOperandSlots(n.opType());
  std::vector<Value*> inputs = {n.input(0), n.input(1)};
  if (v.bias) inputs.push_back(n.input(*slots.bias));
  if (v.residual) inputs.push_back(n.input(*slots.residual));
  if (inputs == n.inputs()) {
    if (n.opType() != name) n.graph()->setOpType(&n, name, std::string(kFusectlDomain));
    return;
  }
  rebuild(n, name, std::move(inputs));
}

// A composite op's node with fewer outputs than the op declares gets the rest, named after its
// output 0 and unread: a function call must name every output of the function (libonnx 1.12's
// checker), and SkipLayerNorm's body returns Sum even where nothing reads it.
void nameEveryOutput(Node& n, const FusedOpInfo& op) {
  if (n.numOutputs() >= op.outputs.size()) return;
  std::vector<std::string> extra;
  for (size_t i = n.numOutputs(); i < op.outputs.size(); ++i)
    extra.push_back(fmt::format("{}_{}", n.output(0)->name(), op.outputs[i].name));
  rebuild(n, n.opType(), n.inputs(), extra);
}

// Writes the activation's parameters on the node in full (defaults for those it leaves out),
// and below opset 12 also as the tensor the body's Constant reads.
void makeParamsExplicit(Node& n, Activation act, int64_t opset,
                        const std::string& attribute = "activation_params") {
  const ActivationInfo& info = activationInfo(act);
  if (info.num_params == 0) return;
  std::vector<float> params = n.attrFloats(attribute);
  for (size_t i = params.size(); i < info.num_params; ++i) params.push_back(info.defaults[i]);
  params.resize(info.num_params);
  n.setAttr(Attribute::ofFloats(attribute, params));
  if (opset < 12) {
    n.setAttr(Attribute::ofTensor(
        attribute + "_tensor",
        Tensor::fromValues(DType::Float, {static_cast<int64_t>(info.num_params)}, params)));
  }
}

// Below opset 12 a body's Constant has only `value`, so bodies read the call's scalar
// attributes (readsTensorTwin: the norms' epsilon, Attention's scale and causal, the packed
// attention's head counts) from tensor twins written here; epsilon gets the kernels' default
// where the call has none.
void writeTensorTwins(Node& n, const FusedOpInfo& op) {
  for (const FusedOpAttribute& a : op.attributes) {
    if (!readsTensorTwin(a.name)) continue;
    const std::string name(a.name);
    const std::string twin = name + "_tensor";
    if (a.kind == AttrKind::Float && (name == "epsilon" || n.attr(name))) {
      const float value = n.attrFloat(name, 1e-5f);
      n.setAttr(Attribute::ofFloat(name, value));
      n.setAttr(Attribute::ofTensor(twin, Tensor::fromValues(DType::Float, {},
                                                             std::vector<float>{value})));
    } else if (a.kind == AttrKind::Int && n.attr(name)) {
      n.setAttr(Attribute::ofTensor(
          twin, Tensor::fromValues(DType::Int64, {}, std::vector<int64_t>{n.attrInt(name, 0)})));
    }
  }
}

// The element type a fusectl node's values are typed with: output 0's, else input 0's (both are
// T); nullopt when neither is typed.
std::optional<DType> typedElementType(const Node& n) {
  for (const Value* v : {n.output(0), n.input(0)})
    if (v && v->dtype() != DType::Undefined) return v->dtype();
  return std::nullopt;
}

// The element type a fusectl node computes in: typedElementType, else the one its spelling's
// suffix names (a model without types); float32 when nothing says.
DType elementType(const Node& n) {
  if (const std::optional<DType> typed = typedElementType(n)) return *typed;
  return fusedSpellingDType(n.opType()).value_or(DType::Float);
}

// A half function Casts to and from float32: float16 is a Cast type from opset 6, bfloat16 from
// opset 13.
void requireCastOpset(const Node& n, DType dtype, int64_t opset) {
  const int64_t since = dtype == DType::BFloat16 ? 13 : dtype == DType::Float16 ? 6 : 0;
  if (opset >= since) return;
  throwUnsupported(fmt::format("{}: the function of a {} fusectl node Casts its {} values, "
                               "which needs opset {}; the model imports {}",
                               n.label(), dtypeName(dtype), dtypeName(dtype), since, opset));
}

// The formal parameters of `op` of type T: those a half function Casts.
std::vector<std::string> typedParameters(const FusedOpInfo& op) {
  std::vector<std::string> names;
  for (const FusedOpInput& in : op.inputs)
    if (in.type == "T") names.emplace_back(in.name);
  for (const FusedOpOutput& out : op.outputs)
    if (out.type == "T") names.emplace_back(out.name);
  return names;
}

// The function `name` of a dtype-suffixed spelling: the float32 function between Casts.
std::string castWrapped(const std::string& float32_function, const std::string& name,
                        const std::string& float32_name, DType dtype, const FusedOpInfo& op) {
  return castWrappedFunction(
      float32_function, name, dtype, typedParameters(op),
      fmt::format("fusectl {}: {} in float32, the inputs Cast from {} and the outputs back; see "
                  "docs/ops.md",
                  name, float32_name, dtypeName(dtype)));
}

}  // namespace

std::string fusedOpSpelling(const Node& node) {
  std::optional<FusedSpelling> s = decodeFusedSpelling(node.opType());
  if (!s) throwInvalid(fmt::format("{}: {} is not a fused op with an epilogue", node.label(),
                                   node.opType()));
  return fusedDTypeSpelling(spelling(variantOf(node, *s)), elementType(node));
}

namespace {

// Renames a spelled fusectl node back to the op it spells, as the passes write it: the base op,
// its dtype suffix dropped, an epilogue op's bias and residual at inputs 2 and 3. False for a
// node that is no spelling, and for one whose attributes contradict its name or whose values'
// types contradict its suffix (left as they are: the schema check reports those).
bool unspell(Node& n) {
  std::string_view float32_spelling = n.opType();
  if (const std::optional<DType> dtype = fusedSpellingDType(n.opType())) {
    // The suffix is the only record of the element type where no value is typed.
    if (typedElementType(n) != dtype) return false;
    float32_spelling.remove_suffix(dtypeName(*dtype).size() + 1);
  }
  auto activationIs = [&](const std::string& attribute, Activation a) {
    std::optional<Activation> named = parseActivation(n.attrString(attribute, ""));
    return named && *named == a;
  };
  std::string base;
  if (fusedOpBaseName(float32_spelling) == "Elementwise" && float32_spelling != "Elementwise") {
    if (elementwiseSpelling(n.attrString("program", "")) != float32_spelling) return false;
    base = "Elementwise";
  } else if (auto pair = decodeExpandDepthwiseSpelling(float32_spelling)) {
    if (!activationIs("expand_activation", pair->first) ||
        !activationIs("activation", pair->second))
      return false;
    base = "ExpandDepthwiseConv";
  } else if (auto act = decodeGroupNormSpelling(float32_spelling)) {
    if (!activationIs("activation", *act)) return false;
    base = "GroupNorm";
  } else if (auto s = decodeFusedSpelling(float32_spelling)) {
    if (s->plain) {
      base = std::string(s->op->name);
    } else {
      const FusedOperandSlots slots = *fusedOperandSlots(float32_spelling);
      if (n.numInputs() != slots.exact_inputs || !activationIs("activation", s->activation))
        return false;
      std::vector<Value*> inputs = {n.input(0), n.input(1),
                                    slots.bias ? n.input(*slots.bias) : nullptr,
                                    slots.residual ? n.input(*slots.residual) : nullptr};
      while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
      rebuild(n, std::string(s->op->name), std::move(inputs));
      return true;
    }
  } else if (findFusedOp(float32_spelling)) {
    base = std::string(float32_spelling);
  } else {
    return false;
  }
  if (base == n.opType()) return false;
  n.graph()->setOpType(&n, base, std::string(kFusectlDomain));
  return true;
}

// Adds to `called` the op type of every fusectl-domain node of `g` and its subgraphs: the
// functions the model still needs.
void collectCalledFusectlOps(const Graph& g, std::set<std::string>& called) {
  for (const Node* n : g.nodes()) {
    if (n->domain() == kFusectlDomain) called.insert(n->opType());
    for (const Attribute& a : n->attributes()) {
      if (a.g) collectCalledFusectlOps(*a.g, called);
      for (const auto& sub : a.graphs)
        if (sub) collectCalledFusectlOps(*sub, called);
    }
  }
}

}  // namespace

size_t unspellFusectlNodes(Model& model) {
  size_t renamed = 0;
  forEachNode(*model.graph, [&](Node& n) {
    if (n.domain() == kFusectlDomain && unspell(n)) ++renamed;
  });
  return renamed;
}

void attachFusectlFunctions(Model& model) {
  const int64_t opset = model.opsetVersion("");
  std::set<std::pair<std::string, std::string>> defined;  // (domain, name) in model.functions
  for (const std::string& bytes : model.functions)
    if (auto id = functionIdOf(bytes)) defined.insert(*id);

  // A function to add: the op, its float32 spelling and the element type of its calls. An
  // activation or composite op has no Variant.
  struct Needed {
    const FusedOpInfo* op = nullptr;
    std::optional<Variant> variant;
    std::string float32_name;
    DType dtype = DType::Float;
  };
  // Sorted: functions are appended in name order.
  std::map<std::string, Needed> needed;
  auto requireOpset = [&] {
    if (opset <= 0) {
      throwUnsupported("the model imports no default-domain opset; the fusectl functions need "
                       "one");
    }
  };
  // Elementwise spellings, one function per distinct program and element type (parsed once,
  // when first seen).
  struct SpelledProgram {
    std::string text;
    size_t inputs = 0;
    ElementwiseProgram program;
    std::string float32_name;
    DType dtype = DType::Float;
  };
  std::map<std::string, SpelledProgram> programs;
  // Composite ops spelled by their activations (fused_ops.h): ExpandDepthwiseConv by its pair,
  // a GroupNorm that has one by it. One function per spelling and element type.
  struct SpelledByActivation {
    const FusedOpInfo* op = nullptr;
    Activation expand = Activation::None;  // ExpandDepthwiseConv's expansion
    Activation activation = Activation::None;
    std::string float32_name;
    DType dtype = DType::Float;
  };
  std::map<std::string, SpelledByActivation> by_activation;
  forEachNode(*model.graph, [&](Node& n) {
    if (n.domain() != kFusectlDomain) return;
    const DType dtype = elementType(n);
    if (fusedOpBaseName(n.opType()) == "Elementwise") {
      requireOpset();
      requireCastOpset(n, dtype, opset);
      const std::string text = n.attrString("program", "");
      const std::string float32_name = elementwiseSpelling(text);
      const std::string name = fusedDTypeSpelling(float32_name, dtype);
      auto it = programs.find(name);
      if (it == programs.end()) {
        programs.emplace(name, SpelledProgram{text, n.numInputs(),
                                              ElementwiseProgram::parse(text, n.numInputs()),
                                              float32_name, dtype});
      } else if (it->second.text != text || it->second.inputs != n.numInputs()) {
        throwUnsupported(fmt::format(
            "{}: programs '{}' and '{}' (or their input counts) share the function name {}",
            n.label(), text, it->second.text, name));
      }
      if (n.opType() != name) n.graph()->setOpType(&n, name, std::string(kFusectlDomain));
      return;
    }
    const std::string_view base = fusedOpBaseName(n.opType());
    const bool pair = base == "ExpandDepthwiseConv";
    // A GroupNorm without an activation keeps its plain function, below.
    if (pair || (base == "GroupNorm" && nodeActivation(n, "activation") != Activation::None)) {
      requireOpset();
      requireCastOpset(n, dtype, opset);
      const Activation expand = pair ? nodeActivation(n, "expand_activation") : Activation::None;
      const Activation act = nodeActivation(n, "activation");
      makeParamsExplicit(n, expand, opset, "expand_activation_params");
      makeParamsExplicit(n, act, opset);
      const std::string float32_name =
          pair ? expandDepthwiseSpelling(expand, act) : groupNormSpelling(act);
      const std::string name = fusedDTypeSpelling(float32_name, dtype);
      by_activation.emplace(name, SpelledByActivation{findFusedOp(base), expand, act,
                                                      float32_name, dtype});
      if (n.opType() != name) n.graph()->setOpType(&n, name, std::string(kFusectlDomain));
      return;
    }
    const FusedOpInfo* op = findFusedOp(fusedOpBaseName(n.opType()));
    if (op && !op->takesEpilogue()) {
      requireOpset();
      requireCastOpset(n, dtype, opset);
      if (opset < 12) writeTensorTwins(n, *op);
      const std::string name = fusedDTypeSpelling(op->name, dtype);
      needed.emplace(name, Needed{op, std::nullopt, std::string(op->name), dtype});
      if (n.opType() != name) n.graph()->setOpType(&n, name, std::string(kFusectlDomain));
      if (op->isComposite()) nameEveryOutput(n, *op);  // last: it replaces n
      return;
    }
    std::optional<FusedSpelling> s = decodeFusedSpelling(n.opType());
    if (!s) {
      if (!defined.count({n.domain(), n.opType()})) {
        throwUnsupported(fmt::format("{}: no portable ONNX function is known for fusectl::{}",
                                     n.label(), n.opType()));
      }
      return;
    }
    requireOpset();
    requireCastOpset(n, dtype, opset);
    Variant v = variantOf(n, *s);
    makeParamsExplicit(n, v.activation, opset);
    const std::string float32_name = spelling(v);
    const std::string name = fusedDTypeSpelling(float32_name, dtype);
    needed.emplace(name, Needed{v.op, v, float32_name, dtype});
    respell(n, name, v);  // last: it may replace n
  });

  for (const auto& [name, need] : needed) {
    if (defined.count({std::string(kFusectlDomain), name})) continue;
    const FusedOpInfo& op = *need.op;
    std::string function;
    if (need.variant) {
      function = buildEpilogueFunction(need.float32_name, *need.variant, opset);
    } else if (!op.isComposite()) {
      function = buildActivationFunction(op, opset);
    } else {
      CompositeBodyBuilder build = findCompositeBodyBuilder(op.name);
      if (!build) {
        throwUnsupported(
            fmt::format("no portable ONNX function is known for fusectl::{}", op.name));
      }
      function = build(op, opset);
    }
    if (name != need.float32_name)
      function = castWrapped(function, name, need.float32_name, need.dtype, op);
    model.functions.push_back(std::move(function));
  }
  for (const auto& [name, p] : programs) {
    if (defined.count({std::string(kFusectlDomain), name})) continue;
    std::string function = buildElementwiseFunction(p.float32_name, p.program, p.inputs, opset);
    if (name != p.float32_name) {
      function = castWrapped(function, name, p.float32_name, p.dtype,
                             *findFusedOp("Elementwise"));
    }
    model.functions.push_back(std::move(function));
  }
  for (const auto& [name, a] : by_activation) {
    if (defined.count({std::string(kFusectlDomain), name})) continue;
    std::string function =
        a.op->name == "GroupNorm"
            ? buildGroupNormFunctionWith(a.float32_name, a.activation, opset)
            : buildExpandDepthwiseFunction(a.float32_name, a.expand, a.activation, opset);
    if (name != a.float32_name)
      function = castWrapped(function, name, a.float32_name, a.dtype, *a.op);
    model.functions.push_back(std::move(function));
  }
  // A function no node calls any more (a saved model's, after the passes replaced its nodes)
  // goes: the output is then what optimizing the original gives.
  std::set<std::string> called;
  collectCalledFusectlOps(*model.graph, called);
  model.functions.erase(
      std::remove_if(model.functions.begin(), model.functions.end(),
                     [&](const std::string& bytes) {
                       const auto id = functionIdOf(bytes);
                       return id && id->first == kFusectlDomain && !called.count(id->second);
                     }),
      model.functions.end());
  if (!needed.empty() || !programs.empty() || !by_activation.empty()) {
    if (model.opsetVersion(kFusectlDomain) == 0) model.setOpsetVersion(kFusectlDomain, 1);
    if (model.ir_version < 8) model.ir_version = 8;
  }
}

}  // namespace fusectl
