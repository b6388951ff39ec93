// merge-parallel-matmuls: several projections of one activation (q/k/v of attention, gate/up of
// a SwiGLU MLP) become one MatMul on the concatenated weights, whose output each former consumer
// reads through a Slice of its columns.
//
//   X -> MatMul(X, Wq) -> Add(., bq) -> q          X -> MatMul(X, [Wq|Wk|Wv]) -> Add(., [bq|bk|bv])
//   X -> MatMul(X, Wk) -> Add(., bk) -> k    =>         -> s -> Slice(s, 0:Nq) -> q
//   X -> MatMul(X, Wv) -> Add(., bv) -> v                     -> Slice(s, Nq:Nq+Nk) -> k ...
//
//   X W_i + b_i = (X [W_1 | ... | W_n] + [b_1 | ... | b_n])[..., o_i : o_i + N_i]
//
// fuse-matmul-epilogue then makes the merged MatMul + Add one FusedMatMul. A member's bias Add
// is taken in when it is the MatMul output's only reader and adds a constant [N_i] (or
// [1, ..., 1, N_i]); a member without one contributes zeros to the merged bias.
//
// Conditions, per shared input X (each failure is a reported rejection):
//  1. At least two MatMuls read X as their A with a constant 2-D weight of X's dtype; X is
//     float32, float16 or bfloat16 with a known rank >= 2 (the merge copies weights and biases
//     bytewise, so no value changes in any dtype). (Gemm is not taken: its transB and 2-D A need other rules.)
//  2. The model imports opset >= 10 (Slice with starts/ends inputs), and every weight has the
//     same rows, X's last dim where that is known.
//  3. Worth it: every member's width N_i is at least half the widest one's. Grouped-query K/V
//     a quarter of Q's width are left separate, as the FlashRT notes observed a Q+KV merge
//     being slower on a GPU; on this CPU bench/bench_merge_matmuls.cpp measured every merge
//     within about +-7% (docs/passes.md), so the rule is the conservative one. The option
//     `narrow=true` waives it (the opt-in rule merge-narrow-projections, docs/catalog.md: a
//     LLaMA-3-style decoder then reads its attention packed, 1-2% faster here).
// The weights are concatenated once, at optimisation time; the originals go when nothing else
// reads them.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "constant_math.h"
#include "fusectl/passes/registry.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

constexpr const char* kPattern = "merge-parallel-matmuls";

struct Member {
  Node* mm = nullptr;
  Node* bias_add = nullptr;   // nullptr when no constant bias Add follows
  Value* bias = nullptr;      // its constant operand
  int64_t depth = 0;          // K_i, the weight's rows
  int64_t width = 0;          // N_i
  Value* output() const { return bias_add ? bias_add->output(0) : mm->output(0); }
};

// A constant [N] or [1, ..., 1, N] bias of the MatMul's dtype added to mm's output only; nullptr
// otherwise.
Value* constantBias(Node* mm, Node** add_out, int64_t n) {
  Value* out = mm->output(0);
  if (out->isGraphOutput() || out->consumers().size() != 1) return nullptr;
  Node* add = out->consumers()[0];
  if (!add->is("Add") || add->numInputs() != 2 || add->input(0) == add->input(1)) return nullptr;
  Value* b = otherOperand(*add, out);
  if (!b || !b->isConstant() || b->dtype() != out->dtype()) return nullptr;
  const Tensor* t = b->initializer();
  if (t->numel() != n || t->dims().empty() || t->dims().back() != n) return nullptr;
  if (t->dims().size() > out->shape().rank()) return nullptr;
  *add_out = add;
  return b;
}

// The MatMuls that read `x` as A with a constant 2-D weight of x's dtype (condition 1).
std::vector<Member> candidates(const Value* x) {
  std::vector<Member> out;
  for (Node* c : x->consumers()) {
    if (!c->is("MatMul") || c->input(0) != x || c->input(1) == x) continue;
    const Value* w = c->input(1);
    if (!w || !w->isConstant() || w->dtype() != x->dtype() || w->initializer()->dims().size() != 2)
      continue;
    if (std::any_of(out.begin(), out.end(), [c](const Member& m) { return m.mm == c; })) continue;
    Member m;
    m.mm = c;
    m.depth = w->initializer()->dims()[0];
    m.width = w->initializer()->dims()[1];
    m.bias = constantBias(c, &m.bias_add, m.width);
    out.push_back(m);
  }
  return out;
}

// The weights side by side, byte for byte (any element type: merging changes no value).
Tensor concatenateWeights(const std::vector<Member>& group, DType dtype, int64_t k, int64_t total) {
  const size_t elem = dtypeSize(dtype);
  Tensor w(dtype, {k, total});
  uint8_t* dst = w.mutableBytes();
  int64_t col = 0;
  for (const Member& m : group) {
    const uint8_t* src = m.mm->input(1)->initializer()->bytes();
    for (int64_t r = 0; r < k; ++r)
      std::memcpy(dst + (r * total + col) * elem, src + r * m.width * elem, m.width * elem);
    col += m.width;
  }
  return w;
}

// The biases one after the other, zeros (Tensor's fill) for a member without one.
Tensor concatenateBiases(const std::vector<Member>& group, DType dtype, int64_t total) {
  const size_t elem = dtypeSize(dtype);
  Tensor b(dtype, {total});
  uint8_t* dst = b.mutableBytes();
  for (const Member& m : group) {
    if (m.bias) std::memcpy(dst, m.bias->initializer()->bytes(), m.width * elem);
    dst += m.width * elem;
  }
  return b;
}

// `merge-parallel-matmuls{narrow=true}`: condition 3 waived (the opt-in rule
// merge-narrow-projections). Checked here too for a context whose options were set by hand.
bool mergeNarrow(const PassContext& ctx) {
  const std::string value = optionOrDefault(ctx, MergeParallelMatMulsPassInfo.name, "narrow");
  checkPassOption(MergeParallelMatMulsPassInfo.name, "narrow", value);
  return value == "true";
}

class MergeParallelMatMulsPass : public Pass {
 public:
  const PassInfo& info() const override { return MergeParallelMatMulsPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    // Every shared input once, in node order (graph inputs and initializers first).
    std::vector<Value*> shared;
    std::map<const Value*, bool> seen;
    for (Node* n : graph.nodes()) {
      if (!n->is("MatMul") || !n->input(0)) continue;
      Value* x = n->input(0);
      if (!seen.emplace(x, true).second) continue;
      shared.push_back(x);
    }
    Rewriter rw(ctx);
    bool changed = false;
    std::map<const Value*, bool> replaced;  // member outputs a merge erased: never read again
    for (Value* x : shared) {
      if (replaced.count(x)) continue;
      std::vector<Member> group = candidates(x);
      if (group.size() < 2) continue;
      if (!legal(rw, x, group)) continue;
      for (const Member& m : group) {
        replaced[m.mm->output(0)] = true;
        if (m.bias_add) replaced[m.bias_add->output(0)] = true;
      }
      merge(rw, graph, x, group);
      changed = true;
    }
    return changed;
  }

 private:
  static void reject(Rewriter& rw, const Member& anchor, std::string reason) {
    NearMiss miss;
    miss.pattern = kPattern;
    miss.anchor = anchor.mm->label();
    miss.constraint = "worth-merging";
    miss.node = anchor.mm->label();
    miss.reason = std::move(reason);
    rw.reject(miss);
    rw.context().count("skipped");
  }

  static bool legal(Rewriter& rw, const Value* x, const std::vector<Member>& group) {
    if (!constraints::isFusibleFloat(x->dtype()) || !x->shape().hasRank() || x->shape().rank() < 2) {
      reject(rw, group[0],
             fmt::format("{} MatMuls share input '{}' of type {} and shape {}: merging needs "
                         "float32, float16 or bfloat16 with rank >= 2",
                         group.size(), x->name(), dtypeName(x->dtype()), x->shape().str()));
      return false;
    }
    const int64_t opset = rw.context().opset();
    if (opset > 0 && opset < 10) {
      reject(rw, group[0],
             fmt::format("{} MatMuls share input '{}', but the model imports opset {}: the Slices "
                         "that hand out the merged columns take inputs from opset 10 on",
                         group.size(), x->name(), opset));
      return false;
    }
    // The weights are laid side by side row by row: they must all have X's K rows (a model
    // where they do not fails at run time; merged, it read past the shorter weight).
    const Dim& x_depth = x->shape()[x->shape().rank() - 1];
    for (const Member& m : group) {
      if (m.depth == group[0].depth && (!x_depth.isStatic() || x_depth.value() == m.depth))
        continue;
      reject(rw, m,
             fmt::format("{} MatMuls share input '{}' {}, but {} weight has {} rows", group.size(),
                         x->name(), x->shape().str(), m.mm->label(), m.depth));
      return false;
    }
    int64_t widest = 0, narrowest = group[0].width;
    for (const Member& m : group) {
      widest = std::max(widest, m.width);
      narrowest = std::min(narrowest, m.width);
    }
    if (2 * narrowest < widest && !mergeNarrow(rw.context())) {
      std::string widths;
      for (const Member& m : group)
        widths += fmt::format("{}{}", widths.empty() ? "" : ", ", m.width);
      reject(rw, group[0],
             fmt::format("{} MatMuls of '{}' have widths [{}]: the narrowest is under half the "
                         "widest (grouped-query K/V: the FlashRT notes measured that merge slower "
                         "on a GPU; merge-parallel-matmuls{{narrow=true}} takes it, docs/catalog.md)",
                         group.size(), x->name(), widths));
      return false;
    }
    return true;
  }

  static void merge(Rewriter& rw, const Graph& graph, Value* x, const std::vector<Member>& group) {
    const Tensor* w0 = group[0].mm->input(1)->initializer();
    const int64_t k = w0->dims()[0];
    int64_t total = 0;
    bool any_bias = false;
    for (const Member& m : group) {
      total += m.width;
      any_bias = any_bias || m.bias;
    }
    // The merged nodes go before the first member, where X is already computed.
    Node* first = nullptr;
    for (Node* n : graph.nodes()) {
      if (std::any_of(group.begin(), group.end(), [n](const Member& m) { return m.mm == n; })) {
        first = n;
        break;
      }
    }

    ValueType merged_type;
    merged_type.dtype = x->dtype();
    merged_type.shape = x->shape();
    merged_type.shape[merged_type.shape.rank() - 1] = Dim::known(total);
    const std::string base = first->name().empty() ? x->name() : first->name();

    NewNode mm;
    mm.op_type = "MatMul";
    mm.inputs = {x, rw.addConstant(base + "_merged_weight", concatenateWeights(group, x->dtype(), k, total))};
    mm.name = base + "_merged";
    Node* merged_mm = rw.addNode(std::move(mm), base + "_merged", merged_type, first);
    Node* merged_add = nullptr;
    Value* merged = merged_mm->output(0);
    if (any_bias) {
      NewNode add;
      add.op_type = "Add";
      add.inputs = {merged, rw.addConstant(base + "_merged_bias", concatenateBiases(group, x->dtype(), total))};
      add.name = base + "_merged_bias_add";
      merged_add = rw.addNode(std::move(add), base + "_merged_biased", merged_type, first);
      merged = merged_add->output(0);
    }
    Value* axes = rw.addConstant(base + "_merged_axes", int64Vector({-1}));
    int64_t offset = 0;
    for (const Member& m : group) {
      NewNode slice;
      slice.op_type = "Slice";
      const std::string out = m.output()->name();
      slice.inputs = {merged, rw.addConstant(out + "_start", int64Vector({offset})),
                      rw.addConstant(out + "_end", int64Vector({offset + m.width})), axes};
      slice.name = m.mm->name();
      Match site(m.bias_add ? 2 : 1);
      site[0] = m.mm;
      if (m.bias_add) site[1] = m.bias_add;
      rw.replaceMatch(kPattern, site, m.output(), std::move(slice));
      // Each member's Slice stands for its MatMul only together with the merged nodes.
      rw.noteHelperNode(*merged_mm);
      if (merged_add) rw.noteHelperNode(*merged_add);
      offset += m.width;
    }
    rw.context().count("merged_groups");
    rw.context().count("merged_matmuls", group.size());
  }
};

}  // namespace

std::unique_ptr<Pass> createMergeParallelMatMulsPass() {
  return std::make_unique<MergeParallelMatMulsPass>();
}

}  // namespace fusectl::passes
