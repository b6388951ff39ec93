// fuse-gelu: recognise the exact Gelu written with Erf, as exporters spell it for models older
// than opset 20, and replace its five nodes by one Gelu.
//
//   x -> Div(x, sqrt2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5) -> y   =>   Gelu(x) -> y
//
// Forms matched (each is a pattern anchored on the Erf; either operand order everywhere):
//   gelu-erf             s:Div|Mul -> ^e:Erf -> one:Add -> inner:Mul -> outer:Mul
//                        with {inner, outer} multiplying by x and by 0.5 in either order:
//                        (x * (1 + e)) * 0.5  or  ((1 + e) * 0.5) * x
//   gelu-erf-half-first  s:Div|Mul -> ^e:Erf -> one:Add -> outer:Mul ; half:Mul -> outer
//                        (x * 0.5) * (1 + e)
// where s is Div(x, sqrt(2)) or Mul(x, 1/sqrt(2)). Both forms are tried at each Erf; an Erf that
// matches neither is reported with the first failed condition, preferring a failed condition
// over a structural mismatch (a Gelu with the wrong constant says so).
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The constants are scalars (one element) equal to sqrt(2) (or 1/sqrt(2) for a Mul), 1 and
//     0.5 within their type's rounding (relative 1e-6, 1e-3 for float16: exporters store
//     roundings), and every Mul that should read x reads the very value the Div/Mul divides.
//  2. Every intermediate (the scaled x, the Erf, the Add and the inner Mul) is read by the next
//     node of the chain only and is not a graph output: it disappears.
//  3. The chain's output has x's shape for every value of the symbolic dims (a constant of
//     higher rank would broadcast x; Gelu(x) does not).
//  4. Everything is float32: a float16 chain rounds after each op, the fused Gelu once.
//
// The replacement: from opset 20 the standard Gelu (approximate "none"), portable everywhere;
// before that fusectl::Gelu (docs/ops.md), which the exported model defines as a function with
// the same five ops, so the pass is labelled fusectl and --emit standard skips it. fuse-epilogue
// then takes either Gelu into a preceding Conv/Gemm.
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;

// The value of a one-element constant, or nullopt.
std::optional<double> scalarConstant(const Value* v) {
  if (!v || !v->isConstant()) return std::nullopt;
  const Tensor* t = v->initializer();
  if (t->numel() != 1) return std::nullopt;
  return t->valueAsDouble(0);
}

// Within the rounding of the constant's own type: exporters store float32 roundings of
// sqrt(2), and a float16 model stores 1.4140625.
bool approximately(double value, double want, DType stored) {
  const double tolerance = stored == DType::Float16    ? 1e-3
                           : stored == DType::BFloat16 ? 8e-3
                                                       : 1e-6;
  return std::fabs(value - want) <= tolerance * std::fabs(want);
}

// "'c' (= 1.5)", "'c' (2 elements)" or "'c' (it is computed by Constant(c))", for reasons.
// A Constant node's output counts once fold-constants has made it an initializer (-O1).
std::string describeOperand(const Value* v) {
  if (!v) return "an empty input";
  if (!v->isConstant()) return fmt::format("'{}' ({})", v->name(), nonConstantOrigin(*v));
  std::optional<double> c = scalarConstant(v);
  if (c) return fmt::format("'{}' (= {})", v->name(), *c);
  return fmt::format("'{}' ({} elements)", v->name(), v->initializer()->numel());
}

// The x that the scaling node divides by sqrt(2) (or multiplies by 1/sqrt(2)); nullptr with
// `why` when it is not such a node.
Value* scaledInput(Node* s, Why& why) {
  if (s->numInputs() != 2) {
    why.fail(*s, [&] {
      return fmt::format("{} has {} inputs, expected 2", s->label(), s->numInputs());
    });
    return nullptr;
  }
  if (s->is("Div")) {
    std::optional<double> d = scalarConstant(s->input(1));
    if (d && approximately(*d, kSqrt2, s->input(1)->dtype())) return s->input(0);
    why.fail(*s, [&] {
      return fmt::format("{} divides by {}, not by sqrt(2)", s->label(),
                         describeOperand(s->input(1)));
    });
    return nullptr;
  }
  for (size_t i : {size_t{1}, size_t{0}}) {
    std::optional<double> c = scalarConstant(s->input(i));
    if (c && approximately(*c, 1.0 / kSqrt2, s->input(i)->dtype())) return s->input(1 - i);
  }
  why.fail(*s, [&] {
    return fmt::format("{} multiplies {} by {}, neither of them 1/sqrt(2)", s->label(),
                       describeOperand(s->input(0)), describeOperand(s->input(1)));
  });
  return nullptr;
}

// Whether `v` is a one-element constant equal to `want`.
bool isScalar(const Value* v, double want) {
  std::optional<double> c = scalarConstant(v);
  return c && approximately(*c, want, v->dtype());
}

// The chain's x, or nullptr with `why` (condition 1). `half_first` selects the form.
Value* geluInput(const Match& m, bool half_first, Why& why) {
  Node* s = m.get("s");
  Node* erf = m.get("e");
  Node* one = m.get("one");
  Node* outer = m.get("outer");
  Value* x = scaledInput(s, why);
  if (!x) return nullptr;
  Value* added = otherOperand(*one, erf->output(0));
  if (!added || !isScalar(added, 1.0)) {
    why.fail(*one, [&] {
      return fmt::format("{} adds {} to {} output, not 1", one->label(),
                         added ? describeOperand(added) : "it", erf->label());
    });
    return nullptr;
  }
  if (half_first) {
    Node* half = m.get("half");
    // Both slots are read: otherOperand alone would take Mul(0.5, q) for x * 0.5.
    const bool halves_x = (half->input(0) == x && isScalar(half->input(1), 0.5)) ||
                          (half->input(1) == x && isScalar(half->input(0), 0.5));
    if (!halves_x) {
      why.fail(*half, [&] {
        return fmt::format("{} does not multiply '{}' by 0.5 (it reads {} and {})", half->label(),
                           x->name(), describeOperand(half->input(0)),
                           describeOperand(half->input(1)));
      });
      return nullptr;
    }
    return x;
  }
  Node* inner = m.get("inner");
  Value* a = otherOperand(*inner, one->output(0));
  Value* b = otherOperand(*outer, inner->output(0));
  if (a && b && ((a == x && isScalar(b, 0.5)) || (b == x && isScalar(a, 0.5)))) return x;
  why.fail(*inner, [&] {
    return fmt::format("{} and {} multiply by {} and {}, not by '{}' and 0.5", inner->label(),
                       outer->label(), a ? describeOperand(a) : "its own input",
                       b ? describeOperand(b) : "its own input", x->name());
  });
  return nullptr;
}

Constraint geluForm(bool half_first) {
  return {"gelu-constants", [half_first](const Match& m, Why& why) {
            return geluInput(m, half_first, why) != nullptr;
          }};
}

Constraint outputKeepsInputShape(bool half_first) {
  return {"same-shape:x", [half_first](const Match& m, Why& why) {
            Why checked(false);  // geluForm held
            const Value* x = geluInput(m, half_first, checked);
            Node* outer = m.get("outer");
            const Shape& in = x->shape();
            const Shape& out = outer->output(0)->shape();
            if (!in.hasRank() || !out.hasRank()) {
              return why.fail(*outer, [&] {
                return fmt::format(
                    "{} output '{}' or its input '{}' has unknown shape, so it is not "
                    "provably Gelu's (a constant could broadcast it)",
                    outer->label(), outer->output(0)->name(), x->name());
              });
            }
            bool equal = in.rank() == out.rank();
            for (size_t i = 0; equal && i < in.rank(); ++i) equal = in[i].provablyEqual(out[i]);
            if (equal) return true;
            return why.fail(*outer, [&] {
              return fmt::format(
                  "{} output '{}' has shape {}, not provably the shape {} of '{}' "
                  "(a constant broadcasts it; Gelu would not)",
                  outer->label(), outer->output(0)->name(), out.str(), in.str(), x->name());
            });
          }};
}

Pattern buildPattern(bool half_first) {
  using namespace constraints;
  Pattern p = half_first
                  ? Pattern::parse("s:Div|Mul -> ^e:Erf -> one:Add -> outer:Mul ; half:Mul -> outer",
                                   "gelu-erf-half-first")
                  : Pattern::parse("s:Div|Mul -> ^e:Erf -> one:Add -> inner:Mul -> outer:Mul",
                                   "gelu-erf");
  p.require(geluForm(half_first))
      .require(uniqueConsumer("s"))
      .require(uniqueConsumer("e"))
      .require(uniqueConsumer("one"))
      .require(uniqueConsumer(half_first ? "half" : "inner"))
      .require(outputKeepsInputShape(half_first));
  std::vector<std::string> all = {"s", "e", "one", "outer", half_first ? "half" : "inner"};
  p.require(dtypeIn(all, {DType::Float}));
  return p;
}

class FuseGeluPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseGeluPassInfo; }

  std::vector<Pattern> patterns() const override { return {buildPattern(false), buildPattern(true)}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern forms[2] = {buildPattern(false), buildPattern(true)};
    return applyPatterns(graph, ctx, {&forms[0], &forms[1]},
                         [&](Rewriter& rw, size_t form, const Match& m) {
                           fuse(rw, forms[form], m, form == 1);
                           return true;
                         }) > 0;
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& form, const Match& m, bool half_first) {
    Why checked(false);  // geluForm held
    Value* x = geluInput(m, half_first, checked);
    Node* outer = m.get("outer");
    const bool standard = rw.context().opset() >= 20;
    NewNode gelu;
    gelu.op_type = "Gelu";
    gelu.domain = standard ? "" : "fusectl";
    gelu.inputs = {x};
    gelu.name = outer->name();
    rw.replaceMatch(form.name, m, outer->output(0), std::move(gelu));
    rw.context().count(standard ? "fused_standard_gelu" : "fused_fusectl_gelu");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseGeluPass() { return std::make_unique<FuseGeluPass>(); }

}  // namespace fusectl::passes
