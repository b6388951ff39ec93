// fold-conv-bn: fold an inference BatchNormalization into the Conv/ConvTranspose before it.
//
//   x -> Conv(W [, B]) -> c -> BatchNormalization(gamma, beta, mean, var) -> y
//   =>  x -> Conv(W', B') -> y
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The BN is in inference form: one output, training_mode=0 (before opset 7: is_test=1).
//  2. The Conv output c is read by the BN only and is not a graph output.
//  3. W, B (when present) and the four BN parameters are constants (initializers that are not
//     graph inputs).
//  4. W is float, double, float16 or bfloat16 with rank >= 3 and a group that divides its
//     channels; B, when present, has W's dtype and shape [C_out].
//  5. The BN parameters are foldable floats of shape [C_out] (spatial=1).
//
// Math, per output channel o (computed in double, stored once in W's dtype; W' when it is first
// read, see ScaledWeights):
//   s[o] = gamma[o] / sqrt(var[o] + epsilon)
//   W'[o-slice] = W[o-slice] * s[o]
//   B'[o] = (B[o] - mean[o]) * s[o] + beta[o]      (B = 0 when the Conv has none)
// Conv's W is [C_out, C_in/group, k...]: output channel o is dim 0. ConvTranspose's W is
// [C_in, C_out/group, k...]: element (i, j, ...) feeds output channel g*(C_out/group) + j where
// g = i / (C_in/group) is the group of input channel i.
// The Conv is rewritten in place: it keeps its name and position and takes over y (and y's
// name). W' and B' replace the data of W and B, under their names, when this Conv is their only
// reader (the common case, and on a 1M-node graph half the cost of a fold was creating new
// values, names and a new node); a W or B that another node also reads (or that is a graph
// input or output) stays as it is, and W' / B' become new initializers named after the Conv
// (<conv>_W_folded, <conv>_B_folded), as does B' for a Conv without bias.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "constant_math.h"
#include "fusectl/graph/error.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// Output channels of a Conv/ConvTranspose from its constant weight; -1 (and `why`, about the
// Conv) when W's shape or the group does not allow folding.
int64_t outputChannels(const Node& conv, Why& why) {
  const Tensor& w = *conv.input(1)->initializer();
  const std::vector<int64_t>& d = w.dims();
  auto fail = [&](auto reason) {
    why.fail(conv, reason);
    return int64_t{-1};
  };
  if (d.size() < 3) {
    return fail([&] {
      return fmt::format("{} weight '{}' has rank {}, expected >= 3", conv.label(),
                         conv.input(1)->name(), d.size());
    });
  }
  const int64_t group = conv.attrInt("group", 1);
  if (group <= 0) return fail([&] { return fmt::format("{} has group={}", conv.label(), group); });
  // Conv's W is [C_out, ...], ConvTranspose's [C_in, ...]: either way dim 0 splits into groups.
  if (d[0] % group != 0) {
    return fail([&] {
      return fmt::format("{} group={} does not divide the weight's {} {} channels", conv.label(),
                         group, d[0], conv.is("Conv") ? "output" : "input");
    });
  }
  return conv.is("Conv") ? d[0] : d[1] * group;
}

Constraint foldableWeights() {
  return {"foldable-weights:conv", [](const Match& m, Why& why) {
            Node* conv = m.get("conv");
            Value* w = conv->input(1);
            if (!isFoldableFloat(w->dtype())) {
              return why.fail(*conv, [&] {
                return fmt::format(
                    "{} weight '{}' is {}, expected float, double, float16 or "
                    "bfloat16",
                    conv->label(), w->name(), dtypeName(w->dtype()));
              });
            }
            int64_t channels = outputChannels(*conv, why);
            if (channels < 0) return false;
            if (Value* b = conv->input(2)) {
              const Tensor& t = *b->initializer();
              if (t.dtype() != w->dtype()) {
                return why.fail(*conv, [&] {
                  return fmt::format("{} bias '{}' is {} but its weight is {}", conv->label(),
                                     b->name(), dtypeName(t.dtype()), dtypeName(w->dtype()));
                });
              }
              if (t.dims() != std::vector<int64_t>{channels}) {
                return why.fail(*conv, [&] {
                  return fmt::format("{} bias '{}' has shape [{}], expected [{}]", conv->label(),
                                     b->name(), fmt::join(t.dims(), ","), channels);
                });
              }
            }
            Node* bn = m.get("bn");
            Value* y = bn->output(0);
            if (y->dtype() == DType::Undefined || y->dtype() == w->dtype()) return true;
            return why.fail(*bn, [&] {
              return fmt::format("{} output '{}' is {} but the weight is {}", bn->label(),
                                 y->name(), dtypeName(y->dtype()), dtypeName(w->dtype()));
            });
          }};
}

Constraint batchNormPerChannel() {
  return {"batchnorm-params:bn", [](const Match& m, Why& why) {
            int64_t channels = outputChannels(*m.get("conv"), why);
            if (channels < 0) return false;
            return batchNormAffine(*m.get("bn"), channels, nullptr, why);
          }};
}

// W' = W * s per output channel, in double. Conv's W is [C_out, C_in/group, k...];
// ConvTranspose's is [C_in, C_out/group, k...].
std::vector<double> scaledWeights(const Tensor& w, bool transposed, int64_t group,
                                  const std::vector<double>& scale) {
  std::vector<double> v = constantAsDoubles(w);
  const std::vector<int64_t>& d = w.dims();
  int64_t taps = 1;
  for (size_t i = 2; i < d.size(); ++i) taps *= d[i];
  if (!transposed) {
    const int64_t per_channel = d[1] * taps;
    for (size_t i = 0; i < v.size(); ++i)
      v[i] *= scale[static_cast<size_t>(static_cast<int64_t>(i) / per_channel)];
    return v;
  }
  const int64_t in_per_group = d[0] / group, out_per_group = d[1];
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t flat = static_cast<int64_t>(i);
    const int64_t in_channel = flat / (out_per_group * taps);
    const int64_t j = (flat / taps) % out_per_group;
    const int64_t o = (in_channel / in_per_group) * out_per_group + j;
    v[i] *= scale[static_cast<size_t>(o)];
  }
  return v;
}

// W' computed when it is read, usually by the writer streaming it to the file: the folded
// weights are most of a model's bytes, and as new buffers they would all be fresh memory held
// from the fold to the save (Buffer::deferred). The bytes are those the fold computed eagerly
// before: the same arithmetic, rounded once by storeDoubles.
class ScaledWeights : public ByteRecipe {
 public:
  ScaledWeights(Tensor w, bool transposed, int64_t group, std::vector<double> scale)
      : w_(std::move(w)), transposed_(transposed), group_(group), scale_(std::move(scale)) {}

  void produce(uint8_t* dst, size_t size) const override {
    if (!transposed_ && w_.dtype() == DType::Float && size == w_.byteSize()) {
      produceFloatConv(dst);
      return;
    }
    std::vector<double> v = scaledWeights(w_, transposed_, group_, scale_);
    if (size != dtypeStorageBytes(w_.dtype(), static_cast<int64_t>(v.size())))
      throwInternal(fmt::format("folded weight needs {} bytes, asked for {}",
                                dtypeStorageBytes(w_.dtype(), static_cast<int64_t>(v.size())),
                                size));
    storeDoubles(w_.dtype(), v.data(), v.size(), dst);
  }

  std::vector<const Buffer*> sources() const override { return {&w_.buffer()}; }

  // The common case without the double buffer and the index division per element; the same
  // operations as scaledWeights + storeDoubles (float -> double, times the double scale,
  // rounded to float once), so the same bits.
  void produceFloatConv(uint8_t* dst) const {
    const uint8_t* w = w_.bytes();  // raw_data inside a mapped file: not float-aligned
    const size_t channels = scale_.size();
    const size_t per_channel = channels ? static_cast<size_t>(w_.numel()) / channels : 0;
    float in[256], out[256];
    for (size_t o = 0; o < channels; ++o) {
      const double s = scale_[o];
      for (size_t k = 0; k < per_channel; k += 256) {
        const size_t n = std::min<size_t>(256, per_channel - k);
        const size_t offset = (o * per_channel + k) * sizeof(float);
        std::memcpy(in, w + offset, n * sizeof(float));
        for (size_t e = 0; e < n; ++e) out[e] = static_cast<float>(static_cast<double>(in[e]) * s);
        std::memcpy(dst + offset, out, n * sizeof(float));
      }
    }
  }

  static Tensor of(const Node& conv, std::vector<double> scale) {
    const Tensor& w = *conv.input(1)->initializer();
    const size_t size = w.byteSize();
    auto recipe = std::make_shared<ScaledWeights>(w, !conv.is("Conv"), conv.attrInt("group", 1),
                                                  std::move(scale));
    return Tensor(w.dtype(), w.dims(), Buffer::deferred(size, std::move(recipe)));
  }

 private:
  Tensor w_;  // shares W's bytes
  bool transposed_;
  int64_t group_;
  std::vector<double> scale_;
};

class FoldConvBatchNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FoldConvBatchNormPassInfo; }

  std::vector<Pattern> patterns() const override { return {build(0)}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    Pattern p = build(ctx.opset());
    return applyPattern(graph, ctx, p, [&](Rewriter& rw, const Match& m) {
             fold(rw, m);
             ctx.count("folded");
             return true;
           }) > 0;
  }

 private:
  static Pattern build(int64_t opset) {
    using namespace constraints;
    Pattern p = Pattern::parse("conv:Conv|ConvTranspose -> 0:^bn:BatchNormalization", "conv-bn");
    p.require(batchNormInference("bn"))
        .require(batchNormTestMode("bn", opset))
        .require(uniqueConsumer("conv"))
        .require(constantInput("conv", 1))
        .require(constantIfPresent("conv", 2, "bias"))
        .require(constantInput("bn", 1))
        .require(constantInput("bn", 2))
        .require(constantInput("bn", 3))
        .require(constantInput("bn", 4))
        .require(foldableWeights())
        .require(batchNormPerChannel());
    return p;
  }

  static void fold(Rewriter& rw, const Match& m) {
    Node* conv = m.get("conv");
    Node* bn = m.get("bn");
    Why checked(false);  // foldableWeights and batchNormPerChannel held
    const int64_t channels = outputChannels(*conv, checked);
    ChannelAffine bnmap;
    batchNormAffine(*bn, channels, &bnmap, checked);

    Value* b = conv->input(2);
    const DType dtype = conv->input(1)->dtype();
    std::vector<double> bias(static_cast<size_t>(channels), 0.0);
    if (b) bias = constantAsDoubles(*b->initializer());
    for (size_t o = 0; o < bias.size(); ++o) bias[o] = bias[o] * bnmap.scale[o] + bnmap.shift[o];
    Tensor folded_w = ScaledWeights::of(*conv, std::move(bnmap.scale));
    Tensor folded_b = tensorFromDoubles(dtype, {channels}, bias);

    const std::string base = conv->name().empty() ? conv->output(0)->name() : conv->name();
    rw.setConstantInput(conv, 1, std::move(folded_w), base + "_W_folded");
    rw.setConstantInput(conv, 2, std::move(folded_b), base + "_B_folded");
    rw.replaceMatchInPlace("conv-bn", m, bn->output(0), conv);
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldConvBatchNormPass() {
  return std::make_unique<FoldConvBatchNormPass>();
}

}  // namespace fusectl::passes
