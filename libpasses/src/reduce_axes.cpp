// Reduce* axes from the attribute or the constant input (reduce_axes.h).
#include "reduce_axes.h"

#include <algorithm>

namespace fusectl::passes {

std::optional<std::vector<int64_t>> constantReduceAxes(const Node& reduce) {
  if (const Attribute* a = reduce.attr("axes")) return a->ints;
  const bool has_axes_input = reduce.numInputs() > 1 && reduce.input(1) != nullptr;
  if (!has_axes_input) {
    if (reduce.attrInt("noop_with_empty_axes", 0) != 0) return std::nullopt;
    return std::vector<int64_t>{};
  }
  const Value* axes = reduce.input(1);
  if (!axes->isConstant()) return std::nullopt;
  const Tensor* t = axes->initializer();
  if (t->dtype() != DType::Int64 || t->dims().size() != 1) return std::nullopt;
  if (t->numel() == 0 && reduce.attrInt("noop_with_empty_axes", 0) != 0) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) out[i] = static_cast<int64_t>(t->valueAsDouble(i));
  return out;
}

std::optional<std::vector<int64_t>> normalizedAxes(const std::vector<int64_t>& axes, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t i = 0; i < r; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    if (a < -r || a >= r) return std::nullopt;
    out.push_back(a < 0 ? a + r : a);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) return std::nullopt;
  return out;
}

bool reducesLastAxes(const Node& reduce, size_t rank, size_t count) {
  const std::optional<std::vector<int64_t>> axes = constantReduceAxes(reduce);
  if (!axes || count > rank) return false;
  const std::optional<std::vector<int64_t>> sorted = normalizedAxes(*axes, rank);
  if (!sorted || sorted->size() != count) return false;
  for (size_t i = 0; i < count; ++i)
    if ((*sorted)[i] != static_cast<int64_t>(rank - count + i)) return false;
  return true;
}

}  // namespace fusectl::passes
