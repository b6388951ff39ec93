// Patterns: the textual syntax (parse/print) and the read-only matcher.
//
// Matching anchors on the root's op-type index and binds the other pattern nodes by walking
// the pattern's edges in a precomputed order (each step has one end already bound), in both
// directions: producer->consumer follows the producer's output use list, consumer->producer
// follows the consumer's input slot to its producer. When an edge offers several candidates
// (three MatMuls reading one value), the matcher backtracks, keeping the binding injective.
// A structural failure is reported at the deepest step reached, since that is the one a user
// can act on ("Conv_3 output 0 feeds Add_4, not BatchNormalization"); a complete binding is
// then checked against the constraints in order, and the first one that fails is the reason.
#include "fusectl/passes/pattern.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "fusectl/graph/error.h"
#include "fusectl/graph/op_schema.h"
#include "fusectl/graph/summary.h"

namespace fusectl::passes {

namespace {

std::string_view normDomain(std::string_view d) { return d == "ai.onnx" ? std::string_view() : d; }

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
        skipSpace();
        PatternNode n = parseOps(node_at);
        n.capture = word;
        t.node = addNode(std::move(n), node_at);
      } else if (auto ref = p_.indexOf(word); ref && !peek("::") && !peekDomainDot()) {
        t.node = *ref;
        t.reference = true;
      } else {
        pos_ = word_at;
        t.node = addNode(parseOps(node_at), node_at);
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

std::string opsText(const PatternNode& n) {
  std::string s = n.domain.empty() ? "" : n.domain + "::";
  if (n.op_types.empty()) return s + "*";
  for (size_t i = 0; i < n.op_types.size(); ++i) s += (i ? "|" : "") + n.op_types[i];
  return s;
}

// A float that reads back as a float: "1.0", not "1".
std::string floatText(float f) {
  std::string s = fmt::format("{}", f);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

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

// "float|float16"
std::string dtypesText(const std::vector<DType>& dtypes) {
  std::vector<std::string_view> names;
  for (DType d : dtypes) names.push_back(dtypeName(d));
  return fmt::format("{}", fmt::join(names, "|"));
}

std::string conditionText(const NodeCondition& c) {
  if (!c.attribute.empty()) return c.attribute + "=" + conditionValueText(c.value);
  return "dtype=" + dtypesText(c.dtypes);
}

// The ops and their conditions, as written: "Conv[group=1, dtype=float]".
std::string nodeText(const PatternNode& n) {
  std::string s = opsText(n);
  if (n.conditions.empty()) return s;
  std::vector<std::string> parts;
  for (const NodeCondition& c : n.conditions) parts.push_back(conditionText(c));
  return fmt::format("{}[{}]", s, fmt::join(parts, ", "));
}

// Both numeric kinds compare as float, since an attribute is stored as one or the other.
bool conditionHolds(const Attribute& have, const Attribute& want) {
  auto numbers = [](const Attribute& a, std::vector<double>& out) {
    switch (a.kind) {
      case AttrKind::Int: out = {static_cast<double>(a.i)}; return true;
      case AttrKind::Float: out = {static_cast<double>(a.f)}; return true;
      case AttrKind::Ints: out.assign(a.ints.begin(), a.ints.end()); return true;
      case AttrKind::Floats: out.assign(a.floats.begin(), a.floats.end()); return true;
      default: return false;
    }
  };
  if (want.kind == AttrKind::String) return have.kind == AttrKind::String && have.s == want.s;
  const bool want_list = want.kind == AttrKind::Ints || want.kind == AttrKind::Floats;
  const bool have_list = have.kind == AttrKind::Ints || have.kind == AttrKind::Floats;
  std::vector<double> h, w;
  if (want_list != have_list || !numbers(have, h) || !numbers(want, w)) return false;
  if (h.size() != w.size()) return false;
  for (size_t i = 0; i < h.size(); ++i)
    if (static_cast<float>(h[i]) != static_cast<float>(w[i])) return false;
  return true;
}

// "" when `n` meets the condition, else why not.
std::string conditionFailure(const NodeCondition& c, const Node& n) {
  if (c.attribute.empty()) {
    const Value* out = n.output(0);
    const DType d = out ? out->dtype() : DType::Undefined;
    if (std::find(c.dtypes.begin(), c.dtypes.end(), d) != c.dtypes.end()) return "";
    return fmt::format("{} output is {}, the pattern wants {}", n.label(),
                       d == DType::Undefined ? "of unknown type" : dtypeName(d),
                       dtypesText(c.dtypes));
  }
  const Attribute* have = n.attr(c.attribute);
  std::optional<Attribute> by_default;
  if (!have) {
    by_default = schemaDefaultAttribute(n.opType(), n.domain(), c.attribute);
    if (!by_default) {
      return fmt::format("{} has no attribute '{}', and its ONNX schema gives no default",
                         n.label(), c.attribute);
    }
    have = &*by_default;
  }
  if (conditionHolds(*have, c.value)) return "";
  return fmt::format("{} has {}={}{}, the pattern wants {}", n.label(), c.attribute,
                     formatAttributeValue(*have, 8), by_default ? " (the default)" : "",
                     conditionText(c));
}

// What a pattern node accepts, for reasons: "BatchNormalization", "Relu|Clip", "any op".
std::string opsWanted(const PatternNode& n) {
  if (n.op_types.empty()) return n.domain.empty() ? "any op" : "an op of domain " + n.domain;
  return opsText(n);
}

std::string opOf(const Node& n) {
  return n.domain().empty() ? n.opType() : n.domain() + "::" + n.opType();
}

// ---------------------------------------------------------------------------------------------
// Matching

// Edge visiting order: each edge has at least one end bound by the root or earlier edges.
std::vector<size_t> searchPlan(const Pattern& p) {
  std::vector<size_t> plan;
  std::vector<bool> bound(p.nodes.size(), false), used(p.edges.size(), false);
  if (p.nodes.empty()) return plan;
  bound[p.root] = true;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < p.edges.size(); ++i) {
      const PatternEdge& e = p.edges[i];
      if (used[i] || !(bound[e.from] || bound[e.to])) continue;
      used[i] = true;
      bound[e.from] = bound[e.to] = true;
      plan.push_back(i);
      grew = true;
      break;  // restart so that edges stay in declaration order where possible
    }
  }
  return plan;
}

std::string valueOrigin(const Value& v) {
  if (v.isGraphInput()) return fmt::format("'{}' is a graph input", v.name());
  if (v.isInitializer()) return fmt::format("'{}' is a constant", v.name());
  if (v.kind() == Value::Kind::OuterRef) return fmt::format("'{}' comes from an outer graph", v.name());
  return fmt::format("'{}' has no producer", v.name());
}

std::string labelList(const std::vector<Node*>& nodes, size_t cap = 5) {
  std::string s;
  for (size_t i = 0; i < nodes.size() && i < cap; ++i) s += (i ? ", " : "") + nodes[i]->label();
  if (nodes.size() > cap) s += fmt::format(", ... ({} more)", nodes.size() - cap);
  return s;
}

class Matcher {
 public:
  Matcher(const Graph& g, const Pattern& p, const std::vector<size_t>& plan, bool explain)
      : g_(g), p_(p), plan_(plan), explain_(explain), bound_(p.nodes.size(), nullptr) {}

  // Returns true on a match (in `out`); otherwise fills `miss` when explaining.
  bool run(Node* anchor, Match& out, NearMiss* miss) {
    const PatternNode& rootp = p_.nodes[p_.root];
    if (!rootp.matchesOp(*anchor)) {
      if (miss && explain_) {
        fillMiss(*miss, anchor, "structure", anchor->label(),
                 fmt::format("{} is {}, not {}", anchor->label(), opOf(*anchor), opsWanted(rootp)));
      }
      return false;
    }
    bound_[p_.root] = anchor;
    bool found = search(0);
    if (found) {
      out = Match(p_.nodes.size());
      for (size_t i = 0; i < bound_.size(); ++i) out[i] = result_[i];
      out.setRoot(p_.root);
      return true;
    }
    if (miss && explain_) {
      if (have_constraint_miss_) {
        fillMiss(*miss, anchor, constraint_name_, constraint_node_, constraint_reason_);
      } else {
        fillMiss(*miss, anchor, "structure", fail_node_, fail_reason_);
      }
    }
    return false;
  }

  bool constraintFailure() const { return have_constraint_miss_; }

 private:
  static constexpr int kMaxCompleteBindings = 16;
  static constexpr int kMaxSteps = 100000;

  void fillMiss(NearMiss& m, Node* anchor, std::string constraint, std::string node,
                std::string reason) const {
    m.pattern = p_.name;
    m.anchor = anchor->label();
    m.constraint = std::move(constraint);
    m.node = std::move(node);
    m.reason = std::move(reason);
  }

  bool isBound(const Node* n) const {
    return std::find(bound_.begin(), bound_.end(), n) != bound_.end();
  }

  // Records a structural failure at `step`; the deepest step wins, the first one at a depth.
  template <typename Fn>
  void failAt(size_t step, Node* about, Fn&& reason) {
    if (!explain_) return;
    if (have_fail_ && step <= fail_step_) return;
    have_fail_ = true;
    fail_step_ = step;
    fail_node_ = about->label();
    fail_reason_ = reason();
  }

  bool complete() {
    if (++complete_bindings_ > kMaxCompleteBindings) return false;
    Match m(p_.nodes.size());
    for (size_t i = 0; i < bound_.size(); ++i) m[i] = bound_[i];
    m.bindNames(&p_.nodes);
    m.setRoot(p_.root);
    // The nodes' own conditions first: they are part of what the pattern says it matches.
    for (size_t i = 0; i < p_.nodes.size(); ++i) {
      const PatternNode& pn = p_.nodes[i];
      for (const NodeCondition& c : pn.conditions) {
        std::string why = conditionFailure(c, *bound_[i]);
        if (why.empty()) continue;
        const std::string who = pn.capture.empty() ? opsText(pn) : pn.capture;
        noteConstraintMiss(c.attribute.empty() ? "dtype:" + who : "attr:" + who + "." + c.attribute,
                           std::move(why), [&](const std::string&) { return bound_[i]->label(); });
        return false;
      }
    }
    for (const Constraint& c : p_.constraints) {
      std::string why = c.check(m);
      if (!why.empty()) {
        noteConstraintMiss(c.name, std::move(why),
                           [&](const std::string& reason) { return constraintNode(reason, m); });
        return false;
      }
    }
    result_ = bound_;
    return true;
  }

  // Keeps the anchor's first failed condition or constraint: the reason it is reported with.
  // `node(reason)` names the node the reason is about; it runs for the first failure only.
  template <typename NodeFn>
  void noteConstraintMiss(std::string name, std::string reason, NodeFn&& node) {
    if (have_constraint_miss_) return;
    have_constraint_miss_ = true;
    constraint_name_ = std::move(name);
    constraint_reason_ = std::move(reason);
    constraint_node_ = node(constraint_reason_);
  }

  // The node a constraint reason is about: the first bound node whose label opens the reason.
  static std::string constraintNode(const std::string& reason, const Match& m) {
    std::string best;
    for (Node* n : m.nodes()) {
      if (!n) continue;
      const std::string l = n->label();
      if (reason.compare(0, l.size(), l) == 0 && l.size() > best.size()) best = l;
    }
    return best.empty() ? m.root()->label() : best;
  }

  bool search(size_t step) {
    if (++steps_ > kMaxSteps) return false;
    if (step == plan_.size()) return complete();
    const PatternEdge& e = p_.edges[plan_[step]];
    Node* prod = bound_[e.from];
    Node* cons = bound_[e.to];
    if (prod && cons) return checkEdge(step, e, prod, cons) && search(step + 1);
    if (prod) return extendToConsumer(step, e, prod);
    return extendToProducer(step, e, cons);
  }

  bool checkEdge(size_t step, const PatternEdge& e, Node* prod, Node* cons) {
    Value* v = prod->output(e.from_output);
    if (v) {
      for (const Use& u : v->uses()) {
        if (u.node == cons && u.input != Use::kImplicitUse &&
            (e.to_input < 0 || u.input == e.to_input)) {
          return true;
        }
      }
    }
    failAt(step, prod, [&] {
      return e.to_input < 0
                 ? fmt::format("{} output {} does not feed {}", prod->label(), e.from_output,
                               cons->label())
                 : fmt::format("{} output {} does not feed {} at input {}", prod->label(),
                               e.from_output, cons->label(), e.to_input);
    });
    return false;
  }

  bool extendToConsumer(size_t step, const PatternEdge& e, Node* prod) {
    const PatternNode& want = p_.nodes[e.to];
    Value* v = prod->output(e.from_output);
    if (!v) {
      failAt(step, prod, [&] {
        return fmt::format("{} has no output {}", prod->label(), e.from_output);
      });
      return false;
    }
    std::vector<Node*> tried;
    for (const Use& u : v->uses()) {
      if (u.input == Use::kImplicitUse) continue;
      if (e.to_input >= 0 && u.input != e.to_input) continue;
      Node* c = u.node;
      if (std::find(tried.begin(), tried.end(), c) != tried.end()) continue;
      tried.push_back(c);
      if (isBound(c) || !want.matchesOp(*c)) continue;
      bound_[e.to] = c;
      bool ok = search(step + 1);
      bound_[e.to] = nullptr;
      if (ok) return true;
      if (steps_ > kMaxSteps || complete_bindings_ > kMaxCompleteBindings) return false;
    }
    failAt(step, prod, [&] { return consumerReason(e, prod, v, want); });
    return false;
  }

  std::string consumerReason(const PatternEdge& e, Node* prod, Value* v,
                             const PatternNode& want) const {
    std::vector<Node*> consumers;
    for (const Use& u : v->uses()) {
      if (u.input == Use::kImplicitUse) continue;
      if (std::find(consumers.begin(), consumers.end(), u.node) == consumers.end())
        consumers.push_back(u.node);
    }
    std::string out = fmt::format("{} output {}", prod->label(), e.from_output);
    if (consumers.empty()) {
      return v->isGraphOutput() ? out + " is only read as a graph output"
                                : out + " has no consumers";
    }
    // Right op at the wrong slot?
    if (e.to_input >= 0) {
      for (const Use& u : v->uses()) {
        if (u.input != Use::kImplicitUse && u.input != e.to_input && !isBound(u.node) &&
            want.matchesOp(*u.node)) {
          return fmt::format("{} feeds {} at input {}, not input {}", out, u.node->label(),
                             u.input, e.to_input);
        }
      }
    }
    bool some_bound_match = false;
    for (Node* c : consumers) some_bound_match |= isBound(c) && want.matchesOp(*c);
    if (some_bound_match) {
      return fmt::format("{} feeds no other {} (consumers: {})", out, opsWanted(want),
                         labelList(consumers));
    }
    return fmt::format("{} feeds {}, not {}", out, labelList(consumers), opsWanted(want));
  }

  bool extendToProducer(size_t step, const PatternEdge& e, Node* cons) {
    const PatternNode& want = p_.nodes[e.from];
    size_t first = e.to_input < 0 ? 0 : static_cast<size_t>(e.to_input);
    size_t last = e.to_input < 0 ? cons->numInputs() : first + 1;
    for (size_t slot = first; slot < last; ++slot) {
      Value* v = cons->input(slot);
      if (!v || !v->producer() || v->producerOutputIndex() != e.from_output) continue;
      Node* p = v->producer();
      if (isBound(p) || !want.matchesOp(*p)) continue;
      bound_[e.from] = p;
      bool ok = search(step + 1);
      bound_[e.from] = nullptr;
      if (ok) return true;
      if (steps_ > kMaxSteps || complete_bindings_ > kMaxCompleteBindings) return false;
    }
    failAt(step, cons, [&] { return producerReason(e, cons, want); });
    return false;
  }

  std::string producerReason(const PatternEdge& e, Node* cons, const PatternNode& want) const {
    auto describeInput = [&](size_t slot) -> std::string {
      Value* v = cons->input(slot);
      if (!v) return fmt::format("input {} is absent", slot);
      if (!v->producer()) return fmt::format("input {} {}", slot, valueOrigin(*v));
      Node* p = v->producer();
      if (v->producerOutputIndex() != e.from_output) {
        return fmt::format("input {} comes from {} output {}, not output {}", slot, p->label(),
                           v->producerOutputIndex(), e.from_output);
      }
      return fmt::format("input {} comes from {}, not {}", slot, p->label(), opsWanted(want));
    };
    if (e.to_input >= 0) {
      if (static_cast<size_t>(e.to_input) >= cons->numInputs()) {
        return fmt::format("{} has no input {}", cons->label(), e.to_input);
      }
      return fmt::format("{} {}", cons->label(), describeInput(e.to_input));
    }
    // One input: say what it is, as for a named slot ("input 0 'X' is a graph input").
    size_t present = 0, only = 0;
    for (size_t slot = 0; slot < cons->numInputs(); ++slot)
      if (cons->input(slot)) ++present, only = slot;
    const Value* single = present == 1 ? cons->input(only) : nullptr;
    if (single && !(single->producer() && isBound(single->producer())))
      return fmt::format("{} {}", cons->label(), describeInput(only));
    std::vector<std::string> from;
    for (size_t slot = 0; slot < cons->numInputs(); ++slot) {
      Value* v = cons->input(slot);
      if (!v) continue;
      from.push_back(v->producer() ? v->producer()->label() : "'" + v->name() + "'");
    }
    std::string list;
    for (size_t i = 0; i < from.size(); ++i) list += (i ? ", " : "") + from[i];
    return fmt::format("no other input of {} comes from {} (inputs from {})", cons->label(),
                       opsWanted(want), list.empty() ? "nothing" : list);
  }

  const Graph& g_;
  const Pattern& p_;
  const std::vector<size_t>& plan_;
  bool explain_;
  std::vector<Node*> bound_;
  std::vector<Node*> result_;
  int steps_ = 0;
  int complete_bindings_ = 0;
  bool have_fail_ = false;
  size_t fail_step_ = 0;
  std::string fail_node_, fail_reason_;
  bool have_constraint_miss_ = false;
  std::string constraint_name_, constraint_node_, constraint_reason_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

bool PatternNode::matchesOp(const Node& n) const {
  if (normDomain(n.domain()) != normDomain(domain)) {
    // `*` without a domain matches any op of any domain.
    if (!(op_types.empty() && domain.empty())) return false;
  }
  if (op_types.empty()) return true;
  for (const std::string& t : op_types)
    if (n.opType() == t) return true;
  return false;
}

Node* Match::get(std::string_view capture) const {
  if (!names_) return nullptr;
  for (size_t i = 0; i < names_->size() && i < nodes_.size(); ++i)
    if ((*names_)[i].capture == capture) return nodes_[i];
  return nullptr;
}

std::optional<size_t> Pattern::indexOf(std::string_view capture) const {
  if (capture.empty()) return std::nullopt;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].capture == capture) return i;
  return std::nullopt;
}

Pattern Pattern::parse(std::string_view text, std::string name) {
  return PatternParser(text, std::move(name)).parse();
}

std::string Pattern::str() const {
  if (nodes.empty()) return "";
  // Mentions in print order: chains are maximal runs of edges where each starts at the node the
  // previous one ended at. A node is defined where it is first mentioned; lower-indexed nodes
  // that would otherwise be defined later are defined first on their own (breaking the chain),
  // so that parsing the text back numbers the nodes and edges the same way.
  struct Mention {
    size_t node;
    int in_slot = -1, out_slot = -1;
    bool defines = false;
  };
  std::vector<std::vector<Mention>> chains;
  std::vector<Mention> chain;
  std::vector<bool> planned(nodes.size(), false);
  auto mention = [&](size_t n) {
    Mention m{n};
    m.defines = !planned[n];
    planned[n] = true;
    return m;
  };
  auto flush = [&] {
    if (chain.size() > 1 || (chain.size() == 1 && chain[0].defines)) chains.push_back(chain);
    chain.clear();
  };
  auto unplannedBelow = [&](size_t n) {
    for (size_t k = 0; k < n; ++k)
      if (!planned[k]) return true;
    return false;
  };
  auto predefine = [&](size_t n) {  // call with `chain` empty
    if (planned[n]) return;
    for (size_t k = 0; k < n; ++k)
      if (!planned[k]) chains.push_back({mention(k)});
  };
  for (const PatternEdge& e : edges) {
    if (chain.empty() || chain.back().node != e.from) {
      flush();
      predefine(e.from);
      chain.push_back(mention(e.from));
    }
    if (!planned[e.to] && unplannedBelow(e.to)) {
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
  for (size_t n = 0; n < nodes.size(); ++n)
    if (!planned[n]) chains.push_back({mention(n)});
  // Anonymous nodes mentioned more than once need a name to be referred to.
  std::vector<int> mentions(nodes.size(), 0);
  for (const auto& c : chains)
    for (const Mention& m : c) ++mentions[m.node];
  std::vector<std::string> names(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    names[n] = nodes[n].capture;
    if (names[n].empty() && mentions[n] > 1) {
      for (int k = 0; names[n].empty() || indexOf(names[n]); ++k)
        names[n] = fmt::format("n{}{}", n, k ? fmt::format("_{}", k) : "");
    }
  }
  std::vector<bool> defined(nodes.size(), false);
  std::string out;
  for (size_t ci = 0; ci < chains.size(); ++ci) {
    if (ci) out += " ; ";
    for (size_t k = 0; k < chains[ci].size(); ++k) {
      const Mention& m = chains[ci][k];
      if (k) out += " -> ";
      if (m.in_slot >= 0) out += fmt::format("{}:", m.in_slot);
      if (!defined[m.node]) {
        defined[m.node] = true;
        if (m.node == root && root != 0) out += "^";
        if (!names[m.node].empty()) out += names[m.node] + ":";
        out += nodeText(nodes[m.node]);
      } else {
        out += names[m.node];
      }
      if (m.out_slot >= 0) out += fmt::format(".{}", m.out_slot);
    }
  }
  return out;
}

bool matchAt(const Graph& g, const Pattern& p, Node* anchor, Match& match, NearMiss* miss) {
  if (p.nodes.empty() || !anchor) return false;
  std::vector<size_t> plan = searchPlan(p);
  Matcher m(g, p, plan, miss != nullptr);
  if (!m.run(anchor, match, miss)) return false;
  match.bindNames(&p.nodes);
  return true;
}

std::vector<Node*> patternAnchors(const Graph& g, const Pattern& p) {
  std::vector<Node*> out;
  if (p.nodes.empty()) return out;
  const PatternNode& root = p.nodes[p.root];
  if (root.op_types.empty()) {
    for (Node* n : g.nodes())
      if (root.matchesOp(*n)) out.push_back(n);
  } else {
    for (const std::string& op : root.op_types)
      for (Node* n : g.nodesOfType(op, root.domain)) out.push_back(n);
  }
  return out;
}

AnchorMatcher::AnchorMatcher(const Pattern& p) : pattern_(p) {
  if (!p.nodes.empty()) plan_ = searchPlan(p);
}

bool AnchorMatcher::match(const Graph& g, Node* anchor, const MatchOptions& options,
                          Match& match, NearMiss* miss, bool* missed) const {
  if (missed) *missed = false;
  if (pattern_.nodes.empty() || !anchor) return false;
  const bool explain = options.explain && miss;
  Matcher m(g, pattern_, plan_, explain);
  if (m.run(anchor, match, explain ? miss : nullptr)) {
    match.bindNames(&pattern_.nodes);
    return true;
  }
  if (explain && missed) *missed = options.report_structural || m.constraintFailure();
  return false;
}

MatchResult matchPattern(const Graph& g, const Pattern& p, const MatchOptions& options) {
  MatchResult r;
  if (p.nodes.empty()) return r;
  std::vector<size_t> plan = searchPlan(p);
  auto tryAnchor = [&](Node* anchor) {
    ++r.candidates;
    Matcher m(g, p, plan, options.explain);
    Match match;
    NearMiss miss;
    if (m.run(anchor, match, options.explain ? &miss : nullptr)) {
      match.bindNames(&p.nodes);
      r.matches.push_back(std::move(match));
    } else if (options.explain && (options.report_structural || m.constraintFailure())) {
      r.near_misses.push_back(std::move(miss));
    }
  };
  const PatternNode& root = p.nodes[p.root];
  if (root.op_types.empty()) {
    for (Node* n : g.nodes())
      if (root.matchesOp(*n)) tryAnchor(n);
  } else {
    for (const std::string& op : root.op_types)
      for (Node* n : g.nodesOfType(op, root.domain)) tryAnchor(n);
  }
  return r;
}

}  // namespace fusectl::passes
