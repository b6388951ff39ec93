// fuse-skip-norm: take the residual Add of a transformer block into the norm that reads it (the
// cross-layer residual + norm fusion), so that the sum is normalised while it is in cache
// instead of being written, read back and written again.
//
//   s = Add(x, skip); y = LayerNormalization(s, scale[, bias])   =>  y = fusectl::SkipLayerNorm(
//                    or fusectl::LayerNorm(s, scale, bias)                x, skip, scale, bias)
//   s = Add(x, skip); y = fusectl::RMSNorm(s, scale)             =>  y = fusectl::SkipRMSNorm(
//                                                                          x, skip, scale)
//   (y, s) when s has other readers: the sum is still written once, in the same pass.
// It runs after fuse-layer-norm and fuse-rms-norm, on the nodes they wrote (or on a model's own
// LayerNormalization).
//
// Conditions, each failure reported with its reason:
//  1. The sum is no graph output. When something else reads it too (the next residual of a
//     pre-norm block, GPT-2's `h + mlp(ln_2(h))`), the fused node returns it as its second
//     output, Sum, which those readers read instead (Rewriter::replaceMatchKeeping) -- unless
//     an operand comes straight from a MatMul/Gemm/Conv that reads into nothing else: that
//     node's epilogue (fuse-matmul-epilogue, fuse-epilogue) takes the Add and writes the sum
//     once, where SkipLayerNorm would write the projection and the sum (one write more).
//  2. The operands have the same shape (every dim provably equal), or one of them is a bias
//     broadcast on the last axis only ([H] or [1, ..., H]) of a norm over that one axis.
//  3. A standard LayerNormalization has stash_type 1 and no Mean/InvStdDev output in use, and
//     a bias or a scale of static shape (its zeros take the missing bias's place).
//  4. The norm's scale and bias hold one value per normalised element (static shapes whose
//     counts equal the normalised dims' product): the fused kernels do not broadcast them.
//  5. Everything is float32, float16 or bfloat16 (fusibleFloatTypes; one dtype, as the ops
//     require). A half node computes the sum in float32 and normalises it before rounding.
#include <fmt/format.h>

#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/rewriter.h"
#include "norm_patterns.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

enum class NormOp { StandardLayerNorm, LayerNorm, RMSNorm };

constexpr NormOp kForms[] = {NormOp::StandardLayerNorm, NormOp::LayerNorm, NormOp::RMSNorm};

std::string formName(NormOp op) {
  return op == NormOp::StandardLayerNorm ? "skip-layer-norm-standard"
         : op == NormOp::LayerNorm       ? "skip-layer-norm"
                                         : "skip-rms-norm";
}

bool provablySameShape(const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank() || a.rank() != b.rank()) return false;
  for (size_t i = 0; i < a.rank(); ++i)
    if (!a[i].provablyEqual(b[i])) return false;
  return true;
}

// [H] or [1, ..., H] with H the last dim of `full`.
bool lastAxisBias(const Shape& bias, const Shape& full) {
  if (!bias.hasRank() || !full.hasRank() || bias.rank() == 0 || bias.rank() > full.rank())
    return false;
  for (size_t i = 0; i + 1 < bias.rank(); ++i)
    if (!bias[i].isStatic() || bias[i].value() != 1) return false;
  return bias[bias.rank() - 1].provablyEqual(full[full.rank() - 1]);
}

// Which operand of the Add is X (the full shape) and which Skip; nullopt with `why` when the
// shapes do not qualify (condition 2).
std::optional<std::pair<Value*, Value*>> operands(const Match& m, Why& why) {
  Node* a = m.get("a");
  Node* n = m.get("n");
  Value* x = a->input(0);
  Value* skip = a->input(1);
  const Shape& sum = a->output(0)->shape();
  if (provablySameShape(x->shape(), sum) && provablySameShape(skip->shape(), sum))
    return std::make_pair(x, skip);
  const int64_t rank = sum.hasRank() ? static_cast<int64_t>(sum.rank()) : 0;
  int64_t axis = n->attrInt("axis", -1);
  if (axis < 0) axis += rank;
  const bool last_axis_norm = sum.hasRank() && axis == rank - 1;
  if (last_axis_norm && provablySameShape(x->shape(), sum) && lastAxisBias(skip->shape(), sum))
    return std::make_pair(x, skip);
  if (last_axis_norm && provablySameShape(skip->shape(), sum) && lastAxisBias(x->shape(), sum))
    return std::make_pair(skip, x);
  why.fail(*a, [&] {
    return fmt::format("{} adds '{}' {} and '{}' {}: neither the same shape nor a bias on the "
                       "last axis of a norm over that axis",
                       a->label(), x->name(), x->shape().str(), skip->name(),
                       skip->shape().str());
  });
  return std::nullopt;
}

// Condition 1's exception.
Constraint sumBetterInEpilogue() {
  return {"sum-in-epilogue", [](const Match& m, Why& why) {
            Node* a = m.get("a");
            if (a->output(0)->consumers().size() <= 1) return true;
            // A node whose only reader is `reader` (its output can disappear into it).
            auto onlyFeeds = [](const Node* p) {
              return p->numOutputs() == 1 && p->output(0)->consumers().size() == 1 &&
                     !p->output(0)->isGraphOutput();
            };
            for (const Value* in : a->inputs()) {
              Node* p = in ? in->producer() : nullptr;
              // Through the projection's bias Add, which the same epilogue takes.
              if (p && p->is("Add") && p->domain().empty() && onlyFeeds(p) &&
                  p->numInputs() == 2 && p->input(0) && p->input(1)) {
                const Value* bias = p->input(1)->isConstant()   ? p->input(1)
                                    : p->input(0)->isConstant() ? p->input(0)
                                                                : nullptr;
                const Value* projected = bias == p->input(1) ? p->input(0) : p->input(1);
                if (bias && !projected->isConstant() && projected->producer())
                  p = projected->producer();
              }
              if (!p || opClassOf(*p) != OpClass::Compute || !onlyFeeds(p)) continue;
              return why.fail(*a, [&] {
                return fmt::format("{} output '{}' is read elsewhere too, and {} can take the "
                                   "Add into its epilogue, writing the sum once (a SkipNorm "
                                   "would write {}'s output and the sum)",
                                   a->label(), a->output(0)->name(), p->label(), p->label());
              });
            }
            return true;
          }};
}

// The fused kernels read scale and bias as one value per normalised element, where the
// standard LayerNormalization broadcasts them: a [H] scale of a norm over the last two axes
// [S, H] is a model it runs and the fused node refuses.
Constraint normParametersWhole() {
  return {"norm-parameters", [](const Match& m, Why& why) {
            Node* n = m.get("n");
            const Shape& sum = m.get("a")->output(0)->shape();
            // The normalised dims' product: nullopt where the rank, the axis or a dim is unknown.
            std::optional<int64_t> normalised;
            if (sum.hasRank()) {
              const int64_t rank = static_cast<int64_t>(sum.rank());
              int64_t axis = n->attrInt("axis", -1);
              if (axis < 0) axis += rank;
              if (axis >= 0 && axis < rank)
                normalised = Shape(std::vector<Dim>(sum.dims().begin() + axis, sum.dims().end()))
                                 .staticNumel();
            }
            for (size_t i = 1; i < n->numInputs() && i <= 2; ++i) {
              const Value* p = n->input(i);
              if (!p) continue;
              const std::optional<int64_t> count = p->shape().staticNumel();
              if (normalised && count && *count == *normalised) continue;
              return why.fail(*n, [&] {
                return fmt::format("{} reads '{}' {} over normalised dims of {} elements: the "
                                   "fused norm takes one parameter per normalised element",
                                   n->label(), p->name(), p->shape().str(),
                                   normalised ? std::to_string(*normalised) : "unknown");
              });
            }
            return true;
          }};
}

Constraint residualShapes() {
  return {"residual-shapes",
          [](const Match& m, Why& why) { return operands(m, why).has_value(); }};
}

Constraint standardLayerNormQualifies() {
  return {"layer-norm-form", [](const Match& m, Why& why) {
            Node* n = m.get("n");
            if (!standardLayerNormReplaceable(*n, why)) return false;
            const Value* bias = n->input(2);
            const Value* scale = n->input(1);
            if (!bias && !(scale && scale->shape().isStatic())) {
              return why.fail(*n, [&] {
                return fmt::format("{} has no bias and its scale has no static shape to give "
                                   "the zeros that take its place",
                                   n->label());
              });
            }
            return true;
          }};
}

Pattern buildPattern(NormOp op) {
  using namespace constraints;
  const char* norm = op == NormOp::StandardLayerNorm ? "LayerNormalization"
                     : op == NormOp::LayerNorm       ? "fusectl::LayerNorm"
                                                     : "fusectl::RMSNorm";
  Pattern p = Pattern::parse(fmt::format("n:{}(^a:Add)", norm), formName(op));
  p.producing({op == NormOp::RMSNorm ? "fusectl::SkipRMSNorm" : "fusectl::SkipLayerNorm"});
  p.require(notGraphOutput("a")).require(sumBetterInEpilogue()).require(residualShapes());
  p.require(normParametersWhole());
  if (op == NormOp::StandardLayerNorm) p.require(standardLayerNormQualifies());
  p.require(dtypeIn({"a", "n"}, fusibleFloatTypes()));
  return p;
}

class FuseSkipNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseSkipNormPassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (NormOp op : kForms) out.push_back(buildPattern(op));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    return applyForms(graph, ctx, patterns(), kForms, fuse);
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& pattern, NormOp op, const Match& m) {
    Why checked(false);  // residualShapes held
    auto [x, skip] = *operands(m, checked);
    Node* n = m.get("n");
    NewNode node;
    node.op_type = op == NormOp::RMSNorm ? "SkipRMSNorm" : "SkipLayerNorm";
    node.domain = "fusectl";
    node.inputs = {x, skip, n->input(1)};
    if (op != NormOp::RMSNorm) {
      Value* bias = n->input(2);
      if (!bias) {
        bias = rw.addConstant(n->output(0)->name() + "_bias",
                              filledTensor(n->input(1)->dtype(), n->input(1)->shape().staticDims(), 0.f));
      }
      node.inputs.push_back(bias);
    }
    node.attributes = {Attribute::ofInt("axis", n->attrInt("axis", -1)),
                       Attribute::ofFloat("epsilon", n->attrFloat("epsilon", 1e-5f))};
    node.name = n->name();
    Value* sum = m.get("a")->output(0);
    if (sum->consumers().size() > 1) {
      rw.replaceMatchKeeping(pattern.name, m, n->output(0), sum, std::move(node));
      rw.context().count("kept_sum");
    } else {
      rw.replaceMatch(pattern.name, m, n->output(0), std::move(node));
    }
    rw.context().count(op == NormOp::RMSNorm ? "fused_skip_rms_norm" : "fused_skip_layer_norm");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseSkipNormPass() { return std::make_unique<FuseSkipNormPass>(); }

}  // namespace fusectl::passes
