// fold-gemm-bn: fold a per-column scale (BatchNormalization over N, or Mul by a constant) into
// the constant weight of the Gemm/MatMul before it.
//
//   Gemm(A, B [, C]) -> BatchNormalization -> y   =>  Gemm(A, B', C'),  beta = 1
//   MatMul(A, W) -> BatchNormalization -> y       =>  MatMul(A, W') -> Add(., t) -> y
//   Gemm(A, B [, C]) -> Mul(., s) -> y            =>  Gemm(A, B' [, C']),  beta = 1
//   MatMul(A, W) -> Mul(., s) -> y                =>  MatMul(A, W')
//
// The MatMul + BN shift stays an Add of a constant [N]: fuse-matmul-add (same -O2 group) makes
// the pair a Gemm when A is 2-D. Adds after a Gemm are fuse-bias-add's business.
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. BN only: inference form (one output, training_mode=0; before opset 7 is_test=1).
//  2. The Gemm/MatMul output is read by the BN/Mul only and is not a graph output.
//  3. The weight (input 1) is a constant; Gemm's C, when present, is a constant.
//  4. BN: its parameters are constants; Mul: its other operand is a constant.
//  5. The weight is a 2-D float, double, float16 or bfloat16 tensor; C and the Mul operand
//     share its dtype; C has rank <= 2.
//  6. The scale is per output column n:
//     BN: its input has rank 2 ([M, N]: the channel axis 1 is the column), parameters [N];
//     Mul: the operand is all ones but the last dim, which is N or 1 ([N], [1,N], a scalar),
//       and its rank is at most the output's (so the Mul does not broadcast the output up).
//
// Math, per output column n (double, stored once in the weight's dtype): with
//   BN: s[n] = gamma[n] / sqrt(var[n] + eps), t[n] = beta_bn[n] - mean[n] * s[n];  Mul: s, t = 0
//   alpha*A*B*diag(s) + (beta*C*s + t)  =  alpha*A*B' + C'
// so B' scales column n of op(B) by s[n] (row n of B when transB=1) and C' = beta*C*s + t,
// broadcast like Gemm's C (a [M,1] C becomes [M,N]).
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

std::string dimsText(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ","));
}

// Output columns N from the constant 2-D weight.
int64_t columns(const Node& g) {
  const std::vector<int64_t>& d = g.input(1)->initializer()->dims();
  return g.is("Gemm") && g.attrInt("transB", 0) != 0 ? d[0] : d[1];
}

Constraint constantMulOperand() {
  return {"constant-operand:mul", [](const Match& m, Why& why) {
            Node* mul = m.get("mul");
            Value* s = otherOperand(*mul, m.get("g")->output(0));
            if (!s) {
              return why.fail(*mul, [&] {
                return fmt::format("{} squares {} output", mul->label(), m.get("g")->label());
              });
            }
            if (s->isConstant()) return true;
            return why.fail(*mul, [&] {
              return fmt::format("{} operand '{}' is not a constant ({})", mul->label(), s->name(),
                                 nonConstantOrigin(*s));
            });
          }};
}

Constraint foldableWeight(const std::string& other) {
  return {"foldable-weight:g", [other](const Match& m, Why& why) {
            Node* g = m.get("g");
            Value* w = g->input(1);
            const Tensor& t = *w->initializer();
            if (!isFoldableFloat(t.dtype())) {
              return why.fail(*g, [&] {
                return fmt::format(
                    "{} weight '{}' is {}, expected float, double, float16 or "
                    "bfloat16",
                    g->label(), w->name(), dtypeName(t.dtype()));
              });
            }
            if (t.dims().size() != 2) {
              return why.fail(*g, [&] {
                return fmt::format("{} weight '{}' has rank {}, expected 2", g->label(), w->name(),
                                   t.dims().size());
              });
            }
            if (Value* c = g->is("Gemm") ? g->input(2) : nullptr) {
              if (c->dtype() != t.dtype()) {
                return why.fail(*g, [&] {
                  return fmt::format("{} input C '{}' is {} but the weight is {}", g->label(),
                                     c->name(), dtypeName(c->dtype()), dtypeName(t.dtype()));
                });
              }
              const std::vector<int64_t>& cd = c->initializer()->dims();
              if (cd.size() > 2 || (!cd.empty() && cd.back() != 1 && cd.back() != columns(*g))) {
                return why.fail(*g, [&] {
                  return fmt::format("{} input C '{}' {} does not broadcast to [M,{}]", g->label(),
                                     c->name(), dimsText(cd), columns(*g));
                });
              }
            }
            if (other == "mul") {
              Node* mul = m.get("mul");
              Value* s = otherOperand(*mul, g->output(0));
              if (s->dtype() != t.dtype()) {
                return why.fail(*mul, [&] {
                  return fmt::format("{} operand '{}' is {} but {} weight is {}", mul->label(),
                                     s->name(), dtypeName(s->dtype()), g->label(),
                                     dtypeName(t.dtype()));
                });
              }
            }
            return true;
          }};
}

Constraint batchNormOverColumns() {
  return {"batchnorm-over-columns:bn", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            Node* bn = m.get("bn");
            if (!bn->input(0)) return why.fail(*bn, [&] { return bn->label() + " has no input X"; });
            const Shape& s = bn->input(0)->shape();
            if (!s.hasRank()) {
              return why.fail(*bn, [&] {
                return fmt::format("{} input '{}' has unknown rank; folding needs rank 2 [M,N]",
                                   bn->label(), bn->input(0)->name());
              });
            }
            if (s.rank() != 2) {
              return why.fail(*bn, [&] {
                return fmt::format(
                    "{} input '{}' has rank {}; only a rank-2 [M,N] input "
                    "normalizes {} output columns (channel axis 1 = N)",
                    bn->label(), bn->input(0)->name(), s.rank(), g->label());
              });
            }
            return batchNormAffine(*bn, columns(*g), nullptr, why);
          }};
}

Constraint perColumnScale() {
  return {"per-column:mul", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            Node* mul = m.get("mul");
            Value* s = otherOperand(*mul, g->output(0));
            const std::vector<int64_t>& d = s->initializer()->dims();
            const int64_t n = columns(*g);
            for (size_t i = 0; i < d.size(); ++i) {
              const bool last = i + 1 == d.size();
              if (d[i] == 1 || (last && d[i] == n)) continue;
              return why.fail(*mul, [&] {
                return fmt::format(
                    "{} operand '{}' {} is not a per-column scale of {} output "
                    "({} columns): dim {} has {}",
                    mul->label(), s->name(), dimsText(d), g->label(), n, i, d[i]);
              });
            }
            const Shape& out = g->output(0)->shape();
            const size_t out_rank = g->is("Gemm") ? 2 : out.hasRank() ? out.rank() : 1;
            if (d.size() > out_rank) {
              return why.fail(*mul, [&] {
                return fmt::format(
                    "{} operand '{}' {} has rank {}, more than {} output {}; the "
                    "Mul broadcasts the output to a larger shape",
                    mul->label(), s->name(), dimsText(d), d.size(), g->label(),
                    g->is("Gemm") ? "[M,N]" : out.str());
              });
            }
            return true;
          }};
}

double times(double a, double b) { return a * b; }
double plus(double a, double b) { return a + b; }

class FoldGemmBatchNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FoldGemmBatchNormPassInfo; }

  std::vector<Pattern> patterns() const override { return build(0); }

  bool run(const Graph& graph, PassContext& ctx) override {
    std::vector<Pattern> ps = build(ctx.opset());
    size_t folded = applyPattern(graph, ctx, ps[0], [&](Rewriter& rw, const Match& m) {
      foldBatchNorm(rw, m);
      ctx.count("folded_batchnorm");
      return true;
    });
    folded += applyPattern(graph, ctx, ps[1], [&](Rewriter& rw, const Match& m) {
      foldMul(rw, m);
      ctx.count("folded_mul");
      return true;
    });
    return folded > 0;
  }

 private:
  static std::vector<Pattern> build(int64_t opset) {
    using namespace constraints;
    std::vector<Pattern> out;
    out.push_back(Pattern::parse("g:Gemm|MatMul -> 0:^bn:BatchNormalization", "gemm-bn"));
    out.back()
        .require(batchNormInference("bn"))
        .require(batchNormTestMode("bn", opset))
        .require(uniqueConsumer("g"))
        .require(constantInput("g", 1))
        .require(constantIfPresent("g", 2, "input C"))
        .require(constantInput("bn", 1))
        .require(constantInput("bn", 2))
        .require(constantInput("bn", 3))
        .require(constantInput("bn", 4))
        .require(foldableWeight("bn"))
        .require(batchNormOverColumns());
    out.push_back(Pattern::parse("g:Gemm|MatMul -> mul:Mul", "gemm-mul"));
    out.back()
        .require(uniqueConsumer("g"))
        .require(constantInput("g", 1))
        .require(constantIfPresent("g", 2, "input C"))
        .require(constantMulOperand())
        .require(foldableWeight("mul"))
        .require(perColumnScale());
    return out;
  }

  static std::string baseName(const Node* n) {
    return n->name().empty() ? n->output(0)->name() : n->name();
  }

  // op(B) * diag(s): column n of op(B), i.e. row n of B when transB=1; s has N values or 1.
  static Value* scaledWeight(Rewriter& rw, const Node* g, const std::vector<double>& s) {
    const Tensor& w = *g->input(1)->initializer();
    std::vector<double> v = constantAsDoubles(w);
    const bool trans = g->is("Gemm") && g->attrInt("transB", 0) != 0;
    const int64_t cols = w.dims()[1];
    for (size_t i = 0; i < v.size(); ++i) {
      const auto flat = static_cast<int64_t>(i);
      const auto n = static_cast<size_t>(trans ? flat / cols : flat % cols);
      v[i] *= s.size() == 1 ? s[0] : s[n];
    }
    return rw.addConstant(baseName(g) + "_W_folded", tensorFromDoubles(w.dtype(), w.dims(), v));
  }

  // A Gemm like g reading (A, w, c); beta folded into c, so dropped.
  static NewNode newGemm(Rewriter& rw, const Node* g, Value* w, Value* c) {
    NewNode gemm;
    gemm.op_type = "Gemm";
    for (const Attribute& a : g->attributes())
      if (a.name != "beta" && a.name != "broadcast") gemm.attributes.push_back(a);
    const int64_t opset = rw.context().opset();
    if (c && opset > 0 && opset < 7) gemm.attributes.push_back(Attribute::ofInt("broadcast", 1));
    gemm.inputs = {g->input(0), w};
    if (c) gemm.inputs.push_back(c);
    gemm.name = g->name();
    gemm.doc_string = g->doc_string;  // keeps the history of earlier rewrites
    return gemm;
  }

  // A MatMul like g reading (A, w).
  static NewNode newMatMul(const Node* g, Value* w) {
    NewNode mm;
    mm.op_type = "MatMul";
    mm.inputs = {g->input(0), w};
    mm.name = g->name();
    mm.doc_string = g->doc_string;  // keeps the history of earlier rewrites
    return mm;
  }

  // beta * C * s + t (t absent: no shift), broadcast; nullptr when there is no C and no t.
  static Value* foldedC(Rewriter& rw, Node* g, const DoubleTensor& s, const DoubleTensor* t) {
    const DType dtype = g->input(1)->initializer()->dtype();
    Value* c = g->input(2);
    if (!c && !t) return nullptr;
    DoubleTensor out;
    if (c) {
      out = constantAsDoubleTensor(*c->initializer());
      const double beta = g->attrFloat("beta", 1.0f);
      for (double& v : out.values) v *= beta;
      out = broadcastApply(out, s, times);
      if (t) out = broadcastApply(out, *t, plus);
    } else {
      out = *t;
    }
    return rw.addConstant(baseName(g) + "_C_folded",
                          tensorFromDoubles(dtype, out.dims, out.values));
  }

  static void foldBatchNorm(Rewriter& rw, const Match& m) {
    Node* g = m.get("g");
    Node* bn = m.get("bn");
    const int64_t n = columns(*g);
    ChannelAffine map;
    Why checked(false);  // batchNormOverColumns held
    batchNormAffine(*bn, n, &map, checked);
    Value* w = scaledWeight(rw, g, map.scale);
    Value* y = bn->output(0);
    DoubleTensor s{{n}, map.scale}, t{{n}, map.shift};
    if (g->is("Gemm")) {
      rw.replaceMatch("gemm-bn", m, y, newGemm(rw, g, w, foldedC(rw, g, s, &t)));
      return;
    }
    Node* mm = rw.addNode(newMatMul(g, w), baseName(g) + "_folded", g->output(0)->type, bn);
    Value* shift =
        rw.addConstant(baseName(g) + "_shift", tensorFromDoubles(w->dtype(), {n}, map.shift));
    NewNode add;
    add.op_type = "Add";
    add.inputs = {mm->output(0), shift};
    add.name = bn->name();
    rw.replaceMatch("gemm-bn", m, y, std::move(add));
  }

  static void foldMul(Rewriter& rw, const Match& m) {
    Node* g = m.get("g");
    Node* mul = m.get("mul");
    DoubleTensor s = constantAsDoubleTensor(*otherOperand(*mul, g->output(0))->initializer());
    // [1,N] or [1] scales the same columns as [N] or a scalar.
    s.dims = {static_cast<int64_t>(s.values.size())};
    Value* w = scaledWeight(rw, g, s.values);
    Value* y = mul->output(0);
    if (g->is("Gemm")) {
      rw.replaceMatch("gemm-mul", m, y, newGemm(rw, g, w, foldedC(rw, g, s, nullptr)));
      return;
    }
    rw.replaceMatch("gemm-mul", m, y, newMatMul(g, w));
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldGemmBatchNormPass() {
  return std::make_unique<FoldGemmBatchNormPass>();
}

}  // namespace fusectl::passes
