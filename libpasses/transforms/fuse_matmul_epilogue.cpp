// fuse-matmul-epilogue: fold a transformer Linear layer's bias Add, and optionally a residual Add
// and an activation after it, into one fusectl FusedMatMul, whose kernel runs one packed GEMM
// and applies the epilogue to each output tile in registers (fusectl/kernels/epilogue.h).
//
//   A [.., M, K] -> MatMul(A, W [K, N]) -> m -> Add(m, b [N]) -> s ─┐
//                                         Z [.., M, N] ─────────> Add -> r -> act -> Y
//     =>   A, W, b, Z -> FusedMatMul <activation> -> Y
//
//   Y = act(MatMul(A, W) + b + Z)       (the FusedGemm contract, with MatMul's batching of A)
//
// Forms matched, longest first, so that a MatMul takes the whole tail it can (each a pattern,
// anchored on the MatMul):
//   matmul-bias-residual-silu  mm -> bias:Add -> add:Add -> sig:Sigmoid -> mul:Mul ; add -> mul
//   matmul-bias-residual-act   mm -> bias:Add -> add:Add -> act (Relu|Sigmoid|Tanh|HardSwish|Gelu|
//                              Clip|LeakyRelu|HardSigmoid)
//   matmul-bias-residual-gelu  mm -> bias:Add -> add:Add -> act:fusectl::Gelu
//   matmul-bias-residual-gelu-tanh  the same with act:fusectl::GeluTanh (GPT-2's gelu_new)
//   matmul-bias-silu           mm -> bias:Add -> sig:Sigmoid -> mul:Mul ; bias -> mul
//   matmul-bias-act            mm -> bias:Add -> act
//   matmul-bias-gelu           mm -> bias:Add -> act:fusectl::Gelu
//   matmul-bias-gelu-tanh      mm -> bias:Add -> act:fusectl::GeluTanh
//   matmul-bias-residual       mm -> bias:Add -> add:Add
//   matmul-bias                mm -> bias:Add
//   matmul-residual            mm -> add:Add      (no bias: LLaMA's o_proj and down_proj)
// This pass takes the activation and the residual itself (fuse-epilogue, which runs after it,
// does not anchor on FusedMatMul): one rewrite per Linear layer, and no intermediate node that a
// second pass would have to re-read. Activations with parameters (Clip, LeakyRelu, HardSigmoid)
// go into activation_params, as fuse-epilogue writes them (epilogueActivation: DeepSpeech's
// hardtanh(0, 20) after canonicalize's relu-clip). A 2-D MatMul + bias has already become a
// Gemm at -O2 (fuse-matmul-add), which fuse-epilogue takes.
//
// Legality, checked in this order (each failure is a reported rejection):
//  1. Every intermediate (the MatMul output, the biased sum before a residual or activation, the
//     residual sum before an activation, the Sigmoid) is read by the fused nodes only and is not
//     a graph output: it disappears.
//  2. Everything is float32, float16 or bfloat16 (fusibleFloatTypes): the kernel computes in
//     float32 and rounds the result once.
//  3. The weight W is a constant of rank 2 (packed once per session), and A has a known rank
//     >= 2 (a vector A has no row to give the GEMM).
//  4. The bias is broadcast on the last axis only: its shape is [N] or [1, ..., 1, N] with rank
//     at most the output's, so the sum keeps the MatMul output's shape.
//  5. Residual: the Add's other input is not the biased sum itself, not a constant, and its
//     shape is provably the sum's shape (the kernel reads Z without broadcasting).
//  6. A standard Gelu is the exact one (approximate = "none") or the tanh one (activation
//     GeluTanh); an activation's parameters are constant scalars, and the model imports opset
//     >= 8 when there are any (epilogueActivation).
#include <fmt/format.h>

#include <algorithm>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// Condition 3.
Constraint weightAndActivations() {
  return {"constant-2d-weight:mm", [](const Match& m, Why& why) {
            Node* mm = m.get("mm");
            Value* a = mm->input(0);
            Value* w = mm->input(1);
            if (!a || !w) {
              return why.fail(*mm, [&] { return mm->label() + " has an empty input"; });
            }
            if (!w->isConstant()) {
              return why.fail(*mm, [&] {
                return fmt::format("{} weight '{}' is not a constant ({})", mm->label(),
                                   w->name(), nonConstantOrigin(*w));
              });
            }
            if (w->initializer()->dims().size() != 2) {
              return why.fail(*mm, [&] {
                return fmt::format("{} weight '{}' has rank {}, not 2", mm->label(), w->name(),
                                   w->initializer()->dims().size());
              });
            }
            if (!a->shape().hasRank() || a->shape().rank() < 2) {
              return why.fail(*mm, [&] {
                return fmt::format("{} input '{}' has shape {}: rank >= 2 is needed", mm->label(),
                                   a->name(), a->shape().str());
              });
            }
            return true;
          }};
}

// The bias Add's operand that is not the MatMul output, or nullptr for Add(m, m).
Value* biasOf(Node* bias_add, Node* mm) {
  Value* mo = mm->output(0);
  if (bias_add->numInputs() != 2 || bias_add->input(0) == bias_add->input(1)) return nullptr;
  return bias_add->input(0) == mo ? bias_add->input(1) : bias_add->input(0);
}

// Condition 4.
Constraint biasOnLastAxis() {
  return {"bias-last-axis:bias", [](const Match& m, Why& why) {
            Node* mm = m.get("mm");
            Node* add = m.get("bias");
            Value* b = biasOf(add, mm);
            if (!b) {
              return why.fail(*add, [&] {
                return fmt::format("{} adds {} output to itself", add->label(), mm->label());
              });
            }
            const Shape& bs = b->shape();
            const Shape& out = mm->output(0)->shape();
            const int64_t n = mm->input(1)->initializer()->dims().at(1);
            bool ok = bs.hasRank() && bs.rank() >= 1 && out.hasRank() && bs.rank() <= out.rank();
            for (size_t i = 0; ok && i + 1 < bs.rank(); ++i)
              ok = bs[i].isStatic() && bs[i].value() == 1;
            ok = ok && bs[bs.rank() - 1].isStatic() && bs[bs.rank() - 1].value() == n;
            if (ok) return true;
            return why.fail(*add, [&] {
              return fmt::format(
                  "{} operand '{}' has shape {}, not a bias on the last axis ([{}] or "
                  "[1, ..., 1, {}] of rank <= {})",
                  add->label(), b->name(), bs.str(), n, n, out.hasRank() ? out.rank() : 0);
            });
          }};
}

// The residual Add's operand that is not the biased sum, or nullptr for Add(s, s).
Value* residualOf(Node* add, Node* bias_add) {
  Value* s = bias_add->output(0);
  if (add->numInputs() != 2 || add->input(0) == add->input(1)) return nullptr;
  return add->input(0) == s ? add->input(1) : add->input(0);
}

// Condition 5; `base` is the node whose output the residual is added to.
Constraint residualLegal(std::string base) {
  return {"residual:add", [base](const Match& m, Why& why) {
            Node* bias_add = m.get(base);
            Node* add = m.get("add");
            Value* z = residualOf(add, bias_add);
            if (!z) {
              return why.fail(*add, [&] {
                return fmt::format("{} adds {} output to itself; there is no residual",
                                   add->label(), bias_add->label());
              });
            }
            if (z->isConstant()) {
              return why.fail(*add, [&] {
                return fmt::format("{} residual '{}' is a constant, not an activation",
                                   add->label(), z->name());
              });
            }
            const Value* s = bias_add->output(0);
            if (!dimsProvablyEqual(z->shape(), s->shape())) {
              return why.fail(*add, [&] {
                return fmt::format(
                    "{} residual '{}' has shape {}, not provably the shape {} of {} output "
                    "(the fused residual is not broadcast)",
                    add->label(), z->name(), z->shape().str(), s->shape().str(),
                    bias_add->label());
              });
            }
            return true;
          }};
}

// Condition 6: what the epilogue computes for the activation node (epilogueActivation: a
// standard Gelu's approximation, constant parameters).
Constraint activationReads(int64_t opset) {
  return {"activation:act", [opset](const Match& m, Why& why) {
            return epilogueActivation(*m.get("act"), opset, why).has_value();
          }};
}

struct Form {
  Pattern pattern;
  bool bias = true;
  bool residual = false;
  bool silu = false;
  bool activation = false;
};

// The activations that the epilogue computes and a standard op names (the last three with
// activation_params).
constexpr const char* kActivationOps =
    "Relu|Sigmoid|Tanh|HardSwish|Gelu|Clip|LeakyRelu|HardSigmoid";

std::vector<Form> buildForms(int64_t opset) {
  std::vector<Form> out;
  auto add = [&](const char* name, const std::string& tail, bool residual, bool silu,
                 bool activation) {
    Form f;
    f.pattern = Pattern::parse("mm:MatMul -> bias:Add" + tail, name);
    f.residual = residual;
    f.silu = silu;
    f.activation = activation;
    out.push_back(std::move(f));
  };
  const std::string acts = kActivationOps;
  add("matmul-bias-residual-silu", " -> add:Add -> sig:Sigmoid -> mul:Mul ; add -> mul", true,
      true, true);
  add("matmul-bias-residual-act", " -> add:Add -> act:" + acts, true, false, true);
  add("matmul-bias-residual-gelu", " -> add:Add -> act:fusectl::Gelu", true, false, true);
  add("matmul-bias-residual-gelu-tanh", " -> add:Add -> act:fusectl::GeluTanh", true, false,
      true);
  add("matmul-bias-silu", " -> sig:Sigmoid -> mul:Mul ; bias -> mul", false, true, true);
  add("matmul-bias-act", " -> act:" + acts, false, false, true);
  add("matmul-bias-gelu", " -> act:fusectl::Gelu", false, false, true);
  add("matmul-bias-gelu-tanh", " -> act:fusectl::GeluTanh", false, false, true);
  add("matmul-bias-residual", " -> add:Add", true, false, false);
  add("matmul-bias", "", false, false, false);
  {
    // A Linear layer without bias (LLaMA's o_proj, down_proj) followed by the residual.
    Form f;
    f.pattern = Pattern::parse("mm:MatMul -> add:Add", "matmul-residual");
    f.bias = false;
    f.residual = true;
    out.push_back(std::move(f));
  }

  for (Form& f : out) {
    Pattern& p = f.pattern;
    // 1. intermediates disappear
    p.require(constraints::uniqueConsumer("mm"));
    const std::string last_sum = f.residual ? "add" : "bias";
    if (f.residual && f.bias) p.require(constraints::uniqueConsumer("bias"));
    if (f.silu) {
      p.require(constraints::readOnlyBy(last_sum, {"sig", "mul"}));
      p.require(constraints::uniqueConsumer("sig"));
    } else if (f.activation) {
      p.require(constraints::uniqueConsumer(last_sum));
    }
    // 2. one fusible float type throughout
    std::vector<std::string> captures = {"mm"};
    if (f.bias) captures.push_back("bias");
    if (f.residual) captures.push_back("add");
    if (f.silu) {
      captures.push_back("sig");
      captures.push_back("mul");
    } else if (f.activation) {
      captures.push_back("act");
    }
    p.require(constraints::dtypeIn(captures, constraints::fusibleFloatTypes()));
    // 3-6.
    p.require(weightAndActivations());
    if (f.bias) p.require(biasOnLastAxis());
    if (f.residual) p.require(residualLegal(f.bias ? "bias" : "mm"));
    if (f.activation && !f.silu) p.require(activationReads(opset));
  }
  return out;
}

class FuseMatMulEpiloguePass : public Pass {
 public:
  const PassInfo& info() const override { return FuseMatMulEpiloguePassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (Form& f : buildForms(0)) out.push_back(std::move(f.pattern));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    // Only failed conditions are rejections: a MatMul followed by something else is not a near
    // miss of every form, and a shorter form may still fuse it.
    DriverOptions driver;
    driver.report_structural = false;
    driver.match_all_first = true;
    size_t fused = 0;
    for (const Form& form : buildForms(ctx.opset())) {
      fused += applyPattern(
          graph, ctx, form.pattern,
          [&](Rewriter& rw, const Match& m) {
            fuse(rw, form, m);
            return true;
          },
          driver);
    }
    return fused > 0;
  }

 private:
  static void fuse(Rewriter& rw, const Form& f, const Match& m) {
    PassContext& ctx = rw.context();
    Node* mm = m.get("mm");
    Node* sum = f.bias ? m.get("bias") : mm;  // what the residual is added to
    NewNode node;
    node.op_type = "FusedMatMul";
    node.domain = "fusectl";
    node.inputs = {mm->input(0), mm->input(1), f.bias ? biasOf(sum, mm) : nullptr};
    Value* output = sum->output(0);
    if (f.residual) {
      Node* add = m.get("add");
      node.inputs.push_back(residualOf(add, sum));
      output = add->output(0);
    }
    if (f.silu) {
      node.attributes.push_back(Attribute::ofString("activation", "Silu"));
      output = m.get("mul")->output(0);
    } else if (f.activation) {
      Node* act = m.get("act");
      Why checked(false);  // activationReads held
      const EpilogueActivation a = *epilogueActivation(*act, ctx.opset(), checked);
      node.attributes.push_back(Attribute::ofString("activation", a.name));
      if (!a.params.empty())
        node.attributes.push_back(Attribute::ofFloats("activation_params", a.params));
      output = act->output(0);
    }
    // The fused node takes the MatMul's name, as its output takes the replaced value's.
    node.name = mm->name();
    node.naming = NodeNaming::TakeOver;
    rw.replaceMatch(f.pattern.name, m, output, std::move(node));
    ctx.count("fused_matmul");
    if (!f.bias) ctx.count("fused_without_bias");
    if (f.residual) ctx.count("fused_residual");
    if (f.activation) ctx.count("fused_activation");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseMatMulEpiloguePass() {
  return std::make_unique<FuseMatMulEpiloguePass>();
}

}  // namespace fusectl::passes
