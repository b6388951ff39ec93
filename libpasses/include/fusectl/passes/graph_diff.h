// Structural difference of two models' main graphs: what an optimization added, removed and
// changed, for `fusectl diff` and for anyone checking a pipeline's effect in code.
//
// Nodes are matched by the names of their outputs (value names survive rewrites far better
// than node names or positions): a node of B that writes a value some node of A writes is "the
// same node". A matched pair is changed when its op type (or domain), its attributes or its
// input names differ; unmatched nodes of A are removed, unmatched nodes of B added.
// Initializers are matched by name and changed when dtype, shape or bytes differ. Fusion sites
// are read back from the stamps the Rewriter writes in replacement nodes' doc strings
// (fusion_stamp.h); a fusectl-domain node without a stamp is listed too, with no replaced
// nodes. Only sites new in B count (a stamp A already carries is not a difference). Everything
// is in graph order (A's for removals, B's otherwise): deterministic.
//
// Bodies (If/Loop/Scan) of a matched node pair are compared the same way, each as its own
// GraphDiff under a scope path ("loop_node/body", nested "loop_node/body/if_node/then_branch"),
// listed after the main graph's differences; a node whose only change is inside its bodies is
// reported there, not as an attribute change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/fusion_stamp.h"  // parseFusionStamp, for readers of diffs

namespace fusectl::passes {

struct DiffNode {
  std::string label;                 // Node::label()
  std::string op;                    // "Conv", "fusectl::FusedConv"
  std::vector<std::string> outputs;  // value names ("" for an omitted optional output)
};

struct DiffNodeChange {
  DiffNode a, b;
  // What differs, in this order: "op" (op type or domain), "attributes", "inputs".
  std::vector<std::string> kinds;
  // For people: "op BatchNormalization -> Conv; attributes: +activation, alpha 0.1 -> 0.2;
  // inputs [x,W] -> [x,W_fused]".
  std::string detail;
};

struct DiffInitializer {
  std::string name;
  std::string dtype;           // "float"
  std::vector<int64_t> dims;
  uint64_t bytes = 0;          // stored bytes (string tensors: sum of string lengths)
};

struct DiffInitializerChange {
  DiffInitializer a, b;
  std::vector<std::string> kinds;  // "dtype", "shape", "data", in this order
};

struct DiffFusion {
  std::string node;                         // label of the fused node in B
  std::string op;                           // its op, "fusectl::FusedConv"
  std::string pass;                         // from the stamp; "" when unstamped
  std::vector<std::string> replaced_nodes;  // from the stamp; labels of nodes in A
};

struct OpCountDelta {
  std::string op;
  size_t a = 0, b = 0;
};

struct BodyDiff;

struct GraphDiff {
  size_t nodes_a = 0, nodes_b = 0;
  size_t initializers_a = 0, initializers_b = 0;
  std::vector<OpCountDelta> op_histogram;  // ops whose count differs, sorted by op text
  std::vector<DiffNode> nodes_removed;     // in A's order
  std::vector<DiffNode> nodes_added;       // in B's order
  std::vector<DiffNodeChange> nodes_changed;  // in B's order
  std::vector<DiffInitializer> initializers_removed;  // in A's order
  std::vector<DiffInitializer> initializers_added;    // in B's order
  std::vector<DiffInitializerChange> initializers_changed;  // in B's order
  std::vector<DiffFusion> fusions;                          // in B's order
  // Differences inside bodies of matched nodes, depth first in B's order; only bodies that
  // differ. Their own `bodies` stay empty: nested bodies are listed here with their full path.
  std::vector<BodyDiff> bodies;

  bool identical() const;  // no node, initializer or op-count difference (fusions imply one)
  // "fusectl.diff/1" JSON (docs/cli.md, fusectl diff); `a_name`/`b_name` label the two sides.
  std::string toJson(const std::string& a_name, const std::string& b_name) const;
  std::string toText(const std::string& a_name, const std::string& b_name) const;
};

struct BodyDiff {
  std::string scope;  // "loop_node/body": owner node label (in B) / attribute name, per level
  GraphDiff diff;
};

GraphDiff diffGraphs(const Graph& a, const Graph& b);

}  // namespace fusectl::passes
