// Shape rules for reductions along axes: Reduce*, ArgMax/ArgMin, TopK.
//
// Reduce* take `axes` as an attribute up to opset 12 (ReduceSum) or 17 (the others) and as an
// optional input afterwards, where `noop_with_empty_axes` decides whether no axes means "all" or
// "none". Axes that are an input but not a constant still leave the rank known with keepdims.
#include <algorithm>

#include <fmt/format.h>

#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

bool reduce(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  bool keepdims = ctx.node.attrInt("keepdims", 1) != 0;
  // Lenient about the version: an axes input is read whenever it is there.
  bool axes_from_input = ctx.hasInput(1);
  std::optional<std::vector<int64_t>> axes;
  if (axes_from_input) {
    axes = ctx.inInts(1);
  } else {
    const auto* a = intsAttr(ctx.node, "axes");
    axes = a ? *a : std::vector<int64_t>{};
  }
  if (!x.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  if (!axes) {
    if (keepdims) {
      Shape s = x;
      for (Dim& d : s.dims())
        if (!(d.isStatic() && d.value() == 1)) d = Dim::unknown();
      ctx.setOutput(0, t, std::move(s));
    } else {
      const Shape& as = ctx.inShape(1);
      bool count_known = as.hasRank() && as.rank() == 1 && as[0].isStatic() &&
                         as[0].value() > 0 && as[0].value() <= rank;
      ctx.setOutput(0, t, count_known ? unknownDims(rank - as[0].value()) : Shape());
    }
    return true;
  }
  if (axes->empty()) {
    // The attribute exists only in the versions that take axes as an input.
    if (ctx.node.attrInt("noop_with_empty_axes", 0) != 0) {
      ctx.setOutput(0, t, x);
      return true;
    }
    for (int64_t i = 0; i < rank; ++i) axes->push_back(i);
  }
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t a : *axes) {
    auto n = normalizeAxis(a, rank);
    if (!n) {
      ctx.warn(fmt::format("axis {} is out of range for rank {}", a, rank));
      ctx.setOutput(0, t, keepdims ? unknownDims(x.rank()) : Shape());
      return true;
    }
    reduced[*n] = true;
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!reduced[i]) out.push_back(x[i]);
    else if (keepdims) out.push_back(Dim::known(1));
  }
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

bool argReduce(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  bool keepdims = ctx.node.attrInt("keepdims", 1) != 0;
  Shape out;
  if (x.hasRank()) {
    auto axis = normalizeAxis(ctx.node.attrInt("axis", 0), static_cast<int64_t>(x.rank()));
    if (!axis) {
      ctx.warn("axis is out of range");
      out = keepdims ? unknownDims(x.rank()) : Shape();
    } else {
      out = x;
      if (keepdims) out[*axis] = Dim::known(1);
      else out.dims().erase(out.dims().begin() + static_cast<std::ptrdiff_t>(*axis));
    }
  }
  ctx.setOutput(0, DType::Int64, std::move(out));
  return true;
}

// TopK-1 has a `k` attribute; from opset 10 K is a one-element input.
bool topK(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  Shape out;
  if (x.hasRank()) {
    out = x;
    auto axis = normalizeAxis(ctx.node.attrInt("axis", -1), static_cast<int64_t>(x.rank()));
    if (axis) {
      Dim k;
      if (ctx.opset < 10 || !ctx.hasInput(1)) {
        if (ctx.node.hasAttr("k")) k = Dim::known(ctx.node.attrInt("k", 0));
      } else if (const KnownValues* kv = ctx.inValues(1); kv && kv->elems.size() == 1) {
        k = kv->elems[0];
      }
      out[*axis] = k;
    } else {
      ctx.warn("axis is out of range");
      out = unknownDims(x.rank());
    }
  }
  ctx.setOutput(0, ctx.inDType(0), out);
  ctx.setOutput(1, DType::Int64, std::move(out));
  return true;
}

}  // namespace

void registerReduceRules(RuleRegistry& r) {
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                         "ReduceLogSumExp"})
    r.add("", op, reduce);
  r.add("", "ArgMax", argReduce);
  r.add("", "ArgMin", argReduce);
  r.add("", "TopK", topK);
}

}  // namespace fusectl::shape_rules
