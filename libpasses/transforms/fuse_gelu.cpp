// fuse-gelu: recognise the exact Gelu written with Erf, as exporters spell it for models older
// than opset 20, and replace its five nodes by one Gelu; likewise its tanh approximation and
// QuickGELU (below).
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
//  4. Everything is float32, float16 or bfloat16 (fusibleFloatTypes): a half chain rounds after
//     each op; the fused Gelu computes in float32 and rounds once.
//
// The tanh approximation (GPT-2's "gelu_new"), 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))):
//   gelu-tanh            inner:Mul -> ^t:Tanh -> one:Add -> inner2:Mul -> outer:Mul
//   gelu-tanh-half-first inner:Mul -> ^t:Tanh -> one:Add -> outer:Mul ; half:Mul -> outer
// with the multiplications by x and 0.5 in any order, as for Erf, and inner = Mul(sqrt(2/pi),
// Add(x, Mul(x^3, 0.044715))) in either operand order, x^3 spelled Pow(x, 3), Mul(Mul(x, x), x)
// or Mul(x, Mul(x, x)). Its nodes before the Tanh are taken as the producers only the chain
// kept alive. Conditions 1-4 hold as for Erf (constants within relative 1e-6 of sqrt(2/pi),
// 0.044715, 3, 1 and 0.5). From opset 20 it becomes the standard Gelu(approximate = "tanh"),
// before that fusectl::GeluTanh.
//
// QuickGELU (CLIP), x * sigmoid(1.702 x):
//   quick-gelu           s:Mul -> ^sig:Sigmoid -> out:Mul
// with s = Mul(x, 1.702) and out = Mul(x, sig), either operand order, 1.702 within relative
// 1e-6, conditions 2-4 as above; it becomes fusectl::QuickGelu at every opset.
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

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kTanhCubeCoefficient = 0.044715;

// The node producing `v`, when it has op type `op` and two inputs; else nullptr.
Node* binaryProducer(const Value* v, const char* op) {
  Node* n = v ? v->producer() : nullptr;
  return n && n->is(op) && n->numInputs() == 2 ? n : nullptr;
}

// Whether `v` is x^3: Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x)).
bool isCube(const Value* v, const Value* x) {
  if (Node* pow = binaryProducer(v, "Pow"))
    return pow->input(0) == x && isScalar(pow->input(1), 3.0);
  Node* mul = binaryProducer(v, "Mul");
  if (!mul) return false;
  auto square = [x](const Value* s) {
    Node* sq = binaryProducer(s, "Mul");
    return sq && sq->input(0) == x && sq->input(1) == x;
  };
  return (mul->input(0) == x && square(mul->input(1))) ||
         (mul->input(1) == x && square(mul->input(0)));
}

// The x of tanh's argument sqrt(2/pi) * (x + 0.044715 x^3), computed by `inner`; nullptr with
// `why` otherwise.
Value* tanhArgumentInput(Node* inner, Why& why) {
  Value* sum = nullptr;
  for (size_t i : {size_t{1}, size_t{0}}) {
    if (inner->numInputs() == 2 && isScalar(inner->input(i), kSqrt2OverPi))
      sum = inner->input(1 - i);
  }
  if (!sum) {
    why.fail(*inner, [&] {
      return fmt::format("{} multiplies {} by {}, neither of them sqrt(2/pi) = {}",
                         inner->label(), describeOperand(inner->input(0)),
                         describeOperand(inner->input(1)), kSqrt2OverPi);
    });
    return nullptr;
  }
  Node* add = binaryProducer(sum, "Add");
  for (size_t i = 0; add && i < 2; ++i) {
    Value* x = add->input(i);
    Node* scaled = binaryProducer(add->input(1 - i), "Mul");
    if (!scaled) continue;
    for (size_t j = 0; j < 2; ++j) {
      if (isScalar(scaled->input(j), kTanhCubeCoefficient) && isCube(scaled->input(1 - j), x))
        return x;
    }
  }
  why.fail(*inner, [&] {
    return fmt::format("{} operand '{}' is not x + 0.044715 * x^3 (Add of x and Mul(x^3, "
                       "0.044715), x^3 as Pow(x, 3) or Mul(Mul(x, x), x))",
                       inner->label(), sum->name());
  });
  return nullptr;
}

// The x of a product of `sum` (1 + erf(...) or 1 + tanh(...)) with x and 0.5 in any order: the
// form's trailing Muls; nullptr with `why`.
Value* multipliesByHalfX(const Match& m, bool half_first, Node* one, Value* x, Why& why) {
  if (half_first) {
    Node* half = m.get("half");
    // Both slots are read: otherOperand alone would take Mul(0.5, q) for x * 0.5.
    const bool halves_x = (half->input(0) == x && isScalar(half->input(1), 0.5)) ||
                          (half->input(1) == x && isScalar(half->input(0), 0.5));
    if (halves_x) return x;
    why.fail(*half, [&] {
      return fmt::format("{} does not multiply '{}' by 0.5 (it reads {} and {})", half->label(),
                         x->name(), describeOperand(half->input(0)),
                         describeOperand(half->input(1)));
    });
    return nullptr;
  }
  Node* inner = m.get("inner2");
  Node* outer = m.get("outer");
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

// The tanh chain's x, or nullptr with `why`.
Value* geluTanhInput(const Match& m, bool half_first, Why& why) {
  Node* t = m.get("t");
  Node* one = m.get("one");
  Value* x = tanhArgumentInput(m.get("inner"), why);
  if (!x) return nullptr;
  Value* added = otherOperand(*one, t->output(0));
  if (!added || !isScalar(added, 1.0)) {
    why.fail(*one, [&] {
      return fmt::format("{} adds {} to {} output, not 1", one->label(),
                         added ? describeOperand(added) : "it", t->label());
    });
    return nullptr;
  }
  return multipliesByHalfX(m, half_first, one, x, why);
}

Constraint geluTanhForm(bool half_first) {
  return {"gelu-tanh-constants", [half_first](const Match& m, Why& why) {
            return geluTanhInput(m, half_first, why) != nullptr;
          }};
}

Constraint geluForm(bool half_first) {
  return {"gelu-constants", [half_first](const Match& m, Why& why) {
            return geluInput(m, half_first, why) != nullptr;
          }};
}

// Whether every constant the chain from x to `out` reads is one element of rank at most x's:
// then no operand broadcasts x, and the output has x's shape even where a dim is unknown ("?"
// is never provably equal to "?"). The walk stops at x and goes at most kDepth nodes up.
bool scalarsKeepShape(const Node* out, const Value* x) {
  constexpr int kDepth = 12;
  if (!x->shape().hasRank()) return false;
  const size_t rank = x->shape().rank();
  std::vector<std::pair<const Node*, int>> work = {{out, 0}};
  while (!work.empty()) {
    auto [n, depth] = work.back();
    work.pop_back();
    for (const Value* v : n->inputs()) {
      if (!v || v == x) continue;
      if (v->isConstant()) {
        const Tensor* t = v->initializer();
        if (t->numel() != 1 || t->dims().size() > rank) return false;
        continue;
      }
      const Node* p = v->producer();
      if (!p || depth + 1 >= kDepth) return false;
      work.push_back({p, depth + 1});
    }
  }
  return true;
}

Constraint outputKeepsInputShape(bool half_first, bool tanh_form = false) {
  return {"same-shape:x", [half_first, tanh_form](const Match& m, Why& why) {
            Why checked(false);  // geluForm held
            const Value* x = tanh_form ? geluTanhInput(m, half_first, checked)
                                       : geluInput(m, half_first, checked);
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
            if (equal || scalarsKeepShape(outer, x)) return true;
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
  p.require(dtypeIn(all, fusibleFloatTypes()));
  return p;
}

Pattern buildTanhPattern(bool half_first) {
  using namespace constraints;
  Pattern p =
      half_first
          ? Pattern::parse("inner:Mul -> ^t:Tanh -> one:Add -> outer:Mul ; half:Mul -> outer",
                           "gelu-tanh-half-first")
          : Pattern::parse("inner:Mul -> ^t:Tanh -> one:Add -> inner2:Mul -> outer:Mul",
                           "gelu-tanh");
  p.require(geluTanhForm(half_first))
      .require(uniqueConsumer("inner"))
      .require(uniqueConsumer("t"))
      .require(uniqueConsumer("one"))
      .require(uniqueConsumer(half_first ? "half" : "inner2"))
      .require(outputKeepsInputShape(half_first, true));
  std::vector<std::string> all = {"inner", "t", "one", "outer", half_first ? "half" : "inner2"};
  p.require(dtypeIn(all, fusibleFloatTypes()));
  return p;
}

constexpr double kQuickGeluScale = 1.702;

// QuickGELU's x, or nullptr with `why`: s = Mul(x, 1.702), out = Mul(x, Sigmoid(s)).
Value* quickGeluInput(const Match& m, Why& why) {
  Node* s = m.get("s");
  Node* sig = m.get("sig");
  Node* out = m.get("out");
  Value* x = nullptr;
  for (size_t i : {size_t{1}, size_t{0}})
    if (s->numInputs() == 2 && isScalar(s->input(i), kQuickGeluScale)) x = s->input(1 - i);
  if (!x) {
    why.fail(*s, [&] {
      return fmt::format("{} multiplies {} by {}, neither of them 1.702", s->label(),
                         describeOperand(s->input(0)), describeOperand(s->input(1)));
    });
    return nullptr;
  }
  if (otherOperand(*out, sig->output(0)) == x) return x;
  why.fail(*out, [&] {
    return fmt::format("{} multiplies {} output by something other than '{}'", out->label(),
                       sig->label(), x->name());
  });
  return nullptr;
}

Pattern buildQuickGeluPattern() {
  using namespace constraints;
  Pattern p = Pattern::parse("s:Mul -> ^sig:Sigmoid -> out:Mul", "quick-gelu");
  p.require({"quick-gelu-constants",
             [](const Match& m, Why& why) { return quickGeluInput(m, why) != nullptr; }})
      .require(uniqueConsumer("s"))
      .require(uniqueConsumer("sig"))
      .require({"same-shape:x", [](const Match& m, Why& why) {
                  Why checked(false);  // quick-gelu-constants held
                  const Value* x = quickGeluInput(m, checked);
                  Node* out = m.get("out");
                  const Shape& in = x->shape();
                  const Shape& o = out->output(0)->shape();
                  bool equal = in.hasRank() && o.hasRank() && in.rank() == o.rank();
                  for (size_t i = 0; equal && i < in.rank(); ++i) equal = in[i].provablyEqual(o[i]);
                  if (equal) return true;
                  return why.fail(*out, [&] {
                    return fmt::format("{} output has shape {}, not provably the shape {} of '{}'",
                                       out->label(), o.str(), in.str(), x->name());
                  });
                }})
      .require(dtypeIn({"s", "sig", "out"}, fusibleFloatTypes()));
  return p;
}

class FuseGeluPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseGeluPassInfo; }

  std::vector<Pattern> patterns() const override {
    return {buildPattern(false), buildPattern(true), buildTanhPattern(false),
            buildTanhPattern(true), buildQuickGeluPattern()};
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern forms[2] = {buildPattern(false), buildPattern(true)};
    size_t fused = applyPatterns(graph, ctx, {&forms[0], &forms[1]},
                                 [&](Rewriter& rw, size_t form, const Match& m) {
                                   fuse(rw, forms[form], m, form == 1);
                                   return true;
                                 });
    // A Tanh or a Sigmoid is not a near miss of a Gelu by itself: only failed conditions of the
    // approximations are rejections.
    DriverOptions driver;
    driver.report_structural = false;
    const Pattern tanh_forms[2] = {buildTanhPattern(false), buildTanhPattern(true)};
    fused += applyPatterns(
        graph, ctx, {&tanh_forms[0], &tanh_forms[1]},
        [&](Rewriter& rw, size_t form, const Match& m) {
          fuseTanh(rw, tanh_forms[form], m, form == 1);
          return true;
        },
        driver);
    const Pattern quick = buildQuickGeluPattern();
    fused += applyPattern(graph, ctx, quick, [&](Rewriter& rw, const Match& m) {
      Why checked(false);  // quick-gelu-constants held
      Node* out = m.get("out");
      NewNode gelu;
      gelu.op_type = "QuickGelu";
      gelu.domain = "fusectl";
      gelu.inputs = {quickGeluInput(m, checked)};
      gelu.name = out->name();
      rw.replaceMatch(quick.name, m, out->output(0), std::move(gelu));
      rw.context().count("fused_quick_gelu");
      return true;
    }, driver);
    return fused > 0;
  }

 private:
  static void fuseTanh(Rewriter& rw, const Pattern& form, const Match& m, bool half_first) {
    Why checked(false);  // geluTanhForm held
    Value* x = geluTanhInput(m, half_first, checked);
    Node* outer = m.get("outer");
    const bool standard = rw.context().opset() >= 20;
    NewNode gelu;
    gelu.op_type = standard ? "Gelu" : "GeluTanh";
    gelu.domain = standard ? "" : "fusectl";
    gelu.inputs = {x};
    if (standard) gelu.attributes.push_back(Attribute::ofString("approximate", "tanh"));
    gelu.name = outer->name();
    rw.replaceMatch(form.name, m, outer->output(0), std::move(gelu));
    rw.context().count(standard ? "fused_standard_gelu_tanh" : "fused_fusectl_gelu_tanh");
  }

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
