// Tensor comparison (allclose with NaN/Inf semantics) and summaries.
#include "fusectl/kernels/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "fusectl/graph/error.h"
#include "fusectl/graph/narrow_types.h"
#include "fusectl/kernels/half.h"

namespace fusectl::kernels {

namespace {

template <typename T>
T load(const HostTensor& t, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.raw()) + i * sizeof(T), sizeof(T));
  return v;
}

bool isExactType(DType d) { return dtypeIsInteger(d) || d == DType::Bool; }

// Integers compared as int64 (uint64 as its bit pattern), so large values stay exact.
int64_t elementAsInt64(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Int8: return load<int8_t>(t, i);
    case DType::UInt8: return load<uint8_t>(t, i);
    case DType::Int16: return load<int16_t>(t, i);
    case DType::UInt16: return load<uint16_t>(t, i);
    case DType::Int32: return load<int32_t>(t, i);
    case DType::UInt32: return load<uint32_t>(t, i);
    case DType::Int64: return load<int64_t>(t, i);
    case DType::UInt64: return static_cast<int64_t>(load<uint64_t>(t, i));
    case DType::Bool: return load<uint8_t>(t, i) != 0;
    default: return static_cast<int64_t>(elementAsDouble(t, i));
  }
}

std::string indexText(int64_t flat, const std::vector<int64_t>& dims) {
  if (dims.empty()) return "[" + std::to_string(flat) + "]";
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    const int64_t n = dims[d] > 0 ? dims[d] : 1;
    idx[d] = flat % n;
    flat /= n;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? "," : "") + std::to_string(idx[d]);
  return s + "]";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", v);
  return buf;
}

}  // namespace

double elementAsDouble(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float: return load<float>(t, i);
    case DType::Double: return load<double>(t, i);
    case DType::Float16: return halfToFloat(load<uint16_t>(t, i));
    case DType::BFloat16: return bfloat16ToFloat(load<uint16_t>(t, i));
    case DType::Int8: return load<int8_t>(t, i);
    case DType::UInt8: return load<uint8_t>(t, i);
    case DType::Int16: return load<int16_t>(t, i);
    case DType::UInt16: return load<uint16_t>(t, i);
    case DType::Int32: return load<int32_t>(t, i);
    case DType::UInt32: return load<uint32_t>(t, i);
    case DType::Int64: return static_cast<double>(load<int64_t>(t, i));
    case DType::UInt64: return static_cast<double>(load<uint64_t>(t, i));
    case DType::Bool: return load<uint8_t>(t, i) != 0 ? 1.0 : 0.0;
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
      return narrowFloatToDouble(load<uint8_t>(t, i), t.dtype());
    case DType::Float4E2M1:
      return narrowFloatToDouble(
          static_cast<uint8_t>(loadPacked(static_cast<const uint8_t*>(t.raw()), i, t.dtype())),
          t.dtype());
    case DType::Int4:
    case DType::UInt4:
    case DType::Int2:
    case DType::UInt2:
      return static_cast<double>(
          loadPacked(static_cast<const uint8_t*>(t.raw()), i, t.dtype()));
    default:
      throwUnsupported("cannot read " + std::string(dtypeName(t.dtype())) +
                       " elements as numbers");
  }
}

const char* rtolScaleName(RtolScale scale) {
  return scale == RtolScale::Tensor ? "tensor" : "element";
}

Tolerance Tolerance::forDType(DType t) const {
  const double epsilon = t == DType::Float16 ? 0x1p-10 : t == DType::BFloat16 ? 0x1p-7 : 0;
  Tolerance out = *this;
  out.atol = std::max(atol, half_min_epsilons * epsilon);
  out.rtol = std::max(rtol, half_min_epsilons * epsilon);
  return out;
}

CompareResult compareTensors(const HostTensor& actual, const HostTensor& expected,
                             const Tolerance& given) {
  const Tolerance tol = given.forDType(expected.dtype());
  CompareResult r;
  r.dtype_match = actual.dtype() == expected.dtype();
  r.shape_match = actual.dims() == expected.dims();
  if (!r.shape_match) {
    r.passed = false;
    r.cosine = 0;
    return r;
  }
  const int64_t n = expected.numel();
  r.count = n;

  if (actual.dtype() == DType::String || expected.dtype() == DType::String) {
    if (!r.dtype_match) {
      r.passed = false;
      return r;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (actual.strings()[i] != expected.strings()[i]) {
        if (r.first_mismatch < 0) r.first_mismatch = i;
        ++r.mismatches;
      }
    }
    r.passed = r.mismatches == 0;
    return r;
  }

  const bool exact =
      tol.exact_integers && isExactType(actual.dtype()) && isExactType(expected.dtype());
  double dot = 0, norm_a = 0, norm_e = 0;
  double atol_needed = 0;
  double scale = 0;  // max finite |e|: first, where the bound needs it; else on the way
  if (!exact && tol.rtol_scale == RtolScale::Tensor) {
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::fabs(elementAsDouble(expected, i));
      if (std::isfinite(e)) scale = std::max(scale, e);
    }
  }
  const auto rtolTerm = [&](double e) {
    return tol.rtol * (tol.rtol_scale == RtolScale::Tensor ? scale : std::fabs(e));
  };
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    double a, e;
    if (exact) {
      const int64_t ai = elementAsInt64(actual, i), ei = elementAsInt64(expected, i);
      ok = ai == ei;
      a = static_cast<double>(ai);
      e = static_cast<double>(ei);
    } else {
      a = elementAsDouble(actual, i);
      e = elementAsDouble(expected, i);
      if (std::isfinite(a) && std::isfinite(e)) {
        ok = std::fabs(a - e) <= tol.atol + rtolTerm(e);
      } else {
        ok = (std::isnan(a) && std::isnan(e)) || a == e;
        if (!ok) {
          ++r.nonfinite_mismatches;
          r.max_abs_error = HUGE_VAL;
        }
      }
    }
    if (std::isfinite(a) && std::isfinite(e)) {
      const double diff = std::fabs(a - e);
      r.max_abs_error = std::max(r.max_abs_error, diff);
      if (e != 0) r.max_rel_error = std::max(r.max_rel_error, diff / std::fabs(e));
      atol_needed = std::max(atol_needed, diff - rtolTerm(e));
      scale = std::max(scale, std::fabs(e));
      dot += a * e;
      norm_a += a * a;
      norm_e += e * e;
    }
    if (!ok) {
      if (r.first_mismatch < 0) {
        r.first_mismatch = i;
        r.first_actual = a;
        r.first_expected = e;
      }
      ++r.mismatches;
    }
  }
  if (norm_a == 0 && norm_e == 0) r.cosine = 1;
  else if (norm_a == 0 || norm_e == 0) r.cosine = 0;
  else r.cosine = std::min(1.0, dot / (std::sqrt(norm_a) * std::sqrt(norm_e)));

  r.passed = r.dtype_match && r.mismatches == 0 && r.cosine >= tol.min_cosine;
  if (!exact && r.dtype_match && r.mismatches > 0 && r.nonfinite_mismatches == 0 &&
      r.cosine >= tol.min_cosine) {
    r.atol_needed = atol_needed;
    r.max_error_of_scale = scale > 0 ? r.max_abs_error / scale : 0;
  }
  return r;
}

std::string CompareResult::describe(const std::vector<int64_t>& dims) const {
  if (!shape_match) return "shapes differ";
  std::string s;
  if (!dtype_match) s = "dtypes differ";
  if (mismatches > 0) {
    if (!s.empty()) s += "; ";
    s += std::to_string(mismatches) + " of " + std::to_string(count) + " elements differ";
    if (first_mismatch >= 0) {
      s += " (first at " + indexText(first_mismatch, dims) + ": " + num(first_actual) + " vs " +
           num(first_expected) + ")";
    }
  }
  if (s.empty() && passed) return "ok";
  if (s.empty()) s = "cosine " + num(cosine) + " below the minimum";
  s += "; max abs " + num(max_abs_error) + ", max rel " + num(max_rel_error) + ", cosine " +
       num(cosine);
  // Deep float32 networks differ by rounding after a rewrite (a fold, another summation
  // order): say what atol would accept it, so that the user can judge and set it.
  if (atol_needed >= 0) {
    s += "; every element within atol " + num(atol_needed) + " at this rtol";
    if (max_error_of_scale > 0)
      s += ", or within rtol " + num(max_error_of_scale) + " of the largest |expected|";
  }
  return s;
}

TensorSummary summarizeTensor(const HostTensor& t) {
  TensorSummary s;
  s.count = t.numel();
  if (t.dtype() == DType::String) return s;
  // Welford's running mean and variance: stable for large tensors.
  double mean = 0, m2 = 0;
  int64_t finite = 0;
  bool first = true;
  for (int64_t i = 0; i < s.count; ++i) {
    const double v = elementAsDouble(t, i);
    if (std::isnan(v)) { ++s.nan_count; continue; }
    if (std::isinf(v)) { ++s.inf_count; continue; }
    if (first) { s.min = s.max = v; first = false; }
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    ++finite;
    const double delta = v - mean;
    mean += delta / static_cast<double>(finite);
    m2 += delta * (v - mean);
  }
  s.mean = mean;
  s.stddev = finite > 0 ? std::sqrt(m2 / static_cast<double>(finite)) : 0;
  return s;
}

}  // namespace fusectl::kernels
