// fold-shape-subgraphs: replace Shape and Size of values whose dims are static by constants, so
// that fold-constants can collapse the Shape -> Gather -> Unsqueeze -> Concat chains exporters
// write around Reshape.
//
//   x:[2,3,4] -> Shape<start=1> -> s                  =>  initializer s = [3, 4]
//   x:[2,3,4] -> Size -> n                            =>  initializer n = 24
//   x:[N,3,4] -> Shape -> s -> Gather(s, 1) -> g      =>  initializer g = 3
//
// Conditions (each failure is a reported rejection naming the dim):
//  1. Shape: the input's rank is known and every dim in [start, end) is static (opset 15 start
//     and end attributes: negative values count from the back, both clamp to [0, rank]).
//  2. Size: every dim is static.
//  3. A Shape with symbolic dims still folds its Gather and Slice readers that pick static dims
//     only: Gather on axis 0 with constant indices (negative ones count from the back), Slice
//     with constant starts/ends on axis 0 and step 1 (GPT-2's head size, `v.size(-1)`, is
//     Slice(Shape(v), [-1], [max]) at some opsets), whose picked dims are all static.
//  4. A Reshape with a computed target (allowzero 0) that reads a symbolic dim gets a constant
//     one when its output dims can be spelled with copies (0: the input's dim at that index,
//     provably), static values and at most one -1 (foldReshapeTarget): LLaMA's and GPT-2's
//     head splits and merges, [B, S, H, D] <-> [B, S, H*D] with B and S read from Shapes.
// The outputs keep their names; in the -O1 fixpoint group fold-constants then folds what reads
// them, and eliminate-dead-code removes what is left.
// Counters: folded_shape, folded_size, folded_gather, folded_slice, folded_reshape_target.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// What keeps a dim from folding: "symbolic ('batch')" or "unknown".
std::string dimProblem(const Dim& d) {
  return d.isSymbolic() ? fmt::format("symbolic ('{}')", d.symbol()) : std::string("unknown");
}

// The dims [start, end) of its input that a Shape node outputs: opset 15 added the start and end
// attributes (negative values count from the back; both clamp to [0, rank]).
std::pair<int64_t, int64_t> shapeRange(const Node& n, int64_t rank, int64_t opset) {
  if (opset < 15) return {0, rank};
  auto clampIndex = [rank](int64_t v) {
    return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank);
  };
  const int64_t start = clampIndex(n.attrInt("start", 0));
  const int64_t end = n.hasAttr("end") ? clampIndex(n.attrInt("end", rank)) : rank;
  return {start, std::max(start, end)};
}

class FoldShapeSubgraphsPass : public Pass {
 public:
  const PassInfo& info() const override { return FoldShapeSubgraphsPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    Rewriter rw(ctx);
    const int64_t opset = ctx.opset();
    bool changed = false;
    // Folding one Shape or Size never enables another, so the op-type index order will do.
    auto snapshot = [&](std::string_view op) {
      std::vector<Node*> nodes;
      for (Node* n : graph.nodesOfType(op)) nodes.push_back(n);
      return nodes;
    };
    for (Node* n : snapshot("Shape"))
      if (!rw.erased(n) && n->input(0) && n->output(0)) changed |= foldShape(rw, n, opset);
    for (Node* n : snapshot("Size"))
      if (!rw.erased(n) && n->input(0) && n->output(0)) changed |= foldSize(rw, n);
    if (opset >= 5) {
      for (Node* n : snapshot("Reshape"))
        if (!rw.erased(n) && n->domain().empty() && n->numInputs() > 1 && n->input(0) &&
            n->input(1) && n->output(0))
          changed |= foldReshapeTarget(rw, n);
    }
    return changed;
  }

 private:
  static void reject(Rewriter& rw, const Node& n, const char* constraint,
                     const std::string& reason) {
    if (rw.context().explain()) rw.reject(NearMiss{"fold-shape", n.label(), constraint,
                                                   n.label(), reason});
  }

  // Replaces n's output 0 by an initializer holding `t`, keeping the output's name.
  static void replaceByConstant(Rewriter& rw, Node* n, Tensor t) {
    std::vector<std::pair<Value*, Tensor>> outputs;
    outputs.emplace_back(n->output(0), std::move(t));
    rw.replaceWithConstants(n, std::move(outputs));
  }

  static bool used(const Value* v) { return v->hasUses() || v->isGraphOutput(); }

  bool foldShape(Rewriter& rw, Node* n, int64_t opset) {
    PassContext& ctx = rw.context();
    if (!used(n->output(0))) return false;
    const Value* x = n->input(0);
    const Shape& s = x->shape();
    if (!s.hasRank()) {
      reject(rw, *n, "static-dims",
             fmt::format("{} input '{}' has unknown rank", n->label(), x->name()));
      return false;
    }
    const auto [start, end] = shapeRange(*n, static_cast<int64_t>(s.rank()), opset);
    std::vector<int64_t> dims;
    for (int64_t i = start; i < end; ++i) {
      const Dim& d = s[static_cast<size_t>(i)];
      if (!d.isStatic()) {
        // The whole shape is not static; Gathers of static dims may still fold.
        bool folded = foldGathers(rw, n);  // may erase n when it folds every reader
        if (!rw.erased(n) && used(n->output(0))) {
          reject(rw, *n, "static-dims",
                 fmt::format("{} input '{}' dim {} is {}", n->label(), x->name(), i,
                             dimProblem(d)));
        }
        return folded;
      }
      dims.push_back(d.value());
    }
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    replaceByConstant(rw, n, Tensor::fromValues<int64_t>(
                                 DType::Int64, {static_cast<int64_t>(dims.size())}, dims));
    ctx.count("folded_shape");
    return true;
  }

  // Which entries of a Shape output of length `len` reader `r` picks, with the dims of its
  // output: Gather(s, indices, axis=0) with constant indices (negative ones count from the
  // back), or Slice(s, starts, ends[, axes = [0][, steps = [1]]]) with constant one-element
  // starts/ends (clamped as Slice clamps them). nullopt for any other reader; `why` set when
  // an index is out of range.
  struct Picks {
    std::vector<int64_t> entries;
    std::vector<int64_t> dims;
  };
  static std::optional<Picks> picksOf(const Node& r, const Value* s, int64_t len,
                                      std::string& why) {
    if (!r.output(0) || r.numInputs() < 2 || r.input(0) != s) return std::nullopt;
    if (r.is("Gather")) {
      if (r.attrInt("axis", 0) != 0) return std::nullopt;
      const Value* idx = r.input(1);
      if (!idx || !idx->isConstant()) return std::nullopt;
      const Tensor& it = *idx->initializer();
      if (it.dtype() != DType::Int64 && it.dtype() != DType::Int32) return std::nullopt;
      Picks p{{}, it.dims()};
      for (int64_t k = 0; k < it.numel(); ++k) {
        int64_t j = it.valueAsInt64(k);
        if (j < 0) j += len;
        if (j < 0 || j >= len) {
          why = fmt::format("{} index {} is out of range", r.label(), it.valueAsInt64(k));
          return std::nullopt;
        }
        p.entries.push_back(j);
      }
      return p;
    }
    if (!r.is("Slice") || r.numInputs() < 3) return std::nullopt;
    std::optional<std::vector<int64_t>> starts = intsConstant(r.input(1));
    std::optional<std::vector<int64_t>> ends = intsConstant(r.input(2));
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (r.numInputs() > 3 && r.input(3)) {
      std::optional<std::vector<int64_t>> axes = intsConstant(r.input(3));
      if (!axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1)) return std::nullopt;
    }
    if (r.numInputs() > 4 && r.input(4)) {
      std::optional<std::vector<int64_t>> steps = intsConstant(r.input(4));
      if (!steps || *steps != std::vector<int64_t>{1}) return std::nullopt;
    }
    auto clampIndex = [len](int64_t v) {
      if (v < 0) v = v < -len ? 0 : v + len;  // without overflow for INT64_MIN
      return std::min(v, len);
    };
    const int64_t from = clampIndex((*starts)[0]);
    const int64_t to = std::max(from, clampIndex((*ends)[0]));
    Picks p{{}, {to - from}};
    for (int64_t j = from; j < to; ++j) p.entries.push_back(j);
    return p;
  }

  // Gather and Slice readers of Shape(x) (picksOf) that pick static dims of x only.
  bool foldGathers(Rewriter& rw, Node* shape_node) {
    PassContext& ctx = rw.context();
    Value* s = shape_node->output(0);
    const Shape& xs = shape_node->input(0)->shape();
    // The Shape node's output starts at dim `start` of x.
    const auto [start, end] = shapeRange(*shape_node, static_cast<int64_t>(xs.rank()),
                                         ctx.opset());
    const int64_t len = end - start;
    bool changed = false;
    // Folding a reader removes it from the consumer list: walk a copy.
    const std::vector<Node*> readers = s->consumers();
    for (Node* g : readers) {
      if (rw.erased(g) || !g->output(0) || !used(g->output(0))) continue;
      std::string why;
      std::optional<Picks> picks = picksOf(*g, s, len, why);
      if (picks) {
        for (int64_t j : picks->entries) {
          const size_t dim = static_cast<size_t>(start + j);
          if (xs[dim].isStatic()) continue;
          if (ctx.explain()) {
            why = fmt::format("{} picks dim {} of '{}', which is {}", g->label(), dim,
                              shape_node->input(0)->name(), dimProblem(xs[dim]));
          } else {
            why = "dynamic";
          }
          break;
        }
      }
      if (!why.empty()) {
        reject(rw, *g, "static-dims", why);
        continue;
      }
      if (!picks) continue;
      if (!ctx.allowRewrite()) {
        ctx.count("skipped_max_rewrites");
        break;
      }
      std::vector<int64_t> picked;
      for (int64_t j : picks->entries) picked.push_back(xs[static_cast<size_t>(start + j)].value());
      replaceByConstant(rw, g, Tensor::fromValues<int64_t>(DType::Int64, picks->dims, picked));
      ctx.count(g->is("Gather") ? "folded_gather" : "folded_slice");
      changed = true;
    }
    return changed;
  }

  bool foldSize(Rewriter& rw, Node* n) {
    PassContext& ctx = rw.context();
    if (!used(n->output(0))) return false;
    const Value* x = n->input(0);
    const Shape& s = x->shape();
    std::optional<int64_t> numel = s.staticNumel();
    if (!numel) {
      std::string why = fmt::format("{} input '{}' has unknown rank", n->label(), x->name());
      for (size_t i = 0; s.hasRank() && i < s.rank(); ++i) {
        if (!s[i].isStatic()) {
          why = fmt::format("{} input '{}' dim {} is {}", n->label(), x->name(), i,
                            dimProblem(s[i]));
          break;
        }
      }
      reject(rw, *n, "static-dims", why);
      return false;
    }
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    replaceByConstant(rw, n, Tensor::fromValues<int64_t>(DType::Int64, {},
                                                         std::vector<int64_t>{*numel}));
    ctx.count("folded_size");
    return true;
  }

  // Condition 4: a Reshape whose target is computed (from Shapes, in exports with dynamic dims)
  // but whose output dims inference knows gets a constant target: each output dim that is
  // provably the input's dim at the same index as a 0 (copy), each static one as its value, and
  // at most one other as -1. At run time that target gives the same dims, and the Shape
  // arithmetic that computed the old one is left without readers.
  static bool foldReshapeTarget(Rewriter& rw, Node* n) {
    if (n->input(1)->isConstant() || n->attrInt("allowzero", 0) != 0) return false;
    const Shape& in = n->input(0)->shape();
    const Shape& out = n->output(0)->shape();
    if (!in.hasRank() || !out.hasRank()) return false;
    std::vector<int64_t> target;
    int inferred = 0;
    for (size_t i = 0; i < out.rank(); ++i) {
      const Dim& d = out[i];
      if (d.isStatic() && d.value() > 0) {
        target.push_back(d.value());
      } else if (i < in.rank() && d.provablyEqual(in[i])) {
        target.push_back(0);
      } else if (!d.isStatic() && ++inferred == 1) {
        target.push_back(-1);
      } else {
        return false;  // a static 0, or a second dim neither copied nor static
      }
    }
    // Without a copied dim the target reads no symbolic dim: the Gather/Slice folding above and
    // fold-constants make it a constant already, under its own name.
    if (std::find(target.begin(), target.end(), 0) == target.end()) return false;
    PassContext& ctx = rw.context();
    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    rw.setConstantInput(n, 1,
                        Tensor::fromValues(DType::Int64, {static_cast<int64_t>(target.size())},
                                           target),
                        n->output(0)->name() + "_target");
    ctx.count("folded_reshape_target");
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldShapeSubgraphsPass() {
  return std::make_unique<FoldShapeSubgraphsPass>();
}

}  // namespace fusectl::passes
