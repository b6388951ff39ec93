// Shape rules for matrix products: MatMul (NumPy semantics), Gemm, MatMulInteger, Einsum.
//
// MatMul promotes a 1-D left operand to [1,K] and a 1-D right operand to [K,1], broadcasts the
// batch dims and drops the promoted axes again. Provably different inner dims are a warning.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "fusectl/graph/einsum_equation.h"
#include "fusectl/graph/error.h"
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

void checkInner(RuleContext& ctx, const Dim& ka, const Dim& kb) {
  if (ka.isStatic() && kb.isStatic() && ka.value() != kb.value())
    ctx.warn(fmt::format("inner dims differ: {} vs {}", ka.value(), kb.value()));
}

bool matmul(RuleContext& ctx) {
  ctx.setOutput(0, ctx.inDType(0), matmulShape(ctx, ctx.inShape(0), ctx.inShape(1)));
  return true;
}

bool matmulInteger(RuleContext& ctx) {
  ctx.setOutput(0, DType::Int32, matmulShape(ctx, ctx.inShape(0), ctx.inShape(1)));
  return true;
}

bool gemm(RuleContext& ctx) {
  const Shape& a = ctx.inShape(0);
  const Shape& b = ctx.inShape(1);
  bool ta = ctx.node.attrInt("transA", 0) != 0;
  bool tb = ctx.node.attrInt("transB", 0) != 0;
  std::vector<Dim> out(2);
  bool a2 = a.hasRank() && a.rank() == 2, b2 = b.hasRank() && b.rank() == 2;
  if (a2) out[0] = a[ta ? 1 : 0];
  if (b2) out[1] = b[tb ? 0 : 1];
  if (a2 && b2) checkInner(ctx, a[ta ? 0 : 1], b[tb ? 1 : 0]);
  ctx.setOutput(0, ctx.inDType(0), Shape(std::move(out)));
  return true;
}

// Einsum over explicit letters and at most one "..." per operand (einsum_equation.h).
bool einsum(RuleContext& ctx) {
  const DType t = ctx.inDType(0);
  EinsumEquation eq;
  try {
    eq = parseEinsumEquation(ctx.node.attrString("equation", ""));
  } catch (const Error& e) {
    ctx.warn(e.what());
    ctx.setOutput(0, t, Shape());
    return true;
  }
  std::map<char, Dim> letter_dims;
  Shape ellipsis = Shape::scalar();
  bool all_known = eq.inputs.size() == ctx.numInputs();
  for (size_t i = 0; i < eq.inputs.size() && i < ctx.numInputs(); ++i) {
    const EinsumTerm& term = eq.inputs[i];
    const size_t letters = term.letters.size();
    const Shape& s = ctx.inShape(i);
    if (!s.hasRank() || s.rank() < letters || (!term.hasEllipsis() && s.rank() != letters)) {
      all_known = false;
      continue;
    }
    const size_t ell_rank = s.rank() - letters;
    size_t axis = 0;
    for (size_t k = 0; k <= letters; ++k) {
      if (term.hasEllipsis() && k == static_cast<size_t>(term.ellipsis_at)) {
        const auto from = s.dims().begin() + static_cast<std::ptrdiff_t>(axis);
        Shape part(std::vector<Dim>(from, from + static_cast<std::ptrdiff_t>(ell_rank)));
        ellipsis = broadcastOrWarn(ctx, ellipsis, part);
        axis += ell_rank;
      }
      if (k == letters) break;
      const Dim& d = s[axis++];
      auto [it, fresh] = letter_dims.emplace(term.letters[k], d);
      // A static dim other than 1 is the best witness (1 may broadcast).
      if (!fresh && (!it->second.isStatic() || it->second.value() == 1) && d.isStatic() &&
          d.value() != 1)
        it->second = d;
      else if (!fresh && it->second.isUnknown())
        it->second = d;
    }
  }
  const EinsumTerm out_term = eq.outputOrImplicit();
  std::vector<Dim> out;
  for (size_t k = 0; k <= out_term.letters.size(); ++k) {
    if (out_term.hasEllipsis() && k == static_cast<size_t>(out_term.ellipsis_at)) {
      if (!all_known) {
        ctx.setOutput(0, t, Shape());
        return true;
      }
      out.insert(out.end(), ellipsis.dims().begin(), ellipsis.dims().end());
    }
    if (k == out_term.letters.size()) break;
    auto it = letter_dims.find(out_term.letters[k]);
    out.push_back(it == letter_dims.end() ? Dim() : it->second);
  }
  ctx.setOutput(0, t, Shape(std::move(out)));
  return true;
}

}  // namespace

Shape matmulShape(RuleContext& ctx, const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank()) return Shape();
  if (a.rank() == 0 || b.rank() == 0) {
    ctx.warn("MatMul operands must have rank >= 1");
    return Shape();
  }
  std::vector<Dim> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), Dim::known(1));
  if (bd.size() == 1) bd.push_back(Dim::known(1));
  checkInner(ctx, ad.back(), bd[bd.size() - 2]);
  Shape batch_a(std::vector<Dim>(ad.begin(), ad.end() - 2));
  Shape batch_b(std::vector<Dim>(bd.begin(), bd.end() - 2));
  Shape out = broadcastOrWarn(ctx, batch_a, batch_b);
  if (a.rank() > 1) out.dims().push_back(ad[ad.size() - 2]);
  if (b.rank() > 1) out.dims().push_back(bd.back());
  return out;
}

void registerLinalgRules(RuleRegistry& r) {
  r.add("", "MatMul", matmul);
  r.add("", "MatMulInteger", matmulInteger);
  r.add("", "Gemm", gemm);
  r.add("", "Einsum", einsum);
}

}  // namespace fusectl::shape_rules
