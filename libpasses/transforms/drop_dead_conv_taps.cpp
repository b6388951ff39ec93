// drop-dead-conv-taps: kernel taps of a Conv that read only padding, for every output position,
// contribute nothing; a kernel without them computes the same output.
//
//   x:[1, 960, 6, 6] -> Conv<kernel 3x3, dilations 24, pads 24> (W [256, 960, 3, 3])
//     =>  x -> Conv<kernel 1x1, dilations 1, pads 0> (W[:, :, 1:2, 1:2])
//
// DeepLabV3's atrous pyramid (rates 12, 24 and 36) on a feature map smaller than its rate: the
// outer taps of its 3x3 convolutions fall outside the input wherever the window is, so the
// im2col product multiplied 8640 rows of zeros by 8.8 MB of weights that only 1/9 of matters.
//
// Along each spatial axis, tap k reads positions o*s - pb + k*d for the outputs o; the taps that
// reach [0, in) for some o form one range [k0, k1]. The kernel keeps that range (the weights
// sliced), and the pads shrink by the dropped taps' extent: pb - k0*d before, pe - (K-1-k1)*d
// after, so that every kept tap reads the same positions as before and the output keeps its
// size. An axis left with one tap gets dilation 1 (it no longer matters).
//
// Conditions, checked in this order (each failure worth telling is a reported rejection):
//  1. 2-D or higher, explicit pads (auto_pad NOTSET), the weights a constant initializer;
//  2. the input's spatial dims and the kernel's are static, strides and dilations positive,
//     pads not negative, and the window's arithmetic within int64;
//  3. some axis has a dead tap, every axis keeps at least one (an axis where no tap reaches the
//     input would make the output the bias alone: left as it is), and the shrunk pads are not
//     negative.
// Counter: shrunk.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

struct Shrink {
  std::vector<int64_t> first, last;  // the live taps [first, last] per spatial axis
  std::vector<int64_t> pads, kernel, dilations;
};

// The shrunk kernel, or nullopt. `dead` tells whether some tap reads only padding (a candidate:
// the only convolutions whose failed conditions are worth telling, with `why`).
std::optional<Shrink> shrink(const Node& conv, Why& why, bool* dead_out = nullptr) {
  if (dead_out) *dead_out = false;
  const Value* x = conv.input(0);
  const Value* w = conv.input(1);
  if (!x || !w) return std::nullopt;
  const Shape& xs = x->shape();
  const Tensor* wt = w->isConstant() ? w->initializer() : nullptr;
  if (!xs.hasRank() || xs.rank() < 4 || !wt || wt->dims().size() != xs.rank() ||
      conv.attrString("auto_pad", "NOTSET") != "NOTSET")
    return std::nullopt;
  const size_t r = xs.rank() - 2;
  std::vector<int64_t> strides = conv.attrInts("strides", std::vector<int64_t>(r, 1));
  std::vector<int64_t> dil = conv.attrInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = conv.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (strides.size() != r || dil.size() != r || pads.size() != 2 * r) return std::nullopt;
  Shrink s;
  s.pads = pads;
  s.dilations = dil;
  bool dead = false;
  for (size_t i = 0; i < r; ++i) {
    const Dim& in_dim = xs[i + 2];
    if (!in_dim.isStatic()) return std::nullopt;
    const int64_t in = in_dim.value(), K = wt->dims()[i + 2];
    // The attributes come from the file: a model the Conv kernel refuses (a stride of 0, a
    // negative pad) or whose window arithmetic overflows is left to it.
    if (strides[i] < 1 || dil[i] < 1 || pads[i] < 0 || pads[r + i] < 0 || K < 1)
      return std::nullopt;
    int64_t extent = 0, padded = 0;
    if (__builtin_mul_overflow(K - 1, dil[i], &extent) ||
        __builtin_add_overflow(extent, 1, &extent) ||
        __builtin_add_overflow(in, pads[i], &padded) ||
        __builtin_add_overflow(padded, pads[r + i], &padded))
      return std::nullopt;
    const int64_t out = (padded - extent) / strides[i] + 1;
    if (padded < extent || out < 1) return std::nullopt;
    // Tap k reads [k*d - pb, k*d - pb + (out-1)*s]: live when that meets [0, in).
    int64_t first = -1, last = -1;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t lo = k * dil[i] - pads[i], hi = lo + (out - 1) * strides[i];
      if (hi < 0 || lo >= in) continue;
      if (first < 0) first = k;
      last = k;
    }
    if (first < 0) {
      if (dead_out) *dead_out = true;
      why.fail(conv, [&] {
        return fmt::format("{} reads only padding along spatial axis {}: its output is its bias "
                           "alone (left as it is)",
                           conv.label(), i);
      });
      return std::nullopt;
    }
    dead = dead || first > 0 || last < K - 1;
    if (dead_out) *dead_out = dead;
    s.first.push_back(first);
    s.last.push_back(last);
    s.kernel.push_back(last - first + 1);
    s.pads[i] = pads[i] - first * dil[i];
    s.pads[r + i] = pads[r + i] - (K - 1 - last) * dil[i];
    if (s.kernel.back() == 1) s.dilations[i] = 1;
    if (s.pads[i] < 0 || s.pads[r + i] < 0) {
      why.fail(conv, [&] {
        return fmt::format("{} has dead taps along spatial axis {}, but dropping them would leave "
                           "a negative pad",
                           conv.label(), i);
      });
      return std::nullopt;
    }
  }
  if (!dead) return std::nullopt;
  return s;
}

bool hasDeadTaps(const Node& conv) {
  Why quiet(false);
  bool dead = false;
  shrink(conv, quiet, &dead);
  return dead;
}

Constraint deadTaps() {
  return {"dead-taps", [](const Match& m, Why& why) {
            return shrink(*m.get("conv"), why).has_value();
          }};
}

// W[:, :, first0..last0, first1..last1, ...].
Tensor slicedWeights(const Tensor& w, const Shrink& s) {
  const std::vector<int64_t>& d = w.dims();
  std::vector<int64_t> out_dims = {d[0], d[1]};
  for (int64_t k : s.kernel) out_dims.push_back(k);
  const std::vector<double> values = constantAsDoubles(w);
  int64_t n = 1;
  for (int64_t v : out_dims) n *= v;
  std::vector<double> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(out_dims.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t src = 0;
    for (size_t a = 0; a < out_dims.size(); ++a)
      src = src * d[a] + idx[a] + (a >= 2 ? s.first[a - 2] : 0);
    out[static_cast<size_t>(e)] = values[static_cast<size_t>(src)];
    for (size_t a = out_dims.size(); a-- > 0;) {
      if (++idx[a] < out_dims[a]) break;
      idx[a] = 0;
    }
  }
  return tensorFromDoubles(w.dtype(), out_dims, out);
}

class DropDeadConvTapsPass : public Pass {
 public:
  const PassInfo& info() const override { return DropDeadConvTapsPassInfo; }

  std::vector<Pattern> patterns() const override { return {build()}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    // Only convolutions with a tap that reads nothing but padding are candidates: the others
    // are no near miss.
    DriverOptions driver;
    driver.report_structural = false;
    driver.candidate = hasDeadTaps;
    return applyPattern(graph, ctx, build(), [&](Rewriter& rw, const Match& m) {
             Node* conv = m.get("conv");
             Why checked(false);  // the constraint held
             const Shrink s = *shrink(*conv, checked);
             const Value* w = conv->input(1);
             Value* sliced =
                 rw.addConstant(w->name() + "_live_taps", slicedWeights(*w->initializer(), s));
             NewNode n;
             n.op_type = "Conv";
             n.inputs = {conv->input(0), sliced};
             if (conv->numInputs() > 2 && conv->input(2)) n.inputs.push_back(conv->input(2));
             for (const Attribute& a : conv->attributes()) {
               if (a.name != "kernel_shape" && a.name != "pads" && a.name != "dilations")
                 n.attributes.push_back(a);
             }
             n.attributes.push_back(Attribute::ofInts("kernel_shape", s.kernel));
             n.attributes.push_back(Attribute::ofInts("pads", s.pads));
             n.attributes.push_back(Attribute::ofInts("dilations", s.dilations));
             n.doc_string = conv->doc_string;
             rw.replaceNode(conv, std::move(n));
             ctx.count("shrunk");
             return true;
           }, driver) > 0;
  }

 private:
  static Pattern build() {
    Pattern p = Pattern::parse("conv:Conv", "dead-conv-taps");
    p.require(deadTaps());
    p.produces = {"Conv"};
    return p;
  }
};

}  // namespace

std::unique_ptr<Pass> createDropDeadConvTapsPass() {
  return std::make_unique<DropDeadConvTapsPass>();
}

}  // namespace fusectl::passes
