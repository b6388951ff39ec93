// Shape rules for ops that make tensors from shapes or constants (Shape, Size, Constant,
// ConstantOfShape, Range, random generators) and a few shape-preserving odds and ends.
//
// Shape and Size are where known values start: Shape(x) of x:[batch,seq,64] is the int64
// vector {batch, seq, 64}, whose elements later ops can gather, concatenate and reshape with.
#include <cmath>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Shape-15 takes an optional [start, end) range, clamped like Python slicing.
bool shape(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  if (!x.hasRank()) {
    ctx.setOutput(0, DType::Int64, unknownDims(1));
    return true;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  auto clampIndex = [rank](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
  int64_t start = clampIndex(ctx.node.attrInt("start", 0));
  int64_t end = clampIndex(ctx.node.attrInt("end", rank));
  std::vector<Dim> elems;
  for (int64_t i = start; i < end; ++i) elems.push_back(x[i]);
  ctx.setOutput(0, DType::Int64, Shape({Dim::known(static_cast<int64_t>(elems.size()))}));
  ctx.setValues(0, KnownValues{false, std::move(elems)});
  return true;
}

bool size(RuleContext& ctx) {
  ctx.setOutput(0, DType::Int64, Shape::scalar());
  Dim n = ctx.inShape(0).numel();
  ctx.setValues(0, KnownValues{true, {n}});
  return true;
}

// A serialized SparseTensorProto's dense dtype and dims.
ValueType sparseConstantType(const std::string& bytes) {
  onnx::SparseTensorProto sp;
  ValueType t;
  if (!sp.ParseFromString(bytes)) return t;
  t.dtype = static_cast<DType>(sp.values().data_type());
  t.shape = Shape::ofStatic({sp.dims().begin(), sp.dims().end()});
  return t;
}

bool constant(RuleContext& ctx) {
  for (const Attribute& a : ctx.node.attributes()) {
    if (a.name == "value" && a.kind == AttrKind::Tensor) {
      ctx.setOutput(0, a.t.dtype(), Shape::ofStatic(a.t.dims()));
      return true;
    }
    if (a.name == "sparse_value") {
      ctx.setOutputType(0, sparseConstantType(a.s));
      return true;
    }
    auto count = [](size_t n) { return Shape::ofStatic({static_cast<int64_t>(n)}); };
    if (a.name == "value_int") ctx.setOutput(0, DType::Int64, Shape::scalar());
    else if (a.name == "value_ints") ctx.setOutput(0, DType::Int64, count(a.ints.size()));
    else if (a.name == "value_float") ctx.setOutput(0, DType::Float, Shape::scalar());
    else if (a.name == "value_floats") ctx.setOutput(0, DType::Float, count(a.floats.size()));
    else if (a.name == "value_string") ctx.setOutput(0, DType::String, Shape::scalar());
    else if (a.name == "value_strings") ctx.setOutput(0, DType::String, count(a.strings.size()));
    else continue;
    return true;
  }
  ctx.warn("Constant has no value attribute");
  return true;
}

bool constantOfShape(RuleContext& ctx) {
  DType t = DType::Float;
  const Attribute* value = ctx.node.attr("value");
  if (value && value->kind == AttrKind::Tensor) t = value->t.dtype();
  Shape out;
  const KnownValues* kv = ctx.inValues(0);
  if (kv) {
    out = Shape(kv->elems);
  } else if (const Shape& s = ctx.inShape(0); s.hasRank() && s.rank() == 1 && s[0].isStatic()) {
    out = unknownDims(s[0].value());
  }
  // Small integer fills stay known: PyTorch's Expand export compares them against a shape.
  auto n = out.staticNumel();
  if (out.hasRank() && out.rank() <= 1 && n && static_cast<size_t>(*n) <= kMaxKnownValues &&
      dtypeIsInteger(t)) {
    int64_t fill = value && value->kind == AttrKind::Tensor && value->t.numel() == 1
                       ? value->t.valueAsInt64(0)
                       : 0;
    ctx.setValues(0, KnownValues{out.rank() == 0, std::vector<Dim>(*n, Dim::known(fill))});
  }
  ctx.setOutput(0, t, std::move(out));
  return true;
}

// Range: max(ceil((limit - start) / delta), 0) elements; range(0, n, 1) of a symbolic n is n.
bool range(RuleContext& ctx) {
  DType t = ctx.inDType(0) != DType::Undefined ? ctx.inDType(0) : ctx.inDType(1);
  Dim n;
  const KnownValues* start = ctx.inValues(0);
  const KnownValues* limit = ctx.inValues(1);
  const KnownValues* delta = ctx.inValues(2);
  auto s = ctx.inDoubles(0), l = ctx.inDoubles(1), d = ctx.inDoubles(2);
  if (s && l && d && s->size() == 1 && l->size() == 1 && d->size() == 1 && (*d)[0] != 0) {
    // The file's values may make the count NaN, infinite or beyond int64: the dim is unknown.
    double count = std::ceil(((*l)[0] - (*s)[0]) / (*d)[0]);
    if (!(count > 0)) n = std::isnan(count) ? Dim::unknown() : Dim::known(0);
    else if (count < 9.2e18) n = Dim::known(static_cast<int64_t>(count));
  } else if (start && limit && delta && start->elems.size() == 1 && limit->elems.size() == 1 &&
             delta->elems.size() == 1 && delta->elems[0] == Dim::known(1)) {
    n = limit->elems[0] - start->elems[0];
  }
  if (n.isStatic() && start && delta && start->allStatic() && delta->allStatic() &&
      start->elems.size() == 1 && delta->elems.size() == 1 &&
      static_cast<size_t>(n.value()) <= kMaxKnownValues) {
    std::vector<Dim> elems;
    for (int64_t i = 0; i < n.value(); ++i)
      elems.push_back(start->elems[0] + Dim::known(i) * delta->elems[0]);  // overflow: unknown
    ctx.setValues(0, KnownValues{false, std::move(elems)});
  }
  ctx.setOutput(0, t, Shape({n}));
  return true;
}

bool sameAsInput(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  return true;
}

bool nonZero(RuleContext& ctx) {
  int64_t rank = ctx.inRank(0);
  ctx.setOutput(0, DType::Int64, Shape({rank >= 0 ? Dim::known(rank) : Dim(), Dim()}));
  return true;
}

// OneHot inserts a `depth`-sized axis into the indices' shape; values give the dtype.
bool oneHot(RuleContext& ctx) {
  const Shape& indices = ctx.inShape(0);
  Shape out;
  if (indices.hasRank()) {
    int64_t out_rank = static_cast<int64_t>(indices.rank()) + 1;
    auto axis = normalizeAxis(ctx.node.attrInt("axis", -1), out_rank);
    Dim depth;
    // depth is converted as the kernel converts it; a NaN, infinite, negative or huge one
    // leaves the dim unknown (the kernel refuses it).
    if (auto d = ctx.inDoubles(1); d && d->size() == 1 && (*d)[0] >= 0 && (*d)[0] < 9.2e18)
      depth = Dim::known(static_cast<int64_t>((*d)[0]));
    std::vector<Dim> dims = indices.dims();
    if (axis) dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(*axis), depth);
    out = axis ? Shape(std::move(dims)) : unknownDims(out_rank);
  }
  ctx.setOutput(0, ctx.inDType(2), std::move(out));
  return true;
}

// Generators: `dtype` attribute (default float), shape from `shape` or from the input.
bool randomLike(RuleContext& ctx) {
  DType t = ctx.node.hasAttr("dtype") ? static_cast<DType>(ctx.node.attrInt("dtype", 1))
                                      : ctx.inDType(0);
  ctx.setOutput(0, t, ctx.inShape(0));
  return true;
}

bool randomFromAttr(RuleContext& ctx) {
  DType t = static_cast<DType>(ctx.node.attrInt("dtype", 1));
  const auto* shape_attr = intsAttr(ctx.node, "shape");
  ctx.setOutput(0, t, shape_attr ? Shape::ofStatic(*shape_attr) : Shape());
  return true;
}

bool compress(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  Shape out = unknownDims(1);
  if (ctx.node.hasAttr("axis")) {
    out = x;
    if (x.hasRank()) {
      auto axis = normalizeAxis(ctx.node.attrInt("axis", 0), static_cast<int64_t>(x.rank()));
      if (axis) out[*axis] = Dim::unknown();
      else out = unknownDims(x.rank());
    }
  }
  ctx.setOutput(0, ctx.inDType(0), std::move(out));
  return true;
}

// GridSample: [N, C] + the grid's spatial dims.
bool gridSample(RuleContext& ctx) {
  const Shape& x = ctx.inShape(0);
  const Shape& grid = ctx.inShape(1);
  Shape out;
  if (grid.hasRank() && grid.rank() >= 3) {
    std::vector<Dim> dims{grid[0], x.hasRank() && x.rank() >= 2 ? x[1] : Dim()};
    dims.insert(dims.end(), grid.dims().begin() + 1, grid.dims().end() - 1);
    out = Shape(std::move(dims));
  }
  ctx.setOutput(0, ctx.inDType(0), std::move(out));
  return true;
}

}  // namespace

void registerMiscRules(RuleRegistry& r) {
  r.add("", "Shape", shape);
  r.add("", "Size", size);
  r.add("", "Constant", constant);
  r.add("", "ConstantOfShape", constantOfShape);
  r.add("", "Range", range);
  for (const char* op : {"CumSum", "Trilu"}) r.add("", op, sameAsInput);
  r.add("", "NonZero", nonZero);
  r.add("", "OneHot", oneHot);
  for (const char* op : {"RandomNormalLike", "RandomUniformLike", "Bernoulli", "EyeLike"})
    r.add("", op, randomLike);
  r.add("", "RandomNormal", randomFromAttr);
  r.add("", "RandomUniform", randomFromAttr);
  r.add("", "Compress", compress);
  r.add("", "GridSample", gridSample);
}

}  // namespace fusectl::shape_rules
