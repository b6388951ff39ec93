// fuse-channel-layer-norm: a LayerNorm over the channels of a channels-first tensor, which
// exporters can only write with the channels moved last and back (ONNX's LayerNormalization
// normalises trailing axes), becomes one fusectl::ChannelLayerNorm that reads the channels in
// place.
//
//   t = Transpose(x, [0, 2, ..., r-1, 1])                    x [N, C, ...]
//   n = LayerNormalization(t, scale[, bias], axis = -1)  or  fusectl::LayerNorm(t, scale, bias)
//   y = Transpose(n, [0, r-1, 1, ..., r-2])        =>   y = fusectl::ChannelLayerNorm(x, scale,
//                                                                    bias, epsilon)
// wav2vec 2.0's layer-norm feature extractor does this after each of its seven convolutions
// (torchaudio's and fairseq's `TransposeLast -> LayerNorm -> TransposeLast`); the two transposes
// were a read and a write of the tensor each.
//
// Conditions, each failure reported with its reason:
//  1. The first Transpose moves axis 1 last and keeps the others in order (rank >= 3); the
//     second puts it back (the inverse permutation).
//  2. The norm is over the last axis only (axis -1 or rank - 1).
//  3. A standard LayerNormalization has stash_type 1 and no Mean/InvStdDev output in use; its
//     scale (and bias, if any) has the channel count as its shape, [C] (zeros take a missing
//     bias's place, so C must be static).
//  4. The first Transpose and the norm are read only inside the chain and are no graph output.
//  5. float32, float16 or bfloat16, one dtype.
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "norm_patterns.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

enum class NormOp { StandardLayerNorm, LayerNorm };

constexpr NormOp kForms[] = {NormOp::StandardLayerNorm, NormOp::LayerNorm};

std::string formName(NormOp op) {
  return op == NormOp::StandardLayerNorm ? "channel-layer-norm-standard" : "channel-layer-norm";
}

// The perm that moves axis 1 of `rank` axes last, the others in order, and its inverse.
std::vector<int64_t> channelsLast(size_t rank) {
  std::vector<int64_t> perm = {0};
  for (size_t a = 2; a < rank; ++a) perm.push_back(static_cast<int64_t>(a));
  perm.push_back(1);
  return perm;
}
std::vector<int64_t> channelsFirst(size_t rank) {
  std::vector<int64_t> perm = {0, static_cast<int64_t>(rank) - 1};
  for (size_t a = 1; a + 1 < rank; ++a) perm.push_back(static_cast<int64_t>(a));
  return perm;
}

Constraint transposesAroundChannels() {
  return {"channels-moved-last-and-back", [](const Match& m, Why& why) {
            const Node* a = m.get("a");
            const Node* b = m.get("b");
            const Shape& xs = m.value("x")->shape();
            if (!xs.hasRank() || xs.rank() < 3) {
              return why.fail(*a, [&] {
                return fmt::format("{} input has shape {}: not [N, C, ...] of rank >= 3",
                                   a->label(), xs.str());
              });
            }
            const std::optional<std::vector<int64_t>> pa = transposePerm(*a, nullptr);
            const std::optional<std::vector<int64_t>> pb = transposePerm(*b, nullptr);
            if (!pa || *pa != channelsLast(xs.rank())) {
              return why.fail(*a, [&] {
                return fmt::format("{} does not move axis 1 last with the others in order",
                                   a->label());
              });
            }
            if (!pb || *pb != channelsFirst(xs.rank())) {
              return why.fail(*b, [&] {
                return fmt::format("{} does not put the channels back where {} took them from",
                                   b->label(), a->label());
              });
            }
            return true;
          }};
}

Constraint normOverChannels() {
  return {"norm-over-last-axis", [](const Match& m, Why& why) {
            const Node* n = m.get("n");
            const int64_t rank = static_cast<int64_t>(m.value("x")->shape().rank());
            const int64_t axis = n->attrInt("axis", -1);
            if (axis != -1 && axis != rank - 1) {
              return why.fail(*n, [&] {
                return fmt::format("{} normalises from axis {}, not the last axis only",
                                   n->label(), axis);
              });
            }
            const Dim& channels = m.value("x")->shape()[1];
            for (size_t i = 1; i < 3 && i < n->numInputs(); ++i) {
              const Value* p = n->input(i);
              if (!p) continue;
              const Shape& ps = p->shape();
              if (!ps.hasRank() || ps.rank() != 1 || !ps[0].provablyEqual(channels)) {
                return why.fail(*n, [&] {
                  return fmt::format("{} {} '{}' has shape {}, not [C] with C = {}", n->label(),
                                     i == 1 ? "scale" : "bias", p->name(), ps.str(),
                                     channels.str());
                });
              }
            }
            if (!n->input(2) && !channels.isStatic()) {
              return why.fail(*n, [&] {
                return fmt::format("{} has no bias and the channel count {} is not static for "
                                   "the zeros that take its place",
                                   n->label(), channels.str());
              });
            }
            return !n->domain().empty() || standardLayerNormReplaceable(*n, why);
          }};
}

Pattern buildPattern(NormOp op) {
  using namespace constraints;
  const std::string text = op == NormOp::StandardLayerNorm
                               ? "b:Transpose(n:LayerNormalization(a:Transpose($x), $scale))"
                               : "b:Transpose(n:fusectl::LayerNorm(a:Transpose($x), $scale))";
  // Both forms anchor on the Transpose back (applyForms takes the first form's anchors).
  Pattern p = Pattern::parse(text, formName(op));
  p.producing({"fusectl::ChannelLayerNorm"});
  p.require(transposesAroundChannels()).require(normOverChannels());
  p.require(uniqueConsumer("a")).require(uniqueConsumer("n"));
  p.require(dtypeIn({"a", "n", "b"}, fusibleFloatTypes()));
  return p;
}

class FuseChannelLayerNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseChannelLayerNormPassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (NormOp op : kForms) out.push_back(buildPattern(op));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    return applyForms(graph, ctx, patterns(), kForms, fuse);
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& pattern, NormOp, const Match& m) {
    Node* n = m.get("n");
    Node* b = m.get("b");
    Value* x = m.value("x");
    Value* bias = n->input(2);
    if (!bias) {
      bias = rw.addConstant(b->output(0)->name() + "_bias",
                            filledTensor(x->dtype(), {x->shape()[1].value()}, 0.f));
    }
    NewNode node;
    node.op_type = "ChannelLayerNorm";
    node.domain = "fusectl";
    node.inputs = {x, n->input(1), bias};
    node.attributes = {Attribute::ofFloat("epsilon", n->attrFloat("epsilon", 1e-5f))};
    node.name = n->name();
    rw.replaceMatch(pattern.name, m, b->output(0), std::move(node));
    rw.context().count("fused_channel_layer_norm");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseChannelLayerNormPass() {
  return std::make_unique<FuseChannelLayerNormPass>();
}

}  // namespace fusectl::passes
