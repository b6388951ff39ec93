// fuse-rms-norm: recognise the root-mean-square norm of T5, LLaMA, Qwen and Gemma exports and
// replace the chain by one fusectl::RMSNorm.
//
//   v = ReduceMean(Mul(x, x))
//   n = Div(x, Sqrt(Add(v, eps)))  or  Mul(x, Reciprocal(Sqrt(Add(v, eps))))
//   y = Mul(n, scale)                    =>   y = fusectl::RMSNorm(x, scale, axis, epsilon)
// i.e. y = x / sqrt(mean(x^2) + eps) * scale over the reduced axes. The forms are canonicalize's
// (Pow(x, 2) becomes Mul(x, x), every reciprocal square root one of the two spellings); the scale
// is optional (a weight-free norm gets a Scale of [1] holding 1). Gemma's (1 + w) weight is an
// ordinary constant once canonicalize has folded it.
//
// fp16 exports (HF LLaMA, Qwen) wrap the norm in Casts: x16 -> Cast(float) -> norm -> Cast(fp16)
// -> Mul(w16, .). The float chain between the Casts fuses (as a weight-free RMSNorm when the
// weight is applied in fp16 after the Cast back); the Casts and the fp16 Mul stay, so the
// rounding points of the original are kept exactly.
//
// ONNX's own RMSNormalization (opset 23) is not written: libonnx 1.12, which checks and writes
// the models, does not know it, so fusectl::RMSNorm is written at every opset.
//
// Conditions, each failure reported with its reason:
//  1. The ReduceMean reduces the trailing axes of x (keepdims on, axes constant); x's
//     normalised dims are static.
//  2. epsilon is a one-element float constant.
//  3. The scale is a constant of x's dtype that broadcasts over the normalised axes only (else it stays
//     outside and the weight-free form fuses).
//  4. Every intermediate is read only inside the chain and is no graph output.
//  5. The chain computes in one dtype: float32, or float16/bfloat16 (a half chain without the
//     Casts becomes a half node that computes in float32 and rounds once).
#include <fmt/format.h>

#include "fusectl/passes/rewriter.h"
#include "norm_patterns.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

struct Form {
  bool reciprocal;
  bool scale;
};

constexpr Form kForms[] = {{false, true}, {true, true}, {false, false}, {true, false}};

std::string formName(const Form& f) {
  return fmt::format("rms-norm-{}{}", f.reciprocal ? "reciprocal" : "div",
                     f.scale ? "" : "-no-scale");
}

Pattern buildPattern(const Form& f) {
  using namespace constraints;
  const std::string root = "s:Sqrt(ve:Add(^v:ReduceMean(sq:Mul($x, $x)), $eps))";
  std::string text = f.reciprocal ? "n:Mul($x, r:Reciprocal(" + root + "))"
                                  : "n:Div($x, " + root + ")";
  if (f.scale) text = "g:Mul(" + text + ", $scale)";
  Pattern p = Pattern::parse(text, formName(f));
  p.producing({"fusectl::RMSNorm"});
  std::vector<std::string> nodes = {"sq", "v", "ve", "s", "n"};
  if (f.reciprocal) nodes.push_back("r");
  if (f.scale) nodes.push_back("g");
  p.require(floatChain(nodes));
  p.require(trailingReduceAxes({"v"}, "x")).require(constantEpsilon("eps", "ve"));
  if (f.scale) p.require(rowParameter("scale", "g", "v", "x", "scale"));
  for (const std::string& c : nodes)
    if (c != (f.scale ? "g" : "n")) p.require(uniqueConsumer(c));
  return p;
}

class FuseRmsNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseRmsNormPassInfo; }

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
    const NormGeometry g = *normGeometry(*m.get("v"), *x, checked);
    Node* last = m.get(f.scale ? "g" : "n");
    Value* scale = nullptr;
    if (f.scale && m.value("scale")->initializer()->dims() == g.dims) {
      scale = m.value("scale");
    } else if (f.scale) {
      scale = rw.addConstant(last->output(0)->name() + "_scale",
                             rowTensor(*m.value("scale")->initializer(), g.dims));
    } else {
      scale = rw.addConstant(last->output(0)->name() + "_unit_scale",
                             filledTensor(x->dtype(), {1}, 1.f));
    }
    NewNode node;
    node.op_type = "RMSNorm";
    node.domain = "fusectl";
    node.inputs = {x, scale};
    node.attributes = {Attribute::ofInt("axis", g.axis),
                       Attribute::ofFloat("epsilon", scalarValue(*m.value("eps")))};
    node.name = last->name();
    rw.replaceMatch(pattern.name, m, last->output(0), std::move(node));
    rw.context().count(f.scale ? "fused_rms_norm" : "fused_weight_free_rms_norm");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseRmsNormPass() { return std::make_unique<FuseRmsNormPass>(); }

}  // namespace fusectl::passes
