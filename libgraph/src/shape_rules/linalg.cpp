// Shape rules for matrix products: MatMul (NumPy semantics), Gemm, MatMulInteger, Einsum.
//
// MatMul promotes a 1-D left operand to [1,K] and a 1-D right operand to [K,1], broadcasts the
// batch dims and drops the promoted axes again. Provably different inner dims are a warning.
#include <algorithm>
#include <map>

#include <fmt/format.h>

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

// Einsum over explicit letters and at most one "..." per operand.
bool einsum(RuleContext& ctx) {
  std::string eq;
  for (char c : ctx.node.attrString("equation", "")) if (c != ' ') eq += c;
  DType t = ctx.inDType(0);
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<char, Dim> letter_dims;
  std::map<char, int> letter_count;
  Shape ellipsis = Shape::scalar();
  bool all_known = terms.size() == ctx.numInputs();
  for (size_t i = 0; i < terms.size() && i < ctx.numInputs(); ++i) {
    const std::string& term = terms[i];
    size_t dots = term.find("...");
    size_t letters = term.size() - (dots == std::string::npos ? 0 : 3);
    const Shape& s = ctx.inShape(i);
    for (char c : term) if (c != '.') ++letter_count[c];
    if (!s.hasRank() || s.rank() < letters) {
      all_known = false;
      continue;
    }
    size_t ell_rank = s.rank() - letters;
    size_t axis = 0;
    for (size_t k = 0; k < term.size();) {
      if (term.compare(k, 3, "...") == 0) {
        Shape part(std::vector<Dim>(s.dims().begin() + axis, s.dims().begin() + axis + ell_rank));
        ellipsis = broadcastOrWarn(ctx, ellipsis, part);
        axis += ell_rank;
        k += 3;
        continue;
      }
      const Dim& d = s[axis++];
      auto [it, fresh] = letter_dims.emplace(term[k], d);
      // A static dim other than 1 is the best witness (1 may broadcast).
      if (!fresh && (!it->second.isStatic() || it->second.value() == 1) && d.isStatic() &&
          d.value() != 1)
        it->second = d;
      else if (!fresh && it->second.isUnknown())
        it->second = d;
      ++k;
    }
  }
  std::string rhs;
  if (arrow != std::string::npos) {
    rhs = eq.substr(arrow + 2);
  } else {
    if (lhs.find("...") != std::string::npos) rhs = "...";
    for (const auto& [c, n] : letter_count)
      if (n == 1) rhs += c;
  }
  std::vector<Dim> out;
  for (size_t k = 0; k < rhs.size();) {
    if (rhs.compare(k, 3, "...") == 0) {
      if (!all_known) {
        ctx.setOutput(0, t, Shape());
        return true;
      }
      out.insert(out.end(), ellipsis.dims().begin(), ellipsis.dims().end());
      k += 3;
      continue;
    }
    auto it = letter_dims.find(rhs[k++]);
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
