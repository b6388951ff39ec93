// fuse-swiglu: the gated unit of LLaMA-style MLPs, SiLU(gate) * up, as one fusectl::SwiGLU that
// reads the gate and the up projection once and writes the product once (three nodes and two
// intermediate tensors of the MLP's widest shape disappear).
//
//   g -> Sigmoid -> s ─┐
//   g ───────────────> Mul -> silu ─┐
//   up ─────────────────────────────> Mul -> Y       =>   SwiGLU(g, up) -> Y
//
//   Y = g * sigmoid(g) * up
//
// Form matched (anchored on the second Mul; either operand order in both Muls):
//   swiglu   sig:Sigmoid -> silu:Mul -> ^out:Mul
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. silu multiplies the Sigmoid's output by the Sigmoid's own input g (SiLU, not a gate of
//     something else), and out multiplies silu by another value, up.
//  2. The Sigmoid's and silu's outputs are read by the chain only and are not graph outputs.
//  3. g, up and Y provably have one shape: SwiGLU does not broadcast.
//  4. Everything is float32, float16 or bfloat16 (fusibleFloatTypes; half computed in float32).
// When gate and up are the two halves of one value's last dim (merge-parallel-matmuls reads its
// merged gate/up MatMul through Slice(x, [0, I)) and Slice(x, [I, 2I))), each Slice read by the
// chain only, the node is fusectl::SwiGLUPacked(x) instead and the Slices go too: the SwiGLU
// reads the merged projection once.
#include <fmt/format.h>

#include <algorithm>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// The up projection, or nullptr with `why` (condition 1).
Value* upOf(const Match& m, Why& why) {
  Node* sig = m.get("sig");
  Node* silu = m.get("silu");
  Node* out = m.get("out");
  Value* g = sig->input(0);
  if (otherOperand(*silu, sig->output(0)) != g) {
    why.fail(*silu, [&] {
      return fmt::format("{} multiplies {} output by '{}', not by its input '{}' (not a SiLU)",
                         silu->label(), sig->label(),
                         silu->input(0) == sig->output(0) ? silu->input(1)->name()
                                                          : silu->input(0)->name(),
                         g->name());
    });
    return nullptr;
  }
  Value* up = otherOperand(*out, silu->output(0));
  if (!up) {
    why.fail(*out, [&] {
      return fmt::format("{} multiplies {} output by itself; there is no up projection",
                         out->label(), silu->label());
    });
  }
  return up;
}

Constraint gatedSilu() {
  return {"silu-times-up", [](const Match& m, Why& why) { return upOf(m, why) != nullptr; }};
}

// Condition 3.
Constraint sameShapes() {
  return {"same-shape:g,up", [](const Match& m, Why& why) {
            Why checked(false);  // gatedSilu held
            Value* up = upOf(m, checked);
            Node* out = m.get("out");
            Value* g = m.get("sig")->input(0);
            const Value* y = out->output(0);
            if (dimsProvablyEqual(g->shape(), up->shape()) &&
                dimsProvablyEqual(g->shape(), y->shape()))
              return true;
            return why.fail(*out, [&] {
              return fmt::format(
                  "{} gate '{}' {}, up '{}' {} and output {} are not provably one shape "
                  "(SwiGLU does not broadcast)",
                  out->label(), g->name(), g->shape().str(), up->name(), up->shape().str(),
                  y->shape().str());
            });
          }};
}

// The merged gate/up value whose halves g and up are, or nullptr.
Value* packedSource(const Match& m, Value* g, Value* up) {
  Node* gs = g->producer();
  Node* us = up->producer();
  if (!gs || !us || !gs->is("Slice") || !us->is("Slice") || !gs->domain().empty() ||
      !us->domain().empty() || gs->input(0) != us->input(0))
    return nullptr;
  Value* x = gs->input(0);
  const Shape& xs = x->shape();
  if (!xs.hasRank() || xs.rank() == 0 || !xs[xs.rank() - 1].isStatic()) return nullptr;
  const int64_t width = xs[xs.rank() - 1].value();
  if (width % 2 != 0) return nullptr;
  const int64_t half = width / 2;
  auto covers = [&](const Node& slice, int64_t from, int64_t to) {
    return lastAxisSpan(slice, xs.rank(), width) == std::make_pair(from, to);
  };
  if (!covers(*gs, 0, half) || !covers(*us, half, width)) return nullptr;
  // The Slices disappear only when the chain is all that reads them.
  for (Node* reader : g->consumers())
    if (reader != m.get("sig") && reader != m.get("silu")) return nullptr;
  for (Node* reader : up->consumers())
    if (reader != m.get("out")) return nullptr;
  if (g->isGraphOutput() || up->isGraphOutput()) return nullptr;
  return x;
}

Pattern build() {
  using namespace constraints;
  Pattern p = Pattern::parse("sig:Sigmoid -> silu:Mul -> ^out:Mul", "swiglu");
  p.require(gatedSilu())
      .require(uniqueConsumer("sig"))
      .require(uniqueConsumer("silu"))
      .require(sameShapes())
      .require(dtypeIn({"sig", "silu", "out"}, fusibleFloatTypes()));
  return p;
}

class FuseSwiGLUPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseSwiGLUPassInfo; }

  std::vector<Pattern> patterns() const override { return {build()}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern pattern = build();
    // Only failed conditions are rejections: every Mul of a Sigmoid is not a near miss.
    DriverOptions driver;
    driver.report_structural = false;
    return applyPattern(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
             Why checked(false);  // gatedSilu held
             Node* out = m.get("out");
             Value* g = m.get("sig")->input(0);
             Value* up = upOf(m, checked);
             NewNode node;
             node.domain = "fusectl";
             node.name = out->name();
             if (Value* packed = packedSource(m, g, up)) {
               node.op_type = "SwiGLUPacked";
               node.inputs = {packed};
               ctx.count("fused_swiglu_packed");
             } else {
               node.op_type = "SwiGLU";
               node.inputs = {g, up};
             }
             rw.replaceMatch(pattern.name, m, out->output(0), std::move(node));
             ctx.count("fused_swiglu");
             return true;
           }, driver) > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseSwiGLUPass() { return std::make_unique<FuseSwiGLUPass>(); }

}  // namespace fusectl::passes
