// The fusectl operators (domain "fusectl"): the typed view of fused_ops.def, their portable
// spellings, and the ONNX functions that define them in a saved model.
//
// Kernels register under the names forEachFusedSpelling gives and find their bias and residual
// with fusedOperandSlots; fusion passes take their activations and op classes from here and
// op_classes.h; shape inference registers each op's FusedShapeRule; `fusectl ops` and
// docs/ops.md (fusedOpsMarkdown) print the table. Adding an op is one fused_ops.def entry plus
// its kernel.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/attribute.h"
#include "fusectl/graph/dtype.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/op_classes.h"

namespace fusectl {

inline constexpr std::string_view kFusectlDomain = "fusectl";

// What a fused epilogue applies to its output (fused_ops.def, FUSECTL_ACTIVATION).
enum class Activation : uint8_t {
  None,
#define FUSECTL_ACTIVATION(Name, ...) Name,
#include "fusectl/graph/fused_ops.def"
};

struct ActivationInfo {
  Activation activation = Activation::None;
  std::string_view name;  // the `activation` attribute value; "" for None
  size_t num_params = 0;  // length of `activation_params`
  std::array<float, 2> defaults{};  // the parameters a node leaves out
  std::string_view computes;        // formula in y, for docs
  std::string_view params_doc;
  bool onnx_op = false;  // a standard ONNX op of this name computes it
  std::string_view body_doc;
};

// Every activation in enum order, None first.
const std::vector<ActivationInfo>& allActivations();
const ActivationInfo& activationInfo(Activation a);
inline std::string_view activationName(Activation a) { return activationInfo(a).name; }
// The activation an `activation` attribute names: "", "None" and "Identity" are None; nullopt
// for an unknown name.
std::optional<Activation> parseActivation(std::string_view name);

// How shape inference types an op's output.
enum class FusedShapeRule : uint8_t {
  None,         // no rule: the pass that writes the node gives it the replaced output's type
  SameAsInput,  // Y has X's type and shape
};

// What kind of op a fused_ops.def entry is, which decides how it is exported and documented.
enum class FusedOpKind : uint8_t {
  Epilogue,    // FusedConv, FusedGemm: a compute op plus bias, residual and activation
  Activation,  // one activation applied to its input (fusectl::Gelu)
  Composite,   // anything else, with a function body of its own (fused_ops_composite.cpp)
};

struct FusedOpInput {
  std::string_view name;
  std::string_view type;  // "T"
  bool optional = false;
  std::string_view description;  // Markdown
};

struct FusedOpAttribute {
  std::string_view name;
  AttrKind kind = AttrKind::Undefined;
  bool by_reference = false;  // passed on to the compute op by the function body
};

// An output of a fusectl op; a node may leave off optional outputs at the end.
using FusedOpOutput = FusedOpInput;

struct FusedOpInfo {
  std::string_view name;  // op type in kFusectlDomain
  FusedOpKind kind = FusedOpKind::Epilogue;
  OpClass op_class = OpClass::Opaque;
  std::string_view formula;  // "Y = ..."
  // The standard op whose output the epilogue (bias, residual, activation) is applied to, "Conv"
  // or "Gemm"; "" for an op that applies one activation to its input.
  std::string_view compute;
  std::vector<FusedOpInput> inputs;
  std::vector<FusedOpOutput> outputs;  // epilogue and activation ops have one, `Y`
  // An epilogue op's: the compute op's (by reference), then the epilogue's. A composite op's:
  // its own.
  std::vector<FusedOpAttribute> attributes;
  std::vector<Activation> epilogue_activations;  // what an epilogue op may apply (not None)
  Activation activation = Activation::None;  // what an activation op computes
  FusedShapeRule shape_rule = FusedShapeRule::None;
  std::string_view notes;  // Markdown for docs/ops.md

  bool takesEpilogue() const { return kind == FusedOpKind::Epilogue; }
  bool isComposite() const { return kind == FusedOpKind::Composite; }
};

// The ops in fused_ops.def order.
const std::vector<FusedOpInfo>& allFusedOps();
// The op of that exact name (a spelling such as "FusedConv_Relu" is not one; see
// decodeFusedSpelling), or nullptr.
const FusedOpInfo* findFusedOp(std::string_view op_type);

// ---- Portable spellings of the epilogue ops ----
//
// A model-local ONNX function cannot branch on an attribute or on a missing input, so on export
// (attachFusectlFunctions) each FusedConv/FusedGemm is renamed to the spelling of what it
// computes, <base>[_NoBias][_Add][_<activation>] ("FusedConv_Add_Relu", "FusedGemm_Silu"), and
// gets a function of that name; the kernels are registered under every spelling.

struct FusedSpelling {
  const FusedOpInfo* op = nullptr;  // the base
  bool bias = true;
  bool residual = false;
  Activation activation = Activation::None;
  // The bare base name: it says nothing of the node's bias and residual, which are then
  // whichever of inputs 2 and 3 are present (and the fields above are the spelling's defaults).
  bool plain = false;
};

std::string fusedSpellingName(std::string_view base, bool bias, bool residual, Activation act);
// The spelling of an epilogue op's name, or nullopt (another op, an unknown suffix, suffixes out
// of order). A dtype suffix ("FusedConv_Add_Relu_float16", fusedSpellingDType) changes nothing
// here: it reads as the spelling before it.
std::optional<FusedSpelling> decodeFusedSpelling(std::string_view op_type);

// Calls fn(name) for every name a node of the epilogue op `base` can have: `base` itself and
// each spelling.
template <typename Fn>
void forEachFusedSpelling(std::string_view base, Fn&& fn) {
  const FusedOpInfo* op = findFusedOp(base);
  if (!op) return;
  for (bool bias : {true, false}) {
    for (bool residual : {false, true}) {
      fn(fusedSpellingName(base, bias, residual, Activation::None));
      for (Activation a : op->epilogue_activations)
        fn(fusedSpellingName(base, bias, residual, a));
    }
  }
}

// Where a node of an epilogue op (any spelling) takes its bias and residual. The plain base
// name has them at inputs 2 and 3, either one omitted; a spelling lists exactly the inputs its
// function takes, without gaps (an ONNX function cannot take an omitted input), so
// "..._NoBias_Add" has Z at input 2.
struct FusedOperandSlots {
  std::optional<size_t> bias;
  std::optional<size_t> residual;
  size_t exact_inputs = 0;  // a spelling takes exactly this many inputs, none omitted; 0: plain
};
std::optional<FusedOperandSlots> fusedOperandSlots(std::string_view op_type);

// ---- fusectl::Elementwise's spellings ----
//
// Each Elementwise node computes its own `program`, and a function body cannot depend on an
// attribute, so on export each distinct program gets a function of its own, named
// "Elementwise_" + 16 hex digits of the program text's 64-bit FNV-1a hash (the same program,
// the same name, in every model). Kernels, shape inference and the schema check read such a
// node as Elementwise (fusedOpBaseName).
std::string elementwiseSpelling(std::string_view program);
// ---- fusectl::ExpandDepthwiseConv's spellings ----
//
// Its two activations (the expansion's and the depthwise convolution's) are attributes, which a
// function body cannot branch on either, so on export each pair gets a function of its own:
// "ExpandDepthwiseConv_<expand activation>_<activation>", "None" for none
// ("ExpandDepthwiseConv_Clip_Clip", "ExpandDepthwiseConv_Silu_None"). Kernels, shape inference
// and the schema check read such a node as ExpandDepthwiseConv (fusedOpBaseName).
std::string expandDepthwiseSpelling(Activation expand_activation, Activation activation);
// The (expand activation, activation) pair a spelling names, or nullopt for another name.
std::optional<std::pair<Activation, Activation>> decodeExpandDepthwiseSpelling(
    std::string_view op_type);

// ---- fusectl::GroupNorm's spellings ----
//
// A GroupNorm with an activation (fuse-epilogue takes the one after it) is spelled
// "GroupNorm_<activation>" on export ("GroupNorm_Silu"), its function the GroupNorm body and
// the activation; one without keeps the name GroupNorm. Read as GroupNorm by fusedOpBaseName.
std::string groupNormSpelling(Activation activation);
// The activation a GroupNorm spelling names, or nullopt for another name ("GroupNorm" itself
// included).
std::optional<Activation> decodeGroupNormSpelling(std::string_view op_type);

// The op a spelling names, for the kernel registry, shape inference and the schema check:
// "Elementwise" for an Elementwise spelling (with or without a dtype suffix),
// "ExpandDepthwiseConv" for one of its activation pairs, "GroupNorm" for "GroupNorm_Silu", the
// float32
// spelling for one with a dtype suffix ("FusedConv_Add_Relu_float16" -> "FusedConv_Add_Relu",
// "LayerNorm_bfloat16" -> "LayerNorm"); `op_type` itself otherwise.
std::string_view fusedOpBaseName(std::string_view op_type);

// ---- Spellings of float16 and bfloat16 nodes ----
//
// A function body is typed by its Constants, so one body cannot serve every element type. The
// bodies compute in float32; a node whose element type (output 0's, T) is float16 or bfloat16 is
// spelled on export as its float32 spelling + "_" + dtypeName ("LayerNorm_float16",
// "FusedGemm_Add_Relu_bfloat16", "Elementwise_<hash>_float16"), and that function is the float32
// one with every input Cast to float32 on entry and every output Cast back on exit: what the
// kernels compute (float32 arithmetic, the output rounded once). float32 and double nodes have no
// suffix.

// The element type a spelling's suffix names (Float16 or BFloat16); nullopt when it has none or
// is no fusectl spelling.
std::optional<DType> fusedSpellingDType(std::string_view op_type);
// The spelling of a node of element type `dtype` whose float32 spelling is `float32_spelling`.
std::string fusedDTypeSpelling(std::string_view float32_spelling, DType dtype);

// ---- ONNX functions (fused_ops_functions.cpp) ----

// For every fusectl op used in the main graph or any subgraph: renames FusedConv/FusedGemm
// nodes to their spelling and float16/bfloat16 nodes to their dtype-suffixed spelling (whose
// functions Cast to float32 and back), makes epilogue nodes' activation_params explicit (and,
// below opset 12, mirrors them in a tensor attribute `activation_params_tensor` that the
// function reads), and appends the missing functions to model.functions sorted by name. Adds the
// imports the functions need ("fusectl": 1; the default domain is the model's) and raises
// ir_version to 8 (model-local functions). Idempotent: a second call changes nothing. Throws
// fusectl::Error(Unsupported) for a fusectl op it cannot define and the model does not define
// either, for a model without a default-domain opset import, or for a bfloat16 node below
// opset 13 (float16 below 6), where Cast does not take the type. Functions of the fusectl domain
// that no node calls any more are dropped. PassManager::run calls it.
void attachFusectlFunctions(Model& model);

// The inverse of attachFusectlFunctions's renaming, for a model saved by fusectl: each spelled
// fusectl node (main graph and subgraphs) gets back the op name the passes match on
// ("FusedConv_NoBias_Add_Relu" -> FusedConv with its residual at input 3, "LayerNorm_float16"
// -> LayerNorm, "Elementwise_<hash>" -> Elementwise, "GroupNorm_Silu" -> GroupNorm). A node
// whose attributes or value types contradict its spelling keeps it. The model's functions stay;
// attachFusectlFunctions reuses those still called and drops the others. Returns the number of
// nodes renamed. PassManager::run calls it before the first pass.
size_t unspellFusectlNodes(Model& model);

// True when fused_ops_composite.cpp has a function body for the composite op `op_type`
// (tests hold that every composite op has one).
bool hasCompositeFunctionBody(std::string_view op_type);

// The spelling attachFusectlFunctions gives a FusedConv/FusedGemm node (any of its spellings),
// e.g. "FusedConv_Add_Relu" ("FusedConv_Add_Relu_float16" for a float16 node); throws
// fusectl::Error(InvalidInput) for an unknown activation.
std::string fusedOpSpelling(const Node& node);

// The generated part of docs/ops.md (fused_ops_markdown.cpp); `fusectl ops --markdown`.
std::string fusedOpsMarkdown();

}  // namespace fusectl
