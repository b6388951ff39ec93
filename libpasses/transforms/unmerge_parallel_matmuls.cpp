// unmerge-parallel-matmuls: merge-parallel-matmuls in reverse, for ONNX Runtime. A model saved
// after -O3 reads its q/k/v (and gate/up) projections through Slices of one merged MatMul;
// ONNX Runtime runs that as one Gemm and copies each Slice out, which made BERT-base 2-3% slower
// than three MatMuls (docs/passes.md), and its MultiHeadAttention takes the biases of separate
// q/k/v projections into its own kernel. `--emit ort` runs this pass first (after
// unpack-packed-attention), so the saved model reaches emit-ort as the export does.
//
//   P = MatMul(X, [W1|W2|...]) or fusectl.FusedMatMul<act>(X, [W1|W2|...], [b1|b2|...])
//   Slice(P, a_i:b_i on the last axis) -> y_i
//     =>   y_i = MatMul(X, W[:, a_i:b_i])  or  FusedMatMul<act>(X, W[:, a_i:b_i], b[a_i:b_i])
//
//   act(X W + b)[..., a:b] = act(X W[:, a:b] + b[a:b]): each column is the same dot product.
//
// A fusectl.SwiGLUPacked(P) of such a P is first written as SwiGLU(Slice(P, 0:I), Slice(P, I:2I))
// (form `unpack-swiglu`), whose Slices the projection form then takes.
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The weight is a constant [K, N]; a FusedMatMul has no residual (its activation, elementwise,
//     goes with each part), and its bias, when present, is a constant [N].
//  2. P is no graph output and every reader of P is a Slice of its last axis with constant
//     bounds and step 1, two readers at least (one MatMul is already the unmerged form).
#include <fmt/format.h>

#include <cstring>
#include <optional>
#include <string_view>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

bool isProjectionOp(const Node& n) {
  return (n.is("MatMul") && n.domain().empty()) ||
         n.is("FusedMatMul", "fusectl");
}

// Condition 1 for projection `p`: true, or false with `why`.
bool splitsByColumns(const Node& p, Why& why) {
  auto fail = [&](std::string reason) {
    return why.fail(p, [&] { return fmt::format("{} {}", p.label(), reason); });
  };
  const Value* w = p.numInputs() > 1 ? p.input(1) : nullptr;
  if (!w || !w->isConstant() || !w->shape().isStatic() || w->shape().rank() != 2)
    return fail("has no constant 2-D weight to split by columns");
  if (p.is("FusedMatMul", "fusectl")) {
    // An activation is elementwise, so it splits with the columns; a residual would have to
    // be sliced too.
    if (p.numInputs() > 3 && p.input(3)) return fail("adds a residual");
    const Value* b = p.numInputs() > 2 ? p.input(2) : nullptr;
    const int64_t n = w->shape().staticDims()[1];
    if (b && (!b->isConstant() || !b->shape().isStatic() ||
              b->shape().staticDims() != std::vector<int64_t>{n}))
      return fail("adds a bias that is not a constant [N]");
  }
  return true;
}

// Condition 2: the [start, end) of each reader of p's output (all Slices), or nothing.
std::optional<std::vector<std::pair<Node*, std::pair<int64_t, int64_t>>>> columnReaders(
    const Node& p, Why& why) {
  const Value* out = p.output(0);
  const Shape& s = out->shape();
  auto fail = [&](std::string reason) {
    why.fail(p, [&] { return fmt::format("{} {}", p.label(), reason); });
    return std::nullopt;
  };
  if (out->isGraphOutput()) return fail("is a graph output");
  if (!s.hasRank() || s.rank() < 2 || !s[s.rank() - 1].isStatic())
    return fail("has no static last dim");
  const int64_t width = s[s.rank() - 1].value();
  std::vector<std::pair<Node*, std::pair<int64_t, int64_t>>> readers;
  for (Node* c : out->consumers()) {
    std::optional<std::pair<int64_t, int64_t>> span;
    if (c->is("Slice") && c->domain().empty() && c->input(0) == out)
      span = lastAxisSpan(*c, s.rank(), width);
    if (!span || span->first >= span->second)
      return fail(fmt::format("is read by {}, not only by Slices of its last axis",
                              c->label()));
    readers.push_back({c, *span});
  }
  if (readers.size() < 2) return fail("is read by fewer than two Slices: nothing was merged");
  return readers;
}

Constraint projectionSplits() {
  return {"split-by-columns", [](const Match& m, Why& why) {
            const Node& p = *m.get("p");
            return splitsByColumns(p, why) && columnReaders(p, why).has_value();
          }};
}

// The SwiGLUPacked form: its input is a projection's output this pass can split.
Constraint readsSplittableProjection() {
  return {"reads-merged-projection", [](const Match& m, Why& why) {
            const Node& s = *m.get("s");
            const Node* p = s.input(0)->producer();
            const Shape& xs = s.input(0)->shape();
            if (p && isProjectionOp(*p) && splitsByColumns(*p, why) && xs.hasRank() &&
                xs.rank() >= 2 && xs[xs.rank() - 1].isStatic() &&
                xs[xs.rank() - 1].value() % 2 == 0)
              return true;
            return why.fail(s, [&] {
              return fmt::format("{} does not read a merged projection with an even static "
                                 "width",
                                 s.label());
            });
          }};
}

std::vector<Pattern> build() {
  std::vector<Pattern> forms;
  Pattern swiglu = Pattern::parse("^s:fusectl::SwiGLUPacked", "unpack-swiglu");
  swiglu.producing({"fusectl::SwiGLU"});
  swiglu.require(readsSplittableProjection());
  forms.push_back(std::move(swiglu));
  for (const char* anchor : {"^p:fusectl::FusedMatMul", "^p:MatMul"}) {
    Pattern p = Pattern::parse(anchor, std::string_view(anchor).find("Fused") != std::string_view::npos
                                           ? "unmerge-fused-matmul"
                                           : "unmerge-matmul");
    p.producing({std::string(std::string_view(anchor).substr(3))});
    p.require(projectionSplits());
    forms.push_back(std::move(p));
  }
  return forms;
}

// Columns [a, b) of a [K, N] or [N] constant.
Tensor columns(const Tensor& t, int64_t a, int64_t b) {
  const std::vector<int64_t>& dims = t.dims();
  const int64_t n = dims.back(), rows = dims.size() == 2 ? dims[0] : 1;
  std::vector<int64_t> out_dims = dims;
  out_dims.back() = b - a;
  const size_t elem = dtypeSize(t.dtype());
  Tensor out(t.dtype(), out_dims);
  uint8_t* dst = out.mutableBytes();
  const uint8_t* src = t.bytes();
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * (b - a) * elem, src + (r * n + a) * elem, (b - a) * elem);
  return out;
}

class UnmergeParallelMatMulsPass : public Pass {
 public:
  const PassInfo& info() const override { return UnmergeParallelMatMulsPassInfo; }

  std::vector<Pattern> patterns() const override { return build(); }

  bool run(const Graph& graph, PassContext& ctx) override {
    const std::vector<Pattern> forms = build();
    size_t rewrites = 0;
    // One call per form, the SwiGLU first: its Slices are what the projection forms read.
    rewrites += applyPattern(graph, ctx, forms[0], [&](Rewriter& rw, const Match& m) {
      Node* s = m.get("s");
      Value* x = s->input(0);
      const Shape& xs = x->shape();
      const int64_t width = xs[xs.rank() - 1].value(), half = width / 2;
      Value* axes = rw.addConstant(x->name() + "_halves_axes", int64Vector({-1}));
      Value* gate = addLastAxisSlice(rw, x, 0, half, axes, s->name() + "_gate", s);
      Value* up = addLastAxisSlice(rw, x, half, width, axes, s->name() + "_up", s);
      NewNode swiglu;
      swiglu.op_type = "SwiGLU";
      swiglu.domain = "fusectl";
      swiglu.name = s->name();
      swiglu.doc_string = s->doc_string;
      swiglu.inputs = {gate, up};
      rw.replaceMatch(forms[0].name, m, s->output(0), std::move(swiglu));
      ctx.count("unpacked_swiglu");
      return true;
    });
    // Candidates are the projections a Slice reads: any other MatMul is no near miss.
    DriverOptions driver;
    driver.candidate = [](const Node& n) {
      for (const Node* c : n.output(0)->consumers())
        if (c->is("Slice") && c->domain().empty()) return true;
      return false;
    };
    for (size_t form = 1; form < forms.size(); ++form) {
      rewrites += applyPattern(graph, ctx, forms[form], [&](Rewriter& rw, const Match& m) {
        Node* p = m.get("p");
        Why checked(false);  // the constraints held
        const auto readers = *columnReaders(*p, checked);
        const Tensor& w = *p->input(1)->initializer();
        const Tensor* bias =
            p->numInputs() > 2 && p->input(2) ? p->input(2)->initializer() : nullptr;
        for (const auto& [slice, span] : readers) {
          const auto [a, b] = span;
          // replaceNode gives the part the Slice's node name; its constants are named after it.
          const std::string hint = slice->name().empty() ? slice->output(0)->name() : slice->name();
          NewNode part;
          part.op_type = p->opType();
          part.domain = p->domain();
          part.attributes = p->attributes();
          part.doc_string = p->doc_string;
          part.inputs = {p->input(0), rw.addConstant(hint + "_weight", columns(w, a, b))};
          if (bias) part.inputs.push_back(rw.addConstant(hint + "_bias", columns(*bias, a, b)));
          rw.replaceNode(slice, std::move(part));
        }
        // The last replaceNode erased p with the weights only it read.
        ctx.count("unmerged_projections", static_cast<int64_t>(readers.size()));
        return true;
      }, driver);
    }
    return rewrites > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createUnmergeParallelMatMulsPass() {
  return std::make_unique<UnmergeParallelMatMulsPass>();
}

}  // namespace fusectl::passes
