// Shape rules for convolutions, pooling and normalisation layers.
//
// Spatial output size (per axis, stride s, dilation d, kernel k, effective kernel
// ek = (k-1)*d+1, pads pb/pe):
//   Conv / pool, explicit pads:  floor((in + pb + pe - ek) / s) + 1   (ceil with ceil_mode)
//   SAME_UPPER / SAME_LOWER:     ceil(in / s)
//   VALID:                       floor((in - ek) / s) + 1
//   ConvTranspose:               s*(in-1) + output_padding + ek - pb - pe, or in*s for SAME,
//                                or the output_shape attribute when given.
// A symbolic `in` stays symbolic: "h+2", "2*h", "floor((h+1)/2)" (fusectl::floorDiv); only a
// ceil_mode window that may start in the right padding gives an unknown dim.
// With ceil_mode, a last window that would start inside the right padding is dropped, as in
// PyTorch and current ONNX (onnx 1.12's own inference gets that case wrong).
#include <algorithm>

#include <fmt/format.h>

#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Window attributes, read in place: this runs for every Conv of a million-node graph.
struct WindowParams {
  size_t n = 0;  // spatial axes
  const std::vector<int64_t>* kernel_attr = nullptr;
  const Shape* weight = nullptr;  // kernel from the weight's dims when kernel_shape is absent
  const std::vector<int64_t>* strides = nullptr;
  const std::vector<int64_t>* dilations = nullptr;
  const std::vector<int64_t>* pads = nullptr;
  std::string_view auto_pad = "NOTSET";

  Dim kernel(size_t i) const {
    if (kernel_attr) return Dim::known((*kernel_attr)[i]);
    if (weight) return (*weight)[2 + i];
    return Dim::unknown();
  }
  int64_t stride(size_t i) const { return strides ? (*strides)[i] : 1; }
  int64_t dilation(size_t i) const { return dilations ? (*dilations)[i] : 1; }
  int64_t padBegin(size_t i) const { return pads ? (*pads)[i] : 0; }
  int64_t padEnd(size_t i) const { return pads ? (*pads)[i + n] : 0; }
  bool same() const { return auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"; }
  bool valid() const { return auto_pad == "VALID"; }
};

// Reads kernel_shape (or the weight's spatial dims), strides, dilations, pads and auto_pad for
// `n` spatial axes; attributes of the wrong length are ignored.
WindowParams windowParams(const Node& node, size_t n, const Shape* weight) {
  WindowParams p;
  p.n = n;
  auto sized = [&](const char* name, size_t count) {
    const auto* a = intsAttr(node, name);
    return a && a->size() == count ? a : nullptr;
  };
  p.kernel_attr = sized("kernel_shape", n);
  if (weight && weight->hasRank() && weight->rank() == n + 2) p.weight = weight;
  p.strides = sized("strides", n);
  p.dilations = sized("dilations", n);
  p.pads = sized("pads", 2 * n);
  if (const Attribute* a = node.attr("auto_pad"); a && a->kind == AttrKind::String) p.auto_pad = a->s;
  return p;
}

int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }

Dim windowOutput(RuleContext& ctx, const Dim& in, const WindowParams& p, size_t i,
                 bool ceil_mode) {
  int64_t s = p.stride(i), d = p.dilation(i);
  if (s <= 0 || d <= 0) {
    ctx.warn("strides and dilations must be positive");
    return Dim::unknown();
  }
  if (p.same()) {
    if (in.isStatic()) return Dim::known(ceilDiv(in.value(), s));
    return fusectl::ceilDiv(in, s);
  }
  Dim k = p.kernel(i);
  if (!k.isStatic()) return Dim::unknown();
  int64_t pb = p.valid() ? 0 : p.padBegin(i);
  int64_t pe = p.valid() ? 0 : p.padEnd(i);
  // Kernel, dilation and pads come from the file: the arithmetic below must not overflow.
  int64_t ek = 0, padded = 0, span = 0;
  const int64_t in_value = in.isStatic() ? in.value() : 0;
  if (__builtin_mul_overflow(k.value() - 1, d, &ek) || __builtin_add_overflow(ek, 1, &ek) ||
      __builtin_add_overflow(in_value, pb, &padded) ||
      __builtin_add_overflow(padded, pe, &padded) ||
      __builtin_sub_overflow(padded, ek, &span) || __builtin_add_overflow(span, s, &padded)) {
    ctx.warn("kernel_shape, dilations, strides and pads overflow the window's extent");
    return Dim::unknown();
  }
  if (!in.isStatic()) {
    Dim span_dim = in + Dim::known(pb + pe - ek);
    if (!ceil_mode) return fusectl::floorDiv(span_dim, s) + Dim::known(1);
    // The last window starts inside the right padding only when s + pe > ek; what that drops
    // depends on the value of `in`.
    if (s + pe <= ek) return fusectl::ceilDiv(span_dim, s) + Dim::known(1);
    // At stride 1 that window is the last one whatever `in` is (pe >= ek).
    return s == 1 ? span_dim : Dim::unknown();
  }
  if (span < 0) {
    ctx.warn(fmt::format("window of {} does not fit the padded input {}", ek, in.value() + pb + pe));
    return Dim::unknown();
  }
  if (!ceil_mode) return Dim::known(span / s + 1);
  int64_t out = ceilDiv(span, s) + 1;
  if ((out - 1) * s >= in.value() + pb) --out;
  return Dim::known(out);
}

// [N, channels, spatial...] for a windowed op over x.
Shape windowedShape(RuleContext& ctx, const Shape& x, const Shape* weight, Dim channels,
                    bool ceil_mode) {
  // X's own rank when it has one (even a rank of 0 or 1, which is then refused below, never
  // read past); the weight's or kernel_shape's only when X's is unknown.
  size_t rank = x.hasRank() ? x.rank() : weight && weight->hasRank() ? weight->rank() : 0;
  if (!x.hasRank() && rank == 0) {
    if (const auto* k = intsAttr(ctx.node, "kernel_shape")) rank = k->size() + 2;
    else return Shape();
  }
  if (rank < 2) {
    ctx.warn(fmt::format("input of rank {} has no channel axis", rank));
    return Shape();
  }
  size_t n = rank - 2;
  WindowParams p = windowParams(ctx.node, n, weight);
  std::vector<Dim> out(rank);
  if (x.hasRank()) out[0] = x[0];
  out[1] = std::move(channels);
  for (size_t i = 0; i < n; ++i)
    if (x.hasRank()) out[2 + i] = windowOutput(ctx, x[2 + i], p, i, ceil_mode);
  return Shape(std::move(out));
}

Dim dimOr(const Shape& s, size_t i) { return s.hasRank() && i < s.rank() ? s[i] : Dim(); }

bool conv(RuleContext& ctx) {
  const Shape& w = ctx.inShape(1);
  ctx.setOutput(0, ctx.inDType(0), convShape(ctx, ctx.inShape(0), w));
  return true;
}

bool convInteger(RuleContext& ctx) {
  ctx.setOutput(0, DType::Int32, convShape(ctx, ctx.inShape(0), ctx.inShape(1)));
  return true;
}

bool convTranspose(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  const Shape& w = ctx.inShape(1);
  size_t rank = x.hasRank() ? x.rank() : w.hasRank() ? w.rank() : 0;
  if (rank < 3) {
    ctx.setOutput(0, ctx.inDType(0), Shape());
    return true;
  }
  size_t n = rank - 2;
  WindowParams p = windowParams(ctx.node, n, &w);
  int64_t group = ctx.node.attrInt("group", 1);
  std::vector<Dim> out(rank);
  out[0] = dimOr(x, 0);
  out[1] = dimOr(w, 1) * Dim::known(group);
  const auto* output_shape = intsAttr(ctx.node, "output_shape");
  const auto* output_padding = intsAttr(ctx.node, "output_padding");
  for (size_t i = 0; i < n; ++i) {
    if (output_shape && output_shape->size() >= n) {
      out[2 + i] = Dim::known((*output_shape)[output_shape->size() - n + i]);
      continue;
    }
    Dim in = dimOr(x, 2 + i);
    Dim s = Dim::known(p.stride(i));
    if (p.same()) {
      out[2 + i] = in * s;
      continue;
    }
    Dim k = p.kernel(i);
    if (!k.isStatic()) continue;
    // In Dim arithmetic, which gives an unknown dim where the file's values overflow.
    const Dim one = Dim::known(1);
    Dim ek = (k - one) * Dim::known(p.dilation(i)) + one;
    Dim pads = p.valid() ? Dim::known(0) : Dim::known(p.padBegin(i)) + Dim::known(p.padEnd(i));
    Dim op = Dim::known(output_padding && output_padding->size() == n ? (*output_padding)[i] : 0);
    out[2 + i] = s * (in - one) + op + ek - pads;
  }
  ctx.setOutput(0, ctx.inDType(0), Shape(std::move(out)));
  return true;
}

template <bool kIsMax>
bool pool(RuleContext& ctx) {
  bool ceil_mode = ctx.node.attrInt("ceil_mode", 0) != 0;
  Shape s = windowedShape(ctx, ctx.inShape(0), nullptr, dimOr(ctx.inShape(0), 1), ceil_mode);
  if (kIsMax && ctx.hasOutput(1)) ctx.setOutput(1, DType::Int64, s);
  ctx.setOutput(0, ctx.inDType(0), std::move(s));
  return true;
}

bool globalPool(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  Shape out;
  if (x.hasRank() && x.rank() >= 2) {
    std::vector<Dim> dims(x.rank(), Dim::known(1));
    dims[0] = x[0];
    dims[1] = x[1];
    out = Shape(std::move(dims));
  }
  ctx.setOutput(0, ctx.inDType(0), std::move(out));
  return true;
}

// BatchNormalization-14/15 returns running mean/var; before that mean, var, saved mean and
// saved var. All are per-channel, shaped like the `mean` input.
bool batchNorm(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  if (ctx.numOutputs() < 2) return true;
  Shape stats = ctx.inShape(3).hasRank() ? ctx.inShape(3) : ctx.inShape(1);
  if (!stats.hasRank() && ctx.inShape(0).hasRank() && ctx.inShape(0).rank() >= 2)
    stats = Shape({ctx.inShape(0)[1]});
  for (size_t i = 1; i < ctx.numOutputs(); ++i) {
    DType t = ctx.opset >= 14 && i <= 2 ? ctx.inDType(3) : ctx.inDType(0);
    if (t == DType::Undefined) t = ctx.inDType(0);
    ctx.setOutput(i, t, stats);
  }
  return true;
}

// Statistics of LayerNormalization-style ops: X's shape with the normalised axes set to 1,
// in the stash type.
void normStatistics(RuleContext& ctx, size_t first_output, size_t count) {
  auto stash = static_cast<DType>(ctx.node.attrInt("stash_type", 1));
  const Shape& x = ctx.inShape(0);
  Shape s;
  if (x.hasRank()) {
    s = x;
    auto axis = normalizeAxis(ctx.node.attrInt("axis", -1), static_cast<int64_t>(x.rank()));
    if (axis) {
      for (size_t i = *axis; i < s.rank(); ++i) s[i] = Dim::known(1);
    } else {
      s = unknownDims(x.rank());
    }
  }
  for (size_t i = first_output; i < first_output + count; ++i)
    if (ctx.hasOutput(i)) ctx.setOutput(i, stash, s);
}

bool layerNorm(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  normStatistics(ctx, 1, 2);
  return true;
}

// com.microsoft SkipLayerNormalization: output, mean, inv_std_var, input_skip_bias_sum.
bool skipLayerNorm(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  normStatistics(ctx, 1, 2);
  propagateInput(ctx, 3, 0);
  return true;
}

bool simplifiedLayerNorm(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  normStatistics(ctx, 1, 1);
  return true;
}

bool sameAsX(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  return true;
}

}  // namespace

Shape convShape(RuleContext& ctx, const Shape& x, const Shape& w) {
  return windowedShape(ctx, x, &w, dimOr(w, 0), false);
}

void registerNnRules(RuleRegistry& r) {
  r.add("", "Conv", conv);
  r.add("", "ConvInteger", convInteger);
  r.add("", "ConvTranspose", convTranspose);
  r.add("", "MaxPool", pool<true>);
  r.add("", "AveragePool", pool<false>);
  r.add("", "LpPool", pool<false>);
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
    r.add("", op, globalPool);
  r.add("", "BatchNormalization", batchNorm);
  r.add("", "LayerNormalization", layerNorm);
  r.add("", "InstanceNormalization", sameAsX);
  r.add("", "GroupNormalization", sameAsX);
  r.add("", "RMSNormalization", sameAsX);
  r.add("com.microsoft", "LayerNormalization", layerNorm);
  r.add("com.microsoft", "SimplifiedLayerNormalization", simplifiedLayerNorm);
  r.add("com.microsoft", "SkipLayerNormalization", skipLayerNorm);
  r.add("com.microsoft", "SkipSimplifiedLayerNormalization", skipLayerNorm);
}

}  // namespace fusectl::shape_rules
