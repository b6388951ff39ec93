// String ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch and Equal on strings.
//
// StringSplit follows Python's str.split: without a delimiter it splits on runs of whitespace
// and drops empty ends, with one it keeps empty fields; maxsplit bounds the splits. Its Y is
// padded with "" to the longest split, Z holds each count. StringNormalizer drops stopwords
// (case-insensitively unless is_case_sensitive) and then changes case (ASCII); an input left
// empty becomes one "" as the spec says. RegexFullMatch uses std::regex (ECMAScript), which
// agrees with RE2 on the common subset (classes, quantifiers, alternation, anchors).
#include <algorithm>
#include <cctype>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "broadcast.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

void requireStrings(const KernelContext& ctx, const HostTensor& t, const char* what) {
  if (t.dtype() != DType::String) ctx.fail(fmt::format("{} must be a string tensor", what));
}

// Calls fn(out_index, a_index, b_index) for every element of the broadcast of a and b.
template <typename Fn>
std::vector<int64_t> forEachBroadcast(const KernelContext& ctx, const HostTensor& a,
                                      const HostTensor& b, Fn&& fn) {
  const std::vector<int64_t> dims = broadcastDims(ctx, {&a.dims(), &b.dims()});
  const size_t rank = dims.size();
  auto strides = [&](const std::vector<int64_t>& d) {
    std::vector<int64_t> s(rank, 0);
    int64_t st = 1;
    for (size_t i = d.size(); i-- > 0;) {
      const size_t o = rank - d.size() + i;
      s[o] = d[i] == 1 ? 0 : st;
      st *= d[i];
    }
    return s;
  };
  const std::vector<int64_t> sa = strides(a.dims()), sb = strides(b.dims());
  std::vector<int64_t> pos(rank, 0);
  const int64_t n = product(dims);
  for (int64_t e = 0; e < n; ++e) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < rank; ++i) {
      ia += pos[i] * sa[i];
      ib += pos[i] * sb[i];
    }
    fn(e, ia, ib);
    for (size_t i = rank; i-- > 0;) {
      if (++pos[i] < dims[i]) break;
      pos[i] = 0;
    }
  }
  return dims;
}

void stringConcatKernel(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  requireStrings(ctx, a, "X");
  requireStrings(ctx, b, "Y");
  std::vector<std::string> out;
  const std::vector<int64_t> dims = forEachBroadcast(ctx, a, b, [&](int64_t, int64_t i, int64_t j) {
    out.push_back(a.strings()[static_cast<size_t>(i)] + b.strings()[static_cast<size_t>(j)]);
  });
  ctx.allocateOutput(0, DType::String, dims).strings() = std::move(out);
}

void stringEqualKernel(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  requireStrings(ctx, b, "B");
  std::vector<uint8_t> out;
  const std::vector<int64_t> dims = forEachBroadcast(ctx, a, b, [&](int64_t, int64_t i, int64_t j) {
    out.push_back(a.strings()[static_cast<size_t>(i)] == b.strings()[static_cast<size_t>(j)]);
  });
  HostTensor& t = ctx.allocateOutput(0, DType::Bool, dims);
  std::copy(out.begin(), out.end(), t.mutableData<uint8_t>());
}

std::vector<std::string> pythonSplit(const std::string& s, const std::string* delim,
                                     int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!delim) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = s.size();
        while (end > i && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
        parts.push_back(s.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  while (true) {
    const size_t at = s.find(*delim, start);
    if (at == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(s.substr(start));
      break;
    }
    parts.push_back(s.substr(start, at - start));
    start = at + delim->size();
  }
  return parts;
}

void stringSplitKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireStrings(ctx, x, "X");
  const std::string delim = ctx.attrString("delimiter", "");
  const int64_t maxsplit = ctx.node().hasAttr("maxsplit") ? ctx.attrInt("maxsplit", -1) : -1;
  std::vector<std::vector<std::string>> split;
  size_t widest = 0;
  for (const std::string& s : x.strings()) {
    split.push_back(pythonSplit(s, delim.empty() ? nullptr : &delim, maxsplit));
    widest = std::max(widest, split.back().size());
  }
  std::vector<int64_t> dims = x.dims();
  dims.push_back(static_cast<int64_t>(widest));
  HostTensor& y = ctx.allocateOutput(0, DType::String, dims);
  y.strings().assign(split.size() * widest, "");
  for (size_t i = 0; i < split.size(); ++i)
    std::copy(split[i].begin(), split[i].end(),
              y.strings().begin() + static_cast<std::ptrdiff_t>(i * widest));
  if (ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    HostTensor& z = ctx.allocateOutput(1, DType::Int64, x.dims());
    for (size_t i = 0; i < split.size(); ++i)
      z.mutableData<int64_t>()[i] = static_cast<int64_t>(split[i].size());
  }
}

std::string lowered(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void stringNormalizerKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireStrings(ctx, x, "X");
  if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
    ctx.fail(fmt::format("X dims {} must be [C] or [1, C]", formatDims(x.dims())));
  const std::string action = ctx.attrString("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    ctx.fail(fmt::format("unknown case_change_action '{}'", action));
  const bool case_sensitive = ctx.attrInt("is_case_sensitive", 0) != 0;
  std::vector<std::string> stop;
  if (const Attribute* a = ctx.node().attr("stopwords")) stop = a->strings;
  if (!case_sensitive)
    for (std::string& s : stop) s = lowered(s);
  std::vector<std::string> kept;
  for (const std::string& s : x.strings()) {
    const std::string key = case_sensitive ? s : lowered(s);
    if (std::find(stop.begin(), stop.end(), key) != stop.end()) continue;
    std::string v = s;
    if (action == "LOWER") v = lowered(v);
    if (action == "UPPER")
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char c) { return std::toupper(c); });
    kept.push_back(v);
  }
  if (kept.empty()) kept.push_back("");
  const int64_t c = static_cast<int64_t>(kept.size());
  HostTensor& y = ctx.allocateOutput(
      0, DType::String, x.rank() == 1 ? std::vector<int64_t>{c} : std::vector<int64_t>{1, c});
  y.strings() = std::move(kept);
}

void regexFullMatchKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireStrings(ctx, x, "X");
  const std::string pattern = ctx.attrString("pattern", "");
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    ctx.fail(fmt::format("pattern '{}' is not a valid regular expression: {}", pattern, e.what()));
  }
  HostTensor& y = ctx.allocateOutput(0, DType::Bool, x.dims());
  for (size_t i = 0; i < x.strings().size(); ++i)
    y.mutableData<uint8_t>()[i] = std::regex_match(x.strings()[i], re) ? 1 : 0;
}

void add(KernelRegistry& r, const char* op, int64_t since, KernelFn fn) {
  r.add({"", op, since, 1000, std::move(fn)});
}

}  // namespace

void registerStringKernels(KernelRegistry& r) {
  add(r, "StringConcat", 20, stringConcatKernel);
  add(r, "StringSplit", 20, stringSplitKernel);
  add(r, "StringNormalizer", 10, stringNormalizerKernel);
  add(r, "RegexFullMatch", 20, regexFullMatchKernel);
  // The general Equal kernel computes on numbers; a string-typed entry wins for strings.
  r.add({"", "Equal", 1, 1000, stringEqualKernel, DType::String});
}

}  // namespace fusectl::kernels
