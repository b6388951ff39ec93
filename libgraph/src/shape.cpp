// Dims and shapes: canonical symbolic arithmetic and NumPy broadcasting.
//
// A symbolic dim is stored as canonical text and handled as a polynomial with integer
// coefficients over named dims: a term is a coefficient times a sorted multiset of names
// ("2*batch*seq"), a sum lists its terms in sorted order with the constant last ("past+seq",
// "seq-1"). Text that is not a polynomial ("seq/2", "floor(seq/2)") becomes one opaque name, so
// it still compares equal to itself and multiplies like any other name. Arithmetic parses both
// operands, computes exactly (int64 overflow gives an unknown dim) and renders the result again,
// which keeps "equal for every value of the symbols" a string comparison.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "fusectl/graph/shape.h"

namespace fusectl {
namespace {

using Monomial = std::vector<std::string>;  // sorted names; a repeated name is a power
using Poly = std::map<Monomial, int64_t>;  // no zero coefficients

bool isOperatorChar(char c) {
  return c == '+' || c == '-' || c == '*' || c == '/' || c == '%' || c == '(' || c == ')' ||
         std::isspace(static_cast<unsigned char>(c));
}

std::string withoutSpaces(std::string_view s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  return out;
}

bool addTo(Poly& p, const Monomial& m, int64_t c) {
  if (c == 0) return true;
  int64_t& slot = p[m];
  if (__builtin_add_overflow(slot, c, &slot)) return false;
  if (slot == 0) p.erase(m);
  return true;
}

std::optional<Poly> add(const Poly& a, const Poly& b, int64_t sign) {
  Poly r = a;
  for (const auto& [m, c] : b)
    if (!addTo(r, m, sign * c)) return std::nullopt;
  return r;
}

Monomial multiply(const Monomial& a, const Monomial& b) {
  Monomial r;
  r.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
  return r;
}

std::optional<Poly> multiply(const Poly& a, const Poly& b) {
  Poly r;
  for (const auto& [ma, ca] : a)
    for (const auto& [mb, cb] : b) {
      int64_t c;
      if (__builtin_mul_overflow(ca, cb, &c) || !addTo(r, multiply(ma, mb), c))
        return std::nullopt;
    }
  return r;
}

// a / b for monomials: nullopt unless b's names are a sub-multiset of a's.
std::optional<Monomial> divide(const Monomial& a, const Monomial& b) {
  if (!std::includes(a.begin(), a.end(), b.begin(), b.end())) return std::nullopt;
  Monomial r;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
  return r;
}

// Graded order (degree, then names): compatible with multiplication, so long division by the
// leading term terminates.
bool monomialLess(const Monomial& a, const Monomial& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

const std::pair<const Monomial, int64_t>& leadingTerm(const Poly& p) {
  auto best = p.begin();
  for (auto it = p.begin(); it != p.end(); ++it)
    if (monomialLess(best->first, it->first)) best = it;
  return *best;
}

// Exact polynomial division; nullopt when b does not divide a.
std::optional<Poly> divide(const Poly& a, const Poly& b) {
  if (b.empty()) return std::nullopt;
  const auto& [lead_m, lead_c] = leadingTerm(b);
  Poly quotient, rest = a;
  for (int step = 0; !rest.empty(); ++step) {
    if (step > 64) return std::nullopt;
    const auto& [m, c] = leadingTerm(rest);
    auto qm = divide(m, lead_m);
    if (!qm || c % lead_c != 0) return std::nullopt;
    Poly term{{*qm, c / lead_c}};
    auto sub = multiply(term, b);
    if (!sub || !addTo(quotient, *qm, c / lead_c)) return std::nullopt;
    auto next = add(rest, *sub, -1);
    if (!next) return std::nullopt;
    rest = std::move(*next);
  }
  return quotient;
}

// Recursive-descent parser for + - * over integers, names, function calls and parentheses.
class PolyParser {
 public:
  explicit PolyParser(std::string_view s) : s_(s) {}

  std::optional<Poly> parseAll() {
    auto p = parseSum();
    skipSpaces();
    if (!p || pos_ != s_.size()) return std::nullopt;
    return p;
  }

 private:
  void skipSpaces() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skipSpaces();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // Index just past the ')' matching the '(' at `open`, or npos.
  size_t matchParen(size_t open) const {
    int depth = 0;
    for (size_t i = open; i < s_.size(); ++i) {
      if (s_[i] == '(') ++depth;
      if (s_[i] == ')' && --depth == 0) return i + 1;
    }
    return std::string_view::npos;
  }

  std::optional<Poly> parseSum() {
    int64_t sign = eat('-') ? -1 : 1;
    auto acc = parseProduct();
    if (!acc) return std::nullopt;
    if (sign < 0) acc = multiply(*acc, Poly{{{}, -1}});
    while (acc) {
      if (eat('+')) sign = 1;
      else if (eat('-')) sign = -1;
      else break;
      auto rhs = parseProduct();
      if (!rhs) return std::nullopt;
      acc = add(*acc, *rhs, sign);
    }
    return acc;
  }

  std::optional<Poly> parseProduct() {
    auto acc = parseFactor();
    while (acc && eat('*')) {
      auto rhs = parseFactor();
      if (!rhs) return std::nullopt;
      acc = multiply(*acc, *rhs);
    }
    return acc;
  }

  std::optional<Poly> parseFactor() {
    skipSpaces();
    if (pos_ >= s_.size()) return std::nullopt;
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[pos_] - '0', &v))
          return std::nullopt;
        ++pos_;
      }
      // "3abc" is a name, not 3 times abc.
      if (pos_ < s_.size() && !isOperatorChar(s_[pos_])) return std::nullopt;
      return v == 0 ? Poly{} : Poly{{{}, v}};
    }
    if (c == '(') {
      size_t end = matchParen(pos_);
      if (end == std::string_view::npos) return std::nullopt;
      std::string_view inner = s_.substr(pos_ + 1, end - pos_ - 2);
      pos_ = end;
      if (auto p = PolyParser(inner).parseAll()) return p;
      return Poly{{{withoutSpaces(inner)}, 1}};  // opaque: "(seq/2)"
    }
    if (isOperatorChar(c)) return std::nullopt;
    size_t start = pos_;
    while (pos_ < s_.size() && !isOperatorChar(s_[pos_])) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '(') {  // function call: "floor(seq/2)"
      size_t end = matchParen(pos_);
      if (end == std::string_view::npos) return std::nullopt;
      pos_ = end;
    }
    return Poly{{{withoutSpaces(s_.substr(start, pos_ - start))}, 1}};
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// True when `name` must be parenthesised to read back as one name inside a larger expression.
bool needsParens(const std::string& name) {
  int depth = 0;
  for (char c : name) {
    if (c == '(') ++depth;
    else if (c == ')') --depth;
    else if (depth == 0 && isOperatorChar(c)) return true;
  }
  return false;
}

std::string render(const Poly& p) {
  auto renderTerm = [&](const Monomial& m, int64_t c) {
    std::string t;
    bool alone = p.size() == 1 && c == 1 && m.size() == 1;
    if (m.empty()) return std::to_string(c);
    if (c == -1) t = "-";
    else if (c != 1) t = std::to_string(c) + "*";
    for (size_t i = 0; i < m.size(); ++i) {
      if (i) t += '*';
      t += (!alone && needsParens(m[i])) ? "(" + m[i] + ")" : m[i];
    }
    return t;
  };
  std::string out;
  auto append = [&](std::string term) {
    if (!out.empty() && term[0] != '-') out += '+';
    out += term;
  };
  for (const auto& [m, c] : p)
    if (!m.empty()) append(renderTerm(m, c));
  auto constant = p.find(Monomial{});
  if (constant != p.end()) append(renderTerm(constant->first, constant->second));
  return out;
}

std::optional<Poly> toPoly(const Dim& d) {
  if (d.isStatic()) return d.value() == 0 ? Poly{} : Poly{{{}, d.value()}};
  if (!d.isSymbolic()) return std::nullopt;
  if (auto p = PolyParser(d.symbol()).parseAll()) return p;
  return Poly{{{d.symbol()}, 1}};
}

Dim fromPoly(const std::optional<Poly>& p) {
  if (!p) return Dim::unknown();
  if (p->empty()) return Dim::known(0);
  if (p->size() == 1 && p->begin()->first.empty()) return Dim::known(p->begin()->second);
  return Dim::symbolic(render(*p));
}

// The process-wide symbol table; entries are never removed, so pointers stay valid. Programs
// see a few hundred distinct symbols at most.
const std::string* intern(std::string text) {
  static std::mutex mutex;
  static std::unordered_set<std::string> table;
  std::lock_guard<std::mutex> lock(mutex);
  return &*table.insert(std::move(text)).first;
}

template <typename Op>
Dim combine(const Dim& a, const Dim& b, Op op) {
  auto pa = toPoly(a), pb = toPoly(b);
  if (!pa || !pb) return Dim::unknown();
  return fromPoly(op(*pa, *pb));
}

}  // namespace

Dim Dim::symbolic(std::string expr) {
  // The common case, a plain name from an ONNX dim_param, needs no parsing.
  bool plain = !expr.empty() && !std::isdigit(static_cast<unsigned char>(expr[0])) &&
               std::none_of(expr.begin(), expr.end(), isOperatorChar);
  if (plain) {
    Dim d;
    d.symbol_ = intern(std::move(expr));
    return d;
  }
  auto p = PolyParser(expr).parseAll();
  if (!p) {
    std::string name = withoutSpaces(expr);
    if (name.empty()) return Dim::unknown();
    p = Poly{{{std::move(name)}, 1}};
  }
  if (p->empty()) return Dim::known(0);
  if (p->size() == 1 && p->begin()->first.empty()) return Dim::known(p->begin()->second);
  Dim d;
  d.symbol_ = intern(render(*p));
  return d;
}

Dim operator*(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) {
    int64_t v;
    return __builtin_mul_overflow(a.value(), b.value(), &v) ? Dim::unknown() : Dim::known(v);
  }
  if ((a.isStatic() && a.value() == 0) || (b.isStatic() && b.value() == 0)) return Dim::known(0);
  if (a.isStatic() && a.value() == 1) return b;
  if (b.isStatic() && b.value() == 1) return a;
  return combine(a, b, [](const Poly& x, const Poly& y) { return multiply(x, y); });
}

Dim operator+(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) {
    int64_t v;
    return __builtin_add_overflow(a.value(), b.value(), &v) ? Dim::unknown() : Dim::known(v);
  }
  if (b.isStatic() && b.value() == 0) return a;
  if (a.isStatic() && a.value() == 0) return b;
  return combine(a, b, [](const Poly& x, const Poly& y) { return add(x, y, 1); });
}

Dim operator-(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) {
    int64_t v;
    return __builtin_sub_overflow(a.value(), b.value(), &v) ? Dim::unknown() : Dim::known(v);
  }
  if (b.isStatic() && b.value() == 0) return a;
  return combine(a, b, [](const Poly& x, const Poly& y) { return add(x, y, -1); });
}

Dim operator/(const Dim& a, const Dim& b) {
  if (a.isStatic() && b.isStatic()) {
    if (b.value() == 0) return Dim::unknown();
    // INT64_MIN / -1 (and INT64_MIN % -1) overflows, and traps on x86.
    if (b.value() == -1) return a.value() == INT64_MIN ? Dim::unknown() : Dim::known(-a.value());
    if (a.value() % b.value() != 0) return Dim::unknown();
    return Dim::known(a.value() / b.value());
  }
  if (b.isStatic() && b.value() == 1) return a;
  if (a.provablyEqual(b)) return Dim::known(1);
  return combine(a, b, [](const Poly& x, const Poly& y) { return divide(x, y); });
}

Dim floorDiv(const Dim& a, int64_t d) {
  if (d <= 0) return Dim::unknown();
  if (a.isStatic()) return Dim::known(a.value() / d - (a.value() % d < 0));
  if (d == 1) return a;
  auto p = toPoly(a);
  if (!p) return Dim::unknown();
  Poly quotient, remainder;
  for (const auto& [m, c] : *p) {
    int64_t q = c / d - (c % d < 0), qd = 0;
    if (__builtin_mul_overflow(q, d, &qd)) return Dim::unknown();
    if (q != 0) quotient[m] = q;
    if (c - qd != 0) remainder[m] = c - qd;  // in [0, d)
  }
  // A remainder that is a constant in [0, d) floors to 0.
  if (remainder.empty() || (remainder.size() == 1 && remainder.begin()->first.empty()))
    return fromPoly(quotient);
  std::string r = render(remainder);
  std::string atom = "floor(" + (needsParens(r) ? "(" + r + ")" : r) + "/" + std::to_string(d) + ")";
  return fromPoly(add(quotient, Poly{{{std::move(atom)}, 1}}, 1));
}

Dim ceilDiv(const Dim& a, int64_t d) {
  if (d <= 0) return Dim::unknown();
  return floorDiv(a + Dim::known(d - 1), d);
}

bool Dim::provablyEqual(const Dim& o) const {
  if (isUnknown() || o.isUnknown()) return false;
  return value_ == o.value_ && symbol_ == o.symbol_;  // symbols are interned
}

std::string Dim::str() const {
  switch (kind()) {
    case Kind::Static: return std::to_string(value_);
    case Kind::Symbolic: return *symbol_;
    case Kind::Unknown: break;
  }
  return "?";
}

Shape Shape::ofStatic(const std::vector<int64_t>& dims) {
  std::vector<Dim> out;
  out.reserve(dims.size());
  for (int64_t d : dims) out.push_back(Dim::known(d));
  return Shape(std::move(out));
}

bool Shape::isStatic() const {
  if (!has_rank_) return false;
  for (const Dim& d : dims_)
    if (!d.isStatic()) return false;
  return true;
}

std::optional<int64_t> Shape::staticNumel() const {
  if (!has_rank_) return std::nullopt;
  int64_t n = 1;
  for (const Dim& d : dims_) {
    if (!d.isStatic() || d.value() < 0 || __builtin_mul_overflow(n, d.value(), &n))
      return std::nullopt;
  }
  return n;
}

std::vector<int64_t> Shape::staticDims() const {
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Dim& d : dims_) out.push_back(d.value());
  return out;
}

Dim Shape::numel() const {
  if (!has_rank_) return Dim::unknown();
  Dim n = Dim::known(1);
  for (const Dim& d : dims_) {
    if (d.isUnknown()) return Dim::unknown();
    n = n * d;
  }
  return n;
}

std::string Shape::str() const {
  if (!has_rank_) return "?";
  std::string out = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ',';
    out += dims_[i].str();
  }
  return out + "]";
}

std::optional<Shape> Shape::parse(std::string_view spec) {
  std::string s = withoutSpaces(spec);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  if (s.empty() || s == "scalar") return Shape::scalar();
  // "1,seq,64" when commas are present (names may contain 'x'), else "1xseqx64".
  char sep = s.find(',') != std::string::npos ? ',' : 'x';
  std::vector<Dim> dims;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty()) return std::nullopt;
    if (part == "?") {
      dims.push_back(Dim::unknown());
    } else {
      Dim d = Dim::symbolic(part);
      if (d.isStatic() && d.value() < 0) return std::nullopt;
      if (d.isUnknown()) return std::nullopt;
      dims.push_back(d);
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return Shape(std::move(dims));
}

// Per-dim rules, right-aligned as in NumPy:
//  - a static 1 takes the other dim, whatever it is;
//  - equal dims (static, or the same symbolic expression) stay;
//  - a symbolic or unknown dim against a static n != 1 gives n: the model claims the broadcast
//    is valid, and n is the only value other than 1 that the symbol can take;
//  - two different symbols, or anything against an unknown dim, give an unknown dim;
//  - two different statics, neither 1, cannot broadcast: nullopt.
std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank()) return Shape::unknownRank();
  const Shape& longer = a.rank() >= b.rank() ? a : b;
  const Shape& shorter = a.rank() >= b.rank() ? b : a;
  size_t offset = longer.rank() - shorter.rank();
  std::vector<Dim> out(longer.dims().begin(), longer.dims().end());
  for (size_t i = 0; i < shorter.rank(); ++i) {
    const Dim& x = longer[offset + i];
    const Dim& y = shorter[i];
    Dim& r = out[offset + i];
    if (x.isStatic() && y.isStatic()) {
      if (x.value() == y.value() || y.value() == 1) r = x;
      else if (x.value() == 1) r = y;
      else return std::nullopt;
    } else if (x.isStatic() && x.value() == 1) {
      r = y;
    } else if (y.isStatic() && y.value() == 1) {
      r = x;
    } else if (x.isStatic()) {
      r = x;
    } else if (y.isStatic()) {
      r = y;
    } else if (x.provablyEqual(y)) {
      r = x;
    } else {
      r = Dim::unknown();
    }
  }
  return Shape(std::move(out));
}

bool provablyDiffer(const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank()) return false;
  if (a.rank() != b.rank()) return true;
  for (size_t i = 0; i < a.rank(); ++i)
    if (a[i].isStatic() && b[i].isStatic() && a[i].value() != b[i].value()) return true;
  return false;
}

}  // namespace fusectl
