// cancel-transposes-around-matmul: a Transpose that keeps the last axis in place, a MatMul by a
// 2-D weight, and a Transpose that undoes the first: the MatMul runs on the untransposed tensor
// and both Transposes go.
//
//   x -> Transpose<p> -> MatMul(., W) [or FusedMatMul(., W, C) <act>] -> Transpose<q> -> y
//     =>  x -> MatMul(x, W) [FusedMatMul(x, W, C) <act>] -> y          (q undoes p)
//
// torch's nn.MultiheadAttention with a batch over 1 runs its projections sequence first: the
// input goes through Transpose(1, 0, 2) before in_proj, and out_proj's output through another
// back. After the attention fusions (fuse-packed-attention reads in_proj's output batch first
// through a Transpose back, unflatten-gemm runs out_proj on the [S, B, E] Transpose of the
// attention's output) each projection sits between two Transposes that cancel: four copies of
// [B, S, E]-sized tensors a layer.
//
// Math: a MatMul by a 2-D weight maps each vector along the last axis on its own, and so do a
// bias along the last axis and an elementwise activation; a permutation p of the other axes only
// moves those vectors. So MatMul(Transpose_p(x), W) = Transpose_p(MatMul(x, W)), and
// Transpose_q(Transpose_p(z)) = z when q undoes p (p[q[i]] = i for every axis i).
//
// Forms matched: t1:Transpose -> ^m:MatMul -> t2:Transpose, and the same around a
// fusectl::FusedMatMul. Conditions, checked in this order (each failure is a reported rejection):
//  1. The product reads t1 as its first operand (A) only.
//  2. The product's output is read by t2 only and is not a graph output (t1 may have other
//     readers: it then stays for them).
//  3. Both perms are known (given, or omitted with the rank known), t1's keeps the last axis in
//     place, and t2's undoes it.
//  4. The weight has rank 2; a FusedMatMul has no residual Z (it is added in t1's layout).
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// Condition 1.
Constraint readsTransposeAsA() {
  return {"operand-a:m", [](const Match& m, Why& why) {
            Node* mm = m.get("m");
            const Value* t = m.get("t1")->output(0);
            bool only_a = mm->input(0) == t;
            for (size_t i = 1; only_a && i < mm->numInputs(); ++i) only_a = mm->input(i) != t;
            if (only_a) return true;
            return why.fail(*mm, [&] {
              return fmt::format("{} reads '{}' other than as its first operand alone",
                                 mm->label(), t->name());
            });
          }};
}

// Condition 3.
Constraint undoingPerms() {
  return {"perms:t1,t2", [](const Match& m, Why& why) {
            Node* t1 = m.get("t1");
            Node* t2 = m.get("t2");
            const Shape& s = t1->input(0)->shape();
            const std::optional<std::vector<int64_t>> p = transposePerm(*t1, nullptr);
            const std::optional<std::vector<int64_t>> q = transposePerm(*t2, nullptr);
            bool ok = s.hasRank() && s.rank() >= 2 && p && q && p->size() == s.rank() &&
                      q->size() == s.rank() && p->back() == static_cast<int64_t>(s.rank()) - 1;
            // (transposePerm checked that each is a permutation: q's entries index p.)
            for (size_t i = 0; ok && i < q->size(); ++i)
              ok = (*p)[static_cast<size_t>((*q)[i])] == static_cast<int64_t>(i);
            if (ok) return true;
            return why.fail(*t2, [&] {
              return fmt::format("{} (perm [{}]) and {} (perm [{}]) around {} on {}: not a "
                                 "Transpose keeping the last axis and one that undoes it",
                                 t1->label(), fmt::join(t1->attrInts("perm"), ", "), t2->label(),
                                 fmt::join(t2->attrInts("perm"), ", "), m.get("m")->label(),
                                 s.str());
            });
          }};
}

// Condition 4.
Constraint rowwiseProduct() {
  return {"rowwise:m", [](const Match& m, Why& why) {
            Node* mm = m.get("m");
            const Value* w = mm->numInputs() > 1 ? mm->input(1) : nullptr;
            const bool rank2 = w && w->shape().hasRank() && w->shape().rank() == 2;
            const bool residual = mm->is("FusedMatMul", "fusectl") && mm->numInputs() > 3 &&
                                  mm->input(3) != nullptr;
            if (rank2 && !residual) return true;
            return why.fail(*mm, [&] {
              if (residual)
                return fmt::format("{} adds a residual '{}' laid out as its transposed input",
                                   mm->label(), mm->input(3)->name());
              return fmt::format("{} weight '{}' has shape {}, not 2-D", mm->label(),
                                 w ? w->name() : "", w ? w->shape().str() : "?");
            });
          }};
}

// The form around a MatMul and the one around a FusedMatMul (a pattern names one domain).
Pattern build(bool fused) {
  Pattern p = Pattern::parse(fused ? "t1:Transpose -> ^m:fusectl::FusedMatMul -> t2:Transpose"
                                   : "t1:Transpose -> ^m:MatMul -> t2:Transpose",
                             fused ? "transposes-around-fused-matmul" : "transposes-around-matmul");
  p.require(readsTransposeAsA())
      .require(constraints::uniqueConsumer("m"))
      .require(undoingPerms())
      .require(rowwiseProduct());
  return p;
}

class CancelTransposesAroundMatMulPass : public Pass {
 public:
  const PassInfo& info() const override { return CancelTransposesAroundMatMulPassInfo; }

  std::vector<Pattern> patterns() const override { return {build(false), build(true)}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    bool changed = false;
    for (const bool fused : {false, true}) {
      const Pattern pattern = build(fused);
      changed |= applyReportingConditions(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
        cancel(rw, pattern, m);
      });
    }
    return changed;
  }

 private:
  static void cancel(Rewriter& rw, const Pattern& pattern, const Match& m) {
    Node* mm = m.get("m");
    NewNode node;
    node.op_type = mm->opType();
    node.domain = mm->domain();
    node.inputs = mm->inputs();
    node.inputs[0] = m.get("t1")->input(0);
    node.attributes = mm->attributes();
    node.name = mm->name();
    node.naming = NodeNaming::TakeOver;
    node.doc_string = mm->doc_string;  // keeps the history of earlier rewrites
    rw.replaceMatch(pattern.name, m, m.get("t2")->output(0), std::move(node));
    rw.context().count("cancelled");
  }
};

}  // namespace

std::unique_ptr<Pass> createCancelTransposesAroundMatMulPass() {
  return std::make_unique<CancelTransposesAroundMatMulPass>();
}

}  // namespace fusectl::passes
