// Reading and writing folded constants in double; BatchNormalization as a per-channel affine map.
#include "constant_math.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "fusectl/graph/clip_bounds.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"

namespace fusectl::passes {

bool isFoldableFloat(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16;
}

std::optional<double> exactReciprocal(double v, DType t) {
  if (!std::isfinite(v) || v == 0) return std::nullopt;
  int exponent = 0;
  if (std::fabs(std::frexp(v, &exponent)) != 0.5) return std::nullopt;
  double smallest_normal = 2.2250738585072014e-308, largest = 1.7976931348623157e+308;
  switch (t) {
    case DType::Float:
    case DType::BFloat16:  // float32's exponent range, 8 significant bits
      smallest_normal = 1.1754943508222875e-38;
      largest = t == DType::Float ? 3.4028234663852886e+38 : 3.3895313892515355e+38;
      break;
    case DType::Float16:
      smallest_normal = 6.103515625e-05;
      largest = 65504.0;
      break;
    case DType::Double: break;
    default: return std::nullopt;
  }
  const double r = 1.0 / v;
  if (std::fabs(r) < smallest_normal || std::fabs(r) > largest) return std::nullopt;
  return r;
}

std::vector<double> constantAsDoubles(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  // Direct loops for the common dtypes: valueAsDouble re-derives the element count on every
  // call, which made folding 25k Conv weights cost seconds.
  // Weights mapped from a file need not be aligned: elements are read with memcpy.
  const uint8_t* bytes = t.bytes();
  if (t.dtype() == DType::Float) {
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, bytes + 4 * i, 4);
      out[static_cast<size_t>(i)] = v;
    }
  } else if (t.dtype() == DType::Double) {
    std::memcpy(out.data(), bytes, static_cast<size_t>(n) * 8);
  } else {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = t.valueAsDouble(i);
  }
  return out;
}

DoubleTensor constantAsDoubleTensor(const Tensor& t) { return {t.dims(), constantAsDoubles(t)}; }

DoubleTensor broadcastApply(const DoubleTensor& a, const DoubleTensor& b,
                            double (*f)(double, double)) {
  const size_t rank = std::max(a.dims.size(), b.dims.size());
  // Dims right-aligned to `rank`, padded with 1 on the left.
  auto aligned = [rank](const std::vector<int64_t>& d) {
    std::vector<int64_t> out(rank - d.size(), 1);
    out.insert(out.end(), d.begin(), d.end());
    return out;
  };
  std::vector<int64_t> da = aligned(a.dims), db = aligned(b.dims);
  DoubleTensor out;
  out.dims.resize(rank);
  int64_t total = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (da[i] != db[i] && da[i] != 1 && db[i] != 1) {
      throwInternal(fmt::format("broadcastApply: dims [{}] and [{}] do not broadcast",
                                fmt::join(a.dims, ","), fmt::join(b.dims, ",")));
    }
    out.dims[i] = da[i] == 1 ? db[i] : da[i];
    total *= out.dims[i];
  }
  out.values.resize(static_cast<size_t>(total));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < rank; ++i) {
      ia = ia * da[i] + (da[i] == 1 ? 0 : idx[i]);
      ib = ib * db[i] + (db[i] == 1 ? 0 : idx[i]);
    }
    out.values[static_cast<size_t>(flat)] =
        f(a.values[static_cast<size_t>(ia)], b.values[static_cast<size_t>(ib)]);
    for (size_t i = rank; i-- > 0;) {
      if (++idx[i] < out.dims[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

namespace {

// double -> float rounded to odd (truncate, then set the last bit when inexact). A float that
// is rounded to odd then rounds to nearest-even at half precision exactly as the double would
// directly (24 bits >= 11 + 2), so float16/bfloat16 results are rounded once.
float toFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

void storeDoubles(DType dtype, const double* values, size_t n, uint8_t* dst) {
  switch (dtype) {
    case DType::Float:
      for (size_t i = 0; i < n; ++i) {
        const float f = static_cast<float>(values[i]);
        std::memcpy(dst + i * sizeof f, &f, sizeof f);
      }
      break;
    case DType::Double: std::memcpy(dst, values, n * sizeof(double)); break;
    case DType::Float16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = kernels::floatToHalf(toFloatRoundToOdd(values[i]));
        std::memcpy(dst + i * sizeof h, &h, sizeof h);
      }
      break;
    case DType::BFloat16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = kernels::floatToBFloat16(toFloatRoundToOdd(values[i]));
        std::memcpy(dst + i * sizeof h, &h, sizeof h);
      }
      break;
    default: throwInternal(fmt::format("storeDoubles: cannot store {}", dtypeName(dtype)));
  }
}

Tensor tensorFromDoubles(DType dtype, std::vector<int64_t> dims,
                         const std::vector<double>& values) {
  Tensor t(dtype, std::move(dims));
  if (t.numel() != static_cast<int64_t>(values.size())) {
    throwInternal(
        fmt::format("tensorFromDoubles: {} values for {} elements", values.size(), t.numel()));
  }
  if (!values.empty()) storeDoubles(dtype, values.data(), values.size(), t.mutableBytes());
  return t;
}

bool batchNormAffine(const Node& bn, int64_t channels, ChannelAffine* out, Why& why) {
  static const char* kNames[] = {"", "scale", "B", "mean", "var"};
  if (bn.attrInt("spatial", 1) == 0) {
    return why.fail(bn, [&] {
      return fmt::format("{} has spatial=0 (statistics per element, not per channel)", bn.label());
    });
  }
  for (size_t i = 1; i <= 4; ++i) {
    Value* v = bn.input(i);
    if (!v || !v->initializer()) {
      return why.fail(bn, [&] {
        return fmt::format("{} input {} ({}) is not a constant", bn.label(), i, kNames[i]);
      });
    }
    const Tensor& t = *v->initializer();
    if (!isFoldableFloat(t.dtype())) {
      return why.fail(bn, [&] {
        return fmt::format("{} input '{}' ({}) is {}, expected float, double, float16 or bfloat16",
                           bn.label(), v->name(), kNames[i], dtypeName(t.dtype()));
      });
    }
    if (channels < 0 && t.dims().size() == 1) channels = t.dims()[0];
    if (t.dims().size() != 1 || t.dims()[0] != channels) {
      return why.fail(bn, [&] {
        return fmt::format(
            "{} input '{}' ({}) has shape [{}], expected [{}] (one value per "
            "channel)",
            bn.label(), v->name(), kNames[i], fmt::join(t.dims(), ","), channels);
      });
    }
  }
  if (!out) return true;
  const double eps = bn.attrFloat("epsilon", 1e-5f);
  std::vector<double> gamma = constantAsDoubles(*bn.input(1)->initializer());
  std::vector<double> beta = constantAsDoubles(*bn.input(2)->initializer());
  std::vector<double> mean = constantAsDoubles(*bn.input(3)->initializer());
  std::vector<double> var = constantAsDoubles(*bn.input(4)->initializer());
  out->scale.resize(gamma.size());
  out->shift.resize(gamma.size());
  for (size_t c = 0; c < gamma.size(); ++c) {
    out->scale[c] = gamma[c] / std::sqrt(var[c] + eps);
    out->shift[c] = beta[c] - mean[c] * out->scale[c];
  }
  return true;
}

Constraint batchNormTestMode(std::string capture, int64_t opset) {
  return {"batchnorm-test-mode:" + capture, [capture, opset](const Match& m, Why& why) {
            Node* bn = m.get(capture);
            if (opset <= 0 || opset >= 7 || bn->attrInt("is_test", 0) != 0) return true;
            return why.fail(*bn, [&] {
              return fmt::format("{} has is_test=0 (training form, opset {})", bn->label(), opset);
            });
          }};
}

Constraint constantIfPresent(std::string capture, size_t input, std::string role) {
  return {fmt::format("constant-input:{}.{}", capture, input),
          [capture, input, role](const Match& m, Why& why) {
            Node* n = m.get(capture);
            Value* v = n->input(input);
            if (!v || v->isConstant()) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} {} '{}' is not a constant ({})", n->label(), role, v->name(),
                                 nonConstantOrigin(*v));
            });
          }};
}

std::string nonConstantOrigin(const Value& v) {
  if (v.producer()) return "it is computed by " + v.producer()->label();
  if (v.isInitializer())
    return "it is an initializer that is also a graph input, so it can be overridden";
  if (v.isGraphInput()) return "it is a graph input";
  return "it comes from an outer graph";
}

Tensor transposed2d(const Tensor& w) {
  const int64_t rows = w.dims()[0], cols = w.dims()[1];
  Tensor out(w.dtype(), {cols, rows});
  const size_t size = dtypeSize(w.dtype());
  const uint8_t* src = w.bytes();
  uint8_t* dst = out.mutableBytes();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(dst + (c * rows + r) * size, src + (r * cols + c) * size, size);
  return out;
}

Value* otherOperand(const Node& n, const Value* mine) {
  if (n.input(0) != mine) return n.input(0);
  if (n.input(1) != mine) return n.input(1);
  return nullptr;
}

std::optional<double> scalarConstant(const Value* v) {
  if (!v || !v->isConstant()) return std::nullopt;
  const Tensor* t = v->initializer();
  if (t->numel() != 1) return std::nullopt;
  return t->valueAsDouble(0);
}

std::optional<std::vector<int64_t>> intsConstant(const Value* v) {
  if (!v || !v->isConstant()) return std::nullopt;
  const Tensor* t = v->initializer();
  if (t->dtype() != DType::Int64 && t->dtype() != DType::Int32) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i)
    out[static_cast<size_t>(i)] = t->valueAsInt64(i);  // exact: INT64_MAX ends are common
  return out;
}

std::optional<std::vector<int64_t>> padAmounts(const Node& pad, int64_t opset) {
  if (opset > 0 && opset < 11) {
    if (!pad.hasAttr("pads")) return std::nullopt;
    return pad.attrInts("pads");
  }
  return pad.numInputs() > 1 ? intsConstant(pad.input(1)) : std::nullopt;
}

std::optional<SliceRange> sliceRange(const Node& slice, size_t rank) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (slice.numInputs() == 1) {  // opset < 10: attributes
    starts = slice.attrInts("starts");
    ends = slice.attrInts("ends");
    axes = slice.attrInts("axes");
  } else {
    std::optional<std::vector<int64_t>> s = intsConstant(slice.input(1));
    std::optional<std::vector<int64_t>> e =
        slice.numInputs() > 2 ? intsConstant(slice.input(2)) : std::nullopt;
    if (!s || !e) return std::nullopt;
    starts = *s;
    ends = *e;
    if (slice.numInputs() > 3 && slice.input(3)) {
      std::optional<std::vector<int64_t>> a = intsConstant(slice.input(3));
      if (!a) return std::nullopt;
      axes = *a;
    }
    if (slice.numInputs() > 4 && slice.input(4)) {
      std::optional<std::vector<int64_t>> st = intsConstant(slice.input(4));
      if (!st) return std::nullopt;
      steps = *st;
    }
  }
  if (starts.size() != 1 || ends.size() != 1) return std::nullopt;
  if (axes.empty()) axes = {0};
  if (axes.size() != 1 || (!steps.empty() && steps.size() != 1)) return std::nullopt;
  return SliceRange{starts[0], ends[0],
                    axes[0] < 0 ? axes[0] + static_cast<int64_t>(rank) : axes[0],
                    steps.empty() ? 1 : steps[0]};
}

std::optional<std::pair<int64_t, int64_t>> lastAxisSpan(const Node& slice, size_t rank,
                                                        int64_t dim) {
  std::optional<SliceRange> r = sliceRange(slice, rank);
  if (!r || r->axis != static_cast<int64_t>(rank) - 1 || r->step != 1) return std::nullopt;
  const int64_t start = r->start < 0 ? r->start + dim : r->start;
  const int64_t end = r->end < 0 ? r->end + dim : std::min(r->end, dim);
  return std::make_pair(start, end);
}

std::optional<std::vector<int64_t>> unsqueezeAxes(const Node& n) {
  if (n.numInputs() >= 2 && n.input(1)) {
    if (!n.input(1)->isConstant()) return std::nullopt;
    const Tensor* t = n.input(1)->initializer();
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < t->numel(); ++i) axes.push_back(static_cast<int64_t>(t->valueAsDouble(i)));
    return axes;
  }
  if (!n.attr("axes")) return std::nullopt;
  return n.attrInts("axes");
}

Tensor int64Vector(std::vector<int64_t> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor::fromValues(DType::Int64, {n}, std::move(values));
}

Value* addLastAxisSlice(Rewriter& rw, Value* x, int64_t from, int64_t to, Value* axes,
                        const std::string& hint, Node* position) {
  NewNode slice;
  slice.op_type = "Slice";
  slice.name = hint;
  slice.naming = NodeNaming::Unique;
  slice.inputs = {x, rw.addConstant(hint + "_start", int64Vector({from})),
                  rw.addConstant(hint + "_end", int64Vector({to})), axes};
  std::vector<Dim> dims = x->shape().dims();
  dims.back() = Dim::known(to - from);
  return rw.addNode(std::move(slice), hint, ValueType{x->dtype(), Shape(std::move(dims)), {}},
                    position)
      ->output(0);
}

std::optional<std::string> standardGeluActivation(const Node& gelu, Why& why) {
  const std::string approximate = gelu.attrString("approximate", "none");
  if (approximate == "none") return std::string("Gelu");
  if (approximate == "tanh") return std::string("GeluTanh");
  why.fail(gelu, [&] {
    return fmt::format("{} has approximate='{}'; the fused epilogue computes the exact Gelu or "
                       "its tanh approximation",
                       gelu.label(), approximate);
  });
  return std::nullopt;
}

namespace {

// The float of a constant scalar input; nullopt (with `why`, about `n`) otherwise.
std::optional<float> constantScalarInput(Node& n, size_t input, const char* what, Why& why) {
  Value* v = n.input(input);
  if (!v->isConstant()) {
    why.fail(n, [&] {
      return fmt::format("{} {} '{}' is not a constant", n.label(), what, v->name());
    });
    return std::nullopt;
  }
  const Tensor* t = v->initializer();
  if (t->numel() != 1) {
    why.fail(n, [&] {
      return fmt::format("{} {} '{}' has {} elements, expected a scalar", n.label(), what,
                         v->name(), t->numel());
    });
    return std::nullopt;
  }
  return static_cast<float>(t->valueAsDouble(0));
}

}  // namespace

std::optional<EpilogueActivation> epilogueActivation(Node& act, int64_t opset, Why& why) {
  EpilogueActivation out;
  const std::string& op = act.opType();
  out.name = op;
  if (op == "Clip") {
    // The Clip kernel's defaults (fusectl/graph/clip_bounds.h): the element type's limits.
    const bool attribute_form = opset > 0 && opset < 11;
    const auto [start_lo, start_hi] =
        clipBoundsBeforeInputs(act, act.output(0)->dtype(), attribute_form);
    float lo = static_cast<float>(start_lo), hi = static_cast<float>(start_hi);
    if (!attribute_form) {
      if (act.numInputs() > 1 && act.input(1)) {
        std::optional<float> v = constantScalarInput(act, 1, "min", why);
        if (!v) return std::nullopt;
        lo = *v;
      }
      if (act.numInputs() > 2 && act.input(2)) {
        std::optional<float> v = constantScalarInput(act, 2, "max", why);
        if (!v) return std::nullopt;
        hi = *v;
      }
    }
    out.params = {lo, hi};
  } else if (op == "LeakyRelu") {
    out.params = {act.attrFloat("alpha", 0.01f)};
  } else if (op == "HardSigmoid") {
    out.params = {act.attrFloat("alpha", 0.2f), act.attrFloat("beta", 0.5f)};
  } else if (op == "Gelu" && act.domain().empty()) {
    const std::optional<std::string> gelu = standardGeluActivation(act, why);
    if (!gelu) return std::nullopt;
    out.name = *gelu;
  }
  if (!out.params.empty() && opset > 0 && opset < 8) {
    why.fail(act, [&] {
      return fmt::format(
          "{} has parameters, which need opset >= 8 to be exported portably "
          "(broadcasting Max/Min/PRelu); the model imports opset {}",
          act.label(), opset);
    });
    return std::nullopt;
  }
  return out;
}

std::optional<std::vector<int64_t>> transposePerm(const Node& n, std::string* why) {
  std::vector<int64_t> perm;
  Value* x = n.input(0);
  // An empty perm reverses the axes like an omitted one (the kernel and the shape rule agree).
  if (n.hasAttr("perm") && !n.attrInts("perm").empty()) {
    perm = n.attrInts("perm");
  } else {
    if (!x || !x->shape().hasRank()) {
      if (why) *why = fmt::format("{} has no perm and the rank of its input is unknown", n.label());
      return std::nullopt;
    }
    for (size_t i = x->shape().rank(); i > 0; --i) perm.push_back(static_cast<int64_t>(i - 1));
  }
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)]) {
      if (why) *why = fmt::format("{} perm [{}] is not a permutation", n.label(),
                                  fmt::join(perm, ","));
      return std::nullopt;
    }
    seen[static_cast<size_t>(p)] = true;
  }
  if (x && x->shape().hasRank() && x->shape().rank() != perm.size()) {
    if (why) *why = fmt::format("{} perm has {} entries for a rank-{} input", n.label(),
                                perm.size(), x->shape().rank());
    return std::nullopt;
  }
  return perm;
}

bool isIdentityPermutation(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

std::vector<int64_t> lastTwoAxesSwapped(size_t rank) {
  std::vector<int64_t> perm(rank);
  for (size_t a = 0; a < rank; ++a) perm[a] = static_cast<int64_t>(a);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return perm;
}

}  // namespace fusectl::passes
