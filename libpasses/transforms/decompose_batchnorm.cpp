// decompose-batchnorm: turn a BatchNormalization that nothing folded into Mul + Add.
//
//   x [N, C, d...] -> BatchNormalization(gamma, beta, mean, var) -> y
//   =>  x -> Mul(x, s) -> Add(., t) -> y        s, t constants of shape [C, 1, ..., 1]
//
// In the -O2 group this runs after fold-conv-bn and fold-gemm-bn, so it sees the BNs that
// could not be folded into weights; as Mul and Add they can be folded further (fuse-bias-add
// absorbs the Add into a preceding Conv's bias) or join an elementwise epilogue.
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The BN is in inference form: one output, training_mode=0 (before opset 7: is_test=1).
//  2. gamma, beta, mean and var are constants (initializers that are not graph inputs).
//  3. The rank of x is known and >= 2 (s and t need rank(x) - 1 dims to broadcast over axis 1).
//  4. x is float, double, float16 or bfloat16; the parameters are foldable floats of shape
//     [C] (C = x's dim 1 when static), spatial=1.
//
// Math (in double, stored in x's dtype):
//   s[c] = gamma[c] / sqrt(var[c] + epsilon),  t[c] = beta[c] - mean[c] * s[c]
// For float16/bfloat16 x the Mul and Add round their results to x's dtype, as the rest of a
// half-precision graph does.
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

Constraint inputRankKnown() {
  return {"input-rank:bn", [](const Match& m, Why& why) {
            Node* bn = m.get("bn");
            Value* x = bn->input(0);
            if (!x) return why.fail(*bn, [&] { return bn->label() + " has no input X"; });
            if (!x->shape().hasRank()) {
              return why.fail(*bn, [&] {
                return fmt::format(
                    "{} input '{}' has unknown rank; the scale and shift constants "
                    "need it to broadcast over the channel axis",
                    bn->label(), x->name());
              });
            }
            if (x->shape().rank() >= 2) return true;
            return why.fail(*bn, [&] {
              return fmt::format("{} input '{}' has rank {}, expected >= 2", bn->label(), x->name(),
                                 x->shape().rank());
            });
          }};
}

int64_t staticChannels(const Node& bn) {
  const Dim& c = bn.input(0)->shape()[1];
  return c.isStatic() ? c.value() : -1;
}

Constraint foldableParams() {
  return {"batchnorm-params:bn", [](const Match& m, Why& why) {
            Node* bn = m.get("bn");
            Value* x = bn->input(0);
            if (!isFoldableFloat(x->dtype())) {
              return why.fail(*bn, [&] {
                return fmt::format(
                    "{} input '{}' is {}, expected float, double, float16 or "
                    "bfloat16",
                    bn->label(), x->name(),
                    x->dtype() == DType::Undefined ? "of unknown type" : dtypeName(x->dtype()));
              });
            }
            return batchNormAffine(*bn, staticChannels(*bn), nullptr, why);
          }};
}

class DecomposeBatchNormPass : public Pass {
 public:
  const PassInfo& info() const override { return DecomposeBatchNormPassInfo; }

  std::vector<Pattern> patterns() const override { return {build(0)}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    Pattern p = build(ctx.opset());
    return applyPattern(graph, ctx, p, [&](Rewriter& rw, const Match& m) {
             decompose(rw, m);
             ctx.count("decomposed");
             return true;
           }) > 0;
  }

 private:
  static Pattern build(int64_t opset) {
    using namespace constraints;
    Pattern p = Pattern::parse("bn:BatchNormalization", "batchnorm");
    p.require(batchNormInference("bn"))
        .require(batchNormTestMode("bn", opset))
        .require(constantInput("bn", 1))
        .require(constantInput("bn", 2))
        .require(constantInput("bn", 3))
        .require(constantInput("bn", 4))
        .require(inputRankKnown())
        .require(foldableParams());
    return p;
  }

  static void decompose(Rewriter& rw, const Match& m) {
    Node* bn = m.get("bn");
    Value* x = bn->input(0);
    ChannelAffine map;
    Why checked(false);  // foldableParams held
    batchNormAffine(*bn, staticChannels(*bn), &map, checked);
    const auto channels = static_cast<int64_t>(map.scale.size());
    std::vector<int64_t> dims{channels};
    dims.resize(x->shape().rank() - 1, 1);

    Value* y = bn->output(0);
    const std::string base = bn->name().empty() ? y->name() : bn->name();
    Value* s = rw.addConstant(base + "_scale", tensorFromDoubles(x->dtype(), dims, map.scale));
    Value* t = rw.addConstant(base + "_shift", tensorFromDoubles(x->dtype(), dims, map.shift));
    // Unnamed nodes stay unnamed (the textual syntax has no node names); named ones pass
    // theirs on.
    NewNode mul;
    mul.op_type = "Mul";
    mul.inputs = {x, s};
    mul.name = bn->name().empty() ? "" : bn->name() + "_mul";
    mul.naming = NodeNaming::Unique;
    Node* scaled = rw.addNode(std::move(mul), base + "_scaled", y->type, bn);
    NewNode add;
    add.op_type = "Add";
    add.inputs = {scaled->output(0), t};
    add.name = bn->name().empty() ? "" : bn->name() + "_add";
    add.naming = NodeNaming::Unique;
    add.doc_string = bn->doc_string;  // keeps the history of earlier rewrites
    rw.replaceMatch("batchnorm", m, y, std::move(add));
  }
};

}  // namespace

std::unique_ptr<Pass> createDecomposeBatchNormPass() {
  return std::make_unique<DecomposeBatchNormPass>();
}

}  // namespace fusectl::passes
