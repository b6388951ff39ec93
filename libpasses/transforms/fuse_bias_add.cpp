// fuse-bias-add: absorb an Add of a constant bias into the Conv/ConvTranspose/Gemm before it.
//
//   x -> Conv(W [, B]) -> c -> Add(c, k) -> y    =>  x -> Conv(W, B') -> y,  B'[o] = B[o] + k[o]
//   a -> Gemm(A, B [, C]) -> g -> Add(g, k) -> y =>  Gemm(A, B, C'),  C' = beta*C + k, beta = 1
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The Conv/Gemm output is read by the Add only and is not a graph output.
//  2. The Add's other operand k is a constant (initializer that is not a graph input).
//  3. The Conv's existing bias B (Gemm's C), when present, is a constant.
//  4. k, B/C and the Conv/Gemm output share one dtype: float, double, float16 or bfloat16.
//  5. Adding k does not change the output's shape:
//     Conv (output rank r, C_out channels from W's static shape): k has rank <= r and every
//       dim 1 except, optionally, the channel dim (axis 1 counted from the left of the output)
//       equal to C_out: [C_out,1,1], [1,C_out,1,1], a scalar... (a k with all dims 1 is a
//       scalar bias, the same value for every channel);
//     Gemm (output [M, N]): k has rank <= 2 and each dim 1 or equal to the output's, as Gemm's
//       unidirectional broadcast of C requires ([N], [1,N], [M,N], [M,1], a scalar).
//
// The sums are computed in double and stored once in the output dtype (float16 bias values
// round once, where the unfused graph rounded after the Conv and again after the Add).
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

std::string dimsText(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ","));
}

Constraint constantAddend(const std::string& producer) {
  return {"constant-addend:add", [producer](const Match& m, Why& why) {
            Node* add = m.get("add");
            Value* k = otherOperand(*add, m.get(producer)->output(0));
            if (!k) {
              return why.fail(*add, [&] {
                return fmt::format("{} adds {} output to itself", add->label(),
                                   m.get(producer)->label());
              });
            }
            if (k->isConstant()) return true;
            return why.fail(*add, [&] {
              return fmt::format("{} operand '{}' is not a constant ({})", add->label(), k->name(),
                                 nonConstantOrigin(*k));
            });
          }};
}

Constraint sameDType(const std::string& producer, size_t bias_input) {
  return {"dtype:" + producer + ",add", [producer, bias_input](const Match& m, Why& why) {
            Node* p = m.get(producer);
            Node* add = m.get("add");
            Value* out = p->output(0);
            const Tensor& k = *otherOperand(*add, out)->initializer();
            DType t = out->dtype() != DType::Undefined ? out->dtype() : p->input(0)->dtype();
            if (!isFoldableFloat(t)) {
              return why.fail(*p, [&] {
                return fmt::format(
                    "{} output '{}' is {}, expected float, double, float16 or "
                    "bfloat16",
                    p->label(), out->name(),
                    t == DType::Undefined ? "of unknown type" : dtypeName(t));
              });
            }
            if (k.dtype() != t) {
              return why.fail(*add, [&] {
                return fmt::format("{} operand is {} but {} output is {}", add->label(),
                                   dtypeName(k.dtype()), p->label(), dtypeName(t));
              });
            }
            if (Value* b = p->input(bias_input); b && b->dtype() != t) {
              return why.fail(*p, [&] {
                return fmt::format("{} bias '{}' is {} but its output is {}", p->label(), b->name(),
                                   dtypeName(b->dtype()), dtypeName(t));
              });
            }
            return true;
          }};
}

// Conv: output rank and channels from W's static shape; -1 (and `why`) when unknown.
int64_t convChannels(const Node& conv, size_t& rank, Why& why) {
  if (!conv.input(1)) {
    why.fail(conv, [&] { return conv.label() + " has no weight"; });
    return -1;
  }
  const Shape& w = conv.input(1)->shape();
  const size_t channel_dim = conv.is("Conv") ? 0 : 1;
  if (!w.hasRank() || w.rank() < 3 || !w[channel_dim].isStatic()) {
    why.fail(conv, [&] {
      return fmt::format("{} weight '{}' has shape {}: its output channels are not known",
                         conv.label(), conv.input(1)->name(), w.str());
    });
    return -1;
  }
  rank = w.rank();
  const int64_t group = conv.is("Conv") ? 1 : conv.attrInt("group", 1);
  return w[channel_dim].value() * group;
}

Constraint perChannelAddend() {
  return {"per-channel-bias:add", [](const Match& m, Why& why) {
            Node* conv = m.get("conv");
            Node* add = m.get("add");
            Value* kv = otherOperand(*add, conv->output(0));
            const std::vector<int64_t>& k = kv->initializer()->dims();
            size_t rank = 0;
            const int64_t channels = convChannels(*conv, rank, why);
            if (channels < 0) return false;
            if (k.size() > rank) {
              return why.fail(*add, [&] {
                return fmt::format(
                    "{} operand '{}' {} has rank {}, more than {} output's {}; "
                    "adding it changes the output shape",
                    add->label(), kv->name(), dimsText(k), k.size(), conv->label(), rank);
              });
            }
            for (size_t i = 0; i < k.size(); ++i) {
              const size_t axis = rank - k.size() + i;
              if (k[i] == 1 || (axis == 1 && k[i] == channels)) continue;
              return why.fail(*add, [&] {
                return fmt::format(
                    "{} operand '{}' {} is not a per-channel bias of {} output "
                    "(rank {}, {} channels): dim {} has {}",
                    add->label(), kv->name(), dimsText(k), conv->label(), rank, channels, axis,
                    k[i]);
              });
            }
            if (Value* b = conv->input(2);
                b && b->initializer()->dims() != std::vector<int64_t>{channels}) {
              return why.fail(*conv, [&] {
                return fmt::format("{} bias '{}' has shape {}, expected [{}]", conv->label(),
                                   b->name(), dimsText(b->initializer()->dims()), channels);
              });
            }
            return true;
          }};
}

// Whether k (or C) has rank <= 2 with each dim 1 or equal to Gemm's output dim; else `why`.
bool gemmBroadcastable(const Node& gemm, const Value& v, const char* role, Why& why) {
  const Shape& out = gemm.output(0)->shape();
  const std::vector<int64_t>& d = v.initializer()->dims();
  if (d.size() > 2) {
    return why.fail(gemm, [&] {
      return fmt::format("{} {} '{}' {} has rank {}; adding it changes the [M,N] output shape",
                         gemm.label(), role, v.name(), dimsText(d), d.size());
    });
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 1) continue;
    const size_t axis = 2 - d.size() + i;
    if (!out.hasRank() || out.rank() != 2) {
      return why.fail(gemm, [&] {
        return fmt::format(
            "{} output '{}' has shape {}: cannot tell whether {} '{}' {} "
            "broadcasts to it",
            gemm.label(), gemm.output(0)->name(), out.str(), role, v.name(), dimsText(d));
      });
    }
    if (!out[axis].isStatic() || out[axis].value() != d[i]) {
      return why.fail(gemm, [&] {
        return fmt::format(
            "{} {} '{}' {} does not broadcast to the output shape {} without "
            "changing it (dim {})",
            gemm.label(), role, v.name(), dimsText(d), out.str(), axis);
      });
    }
  }
  return true;
}

Constraint gemmAddendBroadcast() {
  return {"gemm-broadcast:add", [](const Match& m, Why& why) {
            Node* gemm = m.get("gemm");
            Node* add = m.get("add");
            if (!gemmBroadcastable(*gemm, *otherOperand(*add, gemm->output(0)), "addend", why)) {
              return false;
            }
            return !gemm->input(2) || gemmBroadcastable(*gemm, *gemm->input(2), "C", why);
          }};
}

double plus(double a, double b) { return a + b; }

class FuseBiasAddPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseBiasAddPassInfo; }

  std::vector<Pattern> patterns() const override { return build(); }

  bool run(const Graph& graph, PassContext& ctx) override {
    std::vector<Pattern> ps = build();
    size_t fused = applyPattern(graph, ctx, ps[0], [&](Rewriter& rw, const Match& m) {
      fuseConv(rw, m);
      ctx.count("fused_conv");
      return true;
    });
    fused += applyPattern(graph, ctx, ps[1], [&](Rewriter& rw, const Match& m) {
      fuseGemm(rw, m);
      ctx.count("fused_gemm");
      return true;
    });
    return fused > 0;
  }

 private:
  static std::vector<Pattern> build() {
    using namespace constraints;
    std::vector<Pattern> out;
    out.push_back(Pattern::parse("conv:Conv|ConvTranspose -> add:Add", "conv-add"));
    out.back()
        .require(uniqueConsumer("conv"))
        .require(constantAddend("conv"))
        .require(constantIfPresent("conv", 2, "bias"))
        .require(sameDType("conv", 2))
        .require(perChannelAddend());
    out.push_back(Pattern::parse("gemm:Gemm -> add:Add", "gemm-add"));
    out.back()
        .require(uniqueConsumer("gemm"))
        .require(constantAddend("gemm"))
        .require(constantIfPresent("gemm", 2, "input C"))
        .require(sameDType("gemm", 2))
        .require(gemmAddendBroadcast());
    return out;
  }

  // Replaces producer + Add by a copy of the producer reading `bias` at input 2.
  static void replace(Rewriter& rw, const Match& m, const char* pattern, Node* producer,
                      Value* bias, std::vector<Attribute> attrs) {
    NewNode fused;
    fused.op_type = producer->opType();
    fused.domain = producer->domain();
    fused.inputs = {producer->input(0), producer->input(1), bias};
    fused.attributes = std::move(attrs);
    fused.name = producer->name();
    fused.doc_string = producer->doc_string;  // keeps the history of earlier rewrites
    rw.replaceMatch(pattern, m, m.get("add")->output(0), std::move(fused));
  }

  static std::string baseName(const Node* n) {
    return n->name().empty() ? n->output(0)->name() : n->name();
  }

  static void fuseConv(Rewriter& rw, const Match& m) {
    Node* conv = m.get("conv");
    const Tensor& k = *otherOperand(*m.get("add"), conv->output(0))->initializer();
    Why checked(false);  // perChannelAddend held
    size_t rank = 0;
    const auto channels = static_cast<size_t>(convChannels(*conv, rank, checked));
    std::vector<double> kv = constantAsDoubles(k);
    std::vector<double> bias(channels, 0.0);
    if (Value* b = conv->input(2)) bias = constantAsDoubles(*b->initializer());
    // k is all ones but possibly the channel dim: one value, or one per channel in order.
    for (size_t o = 0; o < channels; ++o) bias[o] += kv.size() == 1 ? kv[0] : kv[o];
    Value* new_b =
        rw.addConstant(baseName(conv) + "_B_fused",
                       tensorFromDoubles(k.dtype(), {static_cast<int64_t>(channels)}, bias));
    replace(rw, m, "conv-add", conv, new_b, conv->attributes());
  }

  static void fuseGemm(Rewriter& rw, const Match& m) {
    Node* gemm = m.get("gemm");
    const Tensor& k = *otherOperand(*m.get("add"), gemm->output(0))->initializer();
    DoubleTensor c = constantAsDoubleTensor(k);
    if (Value* old = gemm->input(2)) {
      DoubleTensor cv = constantAsDoubleTensor(*old->initializer());
      const double beta = gemm->attrFloat("beta", 1.0f);
      for (double& v : cv.values) v *= beta;
      c = broadcastApply(cv, c, plus);
    }
    Value* new_c =
        rw.addConstant(baseName(gemm) + "_C_fused", tensorFromDoubles(k.dtype(), c.dims, c.values));
    std::vector<Attribute> attrs;
    for (const Attribute& a : gemm->attributes())
      if (a.name != "beta" && a.name != "broadcast") attrs.push_back(a);
    // Before opset 7 a C smaller than [M, N] needs broadcast=1.
    const int64_t opset = rw.context().opset();
    if (opset > 0 && opset < 7) attrs.push_back(Attribute::ofInt("broadcast", 1));
    replace(rw, m, "gemm-add", gemm, new_c, std::move(attrs));
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseBiasAddPass() { return std::make_unique<FuseBiasAddPass>(); }

}  // namespace fusectl::passes
