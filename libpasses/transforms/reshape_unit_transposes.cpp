// reshape-unit-transposes: a Transpose that moves only axes of extent 1 keeps every element in
// its place, so it is a Reshape, which the executor (and ONNX Runtime) runs as a view instead of
// a copy.
//
//   x:[1, S, E] -> Transpose<perm=[1, 0, 2]> -> y:[S, 1, E]   =>  x -> Reshape([S, 1, E]) -> y
//   r = Reshape(x0, s) -> Transpose (as above)               =>  x0 -> Reshape([...]) -> y
//
// torch's nn.MultiheadAttention (torchvision's ViT) transposes a batch of 1 to sequence-first
// and back around every attention: two copies of [1, S, E] a layer. After the fusions both are
// views, and the one that follows a Reshape merges with it.
//
// It runs once after the -O3 fusions, not before them: a head split of a one-token sequence,
// [B, 1, H, D] -> Transpose(0, 2, 1, 3), moves a unit axis only, and the attention patterns
// look for that Transpose.
//
// Conditions (each failure worth telling is a reported rejection):
//  1. The perm is known and the input's rank is known; the axes whose extent is not provably 1
//     appear in the output in their input order (the extents of size 1 can go anywhere).
//  2. The target shape is expressible: each output dim is static, or (at most one) is -1, or
//     keeps its axis (perm[i] == i) and is copied by a 0. A Transpose with two moved dynamic
//     axes is kept.
//  3. A Reshape feeding it is skipped (the new node reads that Reshape's input) when the target
//     has no 0 (a 0 would copy a dim of the other input); that Reshape stays while others read
//     it.
//  4. Opset >= 5 (Reshape's shape is an input).
// A merged Reshape whose output is provably its input's shape is removed (when that keeps the
// graph's interface).
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

bool isUnit(const Dim& d) { return d.isStatic() && d.value() == 1; }

class ReshapeUnitTransposesPass : public Pass {
 public:
  const PassInfo& info() const override { return ReshapeUnitTransposesPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    if (graph.nodesOfType("Transpose").empty() || (ctx.opset() > 0 && ctx.opset() < 5))
      return false;
    Rewriter rw(ctx);
    bool changed = false;
    for (Node* n : graph.nodesSnapshot()) {
      if (rw.erased(n) || !n->is("Transpose") || !n->domain().empty()) continue;
      changed |= rewrite(rw, n);
    }
    return changed;
  }

 private:
  static void reject(Rewriter& rw, const Node& n, const char* constraint, const std::string& why) {
    if (rw.context().explain())
      rw.reject(NearMiss{"reshape-unit-transposes", n.label(), constraint, n.label(), why});
  }

  bool rewrite(Rewriter& rw, Node* t) {
    Value* x = t->input(0);
    const Shape& in = x ? x->shape() : Shape();
    const Shape& out = t->output(0)->shape();
    if (!x || !in.hasRank() || !out.hasRank() || in.rank() != out.rank()) return false;
    std::optional<std::vector<int64_t>> perm = transposePerm(*t, nullptr);
    if (!perm) return false;
    // Condition 1: the non-unit axes keep their order. No rejection: most Transposes move
    // real axes, and that is no near miss.
    int64_t last = -1;
    bool moves_unit_axes = false;
    for (size_t i = 0; i < perm->size(); ++i) {
      const int64_t a = (*perm)[i];
      if (isUnit(in[static_cast<size_t>(a)])) {
        moves_unit_axes |= a != static_cast<int64_t>(i);
        continue;
      }
      if (a < last) return false;
      last = a;
    }
    if (!moves_unit_axes) return false;  // the identity is merge-transposes' to remove
    // Condition 2: the target.
    std::vector<int64_t> target;
    bool inferred = false;
    bool copies = false;
    for (size_t i = 0; i < out.rank(); ++i) {
      if (out[i].isStatic()) {
        target.push_back(out[i].value());
      } else if ((*perm)[i] == static_cast<int64_t>(i)) {
        target.push_back(0);
        copies = true;
      } else if (!inferred) {
        target.push_back(-1);
        inferred = true;
      } else {
        reject(rw, *t, "expressible-shape",
               fmt::format("{} moves only axes of extent 1 of {}, but two of its dynamic axes "
                           "move, so no Reshape target spells {}",
                           t->label(), in.str(), out.str()));
        return false;
      }
    }
    if (!rw.context().allowRewrite()) {
      rw.context().count("skipped_max_rewrites");
      return false;
    }
    // Condition 3.
    Value* source = x;
    Node* r = x->producer();
    if (!copies && r && r->is("Reshape") && r->domain().empty() && r->numInputs() >= 2 &&
        r->input(0) && !x->isGraphOutput()) {
      source = r->input(0);
      rw.context().count("merged_with_reshape");
    }
    NewNode reshape;
    reshape.op_type = "Reshape";
    const int64_t rank = static_cast<int64_t>(target.size());
    reshape.inputs = {source, rw.addConstant(t->output(0)->name() + "_shape",
                                             Tensor::fromValues(DType::Int64, {rank}, target))};
    // (replaceNode erases the skipped Reshape when only t read it.)
    Node* view = rw.replaceNode(t, std::move(reshape));
    rw.context().count("reshaped");
    // Merged with the Reshape before it, the view may undo it ([1, S, E] -> [S, 1, E] -> [1, S,
    // E] around torch's out_proj once unflatten-gemm runs it on [1, S, E]): then it goes.
    if (source != x && dimsProvablyEqual(source->shape(), view->output(0)->shape()) &&
        bypassBreaksInterface(*view).empty()) {
      rw.bypass(view);
      rw.context().count("merged_to_nothing");
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createReshapeUnitTransposesPass() {
  return std::make_unique<ReshapeUnitTransposesPass>();
}

}  // namespace fusectl::passes
