// Layout chains as strided views (layout_views.h).
#include "layout_views.h"

#include <algorithm>
#include <numeric>

#include "constant_math.h"

namespace fusectl::passes {

StridedLayout StridedLayout::rowMajor(const std::vector<int64_t>& sizes) {
  StridedLayout l;
  l.sizes = sizes;
  l.strides.assign(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) l.strides[d - 1] = l.strides[d] * sizes[d];
  return l;
}

bool StridedLayout::isRowMajor() const {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

StridedLayout StridedLayout::transposed(const std::vector<int64_t>& perm) const {
  StridedLayout l;
  for (int64_t p : perm) {
    l.sizes.push_back(sizes[static_cast<size_t>(p)]);
    l.strides.push_back(strides[static_cast<size_t>(p)]);
  }
  return l;
}

// The dims are taken from the back in chunks that are contiguous among themselves (each dim's
// stride its inner neighbour's stride times its extent); the new dims must split each chunk
// exactly, the way a view of a strided tensor is computed.
std::optional<StridedLayout> StridedLayout::reshaped(const std::vector<int64_t>& new_sizes) const {
  const auto product = [](const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<int64_t>());
  };
  const int64_t numel = product(sizes);
  if (numel != product(new_sizes) || numel == 0) return std::nullopt;
  StridedLayout out;
  out.sizes = new_sizes;
  out.strides.assign(new_sizes.size(), 1);
  if (sizes.empty()) return out;  // a scalar: every dim of the new shape has extent 1
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[static_cast<size_t>(d)];
    const bool chunk_ends =
        d == 0 || (sizes[static_cast<size_t>(d - 1)] != 1 &&
                   strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_base);
    if (!chunk_ends) continue;
    while (view_d >= 0 &&
           (view_numel < tensor_numel || new_sizes[static_cast<size_t>(view_d)] == 1)) {
      out.strides[static_cast<size_t>(view_d)] = view_numel * chunk_base;
      view_numel *= new_sizes[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base = strides[static_cast<size_t>(d - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

std::optional<LayoutStep> layoutStepOf(const Node& n) {
  if (!n.domain().empty() || n.numInputs() < 1 || n.numOutputs() < 1 || !n.output(0) ||
      !n.input(0))
    return std::nullopt;
  const Shape& in = n.input(0)->shape();
  const Shape& out = n.output(0)->shape();
  if (!in.isStatic() || !out.isStatic()) return std::nullopt;
  LayoutStep step;
  if (n.is("Transpose")) {
    std::optional<std::vector<int64_t>> perm = transposePerm(n, nullptr);
    if (!perm) return std::nullopt;
    step.perm = *perm;
    return step;
  }
  if (n.is("Reshape") || n.is("Squeeze") || n.is("Unsqueeze") || n.is("Flatten") ||
      n.is("Identity")) {
    step.sizes = out.staticDims();
    return step;
  }
  return std::nullopt;
}

std::optional<StridedLayout> applyLayoutSteps(StridedLayout layout,
                                              const std::vector<LayoutStep>& steps) {
  for (const LayoutStep& s : steps) {
    if (!s.perm.empty()) {
      if (s.perm.size() != layout.sizes.size()) return std::nullopt;
      layout = layout.transposed(s.perm);
      continue;
    }
    std::optional<StridedLayout> next = layout.reshaped(s.sizes);
    if (!next) return std::nullopt;
    layout = std::move(*next);
  }
  return layout;
}

Value* rowMajorSource(Value* v, const std::vector<LayoutStep>& then, size_t max_steps) {
  // chain[i] is the value i steps up from v, steps[i] the step from chain[i + 1] to chain[i].
  std::vector<Value*> chain{v};
  std::vector<LayoutStep> steps;
  while (chain.size() <= max_steps) {
    Node* p = chain.back()->producer();
    std::optional<LayoutStep> step = p ? layoutStepOf(*p) : std::nullopt;
    if (!step) break;
    steps.push_back(std::move(*step));
    chain.push_back(p->input(0));
  }
  for (size_t up = chain.size(); up-- > 0;) {
    if (!chain[up]->shape().isStatic()) continue;
    std::vector<LayoutStep> path(steps.rend() - static_cast<std::ptrdiff_t>(up), steps.rend());
    path.insert(path.end(), then.begin(), then.end());
    std::optional<StridedLayout> l =
        applyLayoutSteps(StridedLayout::rowMajor(chain[up]->shape().staticDims()), path);
    if (l && l->isRowMajor()) return chain[up];
  }
  return nullptr;
}

Value* rowMajorSink(Value* v, const std::vector<int64_t>& source_sizes,
                       const std::vector<LayoutStep>& before, size_t max_steps) {
  std::vector<LayoutStep> path = before;
  Value* best = v;
  Value* at = v;
  for (size_t i = 0; i < max_steps; ++i) {
    if (at->isGraphOutput() || at->consumers().size() != 1) break;
    Node* reader = at->consumers().front();
    if (reader->input(0) != at) break;
    std::optional<LayoutStep> step = layoutStepOf(*reader);
    if (!step) break;
    path.push_back(std::move(*step));
    at = reader->output(0);
    std::optional<StridedLayout> l =
        applyLayoutSteps(StridedLayout::rowMajor(source_sizes), path);
    if (!l) break;
    if (l->isRowMajor()) best = at;
  }
  return best;
}

}  // namespace fusectl::passes
