// Pattern text: the canonical printer (Pattern::str) and the text pieces reasons share.
//
// The printer writes chains of `->` edges and, for a node written in call form, its operands
// inside the call, so that parsing the printed text numbers nodes, edges and leaves as the
// pattern does (a pattern built in code is printed so that it parses back to the same
// structure).
#include <fmt/format.h>

#include "fusectl/passes/pattern.h"
#include "pattern_internal.h"

namespace fusectl::passes {

namespace {

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

std::string Pattern::str() const {
  if (nodes.empty()) return "";
  return PatternPrinter(*this).print();
}

}  // namespace fusectl::passes
