// prefold-rms-norm-weight: move an RMSNorm's per-channel weight into the constant weights of the
// MatMuls/Gemms that read the norm, leaving a weight-free norm (one multiply less per element).
//
//   y = RMSNorm(x, g); q = MatMul(y, Wq); k = MatMul(y, Wk)
//     =>  y = RMSNorm(x, [1]); q = MatMul(y, diag(g) Wq); k = MatMul(y, diag(g) Wk)
// since (n * g) W = n (diag(g) W): row i of each weight (column i of a Gemm's transB=1 weight)
// is multiplied by g[i]. The same for SkipRMSNorm's Y (its Sum output is untouched).
//
// Conditions, each failure reported with its reason:
//  1. The weight g is a float constant (float32, float16 or bfloat16) over the last axis only (the norm's axis is the last) and
//     is not already the unit [1].
//  2. The norm's Y is no graph output and every reader qualifies: a MatMul reading Y as A with a
//     constant weight of Y's dtype and of rank >= 2 whose second-to-last dim is the channel
//     count, or a Gemm (transA 0) reading Y as A with a constant B of Y's dtype. Each product
//     g[i] * W[i][j] is computed in double and rounded once to the weight's dtype; in half the
//     product of two roundings (n * g, then the MatMul) becomes one. The reason names every reader that
//     did not.
// A weight read by other nodes too is copied before it is scaled (setConstantInput writes in
// place only when this reader is its only one), so the others keep the original.
#include <fmt/format.h>

#include <algorithm>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "norm_patterns.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

struct Norm {
  const char* op;
  size_t scale_input;
};

constexpr Norm kNorms[] = {{"RMSNorm", 1}, {"SkipRMSNorm", 2}};

// Why `reader` cannot take the weight of norm output `y` (with `channels` channels), or "".
std::string readerProblem(const Node& reader, const Value& y, int64_t channels) {
  const bool matmul = reader.is("MatMul");
  if (!matmul && !reader.is("Gemm")) return fmt::format("{} is not a MatMul or Gemm", reader.label());
  if (reader.input(0) != &y || reader.input(1) == &y)
    return fmt::format("{} reads '{}' as its weight, not as A", reader.label(), y.name());
  if (!matmul && reader.attrInt("transA", 0) != 0)
    return fmt::format("{} has transA=1", reader.label());
  const Value* w = reader.input(1);
  if (!w->isConstant())
    return fmt::format("{} weight '{}' is not a constant ({})", reader.label(), w->name(),
                       nonConstantOrigin(*w));
  if (w->dtype() != y.dtype())
    return fmt::format("{} weight '{}' is {}, the norm's output is {}", reader.label(), w->name(),
                       dtypeName(w->dtype()), dtypeName(y.dtype()));
  const std::vector<int64_t>& d = w->initializer()->dims();
  const bool trans_b = !matmul && reader.attrInt("transB", 0) != 0;
  const int64_t rows = d.size() < 2 ? -1 : trans_b ? d.back() : d[d.size() - 2];
  if (rows != channels)
    return fmt::format("{} weight '{}' has shape [{}], not {} input channels", reader.label(),
                       w->name(), fmt::join(d, ", "), channels);
  return "";
}

// The channel count of the norm's weight (condition 1), or -1 with `why`.
int64_t channelsOf(const Node& n, size_t scale_input, Why& why) {
  const Value* g = n.input(scale_input);
  const Value* y = n.output(0);
  if (!g || !g->isConstant() || !constraints::isFusibleFloat(g->dtype())) {
    why.fail(n, [&] {
      return fmt::format("{} weight is not a float, float16 or bfloat16 constant", n.label());
    });
    return -1;
  }
  const int64_t c = g->initializer()->numel();
  const Shape& s = y->shape();
  int64_t axis = n.attrInt("axis", -1);
  if (s.hasRank() && axis < 0) axis += static_cast<int64_t>(s.rank());
  const bool last_axis = s.hasRank() && s.rank() > 0 &&
                         axis == static_cast<int64_t>(s.rank()) - 1 &&
                         s[s.rank() - 1].isStatic() && s[s.rank() - 1].value() == c;
  if (c == 1 && g->initializer()->valueAsDouble(0) == 1.0) {
    why.fail(n, [&] { return fmt::format("{} is already weight-free", n.label()); });
    return -1;
  }
  if (!last_axis) {
    why.fail(n, [&] {
      return fmt::format("{} weight '{}' ({} elements) is not one per channel of the last axis "
                         "of {}",
                         n.label(), g->name(), c, s.str());
    });
    return -1;
  }
  return c;
}

Pattern buildPattern(const Norm& norm) {
  Pattern p = Pattern::parse(fmt::format("n:fusectl::{}", norm.op),
                             fmt::format("prefold-{}-weight", norm.op));
  const size_t scale_input = norm.scale_input;
  p.require({"per-channel-weight", [scale_input](const Match& m, Why& why) {
               return channelsOf(*m.get("n"), scale_input, why) > 0;
             }});
  p.require(constraints::notGraphOutput("n"));
  p.require({"every-reader-a-matmul", [scale_input](const Match& m, Why& why) {
               const Node* n = m.get("n");
               Why quiet(false);
               const int64_t c = channelsOf(*n, scale_input, quiet);
               std::vector<std::string> problems;
               const std::vector<Node*> readers = n->output(0)->consumers();
               if (readers.empty()) return why.fail(*n, fmt::format("{} has no readers", n->label()));
               for (const Node* r : readers) {
                 std::string problem = readerProblem(*r, *n->output(0), c);
                 if (!problem.empty()) problems.push_back(std::move(problem));
               }
               if (problems.empty()) return true;
               return why.fail(*n, [&] {
                 return fmt::format("{} of {} readers do not qualify: {}", problems.size(),
                                    readers.size(), fmt::join(problems, "; "));
               });
             }});
  return p;
}

class PrefoldRmsNormWeightPass : public Pass {
 public:
  const PassInfo& info() const override { return PrefoldRmsNormWeightPassInfo; }

  std::vector<Pattern> patterns() const override {
    return {buildPattern(kNorms[0]), buildPattern(kNorms[1])};
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    size_t rewrites = 0;
    for (const Norm& norm : kNorms) {
      const Pattern p = buildPattern(norm);
      rewrites += applyPattern(graph, ctx, p, [&](Rewriter& rw, const Match& m) {
        prefold(rw, norm, m.get("n"));
        return true;
      });
    }
    return rewrites > 0;
  }

 private:
  static void prefold(Rewriter& rw, const Norm& norm, Node* n) {
    const DType g_type = n->input(norm.scale_input)->dtype();
    const std::vector<double> g = constantAsDoubles(*n->input(norm.scale_input)->initializer());
    const int64_t c = static_cast<int64_t>(g.size());
    for (Node* reader : n->output(0)->consumers()) {
      const Tensor& w = *reader->input(1)->initializer();
      std::vector<double> v = constantAsDoubles(w);
      const bool trans_b = reader->is("Gemm") && reader->attrInt("transB", 0) != 0;
      const int64_t cols = trans_b ? 1 : w.dims().back();  // stride between rows
      for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
        const int64_t channel = trans_b ? i % c : (i / cols) % c;
        v[static_cast<size_t>(i)] *= g[static_cast<size_t>(channel)];
      }
      rw.setConstantInput(reader, 1, tensorFromDoubles(w.dtype(), w.dims(), v),
                          reader->input(1)->name() + "_prefolded");
      rw.context().count("prefolded_weights");
    }
    rw.rewireInput(n, norm.scale_input,
                   rw.addConstant(n->output(0)->name() + "_unit_scale", filledTensor(g_type, {1}, 1.f)));
    rw.noteRedefined(*n->output(0));
    rw.context().count("weight_free_norms");
  }
};

}  // namespace

std::unique_ptr<Pass> createPrefoldRmsNormWeightPass() {
  return std::make_unique<PrefoldRmsNormWeightPass>();
}

}  // namespace fusectl::passes
