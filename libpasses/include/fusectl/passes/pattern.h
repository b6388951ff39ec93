// Patterns: small DAGs of ops that a fusion anchors on, declared apart from the rewrites.
//
// A pattern names its nodes (captures), gives each an op type or a set of them, and connects
// them with edges that may name output and input slots. Matching starts at the root node's
// op-type index and walks the edges; it only reads the graph. Legality checks are named
// Constraints evaluated in declaration order; the first that fails becomes the candidate's
// reason ("Conv_12 output has 2 consumers: BatchNormalization_13, Concat_40"), so every
// candidate anchor ends up either matched or explained.
//
// Textual syntax (docs/patterns.md has the grammar):
//   Conv -> BatchNormalization -> Relu
//   conv:Conv -> bn:BatchNormalization -> act:Relu|Clip|LeakyRelu
//   c:Conv -> add:Add ; other:* -> add        (a residual Add: one input from a Conv)
//   c:Conv.0 -> 1:add:Add                     (output slot 0 of c feeds input slot 1 of add)
//   c:Conv[group=1, dtype=float] -> Relu      (conditions on a node's attributes and dtype)
// A capture defined once can be referred to by name later; `*` matches any op; the first
// node written is the root unless one is marked with `^` (`^c:Conv`).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl::passes {

// A condition written after a node's ops: `Conv[group=1, dtype=float|float16]`. Checked when a
// binding is complete, before the pattern's constraints, and reported like one
// ("attr:c.group": "Conv(C) has group=2, the pattern wants group=1").
struct NodeCondition {
  // An attribute equal to `value` (kind Int, Float, String, Ints or Floats; an int literal also
  // matches a float attribute of that value). An absent attribute takes its ONNX schema default.
  std::string attribute;
  Attribute value;
  // When `attribute` is empty: the node's output 0 has one of these element types.
  std::vector<DType> dtypes;
};

struct PatternNode {
  std::string capture;                // name used by constraints and rewrites
  std::vector<std::string> op_types;  // any of these; empty = any op ("*")
  std::string domain;                 // "" for ai.onnx
  std::vector<NodeCondition> conditions;
  bool matchesOp(const Node& n) const;
};

struct PatternEdge {
  size_t from = 0;       // producer pattern node
  size_t to = 0;         // consumer pattern node
  int from_output = 0;   // producer output slot
  int to_input = -1;     // consumer input slot; -1 = any slot
};

// Nodes bound by a match, indexed like Pattern::nodes.
class Match {
 public:
  explicit Match(size_t n = 0) : nodes_(n, nullptr) {}
  Node* operator[](size_t i) const { return nodes_[i]; }
  Node*& operator[](size_t i) { return nodes_[i]; }
  Node* get(std::string_view capture) const;  // by capture name; nullptr when absent
  const std::vector<Node*>& nodes() const { return nodes_; }
  void bindNames(const std::vector<PatternNode>* names) { names_ = names; }
  Node* root() const { return nodes_.empty() ? nullptr : nodes_[root_]; }
  void setRoot(size_t r) { root_ = r; }

 private:
  std::vector<Node*> nodes_;
  const std::vector<PatternNode>* names_ = nullptr;
  size_t root_ = 0;
};

// A named legality condition. `check` returns "" when the match is legal, else the reason,
// phrased for users and naming the node ("Conv_3 weight 'W' is not a constant").
struct Constraint {
  std::string name;
  std::function<std::string(const Match&)> check;
};

class Pattern {
 public:
  Pattern() = default;
  // Parses the textual syntax; throws fusectl::Error(Usage) naming the offending position.
  static Pattern parse(std::string_view text, std::string name = "");
  std::string str() const;  // canonical text; parse(str()) gives the same pattern

  std::string name;
  std::vector<PatternNode> nodes;
  std::vector<PatternEdge> edges;
  size_t root = 0;
  std::vector<Constraint> constraints;

  Pattern& require(Constraint c) {
    constraints.push_back(std::move(c));
    return *this;
  }
  std::optional<size_t> indexOf(std::string_view capture) const;
};

// A candidate anchor that did not match, and why.
struct NearMiss {
  std::string pattern;
  std::string anchor;      // root node label
  std::string constraint;  // "structure" for a shape mismatch, else the Constraint's name
  std::string node;        // the node the reason is about
  std::string reason;
};

struct MatchOptions {
  bool explain = true;  // build NearMiss reasons (costs string formatting)
  // Structural mismatches are near misses too; when false only constraint failures are kept.
  bool report_structural = true;
};

// Matches refer to the pattern's capture names: keep the Pattern alive while calling get().
struct MatchResult {
  std::vector<Match> matches;  // in root op-index order; may overlap
  std::vector<NearMiss> near_misses;
  size_t candidates = 0;  // root-type nodes examined
};

// A pattern catalog: named patterns in a text file (docs/patterns.md, "Catalog files").
//   # comment
//   conv-bn-relu = c:Conv -> bn:BatchNormalization -> act:Relu
//   residual     = c:Conv -> add:Add ;
//                  other:* -> add          (an indented line continues the entry)
// Names are letters, digits, '-', '_' and '.', each used once. Errors are
// fusectl::Error(InvalidInput) naming `display_name`, the line and the reason.
std::vector<Pattern> parseCatalog(std::string_view text, const std::string& display_name);
// Reads and parses a catalog file; a file that cannot be read is fusectl::Error(Io).
std::vector<Pattern> loadCatalog(const std::string& path);

// Finds every match of `p` in `g` (main graph only). Read-only.
MatchResult matchPattern(const Graph& g, const Pattern& p, const MatchOptions& options = {});

// Tries one anchor: fills `match` and returns "" on success, else sets `miss`.
bool matchAt(const Graph& g, const Pattern& p, Node* anchor, Match& match, NearMiss* miss);

// The nodes matchPattern tries as the root, in the same order (op-type index order), as a
// snapshot: a driver that rewrites while it walks them visits none of the nodes it creates.
std::vector<Node*> patternAnchors(const Graph& g, const Pattern& p);

// matchAt for many anchors of one pattern: the search plan is computed once.
class AnchorMatcher {
 public:
  explicit AnchorMatcher(const Pattern& p);
  // Returns true and fills `match`, or returns false and, when `miss` is given and the failure
  // is a near miss under `options` (any failure, or with report_structural false only a failed
  // constraint), fills `miss` and sets *missed.
  bool match(const Graph& g, Node* anchor, const MatchOptions& options, Match& match,
             NearMiss* miss, bool* missed) const;

 private:
  const Pattern& pattern_;
  std::vector<size_t> plan_;
};

// Reusable constraints. Each returns "" when it holds.
namespace constraints {
// The capture's output `output` is read by exactly one node (once or more) and is not a graph
// output: the intermediate can disappear.
Constraint uniqueConsumer(std::string capture, int output = 0);
// The capture's output `output` is not a graph output (it may have other consumers).
Constraint notGraphOutput(std::string capture, int output = 0);
// Input `input` of the capture is a constant (initializer that is not a graph input).
Constraint constantInput(std::string capture, int input);
// BatchNormalization in inference form: one output (no running stats outputs), training_mode 0.
Constraint batchNormInference(std::string capture);
// Every input and output dtype of the captures is one of `dtypes`.
Constraint dtypeIn(std::vector<std::string> captures, std::vector<DType> dtypes);
// The capture's output `output` has a known rank.
Constraint rankKnown(std::string capture, int output = 0);
// Input `input` of the capture has the same shape as output 0 of `other` for every value of
// the symbolic dims (provablyEqual).
Constraint sameShapeAs(std::string capture, int input, std::string other);
}  // namespace constraints

}  // namespace fusectl::passes
