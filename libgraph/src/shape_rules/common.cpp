// Helpers shared by the shape rule files.
#include <fmt/format.h>

#include "shape_rules/rules.h"

namespace fusectl::shape_rules {

std::optional<size_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return static_cast<size_t>(axis < 0 ? axis + rank : axis);
}

Shape unknownDims(size_t rank) { return Shape(std::vector<Dim>(rank)); }

const std::vector<int64_t>* intsAttr(const Node& n, std::string_view name) {
  const Attribute* a = n.attr(name);
  return a && a->kind == AttrKind::Ints ? &a->ints : nullptr;
}

Shape broadcastOrWarn(RuleContext& ctx, const Shape& a, const Shape& b) {
  if (auto s = broadcastShapes(a, b)) return std::move(*s);
  ctx.warn(fmt::format("shapes {} and {} cannot broadcast", a.str(), b.str()));
  return unknownDims(std::max(a.rank(), b.rank()));
}

void propagateInput(RuleContext& ctx, size_t out, size_t in) {
  ctx.setOutputType(out, ctx.inType(in));
}

}  // namespace fusectl::shape_rules
