// eliminate-identity: remove nodes that pass their input through unchanged.
//
//   x -> Identity -> y                     =>  x
//   x -> Dropout (inference) -> y [, mask] =>  x
//   x:T -> Cast<to=T> -> y                 =>  x
//   x -> Pad (pads all 0) -> y             =>  x
//   x:[d...] -> Slice -> y:[d...]          =>  x   (positive steps)
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. Dropout only: the mask output is unused; training_mode, when given, is a constant false
//     or the ratio is a constant 0 (training with nothing dropped scales by 1/(1 - 0): torch
//     exports torchvision's Swin-T attention dropout as training_mode=true, ratio=0); before
//     opset 7, is_test=1.
//  2. Cast only: the input's dtype is known and equals `to`.
//  3. Pad only: the pads (the attribute before opset 11, the input from it) are a constant of
//     zeros, whatever the mode: torchvision's Swin-T pads each stage to a multiple of its window
//     with F.pad, by 0 at 224x224 (15 copies of an activation a run).
//  4. Slice only: input and output dims are all static and equal, and every step is a positive
//     constant (a negative one reverses an axis of the same length): a slice of an axis to its
//     own length with step >= 1 starts at 0 and takes every element (Swin-T's crop back,
//     x[:, :H, :W, :], 24 copies).
//  5. The graph's interface survives: when y is a graph output, x must be computed by a node
//     and must not itself be a graph output (y's readers then read x, which takes y's name).
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

Constraint keepsInterface(const std::string& capture) {
  return {"keeps-interface", [capture](const Match& m, Why& why) {
            Node* n = m.get(capture);
            Value* x = n->input(0);
            Value* y = n->output(0);
            if (!x || !y) {
              return why.fail(
                  *n, [&] { return fmt::format("{} has no input or no output", n->label()); });
            }
            if (!y->isGraphOutput()) return true;
            if (!x->producer()) {
              return why.fail(*n, [&] {
                return fmt::format(
                    "{} output '{}' is a graph output and its input '{}' is {}; "
                    "removing it would change the graph's interface",
                    n->label(), y->name(), x->name(),
                    x->isGraphInput() ? "a graph input" : "a constant");
              });
            }
            if (!x->isGraphOutput()) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} output '{}' and its input '{}' are both graph outputs",
                                 n->label(), y->name(), x->name());
            });
          }};
}

Constraint dropoutInference(int64_t opset) {
  return {"dropout-inference", [opset](const Match& m, Why& why) {
            Node* n = m.get("dropout");
            if (Value* mask = n->output(1); mask && (mask->hasUses() || mask->isGraphOutput())) {
              return why.fail(*n, [&] {
                return fmt::format("{} mask output '{}' is used", n->label(), mask->name());
              });
            }
            if (Value* t = n->input(2)) {
              const Tensor* c = t->isConstant() ? t->initializer() : nullptr;
              const Value* ratio = n->input(1);
              const Tensor* r = ratio && ratio->isConstant() ? ratio->initializer() : nullptr;
              const bool drops_nothing = r && r->numel() == 1 && r->valueAsDouble(0) == 0.0;
              if (!drops_nothing && (!c || c->numel() != 1 || c->valueAsInt64(0) != 0)) {
                return why.fail(*n, [&] {
                  return fmt::format(
                      "{} input '{}' (training_mode) is not a constant false, nor the ratio a "
                      "constant 0",
                      n->label(), t->name());
                });
              }
            }
            if (opset <= 0 || opset >= 7 || n->attrInt("is_test", 0) != 0) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} has is_test=0 (training form, opset {})", n->label(), opset);
            });
          }};
}

Constraint castToSameType() {
  return {"cast-same-type", [](const Match& m, Why& why) {
            Node* n = m.get("cast");
            Value* x = n->input(0);
            if (!x || x->dtype() == DType::Undefined) {
              return why.fail(
                  *n, [&] { return fmt::format("{} input has an unknown type", n->label()); });
            }
            auto to = static_cast<DType>(n->attrInt("to", 0));
            if (x->dtype() == to) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} converts {} to {}", n->label(), dtypeName(x->dtype()),
                                 dtypeName(to));
            });
          }};
}

Constraint padOfZeros(int64_t opset) {
  return {"pads-zero", [opset](const Match& m, Why& why) {
            Node* n = m.get("pad");
            const std::optional<std::vector<int64_t>> pads = padAmounts(*n, opset);
            if (!pads) {
              return why.fail(*n, [&] {
                return fmt::format("{} pads are not a constant (or, before opset 11, no pads "
                                   "attribute)",
                                   n->label());
              });
            }
            for (int64_t v : *pads) {
              if (v == 0) continue;
              return why.fail(*n, [&] {
                return fmt::format("{} pads by {} (not all pads are 0)", n->label(), v);
              });
            }
            return true;
          }};
}

Constraint sliceOfWhole() {
  return {"slice-whole", [](const Match& m, Why& why) {
            Node* n = m.get("slice");
            const Value* x = n->input(0);
            const Value* y = n->output(0);
            const Shape& xs = x ? x->shape() : Shape();
            const Shape& ys = y ? y->shape() : Shape();
            bool same = xs.hasRank() && ys.hasRank() && xs.rank() == ys.rank();
            for (size_t i = 0; same && i < xs.rank(); ++i)
              same = xs[i].isStatic() && ys[i].isStatic() && xs[i].value() == ys[i].value();
            if (!same) {
              return why.fail(*n, [&] {
                return fmt::format("{} output {} is not provably its input's shape {}", n->label(),
                                   ys.str(), xs.str());
              });
            }
            if (const Value* steps = n->numInputs() > 4 ? n->input(4) : nullptr) {
              const Tensor* t = steps->isConstant() ? steps->initializer() : nullptr;
              bool positive = t != nullptr;
              for (int64_t i = 0; positive && i < t->numel(); ++i) positive = t->valueAsInt64(i) > 0;
              if (!positive) {
                return why.fail(*n, [&] {
                  return fmt::format("{} steps '{}' are not all positive constants (a negative "
                                     "step reverses the axis)",
                                     n->label(), steps->name());
                });
              }
            }
            return true;
          }};
}

class EliminateIdentityPass : public Pass {
 public:
  const PassInfo& info() const override { return EliminateIdentityPassInfo; }

  std::vector<Pattern> patterns() const override { return build(0); }

  bool run(const Graph& graph, PassContext& ctx) override {
    size_t removed = 0;
    for (const Pattern& p : build(ctx.opset())) {
      std::string counter = "removed_" + p.name;
      removed += applyPattern(graph, ctx, p, [&](Rewriter& rw, const Match& m) {
        rw.bypass(m.root());
        ctx.count(counter);
        return true;
      });
    }
    return removed > 0;
  }

 private:
  static std::vector<Pattern> build(int64_t opset) {
    std::vector<Pattern> out;
    out.push_back(Pattern::parse("identity:Identity", "identity"));
    out.back().require(keepsInterface("identity"));
    out.push_back(Pattern::parse("dropout:Dropout", "dropout"));
    out.back().require(dropoutInference(opset)).require(keepsInterface("dropout"));
    out.push_back(Pattern::parse("cast:Cast", "cast"));
    out.back().require(castToSameType()).require(keepsInterface("cast"));
    out.push_back(Pattern::parse("pad:Pad", "pad"));
    out.back().require(padOfZeros(opset)).require(keepsInterface("pad"));
    out.push_back(Pattern::parse("slice:Slice", "slice"));
    out.back().require(sliceOfWhole()).require(keepsInterface("slice"));
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateIdentityPass() {
  return std::make_unique<EliminateIdentityPass>();
}

}  // namespace fusectl::passes
