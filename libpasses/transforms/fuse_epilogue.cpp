// fuse-epilogue: fold a residual Add and an activation after a Conv or Gemm into one
// fusectl-domain FusedConv / FusedGemm, whose kernel applies them to each output tile while it
// is still in cache (fusectl/kernels/epilogue.h); and the activation after a fusectl::GroupNorm
// into it (its `activation` attribute), applied to each channel as the norm writes it.
//
//   X, W, B -> Conv -> c ─┐
//              Z ───────> Add -> s -> act -> Y      =>   X, W, B, Z -> FusedConv -> Y
//
//   Y = act(Conv(X, W, B) + Z)          FusedConv <Conv's attributes, activation, activation_params>
//   Y = act(alpha*A'*B' + beta*C + Z)   FusedGemm <Gemm's attributes, activation, activation_params>
//
// Forms matched, longest first so a Conv takes the whole tail it can (each form is a pattern):
//   conv-add-silu   c -> add -> sig:Sigmoid -> mul:Mul, add -> mul   (SiLU written x*Sigmoid(x))
//   conv-add-act    c -> add -> act                                   (act: op_classes.h)
//   conv-add-gelu   c -> add -> act:fusectl::Gelu
//   conv-add-gelu-tanh  c -> add -> act:fusectl::GeluTanh
//   conv-silu       c -> sig:Sigmoid -> mul:Mul, c -> mul
//   conv-add        c -> add
//   conv-act        c -> act
//   conv-gelu       c -> act:fusectl::Gelu
//   conv-gelu-tanh  c -> act:fusectl::GeluTanh
//   group-norm-silu, group-norm-act, group-norm-gelu, group-norm-gelu-tanh
//                   the same activation forms after a fusectl::GroupNorm that has none yet
// (`conv` stands for Conv or Gemm; MatMul is not an anchor: FusedGemm is 2-D, and
// fuse-matmul-add turns a 2-D MatMul + bias into Gemm first.) If a longer form is illegal, a
// shorter one may still fuse: Conv -> Add -> Relu whose Add output has a second reader becomes
// FusedConv(+Z) -> Relu. Only constraint failures are reported as rejections; a Conv that is
// followed by something else is not a near miss of every form.
// Gelu spelled with Erf (x*0.5*(1+Erf(x/sqrt2))) is not matched here: fuse-gelu, which runs
// first at -O3, turns it into one Gelu (fusectl::Gelu before opset 20), which fuses here.
//
// Legality, checked in this order (each failure is a reported rejection):
//  1. Every intermediate (c, the Add's output before an activation, the Sigmoid's output)
//     is read by the fused nodes only and is not a graph output: it disappears.
//  2. Every tensor involved is float32, float16 or bfloat16 (fusibleFloatTypes): the kernels
//     compute in float32, so a half chain's roundings after the Conv and after each epilogue op
//     become one rounding of the result.
//  3. Residual: the Add's other input is not c itself, not a constant (a per-channel constant is
//     fuse-bias-add's job), and its shape is provably c's shape (Z is read without
//     broadcasting).
//  4. Activation parameters are constants: Clip's min/max (opset 6 attributes or opset 11+
//     constant scalar inputs), LeakyRelu's alpha, HardSigmoid's alpha/beta; a standard Gelu is
//     the exact one (approximate="none") or the tanh one (activation GeluTanh).
//  5. Activations with parameters need opset >= 8: the portable ONNX function that
//     fused_ops.h attaches on export applies them with broadcasting ops.
// The fused node always carries explicit activation_params for Clip (absent bounds become the
// element type's limits, fusectl/graph/clip_bounds.h), LeakyRelu and HardSigmoid.
// On the first fusion the model imports domain "fusectl" version 1. With --emit standard the
// PassManager skips this pass (its portability is Fusectl).
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "constant_math.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// The epilogue one match describes.
struct EpilogueSpec {
  Node* compute = nullptr;   // Conv or Gemm
  Node* add = nullptr;       // residual Add, or nullptr
  Value* residual = nullptr; // the Add's other input
  Node* act = nullptr;       // the activation node (the Mul for SiLU), or nullptr
  std::string activation;    // kernel name: "Relu", "Silu"...; "" for none
  std::vector<float> params;
  Value* output = nullptr;   // the last value of the chain: what the fused node replaces
};

// The Add input that is not c's output, or nullptr when both are (Add(c, c)).
Value* residualOf(Node* add, Node* c) {
  Value* co = c->output(0);
  if (add->numInputs() != 2) return nullptr;
  if (add->input(0) == co && add->input(1) != co) return add->input(1);
  if (add->input(1) == co && add->input(0) != co) return add->input(0);
  return nullptr;
}

Constraint residualLegal(std::string compute, std::string add) {
  return {"residual:" + add, [compute, add](const Match& m, Why& why) {
            Node* c = m.get(compute);
            Node* a = m.get(add);
            Value* z = residualOf(a, c);
            if (!z) {
              return why.fail(*a, [&] {
                return fmt::format("{} adds {} output to itself; there is no residual", a->label(),
                                   c->label());
              });
            }
            if (z->isConstant()) {
              return why.fail(*a, [&] {
                return fmt::format(
                    "{} residual '{}' is a constant (a per-channel constant is "
                    "fuse-bias-add's job)",
                    a->label(), z->name());
              });
            }
            Value* co = c->output(0);
            if (!dimsProvablyEqual(z->shape(), co->shape())) {
              return why.fail(*a, [&] {
                return fmt::format(
                    "{} residual '{}' has shape {}, not provably the shape {} of {} "
                    "output (the fused residual is not broadcast)",
                    a->label(), z->name(), z->shape().str(), co->shape().str(), c->label());
              });
            }
            return true;
          }};
}

// Fills spec.activation and spec.params from an activation node; false (with `why`, about
// `act`) when it cannot fuse.
bool readActivation(Node* act, int64_t opset, EpilogueSpec& spec, Why& why) {
  std::optional<EpilogueActivation> a = epilogueActivation(*act, opset, why);
  if (!a) return false;
  spec.activation = std::move(a->name);
  spec.params = std::move(a->params);
  return true;
}

Constraint activationLegal(std::string capture, int64_t opset) {
  return {"activation:" + capture, [capture, opset](const Match& m, Why& why) {
            Node* act = m.get(capture);
            if (!isEpilogueActivation(*act)) {
              return why.fail(*act, [&] {
                return fmt::format("{} is not an epilogue activation", act->label());
              });
            }
            EpilogueSpec spec;
            return readActivation(act, opset, spec, why);
          }};
}

// A GroupNorm that has not taken an activation already (an earlier round of this pass).
Constraint noActivationYet(std::string capture) {
  return {"no-activation:" + capture, [capture](const Match& m, Why& why) {
            Node* n = m.get(capture);
            const std::string act = n->attrString("activation", "");
            if (act.empty() || act == "None") return true;
            return why.fail(*n, [&] {
              return fmt::format("{} applies {} already", n->label(), act);
            });
          }};
}

// One matched form: its pattern and how to read the epilogue from a match.
struct Form {
  Pattern pattern;
  bool residual = false;
  bool silu = false;
  bool activation = false;
};

std::string activationOps() {
  std::string ops;
  for (const OpClassInfo& info : allOpClasses()) {
    if (!info.epilogue_activation || !info.domain.empty()) continue;
    ops += (ops.empty() ? "" : "|") + std::string(info.op_type);
  }
  return ops;
}

std::vector<Form> buildForms(int64_t opset) {
  const std::string acts = activationOps();
  std::vector<Form> out;
  auto add = [&](std::string name, const std::string& text, bool residual, bool silu,
                 bool activation) {
    Form f;
    f.pattern = Pattern::parse(text, std::move(name));
    f.residual = residual;
    f.silu = silu;
    f.activation = activation;
    out.push_back(std::move(f));
  };
  add("conv-add-silu", "c:Conv|Gemm -> add:Add -> sig:Sigmoid -> mul:Mul ; add -> mul", true,
      true, true);
  add("conv-add-act", "c:Conv|Gemm -> add:Add -> act:" + acts, true, false, true);
  add("conv-add-gelu", "c:Conv|Gemm -> add:Add -> act:fusectl::Gelu", true, false, true);
  add("conv-add-gelu-tanh", "c:Conv|Gemm -> add:Add -> act:fusectl::GeluTanh", true, false, true);
  add("conv-silu", "c:Conv|Gemm -> sig:Sigmoid -> mul:Mul ; c -> mul", false, true, true);
  add("conv-add", "c:Conv|Gemm -> add:Add", true, false, false);
  add("conv-act", "c:Conv|Gemm -> act:" + acts, false, false, true);
  add("conv-gelu", "c:Conv|Gemm -> act:fusectl::Gelu", false, false, true);
  add("conv-gelu-tanh", "c:Conv|Gemm -> act:fusectl::GeluTanh", false, false, true);
  // A GroupNorm's activation (a diffusion UNet's GroupNorm -> SiLU): no residual form, since
  // what follows a norm's residual Add is fuse-skip-norm's business, not this pass's.
  add("group-norm-silu", "c:fusectl::GroupNorm -> sig:Sigmoid -> mul:Mul ; c -> mul", false,
      true, true);
  add("group-norm-act", "c:fusectl::GroupNorm -> act:" + acts, false, false, true);
  add("group-norm-gelu", "c:fusectl::GroupNorm -> act:fusectl::Gelu", false, false, true);
  add("group-norm-gelu-tanh", "c:fusectl::GroupNorm -> act:fusectl::GeluTanh", false, false,
      true);

  for (Form& s : out) {
    Pattern& p = s.pattern;
    // 0. a GroupNorm takes one activation
    if (s.pattern.name.rfind("group-norm", 0) == 0) p.require(noActivationYet("c"));
    // 1. intermediates disappear
    if (s.silu) {
      const std::string x = s.residual ? "add" : "c";
      if (s.residual) p.require(constraints::uniqueConsumer("c"));
      p.require(constraints::readOnlyBy(x, {"sig", "mul"}));
      p.require(constraints::uniqueConsumer("sig"));
    } else {
      p.require(constraints::uniqueConsumer("c"));
      if (s.residual && s.activation) p.require(constraints::uniqueConsumer("add"));
    }
    // 2. one fusible float type throughout
    std::vector<std::string> captures = {"c"};
    if (s.residual) captures.push_back("add");
    if (s.silu) {
      captures.push_back("sig");
      captures.push_back("mul");
    } else if (s.activation) {
      captures.push_back("act");
    }
    p.require(constraints::dtypeIn(captures, constraints::fusibleFloatTypes()));
    // 3. residual
    if (s.residual) p.require(residualLegal("c", "add"));
    // 4-5. activation parameters
    if (s.activation && !s.silu) p.require(activationLegal("act", opset));
  }
  return out;
}

EpilogueSpec readSpec(const Form& s, const Match& m, int64_t opset) {
  EpilogueSpec spec;
  spec.compute = m.get("c");
  spec.output = spec.compute->output(0);
  if (s.residual) {
    spec.add = m.get("add");
    spec.residual = residualOf(spec.add, spec.compute);
    spec.output = spec.add->output(0);
  }
  if (s.silu) {
    spec.act = m.get("mul");
    spec.activation = "Silu";
    spec.output = spec.act->output(0);
  } else if (s.activation) {
    spec.act = m.get("act");
    Why checked(false);  // activationLegal held
    readActivation(spec.act, opset, spec, checked);
    spec.output = spec.act->output(0);
  }
  return spec;
}

class FuseEpiloguePass : public Pass {
 public:
  const PassInfo& info() const override { return FuseEpiloguePassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (Form& s : buildForms(0)) out.push_back(std::move(s.pattern));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    const int64_t opset = ctx.opset();
    // Only failed conditions are rejections: a Conv followed by something else is not a near
    // miss of every form, and a shorter form may still fuse it. Each form's sweep matches the
    // graph as it found it, then rewrites the matches still intact.
    DriverOptions driver;
    driver.report_structural = false;
    driver.match_all_first = true;
    size_t fused = 0;
    for (const Form& form : buildForms(opset)) {
      fused += applyPattern(
          graph, ctx, form.pattern,
          [&](Rewriter& rw, const Match& m) {
            fuse(rw, form, m, opset);
            return true;
          },
          driver);
    }
    return fused > 0;
  }

 private:
  static void fuse(Rewriter& rw, const Form& s, const Match& m, int64_t opset) {
    PassContext& ctx = rw.context();
    EpilogueSpec spec = readSpec(s, m, opset);
    Node* c = spec.compute;
    // A GroupNorm stays one, with the activation: its kernel applies it to each channel as it
    // writes it, so the normalised tensor is not read and written once more.
    const bool norm = c->is("GroupNorm", "fusectl");
    const bool conv = c->is("Conv");

    NewNode node;
    node.op_type = norm ? "GroupNorm" : conv ? "FusedConv" : "FusedGemm";
    node.domain = "fusectl";
    node.inputs = c->inputs();
    if (spec.residual) {
      node.inputs.resize(3, nullptr);  // X, W, B (or A, B, C); an absent bias stays absent
      node.inputs.push_back(spec.residual);
    }
    node.attributes = c->attributes();
    if (!spec.activation.empty()) {
      node.attributes.push_back(Attribute::ofString("activation", spec.activation));
      if (!spec.params.empty())
        node.attributes.push_back(Attribute::ofFloats("activation_params", spec.params));
    }
    // The fused node takes the Conv's name as its output takes the replaced value's, so the
    // printed graph reads like the original.
    node.name = c->name();
    node.naming = NodeNaming::TakeOver;
    rw.replaceMatch(s.pattern.name, m, spec.output, std::move(node));

    if (norm) {
      ctx.count("fused_norm_activation");
      return;
    }
    ctx.count(conv ? "fused_conv" : "fused_gemm");
    if (spec.residual) ctx.count("fused_residual");
    if (!spec.activation.empty()) ctx.count("fused_activation");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseEpiloguePass() { return std::make_unique<FuseEpiloguePass>(); }

}  // namespace fusectl::passes
