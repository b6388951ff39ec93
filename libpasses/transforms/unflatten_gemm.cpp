// unflatten-gemm: a Gemm (or 2-D MatMul) run on a tensor flattened to 2-D and reshaped back
// right after is a batched MatMul on the tensor itself.
//
//   X [d1..dn, K] -> Reshape -> [M, K] -> Gemm(., W, C) -> [M, N] -> Reshape -> [d1..dn, N]
//     =>  X -> MatMul(X, W') -> Add(., C) -> [d1..dn, N]          (W' = W, or W^T for transB)
//
// HF GPT-2's Conv1D (addmm on x.view(-1, K)) and torch's nn.MultiheadAttention out_proj
// (linear on a [S*B, E] view) export this way. After -O3 a GPT-2 block kept its four
// projections as Gemm with 8 Reshapes and 16 Shape/Gather/Unsqueeze/Concat nodes computing their
// targets; as MatMul + Add on the 3-D tensor, fuse-matmul-epilogue takes each into a FusedMatMul
// with its bias, residual and activation, and the shape arithmetic is left without readers.
//
// Math: a Reshape is a row-major view, so row m of the flattened [M, K] is the vector X[i, :] at
// the leading index i with flat position m; a MatMul acts on each such row alone. Reshaping the
// [M, N] result back to X's leading dims puts row m at index i again: MatMul(X, W') computes the
// same tensor, and any other Reshape of the [M, N] result reads the same bytes from it. A bias
// of shape [N], [1, N] or one element adds the same value to every row, so it broadcasts over
// the leading dims the same way.
//
// Form matched (one pattern, anchored on the product): flat:Reshape -> ^g:Gemm|MatMul ->
// back:Reshape. Conditions, checked in this order (each failure is a reported rejection):
//  1. The product reads the flattening Reshape as its first operand (A), and A only.
//  2. The product's output is read by the second Reshape only and is not a graph output (the
//     flattening Reshape may have other readers: it then stays for them).
//  3. Gemm: transA = 0, alpha = 1, and beta = 1 or no C (what MatMul + Add computes).
//  4. The flattening: the Reshape's output is [M, K] and X, its input, has a known rank >= 2 and
//     K provably last; or X is found up a chain of Reshapes before it (flattenedSource).
//  5. The weight is 2-D; a transposed one (transB = 1) must be a constant, transposed here once
//     (copy on write, as fold-transpose-into-matmul does).
//  6. The second Reshape's output is X's leading dims with N last (provably: the same static
//     value or the same symbol), and then it goes; or else it stays, reshaping the product on X
//     instead of the [M, N] one (the same bytes in the same order), which needs a constant
//     target without 0 entries (a 0 copies a dim of the Reshape's input) unless allowzero = 1.
//     torch's out_proj reshapes to [S, B, E] and transposes to [B, S, E]: for B = 1 the
//     Transpose becomes a Reshape and the two merge into a no-op after the fusions.
//  7. Gemm's C, when present, is [N], [1, N] or holds one element: the same for every row.
//  8. X, the weight, C and the output are float, double, float16 or bfloat16.
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// Condition 1.
Constraint readsFlatAsA() {
  return {"operand-a:g", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            const Value* flat = m.get("flat")->output(0);
            if (g->input(0) == flat && g->input(1) != flat) return true;
            return why.fail(*g, [&] {
              return fmt::format("{} reads '{}' as {}: only a flattened A unflattens", g->label(),
                                 flat->name(), g->input(1) == flat ? "B" : "C");
            });
          }};
}

// Condition 3.
Constraint plainGemm() {
  return {"gemm-attrs:g", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            if (!g->is("Gemm")) return true;
            const bool has_c = g->numInputs() > 2 && g->input(2) != nullptr;
            const float alpha = g->attrFloat("alpha", 1.f), beta = g->attrFloat("beta", 1.f);
            if (g->attrInt("transA", 0) == 0 && alpha == 1.f && (beta == 1.f || !has_c))
              return true;
            return why.fail(*g, [&] {
              return fmt::format("{} has transA={}, alpha={}, beta={}: MatMul + Add computes "
                                 "transA=0, alpha=1, beta=1",
                                 g->label(), g->attrInt("transA", 0), alpha, beta);
            });
          }};
}

// X: the flattening Reshape's input, or, where that is itself a Reshape's view whose last dim is
// not K (fuse-packed-attention's heads view [S, B*H, D] of an attention's [S, B, E] output, kept
// for a Shape that reads it), the nearest value up the chain of Reshapes whose last dim is K: a
// Reshape of a Reshape reads the first one's input in the same order. nullptr when none is.
Value* flattenedSource(const Node& flat) {
  const Shape& a = flat.output(0)->shape();
  if (!a.hasRank() || a.rank() != 2) return nullptr;
  Value* v = flat.input(0);
  for (int depth = 0; v && depth < 4; ++depth) {
    const Shape& s = v->shape();
    if (s.hasRank() && s.rank() >= 2 && a[1].provablyEqual(s[s.rank() - 1])) return v;
    const Node* p = v->producer();
    v = p && p->is("Reshape") ? p->input(0) : nullptr;
  }
  return nullptr;
}

// Condition 4.
Constraint flattensLeadingDims() {
  return {"flatten:flat", [](const Match& m, Why& why) {
            Node* flat = m.get("flat");
            if (flattenedSource(*flat)) return true;
            return why.fail(*flat, [&] {
              return fmt::format("{} reshapes {} to {}: not its leading dims (or those of a "
                                 "Reshape before it) flattened with the last dim kept",
                                 flat->label(), flat->input(0)->shape().str(),
                                 flat->output(0)->shape().str());
            });
          }};
}

bool transposedWeight(const Node& g) { return g.is("Gemm") && g.attrInt("transB", 0) != 0; }

// Condition 5.
Constraint usableWeight() {
  return {"weight:g", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            const Value* w = g->input(1);
            const bool rank2 = w && w->shape().hasRank() && w->shape().rank() == 2;
            if (rank2 && (!transposedWeight(*g) || w->isConstant())) return true;
            return why.fail(*g, [&] {
              if (!rank2)
                return fmt::format("{} weight '{}' has shape {}, not 2-D", g->label(),
                                   w ? w->name() : "", w ? w->shape().str() : "?");
              return fmt::format("{} reads its weight '{}' transposed (transB=1) and it is no "
                                 "constant to transpose once: {}",
                                 g->label(), w->name(), nonConstantOrigin(*w));
            });
          }};
}

// The product's N: the weight's output dim.
Dim outputWidth(const Node& g) {
  const Shape& w = g.input(1)->shape();
  return transposedWeight(g) ? w[0] : w[1];
}

// Whether the second Reshape's output is provably X's leading dims with N last: the product on
// X is then that value itself, and the Reshape goes.
bool backIsUnflattening(const Match& m) {
  const Shape& x = flattenedSource(*m.get("flat"))->shape();
  const Shape& y = m.get("back")->output(0)->shape();
  bool same = y.hasRank() && x.hasRank() && y.rank() == x.rank() &&
              y[y.rank() - 1].provablyEqual(outputWidth(*m.get("g")));
  for (size_t i = 0; same && i + 1 < x.rank(); ++i) same = y[i].provablyEqual(x[i]);
  return same;
}

// Condition 6.
Constraint reshapesBackTheSameBytes() {
  return {"unflatten:back", [](const Match& m, Why& why) {
            if (backIsUnflattening(m)) return true;
            // Otherwise the Reshape stays, reading the product on X: the same bytes, but a 0 in
            // its target would copy a dim of that input instead of the [M, N] one.
            Node* back = m.get("back");
            const Value* target = back->numInputs() > 1 ? back->input(1) : nullptr;
            bool fixed = target && target->isConstant();
            if (fixed && back->attrInt("allowzero", 0) == 0) {  // with allowzero = 1 a 0 is a 0
              for (const double d : constantAsDoubles(*target->initializer())) fixed &= d != 0;
            }
            if (fixed) return true;
            return why.fail(*back, [&] {
              return fmt::format("{} reshapes the product to {}, not provably the flattened "
                                 "input's leading dims {} with {} last, and its target is not a "
                                 "constant free of 0 (copy) entries",
                                 back->label(), back->output(0)->shape().str(),
                                 flattenedSource(*m.get("flat"))->shape().str(),
                                 outputWidth(*m.get("g")).str());
            });
          }};
}

// Condition 7.
Constraint rowInvariantBias() {
  return {"bias:g", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            if (!g->is("Gemm") || g->numInputs() < 3 || !g->input(2)) return true;
            const Shape& c = g->input(2)->shape();
            const Dim n = outputWidth(*g);
            bool ok = c.hasRank() && c.rank() <= 2;
            if (ok && c.rank() == 2) ok = c[0].isStatic() && c[0].value() == 1;
            if (ok && c.rank() >= 1) {
              const Dim& last = c[c.rank() - 1];
              ok = (last.isStatic() && last.value() == 1) || last.provablyEqual(n);
            }
            if (ok) return true;
            return why.fail(*g, [&] {
              return fmt::format("{} C '{}' has shape {}: a bias that differs between the "
                                 "flattened rows has no form on the unflattened tensor",
                                 g->label(), g->input(2)->name(), c.str());
            });
          }};
}

// Condition 8.
Constraint floatTypes() {
  return {"dtype:g", [](const Match& m, Why& why) {
            Node* g = m.get("g");
            const Value* values[] = {m.get("flat")->input(0), g->input(1),
                                     g->numInputs() > 2 ? g->input(2) : nullptr, g->output(0)};
            for (const Value* v : values) {
              if (!v || isFoldableFloat(v->dtype())) continue;
              return why.fail(*g, [&] {
                return fmt::format("{} '{}' is {}, expected float, double, float16 or bfloat16",
                                   g->label(), v->name(),
                                   v->dtype() == DType::Undefined ? "of unknown type"
                                                                  : dtypeName(v->dtype()));
              });
            }
            return true;
          }};
}

Pattern build() {
  Pattern p = Pattern::parse("flat:Reshape -> ^g:Gemm|MatMul -> back:Reshape", "unflatten-gemm");
  p.require(readsFlatAsA())
      .require(constraints::uniqueConsumer("g"))
      .require(plainGemm())
      .require(flattensLeadingDims())
      .require(usableWeight())
      .require(reshapesBackTheSameBytes())
      .require(rowInvariantBias())
      .require(floatTypes());
  return p;
}

class UnflattenGemmPass : public Pass {
 public:
  const PassInfo& info() const override { return UnflattenGemmPassInfo; }

  std::vector<Pattern> patterns() const override { return {build()}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern pattern = build();
    return applyReportingConditions(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
      unflatten(rw, pattern, m);
    });
  }

 private:
  static void unflatten(Rewriter& rw, const Pattern& pattern, const Match& m) {
    Node* g = m.get("g");
    Node* back = m.get("back");
    Value* x = flattenedSource(*m.get("flat"));
    Value* y = back->output(0);
    Value* weight = g->input(1);
    if (transposedWeight(*g)) {
      weight = rw.addConstant(weight->name() + "_transposed", transposed2d(*weight->initializer()));
      rw.context().count("pretransposed_constant");
    }
    Value* bias = g->is("Gemm") && g->numInputs() > 2 ? g->input(2) : nullptr;
    const bool keep_back = !backIsUnflattening(m);
    rw.context().count(keep_back ? "unflattened_then_reshaped" : "unflattened");
    // The product on X: X's leading dims, N last.
    ValueType unflat = y->type;
    std::vector<Dim> dims(x->shape().dims().begin(), x->shape().dims().end() - 1);
    dims.push_back(outputWidth(*g));
    unflat.shape = Shape(std::move(dims));
    NewNode matmul;
    matmul.op_type = "MatMul";
    matmul.inputs = {x, weight};
    matmul.name = g->name();
    matmul.naming = NodeNaming::TakeOver;
    matmul.doc_string = g->doc_string;  // keeps the history of earlier rewrites
    std::vector<NewNode> chain;
    chain.push_back(std::move(matmul));
    if (bias) {
      NewNode add;
      add.op_type = "Add";
      add.inputs = {nullptr, bias};
      // Named as the Reshape it stands for when it is the last node, else after the Gemm.
      add.name = keep_back ? (g->name().empty() ? "" : g->name() + "_bias") : back->name();
      add.naming = keep_back ? NodeNaming::Unique : NodeNaming::TakeOver;
      chain.push_back(std::move(add));
    }
    if (keep_back) {
      NewNode reshape;
      reshape.op_type = "Reshape";
      reshape.inputs = {nullptr, back->input(1)};
      reshape.attributes = back->attributes();
      reshape.name = back->name();
      reshape.naming = NodeNaming::TakeOver;
      chain.push_back(std::move(reshape));
    }
    // Every node but the last is a further node of the replacement, each reading the one before.
    const std::string product_name = g->name();
    Node* product = nullptr;
    Value* previous = nullptr;
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      if (previous) chain[i].inputs[0] = previous;
      Node* added = rw.addNode(std::move(chain[i]),
                               y->name() + (i == 0 ? "_product" : "_biased"), unflat, back);
      if (i == 0) product = added;
      previous = added->output(0);
    }
    if (previous) chain.back().inputs[0] = previous;
    rw.replaceMatch(pattern.name, m, y, std::move(chain.back()));
    // The product's node takes the Gemm's name once the Gemm is gone (a further node keeps the
    // fresh variant it was given while the Gemm still had it).
    if (product && product->name() != product_name && !rw.graph().findNode(product_name))
      rw.renameNode(product, product_name);
  }
};

}  // namespace

std::unique_ptr<Pass> createUnflattenGemmPass() { return std::make_unique<UnflattenGemmPass>(); }

}  // namespace fusectl::passes
