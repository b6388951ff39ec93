// fuse-layer-norm: recognise LayerNorm written as its arithmetic (every PyTorch export before
// opset 17) and replace the chain by one node: the standard LayerNormalization from opset 17,
// fusectl::LayerNorm (the same op, with a function body) below it.
//
//   m = ReduceMean(x)           d = Sub(x, m)          v = ReduceMean(Mul(d, d))
//   n = Div(d, Sqrt(Add(v, eps)))  or  Mul(d, Reciprocal(Sqrt(Add(v, eps))))
//   y = Add(Mul(n, scale), bias)        =>   y = LayerNormalization(x, scale, bias,
//                                                     axis = rank - #axes, epsilon = eps)
// i.e. y = (x - mean) / sqrt(var + eps) * scale + bias over the reduced axes. The forms are the
// canonical ones (canonicalize turns Pow(d, 2) into Mul(d, d) and every reciprocal square root
// into one of the two spellings above); the affine tail is optional: with a scale only, or with
// neither (then scale is ones; the standard op leaves bias out, fusectl::LayerNorm gets zeros).
// The most complete form is tried first at each anchor (the first ReduceMean).
//
// Conditions, each failure reported with its reason:
//  1. Both ReduceMeans reduce the same axes, and they are the trailing axes of x (keepdims on,
//     axes constant, attribute or input); x's normalised dims are static.
//  2. epsilon is a one-element float constant.
//  3. scale and bias are float constants that broadcast over the normalised axes only, so the
//     output keeps x's shape (they are written out at exactly the normalised shape). A scale or
//     bias that fails this is left outside: the next form without it fuses the rest.
//  4. Every intermediate is read only inside the chain and is no graph output (d by its square
//     and the division).
//  5. The chain computes in one dtype, float32, float16 or bfloat16 (fusibleFloatTypes), and the
//     scale and bias are of that dtype. A float16 chain becomes a float16 node: fusectl's
//     LayerNorm computes in float32 and rounds once; the standard LayerNormalization (stash_type
//     1) computes the statistics in float32 and, by its function body, rounds the normalised
//     value to float16 before the scale and the bias. Either is within the chain's own roundings
//     of it. An fp16 export that wraps its norms in Casts to float leaves a float32 chain: that
//     fuses and the Casts stay.
#include <fmt/format.h>

#include "fusectl/passes/rewriter.h"
#include "norm_patterns.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

enum class Affine { ScaleAndBias, Scale, None };

struct Form {
  bool reciprocal;
  Affine affine;
};

// Most complete first: applyPatterns rewrites the first form that matches.
constexpr Form kForms[] = {{false, Affine::ScaleAndBias}, {true, Affine::ScaleAndBias},
                           {false, Affine::Scale},        {true, Affine::Scale},
                           {false, Affine::None},         {true, Affine::None}};

std::string formName(const Form& f) {
  const char* affine = f.affine == Affine::ScaleAndBias ? "" : f.affine == Affine::Scale ? "-no-bias" : "-no-affine";
  return fmt::format("layer-norm-{}{}", f.reciprocal ? "reciprocal" : "div", affine);
}

// The capture whose output the fused node replaces.
const char* lastCapture(Affine a) {
  return a == Affine::ScaleAndBias ? "b" : a == Affine::Scale ? "g" : "n";
}

Pattern buildPattern(const Form& f) {
  using namespace constraints;
  const std::string variance = "s:Sqrt(ve:Add(v:ReduceMean(sq:Mul(d, d)), $eps))";
  std::string text = f.reciprocal
                         ? "n:Mul(d:Sub($x, ^m:ReduceMean($x)), r:Reciprocal(" + variance + "))"
                         : "n:Div(d:Sub($x, ^m:ReduceMean($x)), " + variance + ")";
  if (f.affine != Affine::None) text = "g:Mul(" + text + ", $scale)";
  if (f.affine == Affine::ScaleAndBias) text = "b:Add(" + text + ", $bias)";
  Pattern p = Pattern::parse(text, formName(f));
  p.producing({"LayerNormalization", "fusectl::LayerNorm"});
  std::vector<std::string> nodes = {"m", "d", "sq", "v", "ve", "s", "n"};
  if (f.reciprocal) nodes.push_back("r");
  if (f.affine != Affine::None) nodes.push_back("g");
  if (f.affine == Affine::ScaleAndBias) nodes.push_back("b");
  p.require(floatChain(nodes));
  p.require(trailingReduceAxes({"m", "v"}, "x")).require(constantEpsilon("eps", "ve"));
  if (f.affine != Affine::None) p.require(rowParameter("scale", "g", "m", "x", "scale"));
  if (f.affine == Affine::ScaleAndBias) p.require(rowParameter("bias", "b", "m", "x", "bias"));
  p.require(readOnlyBy("d", {"sq", "n"}));
  for (const std::string& c : nodes)
    if (c != "d" && c != lastCapture(f.affine)) p.require(uniqueConsumer(c));
  return p;
}

class FuseLayerNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseLayerNormPassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (const Form& f : kForms) out.push_back(buildPattern(f));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    return applyForms(graph, ctx, patterns(), kForms, fuse);
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& pattern, const Form& f, const Match& m) {
    Value* x = m.value("x");
    Why checked(false);  // trailingReduceAxes held
    const NormGeometry g = *normGeometry(*m.get("m"), *x, checked);
    Node* last = m.get(lastCapture(f.affine));
    const bool standard = rw.context().opset() >= 17;
    const std::string base = last->output(0)->name();

    // A parameter already of the normalised shape is read as it is; others are written out.
    auto parameter = [&](const char* leaf, const char* suffix, float fill) -> Value* {
      Value* p = leaf ? m.value(leaf) : nullptr;
      if (p && p->initializer()->dims() == g.dims) return p;
      Tensor t =
          p ? rowTensor(*p->initializer(), g.dims) : filledTensor(x->dtype(), g.dims, fill);
      return rw.addConstant(base + suffix, std::move(t));
    };
    NewNode node;
    node.op_type = standard ? "LayerNormalization" : "LayerNorm";
    node.domain = standard ? "" : "fusectl";
    Value* scale = parameter(f.affine != Affine::None ? "scale" : nullptr, "_scale", 1.f);
    node.inputs = {x, scale};
    if (f.affine == Affine::ScaleAndBias) {
      node.inputs.push_back(parameter("bias", "_bias", 0.f));
    } else if (!standard) {
      node.inputs.push_back(parameter(nullptr, "_bias", 0.f));
    }
    node.attributes = {Attribute::ofInt("axis", g.axis),
                       Attribute::ofFloat("epsilon", scalarValue(*m.value("eps")))};
    node.name = last->name();
    rw.replaceMatch(pattern.name, m, last->output(0), std::move(node));
    rw.context().count(standard ? "fused_standard_layer_norm" : "fused_fusectl_layer_norm");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseLayerNormPass() { return std::make_unique<FuseLayerNormPass>(); }

}  // namespace fusectl::passes
