// Patterns: small DAGs of ops that a fusion anchors on, declared apart from the rewrites.
//
// A pattern names its nodes (captures), gives each an op type or a set of them, and connects
// them with edges that may name output and input slots. Matching starts at the root node's
// op-type index and walks the edges; it only reads the graph. Legality checks are named
// Constraints evaluated in declaration order; the first that fails becomes the candidate's
// reason ("Conv_12 output has 2 consumers: BatchNormalization_13, Concat_40"), so every
// candidate anchor ends up either matched or explained. Reasons are formatted only when someone
// listens (MatchOptions::explain, PassContext::explain()).
//
// Textual syntax (docs/patterns.md has the grammar):
//   Conv -> BatchNormalization -> Relu
//   conv:Conv -> bn:BatchNormalization -> act:Relu|Clip|LeakyRelu
//   c:Conv -> add:Add ; other:* -> add        (a residual Add: one input from a Conv)
//   c:Conv.0 -> 1:add:Add                     (output slot 0 of c feeds input slot 1 of add)
//   c:Conv[group=1, dtype=float] -> Relu      (conditions on a node's attributes and dtype)
//   m:Mul($x, 0.5)                            (operands: any value x, a constant equal to 0.5)
//   Pow(Sub($x, mean:ReduceMean($x)), 2.0)    (operands may be nodes; $x is one value twice)
//   Conv($x:input, $w:const)                  (a graph input and a constant as leaves)
// A capture defined once can be referred to by name later; `*` matches any op; the first
// node written is the root unless one is marked with `^` (`^c:Conv`). Operands of a
// commutative ONNX op (Add, Mul, Max, Min, Sum, Mean, And, Or, Xor, Equal, BitwiseAnd/Or/Xor)
// match in any order.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
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

// One operand of a node written in call form, `Mul($x, 0.5)`: the edge from an operand node
// (index into Pattern::edges) or a leaf (index into Pattern::leaves).
struct PatternOperand {
  bool leaf = false;
  size_t index = 0;
};

struct PatternNode {
  std::string capture;                // name used by constraints and rewrites
  std::vector<std::string> op_types;  // any of these; empty = any op ("*")
  std::string domain;                 // "" for ai.onnx
  std::vector<NodeCondition> conditions;
  // Operands written in call form, by position: they bind the node's inputs 0..k-1 (a node
  // may have more inputs; a commutative one must have exactly k, in any order). Empty for a
  // node written without parentheses.
  std::vector<PatternOperand> operands;
  bool matchesOp(const Node& n) const;
  // Every op type listed is a commutative ONNX op and at least two operands are written: the
  // matcher then tries the operands in every order (up to 4 operands; more keep their order).
  bool commutative() const;
};

struct PatternEdge {
  size_t from = 0;       // producer pattern node
  size_t to = 0;         // consumer pattern node
  int from_output = 0;   // producer output slot
  int to_input = -1;     // consumer input slot; -1 = any slot. An operand's: its position
  bool operand = false;  // written as an operand, `to(from, ...)`; its slot may be permuted
};

// What a leaf operand must bind to.
enum class LeafKind {
  Any,         // `$x`: any value (a node output, a graph input, a constant)
  GraphInput,  // `$x:input`: a graph input (one with an initializer default counts)
  Constant,    // `$c:const`, or a number: an initializer that is not a graph input, or the
               // output of a Constant node
};

// A leaf operand: a value a pattern node reads that is not produced by a pattern node.
// `$x` written twice is one value: every read must be the same graph value.
struct PatternLeaf {
  std::string capture;  // "" for a number; Match::value(capture)
  LeafKind kind = LeafKind::Any;
  // A number operand (`Mul($x, 0.5)`): a constant with at least one element, every element
  // equal to it within the rounding of the constant's dtype (relative 1e-6 for float, 1e-3 for
  // float16, 8e-3 for bfloat16, 1e-12 for double; integers and bools exactly).
  std::optional<double> equals;
};

class Pattern;

// Nodes (and leaf values) bound by a match, indexed like Pattern::nodes (Pattern::leaves).
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

  // The value bound to leaf `$capture`; nullptr when the pattern has no such leaf.
  Value* value(std::string_view capture) const;
  const std::vector<Value*>& values() const { return values_; }  // indexed like Pattern::leaves
  void bindValues(const std::vector<PatternLeaf>* leaves, std::vector<Value*> values) {
    leaves_ = leaves;
    values_ = std::move(values);
  }

 private:
  std::vector<Node*> nodes_;
  const std::vector<PatternNode>* names_ = nullptr;
  size_t root_ = 0;
  std::vector<Value*> values_;
  const std::vector<PatternLeaf>* leaves_ = nullptr;
};

// Where a failing check says why: the node the failure is about, as data, and the sentence,
// built only when someone listens. A check calls `return why.fail(node, reason);` where
// `reason` is a string or a callable returning one (`[&] { return fmt::format(...); }`), called
// only when listening() (so the matcher's fast path formats nothing).
class Why {
 public:
  explicit Why(bool listening = true) : listening_(listening) {}
  bool listening() const { return listening_; }

  // Records the failure; returns false so that a check can `return why.fail(...)`.
  template <typename Reason>
  bool fail(const Node& about, Reason&& reason) {
    node_ = &about;
    if (listening_) {
      if constexpr (std::is_invocable_v<Reason&>) {
        reason_ = reason();
      } else {
        reason_ = std::forward<Reason>(reason);
      }
    }
    return false;
  }

  const Node* node() const { return node_; }  // nullptr until fail()
  const std::string& reason() const { return reason_; }  // "" unless listening

 private:
  bool listening_;
  const Node* node_ = nullptr;
  std::string reason_;
};

// A named legality condition.
//   Constraint{"name", [](const Match& m, Why& why) {
//     Node* n = m.get("conv");
//     if (ok(*n)) return true;
//     return why.fail(*n, [&] { return fmt::format("{} ...", n->label()); });
//   }}
struct Constraint {
  using Test = std::function<bool(const Match&, Why&)>;

  Constraint() = default;
  Constraint(std::string n, Test t) : name(std::move(n)), test(std::move(t)) {}

  // True when the match is legal; else `why` holds the node and (when listening) the reason.
  bool holds(const Match& m, Why& why) const { return test(m, why); }

  std::string name;
  Test test;
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
  std::vector<PatternLeaf> leaves;
  size_t root = 0;
  std::vector<Constraint> constraints;
  // Declared by the pass, as in MLIR: how much a rewrite of this pattern is worth, for ordering
  // alternatives (higher first; 1 unless declared), and the op types a rewrite creates
  // ("Gemm", "fusectl::FusedConv"). Neither is part of the text; `fusectl match` and
  // `fusectl passes --json` show them when declared.
  int benefit = 1;
  std::vector<std::string> produces;

  Pattern& require(Constraint c) {
    constraints.push_back(std::move(c));
    return *this;
  }
  Pattern& withBenefit(int b) {
    benefit = b;
    return *this;
  }
  Pattern& producing(std::vector<std::string> op_types) {
    produces = std::move(op_types);
    return *this;
  }
  std::optional<size_t> indexOf(std::string_view capture) const;
  std::optional<size_t> leafIndexOf(std::string_view capture) const;
};

// A candidate anchor that did not match, and why.
struct NearMiss {
  std::string pattern;
  std::string anchor;      // root node label
  std::string constraint;  // "structure" for a shape mismatch, else the Constraint's name
  std::string node;        // label of the node the reason is about (from the failure's data)
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

// The order in which the matcher walks a pattern, computed once per pattern (matcher
// internals; AnchorMatcher keeps one).
struct SearchPlan;

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
  std::shared_ptr<const SearchPlan> plan_;
};

// Reusable constraints; each failure names its node (Why). In docs/patterns.md's table.
namespace constraints {
// The capture's output `output` is read by exactly one node (once or more) and is not a graph
// output: the intermediate can disappear.
Constraint uniqueConsumer(std::string capture, int output = 0);
// The capture's output `output` is not a graph output (it may have other consumers).
Constraint notGraphOutput(std::string capture, int output = 0);
// Input `input` of the capture is a constant (initializer that is not a graph input).
Constraint constantInput(std::string capture, int input);
// The model imports at least opset `minimum` (a function body the fused op is written as needs
// it): constraint "opset-<minimum>", failing at the capture with "the model's opset is
// <opset>: <needs>".
Constraint opsetAtLeast(std::string capture, int64_t opset, int64_t minimum, std::string needs);
// BatchNormalization in inference form: one output (no running stats outputs), training_mode 0.
Constraint batchNormInference(std::string capture);
// Every input and output dtype of the captures is one of `dtypes`.
Constraint dtypeIn(std::vector<std::string> captures, std::vector<DType> dtypes);
// The float types the fusectl ops compute in: float32, and float16/bfloat16, which their kernels
// convert to float32, compute as float32 and round once on output. A half chain rounds after
// every op; the fused op is the chain without those intermediate roundings, so it differs from
// the chain by at most the chain's own rounding errors (docs/passes.md, "Half precision").
// float64 is not among them: a fused op would compute it in float32.
const std::vector<DType>& fusibleFloatTypes();
bool isFusibleFloat(DType t);  // t is one of fusibleFloatTypes()
// The capture's output `output` has a known rank.
Constraint rankKnown(std::string capture, int output = 0);
// Input `input` of the capture has the same shape as output 0 of `other` for every value of
// the symbolic dims (provablyEqual).
Constraint sameShapeAs(std::string capture, int input, std::string other);
// Output 0 of the capture is read by exactly the nodes `readers` (no others) and is not a graph
// output: a chain whose input feeds two of its own nodes (SiLU's x feeds the Sigmoid and the
// Mul), which uniqueConsumer cannot say.
Constraint readOnlyBy(std::string capture, std::vector<std::string> readers);
}  // namespace constraints

// a and b have the same rank and each pair of dims is provably equal (Dim::provablyEqual).
bool dimsProvablyEqual(const Shape& a, const Shape& b);

}  // namespace fusectl::passes
