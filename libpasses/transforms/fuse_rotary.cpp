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
//     other dim 1 or provably x's, and the two of one shape; the two Muls and the Add give
//     x's shape.
//  3. The intermediates are read only inside the match and are no graph outputs.
//  4. QK-norm forms: the RMSNorm normalises the last axis only, its scale has D elements or
//     one, and the Transpose keeps the last axis last.
//  5. Everything is float32, float16 or bfloat16 (fusibleFloatTypes; half computed in float32).
//   rotary-interleaved         GPT-J's rotate_every_two: Add(Mul($x, $cos), Mul(Reshape(Concat(
//                              Unsqueeze(Neg(x[1::2]), -1), Unsqueeze(x[0::2], -1), -1)), $sin))
//                              => fusectl::InterleavedRotaryEmbedding(x, cos, sin)
//   rotary-interleaved-qk-norm[-transposed]  the same over an RMSNorm's output (through a
//                              Transpose), as the rotate_half QK-norm forms
//                              => fusectl::QKNormInterleavedRotaryEmbedding(x0, scale, cos, sin)
// A partial rotary (only the first R < D dims rotated, the rest concatenated back) fuses its
// rotated part.
#include <fmt/format.h>


#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

enum class Form {
  QKNormTransposed, QKNorm, Plain, QKNormInterleavedTransposed, QKNormInterleaved, Interleaved
};
// The QK-norm forms first: a norm taken in is one node less than the rotation alone.
constexpr Form kForms[] = {Form::QKNormTransposed, Form::QKNorm, Form::Plain,
                           Form::QKNormInterleavedTransposed, Form::QKNormInterleaved,
                           Form::Interleaved};

const char* formName(Form f) {
  switch (f) {
    case Form::QKNormTransposed: return "rotary-qk-norm-transposed";
    case Form::QKNorm: return "rotary-qk-norm";
    case Form::Plain: return "rotary";
    case Form::QKNormInterleavedTransposed: return "rotary-interleaved-qk-norm-transposed";
    case Form::QKNormInterleaved: return "rotary-interleaved-qk-norm";
    case Form::Interleaved: return "rotary-interleaved";
  }
  return "";
}

bool qkNorm(Form f) {
  return f == Form::QKNormTransposed || f == Form::QKNorm ||
         f == Form::QKNormInterleavedTransposed || f == Form::QKNormInterleaved;
}
bool transposed(Form f) {
  return f == Form::QKNormTransposed || f == Form::QKNormInterleavedTransposed;
}
bool interleaved(Form f) {
  return f == Form::Interleaved || f == Form::QKNormInterleaved ||
         f == Form::QKNormInterleavedTransposed;
}

// The value the rotation reads: the Transpose's output, the RMSNorm's, or the leaf $x.
Value* rotated(const Match& m, Form f) {
  if (transposed(f)) return m.get("t")->output(0);
  if (qkNorm(f)) return m.get("norm")->output(0);
  return m.value("x");  // Plain, Interleaved
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
            // hi is x[half:] (its end may be written past d), lo is x[:half].
            auto isRange = [&](const Node* slice, int64_t from, int64_t to) {
              return lastAxisSpan(*slice, rank, d) == std::make_pair(from, to);
            };
            Node* hi = m.get("hi");
            Node* lo = m.get("lo");
            if (!isRange(hi, half, d) || !isRange(lo, 0, half)) {
              return why.fail(*cat, [&] {
                return fmt::format("{} does not join -x[{}:{}] and x[0:{}] of '{}' on the last "
                                   "axis (not rotate_half)",
                                   cat->label(), half, d, half, x->name());
              });
            }
            return true;
          }};
}

// Condition 1, interleaved (GPT-J's rotate_every_two): Reshape(Concat(Unsqueeze(-x[1::2], -1),
// Unsqueeze(x[0::2], -1), axis=-1)) to x's shape, which is x[2k] -> -x[2k+1],
// x[2k+1] -> x[2k] when the Concat's leading dims are x's.
Constraint rotateEveryTwo(Form f) {
  return {"rotate-every-two", [f](const Match& m, Why& why) {
            Value* x = rotated(m, f);
            Node* r = m.get("r");
            Node* cat = m.get("cat");
            const int64_t d = lastDim(x);
            auto fail = [&](const char* what) {
              return why.fail(*r, [&] {
                return fmt::format("{} does not interleave -x[1::2] and x[0::2] of '{}' {}: {}",
                                   r->label(), x->name(), x->shape().str(), what);
              });
            };
            if (d <= 0 || d % 2 != 0) return fail("the last dim is not static and even");
            const size_t rank = x->shape().rank();
            for (const char* slice : {"odd", "even"}) {
              std::optional<SliceRange> range = sliceRange(*m.get(slice), rank);
              const int64_t want = std::string(slice) == "odd" ? 1 : 0;
              if (!range || range->axis != static_cast<int64_t>(rank) - 1 || range->step != 2 ||
                  range->start != want || range->end < d)
                return fail("the halves are not x[1::2] and x[0::2] on the last axis");
            }
            for (const char* u : {"u1", "u2"}) {
              std::optional<std::vector<int64_t>> axes = unsqueezeAxes(*m.get(u));
              if (!axes || axes->size() != 1 ||
                  ((*axes)[0] != -1 && (*axes)[0] != static_cast<int64_t>(rank)))
                return fail("an Unsqueeze does not add the last axis");
            }
            if (cat->numInputs() != 2 || (cat->attrInt("axis", 0) != -1 &&
                                          cat->attrInt("axis", 0) != static_cast<int64_t>(rank)))
              return fail("the Concat does not stack two values on the new last axis");
            // [A..., D/2, 2] -> [A..., D] with the same A is exactly flatten(-2).
            const Shape& cs = cat->output(0)->shape();
            const Shape& xs = x->shape();
            bool stacked = cs.hasRank() && cs.rank() == rank + 1 && cs[rank].isStatic() &&
                           cs[rank].value() == 2 && cs[rank - 1].isStatic() &&
                           cs[rank - 1].value() == d / 2;
            for (size_t i = 0; stacked && i + 1 < rank; ++i) stacked = cs[i].provablyEqual(xs[i]);
            if (!stacked || !dimsProvablyEqual(r->output(0)->shape(), xs))
              return fail("the Reshape is not provably a flatten of the last two dims back to x's "
                          "shape");
            return true;
          }};
}

// The stacked pairs are read by the Reshape, and by Shape nodes whose output only computes the
// Reshape's target (torch's flatten(-2): Concat(Slice(Shape(stacked), 0, -2), [-1])), which go
// with it.
Constraint stackReadForItsShapeOnly() {
  return {"stack-read-by-reshape", [](const Match& m, Why& why) {
            Node* cat = m.get("cat");
            Node* r = m.get("r");
            const Value* stacked = cat->output(0);
            auto onlyTarget = [&](const Node* shape) {
              const Value* v = shape->output(0);
              for (int depth = 0; depth < 8; ++depth) {
                const std::vector<Node*> readers = v->consumers();
                if (v->isGraphOutput() || readers.size() != 1) return false;
                if (readers[0] == r) return r->input(1) == v;
                if (readers[0]->numOutputs() != 1) return false;
                v = readers[0]->output(0);
              }
              return false;
            };
            if (stacked->isGraphOutput()) {
              return why.fail(*cat, [&] {
                return fmt::format("{} output '{}' is a graph output", cat->label(),
                                   stacked->name());
              });
            }
            for (const Node* reader : stacked->consumers()) {
              if (reader == r) continue;
              if (reader->is("Shape") && reader->domain().empty() && onlyTarget(reader)) continue;
              return why.fail(*cat, [&] {
                return fmt::format("{} output '{}' is also read by {}", cat->label(),
                                   stacked->name(), reader->label());
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
            // RotaryEmbedding reads both tables with one index: they must have one shape.
            const Value* cos = m.value("cos");
            const Value* sin = m.value("sin");
            if (!dimsProvablyEqual(cos->shape(), sin->shape())) {
              return why.fail(*m.get("y"), [&] {
                return fmt::format("{} cos table '{}' {} and sin table '{}' {} differ in shape",
                                   m.get("y")->label(), cos->name(), cos->shape().str(),
                                   sin->name(), sin->shape().str());
              });
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
            if (transposed(f)) {
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
  const char* rotate_in = transposed(f) ? "t:Transpose(norm:fusectl::RMSNorm)"
                          : qkNorm(f)     ? "norm:fusectl::RMSNorm"
                                          : "$x";
  const char* again = transposed(f) ? "t" : qkNorm(f) ? "norm" : "$x";
  if (interleaved(f)) {
    Pattern p = Pattern::parse(
        fmt::format("y:Add(xc:Mul({0}, $cos), xs:Mul(r:Reshape(cat:Concat(u1:Unsqueeze(neg:Neg("
                    "odd:Slice({1}))), u2:Unsqueeze(even:Slice({1})))), $sin))",
                    rotate_in, again),
        formName(f));
    p.producing({qkNorm(f) ? "fusectl::QKNormInterleavedRotaryEmbedding"
                           : "fusectl::InterleavedRotaryEmbedding"});
    if (qkNorm(f)) p.withBenefit(2);
    p.require(rotateEveryTwo(f)).require(tablesBroadcast(f));
    for (const char* n : {"xc", "xs", "r", "u1", "u2", "neg", "odd", "even"})
      p.require(uniqueConsumer(n));
    p.require(stackReadForItsShapeOnly());
    if (transposed(f)) {
      p.require(uniqueConsumer("norm")).require(readOnlyBy("t", {"xc", "odd", "even"}));
    } else if (qkNorm(f)) {
      p.require(readOnlyBy("norm", {"xc", "odd", "even"}));
    }
    if (qkNorm(f)) p.require(qkNormQualifies(f));
    std::vector<std::string> typed = {"y", "xc", "xs", "cat", "neg"};
    if (qkNorm(f)) typed.push_back("norm");
    p.require(dtypeIn(typed, fusibleFloatTypes()));
    return p;
  }
  Pattern p = Pattern::parse(
      fmt::format("y:Add(xc:Mul({0}, $cos), xs:Mul(cat:Concat(neg:Neg(hi:Slice({1})), "
                  "lo:Slice({1})), $sin))",
                  rotate_in, again),
      formName(f));
  p.producing({f == Form::Plain ? "fusectl::RotaryEmbedding" : "fusectl::QKNormRotaryEmbedding"});
  if (qkNorm(f)) p.withBenefit(2);
  p.require(rotateHalf(f)).require(tablesBroadcast(f));
  for (const char* n : {"xc", "xs", "cat", "neg", "hi", "lo"}) p.require(uniqueConsumer(n));
  if (f == Form::QKNormTransposed) {
    p.require(uniqueConsumer("norm")).require(readOnlyBy("t", {"xc", "hi", "lo"}));
  } else if (f == Form::QKNorm) {
    p.require(readOnlyBy("norm", {"xc", "hi", "lo"}));
  }
  if (qkNorm(f)) p.require(qkNormQualifies(f));
  // Not the Slices: their starts/ends are int64; Neg and Concat see their float outputs.
  std::vector<std::string> typed = {"y", "xc", "xs", "cat", "neg"};
  if (qkNorm(f)) typed.push_back("norm");
  p.require(dtypeIn(typed, fusibleFloatTypes()));
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
    return applyForms(graph, ctx, patterns(), kForms, fuse);
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& pattern, Form f, const Match& m) {
    Node* y = m.get("y");
    NewNode node;
    node.domain = "fusectl";
    node.name = y->name();
    if (!qkNorm(f)) {
      node.op_type = f == Form::Plain ? "RotaryEmbedding" : "InterleavedRotaryEmbedding";
      node.inputs = {m.value("x"), m.value("cos"), m.value("sin")};
    } else {
      Node* norm = m.get("norm");
      Value* rows = norm->input(0);
      if (transposed(f)) {
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
      node.op_type = interleaved(f) ? "QKNormInterleavedRotaryEmbedding" : "QKNormRotaryEmbedding";
      node.inputs = {rows, norm->input(1), m.value("cos"), m.value("sin")};
      node.attributes = {Attribute::ofFloat("epsilon", norm->attrFloat("epsilon", 1e-5f))};
    }
    rw.replaceMatch(pattern.name, m, y->output(0), std::move(node));
    rw.context().count(f == Form::Plain         ? "fused_rotary"
                       : f == Form::Interleaved ? "fused_rotary_interleaved"
                       : interleaved(f)         ? "fused_qk_norm_rotary_interleaved"
                                                : "fused_qk_norm_rotary");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseRotaryPass() { return std::make_unique<FuseRotaryPass>(); }

}  // namespace fusectl::passes
