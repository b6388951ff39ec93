// unpack-packed-attention: fuse-packed-attention in reverse, for ONNX Runtime. A model saved
// after -O3 holds fusectl::AttentionPacked (and AttentionPackedRotary), which no contrib op
// takes: ONNX Runtime would run its function body, the attention spelled out in MatMul and
// Softmax, where a model optimized from its export gets com.microsoft::MultiHeadAttention or
// GroupQueryAttention. `--emit ort` runs this pass first, so that emit-ort finds the head split,
// the fusectl::Attention and the head merge it lowers, as it does on the export.
//
//   Y = fusectl.AttentionPacked<num_heads = Hq, kv_num_heads = Hkv, scale, causal>(X, M)
//     =>   X -> Slice [0, Hq D)                   -> Reshape [0, 0, Hq, D]  -> Transpose(0,2,1,3) -> Q
//          X -> Slice [Hq D, (Hq + Hkv) D)        -> Reshape [0, 0, Hkv, D] -> Transpose(0,2,1,3) -> K
//          X -> Slice [(Hq + Hkv) D, (Hq+2Hkv) D) -> Reshape [0, 0, Hkv, D] -> Transpose(0,2,1,3) -> V
//          Attention<scale, causal>(Q, K, V, M) -> Transpose(0,2,1,3) -> Reshape [0, 0, Hq D] -> Y
//   AttentionPackedRotary(X, M, Cos, Sin): the same, with Q and K each through
//   fusectl.RotaryEmbedding(., Cos, Sin) before the Attention.
//
// The result computes what the packed node computed, bit for bit on fusectl's executor (the
// packed kernels read the same heads with a row stride). The merged q/k/v projection stays
// merged: emit-ort lowers its bias into an Add, and the Slices read its columns.
//
// Conditions, checked in this order (each failure is a reported rejection; the node then stays,
// with its function):
//  1. X has rank 3 and a static last dim W that is (Hq + 2 Hkv) D for a whole D, Hq and Hkv
//     positive.
//  2. The model imports opset >= 10 (Slice with starts/ends inputs).
#include <fmt/format.h>

#include <optional>
#include <string_view>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

struct PackedHeads {
  int64_t q = 0, kv = 0, size = 0;  // Hq, Hkv, D
};

// Condition 1: the head counts and size, or nothing with `why`.
std::optional<PackedHeads> packedHeads(const Node& a, Why& why) {
  PackedHeads h;
  h.q = a.attrInt("num_heads", 0);
  h.kv = a.attrInt("kv_num_heads", 0);
  const Shape& xs = a.input(0)->shape();
  if (h.q <= 0 || h.kv <= 0) {
    why.fail(a, [&] {
      return fmt::format("{} has num_heads {} and kv_num_heads {}; both must be positive",
                         a.label(), h.q, h.kv);
    });
    return std::nullopt;
  }
  if (!xs.hasRank() || xs.rank() != 3 || !xs[2].isStatic() || xs[2].value() <= 0 ||
      xs[2].value() % (h.q + 2 * h.kv) != 0) {
    why.fail(a, [&] {
      return fmt::format("{} reads X {}, not [B, S, (Hq + 2 Hkv) D] with a static last dim "
                         "for Hq = {}, Hkv = {}",
                         a.label(), xs.str(), h.q, h.kv);
    });
    return std::nullopt;
  }
  h.size = xs[2].value() / (h.q + 2 * h.kv);
  return h;
}

Constraint splitsIntoHeads() {
  return {"packed-heads", [](const Match& m, Why& why) {
            return packedHeads(*m.get("a"), why).has_value();
          }};
}

// One pattern for both ops: the rotary one has the same head layout and two more inputs.
Pattern build() {
  Pattern p = Pattern::parse("^a:fusectl::AttentionPacked|AttentionPackedRotary",
                             "unpack-packed-attention");
  p.producing({"fusectl::Attention", "fusectl::RotaryEmbedding"});
  p.require(splitsIntoHeads());
  return p;
}

class UnpackPackedAttentionPass : public Pass {
 public:
  const PassInfo& info() const override { return UnpackPackedAttentionPassInfo; }

  std::vector<Pattern> patterns() const override { return {build()}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern pattern = build();
    return applyPattern(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
      Why checked(false);  // the constraints held
      Node* a = m.get("a");
      const PackedHeads h = *packedHeads(*a, checked);
      const int64_t opset = rw.context().opset();
      if (opset > 0 && opset < 10) {  // condition 2
        NearMiss miss;
        miss.pattern = pattern.name;
        miss.anchor = miss.node = a->label();
        miss.constraint = "opset>=10";
        miss.reason = fmt::format(
            "{}: the model imports opset {}, and the Slices that would hand out q, k "
            "and v take inputs from opset 10 on",
            a->label(), opset);
        rw.reject(miss);
        return false;
      }
      const bool rotary = a->is("AttentionPackedRotary", "fusectl");
      Value* x = a->input(0);
      const Shape& xs = x->shape();
      const DType dtype = x->dtype();
      const Dim b = xs[0], s = xs[1], d = Dim::known(h.size);
      const std::string base = a->name().empty() ? a->output(0)->name() : a->name();
      auto add = [&](std::string op, std::string domain, std::vector<Value*> inputs,
                     std::vector<Attribute> attrs, const std::string& hint,
                     std::vector<Dim> dims) {
        NewNode n;
        n.op_type = std::move(op);
        n.domain = std::move(domain);
        n.inputs = std::move(inputs);
        n.attributes = std::move(attrs);
        n.naming = NodeNaming::Unique;
        n.name = hint;
        return rw.addNode(std::move(n), hint, ValueType{dtype, Shape(std::move(dims)), {}}, a)
            ->output(0);
      };
      const Attribute perm = Attribute::ofInts("perm", {0, 2, 1, 3});
      Value* axes = rw.addConstant(base + "_qkv_axes", int64Vector({-1}));
      // One head split per part: Slice, Reshape [0, 0, H, D], Transpose(0,2,1,3).
      auto heads = [&](const char* part, int64_t from, int64_t count) {
        const std::string hint = base + "_" + part;
        Value* slice = addLastAxisSlice(rw, x, from * h.size, (from + count) * h.size,
                                        axes, hint, a);
        Value* split = add("Reshape", "",
                           {slice, rw.addConstant(hint + "_heads_shape",
                                                  int64Vector({0, 0, count, h.size}))},
                           {}, hint + "_bshd", {b, s, Dim::known(count), d});
        return add("Transpose", "", {split}, {perm}, hint + "_heads",
                   {b, Dim::known(count), s, d});
      };
      Value* q = heads("q", 0, h.q);
      Value* k = heads("k", h.q, h.kv);
      Value* v = heads("v", h.q + h.kv, h.kv);
      if (rotary) {
        q = add("RotaryEmbedding", "fusectl", {q, a->input(2), a->input(3)}, {},
                base + "_q_rotated", {b, Dim::known(h.q), s, d});
        k = add("RotaryEmbedding", "fusectl", {k, a->input(2), a->input(3)}, {},
                base + "_k_rotated", {b, Dim::known(h.kv), s, d});
      }
      std::vector<Attribute> attention_attrs;
      for (const char* name : {"scale", "causal"})
        if (const Attribute* attr = a->attr(name)) attention_attrs.push_back(*attr);
      NewNode attention;
      attention.op_type = "Attention";
      attention.domain = "fusectl";
      attention.inputs = {q, k, v, a->input(1)};
      attention.attributes = std::move(attention_attrs);
      attention.name = a->name();
      attention.doc_string = a->doc_string;  // keeps the history of earlier rewrites
      Value* y4 = rw.addNode(std::move(attention), base + "_attention",
                             ValueType{dtype, Shape({b, Dim::known(h.q), s, d}), {}}, a)
                      ->output(0);
      Value* merged = add("Transpose", "", {y4}, {perm}, base + "_merge",
                          {b, s, Dim::known(h.q), d});
      NewNode reshape;
      reshape.op_type = "Reshape";
      reshape.inputs = {merged, rw.addConstant(base + "_merge_shape",
                                               int64Vector({0, 0, h.q * h.size}))};
      reshape.name = base + "_merge_reshape";
      reshape.naming = NodeNaming::Unique;
      rw.replaceMatch(pattern.name, m, a->output(0), std::move(reshape));
      ctx.count(rotary ? "unpacked_rotary_attention" : "unpacked_attention");
      return true;
    }) > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createUnpackPackedAttentionPass() {
  return std::make_unique<UnpackPackedAttentionPass>();
}

}  // namespace fusectl::passes
