// Einsum on the CPU: a direct evaluation of the equation, for correctness rather than speed,
// except for the common case of a batched matrix product of two float32 operands, which runs
// the packed GEMM once per batch index (below).
//
// The equation (parseEinsumEquation: einsum_equation.h) becomes labels; "..." stands for
// broadcast dims shared by all operands (right-aligned, size 1 broadcasts); a letter of size 1
// in one operand broadcasts against another operand's size too, as numpy.einsum does. Without
// "->" the output is the ellipsis dims followed by the labels used exactly once, in
// alphabetical order, as numpy does. Each operand gets a stride
// per label (a label repeated within one operand, "ii", sums its strides: a diagonal), then every
// output element sums the product of the operands over all contracted labels. The cost is the
// product of all label sizes: a matmul costs M*N*K, as a naive loop would.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtype_dispatch.h"
#include "fusectl/graph/einsum_equation.h"
#include "fusectl/graph/error.h"
#include "gemm_micro.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

constexpr int kEllipsisBase = 1000;  // label ids of ellipsis dims: 1000, 1001, ...

// One term's labels; ellipsis dims appear as kEllipsisBase + i (i counted from the right end of
// the broadcast ellipsis block, filled in once the operand ranks are known).
struct Term {
  std::vector<int> labels;  // letters as their char code; -1 marks where "..." sits
  bool has_ellipsis = false;
};

// The parsed term's labels, the ellipsis as the -1 marker where it stands.
Term termOf(const EinsumTerm& e) {
  Term t;
  for (size_t i = 0; i <= e.letters.size(); ++i) {
    if (e.hasEllipsis() && i == static_cast<size_t>(e.ellipsis_at)) {
      t.has_ellipsis = true;
      t.labels.push_back(-1);
    }
    if (i < e.letters.size()) t.labels.push_back(e.letters[i]);
  }
  return t;
}

// Replaces the -1 marker with `n` ellipsis labels (right-aligned within `total` of them).
std::vector<int> expand(const Term& t, int n, int total) {
  std::vector<int> out;
  for (int l : t.labels) {
    if (l != -1) {
      out.push_back(l);
      continue;
    }
    for (int i = 0; i < n; ++i) out.push_back(kEllipsisBase + (total - n) + i);
  }
  return out;
}

void einsumKernel(KernelContext& ctx) {
  const std::string eq = ctx.attrString("equation", "");
  EinsumEquation equation;
  try {
    equation = parseEinsumEquation(eq);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  std::vector<std::string> terms;
  for (const EinsumTerm& t : equation.inputs) terms.push_back(t.str());
  if (terms.size() != ctx.numInputs())
    ctx.fail(
        fmt::format("equation '{}' has {} terms for {} inputs", eq, terms.size(), ctx.numInputs()));

  std::vector<HostTensor> holders(terms.size());
  std::vector<const HostTensor*> ins;
  for (size_t k = 0; k < terms.size(); ++k)
    ins.push_back(stageIn(&ctx.requireInput(k), holders[k]));
  const DType out_dtype = ctx.requireInput(0).dtype();

  // Ellipsis width: the widest operand's, shared by all.
  std::vector<Term> parsed;
  int ell = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    parsed.push_back(termOf(equation.inputs[k]));
    const int letters =
        static_cast<int>(parsed[k].labels.size()) - (parsed[k].has_ellipsis ? 1 : 0);
    const int rank = static_cast<int>(ins[k]->rank());
    if (parsed[k].has_ellipsis ? rank < letters : rank != letters)
      ctx.fail(fmt::format("term '{}' does not match an input of rank {}", terms[k], rank));
    if (parsed[k].has_ellipsis) ell = std::max(ell, rank - letters);
  }
  std::map<int, int64_t> size;  // label -> dim
  std::map<int, int> count;     // label -> occurrences over all inputs
  std::vector<std::vector<int>> labels(terms.size());
  for (size_t k = 0; k < terms.size(); ++k) {
    const int letters =
        static_cast<int>(parsed[k].labels.size()) - (parsed[k].has_ellipsis ? 1 : 0);
    labels[k] = expand(parsed[k], static_cast<int>(ins[k]->rank()) - letters, ell);
    std::map<int, int64_t> own;  // this operand's sizes: a diagonal's two dims must agree
    for (size_t d = 0; d < labels[k].size(); ++d) {
      const int l = labels[k][d];
      const int64_t n = ins[k]->dim(d);
      ++count[l];
      if (auto [mine, first] = own.emplace(l, n); !first && mine->second != n)
        ctx.fail(fmt::format("label '{}' has sizes {} and {} in input {}",
                             static_cast<char>(l), mine->second, n, k));
      // A label of size 1 in one operand broadcasts against another operand's size, as
      // numpy.einsum (ONNX's reference) and ONNX Runtime do; the strides below are 0 there.
      auto [it, fresh] = size.emplace(l, n);
      if (!fresh && it->second != n) {
        if (it->second == 1 || n == 1) it->second = std::max(it->second, n);
        else
          ctx.fail(
              fmt::format("label '{}' has sizes {} and {}", static_cast<char>(l), it->second, n));
      }
    }
  }
  std::vector<int> out_labels;
  if (equation.output) {
    // Ellipsis dims missing from an explicit output are summed, like any absent label.
    const Term o = termOf(*equation.output);
    out_labels = expand(o, ell, ell);
    for (int l : out_labels)
      if (!size.count(l))
        ctx.fail(fmt::format("output label '{}' is not in any input", static_cast<char>(l)));
  } else {
    for (int i = 0; i < ell; ++i) out_labels.push_back(kEllipsisBase + i);
    for (const auto& [l, c] : count)
      if (l < kEllipsisBase && c == 1) out_labels.push_back(l);
  }
  std::vector<int> all = out_labels;
  for (const auto& [l, n] : size)
    if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) all.push_back(l);
  const size_t n_out = out_labels.size();

  // Per operand, the element stride of each label (0 when absent or broadcast).
  const size_t K = ins.size();
  std::vector<std::vector<int64_t>> strides(K, std::vector<int64_t>(all.size(), 0));
  for (size_t k = 0; k < K; ++k) {
    int64_t s = 1;
    for (size_t d = labels[k].size(); d-- > 0;) {
      const size_t pos =
          static_cast<size_t>(std::find(all.begin(), all.end(), labels[k][d]) - all.begin());
      if (ins[k]->dim(d) != 1) strides[k][pos] += s;
      s *= ins[k]->dim(d);
    }
  }
  std::vector<int64_t> dims(all.size());
  for (size_t i = 0; i < all.size(); ++i) dims[i] = size[all[i]];
  std::vector<int64_t> out_dims(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(n_out));
  int64_t contracted = 1;
  for (size_t i = n_out; i < dims.size(); ++i) contracted *= dims[i];

  StagedOutput out(ctx, 0, out_dtype, out_dims);
  // Each operand's element offset at the label index idx, one odometer for both paths below.
  std::vector<int64_t> idx(all.size(), 0), off(K, 0);
  // Advances the odometer over dims [lo, hi); returns false when it wraps.
  auto advance = [&](size_t lo, size_t hi) {
    for (size_t d = hi; d-- > lo;) {
      if (++idx[d] < dims[d]) {
        for (size_t k = 0; k < K; ++k) off[k] += strides[k][d];
        return true;
      }
      for (size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * (dims[d] - 1);
      idx[d] = 0;
    }
    return false;
  };
  // A batched matrix product ("bhid,bhjd->bhij", "...ij,...jk->...ik"): two float32 operands,
  // one contracted label j, output labels batch..., i, k with i not in the second operand and k
  // not in the first. The naive loop costs a multiply-add per element of every label's product
  // as well, but without blocking or vectors: MaxViT-T's 44 attention Einsums took 80% of its
  // run. Each batch index is one GEMM over the operands' own strides (no copies); the sums over
  // j are the GEMM's, in its order.
  if (K == 2 && n_out >= 2 && all.size() == n_out + 1 && dims[n_out] > 0 &&
      ins[0]->dtype() == DType::Float &&
      ins[1]->dtype() == DType::Float && out_dtype == DType::Float) {
    const size_t i = n_out - 2, k = n_out - 1, j = n_out;
    bool product = strides[1][i] == 0 && strides[0][k] == 0;
    for (const std::vector<int>& l : labels)  // a label twice in one operand is a diagonal
      for (size_t a = 0; product && a < l.size(); ++a)
        product = std::count(l.begin(), l.end(), l[a]) == 1;
    if (product) {
      const float* a = ins[0]->data<float>();
      const float* b = ins[1]->data<float>();
      float* c = out.compute().template mutableData<float>();
      const int64_t M = dims[i], N = dims[k], depth = dims[j];
      int64_t batches = 1;
      for (size_t d = 0; d < i; ++d) batches *= dims[d];
      for (int64_t n = 0; n < batches; ++n, advance(0, i)) {
        cpu::GemmParams p;
        p.M = M;
        p.N = N;
        p.K = depth;
        p.A = a + off[0];
        p.a_rs = strides[0][i];
        p.a_cs = strides[0][j];
        p.B = b + off[1];
        p.b_rs = strides[1][j];
        p.b_cs = strides[1][k];
        p.C = c + n * M * N;
        p.ldc = N;
        cpu::gemm(p, ctx.numThreads());
      }
      out.finish();
      return;
    }
  }
  dispatch<kNumeric>(ctx, ins[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<const T*> ptr(K);
    for (size_t k = 0; k < K; ++k) {
      if (ins[k]->dtype() != ins[0]->dtype()) ctx.fail("inputs have different dtypes");
      ptr[k] = ins[k]->data<T>();
    }
    T* o = out.compute().template mutableData<T>();
    const int64_t total_out = out.compute().numel();
    for (int64_t e = 0; e < total_out; ++e) {
      T acc = T(0);
      for (int64_t c = 0; c < contracted; ++c) {
        T p = T(1);
        for (size_t k = 0; k < K; ++k) p = static_cast<T>(p * ptr[k][off[k]]);
        acc = static_cast<T>(acc + p);
        advance(n_out, all.size());
      }
      o[e] = acc;
      advance(0, n_out);
    }
  });
  out.finish();
}

}  // namespace

void registerEinsumKernel(KernelRegistry& r) { r.add({"", "Einsum", 1, 1000, einsumKernel}); }

}  // namespace fusectl::kernels
