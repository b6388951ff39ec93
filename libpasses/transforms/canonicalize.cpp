// canonicalize: turn equivalent exporter spellings into one form, so that each fusion pass
// matches one shape (one pattern per fusion, not one per exporter).
//
// Rewrites (each a pattern; x, v, y any values, c a constant):
//   pow-square        Pow(x, 2)                 -> Mul(x, x)                       exact
//   pow-rsqrt         Pow(v, -0.5)              -> Reciprocal(Sqrt(v))             <= 1.5 ulp
//   div-one           Div(1, y)                 -> Reciprocal(y)                   exact
//   div-by-constant   Div(x, c)                 -> Mul(x, 1/c)  (c powers of two)  exact
//   add-neg           Add(x, Neg(y))            -> Sub(x, y)                       exact
//   one-plus-weight   Add(1, w), w constant     -> the constant 1 + w (Gemma)      exact
//   hard-swish        Mul(x, HardSigmoid(x))    -> HardSwish(x)  (alpha 1/6, beta 0.5, opset >= 14)
//   softmax-shift     Softmax(Sub(x, ReduceMax(x))) -> Softmax(x)  (torchaudio's attention) exact
//   prelu-scalar      PRelu(x, c), c one element -> LeakyRelu(x, alpha=c)  (ConvTasNet)    exact
//   relu-clip         Clip(Relu(x), lo, hi), lo >= 0 or absent -> Clip(x, max(lo, 0), hi)
//                     (DeepSpeech's ReLU then hardtanh(0, 20))                         exact
//   constant-second   Add/Mul(c, x)             -> Add/Mul(x, c)                   exact
//   einsum-matmul     Einsum("..ij,..jk->..ik") -> MatMul, the operands Transposed where
//                     the equation has them transposed ("..id,..jd->..ij": MaxViT's q k^T)  same sums
//   weights-first     MatMul(v, Transpose(Softmax(s))) -> Transpose(MatMul(Softmax(s),
//                     Transpose(v)))  (the attention block of latent-diffusion UNets and VAEs,
//                     v [B, C, N]: the weights applied as every attention fusion reads them)  same sums
//
// THE canonical reciprocal square root is Reciprocal(Sqrt(v)): Div(1, Sqrt(v)) (torch's rsqrt
// before opset 13... and after) becomes it through div-one, Pow(v, -0.5) through pow-rsqrt, and
// the RMSNorm fusion matches only it. A division by a computed square root, Div(x, Sqrt(v)) (the
// layer-norm spelling), is left alone: turning it into Mul(x, Reciprocal(Sqrt(v))) would round
// twice where the model rounds once.
//
// ReduceMean keeps the axes spelling its opset requires (attribute up to opset 17, input from
// 18: an opset-18 model cannot carry the attribute); passes read both through
// constantReduceAxes() (src/reduce_axes.h), which is the one form for matching.
//
// Legality, checked in this order (each failure is a reported rejection):
//  1. The constant operand has one element and no more dims than the other operand, so the
//     result keeps the other operand's shape (a [1, 1] exponent would broadcast x up a rank).
//  2. The constants are exact: Pow's exponent is exactly 2 or -0.5, Div's numerator exactly 1,
//     HardSigmoid's alpha 1/6 within float rounding (relative 1e-6) and beta 0.5.
//  3. div-by-constant: every element of c is a power of two whose reciprocal is a normal float,
//     so 1/c is exact and x * (1/c) is x / c bit for bit. Other divisors are kept: x / c and
//     x * fl(1/c) differ by up to one ulp, and the fusions accept Div as well as Mul where a
//     scale is a constant (attention's 1/sqrt(d), Gelu's sqrt(2)).
//  4. The arithmetic is a float type. pow-rsqrt takes float32 and float64 only: in float16 the
//     replacement's two roundings are 1.5 half ulps (relative 1.5e-3) from Pow's one. div-one
//     and div-by-constant are exact in every float type, half included (1/c is a power of two
//     that the half type holds as a normal number). hard-swish takes half as a fusion does: the
//     HardSigmoid's rounding and the Mul's become HardSwish's one.
//  5. hard-swish: the model's opset is at least 14 (HardSwish does not exist before; the pass
//     does not raise the model's opset, which would change other ops' semantics), and the
//     HardSigmoid is read by that Mul only (otherwise it would be computed twice).
//
//  6. softmax-shift: the ReduceMax reduces (keepdims=1) exactly the axes the Softmax normalises
//     ({axis} from opset 13; axis to the last before, where Softmax flattens), so the shift is
//     each normalised row's own maximum; its axes are a known constant list; float arithmetic.
//     The Sub and ReduceMax stay when something else reads them.
//  7. prelu-scalar: the slope is a one-element initializer that keeps x's shape (condition 1)
//     and the arithmetic float32 or half: LeakyRelu's alpha is a float attribute, which would
//     round a float64 slope.
//
//  7b. relu-clip: the Relu is read by the Clip only and is no graph output; the Clip's lower
//     bound is absent or a constant scalar >= 0 (max(max(x, 0), lo) = max(x, lo) then; an
//     absent one becomes 0), its upper bound absent or a constant scalar; float arithmetic.
//
//  8. einsum-matmul: two operands; the equation is explicit (`->`), no letter repeats within a
//     term, every term has the same batch letters (or a leading `...` in all three) before its
//     last two, and those are (i, j) or (j, i) for the first operand, (j, k) or (k, j) for the
//     second and (i, k) for the output, with i, j, k distinct and not batch letters; the
//     operands' ranks are known, and the sizes of j in the two provably equal (Einsum
//     broadcasts a j of size 1, MatMul does not). The sum over j is the product MatMul
//     computes; its order of summation is the kernel's choice for both ops.
//
//  9. weights-first: the Transpose swaps the last two axes only, of a rank >= 3 value of known
//     rank, and is read by the product only; the Softmax normalises the last axis; v has the
//     same rank; the rewrite moves no more bytes than it saves: with static shapes, v and the
//     product's output (the two new Transposes) together hold at most as many elements as the
//     weights (the Transpose it removes), which holds where the sequence is at least twice the
//     channels. (v . a^T)[i, j] and (a . v^T)[j, i] sum the same products; the order is the
//     kernel's choice for both.
//
// Numeric bounds: everything but pow-rsqrt is bit-exact. pow-rsqrt rounds twice (sqrt, then
// 1/s) where pow rounds once: at most 1.5 ulp (relative 1.8e-7 in float32) apart.
// Not canonicalized here: the Erf-spelled GELU's multiplication orders (fuse-gelu's job), the
// fp16 Cast pair around a norm (fuse-rms-norm takes the Cast-wrapped form whole), and
// ReduceSum(x) / N for a mean (ReduceMean sums then divides too, but in a different order).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "constant_math.h"
#include "fusectl/graph/einsum_equation.h"
#include "fusectl/graph/error.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"
#include "reduce_axes.h"

namespace fusectl::passes {
namespace {

constexpr double kSixth = 1.0 / 6.0;

std::string describeConstant(const Value* c) {
  std::optional<double> s = scalarConstant(c);
  if (s) return fmt::format("'{}' (= {})", c->name(), *s);
  return fmt::format("'{}' ({} elements)", c->name(), c->initializer()->numel());
}

bool isFloat32Or64(DType t) { return t == DType::Float || t == DType::Double; }
bool isFloatType(DType t) {
  return isFloat32Or64(t) || t == DType::Float16 || t == DType::BFloat16;
}

// A `$name:const` leaf also matches a Constant node's output, whose values these rewrites do not
// read (they read initializers); fold-constants turns such a node into an initializer at -O1,
// so this only declines models run with --passes canonicalize alone.
Constraint initializerLeaves(std::vector<std::string> leaves) {
  return {"initializer-constants", [leaves](const Match& m, Why& why) {
            for (const std::string& leaf : leaves) {
              const Value* c = m.value(leaf);
              if (!c || c->isConstant()) continue;
              return why.fail(*m.root(), [&] {
                return fmt::format("{} reads '{}', a Constant node's output: fold-constants "
                                   "makes it an initializer first",
                                   m.root()->label(), c->name());
              });
            }
            return true;
          }};
}

// Condition 1: constant `c` (input `c_input` of the capture) has one element and no more dims
// than the node's other operand, whose rank is known.
Constraint scalarKeepsShape(std::string capture, size_t c_input) {
  return {"scalar-constant:" + capture, [capture, c_input](const Match& m, Why& why) {
            Node* n = m.get(capture);
            const Value* c = n->input(c_input);
            const Value* other = n->input(1 - c_input);
            if (c->initializer()->numel() != 1) {
              return why.fail(*n, [&] {
                return fmt::format("{} reads {}, not a one-element constant", n->label(),
                                   describeConstant(c));
              });
            }
            if (!other->shape().hasRank() || c->shape().rank() > other->shape().rank()) {
              return why.fail(*n, [&] {
                return fmt::format(
                    "{}: constant '{}' has shape {} and '{}' shape {}: the constant could "
                    "broadcast the result to a higher rank",
                    n->label(), c->name(), c->shape().str(), other->name(), other->shape().str());
              });
            }
            return true;
          }};
}

Constraint floatArithmetic(std::string capture) {
  return {"dtype:" + capture, [capture](const Match& m, Why& why) {
            Node* n = m.get(capture);
            const DType t = n->output(0)->dtype();
            if (isFloatType(t)) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} computes in {}: only float types are rewritten",
                                 n->label(), dtypeName(t));
            });
          }};
}

// ---- pow-square and pow-rsqrt ----
Constraint powExponent() {
  return {"exponent:p", [](const Match& m, Why& why) {
            Node* p = m.get("p");
            const double e = *scalarConstant(p->input(1));
            if (e == 2.0) return true;
            if (e == -0.5) {
              if (isFloat32Or64(p->output(0)->dtype())) return true;
              return why.fail(*p, [&] {
                return fmt::format(
                    "{} computes Pow(v, -0.5) in {}: Reciprocal(Sqrt(v)) rounds twice, which "
                    "only float32/float64 absorb",
                    p->label(), dtypeName(p->output(0)->dtype()));
              });
            }
            return why.fail(*p, [&] {
              return fmt::format(
                  "{} raises to {}: only 2 (-> Mul(x, x)) and -0.5 (-> Reciprocal(Sqrt(x))) "
                  "have a canonical form",
                  p->label(), e);
            });
          }};
}

Pattern powPattern() {
  Pattern p = Pattern::parse("^p:Pow($x, $e:const)", "pow-canonical");
  p.require(initializerLeaves({"e"})).require(scalarKeepsShape("p", 1)).require(powExponent());
  p.produces = {"Mul", "Reciprocal", "Sqrt"};
  return p;
}

void rewritePow(Rewriter& rw, const Match& m) {
  Node* p = m.get("p");
  Value* x = p->input(0);
  Value* y = p->output(0);
  NewNode out;
  if (*scalarConstant(p->input(1)) == 2.0) {
    out.op_type = "Mul";
    out.inputs = {x, x};
    rw.replaceNode(p, std::move(out));
    rw.context().count("pow_to_mul");
    return;
  }
  NewNode sqrt;
  sqrt.op_type = "Sqrt";
  sqrt.inputs = {x};
  sqrt.name = p->name().empty() ? "" : p->name() + "_sqrt";
  sqrt.naming = NodeNaming::Unique;
  Node* s = rw.addNode(std::move(sqrt), y->name() + "_sqrt", y->type, p);
  out.op_type = "Reciprocal";
  out.inputs = {s->output(0)};
  rw.replaceNode(p, std::move(out));
  rw.context().count("pow_to_rsqrt");
}

// ---- div-one and div-by-constant ----
// Div(c, y): the numerator is exactly 1 (condition 2).
Constraint numeratorIsOne() {
  return {"numerator-one:d", [](const Match& m, Why& why) {
            Node* d = m.get("d");
            if (*scalarConstant(d->input(0)) == 1.0) return true;
            return why.fail(*d, [&] {
              return fmt::format("{} divides {}, not 1: only 1 / y is a reciprocal", d->label(),
                                 describeConstant(d->input(0)));
            });
          }};
}

Constraint nonConstant(std::string capture, size_t input, std::string why_it_matters) {
  return {"computed:" + capture, [=](const Match& m, Why& why) {
            Node* n = m.get(capture);
            if (!n->input(input)->isConstant()) return true;
            return why.fail(*n, [&] {
              return fmt::format("{}: '{}' is a constant too ({})", n->label(),
                                 n->input(input)->name(), why_it_matters);
            });
          }};
}

Pattern divOnePattern() {
  Pattern p = Pattern::parse("^d:Div($one:const, $y)", "div-one");
  p.require(initializerLeaves({"one"}))
      .require(nonConstant("d", 1, "fold-constants evaluates it"))
      .require(scalarKeepsShape("d", 0))
      .require(numeratorIsOne())
      .require(floatArithmetic("d"));
  p.produces = {"Reciprocal"};
  return p;
}


Constraint divisorHasExactReciprocal() {
  return {"exact-reciprocal:d", [](const Match& m, Why& why) {
            Node* d = m.get("d");
            const Value* c = d->input(1);
            const std::vector<double> values = constantAsDoubles(*c->initializer());
            for (double v : values) {
              if (exactReciprocal(v, c->dtype())) continue;
              return why.fail(*d, [&] {
                const std::string element =
                    values.size() == 1 ? "" : fmt::format(", element {}", v);
                return fmt::format(
                    "{} divides by {}{}: 1/c is not exact in {} (c must be a power of two with "
                    "a normal reciprocal), so x * (1/c) could differ from x / c by one ulp",
                    d->label(), describeConstant(c), element, dtypeName(c->dtype()));
              });
            }
            return true;
          }};
}

Pattern divByConstantPattern() {
  Pattern p = Pattern::parse("^d:Div($x, $c:const)", "div-by-constant");
  p.require(initializerLeaves({"c"}))
      .require(nonConstant("d", 0, "fold-constants evaluates it"))
      .require(floatArithmetic("d"))
      .require(divisorHasExactReciprocal());
  p.produces = {"Mul"};
  return p;
}

void rewriteDivOne(Rewriter& rw, const Match& m) {
  Node* d = m.get("d");
  NewNode r;
  r.op_type = "Reciprocal";
  r.inputs = {d->input(1)};
  rw.replaceNode(d, std::move(r));
  rw.context().count("div_to_reciprocal");
}

void rewriteDivByConstant(Rewriter& rw, const Match& m) {
  Node* d = m.get("d");
  const Value* c = d->input(1);
  const Tensor& t = *c->initializer();
  std::vector<double> values = constantAsDoubles(t);
  for (double& v : values) v = *exactReciprocal(v, c->dtype());
  Value* inverse = rw.addConstant(c->name() + "_reciprocal",
                                  tensorFromDoubles(c->dtype(), t.dims(), values));
  NewNode mul;
  mul.op_type = "Mul";
  mul.inputs = {d->input(0), inverse};
  rw.replaceNode(d, std::move(mul));
  rw.context().count("div_to_mul");
}

// ---- add-neg ----
Pattern addNegPattern() {
  Pattern p = Pattern::parse("^a:Add($x, n:Neg($y))", "add-neg");
  p.produces = {"Sub"};
  return p;
}

void rewriteAddNeg(Rewriter& rw, const Match& m) {
  Node* a = m.get("a");
  NewNode sub;
  sub.op_type = "Sub";
  sub.inputs = {m.value("x"), m.value("y")};
  rw.replaceNode(a, std::move(sub));
  rw.context().count("add_neg_to_sub");
}

// ---- one-plus-weight ----
// Add(1, w) with both constant: which input is the scalar 1, or nullopt.
std::optional<size_t> onePosition(const Node& a) {
  for (size_t i : {size_t{0}, size_t{1}}) {
    std::optional<double> s = scalarConstant(a.input(i));
    if (s && *s == 1.0 && a.input(i)->shape().rank() <= a.input(1 - i)->shape().rank()) return i;
  }
  return std::nullopt;
}

Constraint addsOneToWeight() {
  return {"one-plus-weight:a", [](const Match& m, Why& why) {
            Node* a = m.get("a");
            if (!onePosition(*a)) {
              return why.fail(*a, [&] {
                return fmt::format(
                    "{} adds {} and {}: neither is a one-element 1 of no higher rank than the "
                    "other (fold-constants evaluates other constant sums)",
                    a->label(), describeConstant(a->input(0)), describeConstant(a->input(1)));
              });
            }
            if (isFoldableFloat(a->output(0)->dtype())) return true;
            return why.fail(*a, [&] {
              return fmt::format("{} adds {} numbers, not floats", a->label(),
                                 dtypeName(a->output(0)->dtype()));
            });
          }};
}

Pattern onePlusWeightPattern() {
  Pattern p = Pattern::parse("^a:Add($p:const, $q:const)", "one-plus-weight");
  p.require(initializerLeaves({"p", "q"})).require(addsOneToWeight());
  return p;
}

void rewriteOnePlusWeight(Rewriter& rw, const Match& m) {
  Node* a = m.get("a");
  const Value* w = a->input(1 - *onePosition(*a));
  std::vector<double> values = constantAsDoubles(*w->initializer());
  for (double& v : values) v += 1.0;  // exact in double; rounded once, as Add rounds
  Value* y = a->output(0);
  rw.replaceWithConstants(a, {{y, tensorFromDoubles(y->dtype(), w->initializer()->dims(), values)}});
  rw.context().count("folded_one_plus_weight");
}

// ---- hard-swish ----
Constraint hardSwishGate(int64_t opset) {
  return {"hard-swish:h", [opset](const Match& m, Why& why) {
            Node* h = m.get("h");
            const float alpha = h->attrFloat("alpha", 0.2f);
            const float beta = h->attrFloat("beta", 0.5f);
            // Written as "not within" so that a NaN alpha fails it too.
            if (!(std::fabs(alpha - kSixth) <= 1e-6 * kSixth) || beta != 0.5f) {
              return why.fail(*h, [&] {
                return fmt::format("{} has alpha={} beta={}; HardSwish is alpha=1/6, beta=0.5",
                                   h->label(), alpha, beta);
              });
            }
            if (opset > 0 && opset < 14) {
              return why.fail(*m.get("m"), [&] {
                return fmt::format(
                    "{} is x * HardSigmoid(x), but the model imports opset {}: HardSwish needs "
                    "opset 14 (left as written; raising the opset would change other ops)",
                    m.get("m")->label(), opset);
              });
            }
            return true;
          }};
}

Pattern hardSwishPattern(int64_t opset) {
  using namespace constraints;
  Pattern p = Pattern::parse("^m:Mul($x, h:HardSigmoid($x))", "hard-swish");
  p.require(hardSwishGate(opset)).require(uniqueConsumer("h")).require(floatArithmetic("m"));
  p.produces = {"HardSwish"};
  return p;
}

void rewriteHardSwish(Rewriter& rw, const Match& m) {
  Node* mul = m.get("m");
  NewNode hs;
  hs.op_type = "HardSwish";
  hs.inputs = {m.value("x")};
  rw.replaceNode(mul, std::move(hs));
  rw.context().count("hard_swish");
}

// ---- softmax-shift ----
// Softmax(x - max(x)): the exporter's own stabilisation, which every Softmax kernel does itself.
// The shift is a constant per normalised row, which softmax ignores; the kernels subtract the
// row's maximum first, and the maximum of x - m is exactly 0, so both spellings compute
// exp(fl(x - m)) / sum: the same bits (an all -inf row is NaN either way).
// The axes Softmax normalises: {axis} from opset 13, {axis..rank-1} before (the input is seen as
// a 2-D matrix), or nullopt when the rank is unknown or the axis out of range.
std::optional<std::vector<int64_t>> softmaxAxes(const Node& softmax, int64_t opset) {
  const Shape& shape = softmax.input(0)->shape();
  if (!shape.hasRank()) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(shape.rank());
  int64_t axis = softmax.attrInt("axis", opset > 0 && opset < 13 ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  std::vector<int64_t> axes;
  const int64_t last = opset > 0 && opset < 13 ? rank - 1 : axis;
  for (int64_t a = axis; a <= last; ++a) axes.push_back(a);
  return axes;
}

Constraint shiftIsRowConstant(int64_t opset) {
  return {"row-constant-shift:r", [opset](const Match& m, Why& why) {
            Node* s = m.get("s");
            Node* r = m.get("r");
            const std::optional<std::vector<int64_t>> rows = softmaxAxes(*s, opset);
            if (!rows) {
              return why.fail(*s, [&] {
                return fmt::format("{}: the rank of its input or its axis is not known",
                                   s->label());
              });
            }
            const size_t rank = s->input(0)->shape().rank();
            std::optional<std::vector<int64_t>> reduced = constantReduceAxes(*r);
            if (reduced) reduced = normalizedAxes(*reduced, rank);
            if (!reduced) {
              return why.fail(*r, [&] {
                return fmt::format("{} reduces axes that are not a known constant list",
                                   r->label());
              });
            }
            if (r->attrInt("keepdims", 1) != 1) {
              return why.fail(*r, [&] {
                return fmt::format("{} drops the reduced axes (keepdims=0): its maximum does "
                                   "not broadcast along the rows",
                                   r->label());
              });
            }
            // An empty list reduces every axis. Exactly the rows' axes: a maximum over more
            // (a constant per several rows) would be as legal but not bit-exact, since the
            // rows' own maxima would then not be exactly 0 after the shift.
            std::vector<int64_t> reduced_axes = *reduced;
            if (reduced_axes.empty())
              for (size_t a = 0; a < rank; ++a) reduced_axes.push_back(static_cast<int64_t>(a));
            if (reduced_axes != *rows) {
              return why.fail(*r, [&] {
                return fmt::format("{} reduces axes [{}] where {} normalises [{}]: the shift is "
                                   "not the rows' own maximum",
                                   r->label(), fmt::join(reduced_axes, ","), s->label(),
                                   fmt::join(*rows, ","));
              });
            }
            return true;
          }};
}

Pattern softmaxShiftPattern(int64_t opset) {
  Pattern p = Pattern::parse("^s:Softmax(d:Sub($x, r:ReduceMax($x)))", "softmax-shift");
  p.require(floatArithmetic("s")).require(shiftIsRowConstant(opset));
  return p;
}

void rewriteSoftmaxShift(Rewriter& rw, const Match& m) {
  rw.rewireInput(m.get("s"), 0, m.value("x"));
  // Erased now rather than by a later sweep: the fusions that run next (fuse-attention) take a
  // product whose only reader is the Softmax, and a dead Sub would still read it.
  Node* d = m.get("d");
  if (!d->output(0)->hasUses() && !d->output(0)->isGraphOutput()) rw.eraseWithDeadProducers(d);
  rw.context().count("softmax_shift_dropped");
}

// ---- prelu-scalar ----
// PRelu with one slope for every element is LeakyRelu, which the epilogue fusions take. alpha is
// a float attribute: exact for float32 slopes, and for half ones (a half's value is a float; the
// product of two halves is exact in float and rounded once to half either way).
Constraint slopeFitsAlpha() {
  return {"slope-dtype:p", [](const Match& m, Why& why) {
            Node* p = m.get("p");
            const DType t = p->output(0)->dtype();
            if (t == DType::Float || t == DType::Float16 || t == DType::BFloat16) return true;
            return why.fail(*p, [&] {
              return fmt::format("{} computes in {}: LeakyRelu's alpha (a float attribute) "
                                 "would round its slope",
                                 p->label(), dtypeName(t));
            });
          }};
}

Pattern preluScalarPattern() {
  Pattern p = Pattern::parse("^p:PRelu($x, $slope:const)", "prelu-scalar");
  p.require(initializerLeaves({"slope"}))
      .require(scalarKeepsShape("p", 1))
      .require(slopeFitsAlpha());
  p.produces = {"LeakyRelu"};
  return p;
}

void rewritePreluScalar(Rewriter& rw, const Match& m) {
  Node* p = m.get("p");
  NewNode leaky;
  leaky.op_type = "LeakyRelu";
  leaky.inputs = {m.value("x")};
  leaky.attributes.push_back(
      Attribute::ofFloat("alpha", static_cast<float>(*scalarConstant(m.value("slope")))));
  rw.replaceNode(p, std::move(leaky));
  rw.context().count("prelu_to_leaky_relu");
}

// ---- relu-clip ----
// Clip(Relu(x), lo, hi) with lo >= 0 is Clip(x, lo, hi): one pass over memory instead of two,
// and one activation an epilogue can take (fuse-epilogue takes one; a Relu then a Clip left the
// Clip as a node of its own after every DeepSpeech projection).

// The Clip's bound `which` (1: min, 2: max) as written: nullopt when absent, NaN when it is not
// a constant scalar.
std::optional<float> clipBound(const Node& c, int which, int64_t opset) {
  if (opset > 0 && opset < 11) {
    const char* name = which == 1 ? "min" : "max";
    if (!c.attr(name)) return std::nullopt;
    return c.attrFloat(name, 0.f);
  }
  if (static_cast<int>(c.numInputs()) <= which || !c.input(which)) return std::nullopt;
  const Value* v = c.input(which);
  if (!v->isConstant() || v->initializer()->numel() != 1)
    return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(v->initializer()->valueAsDouble(0));
}

Constraint clipKeepsRelu(int64_t opset) {
  return {"clip-bounds:c", [opset](const Match& m, Why& why) {
            Node* c = m.get("c");
            const std::optional<float> lo = clipBound(*c, 1, opset);
            const std::optional<float> hi = clipBound(*c, 2, opset);
            const DType t = c->output(0)->dtype();
            if (!isFoldableFloat(t))
              return why.fail(*c, [&] {
                return fmt::format("{} computes in {}, not a float type", c->label(),
                                   dtypeName(t));
              });
            if (lo && !(*lo >= 0.f))
              return why.fail(*c, [&] {
                return fmt::format("{} has a lower bound that is not a constant >= 0: the Relu "
                                   "before it still clips what lies between",
                                   c->label());
              });
            // max(x, -0) keeps a negative x's -0 where the Relu gave +0: equal, not the same bits.
            if (lo && std::signbit(*lo))
              return why.fail(*c, [&] {
                return fmt::format("{} has a lower bound of -0, which would give -0 where the "
                                   "Relu gives +0",
                                   c->label());
              });
            if (hi && std::isnan(*hi))
              return why.fail(*c, [&] {
                return fmt::format("{} has an upper bound that is not a constant scalar",
                                   c->label());
              });
            return true;
          }};
}

Pattern reluClipPattern(int64_t opset) {
  Pattern p = Pattern::parse("r:Relu -> ^c:Clip", "relu-clip");
  p.require(constraints::uniqueConsumer("r")).require(clipKeepsRelu(opset));
  p.produces = {"Clip"};
  return p;
}

void rewriteReluClip(Rewriter& rw, const Match& m) {
  Node* r = m.get("r");
  Node* c = m.get("c");
  const int64_t opset = rw.context().opset();
  rw.rewireInput(c, 0, r->input(0));
  if (!clipBound(*c, 1, opset)) {  // no lower bound: the Relu's 0 becomes it
    if (opset > 0 && opset < 11) {
      rw.setAttribute(c, Attribute::ofFloat("min", 0.f));
    } else {
      Tensor zero(c->output(0)->dtype(), {});
      NewNode clip;
      clip.op_type = "Clip";
      clip.inputs = {r->input(0), rw.addConstant(c->output(0)->name() + "_min", std::move(zero))};
      if (c->numInputs() > 2 && c->input(2)) clip.inputs.push_back(c->input(2));
      rw.replaceNode(c, std::move(clip));
    }
  }
  if (!rw.erased(r) && !r->output(0)->hasUses()) rw.eraseWithDeadProducers(r);
  rw.context().count("relu_folded_into_clip");
}

// ---- einsum-matmul ----
// An Einsum equation that is a batched matrix product: which operands to transpose (their last
// two axes swapped) so that MatMul computes it.
struct MatMulEquation {
  bool transpose_a = false;
  bool transpose_b = false;
};

std::optional<MatMulEquation> matmulEquation(const std::string& equation) {
  EinsumEquation parsed;
  try {
    parsed = parseEinsumEquation(equation);
  } catch (const Error&) {
    return std::nullopt;  // the shape rule and the kernel say what is wrong with it
  }
  if (!parsed.output || parsed.inputs.size() != 2) return std::nullopt;
  const EinsumTerm* terms[] = {&parsed.inputs[0], &parsed.inputs[1], &*parsed.output};
  // A leading ellipsis in all three terms is a batch prefix like the letters after it.
  int ellipses = 0;
  for (const EinsumTerm* t : terms) {
    if (t->hasEllipsis() && t->ellipsis_at != 0) return std::nullopt;
    ellipses += t->hasEllipsis();
  }
  if (ellipses != 0 && ellipses != 3) return std::nullopt;
  for (const EinsumTerm* t : terms) {
    const std::string& l = t->letters;
    if (l.size() < 2) return std::nullopt;
    for (size_t i = 0; i < l.size(); ++i)
      if (l.find(l[i], i + 1) != std::string::npos) return std::nullopt;  // a diagonal
  }
  const std::string &a = terms[0]->letters, &b = terms[1]->letters, &o = terms[2]->letters;
  const size_t r = a.size();
  if (b.size() != r || o.size() != r) return std::nullopt;
  const std::string batch = a.substr(0, r - 2);
  if (b.substr(0, r - 2) != batch || o.substr(0, r - 2) != batch) return std::nullopt;
  const char i = o[r - 2], k = o[r - 1];
  const std::string at = a.substr(r - 2), bt = b.substr(r - 2);
  MatMulEquation eq;
  char j = 0;
  if (at[0] == i) {
    j = at[1];
  } else if (at[1] == i) {
    j = at[0];
    eq.transpose_a = true;
  } else {
    return std::nullopt;
  }
  if (bt[0] == j && bt[1] == k) {
  } else if (bt[1] == j && bt[0] == k) {
    eq.transpose_b = true;
  } else {
    return std::nullopt;
  }
  if (i == j || j == k || i == k) return std::nullopt;
  for (char c : {i, j, k})
    if (batch.find(c) != std::string::npos) return std::nullopt;
  return eq;
}

Constraint einsumIsMatMul() {
  return {"matmul-equation:e", [](const Match& m, Why& why) {
            Node* e = m.get("e");
            const std::string equation = e->attrString("equation", "");
            const std::optional<MatMulEquation> eq =
                e->numInputs() == 2 ? matmulEquation(equation) : std::nullopt;
            if (!eq) {
              return why.fail(*e, [&] {
                return fmt::format("{} equation '{}' is not a batched matrix product of two "
                                   "operands (..ij,..jk->..ik, either operand transposed)",
                                   e->label(), equation);
              });
            }
            for (size_t input : {size_t{0}, size_t{1}}) {
              const bool transposed = input == 0 ? eq->transpose_a : eq->transpose_b;
              const Shape& s = e->input(input)->shape();
              if (!transposed || s.hasRank()) continue;
              return why.fail(*e, [&] {
                return fmt::format("{} operand '{}' must be transposed but its rank is unknown",
                                   e->label(), e->input(input)->name());
              });
            }
            // Einsum broadcasts a summed letter of size 1 against the other operand's size (ONNX
            // Runtime runs it); MatMul does not. The two sizes must be the same.
            const Shape& sa = e->input(0)->shape();
            const Shape& sb = e->input(1)->shape();
            const bool known = sa.hasRank() && sb.hasRank() && sa.rank() >= 2 && sb.rank() >= 2;
            const Dim* ja = known ? &sa[sa.rank() - (eq->transpose_a ? 2 : 1)] : nullptr;
            const Dim* jb = known ? &sb[sb.rank() - (eq->transpose_b ? 1 : 2)] : nullptr;
            if (!known || !ja->provablyEqual(*jb)) {
              return why.fail(*e, [&] {
                return fmt::format("{} sums over dims {} of '{}' and {} of '{}', not provably "
                                   "the same size (Einsum broadcasts a 1, MatMul does not)",
                                   e->label(), known ? ja->str() : "?", e->input(0)->name(),
                                   known ? jb->str() : "?", e->input(1)->name());
              });
            }
            return true;
          }};
}

Pattern einsumMatMulPattern() {
  Pattern p = Pattern::parse("^e:Einsum($a, $b)", "einsum-matmul");
  p.require(einsumIsMatMul()).require(floatArithmetic("e"));
  p.produces = {"MatMul", "Transpose"};
  return p;
}

// `shape` with its last two dims swapped (rank >= 2).
Shape lastTwoDimsSwapped(const Shape& shape) {
  std::vector<Dim> d = shape.dims();
  std::swap(d[d.size() - 1], d[d.size() - 2]);
  return Shape(d);
}

// A new Transpose of `v` (rank known, >= 2) swapping its last two axes, placed before
// `position`; the node is named `name` (made unique; "" for none), its output after v.
Value* transposedLastTwo(Rewriter& rw, Value* v, Node* position, const std::string& name) {
  NewNode t;
  t.op_type = "Transpose";
  t.inputs = {v};
  t.attributes.push_back(Attribute::ofInts("perm", lastTwoAxesSwapped(v->shape().rank())));
  t.name = name;
  t.naming = NodeNaming::Unique;
  return rw.addNode(std::move(t), v->name() + "_transposed",
                    ValueType{v->dtype(), lastTwoDimsSwapped(v->shape()), {}}, position)
      ->output(0);
}

void rewriteEinsumMatMul(Rewriter& rw, const Match& m) {
  Node* e = m.get("e");
  const MatMulEquation eq = *matmulEquation(e->attrString("equation", ""));
  auto operand = [&](size_t input, bool transposed) {
    Value* v = e->input(input);
    if (!transposed) return v;
    return transposedLastTwo(rw, v, e,
                             e->name().empty() ? "" : fmt::format("{}_transposed_{}", e->name(), input));
  };
  Value* a = operand(0, eq.transpose_a);
  Value* b = operand(1, eq.transpose_b);
  NewNode mm;
  mm.op_type = "MatMul";
  mm.inputs = {a, b};
  rw.replaceNode(e, std::move(mm));
  rw.context().count("einsum_to_matmul");
}

// ---- weights-first ----
Constraint weightsTransposedBack() {
  return {"transposed-weights:t", [](const Match& m, Why& why) {
            Node* p = m.get("p");
            Node* t = m.get("t");
            Node* s = m.get("s");
            const Shape& ws = s->output(0)->shape();
            const std::optional<std::vector<int64_t>> perm = transposePerm(*t, nullptr);
            if (!ws.hasRank() || ws.rank() < 3 || !perm || *perm != lastTwoAxesSwapped(ws.rank())) {
              return why.fail(*t, [&] {
                return fmt::format("{} does not swap just the last two axes of a rank >= 3 "
                                   "value of known rank",
                                   t->label());
              });
            }
            const int64_t rank = static_cast<int64_t>(ws.rank());
            const int64_t axis = s->attrInt("axis", -1);
            if (axis != -1 && axis != rank - 1) {
              return why.fail(*s, [&] {
                return fmt::format("{} normalises axis {}, not the last", s->label(), axis);
              });
            }
            const Shape& vs = p->input(0)->shape();
            if (!vs.hasRank() || static_cast<int64_t>(vs.rank()) != rank) {
              return why.fail(*p, [&] {
                return fmt::format("{} first operand has shape {}, not of the weights' rank {}",
                                   p->label(), vs.str(), rank);
              });
            }
            const std::optional<int64_t> w = ws.staticNumel(), v = vs.staticNumel(),
                                         y = p->output(0)->shape().staticNumel();
            if (!w || !v || !y || *v + *y > *w) {
              return why.fail(*p, [&] {
                return fmt::format("{} transposing V {} and the output {} would move more than "
                                   "the weights {} it saves",
                                   p->label(), vs.str(), p->output(0)->shape().str(), ws.str());
              });
            }
            return true;
          }};
}

Pattern weightsFirstPattern() {
  Pattern p = Pattern::parse("^p:MatMul($v, t:Transpose(s:Softmax($x)))", "weights-first");
  p.require(constraints::uniqueConsumer("t")).require(weightsTransposedBack());
  p.require(floatArithmetic("p"));
  p.produces = {"MatMul", "Transpose"};
  return p;
}

void rewriteWeightsFirst(Rewriter& rw, const Match& m) {
  Node* p = m.get("p");
  Value* v = m.value("v");
  Value* weights = m.get("s")->output(0);
  Value* v_t = transposedLastTwo(rw, v, p, p->name().empty() ? "" : p->name() + "_values_transposed");
  NewNode mm;
  mm.op_type = "MatMul";
  mm.inputs = {weights, v_t};
  mm.name = p->name().empty() ? "" : p->name() + "_weights_first";
  mm.naming = NodeNaming::Unique;
  Value* product =
      rw.addNode(std::move(mm), p->output(0)->name() + "_weights_first",
                 ValueType{p->output(0)->dtype(), lastTwoDimsSwapped(p->output(0)->shape()), {}}, p)
          ->output(0);
  NewNode back;
  back.op_type = "Transpose";
  back.inputs = {product};
  back.attributes.push_back(Attribute::ofInts("perm", lastTwoAxesSwapped(v->shape().rank())));
  rw.replaceNode(p, std::move(back));
  rw.context().count("weights_first");
}

// ---- constant-second ----
// Add/Mul(c, x) -> Add/Mul(x, c): no pattern, since every Add and Mul would be a candidate and
// the only way to fail is to already be canonical. Input 1 is rewired first, so the constant
// is never left without a reader (rewireInput would remove it).
size_t putConstantsSecond(const Graph& graph, PassContext& ctx) {
  Rewriter rw(ctx);
  size_t swapped = 0;
  for (const char* op : {"Add", "Mul"}) {
    for (Node* n : graph.nodesOfType(op)) {
      if (n->numInputs() != 2) continue;
      Value* c = n->input(0);
      Value* x = n->input(1);
      if (!c || !x || !c->isConstant() || x->isConstant()) continue;
      if (!ctx.allowRewrite()) return swapped;
      rw.rewireInput(n, 1, c);
      rw.rewireInput(n, 0, x);
      ++swapped;
    }
  }
  if (swapped > 0) ctx.count("constant_second", static_cast<int64_t>(swapped));
  return swapped;
}

// Candidates: the nodes a rule looks at, a cheap test before matching. Only candidates that do
// not qualify are reported, so that `match --explain` lists the spellings that almost have a
// canonical form, not every Div and Add of the model.
bool readsInitializer(const Node& n, size_t input) {
  return n.numInputs() == 2 && n.input(input) && n.input(input)->isConstant();
}
bool powByConstant(const Node& n) { return readsInitializer(n, 1); }
bool divOfConstant(const Node& n) { return readsInitializer(n, 0); }
bool divByConstant(const Node& n) { return readsInitializer(n, 1); }
bool addOfConstants(const Node& n) { return readsInitializer(n, 0) && readsInitializer(n, 1); }
bool anyNode(const Node&) { return true; }
bool twoOperands(const Node& n) { return n.numInputs() == 2; }
// Mul(x, HardSigmoid(x)) in either order: a Mul by a HardSigmoid of something else (the gate
// of a squeeze-excitation block) is no candidate.
bool timesItsHardSigmoid(const Node& n) {
  if (n.numInputs() != 2) return false;
  for (size_t i : {size_t{0}, size_t{1}}) {
    const Node* h = n.input(i) ? n.input(i)->producer() : nullptr;
    if (h && h->is("HardSigmoid") && h->input(0) == n.input(1 - i)) return true;
  }
  return false;
}

// Softmax(Sub(x, ReduceMax(x))): a Softmax of anything else is no candidate.
bool shiftedByItsMax(const Node& n) {
  const Node* d = n.input(0) ? n.input(0)->producer() : nullptr;
  if (!d || !d->is("Sub") || d->numInputs() != 2 || !d->input(1)) return false;
  const Node* r = d->input(1)->producer();
  return r && r->is("ReduceMax") && r->input(0) == d->input(0);
}
bool preluByConstant(const Node& n) { return readsInitializer(n, 1); }
// Clip(Relu(x)): a Clip of anything else is no candidate.
bool clipOfRelu(const Node& n) {
  const Node* r = n.numInputs() > 0 && n.input(0) ? n.input(0)->producer() : nullptr;
  return r && r->is("Relu");
}
// MatMul(x, Transpose(Softmax(...))): a MatMul of anything else is no candidate.
bool readsTransposedSoftmax(const Node& n) {
  const Node* t = n.numInputs() == 2 && n.input(1) ? n.input(1)->producer() : nullptr;
  if (!t || !t->is("Transpose") || !t->input(0)) return false;
  const Node* s = t->input(0)->producer();
  return s && s->is("Softmax");
}

struct Rule {
  Pattern pattern;
  bool (*candidate)(const Node&);
  void (*rewrite)(Rewriter&, const Match&);
};

std::vector<Rule> rules(int64_t opset) {
  return {{powPattern(), powByConstant, rewritePow},
          {divOnePattern(), divOfConstant, rewriteDivOne},
          {divByConstantPattern(), divByConstant, rewriteDivByConstant},
          {addNegPattern(), anyNode, rewriteAddNeg},
          {onePlusWeightPattern(), addOfConstants, rewriteOnePlusWeight},
          {hardSwishPattern(opset), timesItsHardSigmoid, rewriteHardSwish},
          {softmaxShiftPattern(opset), shiftedByItsMax, rewriteSoftmaxShift},
          {preluScalarPattern(), preluByConstant, rewritePreluScalar},
          {reluClipPattern(opset), clipOfRelu, rewriteReluClip},
          {einsumMatMulPattern(), twoOperands, rewriteEinsumMatMul},
          {weightsFirstPattern(), readsTransposedSoftmax, rewriteWeightsFirst}};
}

// One sweep of a rule over its candidates, as they were when the sweep began (only candidates
// that do not qualify are reported). Counters: "candidates", "matches", "rewrites".
size_t applyRule(const Graph& graph, PassContext& ctx, const Rule& rule) {
  DriverOptions driver;
  driver.report_structural = false;
  driver.candidate = rule.candidate;
  return applyPattern(
      graph, ctx, rule.pattern,
      [&](Rewriter& rw, const Match& m) {
        rule.rewrite(rw, m);
        return true;
      },
      driver);
}

class CanonicalizePass : public Pass {
 public:
  const PassInfo& info() const override { return CanonicalizePassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (Rule& r : rules(0)) out.push_back(std::move(r.pattern));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    size_t changed = 0;
    for (const Rule& rule : rules(ctx.opset())) changed += applyRule(graph, ctx, rule);
    changed += putConstantsSecond(graph, ctx);
    return changed > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createCanonicalizePass() { return std::make_unique<CanonicalizePass>(); }

}  // namespace fusectl::passes
