// Pattern text: the parser and the canonical printer (the grammar is in docs/patterns.md).
//
// The printer writes chains of `->` edges and, for a node written in call form, its operands
// inside the call, so that parsing the printed text numbers nodes, edges and leaves as the
// pattern does (a pattern built in code is printed so that it parses back to the same
// structure).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "fusectl/graph/error.h"
#include "fusectl/passes/pattern.h"
#include "pattern_internal.h"

namespace fusectl::passes {

namespace {

bool isIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// ---------------------------------------------------------------------------------------------
// Parsing

class PatternParser {
 public:
  PatternParser(std::string_view text, std::string name) : text_(text) {
    p_.name = std::move(name);
  }

  Pattern parse() {
    skipSpace();
    if (pos_ == text_.size()) fail(pos_, "empty pattern");
    parseChain();
    while (true) {
      skipSpace();
      if (pos_ == text_.size()) break;
      if (text_[pos_] != ';') fail(pos_, fmt::format("expected '->', ';' or the end, found {}",
                                                     describeHere()));
      ++pos_;
      skipSpace();
      if (pos_ == text_.size()) break;  // a trailing ';' is harmless
      parseChain();
    }
    if (root_marked_) p_.root = *root_marked_;
    checkConnected();
    return std::move(p_);
  }

 private:
  struct Term {
    size_t node = 0;
    int in_slot = -1;   // prefix "1:"
    int out_slot = -1;  // suffix ".0"
    size_t at = 0;      // offset, for messages
    bool reference = false;
  };

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string where = line > 1 ? fmt::format("line {}, column {}", line, col)
                                 : fmt::format("column {}", col);
    std::string flat(text_);
    std::replace(flat.begin(), flat.end(), '\n', ' ');
    throw Error(ErrorKind::Usage,
                fmt::format("invalid pattern \"{}\" at {}: {}", flat, where, what));
  }

  std::string describeHere() const {
    if (pos_ >= text_.size()) return "the end of the pattern";
    if (text_.compare(pos_, 2, "->") == 0) return "'->'";
    return fmt::format("'{}'", text_[pos_]);
  }

  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek(std::string_view tok) const { return text_.compare(pos_, tok.size(), tok) == 0; }

  std::string readIdent() {
    size_t start = pos_;
    while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  int readInt() {
    size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ - start > 6) fail(start, "slot number too large");
    return std::stoi(std::string(text_.substr(start, pos_ - start)));
  }

  void parseChain() {
    Term prev = parseTerm();
    if (prev.in_slot >= 0) {
      fail(prev.at, fmt::format("input slot {} given, but nothing feeds this node here",
                                prev.in_slot));
    }
    bool has_edge = false;
    while (true) {
      skipSpace();
      if (!peek("->")) break;
      pos_ += 2;
      skipSpace();
      if (pos_ == text_.size() || text_[pos_] == ';' || peek("->")) {
        fail(pos_, fmt::format("expected a node after '->', found {}", describeHere()));
      }
      Term next = parseTerm();
      if (prev.node == next.node) fail(next.at, "a node cannot feed itself");
      PatternEdge e;
      e.from = prev.node;
      e.to = next.node;
      e.from_output = prev.out_slot < 0 ? 0 : prev.out_slot;
      e.to_input = next.in_slot;
      p_.edges.push_back(e);
      prev = next;
      has_edge = true;
    }
    if (prev.out_slot >= 0) {
      fail(prev.at, fmt::format("output slot {} given, but this node feeds nothing here",
                                prev.out_slot));
    }
    if (!has_edge && prev.reference) {
      fail(prev.at, fmt::format("'{}' alone says nothing: a reference needs '->'",
                                p_.nodes[prev.node].capture));
    }
  }

  Term parseTerm() {
    skipSpace();
    Term t;
    t.at = pos_;
    if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      t.in_slot = readInt();
      if (!peek(":") || peek("::")) fail(pos_, "expected ':' after an input slot number");
      ++pos_;
      skipSpace();
    }
    bool root = false;
    if (peek("^")) {
      root = true;
      ++pos_;
      skipSpace();
    }
    size_t node_at = pos_;
    if (pos_ >= text_.size()) fail(pos_, "expected an op type, a capture or '*', found the end");
    if (peek("*")) {
      t.node = addNode(parseOps(node_at), node_at);
      parseOperandsIfAny(t.node);
    } else if (isIdentStart(text_[pos_])) {
      size_t word_at = pos_;
      std::string word = readIdent();
      size_t after_word = pos_;
      skipSpace();
      if (!(peek(":") && !peek("::"))) pos_ = after_word;
      if (peek(":") && !peek("::")) {
        // capture:ops
        ++pos_;
        if (p_.indexOf(word)) {
          fail(word_at, fmt::format("capture '{}' is already defined; refer to it by name alone",
                                    word));
        }
        if (p_.leafIndexOf(word)) {
          fail(word_at, fmt::format("'{}' already names the leaf ${}", word, word));
        }
        skipSpace();
        PatternNode n = parseOps(node_at);
        n.capture = word;
        t.node = addNode(std::move(n), node_at);
        parseOperandsIfAny(t.node);
      } else if (auto ref = p_.indexOf(word); ref && !peek("::") && !peekDomainDot()) {
        t.node = *ref;
        t.reference = true;
        if (peek("(")) fail(pos_, fmt::format("'{}' is a reference: operands go where it is "
                                              "defined", word));
      } else {
        pos_ = word_at;
        t.node = addNode(parseOps(node_at), node_at);
        parseOperandsIfAny(t.node);
      }
    } else {
      fail(pos_, fmt::format("expected an op type, a capture or '*', found {}", describeHere()));
    }
    if (root) {
      if (root_marked_ && *root_marked_ != t.node) fail(t.at, "more than one node marked '^'");
      root_marked_ = t.node;
    }
    if (peek(".") && pos_ + 1 < text_.size() &&
        std::isdigit(static_cast<unsigned char>(text_[pos_ + 1]))) {
      ++pos_;
      t.out_slot = readInt();
    }
    return t;
  }

  bool peekDomainDot() const {
    return pos_ + 1 < text_.size() && text_[pos_] == '.' && isIdentStart(text_[pos_ + 1]);
  }

  // [domain "::"] ("*" | OP ("|" OP)*)
  PatternNode parseOps(size_t node_at) {
    PatternNode n;
    if (pos_ < text_.size() && isIdentStart(text_[pos_])) {
      size_t save = pos_;
      std::string word = readIdent();
      while (peekDomainDot()) {
        ++pos_;
        word += "." + readIdent();
      }
      if (peek("::")) {
        pos_ += 2;
        n.domain = std::string(normDomain(word));
      } else {
        pos_ = save;
      }
    }
    if (peek("*")) {
      ++pos_;
    } else {
      while (true) {
        if (pos_ >= text_.size() || !isIdentStart(text_[pos_])) {
          fail(pos_, fmt::format("expected an op type, found {}", describeHere()));
        }
        std::string op = readIdent();
        if (std::find(n.op_types.begin(), n.op_types.end(), op) != n.op_types.end()) {
          fail(pos_ - op.size(), fmt::format("op type '{}' listed twice", op));
        }
        n.op_types.push_back(std::move(op));
        if (!peek("|")) break;
        ++pos_;
      }
    }
    if (peek("[")) parseConditions(n);
    return n;
  }

  // "[" condition { "," condition } "]", condition = name "=" value | "dtype" "=" dtypes
  void parseConditions(PatternNode& n) {
    ++pos_;  // '['
    while (true) {
      skipSpace();
      const size_t name_at = pos_;
      if (pos_ >= text_.size() || !isIdentStart(text_[pos_]))
        fail(pos_, fmt::format("expected an attribute name or 'dtype', found {}", describeHere()));
      std::string name = readIdent();
      for (const NodeCondition& c : n.conditions) {
        if ((name == "dtype" && c.attribute.empty()) || c.attribute == name)
          fail(name_at, fmt::format("condition '{}' given twice", name));
      }
      skipSpace();
      if (!peek("=")) fail(pos_, fmt::format("expected '=' after '{}', found {}", name,
                                             describeHere()));
      ++pos_;
      skipSpace();
      NodeCondition c;
      if (name == "dtype") {
        while (true) {
          const size_t at = pos_;
          std::string dt = readIdent();
          std::optional<DType> d = dtypeFromName(dt);
          if (dt.empty() || !d) {
            fail(at, fmt::format("unknown dtype '{}' (float, float16, double, int64...)", dt));
          }
          c.dtypes.push_back(*d);
          if (!peek("|")) break;
          ++pos_;
        }
      } else {
        c.attribute = name;
        c.value = parseValue(name);
      }
      n.conditions.push_back(std::move(c));
      if (closesList("the conditions")) return;
    }
  }

  // After an item of a bracketed list: true (and past it) at ']', past a ',' otherwise.
  bool closesList(const char* what) {
    skipSpace();
    if (peek("]")) {
      ++pos_;
      return true;
    }
    if (!peek(",")) fail(pos_, fmt::format("expected ',' or ']' in {}, found {}", what,
                                           describeHere()));
    ++pos_;
    return false;
  }

  // A number, "a string", a bare word (a string) or a list of numbers [1, 2].
  Attribute parseValue(const std::string& name) {
    if (peek("\"")) {
      const size_t close = text_.find('"', pos_ + 1);
      if (close == std::string_view::npos) fail(pos_, "unterminated string");
      std::string s(text_.substr(pos_ + 1, close - pos_ - 1));
      pos_ = close + 1;
      return Attribute::ofString(name, std::move(s));
    }
    if (pos_ < text_.size() && isIdentStart(text_[pos_])) return Attribute::ofString(name, readIdent());
    if (peek("[")) {
      ++pos_;
      std::vector<double> values;
      bool any_float = false;
      while (true) {
        skipSpace();
        bool is_float = false;
        values.push_back(readNumber(is_float));
        any_float |= is_float;
        if (closesList("a list")) break;
      }
      if (any_float) return Attribute::ofFloats(name, {values.begin(), values.end()});
      return Attribute::ofInts(name, {values.begin(), values.end()});
    }
    bool is_float = false;
    const double v = readNumber(is_float);
    if (is_float) return Attribute::ofFloat(name, static_cast<float>(v));
    return Attribute::ofInt(name, static_cast<int64_t>(v));
  }

  double readNumber(bool& is_float) {
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
                                   std::strchr("+-.eE", text_[pos_]) != nullptr)) {
      ++pos_;
    }
    const std::string token(text_.substr(start, pos_ - start));
    if (token.empty()) fail(start, fmt::format("expected a value, found {}", describeHere()));
    is_float = token.find_first_of(".eE") != std::string::npos;
    char* end = nullptr;
    const double v = is_float ? std::strtod(token.c_str(), &end)
                              : static_cast<double>(std::strtoll(token.c_str(), &end, 10));
    if (end != token.c_str() + token.size()) fail(start, fmt::format("'{}' is not a number", token));
    return v;
  }

  // ["(" operand {"," operand} ")"] after a definition: the node's inputs by position.
  void parseOperandsIfAny(size_t node) {
    const size_t before = pos_;
    skipSpace();
    if (!peek("(")) {
      pos_ = before;
      return;
    }
    ++pos_;
    skipSpace();
    if (peek(")")) fail(pos_, "empty operand list: write the op without parentheses");
    while (true) {
      skipSpace();
      const size_t at = pos_;
      const int position = static_cast<int>(p_.nodes[node].operands.size());
      PatternOperand op;
      if (peek("$")) {
        op = {true, parseLeaf()};
      } else if (startsNumber()) {
        bool is_float = false;
        PatternLeaf leaf;
        leaf.kind = LeafKind::Constant;
        leaf.equals = readNumber(is_float);
        if (peek(":")) {
          fail(at, fmt::format("an operand's input slot is its position ({}): write no 'N:'",
                               position));
        }
        p_.leaves.push_back(std::move(leaf));
        op = {true, p_.leaves.size() - 1};
      } else {
        Term t = parseTerm();
        if (t.in_slot >= 0) {
          fail(t.at, fmt::format("an operand's input slot is its position ({}): write no 'N:'",
                                 position));
        }
        if (t.node == node) fail(t.at, "a node cannot feed itself");
        PatternEdge e;
        e.from = t.node;
        e.to = node;
        e.from_output = t.out_slot < 0 ? 0 : t.out_slot;
        e.to_input = position;
        e.operand = true;
        p_.edges.push_back(e);
        op = {false, p_.edges.size() - 1};
      }
      if (position >= 64) fail(at, "more than 64 operands");
      p_.nodes[node].operands.push_back(op);
      skipSpace();
      if (peek(")")) {
        ++pos_;
        return;
      }
      if (!peek(",")) fail(pos_, fmt::format("expected ',' or ')' in the operands, found {}",
                                             describeHere()));
      ++pos_;
    }
  }

  bool startsNumber() const {
    if (pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return true;
    return (c == '-' || c == '+' || c == '.') && pos_ + 1 < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_ + 1])) || text_[pos_ + 1] == '.');
  }

  // "$" name [":" ("input" | "const")]: a new leaf, or a reference to one defined earlier.
  size_t parseLeaf() {
    const size_t at = pos_;
    ++pos_;  // '$'
    if (pos_ >= text_.size() || !isIdentStart(text_[pos_])) {
      fail(pos_, fmt::format("expected a leaf name after '$', found {}", describeHere()));
    }
    std::string name = readIdent();
    const bool typed = peek(":") && !peek("::");
    if (std::optional<size_t> known = p_.leafIndexOf(name)) {
      if (typed) fail(pos_, fmt::format("leaf ${} is already defined; refer to it as ${}", name,
                                        name));
      return *known;
    }
    if (p_.indexOf(name)) fail(at, fmt::format("'{}' already names a node", name));
    PatternLeaf leaf;
    leaf.capture = name;
    if (typed) {
      ++pos_;
      const size_t kind_at = pos_;
      const std::string kind = readIdent();
      if (kind == "input") {
        leaf.kind = LeafKind::GraphInput;
      } else if (kind == "const") {
        leaf.kind = LeafKind::Constant;
      } else {
        fail(kind_at, fmt::format("unknown leaf kind '{}' (input or const)", kind));
      }
    }
    p_.leaves.push_back(std::move(leaf));
    return p_.leaves.size() - 1;
  }

  size_t addNode(PatternNode n, size_t at) {
    p_.nodes.push_back(std::move(n));
    node_at_.push_back(at);
    return p_.nodes.size() - 1;
  }

  void checkConnected() {
    std::vector<bool> seen(p_.nodes.size(), false);
    seen[p_.root] = true;
    for (bool grew = true; grew;) {
      grew = false;
      for (const PatternEdge& e : p_.edges) {
        if (seen[e.from] != seen[e.to]) {
          seen[e.from] = seen[e.to] = true;
          grew = true;
        }
      }
    }
    for (size_t i = 0; i < seen.size(); ++i) {
      if (!seen[i]) {
        const PatternNode& n = p_.nodes[i];
        fail(node_at_[i],
             fmt::format("{} is not connected to the root; every node must be reachable by "
                         "'->' edges",
                         n.capture.empty() ? "this node" : "'" + n.capture + "'"));
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  Pattern p_;
  std::vector<size_t> node_at_;
  std::optional<size_t> root_marked_;
};

// ---------------------------------------------------------------------------------------------
// Printing

// A float or double that reads back as one: "1.0", not "1" (the shortest text of its type).
template <typename Real>
std::string pointed(Real v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
std::string floatText(float f) { return pointed(f); }

std::string conditionValueText(const Attribute& a) {
  switch (a.kind) {
    case AttrKind::Int: return std::to_string(a.i);
    case AttrKind::Float: return floatText(a.f);
    case AttrKind::String: return "\"" + a.s.str() + "\"";
    case AttrKind::Ints: return fmt::format("[{}]", fmt::join(a.ints, ", "));
    case AttrKind::Floats: {
      std::vector<std::string> parts;
      for (float f : a.floats) parts.push_back(floatText(f));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    }
    default: return "?";
  }
}

// The ops and their conditions, as written: "Conv[group=1, dtype=float]".
std::string nodeText(const PatternNode& n) {
  std::string s = opsText(n);
  if (n.conditions.empty()) return s;
  std::vector<std::string> parts;
  for (const NodeCondition& c : n.conditions) parts.push_back(conditionText(c));
  return fmt::format("{}[{}]", s, fmt::join(parts, ", "));
}

// Prints chains of `->` edges; a node is defined (ops, conditions, operands) where it is first
// mentioned and referred to by name afterwards. Lower-indexed nodes that would otherwise be
// defined later are defined first on their own (breaking the chain), and operand nodes are
// defined inside their consumer's call, so that parsing the text back numbers the nodes and
// edges the same way.
class PatternPrinter {
 public:
  explicit PatternPrinter(const Pattern& p) : p_(p) {}

  std::string print() {
    planChains();
    // Anonymous nodes written more than once need a name to be referred to: a first pass
    // counts the references.
    names_.resize(p_.nodes.size());
    for (size_t n = 0; n < p_.nodes.size(); ++n) names_[n] = p_.nodes[n].capture;
    refs_.assign(p_.nodes.size(), 0);
    emit();
    for (size_t n = 0; n < p_.nodes.size(); ++n) {
      if (!names_[n].empty() || refs_[n] == 0) continue;
      for (int k = 0; names_[n].empty() || p_.indexOf(names_[n]) || p_.leafIndexOf(names_[n]);
           ++k)
        names_[n] = fmt::format("n{}{}", n, k ? fmt::format("_{}", k) : "");
    }
    return emit();
  }

 private:
  struct Mention {
    size_t node;
    int in_slot = -1, out_slot = -1;
    bool defines = false;
  };

  // Marks `n` and the operand nodes its definition writes as planned.
  void planDefinition(size_t n) {
    planned_[n] = true;
    for (const PatternOperand& op : p_.nodes[n].operands) {
      if (op.leaf) continue;
      const size_t from = p_.edges[op.index].from;
      if (!planned_[from]) planDefinition(from);
    }
  }

  Mention mention(size_t n) {
    Mention m{n};
    m.defines = !planned_[n];
    if (m.defines) planDefinition(n);
    return m;
  }

  void planChains() {
    planned_.assign(p_.nodes.size(), false);
    std::vector<Mention> chain;
    auto flush = [&] {
      if (chain.size() > 1 || (chain.size() == 1 && chain[0].defines)) chains_.push_back(chain);
      chain.clear();
    };
    auto unplannedBelow = [&](size_t n) {
      for (size_t k = 0; k < n; ++k)
        if (!planned_[k]) return true;
      return false;
    };
    auto predefine = [&](size_t n) {  // call with `chain` empty
      if (planned_[n]) return;
      for (size_t k = 0; k < n; ++k)
        if (!planned_[k]) chains_.push_back({mention(k)});
    };
    for (const PatternEdge& e : p_.edges) {
      if (e.operand) continue;  // written inside the consumer's call
      if (chain.empty() || chain.back().node != e.from) {
        flush();
        predefine(e.from);
        chain.push_back(mention(e.from));
      }
      if (!planned_[e.to] && unplannedBelow(e.to)) {
        flush();
        predefine(e.to);
        chain.push_back(mention(e.from));
      }
      chain.back().out_slot = e.from_output != 0 ? e.from_output : -1;
      Mention t = mention(e.to);
      t.in_slot = e.to_input;
      chain.push_back(t);
    }
    flush();
    for (size_t n = 0; n < p_.nodes.size(); ++n)
      if (!planned_[n]) chains_.push_back({mention(n)});
  }

  std::string emit() {
    defined_.assign(p_.nodes.size(), false);
    leaf_defined_.assign(p_.leaves.size(), false);
    out_.clear();
    for (size_t ci = 0; ci < chains_.size(); ++ci) {
      if (ci) out_ += " ; ";
      for (size_t k = 0; k < chains_[ci].size(); ++k) {
        const Mention& m = chains_[ci][k];
        if (k) out_ += " -> ";
        if (m.in_slot >= 0) out_ += fmt::format("{}:", m.in_slot);
        term(m.node);
        if (m.out_slot >= 0) out_ += fmt::format(".{}", m.out_slot);
      }
    }
    return out_;
  }

  void term(size_t n) {
    if (defined_[n]) {
      ++refs_[n];
      out_ += names_[n];
      return;
    }
    defined_[n] = true;
    if (n == p_.root && p_.root != 0) out_ += "^";
    if (!names_[n].empty()) out_ += names_[n] + ":";
    out_ += nodeText(p_.nodes[n]);
    const std::vector<PatternOperand>& operands = p_.nodes[n].operands;
    if (operands.empty()) return;
    out_ += "(";
    for (size_t i = 0; i < operands.size(); ++i) {
      if (i) out_ += ", ";
      if (operands[i].leaf) {
        const PatternLeaf& leaf = p_.leaves[operands[i].index];
        if (leaf_defined_[operands[i].index]) {
          out_ += "$" + leaf.capture;
        } else {
          leaf_defined_[operands[i].index] = true;
          out_ += leafText(leaf);
        }
        continue;
      }
      const PatternEdge& e = p_.edges[operands[i].index];
      term(e.from);
      if (e.from_output != 0) out_ += fmt::format(".{}", e.from_output);
    }
    out_ += ")";
  }

  const Pattern& p_;
  std::vector<std::vector<Mention>> chains_;
  std::vector<bool> planned_, defined_, leaf_defined_;
  std::vector<std::string> names_;
  std::vector<int> refs_;
  std::string out_;
};

}  // namespace

std::string opsText(const PatternNode& n) {
  std::string s = n.domain.empty() ? "" : n.domain + "::";
  if (n.op_types.empty()) return s + "*";
  for (size_t i = 0; i < n.op_types.size(); ++i) s += (i ? "|" : "") + n.op_types[i];
  return s;
}

std::string dtypesText(const std::vector<DType>& dtypes) {
  std::vector<std::string_view> names;
  for (DType d : dtypes) names.push_back(dtypeName(d));
  return fmt::format("{}", fmt::join(names, "|"));
}

std::string conditionText(const NodeCondition& c) {
  if (!c.attribute.empty()) return c.attribute + "=" + conditionValueText(c.value);
  return "dtype=" + dtypesText(c.dtypes);
}

std::string numberText(double v) { return pointed(v); }

std::string leafText(const PatternLeaf& leaf) {
  if (leaf.equals) return numberText(*leaf.equals);
  switch (leaf.kind) {
    case LeafKind::GraphInput: return "$" + leaf.capture + ":input";
    case LeafKind::Constant: return "$" + leaf.capture + ":const";
    case LeafKind::Any: break;
  }
  return "$" + leaf.capture;
}

Pattern Pattern::parse(std::string_view text, std::string name) {
  return PatternParser(text, std::move(name)).parse();
}

std::string Pattern::str() const {
  if (nodes.empty()) return "";
  return PatternPrinter(*this).print();
}

}  // namespace fusectl::passes
