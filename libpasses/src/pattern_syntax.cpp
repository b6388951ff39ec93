// Pattern text: the parser (the grammar is in docs/patterns.md; pattern_printer.cpp prints it
// back). Errors are fusectl::Error(Usage) naming the line and column.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

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
      std::vector<Number> values;
      bool any_float = false;
      while (true) {
        skipSpace();
        values.push_back(readNumber());
        any_float |= values.back().is_float;
        if (closesList("a list")) break;
      }
      if (any_float) {
        std::vector<float> floats;
        for (const Number& n : values) floats.push_back(static_cast<float>(n.value));
        return Attribute::ofFloats(name, std::move(floats));
      }
      std::vector<int64_t> ints;
      for (const Number& n : values) ints.push_back(n.integer);
      return Attribute::ofInts(name, std::move(ints));
    }
    const Number v = readNumber();
    if (v.is_float) return Attribute::ofFloat(name, static_cast<float>(v.value));
    return Attribute::ofInt(name, v.integer);
  }

  // An integer is kept exactly (a double holds only 53 bits of it); `value` is its double.
  struct Number {
    double value = 0;
    int64_t integer = 0;
    bool is_float = false;
  };

  Number readNumber() {
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
                                   std::strchr("+-.eE", text_[pos_]) != nullptr)) {
      ++pos_;
    }
    const std::string token(text_.substr(start, pos_ - start));
    if (token.empty()) fail(start, fmt::format("expected a value, found {}", describeHere()));
    Number n;
    n.is_float = token.find_first_of(".eE") != std::string::npos;
    char* end = nullptr;
    errno = 0;
    if (n.is_float) {
      n.value = std::strtod(token.c_str(), &end);
    } else {
      n.integer = std::strtoll(token.c_str(), &end, 10);
      n.value = static_cast<double>(n.integer);
    }
    if (end != token.c_str() + token.size()) fail(start, fmt::format("'{}' is not a number", token));
    // strtoll saturates and strtod overflows to infinity: either would be a value the pattern
    // did not say (and converting the saturated one back to int64 is undefined).
    if (errno == ERANGE && (!n.is_float || std::isinf(n.value)))
      fail(start, fmt::format("'{}' is out of range", token));
    return n;
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
        PatternLeaf leaf;
        leaf.kind = LeafKind::Constant;
        leaf.equals = readNumber().value;
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

}  // namespace

Pattern Pattern::parse(std::string_view text, std::string name) {
  // The passes parse their pattern texts each time they run, some built from the op they look
  // for, so an optimize of a small model spent a tenth of its time here and the sweeps that
  // optimize thousands of models more. Parsed patterns are kept by text and name; a copy costs
  // a fraction of a parse. Bounded, for the programs that parse arbitrary texts (`match`, the
  // pattern fuzzer): past kMaxCached distinct patterns the rest are parsed every time.
  constexpr size_t kMaxCached = 1024;
  static std::mutex mutex;
  static std::unordered_map<std::string, Pattern> cache;
  std::string key;
  key.reserve(text.size() + 1 + name.size());
  key.append(text).push_back('\0');
  key.append(name);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  Pattern parsed = PatternParser(text, std::move(name)).parse();  // throws on a syntax error
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() < kMaxCached) cache.emplace(std::move(key), parsed);
  return parsed;
}

}  // namespace fusectl::passes
