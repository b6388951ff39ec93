// ai.onnx.ml LabelEncoder: maps each element through the keys -> values table of its
// attributes (keys_strings/int64s/floats or, opset 4, keys_tensor; the same for values), and
// anything else to the default (default_string "_Unused", default_int64 -1, default_float -0.0,
// or default_tensor). Numeric keys are compared as doubles; the output takes the values' dtype.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

// One side of the table: strings, or numbers with the dtype they came in.
struct Column {
  bool is_string = false;
  DType dtype = DType::Undefined;
  std::vector<std::string> strings;
  std::vector<double> numbers;
  size_t size() const { return is_string ? strings.size() : numbers.size(); }
};

Column tensorColumn(const KernelContext& ctx, const Tensor& t) {
  Column c;
  c.dtype = t.dtype();
  if (t.dtype() == DType::String) {
    c.is_string = true;
    c.strings = t.strings();
    return c;
  }
  const HostTensor h = HostTensor::fromTensor(t);
  for (int64_t i = 0; i < h.numel(); ++i) {
    HostTensor one = HostTensor::borrow(
        t.dtype(), {}, static_cast<const char*>(h.raw()) + i * dtypeSize(t.dtype()), nullptr);
    c.numbers.push_back(kutil::readScalar(ctx, one));
  }
  return c;
}

// The column named `prefix`_strings/_int64s/_floats/_tensor, if any.
bool readColumn(const KernelContext& ctx, const std::string& prefix, Column& out) {
  const Node& n = ctx.node();
  if (const Attribute* a = n.attr(prefix + "_strings")) {
    out.is_string = true;
    out.dtype = DType::String;
    out.strings = a->strings;
    return true;
  }
  if (const Attribute* a = n.attr(prefix + "_int64s")) {
    out.dtype = DType::Int64;
    out.numbers.assign(a->ints.begin(), a->ints.end());
    return true;
  }
  if (const Attribute* a = n.attr(prefix + "_floats")) {
    out.dtype = DType::Float;
    out.numbers.assign(a->floats.begin(), a->floats.end());
    return true;
  }
  if (const Attribute* a = n.attr(prefix + "_tensor")) {
    out = tensorColumn(ctx, a->t);
    return true;
  }
  return false;
}

void labelEncoderKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  Column keys, values;
  if (!readColumn(ctx, "keys", keys) || !readColumn(ctx, "values", values))
    ctx.fail("needs a keys_* and a values_* attribute");
  if (keys.size() != values.size())
    ctx.fail(fmt::format("{} keys but {} values", keys.size(), values.size()));
  // The default for unmatched elements, in the values' type.
  std::string default_string = "_Unused";
  double default_number = values.dtype == DType::Int64 ? -1.0 : -0.0;
  if (const Attribute* d = ctx.node().attr("default_tensor")) {
    const Column dc = tensorColumn(ctx, d->t);
    if (dc.is_string && !dc.strings.empty()) default_string = dc.strings[0];
    if (!dc.is_string && !dc.numbers.empty()) default_number = dc.numbers[0];
  } else if (values.is_string) {
    default_string = ctx.attrString("default_string", "_Unused");
  } else if (values.dtype == DType::Int64) {
    default_number = static_cast<double>(ctx.attrInt("default_int64", -1));
  } else {
    default_number = ctx.attrFloat("default_float", -0.0f);
  }
  // Each input element's row in the table, or -1.
  std::vector<int64_t> row(static_cast<size_t>(x.numel()), -1);
  if (x.dtype() == DType::String) {
    if (!keys.is_string) ctx.fail("string input needs string keys");
    std::map<std::string, int64_t> index;
    for (size_t i = 0; i < keys.strings.size(); ++i)
      index.emplace(keys.strings[i], static_cast<int64_t>(i));
    for (size_t i = 0; i < row.size(); ++i)
      if (auto it = index.find(x.strings()[i]); it != index.end()) row[i] = it->second;
  } else {
    if (keys.is_string) ctx.fail("numeric input needs numeric keys");
    std::map<double, int64_t> index;
    for (size_t i = 0; i < keys.numbers.size(); ++i)
      index.emplace(keys.numbers[i], static_cast<int64_t>(i));
    HostTensor one;
    for (size_t i = 0; i < row.size(); ++i) {
      one = HostTensor::borrow(
          x.dtype(), {}, static_cast<const char*>(x.raw()) + i * dtypeSize(x.dtype()), nullptr);
      if (auto it = index.find(kutil::readScalar(ctx, one)); it != index.end()) row[i] = it->second;
    }
  }
  HostTensor& out = ctx.allocateOutput(0, values.dtype, x.dims());
  if (values.is_string) {
    out.strings().resize(row.size());
    for (size_t i = 0; i < row.size(); ++i)
      out.strings()[i] = row[i] < 0 ? default_string : values.strings[static_cast<size_t>(row[i])];
    return;
  }
  HostTensor staged(DType::Double, x.dims());
  for (size_t i = 0; i < row.size(); ++i)
    staged.mutableData<double>()[i] =
        row[i] < 0 ? default_number : values.numbers[static_cast<size_t>(row[i])];
  kutil::convertTensor(ctx, staged, out);
}

}  // namespace

void registerLabelEncoderKernels(KernelRegistry& r) {
  r.add({"ai.onnx.ml", "LabelEncoder", 2, 1000, labelEncoderKernel});
}

}  // namespace fusectl::kernels
