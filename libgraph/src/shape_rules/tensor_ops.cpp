// Shape rules for ops that move data around: Reshape, Transpose, Flatten, Squeeze/Unsqueeze,
// Concat, Split, Slice, Gather*, Scatter*, Expand, Tile, Pad, DepthToSpace/SpaceToDepth, Resize.
//
// Shapes that come from data (Reshape's target, Slice's starts, Expand's shape...) are read from
// constants or from known values propagated through Shape->Gather->Concat chains, so PyTorch's
// dynamic reshapes keep their symbolic dims. The ops that such chains are made of (Gather,
// Slice, Concat, Squeeze, Unsqueeze, Reshape) carry the known values along.
//
// Slicing a symbolic dim d (step 1) assumes the slice is not empty, as ONNX Runtime's symbolic
// shape inference does: [s:] gives d-s, [s:-e] gives d-e-s; a bounded end [s:e] is unknown
// because it depends on whether d reaches e.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "fusectl/graph/slice_range.h"
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Ends at or beyond this index mean "to the end" for a symbolic dim: exporters write INT_MAX or
// INT64_MAX there, and no real dim is that large.
constexpr int64_t kToEnd = std::numeric_limits<int32_t>::max();

Dim product(const std::vector<Dim>& dims, size_t begin, size_t end) {
  Dim p = Dim::known(1);
  for (size_t i = begin; i < end; ++i) {
    if (dims[i].isUnknown()) return Dim::unknown();
    p = p * dims[i];
  }
  return p;
}

// Known values of a 1-D result whose elements are a function of the input's known values.
void propagateElems(RuleContext& ctx, std::vector<Dim> elems, bool scalar) {
  if (elems.size() > kMaxKnownValues) return;
  ctx.setValues(0, KnownValues{scalar, std::move(elems)});
}

// The reshape target as values: the `shape` attribute before opset 5, else input 1.
std::optional<KnownValues> reshapeTarget(RuleContext& ctx) {
  if (ctx.opset < 5 && !ctx.hasInput(1)) {
    const auto* a = intsAttr(ctx.node, "shape");
    if (!a) return std::nullopt;
    KnownValues kv;
    for (int64_t v : *a) kv.elems.push_back(Dim::known(v));
    return kv;
  }
  if (const KnownValues* kv = ctx.inValues(1)) return *kv;
  return std::nullopt;
}

bool reshape(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  auto target = reshapeTarget(ctx);
  if (!target) {
    const Shape& s = ctx.inShape(1);
    bool len_known = s.hasRank() && s.rank() == 1 && s[0].isStatic();
    ctx.setOutput(0, t, len_known ? unknownDims(static_cast<size_t>(s[0].value())) : Shape());
    return true;
  }
  bool allowzero = ctx.node.attrInt("allowzero", 0) != 0;
  size_t n = target->elems.size();
  std::vector<Dim> out(n);
  std::vector<int64_t> copied_from(n, -1);
  std::optional<size_t> infer_at;
  for (size_t i = 0; i < n; ++i) {
    const Dim& e = target->elems[i];
    if (e.isStatic() && e.value() == 0 && !allowzero) {
      if (x.hasRank() && i < x.rank()) {
        out[i] = x[i];
        copied_from[i] = static_cast<int64_t>(i);
      }
    } else if (e.isStatic() && e.value() == -1) {
      if (infer_at) ctx.warn("more than one -1 in the target shape");
      infer_at = i;
    } else if (e.isStatic() && e.value() < 0) {
      ctx.warn(fmt::format("invalid target dim {}", e.value()));
    } else {
      out[i] = e;
    }
  }
  if (infer_at && x.hasRank()) {
    // -1 = numel(x) / product(other dims). Dims that appear on both sides cancel first, so
    // [?,seq,64] -> [0,-1] still gives seq*64.
    std::vector<Dim> num = x.dims();
    std::vector<bool> used(num.size(), false);
    std::vector<Dim> den;
    for (size_t i = 0; i < n; ++i) {
      if (i == *infer_at) continue;
      if (copied_from[i] >= 0 && !used[copied_from[i]]) {
        used[copied_from[i]] = true;
        continue;
      }
      bool cancelled = false;
      for (size_t j = 0; j < num.size() && !cancelled; ++j) {
        if (!used[j] && num[j].provablyEqual(out[i])) used[j] = cancelled = true;
      }
      if (!cancelled) den.push_back(out[i]);
    }
    std::vector<Dim> rest;
    for (size_t j = 0; j < num.size(); ++j)
      if (!used[j]) rest.push_back(num[j]);
    Dim numerator = product(rest, 0, rest.size());
    Dim denominator = product(den, 0, den.size());
    if (numerator.isStatic() && denominator.isStatic() &&
        (denominator.value() == 0 || numerator.value() % denominator.value() != 0))
      ctx.warn(fmt::format("cannot reshape {} elements into {}", x.numel().str(),
                           Shape(out).str()));
    else
      out[*infer_at] = numerator / denominator;
  } else if (!infer_at) {
    auto in_n = x.staticNumel(), out_n = Shape(out).staticNumel();
    if (in_n && out_n && *in_n != *out_n)
      ctx.warn(fmt::format("cannot reshape {} into {}", x.str(), Shape(out).str()));
  }
  if (const KnownValues* kv = ctx.inValues(0); kv && n <= 1) propagateElems(ctx, kv->elems, n == 0);
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

bool transpose(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  // An empty perm reverses the axes, as an omitted one does (ONNX's reference implementation
  // and fusectl's kernel both read it so).
  const std::vector<int64_t>* given = intsAttr(ctx.node, "perm");
  if (given && given->empty()) given = nullptr;
  if (!x.hasRank()) {
    ctx.setOutput(0, ctx.inDType(0), given ? unknownDims(given->size()) : Shape());
    return true;
  }
  std::vector<int64_t> perm(x.rank());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
  if (given) perm = *given;
  std::vector<Dim> out;
  std::vector<bool> seen(x.rank(), false);
  for (int64_t p : perm) {
    auto axis = normalizeAxis(p, static_cast<int64_t>(x.rank()));
    if (!axis || seen[*axis] || perm.size() != x.rank()) {
      ctx.warn(fmt::format("perm is not a permutation of rank {}", x.rank()));
      ctx.setOutput(0, ctx.inDType(0), unknownDims(perm.size()));
      return true;
    }
    seen[*axis] = true;
    out.push_back(x[*axis]);
  }
  ctx.setOutput(0, ctx.inDType(0), Shape(std::move(out)));
  return true;
}

bool flatten(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  Shape out = unknownDims(2);
  if (x.hasRank()) {
    // axis is in [-rank, rank]; -1 means before the last dim.
    int64_t rank = static_cast<int64_t>(x.rank());
    int64_t a = ctx.node.attrInt("axis", 1);
    auto axis = normalizeAxis(a < 0 ? a + rank : a, rank + 1);
    if (axis) {
      out[0] = product(x.dims(), 0, *axis);
      out[1] = product(x.dims(), *axis, x.rank());
    } else {
      ctx.warn("axis is out of range");
    }
  }
  ctx.setOutput(0, ctx.inDType(0), std::move(out));
  return true;
}

// Axes from the `axes` attribute (before opset 13) or input 1.
std::optional<std::vector<int64_t>> axesArgument(RuleContext& ctx, bool* given) {
  if (ctx.hasInput(1)) {
    *given = true;
    return ctx.inInts(1);
  }
  const auto* a = intsAttr(ctx.node, "axes");
  *given = a != nullptr;
  return a ? *a : std::vector<int64_t>{};
}

bool squeeze(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  bool given = false;
  auto axes = axesArgument(ctx, &given);
  if (!x.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> drop(x.rank(), false);
  if (!axes) {
    const Shape& as = ctx.inShape(1);
    bool count_known = as.hasRank() && as.rank() == 1 && as[0].isStatic() && as[0].value() <= rank;
    ctx.setOutput(0, t, count_known ? unknownDims(rank - as[0].value()) : Shape());
    return true;
  }
  if (axes->empty()) {
    // Without axes every dim of size 1 goes; a dim we cannot see might be 1.
    for (size_t i = 0; i < x.rank(); ++i) {
      if (!x[i].isStatic()) {
        ctx.setOutput(0, t, Shape());
        return true;
      }
      drop[i] = x[i].value() == 1;
    }
  }
  for (int64_t a : *axes) {
    auto axis = normalizeAxis(a, rank);
    if (!axis) {
      ctx.warn(fmt::format("axis {} is out of range for rank {}", a, rank));
      ctx.setOutput(0, t, Shape());
      return true;
    }
    if (x[*axis].isStatic() && x[*axis].value() != 1)
      ctx.warn(fmt::format("axis {} has size {}, not 1", a, x[*axis].value()));
    drop[*axis] = true;
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!drop[i]) out.push_back(x[i]);
  if (const KnownValues* kv = ctx.inValues(0); kv && out.size() <= 1)
    propagateElems(ctx, kv->elems, out.empty());
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

bool unsqueeze(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  bool given = false;
  auto axes = axesArgument(ctx, &given);
  if (!x.hasRank() || !axes) {
    const Shape& as = ctx.inShape(1);
    bool count_known = x.hasRank() && as.hasRank() && as.rank() == 1 && as[0].isStatic();
    ctx.setOutput(0, t, count_known ? unknownDims(x.rank() + as[0].value()) : Shape());
    return true;
  }
  int64_t out_rank = static_cast<int64_t>(x.rank() + axes->size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *axes) {
    auto axis = normalizeAxis(a, out_rank);
    if (!axis || inserted[*axis]) {
      ctx.warn(fmt::format("invalid axis {} for output rank {}", a, out_rank));
      ctx.setOutput(0, t, unknownDims(out_rank));
      return true;
    }
    inserted[*axis] = true;
  }
  std::vector<Dim> out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? Dim::known(1) : x[next++]);
  if (const KnownValues* kv = ctx.inValues(0); kv && out_rank <= 1)
    propagateElems(ctx, kv->elems, out_rank == 0);
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

bool concat(RuleContext& ctx) {
  DType t = DType::Undefined;
  const Shape* ranked = nullptr;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.hasInput(i)) continue;
    if (t == DType::Undefined) t = ctx.inDType(i);
    if (!ranked && ctx.inShape(i).hasRank()) ranked = &ctx.inShape(i);
  }
  if (!ranked) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  int64_t rank = static_cast<int64_t>(ranked->rank());
  // Concat-1 defaults to axis 1; from opset 4 the axis is required.
  auto axis = normalizeAxis(ctx.node.attrInt("axis", ctx.opset < 4 ? 1 : 0), rank);
  if (!axis) {
    ctx.warn("axis is out of range");
    ctx.setOutput(0, t, unknownDims(rank));
    return true;
  }
  std::vector<Dim> out(ranked->rank());
  out[*axis] = Dim::known(0);
  std::vector<bool> first(ranked->rank(), true);
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.hasInput(i)) continue;
    const Shape& s = ctx.inShape(i);
    if (!s.hasRank()) {
      out[*axis] = Dim::unknown();
      continue;
    }
    if (s.rank() != ranked->rank()) {
      ctx.warn(fmt::format("inputs have ranks {} and {}", ranked->rank(), s.rank()));
      ctx.setOutput(0, t, unknownDims(rank));
      return true;
    }
    for (size_t d = 0; d < s.rank(); ++d) {
      if (d == *axis) {
        out[d] = out[d] + s[d];
      } else if (first[d] || (!out[d].isStatic() && !s[d].isUnknown())) {
        if (!first[d] && out[d].isSymbolic() && s[d].isSymbolic()) continue;  // keep the first
        out[d] = s[d];
        first[d] = false;
      } else if (out[d].isStatic() && s[d].isStatic() && out[d].value() != s[d].value()) {
        ctx.warn(fmt::format("dim {} differs between inputs: {} vs {}", d, out[d].value(),
                             s[d].value()));
      }
    }
  }
  if (rank == 1) {
    std::vector<Dim> elems;
    bool known = true;
    for (size_t i = 0; i < ctx.numInputs() && known; ++i) {
      if (!ctx.hasInput(i)) continue;
      const KnownValues* kv = ctx.inValues(i);
      if (!kv) known = false;
      else elems.insert(elems.end(), kv->elems.begin(), kv->elems.end());
    }
    if (known) propagateElems(ctx, std::move(elems), false);
  }
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

// Split sizes: `split` attribute (before 13), input 1 (13+), or equal parts; opset 18's
// num_outputs makes the last part smaller when the dim does not divide.
bool split(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  size_t n = ctx.numOutputs();
  if (!x.hasRank()) {
    for (size_t i = 0; i < n; ++i) ctx.setOutput(i, t, Shape());
    return true;
  }
  auto axis = normalizeAxis(ctx.node.attrInt("axis", 0), static_cast<int64_t>(x.rank()));
  if (!axis) {
    ctx.warn("axis is out of range");
    for (size_t i = 0; i < n; ++i) ctx.setOutput(i, t, unknownDims(x.rank()));
    return true;
  }
  const Dim& d = x[*axis];
  std::vector<Dim> sizes(n);
  const KnownValues* split_input = ctx.hasInput(1) ? ctx.inValues(1) : nullptr;
  const auto* split_attr = intsAttr(ctx.node, "split");
  if (split_input && split_input->elems.size() == n) {
    sizes = split_input->elems;
  } else if (!ctx.hasInput(1) && split_attr && split_attr->size() == n) {
    for (size_t i = 0; i < n; ++i) sizes[i] = Dim::known((*split_attr)[i]);
  } else if (!ctx.hasInput(1) && !split_attr && n > 0) {
    bool uneven_ok = ctx.node.hasAttr("num_outputs");
    Dim part = d / Dim::known(static_cast<int64_t>(n));
    if (part.isUnknown() && d.isStatic() && uneven_ok) {
      int64_t chunk = (d.value() + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
      for (size_t i = 0; i < n; ++i)
        sizes[i] = Dim::known(std::max<int64_t>(
            0, std::min<int64_t>(chunk, d.value() - chunk * static_cast<int64_t>(i))));
    } else {
      if (part.isUnknown() && d.isStatic())
        ctx.warn(fmt::format("dim {} does not split into {} equal parts", d.value(), n));
      sizes.assign(n, part);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Shape s = x;
    s[*axis] = sizes[i];
    ctx.setOutput(i, t, std::move(s));
  }
  return true;
}

// Length of x[start:end:step] on a dim; see the file comment for symbolic dims.
Dim sliceLength(const Dim& d, const Dim& start_d, const Dim& end_d, int64_t step) {
  if (!start_d.isStatic() || step == 0) return Dim::unknown();
  int64_t start = start_d.value();
  int64_t end;
  if (end_d.isStatic()) end = end_d.value();
  else if (end_d.provablyEqual(d)) end = std::numeric_limits<int64_t>::max();
  else return Dim::unknown();
  if (d.isStatic()) return Dim::known(sliceRange(d.value(), start, end, step).count);
  if (d.isUnknown()) return Dim::unknown();
  if (step == 1 && start >= 0 && end >= kToEnd) return d - Dim::known(start);
  if (step == 1 && start >= 0 && end < 0 && end > -kToEnd) return d + Dim::known(end - start);
  if (step == -1 && (start == -1 || start >= kToEnd) && end <= -kToEnd) return d;
  return Dim::unknown();
}

// Slice-1 reads starts/ends/axes attributes; from opset 10 they are inputs, plus steps.
bool slice(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  if (!x.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  auto fromAttr = [&](const char* name) -> std::optional<KnownValues> {
    const auto* a = intsAttr(ctx.node, name);
    if (!a) return std::nullopt;
    KnownValues kv;
    for (int64_t v : *a) kv.elems.push_back(Dim::known(v));
    return kv;
  };
  auto fromInput = [&](size_t i) -> std::optional<KnownValues> {
    if (const KnownValues* kv = ctx.inValues(i)) return *kv;
    return std::nullopt;
  };
  bool attrs = ctx.opset < 10 && !ctx.hasInput(1);
  auto starts = attrs ? fromAttr("starts") : fromInput(1);
  auto ends = attrs ? fromAttr("ends") : fromInput(2);
  bool axes_given = attrs ? ctx.node.hasAttr("axes") : ctx.hasInput(3);
  auto axes = attrs ? fromAttr("axes") : fromInput(3);
  bool steps_given = !attrs && ctx.hasInput(4);
  auto steps = steps_given ? fromInput(4) : std::nullopt;

  Shape out = x;
  if (!starts || !ends || (axes_given && (!axes || !axes->allStatic())) ||
      (steps_given && (!steps || !steps->allStatic()))) {
    // Which dims change is known only when the axes are.
    if (axes_given && axes && axes->allStatic()) {
      for (const Dim& a : axes->elems)
        if (auto n = normalizeAxis(a.value(), rank)) out[*n] = Dim::unknown();
    } else {
      out = unknownDims(x.rank());
    }
    ctx.setOutput(0, t, std::move(out));
    return true;
  }
  size_t count = starts->elems.size();
  if (ends->elems.size() != count || (axes_given && axes->elems.size() != count) ||
      (steps_given && steps->elems.size() != count)) {
    ctx.warn("starts, ends, axes and steps differ in length");
    ctx.setOutput(0, t, unknownDims(x.rank()));
    return true;
  }
  for (size_t i = 0; i < count; ++i) {
    int64_t a = axes_given ? axes->elems[i].value() : static_cast<int64_t>(i);
    auto axis = normalizeAxis(a, rank);
    if (!axis) {
      ctx.warn(fmt::format("axis {} is out of range for rank {}", a, rank));
      ctx.setOutput(0, t, unknownDims(x.rank()));
      return true;
    }
    int64_t step = steps_given ? steps->elems[i].value() : 1;
    out[*axis] = sliceLength(x[*axis], starts->elems[i], ends->elems[i], step);
  }
  // Slicing known values (a shape vector) keeps them known.
  const KnownValues* kv = ctx.inValues(0);
  if (kv && x.rank() == 1 && count == 1 && out[0].isStatic() && x[0].isStatic() &&
      starts->elems[0].isStatic() && static_cast<int64_t>(kv->elems.size()) == x[0].value()) {
    int64_t n = x[0].value(), step = steps_given ? steps->elems[0].value() : 1;
    int64_t start = starts->elems[0].value();
    if (start < 0) start += n;
    start = step > 0 ? std::clamp<int64_t>(start, 0, n) : std::clamp<int64_t>(start, 0, n - 1);
    std::vector<Dim> elems;
    for (int64_t k = 0, at = start; k < out[0].value(); ++k, at += step)
      elems.push_back(kv->elems[at]);
    propagateElems(ctx, std::move(elems), false);
  }
  ctx.setOutput(0, t, std::move(out));
  return true;
}

bool gather(RuleContext& ctx) {
  const Shape& data = ctx.inShape(0);
  const Shape& indices = ctx.inShape(1);
  DType t = ctx.inDType(0);
  if (!data.hasRank() || !indices.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  auto axis = normalizeAxis(ctx.node.attrInt("axis", 0), static_cast<int64_t>(data.rank()));
  if (!axis) {
    ctx.warn("axis is out of range");
    ctx.setOutput(0, t, Shape());
    return true;
  }
  std::vector<Dim> out(data.dims().begin(), data.dims().begin() + *axis);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), data.dims().begin() + *axis + 1, data.dims().end());
  const KnownValues* kv = ctx.inValues(0);
  const KnownValues* idx = ctx.inValues(1);
  if (kv && idx && data.rank() == 1 && idx->allStatic() && indices.rank() <= 1) {
    int64_t n = static_cast<int64_t>(kv->elems.size());
    std::vector<Dim> elems;
    for (const Dim& i : idx->elems) {
      int64_t k = i.value() < 0 ? i.value() + n : i.value();
      if (k < 0 || k >= n) {
        ctx.warn(fmt::format("index {} is out of range for {} elements", i.value(), n));
        elems.clear();
        break;
      }
      elems.push_back(kv->elems[k]);
    }
    if (!elems.empty()) propagateElems(ctx, std::move(elems), indices.rank() == 0);
  }
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

bool gatherElements(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(0), ctx.inShape(1));
  return true;
}

// GatherND: indices[:-1] + data[batch_dims + indices[-1]:].
bool gatherND(RuleContext& ctx) {
  const Shape& data = ctx.inShape(0);
  const Shape& indices = ctx.inShape(1);
  int64_t b = ctx.node.attrInt("batch_dims", 0);
  Shape out;
  if (data.hasRank() && indices.hasRank() && indices.rank() >= 1 && indices.dims().back().isStatic()) {
    int64_t last = indices.dims().back().value();
    // batch_dims counts leading dims of both inputs; the spec has it below both ranks.
    if (b < 0 || b >= static_cast<int64_t>(std::min(data.rank(), indices.rank()))) {
      ctx.warn(fmt::format("batch_dims {} is out of range for ranks {} and {}", b, data.rank(),
                           indices.rank()));
    } else if (last <= static_cast<int64_t>(data.rank()) - b) {
      std::vector<Dim> dims(indices.dims().begin(), indices.dims().end() - 1);
      dims.insert(dims.end(), data.dims().begin() + b + last, data.dims().end());
      out = Shape(std::move(dims));
    } else {
      ctx.warn("indices address more dims than data has");
    }
  }
  ctx.setOutput(0, ctx.inDType(0), std::move(out));
  return true;
}

bool sameAsData(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  return true;
}

// The target of Expand, Tile and friends as a shape, from known values or the input's length.
Shape shapeFromValues(RuleContext& ctx, size_t input) {
  if (const KnownValues* kv = ctx.inValues(input)) return Shape(kv->elems);
  const Shape& s = ctx.inShape(input);
  if (s.hasRank() && s.rank() == 1 && s[0].isStatic()) return unknownDims(s[0].value());
  return Shape();
}

bool expand(RuleContext& ctx) {
  Shape target = shapeFromValues(ctx, 1);
  ctx.setOutput(0, ctx.inDType(0), broadcastOrWarn(ctx, ctx.inShape(0), target));
  return true;
}

bool tile(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  if (!x.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  Shape out = unknownDims(x.rank());
  const KnownValues* repeats = ctx.opset >= 6 ? ctx.inValues(1) : nullptr;
  if (repeats && repeats->elems.size() == x.rank()) {
    for (size_t i = 0; i < x.rank(); ++i) out[i] = x[i] * repeats->elems[i];
  } else if (repeats) {
    ctx.warn(fmt::format("{} repeats for rank {}", repeats->elems.size(), x.rank()));
  }
  ctx.setOutput(0, t, std::move(out));
  return true;
}

// Pads: `paddings` (opset 1), `pads` attribute (2-10), input 1 (11+), with axes input 3 (18+).
bool pad(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  if (!x.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  std::optional<std::vector<Dim>> pads;
  if (ctx.opset < 11 && !ctx.hasInput(1)) {
    const auto* a = intsAttr(ctx.node, ctx.opset < 2 ? "paddings" : "pads");
    if (!a) a = intsAttr(ctx.node, "pads");
    if (a) {
      pads.emplace();
      for (int64_t v : *a) pads->push_back(Dim::known(v));
    }
  } else if (const KnownValues* kv = ctx.inValues(1)) {
    pads = kv->elems;
  }
  std::vector<int64_t> axes;
  bool axes_known = true;
  if (ctx.hasInput(3)) {
    auto a = ctx.inInts(3);
    if (a) axes = *a;
    axes_known = a.has_value();
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  Shape out = x;
  if (!axes_known) {
    ctx.setOutput(0, t, unknownDims(x.rank()));
    return true;
  }
  if (!pads || pads->size() != 2 * axes.size()) {
    if (pads) ctx.warn(fmt::format("{} pads for {} axes", pads->size(), axes.size()));
    for (int64_t a : axes)
      if (auto n = normalizeAxis(a, rank)) out[*n] = Dim::unknown();
    ctx.setOutput(0, t, std::move(out));
    return true;
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    auto n = normalizeAxis(axes[i], rank);
    if (!n) {
      ctx.warn(fmt::format("axis {} is out of range", axes[i]));
      continue;
    }
    out[*n] = x[*n] + (*pads)[i] + (*pads)[i + axes.size()];
  }
  ctx.setOutput(0, t, std::move(out));
  return true;
}

// DepthToSpace: [N, C/(b*b), H*b, W*b]; SpaceToDepth the inverse.
template <bool kToSpace>
bool depthSpace(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  Shape out = unknownDims(4);
  Dim b = Dim::known(ctx.node.attrInt("blocksize", 1));
  if (x.hasRank() && x.rank() == 4) {
    out[0] = x[0];
    out[1] = kToSpace ? x[1] / (b * b) : x[1] * b * b;
    out[2] = kToSpace ? x[2] * b : x[2] / b;
    out[3] = kToSpace ? x[3] * b : x[3] / b;
  }
  ctx.setOutput(0, ctx.inDType(0), std::move(out));
  return true;
}

Dim scaleDim(const Dim& d, double scale) {
  if (!(scale > 0) || !std::isfinite(scale)) return Dim::unknown();  // the kernel reports it
  if (d.isStatic()) {
    const double v = std::floor(static_cast<double>(d.value()) * scale);
    return v < 4611686018427387904.0 ? Dim::known(static_cast<int64_t>(v)) : Dim::unknown();
  }
  if (d.isSymbolic() && scale >= 1 && scale == std::floor(scale) && scale < 1e6)
    return d * Dim::known(static_cast<int64_t>(scale));
  return Dim::unknown();
}

// Resize: sizes win over scales; opset 18 adds `axes` and keep_aspect_ratio_policy.
// Upsample-7 has a `scales` attribute, Upsample-9 an input.
bool resize(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  DType t = ctx.inDType(0);
  if (!x.hasRank()) {
    ctx.setOutput(0, t, Shape());
    return true;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  bool is_upsample = ctx.node.opType() == "Upsample";
  size_t scales_input = is_upsample || ctx.opset < 11 ? 1 : 2;
  std::optional<std::vector<double>> scales;
  if (is_upsample && ctx.opset < 9) {
    scales = std::vector<double>();
    for (float f : ctx.node.attrFloats("scales")) scales->push_back(f);
  } else if (ctx.hasInput(scales_input)) {
    scales = ctx.inDoubles(scales_input);
  }
  const KnownValues* sizes = !is_upsample && ctx.opset >= 11 && ctx.hasInput(3) ? ctx.inValues(3)
                                                                                 : nullptr;
  std::vector<int64_t> axes;
  if (const auto* a = intsAttr(ctx.node, "axes")) {
    for (int64_t v : *a) {
      auto n = normalizeAxis(v, rank);
      if (!n) {
        ctx.warn(fmt::format("axis {} is out of range", v));
        ctx.setOutput(0, t, unknownDims(x.rank()));
        return true;
      }
      axes.push_back(static_cast<int64_t>(*n));
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  Shape out = x;
  if (sizes && !sizes->elems.empty()) {
    if (sizes->elems.size() != axes.size()) {
      ctx.warn(fmt::format("{} sizes for {} axes", sizes->elems.size(), axes.size()));
      ctx.setOutput(0, t, unknownDims(x.rank()));
      return true;
    }
    std::string policy = ctx.node.attrString("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = sizes->elems[i];
    } else {
      // One scale for all axes: the smallest (not_larger) or largest (not_smaller) ratio.
      std::optional<double> scale;
      for (size_t i = 0; i < axes.size(); ++i) {
        const Dim& in = x[axes[i]];
        const Dim& sz = sizes->elems[i];
        if (!in.isStatic() || !sz.isStatic() || in.value() == 0) {
          scale.reset();
          break;
        }
        double r = static_cast<double>(sz.value()) / static_cast<double>(in.value());
        if (!scale || (policy == "not_larger" ? r < *scale : r > *scale)) scale = r;
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        const Dim& in = x[axes[i]];
        const double size = scale ? std::floor(*scale * static_cast<double>(in.value()) + 0.5) : -1;
        // sizes from a file can make a ratio no dim can hold; such a dim stays unknown.
        out[axes[i]] = size >= 0 && size < 9.2e18 ? Dim::known(static_cast<int64_t>(size))
                                                  : Dim::unknown();
      }
    }
  } else if (scales && !scales->empty()) {
    if (scales->size() != axes.size()) {
      ctx.warn(fmt::format("{} scales for {} axes", scales->size(), axes.size()));
      ctx.setOutput(0, t, unknownDims(x.rank()));
      return true;
    }
    for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = scaleDim(x[axes[i]], (*scales)[i]);
  } else {
    for (int64_t a : axes) out[a] = Dim::unknown();
  }
  ctx.setOutput(0, t, std::move(out));
  return true;
}

}  // namespace

void registerTensorRules(RuleRegistry& r) {
  r.add("", "Reshape", reshape);
  r.add("", "Transpose", transpose);
  r.add("", "Flatten", flatten);
  r.add("", "Squeeze", squeeze);
  r.add("", "Unsqueeze", unsqueeze);
  r.add("", "Concat", concat);
  r.add("", "Split", split);
  r.add("", "Slice", slice);
  r.add("", "Gather", gather);
  r.add("", "GatherElements", gatherElements);
  r.add("", "GatherND", gatherND);
  for (const char* op : {"Scatter", "ScatterElements", "ScatterND", "ReverseSequence"})
    r.add("", op, sameAsData);
  r.add("", "Expand", expand);
  r.add("", "Tile", tile);
  r.add("", "Pad", pad);
  r.add("", "DepthToSpace", depthSpace<true>);
  r.add("", "SpaceToDepth", depthSpace<false>);
  r.add("", "Resize", resize);
  r.add("", "Upsample", resize);
}

}  // namespace fusectl::shape_rules
