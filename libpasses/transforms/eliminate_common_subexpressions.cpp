// eliminate-common-subexpressions: merge nodes that compute the same thing from the same values.
//
//   a = Relu(x); b = Relu(x); y = Add(a, b)   =>   a = Relu(x); y = Add(a, a)
//
// Two nodes compute the same thing when they have the same domain, op type and number of
// outputs (present at the same slots), read the same values in the same order (omitted inputs
// included), and have identical attributes: same names and kinds, floats compared bit for bit,
// tensors by dtype, dims and bytes. Names and doc strings do not count. The node earlier in the
// topological order stays; readers of the other read its outputs instead. Nodes are visited in
// topological order and bucketed by a hash of (op, input values, attributes), so whole
// duplicated chains merge in one linear run. Identical initializers are dedup-initializers'
// business.
//
// Conditions (each failure is a reported rejection, given only when a duplicate exists):
//  1. The op is deterministic (isNondeterministic): two RandomNormal draws are different values.
//  2. No subgraph attribute (If/Loop/Scan bodies are not compared).
//  3. The op is in the ai.onnx or fusectl domain: ops of other domains may have side effects.
//  4. The interface survives: when an output of both nodes is a graph output, they stay apart
//     (one value cannot carry two output names). When only the removed node's output is one,
//     the kept output takes its name.
// Counters: merged, skipped_<reason>.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string_view>
#include <vector>

#include "fusectl/passes/hash_buckets.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

size_t bytesHash(const void* p, size_t n) {
  return std::hash<std::string_view>()(std::string_view(static_cast<const char*>(p), n));
}

bool isGraphAttr(const Attribute& a) {
  return a.kind == AttrKind::Graph || a.kind == AttrKind::Graphs;
}

// Attributes sorted by name, subgraphs left out (a node with one is never merged).
std::vector<const Attribute*> sortedAttrs(const Node& n) {
  std::vector<const Attribute*> out;
  for (const Attribute& a : n.attributes())
    if (!isGraphAttr(a)) out.push_back(&a);
  std::sort(out.begin(), out.end(),
            [](const Attribute* a, const Attribute* b) { return a->name < b->name; });
  return out;
}

size_t attrHash(const Attribute& a) {
  size_t h = std::hash<std::string>()(a.name);
  mix(h, static_cast<size_t>(a.kind));
  mix(h, std::hash<std::string>()(a.ref_attr_name));
  switch (a.kind) {
    case AttrKind::Float: mix(h, bytesHash(&a.f, sizeof(a.f))); break;
    case AttrKind::Int: mix(h, std::hash<int64_t>()(a.i)); break;
    case AttrKind::String:
    case AttrKind::SparseTensor:
    case AttrKind::TypeProto: mix(h, std::hash<std::string>()(a.s)); break;
    case AttrKind::Tensor: mix(h, a.t.contentHash()); break;
    case AttrKind::Floats:
      mix(h, bytesHash(a.floats.data(), a.floats.size() * sizeof(float)));
      break;
    case AttrKind::Ints: mix(h, bytesHash(a.ints.data(), a.ints.size() * sizeof(int64_t))); break;
    case AttrKind::Strings:
    case AttrKind::SparseTensors:
    case AttrKind::TypeProtos:
      for (const std::string& s : a.strings) mix(h, std::hash<std::string>()(s));
      break;
    case AttrKind::Tensors:
      for (const Tensor& t : a.tensors) mix(h, t.contentHash());
      break;
    default: break;
  }
  return h;
}

// Attribute order does not count, so their hashes are combined by a sum, not a chained mix
// (sorting them here would cost an allocation per node).
size_t nodeHash(const Node& n) {
  size_t h = std::hash<std::string>()(n.opType());
  mix(h, std::hash<std::string>()(n.domain()));
  mix(h, n.numOutputs());
  for (const Value* v : n.outputs()) mix(h, v != nullptr);
  for (const Value* v : n.inputs()) mix(h, std::hash<const Value*>()(v));
  size_t attrs = 0;
  for (const Attribute& a : n.attributes())
    if (!isGraphAttr(a)) attrs += attrHash(a);
  mix(h, attrs);
  return h;
}

// Same computation, subgraph attributes aside.
bool sameComputation(const Node& a, const Node& b) {
  if (a.opType() != b.opType() || a.domain() != b.domain() || a.inputs() != b.inputs() ||
      a.numOutputs() != b.numOutputs()) {
    return false;
  }
  for (size_t i = 0; i < a.numOutputs(); ++i)
    if ((a.output(i) == nullptr) != (b.output(i) == nullptr)) return false;
  std::vector<const Attribute*> x = sortedAttrs(a), y = sortedAttrs(b);
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i]->name != y[i]->name || !sameAttributeValue(*x[i], *y[i])) return false;
  return true;
}

bool hasSubgraph(const Node& n) {
  for (const Attribute& a : n.attributes())
    if (isGraphAttr(a)) return true;
  return false;
}

// Whether one node's bodies capture both a and b: merging them would leave a body two
// references of one name (a body reads an enclosing value by its name).
bool capturedByOneOwner(const Value& a, const Value& b) {
  for (const Use& u : a.uses()) {
    if (u.input != Use::kImplicitUse) continue;
    for (const Use& w : b.uses())
      if (w.input == Use::kImplicitUse && w.node == u.node) return true;
  }
  return false;
}

class EliminateCommonSubexpressionsPass : public Pass {
 public:
  const PassInfo& info() const override { return EliminateCommonSubexpressionsPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    Rewriter rw(ctx);
    HashBuckets<Node> kept(graph.numNodes());
    size_t merged = 0;
    for (Node* n : graph.nodesSnapshot()) {
      if (rw.erased(n) || n->numOutputs() == 0) continue;
      const size_t hash = nodeHash(*n);
      Node* same = kept.find(hash, [&](const Node* k) { return sameComputation(*k, *n); });
      if (!same) {
        kept.insert(hash, n);
        continue;
      }
      bool captured_together = false;
      for (size_t i = 0; i < n->numOutputs() && i < same->numOutputs(); ++i)
        if (n->output(i) && same->output(i))
          captured_together |= capturedByOneOwner(*n->output(i), *same->output(i));
      if (captured_together) {
        ctx.count("skipped_captured_together");
        continue;
      }
      std::string why;
      if (const char* constraint = illegal(*same, *n, ctx.explain() ? &why : nullptr)) {
        if (ctx.explain()) rw.reject(NearMiss{"cse", n->label(), constraint, n->label(), why});
        ctx.count(std::string("skipped_") + constraint);
        continue;
      }
      if (!ctx.allowRewrite()) {
        ctx.count("skipped_max_rewrites");
        break;
      }
      rw.replaceByEquivalent(n, same);
      ++merged;
    }
    if (merged) ctx.count("merged", static_cast<int64_t>(merged));
    return merged > 0;
  }

 private:
  // The constraint that keeps `dup` from merging into `keep` (and, when `why` is given, the
  // reason), or nullptr when the merge is legal.
  static const char* illegal(const Node& keep, const Node& dup, std::string* why) {
    if (isNondeterministic(dup)) {
      if (why) *why = fmt::format("{} repeats {} but is nondeterministic ({})", dup.label(),
                                  keep.label(), dup.opType());
      return "nondeterministic";
    }
    if (hasSubgraph(dup)) {
      if (why) *why = fmt::format("{} repeats {} but has a subgraph (subgraphs are not compared)",
                                  dup.label(), keep.label());
      return "subgraph";
    }
    if (!dup.domain().empty() && dup.domain() != "ai.onnx" && dup.domain() != "fusectl") {
      if (why) *why = fmt::format("{} repeats {} but is in domain '{}', whose ops may have side "
                                  "effects",
                                  dup.label(), keep.label(), dup.domain());
      return "domain";
    }
    for (size_t i = 0; i < dup.numOutputs(); ++i) {
      const Value* a = keep.output(i);
      const Value* b = dup.output(i);
      if (a && b && a->isGraphOutput() && b->isGraphOutput()) {
        if (why) *why = fmt::format("{} repeats {} but outputs '{}' and '{}' are both graph "
                                    "outputs",
                                    dup.label(), keep.label(), a->name(), b->name());
        return "keeps-interface";
      }
    }
    return nullptr;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateCommonSubexpressionsPass() {
  return std::make_unique<EliminateCommonSubexpressionsPass>();
}

}  // namespace fusectl::passes
