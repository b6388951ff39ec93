// Legality conditions and constants shared by the norm fusions (norm_patterns.h).
#include "norm_patterns.h"

#include <fmt/format.h>

#include <algorithm>

#include "constant_math.h"

namespace fusectl::passes {

namespace {

std::string dimsText(const std::vector<int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

}  // namespace

std::optional<NormGeometry> normGeometry(const Node& reduce, const Value& x, Why& why) {
  const Shape& shape = x.shape();
  if (!shape.hasRank()) {
    why.fail(reduce, [&] {
      return fmt::format("'{}' has unknown rank, so the normalised axes cannot be shown to be "
                         "the last ones", x.name());
    });
    return std::nullopt;
  }
  const int64_t rank = static_cast<int64_t>(shape.rank());
  std::optional<std::vector<int64_t>> axes = constantReduceAxes(reduce);
  if (!axes) {
    why.fail(reduce, [&] {
      return fmt::format("{} reads its axes from '{}', which is not a constant", reduce.label(),
                         reduce.input(1)->name());
    });
    return std::nullopt;
  }
  if (reduce.attrInt("keepdims", 1) != 1) {
    why.fail(reduce, [&] { return fmt::format("{} has keepdims=0", reduce.label()); });
    return std::nullopt;
  }
  std::vector<int64_t> sorted = *axes;
  if (sorted.empty()) {
    if (reduce.attrInt("noop_with_empty_axes", 0) != 0) {
      why.fail(reduce, [&] {
        return fmt::format("{} reduces nothing (noop_with_empty_axes)", reduce.label());
      });
      return std::nullopt;
    }
    for (int64_t i = 0; i < rank; ++i) sorted.push_back(i);
  }
  for (int64_t& a : sorted) a = a < 0 ? a + rank : a;
  std::sort(sorted.begin(), sorted.end());
  const int64_t k = static_cast<int64_t>(sorted.size());
  bool trailing = k > 0 && k <= rank;
  for (int64_t i = 0; trailing && i < k; ++i) trailing = sorted[i] == rank - k + i;
  if (!trailing) {
    why.fail(reduce, [&] {
      return fmt::format("{} reduces axes {} of a rank-{} input: not the last axes",
                         reduce.label(), dimsText(*axes), rank);
    });
    return std::nullopt;
  }
  NormGeometry g;
  g.axis = rank - k;
  for (int64_t i = g.axis; i < rank; ++i) {
    if (!shape[i].isStatic()) {
      why.fail(reduce, [&] {
        return fmt::format("'{}' has shape {}: normalised dim {} is not static", x.name(),
                           shape.str(), i);
      });
      return std::nullopt;
    }
    g.dims.push_back(shape[i].value());
  }
  return g;
}

Constraint trailingReduceAxes(std::vector<std::string> reduces, std::string x_leaf) {
  return {"trailing-axes", [reduces, x_leaf](const Match& m, Why& why) {
            const Value* x = m.value(x_leaf);
            std::optional<NormGeometry> first;
            for (const std::string& c : reduces) {
              const Node* r = m.get(c);
              std::optional<NormGeometry> g = normGeometry(*r, *x, why);
              if (!g) return false;
              if (first && g->axis != first->axis) {
                return why.fail(*r, [&] {
                  return fmt::format("{} normalises from axis {}, {} from axis {}", r->label(),
                                     g->axis, m.get(reduces[0])->label(), first->axis);
                });
              }
              if (!first) first = g;
            }
            return true;
          }};
}

Constraint floatChain(std::vector<std::string> captures) {
  return {"float-chain", [captures](const Match& m, Why& why) {
            const DType first = m.get(captures.front())->output(0)->dtype();
            for (const std::string& c : captures) {
              const Node* n = m.get(c);
              const DType t = n->output(0)->dtype();
              if (t == first && constraints::isFusibleFloat(t)) continue;
              return why.fail(*n, [&] {
                if (t != first) {
                  return fmt::format("{} output is {}, {} is {}: the chain mixes dtypes",
                                     n->label(), dtypeName(t),
                                     m.get(captures.front())->label(), dtypeName(first));
                }
                return fmt::format("{} output is {}, not float, float16 or bfloat16 (the fused "
                                   "norms compute those in float32)",
                                   n->label(), dtypeName(t));
              });
            }
            return true;
          }};
}

Constraint constantEpsilon(std::string eps_leaf, std::string add) {
  return {"constant-epsilon", [eps_leaf, add](const Match& m, Why& why) {
            const Value* eps = m.value(eps_leaf);
            const Node* a = m.get(add);
            if (!eps->isConstant()) {
              return why.fail(*a, [&] {
                return fmt::format("epsilon '{}' is not a constant ({})", eps->name(),
                                   nonConstantOrigin(*eps));
              });
            }
            if (eps->initializer()->numel() != 1 || !isFoldableFloat(eps->dtype())) {
              return why.fail(*a, [&] {
                return fmt::format("epsilon '{}' is not one float ({} elements of {})",
                                   eps->name(), eps->initializer()->numel(),
                                   dtypeName(eps->dtype()));
              });
            }
            return true;
          }};
}

Constraint rowParameter(std::string leaf, std::string reader, std::string reduce,
                        std::string x_leaf, std::string role) {
  return {"row-parameter:" + role, [=](const Match& m, Why& why) {
            const Value* p = m.value(leaf);
            const Node* n = m.get(reader);
            if (!p->isConstant()) {
              return why.fail(*n, [&] {
                return fmt::format("{} '{}' of {} is not a constant ({})", role, p->name(),
                                   n->label(), nonConstantOrigin(*p));
              });
            }
            const DType x_type = m.value(x_leaf)->dtype();
            if (p->dtype() != x_type) {
              return why.fail(*n, [&] {
                return fmt::format("{} '{}' is {}, the normalised input is {}", role, p->name(),
                                   dtypeName(p->dtype()), dtypeName(x_type));
              });
            }
            Why quiet(false);
            std::optional<NormGeometry> g = normGeometry(*m.get(reduce), *m.value(x_leaf), quiet);
            if (!g) return why.fail(*n, "the normalised axes are unknown");
            const std::vector<int64_t>& d = p->initializer()->dims();
            const int64_t rank = static_cast<int64_t>(m.value(x_leaf)->shape().rank());
            const int64_t pr = static_cast<int64_t>(d.size());
            bool ok = pr <= rank;
            for (int64_t i = 0; ok && i < pr; ++i) {
              const int64_t axis = rank - pr + i;
              ok = d[i] == 1 || (axis >= g->axis && d[i] == g->dims[axis - g->axis]);
            }
            if (ok) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} '{}' has shape {}: it does not broadcast over the "
                                 "normalised dims {} only",
                                 role, p->name(), dimsText(d), dimsText(g->dims));
            });
          }};
}

bool standardLayerNormReplaceable(const Node& n, Why& why) {
  if (n.attrInt("stash_type", 1) != 1) {
    return why.fail(n, [&] {
      return fmt::format("{} has stash_type {}, not 1 (float statistics)", n.label(),
                         n.attrInt("stash_type", 1));
    });
  }
  for (size_t i = 1; i < n.numOutputs(); ++i) {
    if (n.output(i) && (n.output(i)->hasUses() || n.output(i)->isGraphOutput())) {
      return why.fail(n, [&] {
        return fmt::format("{} output {} '{}' (its saved statistics) is in use", n.label(), i,
                           n.output(i)->name());
      });
    }
  }
  return true;
}

float scalarValue(const Value& v) { return static_cast<float>(v.initializer()->valueAsDouble(0)); }

Tensor rowTensor(const Tensor& t, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  // Right-aligned broadcasting: the leading dims of t beyond `dims` are all 1 (rowParameter).
  const std::vector<int64_t>& td = t.dims();
  const size_t off = td.size() > dims.size() ? td.size() - dims.size() : 0;
  std::vector<int64_t> src_dims(dims.size(), 1);
  for (size_t i = off; i < td.size(); ++i) src_dims[dims.size() - (td.size() - i)] = td[i];
  std::vector<int64_t> stride(dims.size(), 0);
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    stride[i] = src_dims[i] == 1 ? 0 : s;
    s *= src_dims[i];
  }
  // Doubles hold every value of the parameter's dtype exactly, so the copy is exact.
  std::vector<double> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < dims.size(); ++d) src += idx[d] * stride[d];
    out[static_cast<size_t>(i)] = t.valueAsDouble(src);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return tensorFromDoubles(t.dtype(), dims, out);
}

Tensor filledTensor(DType dtype, const std::vector<int64_t>& dims, float value) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return tensorFromDoubles(dtype, dims, std::vector<double>(static_cast<size_t>(n), value));
}

}  // namespace fusectl::passes
