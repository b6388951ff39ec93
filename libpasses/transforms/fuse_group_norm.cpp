// fuse-group-norm: recognise PyTorch's GroupNorm as its ONNX exporter writes it (opset 9-17)
// and replace the chain by one fusectl::GroupNorm.
//
//   r = Reshape(x, [N, G, -1])
//   n = InstanceNormalization(r, s_g, b_g, epsilon)          (torch: s_g ones, b_g zeros)
//   u = Reshape(n, x's shape)
//   y = Add(Mul(u, w), beta)        =>   y = fusectl::GroupNorm(x, Scale, B, num_groups = G, epsilon)
// i.e. each sample's channels in G groups, every group normalised over its channels and all
// positions, then a per-channel affine. The per-group s_g, b_g and the per-channel w, beta fold
// into one per-channel Scale = w * s_g and B = w * b_g + beta (computed in double). The affine tail
// is optional (GroupNorm(affine=False): Scale = s_g, B = b_g per channel), as is its bias.
// The fused kernel writes the normalised and scaled group in one pass while the group is in
// cache; the chain reads and writes the whole tensor a second time for the affine (ConvTasNet:
// 49 norms of 2 MiB).
//
// Conditions, each failure reported with its reason:
//  1. x is [N, C, ...] of rank >= 3 with C and the spatial dims static (N may be symbolic); the
//     first Reshape's output is [N, G, C / G * spatial] with G static and dividing C (so a
//     group is G-th of the channels, contiguous in memory), the second Reshape's output has x's
//     shape.
//  2. The InstanceNormalization's scale and bias are constants of G values.
//  3. w and beta are constants of x's dtype holding one value or one per channel (shape [C, 1,
//     ..., 1] or right-aligned broadcasts of it), so the output keeps x's shape.
//  4. Every intermediate is read only inside the chain and is no graph output.
//  5. The chain computes in one fusible float dtype.
//  6. The model's opset is at least 12: GroupNorm's function body reads num_groups through
//     Constant's value_int, which opset 12 introduced.
#include <fmt/format.h>

#include <cmath>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "norm_patterns.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

enum class Affine { ScaleAndBias, Scale, None };

struct Form {
  Affine affine;
};

// Most complete first: applyPatterns rewrites the first form that matches.
constexpr Form kForms[] = {{Affine::ScaleAndBias}, {Affine::Scale}, {Affine::None}};

std::string formName(const Form& f) {
  return f.affine == Affine::ScaleAndBias ? "group-norm"
         : f.affine == Affine::Scale      ? "group-norm-no-bias"
                                          : "group-norm-no-affine";
}

const char* lastCapture(Affine a) {
  return a == Affine::ScaleAndBias ? "b" : a == Affine::Scale ? "g" : "u";
}

// The group count G of a chain whose first Reshape `r` regroups x, when condition 1 holds.
std::optional<int64_t> groupCount(const Match& m, Why& why) {
  const Value* x = m.value("x");
  const Node* r = m.get("r");
  const Shape& xs = x->shape();
  // Reasons are formatted only when someone listens (Why), as the other constraints do.
  if (!xs.hasRank() || xs.rank() < 3) {
    why.fail(*r, [&] {
      return fmt::format("the input '{}' has shape {}: not [N, C, ...] of rank >= 3", x->name(),
                         xs.str());
    });
    return std::nullopt;
  }
  for (size_t i = 1; i < xs.rank(); ++i) {
    if (!xs[i].isStatic()) {
      why.fail(*r, [&] {
        return fmt::format("the input '{}' has shape {}: its channel and spatial dims must be "
                           "static",
                           x->name(), xs.str());
      });
      return std::nullopt;
    }
  }
  const int64_t channels = xs[1].value();
  int64_t spatial = 1;
  for (size_t i = 2; i < xs.rank(); ++i) spatial *= xs[i].value();
  const Shape& rs = r->output(0)->shape();
  const bool grouped = rs.hasRank() && rs.rank() == 3 && rs[0].provablyEqual(xs[0]) &&
                       rs[1].isStatic() && rs[2].isStatic() && rs[1].value() > 0 &&
                       channels % rs[1].value() == 0 &&
                       rs[2].value() == channels / rs[1].value() * spatial;
  if (!grouped) {
    why.fail(*r, [&] {
      return fmt::format("{} reshapes {} to {}: not [N, G, C / G * spatial] with G dividing the "
                         "{} channels",
                         r->label(), xs.str(), rs.str(), channels);
    });
    return std::nullopt;
  }
  return rs[1].value();
}

Constraint regroupsChannels() {
  return {"regroups-channels", [](const Match& m, Why& why) {
            if (!groupCount(m, why)) return false;
            const Node* u = m.get("u");
            if (dimsProvablyEqual(u->output(0)->shape(), m.value("x")->shape())) return true;
            return why.fail(*u, [&] {
              return fmt::format("{} gives {}, not the input's shape {}", u->label(),
                                 u->output(0)->shape().str(), m.value("x")->shape().str());
            });
          }};
}

Constraint groupParameters() {
  return {"group-parameters", [](const Match& m, Why& why) {
            Why quiet(false);
            const std::optional<int64_t> groups = groupCount(m, quiet);
            if (!groups) return why.fail(*m.get("n"), "the group count is unknown");
            for (const char* leaf : {"gs", "gb"}) {
              const Value* p = m.value(leaf);
              if (!p->isConstant() || p->initializer()->numel() != *groups) {
                return why.fail(*m.get("n"), [&] {
                  return fmt::format("{}'s {} '{}' is not a constant of {} values (one per group)",
                                     m.get("n")->label(), leaf == std::string("gs") ? "scale" : "bias",
                                     p->name(), *groups);
                });
              }
            }
            return true;
          }};
}

// Leaf `leaf`, read by node `reader`, holds one value or one per channel of x.
Constraint channelParameter(std::string leaf, std::string reader, std::string role) {
  return {"channel-parameter:" + role, [=](const Match& m, Why& why) {
            const Value* p = m.value(leaf);
            const Node* n = m.get(reader);
            const Value* x = m.value("x");
            if (!p->isConstant() || p->dtype() != x->dtype()) {
              return why.fail(*n, [&] {
                return fmt::format("{} '{}' of {} is not a constant of the input's dtype {}", role,
                                   p->name(), n->label(), dtypeName(x->dtype()));
              });
            }
            const std::vector<int64_t>& d = p->initializer()->dims();
            const size_t rank = x->shape().rank();
            bool ok = d.size() <= rank;
            for (size_t i = 0; ok && i < d.size(); ++i) {
              const size_t axis = rank - d.size() + i;
              ok = d[i] == 1 || (axis == 1 && d[i] == x->shape()[1].value());
            }
            if (ok) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} '{}' has shape {}: not one value per channel of {}", role,
                                 p->name(), Shape::ofStatic(d).str(), x->shape().str());
            });
          }};
}

Pattern buildPattern(const Form& f, int64_t opset) {
  using namespace constraints;
  std::string text = "u:Reshape(^n:InstanceNormalization(r:Reshape($x, $rs), $gs, $gb), $us)";
  if (f.affine != Affine::None) text = "g:Mul(" + text + ", $scale)";
  if (f.affine == Affine::ScaleAndBias) text = "b:Add(" + text + ", $bias)";
  Pattern p = Pattern::parse(text, formName(f));
  p.producing({"fusectl::GroupNorm"});
  std::vector<std::string> nodes = {"r", "n", "u"};
  if (f.affine != Affine::None) nodes.push_back("g");
  if (f.affine == Affine::ScaleAndBias) nodes.push_back("b");
  p.require(floatChain(nodes)).require(regroupsChannels()).require(groupParameters());
  if (f.affine != Affine::None) p.require(channelParameter("scale", "g", "scale"));
  if (f.affine == Affine::ScaleAndBias) p.require(channelParameter("bias", "b", "bias"));
  p.require(opsetAtLeast("n", opset, 12, "GroupNorm's function body needs 12 (Constant value_int)"));
  for (const std::string& c : nodes)
    if (c != lastCapture(f.affine)) p.require(uniqueConsumer(c));
  return p;
}

class FuseGroupNormPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseGroupNormPassInfo; }

  // For the catalog and `match`, which have no model opset: the patterns as they are from 12.
  std::vector<Pattern> patterns() const override { return build(12); }

  bool run(const Graph& graph, PassContext& ctx) override {
    return applyForms(graph, ctx, build(ctx.opset()), kForms, fuse);
  }

 private:
  static std::vector<Pattern> build(int64_t opset) {
    std::vector<Pattern> out;
    for (const Form& f : kForms) out.push_back(buildPattern(f, opset));
    return out;
  }

  static void fuse(Rewriter& rw, const Pattern& pattern, const Form& f, const Match& m) {
    Value* x = m.value("x");
    Why checked(false);  // regroupsChannels held
    const int64_t groups = *groupCount(m, checked);
    const int64_t channels = x->shape()[1].value(), per_group = channels / groups;
    const Tensor& gs = *m.value("gs")->initializer();
    const Tensor& gb = *m.value("gb")->initializer();
    // One value or one per channel (channelParameter held): the value at channel c.
    auto at = [&](const char* leaf, int64_t c, double absent) {
      if (!leaf) return absent;
      const Tensor& t = *m.value(leaf)->initializer();
      return t.valueAsDouble(t.numel() == 1 ? 0 : c);
    };
    const char* w = f.affine != Affine::None ? "scale" : nullptr;
    const char* beta = f.affine == Affine::ScaleAndBias ? "bias" : nullptr;
    std::vector<double> scale(static_cast<size_t>(channels)), bias(scale.size());
    for (int64_t c = 0; c < channels; ++c) {
      const double wc = at(w, c, 1.0);
      scale[static_cast<size_t>(c)] = wc * gs.valueAsDouble(c / per_group);
      bias[static_cast<size_t>(c)] = wc * gb.valueAsDouble(c / per_group) + at(beta, c, 0.0);
    }
    Node* last = m.get(lastCapture(f.affine));
    const std::string base = last->output(0)->name();
    NewNode node;
    node.op_type = "GroupNorm";
    node.domain = "fusectl";
    node.inputs = {x,
                   rw.addConstant(base + "_scale", tensorFromDoubles(x->dtype(), {channels}, scale)),
                   rw.addConstant(base + "_bias", tensorFromDoubles(x->dtype(), {channels}, bias))};
    node.attributes = {Attribute::ofInt("num_groups", groups),
                       Attribute::ofFloat("epsilon", m.get("n")->attrFloat("epsilon", 1e-5f))};
    node.name = last->name();
    rw.replaceMatch(pattern.name, m, last->output(0), std::move(node));
    rw.context().count("fused_group_norm");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseGroupNormPass() { return std::make_unique<FuseGroupNormPass>(); }

}  // namespace fusectl::passes
