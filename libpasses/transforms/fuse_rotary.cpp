// fuse-rotary: the rotary position embedding of LLaMA/Qwen/GPT-NeoX exports, written as
// rotate_half, as one fusectl::RotaryEmbedding; with the per-head RMSNorm that Qwen3/OLMo-style
// blocks apply to q and k first (QK-norm), as one fusectl::QKNormRotaryEmbedding. Five to seven
// nodes and four intermediates of the q/k shape become one pass over each head row.
//
//   x ─> Slice(x, h:D) ─> Neg ─┐
//   x ─> Slice(x, 0:h) ────────> Concat(-1) ─> Mul(., sin) ─┐
//   x ─────────────────────────────────────> Mul(x, cos) ──> Add ─> Y
//   =>  Y = RotaryEmbedding(x, cos, sin)
//
//   x = RMSNorm(x0, scale) [-> Transpose(perm keeping the last axis)] -> the above
//   =>  Y = QKNormRotaryEmbedding([Transpose(x0),] scale, cos, sin)
// The RMSNorm normalises each head row, which a Transpose that keeps the last axis in place only
// moves around, so the norm can run after the Transpose as well as before it: the fused node
// reads the transposed pre-norm rows.
//
// Forms matched (rooted at the Add; operand orders of Add and Mul are free):
//   rotary-qk-norm-transposed  Add(Mul(t:Transpose(norm:fusectl::RMSNorm), $cos),
//                                  Mul(Concat(Neg(Slice(t)), Slice(t)), $sin))
//   rotary-qk-norm             the same with the RMSNorm's output rotated directly
//   rotary                     Add(Mul($x, $cos), Mul(Concat(Neg(Slice($x)), Slice($x)), $sin))
// The QK-norm forms come first; when one fails (the norm has another reader...) the plain form
// can still take the rotation alone.
//
// Conditions, each failure a reported rejection:
//  1. The rotation: x's last dim D is static and even; the Concat joins exactly two values on
//     the last axis, the Neg of Slice(x, [D/2, >= D)) and Slice(x, [0, D/2)), both on the last
//     axis with step 1 (constant starts/ends/axes, opset >= 10, or attributes before).
//  2. cos and sin broadcast to x without growing it: no more dims than x, last dim D, every
//     other dim 1 or provably x's; the two Muls and the Add give x's shape.
//  3. The intermediates are read only inside the match and are no graph outputs.
//  4. QK-norm forms: the RMSNorm normalises the last axis only, its scale has D elements or
//     one, and the Transpose keeps the last axis last.
//  5. Everything is float32 (the kernels' type).
// Not matched yet: the interleaved (GPT-J, rotate_every_two) form and partial rotary (only the
// first R < D dims rotated, the rest concatenated back), which stay as they are.
#include <fmt/format.h>

#include <limits>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

enum class Form { QKNormTransposed, QKNorm, Plain };
constexpr Form kForms[] = {Form::QKNormTransposed, Form::QKNorm, Form::Plain};

const char* formName(Form f) {
  return f == Form::QKNormTransposed ? "rotary-qk-norm-transposed"
         : f == Form::QKNorm         ? "rotary-qk-norm"
                                     : "rotary";
}

// The value the rotation reads: the Transpose's output, the RMSNorm's, or the leaf $x.
Value* rotated(const Match& m, Form f) {
  if (f == Form::QKNormTransposed) return m.get("t")->output(0);
  if (f == Form::QKNorm) return m.get("norm")->output(0);
  return m.value("x");
}

// x's static last dim, or -1.
int64_t lastDim(const Value* x) {
  const Shape& s = x->shape();
  if (!s.hasRank() || s.rank() == 0 || !s[s.rank() - 1].isStatic()) return -1;
  return s[s.rank() - 1].value();
}

int64_t normalizedAxis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// Condition 1.
Constraint rotateHalf(Form f) {
  return {"rotate-half", [f](const Match& m, Why& why) {
            Value* x = rotated(m, f);
            Node* cat = m.get("cat");
            const int64_t d = lastDim(x);
            if (d <= 0 || d % 2 != 0) {
              return why.fail(*cat, [&] {
                return fmt::format("{} rotates '{}' {}, whose last dim is not static and even",
                                   cat->label(), x->name(), x->shape().str());
              });
            }
            const size_t rank = x->shape().rank();
            if (cat->numInputs() != 2 ||
                normalizedAxis(cat->attrInt("axis", 0), rank) != static_cast<int64_t>(rank) - 1) {
              return why.fail(*cat, [&] {
                return fmt::format("{} is not a Concat of two halves on the last axis",
                                   cat->label());
              });
            }
            const int64_t half = d / 2;
            auto isRange = [&](const Node* slice, int64_t from, int64_t to_at_least,
                               int64_t to_at_most) {
              std::optional<SliceRange> r = sliceRange(*slice, rank);
              if (!r || r->axis != static_cast<int64_t>(rank) - 1) return false;
              const int64_t start = r->start < 0 ? r->start + d : r->start;
              const int64_t end = r->end < 0 ? r->end + d : r->end;
              return start == from && end >= to_at_least && end <= to_at_most;
            };
            constexpr int64_t kOpenEnd = std::numeric_limits<int64_t>::max();
            Node* hi = m.get("hi");
            Node* lo = m.get("lo");
            if (!isRange(hi, half, d, kOpenEnd) || !isRange(lo, 0, half, half)) {
              return why.fail(*cat, [&] {
                return fmt::format("{} does not join -x[{}:{}] and x[0:{}] of '{}' on the last "
                                   "axis (not rotate_half)",
                                   cat->label(), half, d, half, x->name());
              });
            }
            return true;
          }};
}

// Whether `t` broadcasts to `x` without growing it, its last dim being x's.
bool broadcastsInto(const Shape& t, const Shape& x) {
  if (!t.hasRank() || !x.hasRank() || t.rank() == 0 || t.rank() > x.rank()) return false;
  const size_t off = x.rank() - t.rank();
  for (size_t i = 0; i < t.rank(); ++i) {
    const Dim& td = t[i];
    const Dim& xd = x[off + i];
    const bool last = i + 1 == t.rank();
    if (td.provablyEqual(xd)) continue;
    if (!last && td.isStatic() && td.value() == 1) continue;
    return false;
  }
  return true;
}

// Condition 2.
Constraint tablesBroadcast(Form f) {
  return {"cos-sin-broadcast", [f](const Match& m, Why& why) {
            Value* x = rotated(m, f);
            const Shape& xs = x->shape();
            for (const char* leaf : {"cos", "sin"}) {
              Value* t = m.value(leaf);
              if (!broadcastsInto(t->shape(), xs)) {
                return why.fail(*m.get("y"), [&] {
                  return fmt::format("{} {} table '{}' {} does not broadcast into '{}' {} along "
                                     "its last dim",
                                     m.get("y")->label(), leaf, t->name(), t->shape().str(),
                                     x->name(), xs.str());
                });
              }
            }
            for (const char* n : {"xc", "xs", "y"}) {
              Node* node = m.get(n);
              if (!dimsProvablyEqual(node->output(0)->shape(), xs)) {
                return why.fail(*node, [&] {
                  return fmt::format("{} output {} is not provably the rotated '{}' {}",
                                     node->label(), node->output(0)->shape().str(), x->name(),
                                     xs.str());
                });
              }
            }
            return true;
          }};
}

// Condition 4.
Constraint qkNormQualifies(Form f) {
  return {"qk-norm", [f](const Match& m, Why& why) {
            Node* norm = m.get("norm");
            const Value* x = rotated(m, f);
            const Shape& in = norm->input(0)->shape();
            const int64_t d = lastDim(x);
            if (!in.hasRank() ||
                normalizedAxis(norm->attrInt("axis", -1), in.rank()) !=
                    static_cast<int64_t>(in.rank()) - 1) {
              return why.fail(*norm, [&] {
                return fmt::format("{} does not normalise the last axis only", norm->label());
              });
            }
            const Value* scale = norm->input(1);
            bool scale_ok = false;
            if (scale && scale->shape().isStatic()) {
              const std::vector<int64_t> dims = scale->shape().staticDims();
              int64_t n = 1;
              for (int64_t v : dims) n *= v;
              // [D] or [1, ..., D] on the last axis, or a single value
              scale_ok = dims.size() <= in.rank() &&
                         (n == 1 || (n == d && !dims.empty() && dims.back() == d));
            }
            if (!scale_ok) {
              return why.fail(*norm, [&] {
                return fmt::format("{} scale is not one value or {} values on the last axis",
                                   norm->label(), d);
              });
            }
            if (f == Form::QKNormTransposed) {
              Node* t = m.get("t");
              const std::vector<int64_t> perm = t->attrInts("perm");
              const int64_t last = static_cast<int64_t>(in.rank()) - 1;
              if (perm.size() != in.rank() || perm.back() != last) {
                return why.fail(*t, [&] {
                  return fmt::format("{} moves the last axis, which the norm normalises",
                                     t->label());
                });
              }
            }
            return true;
          }};
}

Pattern buildPattern(Form f) {
  using namespace constraints;
  const char* rotate_in = f == Form::QKNormTransposed ? "t:Transpose(norm:fusectl::RMSNorm)"
                          : f == Form::QKNorm         ? "norm:fusectl::RMSNorm"
                                                      : "$x";
  const char* again = f == Form::QKNormTransposed ? "t" : f == Form::QKNorm ? "norm" : "$x";
  Pattern p = Pattern::parse(
      fmt::format("y:Add(xc:Mul({0}, $cos), xs:Mul(cat:Concat(neg:Neg(hi:Slice({1})), "
                  "lo:Slice({1})), $sin))",
                  rotate_in, again),
      formName(f));
  p.producing({f == Form::Plain ? "fusectl::RotaryEmbedding" : "fusectl::QKNormRotaryEmbedding"});
  if (f != Form::Plain) p.withBenefit(2);
  p.require(rotateHalf(f)).require(tablesBroadcast(f));
  for (const char* n : {"xc", "xs", "cat", "neg", "hi", "lo"}) p.require(uniqueConsumer(n));
  if (f == Form::QKNormTransposed) {
    p.require(uniqueConsumer("norm")).require(readOnlyBy("t", {"xc", "hi", "lo"}));
  } else if (f == Form::QKNorm) {
    p.require(readOnlyBy("norm", {"xc", "hi", "lo"}));
  }
  if (f != Form::Plain) p.require(qkNormQualifies(f));
  // Not the Slices: their starts/ends are int64; Neg and Concat see their float outputs.
  std::vector<std::string> typed = {"y", "xc", "xs", "cat", "neg"};
  if (f != Form::Plain) typed.push_back("norm");
  p.require(dtypeIn(typed, {DType::Float}));
  return p;
}

class FuseRotaryPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseRotaryPassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (Form f : kForms) out.push_back(buildPattern(f));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    const std::vector<Pattern> forms = patterns();
    std::vector<const Pattern*> ptrs;
    for (const Pattern& p : forms) ptrs.push_back(&p);
    DriverOptions driver;
    driver.report_structural = false;  // every Add is an anchor; few are rotations
    return applyPatterns(graph, ctx, ptrs,
                         [&](Rewriter& rw, size_t form, const Match& m) {
                           fuse(rw, forms[form], kForms[form], m);
                           return true;
                         },
                         driver) > 0;
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& pattern, Form f, const Match& m) {
    Node* y = m.get("y");
    NewNode node;
    node.domain = "fusectl";
    node.name = y->name();
    if (f == Form::Plain) {
      node.op_type = "RotaryEmbedding";
      node.inputs = {m.value("x"), m.value("cos"), m.value("sin")};
    } else {
      Node* norm = m.get("norm");
      Value* rows = norm->input(0);
      if (f == Form::QKNormTransposed) {
        Node* t = m.get("t");
        NewNode transpose;
        transpose.op_type = "Transpose";
        transpose.inputs = {rows};
        transpose.attributes = {Attribute::ofInts("perm", t->attrInts("perm"))};
        transpose.name = t->name();
        transpose.naming = NodeNaming::TakeOver;
        ValueType type = t->output(0)->type;
        rows = rw.addNode(std::move(transpose), t->output(0)->name() + "_rows", type, norm)
                   ->output(0);
      }
      node.op_type = "QKNormRotaryEmbedding";
      node.inputs = {rows, norm->input(1), m.value("cos"), m.value("sin")};
      node.attributes = {Attribute::ofFloat("epsilon", norm->attrFloat("epsilon", 1e-5f))};
    }
    rw.replaceMatch(pattern.name, m, y->output(0), std::move(node));
    rw.context().count(f == Form::Plain ? "fused_rotary" : "fused_qk_norm_rotary");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseRotaryPass() { return std::make_unique<FuseRotaryPass>(); }

}  // namespace fusectl::passes
