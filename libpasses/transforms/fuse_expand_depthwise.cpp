// fuse-expand-depthwise: an inverted-residual block's 1x1 expansion and the depthwise
// convolution that reads it, as one fusectl::ExpandDepthwiseConv whose kernel computes the
// expansion band by band into a buffer that stays in L2, so that the expanded tensor (4.8 MB for
// MobileNetV2's 96 channels at 112x112) is never written to memory and read back.
//
//   X -> Conv 1x1 (+act) -> E -> Conv depthwise kxk (+act) -> Y
//     =>  X, W, B, DW, DB -> ExpandDepthwiseConv <group, kernel_shape, pads, strides,
//                                                 expand_activation, activation> -> Y
//
// Either Conv may be a plain Conv or a FusedConv without a residual (fuse-epilogue, which runs
// first, has taken each one's activation into it; a model saved after -O3 by an older fusectl
// has its FusedConv_Clip... read back as FusedConv before the passes, unspellFusectlNodes).
// Candidates are the grouped convolutions. Form matched, once per pair of op types (a pattern
// node has one domain):
//   expand-depthwise   e:Conv|fusectl::FusedConv -> 0:^d:(the same)
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. E is read by the depthwise Conv only, as its data input, and is no graph output.
//  2. Both are float32 (the kernel's only type).
//  3. e is a 2-D 1x1 convolution that keeps the plane: W is [E, C, 1, 1], one group, strides
//     and dilations 1, no padding; no residual.
//  4. d is a depthwise 2-D convolution of E: group = E, DW is [E, 1, kh, kw], undilated,
//     explicit pads (auto_pad NOTSET); no residual.
//  5. Both filters and both biases (where present) are constants: the kernel packs the
//     expansion's filters once per session; each bias is a vector of E.
//  6. The window is 3x3 and the expanded tensor of one image is at least min-expanded-bytes
//     (2 MiB, the L2 of one of this machine's cores, unless the pipeline says otherwise): where
//     the band schedule was measured to pay. bench_expand_depthwise (bench/README.md, "The
//     expansion fused into its depthwise convolution, measured cold") found the bands losing on
//     5x5 windows and 28x28 planes both ways. In MobileNetV2 itself (bench/README.md, "The
//     expansion fused into its depthwise convolution, built"), per node against the two
//     FusedConvs: the 16 -> 96 block at 112x112 (4.6 MiB expanded) 0.726 -> 0.610 ms when the
//     runs follow each other and 1.028 -> 0.653 alternated with the unfused model; the 24 -> 144
//     blocks at 56x56 (1.7 MiB, which L2 keeps between the two nodes) 0.401 -> 0.448 (stride 1)
//     and 0.269 -> 0.305 (stride 2) warm, 0.504 -> 0.521 and 0.279 -> 0.378 alternated.
// A missing bias becomes a constant of zeros: the op's function body takes every input.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "constant_math.h"
#include "expand_depthwise_legality.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/passes/registry.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// The window sizes the band schedule was measured to pay on (condition 6).
constexpr int64_t kMeasuredWindow = 3;

uint64_t minExpandedBytes(const PassContext& ctx) {
  const std::string value =
      optionOrDefault(ctx, FuseExpandDepthwisePassInfo.name, "min-expanded-bytes");
  checkPassOption(FuseExpandDepthwisePassInfo.name, "min-expanded-bytes", value);
  return std::stoull(value);
}

bool isConst(const Value* v) { return v && v->isConstant(); }

// The dims of `v` where its shape is static, or nullopt.
std::optional<std::vector<int64_t>> staticDims(const Value* v) {
  if (!v || !v->shape().isStatic()) return std::nullopt;
  return v->shape().staticDims();
}

bool allEqual(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}

bool hasResidual(const Node& n) { return n.numInputs() > 3 && n.input(3); }

// Condition 3.
bool expansionLegal(const Node& e, Why& why) {
  const std::optional<std::vector<int64_t>> w = staticDims(e.input(1));
  const bool pointwise = w && w->size() == 4 && (*w)[2] == 1 && (*w)[3] == 1;
  const std::vector<int64_t> pads = e.attrInts("pads");
  const std::string auto_pad = e.attrString("auto_pad", "NOTSET");
  if (!pointwise || e.attrInt("group", 1) != 1 || !allEqual(e.attrInts("strides"), 1) ||
      !allEqual(e.attrInts("dilations"), 1) || !allEqual(pads, 0) ||
      (auto_pad != "NOTSET" && auto_pad != "VALID")) {
    return why.fail(e, [&] {
      return fmt::format("{} is not a 2-D 1x1 convolution that keeps the plane (filters {}, "
                         "one group, strides and dilations 1, no padding)",
                         e.label(), e.input(1)->shape().str());
    });
  }
  if (hasResidual(e)) {
    return why.fail(e, [&] {
      return fmt::format("{} adds a residual, which the fused op has no input for", e.label());
    });
  }
  return true;
}

// Condition 4.
bool depthwiseLegal(const Node& d, int64_t expanded, Why& why) {
  const std::optional<std::vector<int64_t>> w = staticDims(d.input(1));
  const bool depthwise = w && w->size() == 4 && (*w)[0] == expanded && (*w)[1] == 1 &&
                         d.attrInt("group", 1) == expanded;
  if (!depthwise || !allEqual(d.attrInts("dilations"), 1) ||
      d.attrString("auto_pad", "NOTSET") != "NOTSET") {
    return why.fail(d, [&] {
      return fmt::format("{} is not an undilated depthwise 2-D convolution of the {} expanded "
                         "channels with explicit pads (group {}, filters {}, auto_pad {})",
                         d.label(), expanded, d.attrInt("group", 1), d.input(1)->shape().str(),
                         d.attrString("auto_pad", "NOTSET"));
    });
  }
  if (hasResidual(d)) {
    return why.fail(d, [&] {
      return fmt::format("{} adds a residual, which the fused op has no input for", d.label());
    });
  }
  return true;
}

}  // namespace

Constraint expandDepthwisePair(uint64_t min_bytes, uint64_t below_bytes) {
  return {"expand-depthwise", [min_bytes, below_bytes](const Match& m, Why& why) {
            Node* e = m.get("e");
            Node* d = m.get("d");
            const Value* expanded = e->output(0);
            // 1.
            if (d->input(0) != expanded || expanded->uses().size() != 1 ||
                expanded->isGraphOutput()) {
              return why.fail(*e, [&] {
                return fmt::format("{} output '{}' is read elsewhere too, or not as {} data "
                                   "input",
                                   e->label(), expanded->name(), d->label());
              });
            }
            // 2. (An intermediate a FusedConv in hand-written text left untyped is read
            // through its producer's input.)
            for (const Node* n : {e, d}) {
              for (const Value* v : {n->input(0), n->input(1), n->output(0)}) {
                if (v->dtype() == DType::Float || (v != e->input(0) && v->dtype() == DType::Undefined))
                  continue;
                return why.fail(*n, [&] {
                  return fmt::format("{} '{}' is {}; the fused kernel takes float32 only",
                                     n->label(), v->name(), dtypeName(v->dtype()));
                });
              }
            }
            // 3-4.
            if (!expansionLegal(*e, why)) return false;
            const int64_t channels = staticDims(e->input(1))->at(0);
            if (!depthwiseLegal(*d, channels, why)) return false;
            // 5.
            for (const Node* n : {e, d}) {
              const Value* bias = n->numInputs() > 2 ? n->input(2) : nullptr;
              if (!isConst(n->input(1)) || (bias && !isConst(bias))) {
                return why.fail(*n, [&] {
                  return fmt::format("{} filters or bias are not constants", n->label());
                });
              }
              // The fused kernel reads a [E] bias; the Conv kernel also takes [E, 1].
              const std::optional<std::vector<int64_t>> b = bias ? staticDims(bias) : std::nullopt;
              if (bias && !(b && b->size() == 1 && b->at(0) == channels)) {
                return why.fail(*n, [&] {
                  return fmt::format("{} bias '{}' is {}, not [{}]", n->label(), bias->name(),
                                     bias->shape().str(), channels);
                });
              }
            }
            // 6.
            const std::vector<int64_t> window = {staticDims(d->input(1))->at(2),
                                                 staticDims(d->input(1))->at(3)};
            if (window[0] != kMeasuredWindow || window[1] != kMeasuredWindow) {
              return why.fail(*d, [&] {
                return fmt::format("{} window is {}x{}; the band schedule was measured to pay "
                                   "on 3x3 windows only (5x5 lost, bench/README.md)",
                                   d->label(), window[0], window[1]);
              });
            }
            // The expanded plane is X's (1x1, stride 1, unpadded), so X's shape sizes it where
            // the intermediate itself is untyped.
            // Per image: a symbolic batch (a dynamic-batch export) sizes nothing here.
            const Shape& xs = e->input(0)->shape();
            const bool sized = xs.hasRank() && xs.rank() == 4 && xs[2].isStatic() &&
                               xs[3].isStatic();
            const std::vector<int64_t> plane =
                sized ? std::vector<int64_t>{xs[2].value(), xs[3].value()}
                      : std::vector<int64_t>{0, 0};
            const uint64_t bytes = uint64_t(4) * channels * plane[0] * plane[1];
            if (bytes < min_bytes) {
              return why.fail(*e, [&] {
                if (!sized) {
                  return fmt::format("{} input '{}' has no static 2-D plane to size the "
                                     "expanded tensor by",
                                     e->label(), e->input(0)->name());
                }
                return fmt::format("{} output '{}' ({} channels of {}x{}) is {} bytes an image, "
                                   "under min-expanded-bytes={} (it stays in L2 between two "
                                   "nodes)",
                                   e->label(), expanded->name(), channels, plane[0], plane[1],
                                   bytes, min_bytes);
              });
            }
            if (bytes >= below_bytes) {
              return why.fail(*e, [&] {
                return fmt::format("{} output '{}' is {} bytes an image, at least {}: "
                                   "fuse-expand-depthwise takes it",
                                   e->label(), expanded->name(), bytes, below_bytes);
              });
            }
            return true;
          }};
}

uint64_t defaultMinExpandedBytes() {
  for (const PassOption& o : passOptions(FuseExpandDepthwisePassInfo.name))
    if (o.name == "min-expanded-bytes") return std::stoull(std::string(o.default_value));
  throwInternal("fuse-expand-depthwise declares no min-expanded-bytes");
}

namespace {

// One pattern per pair of op types: a pattern node has one domain.
std::vector<Pattern> build(uint64_t min_bytes) {
  std::vector<Pattern> out;
  for (const char* d : {"Conv", "fusectl::FusedConv"}) {
    for (const char* e : {"Conv", "fusectl::FusedConv"}) {
      out.push_back(Pattern::parse(fmt::format("e:{} -> 0:^d:{}", e, d), "expand-depthwise"));
      out.back().require(expandDepthwisePair(min_bytes, UINT64_MAX));
      out.back().producing({"ExpandDepthwiseConv"});
    }
  }
  return out;
}

// The activation of a Conv (none) or FusedConv, with its parameters, as the fused op's
// attributes `<prefix>activation` and `<prefix>activation_params`.
void copyActivation(const Node& n, const std::string& prefix, std::vector<Attribute>& out) {
  const std::string act = n.attrString("activation", "");
  out.push_back(Attribute::ofString(prefix + "activation", act.empty() ? "None" : act));
  if (n.hasAttr("activation_params"))
    out.push_back(Attribute::ofFloats(prefix + "activation_params", n.attrFloats("activation_params")));
}

class FuseExpandDepthwisePass : public Pass {
 public:
  const PassInfo& info() const override { return FuseExpandDepthwisePassInfo; }

  std::vector<Pattern> patterns() const override { return build(defaultMinExpandedBytes()); }

  bool run(const Graph& graph, PassContext& ctx) override {
    // Only failed conditions are rejections, and only where the second convolution is grouped:
    // a dense Conv after a Conv (ResNet's 1x1 -> 3x3, a squeeze-excitation's two 1x1) is no
    // near miss of this.
    DriverOptions driver;
    driver.report_structural = false;
    driver.candidate = [](const Node& d) { return d.attrInt("group", 1) > 1; };
    size_t fused = 0;
    for (const Pattern& pattern : build(minExpandedBytes(ctx)))
      fused += applyPattern(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
             Node* e = m.get("e");
             Node* d = m.get("d");
             const int64_t channels = e->input(1)->shape()[0].value();
             auto biasOf = [&](const Node& n, const std::string& hint) -> Value* {
               if (n.numInputs() > 2 && n.input(2)) return n.input(2);
               return rw.addConstant(hint, Tensor::fromValues(DType::Float, {channels},
                                                              std::vector<float>(channels, 0.f)));
             };
             NewNode node;
             node.op_type = "ExpandDepthwiseConv";
             node.domain = "fusectl";
             node.name = d->name();
             node.inputs = {e->input(0), e->input(1), biasOf(*e, e->input(1)->name() + "_bias"),
                            d->input(1), biasOf(*d, d->input(1)->name() + "_bias")};
             const Shape& dw = d->input(1)->shape();
             std::vector<int64_t> pads = d->attrInts("pads");
             if (pads.empty()) pads.assign(4, 0);
             std::vector<int64_t> strides = d->attrInts("strides");
             if (strides.empty()) strides.assign(2, 1);
             node.attributes = {Attribute::ofInt("group", channels),
                                Attribute::ofInts("kernel_shape", {dw[2].value(), dw[3].value()}),
                                Attribute::ofInts("pads", pads),
                                Attribute::ofInts("strides", strides)};
             copyActivation(*e, "expand_", node.attributes);
             copyActivation(*d, "", node.attributes);
             rw.replaceMatch(pattern.name, m, d->output(0), std::move(node));
             ctx.count("fused_expand_depthwise");
             return true;
           }, driver);
    return fused > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseExpandDepthwisePass() {
  return std::make_unique<FuseExpandDepthwisePass>();
}

}  // namespace fusectl::passes
