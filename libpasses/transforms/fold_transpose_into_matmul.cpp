// fold-transpose-into-matmul: a 2-D Transpose feeding a MatMul or Gemm is not run as a node of
// its own: the GEMM reads the operand transposed (Gemm's transA/transB) or reads a constant that
// was transposed once, here.
//
//   A -> Transpose -> Gemm(., B)      =>   Gemm<transA = !transA>(A, B)
//   A -> Transpose -> MatMul(., B)    =>   Gemm<transA = 1>(A, B)          (2-D operands)
//   W -> Transpose -> MatMul(A, .)    =>   MatMul(A, W')    W' = W^T, a new constant
//
//   (A^T)^T = A: Gemm computes op(A) op(B) with op a transpose when its flag is set.
//
// Form matched (one pattern, anchored on the product): t:Transpose -> ^c:Gemm|MatMul.
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The Transpose swaps the two axes of a 2-D tensor (perm [1, 0], or no perm at rank 2).
//  2. Its output is read by the product only, once, and is not a graph output.
//  3. For a Transpose of a non-constant feeding a MatMul: both MatMul operands have rank 2 (a
//     batched MatMul has no Gemm form) and are float32 (Gemm's types that fusectl runs fast).
// A constant operand is transposed into a new initializer (copy on write: the original stays
// for its other readers and goes when none is left); fold-constants at -O1 usually does this
// already, so at -O3 the case that remains is the activation's.
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// The operand slot (0 or 1) of the product that reads the Transpose.
size_t slotOf(const Match& m) {
  return m.get("c")->input(0) == m.get("t")->output(0) ? 0 : 1;
}

// Condition 1.
Constraint swapsTwoAxes() {
  return {"perm-2d:t", [](const Match& m, Why& why) {
            Node* t = m.get("t");
            const Shape& s = t->input(0)->shape();
            const std::vector<int64_t> perm = t->attrInts("perm");
            const bool rank2 = s.hasRank() && s.rank() == 2;
            if (rank2 && (perm.empty() || perm == std::vector<int64_t>{1, 0})) return true;
            return why.fail(*t, [&] {
              return fmt::format("{} input '{}' has shape {} and perm [{}]: not a 2-D transpose",
                                 t->label(), t->input(0)->name(), s.str(), fmt::join(perm, ", "));
            });
          }};
}

// Condition 2, beyond uniqueConsumer: Gemm(t, t) reads it twice.
Constraint readOnce() {
  return {"read-once:t", [](const Match& m, Why& why) {
            Node* c = m.get("c");
            Node* t = m.get("t");
            if (c->input(0) != c->input(1)) return true;
            return why.fail(*c, [&] {
              return fmt::format("{} reads {} output as both operands", c->label(), t->label());
            });
          }};
}

// Condition 3.
Constraint gemmForm() {
  return {"gemm-form:c", [](const Match& m, Why& why) {
            Node* c = m.get("c");
            Node* t = m.get("t");
            if (c->is("Gemm") || t->input(0)->isConstant()) return true;
            for (size_t i = 0; i < 2; ++i) {
              const Value* v = c->input(i);
              const bool ok = v->shape().hasRank() && v->shape().rank() == 2 &&
                              constraints::isFusibleFloat(v->dtype());
              if (ok) continue;
              return why.fail(*c, [&] {
                return fmt::format(
                    "{} operand '{}' is {} {}: a Gemm with transA/transB needs 2-D float32, "
                    "float16 or bfloat16 operands",
                    c->label(), v->name(), dtypeName(v->dtype()), v->shape().str());
              });
            }
            return true;
          }};
}

Pattern build() {
  Pattern p = Pattern::parse("t:Transpose -> ^c:Gemm|MatMul", "transpose-into-matmul");
  p.require(swapsTwoAxes())
      .require(constraints::uniqueConsumer("t"))
      .require(readOnce())
      .require(gemmForm());
  return p;
}

class FoldTransposeIntoMatMulPass : public Pass {
 public:
  const PassInfo& info() const override { return FoldTransposeIntoMatMulPassInfo; }

  std::vector<Pattern> patterns() const override { return {build()}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern pattern = build();
    return applyReportingConditions(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
      fold(rw, pattern, m);
    });
  }

 private:
  static void fold(Rewriter& rw, const Pattern& pattern, const Match& m) {
    Node* t = m.get("t");
    Node* c = m.get("c");
    const size_t slot = slotOf(m);
    Value* source = t->input(0);
    NewNode node;
    node.op_type = c->opType();
    node.inputs = c->inputs();
    node.attributes = c->attributes();
    node.name = c->name();
    node.naming = NodeNaming::TakeOver;
    node.doc_string = c->doc_string;  // keeps the history of earlier rewrites
    if (source->isConstant() && source->initializer()->dims().size() == 2 &&
        source->dtype() != DType::String) {
      node.inputs[slot] = rw.addConstant(source->name() + "_transposed",
                                         transposed2d(*source->initializer()));
      rw.context().count("pretransposed_constant");
    } else {
      node.inputs[slot] = source;
      const char* flag = slot == 0 ? "transA" : "transB";
      if (c->is("MatMul")) {
        node.op_type = "Gemm";
        node.attributes = {Attribute::ofInt(flag, 1)};
      } else {
        std::vector<Attribute> attrs;
        for (const Attribute& a : c->attributes())
          if (a.name != flag) attrs.push_back(a);
        if (c->attrInt(flag, 0) == 0) attrs.push_back(Attribute::ofInt(flag, 1));
        node.attributes = std::move(attrs);
      }
      rw.context().count("folded_into_gemm");
    }
    rw.replaceMatch(pattern.name, m, c->output(0), std::move(node));
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldTransposeIntoMatMulPass() {
  return std::make_unique<FoldTransposeIntoMatMulPass>();
}

}  // namespace fusectl::passes
