// emit-ort: hand ONNX Runtime the fusions its own optimizer does not find on plain exports, as
// the com.microsoft contrib ops that run them natively (`fusectl optimize --emit ort` appends
// this pass to the pipeline; it is in no -O level). A fusectl op with no contrib op of exactly
// its semantics stays, with its ONNX function.
//
//   fusectl::Attention (G = 1)  [-> Transpose(0,2,1,3) -> Reshape [B, S, H*Dv]]
//     => com.microsoft::MultiHeadAttention(query [B, S, H*D], key/value [B, T, H*D] before
//        their head split, or [B, H, T, D] as they are (its BNSH form), attention_bias
//        [B|1, H|1, S, T]) -> [B, S, H*Dv]
//   fusectl::Attention on [1, N, L, D] views of [N, L, D], N = B*H symbolic (heads folded into
//   a dynamic batch; mask none or 0)
//     => com.microsoft::MultiHeadAttention<num_heads = 1>(q, k, v as [N, L, D]) -> [N, S, Dv]
//   fusectl::Attention (G > 1, causal, S = T, no mask)
//     => com.microsoft::GroupQueryAttention(Q/K/V [B, L, H*D], seqlens_k = T - 1,
//        total_sequence_length = T) -> [B, S, Hq*Dv], present key/value unread
//   fusectl::SkipLayerNorm  => Sum(X, Skip[, bias]) -> LayerNormalization(., Scale, B)
//                              (not com.microsoft::SkipLayerNormalization: lowerSkipLayerNorm)
//   fusectl::SkipRMSNorm    => com.microsoft::SkipSimplifiedLayerNormalization(X, Skip, Scale)
//   fusectl::GeluTanh       => com.microsoft::FastGelu(X)
//   fusectl::QuickGelu      => com.microsoft::QuickGelu(X), alpha 1.702
//   fusectl::LayerNorm      => LayerNormalization   (ONNX Runtime's ONNX-domain registration,
//   fusectl::RMSNorm        => SimplifiedLayerNormalization  from version 1: also at opset < 17)
//   fusectl::FusedMatMul    => MatMul [-> Add(bias) | com.microsoft::BiasGelu(bias) |
//                              com.microsoft::FastGelu(bias)] (no activation, exact or tanh
//                              Gelu); with a residual Z: MatMul [-> Add(bias)] -> Add(Z)
//                              [-> com.microsoft::Gelu | FastGelu]
//
// A Linear layer with a bias and nothing else (FusedMatMul with C only) read by nothing but a
// SkipLayerNorm, or by nothing but the head split of an attention's query, key or value, becomes a
// plain MatMul whose bias the node after it adds (the skip norm's Sum, MultiHeadAttention's
// packed q/k/v `bias`): ONNX Runtime turns each 3-D MatMul + Add it is given into Reshape ->
// Gemm -> Reshape (three nodes), so a BERT layer's six such pairs were eighteen of its twenty
// nodes.
//
// The attention's query is read before the model's head split when Q is
// Transpose(0,2,1,3)(Reshape(x3)) of a provably [B, S, H*D] x3 (else a Transpose and a Reshape
// make it), and its output goes straight to the reader of the model's head merge when Y is read
// by Transpose(0,2,1,3) -> Reshape to [B, S, H*Dv] only (else a Reshape and a Transpose give Y
// back). Head splits and merges spelled otherwise (torch's nn.MultiheadAttention, heads folded
// into the batch) are followed as strided views (layout_views.h): a value up the chain whose
// elements are the [B, S, H*D] rows in order is read through one Reshape, and the last value of
// the merge in the contrib op's order becomes one Reshape of its output. A [B|1, 1, 1, T] mask
// (BERT's) is expanded to [., 1, S, T] once per mask, since
// MultiHeadAttention's attention_bias takes no broadcast over queries.
//
// Conditions, each a reported rejection (the node then stays a fusectl op):
//  Attention: Dv = D, a causal one has S = T provably (the contrib ops' causal masks are
//  top-left aligned, or need a KV cache), a rank-4 mask (or none, or a scalar 0 constant),
//  float32; grouped-query attention also causal and without a mask (GroupQueryAttention is
//  causal by definition and takes none). Skip norms: the norm is over the last axis
//  of a rank 2 or 3 X, Skip has X's shape, Sum is no graph output (a Sum that is read is the
//  Sum node's output, or SkipSimplifiedLayerNormalization's output 3, input_skip_bias_sum),
//  float32.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "layout_views.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

constexpr const char* kMs = "com.microsoft";

enum class Rule {
  AttentionMerged, Attention, SkipLayerNorm, SkipRmsNorm, LayerNorm, RmsNorm, MatMul, FastGelu,
  QuickGelu
};
constexpr Rule kRules[] = {Rule::AttentionMerged, Rule::Attention, Rule::SkipLayerNorm,
                           Rule::SkipRmsNorm,     Rule::LayerNorm, Rule::RmsNorm,
                           Rule::MatMul,          Rule::FastGelu,  Rule::QuickGelu};

bool isPerm0213(const Node& t) {
  return t.is("Transpose") && t.domain().empty() &&
         t.attrInts("perm") == std::vector<int64_t>{0, 2, 1, 3};
}

// Output 0 of `n` has one reader and is no graph output; that reader, or nullptr.
Node* onlyReader(const Node& n) {
  const Value* v = n.output(0);
  if (!v || v->isGraphOutput() || v->consumers().size() != 1) return nullptr;
  return v->consumers().front();
}

bool staticIs(const Dim& d, int64_t v) { return d.isStatic() && d.value() == v; }

// The FusedMatMul producing `v` when it adds a bias and nothing else (no residual, no
// activation), the bias is a float constant [N], and `reader` is all that reads `v`; else
// nullptr. Its bias can move into the contrib op `reader` becomes.
Node* biasOnlyLinear(const Value* v, const Node* reader) {
  Node* p = v ? v->producer() : nullptr;
  if (!p || p->domain() != "fusectl" || p->opType() != "FusedMatMul" || p->numInputs() != 3 ||
      !p->input(2) || !p->attrString("activation", "").empty() || v->isGraphOutput() ||
      v->dtype() != DType::Float)
    return nullptr;
  const Value* bias = p->input(2);
  if (!bias->isConstant() || bias->dtype() != DType::Float ||
      bias->initializer()->dims().size() != 1)
    return nullptr;
  const std::vector<Node*> readers = v->consumers();
  if (readers.size() != 1 || readers.front() != reader) return nullptr;
  return p;
}

// ---- Attention ----

struct Heads {
  int64_t heads = 0, d = 0, dv = 0;
  int64_t kv_heads = 0;  // fewer than `heads`: grouped-query, GroupQueryAttention
  // Heads folded into a batch that is not static: the attention runs on [1, N, L, D] views
  // (Unsqueeze(0)) of [N, L, D] values, N = B*H symbolic; it maps as N batches of one head.
  bool folded = false;
  bool grouped() const { return kv_heads != heads; }
};

// The [N, L, D] value that the [1, N, L, D] `v4` is an Unsqueeze(axes [0]) view of (fuse-attention
// makes them for heads folded into the batch), or nullptr.
Value* foldedSource(const Value* v4) {
  Node* u = v4 ? v4->producer() : nullptr;
  if (!u || !u->is("Unsqueeze") || !u->domain().empty() || u->numInputs() != 2) return nullptr;
  std::optional<std::vector<int64_t>> axes = intsConstant(u->input(1));
  if (!axes || *axes != std::vector<int64_t>{0}) return nullptr;
  return u->input(0);
}

// Whether an attention's mask input is absent or a scalar 0 constant.
bool maskIsZero(const Value* m) {
  if (!m) return true;
  std::optional<double> zero = scalarConstant(m);
  return zero && *zero == 0.0;
}

// Heads folded into a batch that is not static ([1, N, L, D], N symbolic: torch's
// nn.MultiheadAttention exported with a dynamic batch): MultiHeadAttention over N batches of one
// head, reading the [N, L, D] values the views were made of.
template <typename Fail>
std::optional<Heads> foldedHeads(const Node& a, Fail fail) {
  const Shape& q = a.input(0)->shape();
  const Shape& k = a.input(1)->shape();
  const Shape& v = a.input(2)->shape();
  if (!staticIs(k[0], 1) || !staticIs(v[0], 1) || !q[1].provablyEqual(k[1]) ||
      !q[1].provablyEqual(v[1]))
    return fail(fmt::format("has heads folded into a batch that is not static ({}) and keys or "
                            "values folded otherwise ({}, {})",
                            q.str(), k.str(), v.str()));
  for (int i = 0; i < 3; ++i)
    if (!foldedSource(a.input(i)))
      return fail(fmt::format("has heads folded into a batch that is not static and input {} "
                              "'{}' is no Unsqueeze(axes [0]) view of [N, L, D]",
                              i, a.input(i)->name()));
  Heads h{1, q[3].value(), v[3].value()};
  h.kv_heads = 1;
  h.folded = true;
  if (h.d != h.dv) return fail("has a value head size other than the query's");
  if (a.attrInt("causal", 0) != 0 && !q[2].provablyEqual(k[2]))
    return fail("is causal with queries and keys not provably as many (the contrib ops' "
                "causal masks are top-left aligned, or need a KV cache)");
  const Value* m = a.numInputs() > 3 ? a.input(3) : nullptr;
  if (!maskIsZero(m))
    return fail(fmt::format("has heads folded into a batch that is not static and a mask {}: "
                            "only a mask of 0 or none maps",
                            m->shape().str()));
  for (const Value* in : std::vector<const Value*>{a.input(0), a.input(1), a.input(2), m})
    if (in && in->dtype() != DType::Float) return fail("is not float32");
  return h;
}

// Condition checks of an Attention node; `why` set when it does not map.
std::optional<Heads> attentionHeads(const Node& a, Why& why) {
  auto fail = [&](const std::string& reason) -> std::optional<Heads> {
    why.fail(a, [&] { return fmt::format("{} {}", a.label(), reason); });
    return std::nullopt;
  };
  const Shape& q = a.input(0)->shape();
  const Shape& k = a.input(1)->shape();
  const Shape& v = a.input(2)->shape();
  const bool ranked = q.hasRank() && k.hasRank() && v.hasRank() && q.rank() == 4 &&
                      k.rank() == 4 && v.rank() == 4;
  if (ranked && !q[1].isStatic() && staticIs(q[0], 1) && q[3].isStatic() && v[3].isStatic())
    return foldedHeads(a, fail);
  if (!ranked || !q[1].isStatic() || !q[3].isStatic() || !v[3].isStatic())
    return fail("has Q/K/V without static head counts and sizes");
  Heads h{q[1].value(), q[3].value(), v[3].value()};
  if (!k[1].isStatic() || !staticIs(v[1], k[1].value()) || k[1].value() <= 0 ||
      h.heads % k[1].value() != 0)
    return fail(fmt::format("has {} query heads for {} key and {} value heads", h.heads,
                            k[1].str(), v[1].str()));
  h.kv_heads = k[1].value();
  if (h.d != h.dv) return fail("has a value head size other than the query's");
  const bool causal = a.attrInt("causal", 0) != 0;
  if (causal && !q[2].provablyEqual(k[2]))
    return fail("is causal with queries and keys not provably as many (the contrib ops' "
                "causal masks are top-left aligned, or need a KV cache)");
  const Value* m = a.numInputs() > 3 ? a.input(3) : nullptr;
  if (h.grouped()) {
    // GroupQueryAttention: causal by definition, no mask input; a prompt with no past.
    if (!causal)
      return fail(fmt::format("is grouped-query ({} query heads, {} key/value heads) but not "
                              "causal, and GroupQueryAttention always is",
                              h.heads, h.kv_heads));
    if (!maskIsZero(m))
      return fail("is grouped-query with an additive mask, which GroupQueryAttention does not "
                  "take");
  }
  if (m) {
    const Shape& ms = m->shape();
    const bool mask_ok = maskIsZero(m) ||
                         (ms.hasRank() && ms.rank() == 4 && ms[3].provablyEqual(k[2]) &&
                          (staticIs(ms[1], 1) || staticIs(ms[1], h.heads)) &&
                          (staticIs(ms[2], 1) || ms[2].provablyEqual(q[2])));
    if (!mask_ok) return fail(fmt::format("has a mask {} that is not [B|1, H|1, S|1, T]", ms.str()));
  }
  for (const Value* in : std::vector<const Value*>{a.input(0), a.input(1), a.input(2), m})
    if (in && in->dtype() != DType::Float) return fail("is not float32");
  return h;
}

Constraint attentionMaps() {
  return {"ort-attention", [](const Match& m, Why& why) {
            return attentionHeads(*m.get("a"), why).has_value();
          }};
}

// The head merge after the attention: Reshape to a provably [B, S, H*Dv] shape.
Constraint mergesHeads() {
  return {"head-merge", [](const Match& m, Why& why) {
            Node* a = m.get("a");
            Node* t = m.get("t");
            Node* r = m.get("r");
            Why quiet(false);
            std::optional<Heads> h = attentionHeads(*a, quiet);
            const Shape& q = a->input(0)->shape();
            const Shape& out = r->output(0)->shape();
            if (h && !h->folded && isPerm0213(*t) && onlyReader(*a) == t && onlyReader(*t) == r &&
                out.hasRank() && out.rank() == 3 && out[0].provablyEqual(q[0]) &&
                out[1].provablyEqual(q[2]) && staticIs(out[2], h->heads * h->dv))
              return true;
            return why.fail(*r, [&] {
              return fmt::format("{} is not the head merge of {} ([B, S, H*Dv] from "
                                 "Transpose(0,2,1,3))",
                                 r->label(), a->label());
            });
          }};
}

// ---- Norms and Linear layers ----

// fusectl::LayerNorm / RMSNorm: ONNX Runtime registers LayerNormalization and
// SimplifiedLayerNormalization in the ONNX domain from version 1 (so before opset 17 too), with
// `axis` and `epsilon` as fusectl's ops have them, and runs them as one kernel; the function
// bodies it would inline instead (Flatten/ReduceMean/...) it does not fuse back.
Constraint normMaps() {
  return {"ort-norm", [](const Match& m, Why& why) {
            Node* n = m.get("n");
            if (n->output(0)->dtype() == DType::Float) return true;
            return why.fail(*n, [&] { return fmt::format("{} is not float32", n->label()); });
          }};
}

// fusectl::FusedMatMul with no activation, the exact Gelu or its tanh approximation: MatMul,
// then the bias as an Add or as com.microsoft::BiasGelu / FastGelu's bias (the activation of
// x + bias in one kernel); with a residual, the Adds of bias and residual and then the
// activation (com.microsoft::Gelu or FastGelu), which applies to the whole sum.
Constraint matMulMaps() {
  return {"ort-matmul", [](const Match& m, Why& why) {
            Node* n = m.get("n");
            const std::string act = n->attrString("activation", "");
            if (!act.empty() && act != "Gelu" && act != "GeluTanh") {
              return why.fail(*n, [&] {
                return fmt::format("{} applies {}, for which no contrib op takes a bias",
                                   n->label(), act);
              });
            }
            if (n->output(0)->dtype() != DType::Float)
              return why.fail(*n, [&] { return fmt::format("{} is not float32", n->label()); });
            return true;
          }};
}

// ---- Skip norms ----

Constraint skipNormMaps() {
  return {"ort-skip-norm", [](const Match& m, Why& why) {
            Node* n = m.get("n");
            const Shape& x = n->input(0)->shape();
            const Shape& skip = n->input(1)->shape();
            auto fail = [&](const char* reason) {
              return why.fail(*n, [&] { return fmt::format("{} {}", n->label(), reason); });
            };
            if (!x.hasRank() || (x.rank() != 2 && x.rank() != 3))
              return fail("normalises an X that is not of rank 2 or 3");
            const int64_t axis = n->attrInt("axis", -1);
            if (axis != -1 && axis != static_cast<int64_t>(x.rank()) - 1)
              return fail("does not normalise the last axis only");
            if (!dimsProvablyEqual(skip, x))
              return fail("adds a Skip that is not provably X's shape");
            if (n->numOutputs() > 1 && n->output(1) && n->output(1)->isGraphOutput())
              return fail("has its Sum as a graph output (it would move under another node)");
            if (n->output(0)->dtype() != DType::Float) return fail("is not float32");
            return true;
          }};
}

Pattern buildPattern(Rule r) {
  switch (r) {
    case Rule::AttentionMerged: {
      Pattern p = Pattern::parse("^a:fusectl::Attention -> t:Transpose -> r:Reshape",
                                 "ort-multi-head-attention-merged");
      p.producing({"com.microsoft::MultiHeadAttention"}).withBenefit(2);
      p.require(attentionMaps()).require(mergesHeads());
      return p;
    }
    case Rule::Attention: {
      Pattern p = Pattern::parse("a:fusectl::Attention", "ort-multi-head-attention");
      p.producing({"com.microsoft::MultiHeadAttention"});
      p.require(attentionMaps());
      return p;
    }
    case Rule::SkipLayerNorm: {
      Pattern p = Pattern::parse("n:fusectl::SkipLayerNorm", "ort-skip-layer-norm");
      p.producing({"Sum", "LayerNormalization"});
      p.require(skipNormMaps());
      return p;
    }
    case Rule::SkipRmsNorm: {
      Pattern p = Pattern::parse("n:fusectl::SkipRMSNorm", "ort-skip-simplified-layer-norm");
      p.producing({"com.microsoft::SkipSimplifiedLayerNormalization"});
      p.require(skipNormMaps());
      return p;
    }
    case Rule::LayerNorm: {
      Pattern p = Pattern::parse("n:fusectl::LayerNorm", "ort-layer-norm");
      p.producing({"LayerNormalization"});
      p.require(normMaps());
      return p;
    }
    case Rule::RmsNorm: {
      Pattern p = Pattern::parse("n:fusectl::RMSNorm", "ort-simplified-layer-norm");
      p.producing({"SimplifiedLayerNormalization"});
      p.require(normMaps());
      return p;
    }
    case Rule::MatMul: {
      Pattern p = Pattern::parse("n:fusectl::FusedMatMul", "ort-matmul-bias-gelu");
      p.producing({"MatMul", "Add", "com.microsoft::BiasGelu", "com.microsoft::FastGelu",
                   "com.microsoft::Gelu"});
      p.require(matMulMaps());
      return p;
    }
    case Rule::FastGelu: {
      Pattern p = Pattern::parse("g:fusectl::GeluTanh", "ort-fast-gelu");
      p.producing({"com.microsoft::FastGelu"});
      p.require(constraints::dtypeIn({"g"}, {DType::Float}));
      return p;
    }
    case Rule::QuickGelu: {
      Pattern p = Pattern::parse("g:fusectl::QuickGelu", "ort-quick-gelu");
      p.producing({"com.microsoft::QuickGelu"});
      p.require(constraints::dtypeIn({"g"}, {DType::Float}));
      return p;
    }
  }
  return Pattern::parse("g:fusectl::QuickGelu", "unreachable");
}

class EmitOrtPass : public Pass {
 public:
  const PassInfo& info() const override { return EmitOrtPassInfo; }

  std::vector<Pattern> patterns() const override {
    std::vector<Pattern> out;
    for (Rule r : kRules) out.push_back(buildPattern(r));
    return out;
  }

  bool run(const Graph& graph, PassContext& ctx) override {
    // The forms have different roots, so each runs on its own op's anchors.
    const std::vector<Pattern> forms = patterns();
    bool changed = false;
    masks_.clear();
    for (size_t i = 0; i < forms.size(); ++i) {
      DriverOptions driver;
      driver.report_structural = false;
      changed |= applyPattern(graph, ctx, forms[i], [&](Rewriter& rw, const Match& m) {
                   lower(rw, forms[i], kRules[i], m);
                   return true;
                 }, driver) > 0;
    }
    return changed;
  }

 private:
  // Expanded masks, by the mask value and the queries' length (every layer of a model attends
  // over the same sequence: one Expand serves them all), or the query value when that length
  // is unknown.
  std::map<std::pair<const Value*, std::string>, Value*> masks_;

  static ValueType typed(DType dtype, std::vector<Dim> dims) {
    ValueType t;
    t.dtype = dtype;
    t.shape = Shape(std::move(dims));
    return t;
  }

  static Node* add(Rewriter& rw, const std::string& op, std::vector<Value*> inputs,
                   std::vector<Attribute> attrs, const std::string& hint, const ValueType& type,
                   Node* position) {
    NewNode n;
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.attributes = std::move(attrs);
    return rw.addNode(std::move(n), hint, type, position);
  }

  // The model's own [B, L, H*D] value that `v4` ([B, H, L, D]) is the head split of
  // (Transpose(0,2,1,3) of a Reshape of it), or nullptr.
  static Value* beforeHeadSplit(Value* v4, const Heads& h) {
    const Shape& vs = v4->shape();
    Node* t = v4->producer();
    Node* r = t && isPerm0213(*t) ? t->input(0)->producer() : nullptr;
    if (!r || !r->is("Reshape") || !r->domain().empty() || !vs.hasRank() || vs.rank() != 4 ||
        !vs[3].isStatic())
      return nullptr;
    Value* x3 = r->input(0);
    const Shape& xs = x3->shape();
    if (xs.hasRank() && xs.rank() == 3 && xs[0].provablyEqual(vs[0]) &&
        xs[1].provablyEqual(vs[2]) && staticIs(xs[2], h.heads * vs[3].value()))
      return x3;
    return nullptr;
  }

  // A value up `v4`'s chain of layout ops whose elements, in order, are `v4` ([B, H, L, D], static)
  // as [B, L, H*D]: what the model's head split started from, whatever ops spell it (torch's
  // nn.MultiheadAttention: Slice -> Reshape [L, H, D] -> Transpose(1, 0, 2) -> Unsqueeze, for a
  // batch of 1). nullptr when there is none.
  static Value* bshSource(Value* v4, int64_t heads) {
    const Shape& vs = v4->shape();
    if (!vs.isStatic() || vs.rank() != 4) return nullptr;
    const std::vector<int64_t> d = vs.staticDims();
    return rowMajorSource(v4, {LayoutStep{{0, 2, 1, 3}, {}},
                               LayoutStep{{}, {d[0], d[2], heads * d[3]}}});
  }

  // `source` (bshSource) as [B, L, H*D] for `v4`: itself when it has that shape, else a Reshape
  // of it before `position`.
  static Value* reshapedBsh(Rewriter& rw, Value* source, Value* v4, int64_t heads,
                            Node* position) {
    const std::vector<int64_t> d = v4->shape().staticDims();
    const std::vector<int64_t> bsh{d[0], d[2], heads * d[3]};
    if (source->shape().isStatic() && source->shape().staticDims() == bsh) return source;
    Value* target = rw.addConstant(v4->name() + "_bsh_shape",
                                   Tensor::fromValues<int64_t>(DType::Int64, {3}, bsh));
    rw.context().count("head_split_chains_read_by_one_reshape");
    return add(rw, "Reshape", {source, target}, {}, v4->name() + "_bsh",
               typed(v4->dtype(), {Dim::known(bsh[0]), Dim::known(bsh[1]), Dim::known(bsh[2])}),
               position)
        ->output(0);
  }

  // The query as [B, S, H*D]: the model's own value before its head split when there is one
  // (a Reshape of it when the split is spelled otherwise than BERT's), else a Transpose and a
  // Reshape of Q.
  static Value* query3d(Rewriter& rw, Node* a, const Heads& h) {
    Value* q = a->input(0);
    if (Value* x3 = beforeHeadSplit(q, h)) return x3;
    if (Value* source = bshSource(q, h.heads)) return reshapedBsh(rw, source, q, h.heads, a);
    return toBsh(rw, q, h.heads, a);
  }

  // Replaces attention `a` by `node`, a contrib op whose output 0 is [B, S, H*Dv]: straight into
  // the reader of the model's head merge (AttentionMerged), or given back to a's readers as
  // [B, H, S, Dv] through a Reshape and a Transpose.
  static void replaceAttention(Rewriter& rw, const Pattern& pattern, Rule r, const Match& m,
                               Node* a, const Heads& h, NewNode node) {
    if (r == Rule::AttentionMerged) {
      rw.replaceMatch(pattern.name, m, m.get("r")->output(0), std::move(node));
      return;
    }
    const Shape& qs = a->input(0)->shape();
    Value* y = a->output(0);
    // The farthest value down Y's chain of layout ops that is the contrib op's [B, S, H*Dv]
    // output in the same order (torch's head merge: Squeeze -> Transpose(1, 0, 2) -> Reshape
    // [S, H*Dv], for a batch of 1): it becomes one Reshape of that output.
    Value* merged = y;
    if (y->shape().isStatic()) {
      const std::vector<int64_t> d = y->shape().staticDims();
      merged = rowMajorSink(y, {d[0], d[2], h.heads * h.dv},
                            {LayoutStep{{}, {d[0], d[2], h.heads, h.dv}},
                             LayoutStep{{0, 2, 1, 3}, {}}});
    }
    Node* contrib = rw.addNode(std::move(node), y->name() + "_bsh",
                               typed(y->dtype(), {qs[0], qs[2], Dim::known(h.heads * h.dv)}), a);
    Value* split = rw.addConstant(y->name() + "_bshd_shape",
                                  Tensor::fromValues<int64_t>(DType::Int64, {4},
                                                              {0, 0, h.heads, h.dv}));
    Value* bshd = add(rw, "Reshape", {contrib->output(0), split}, {}, y->name() + "_bshd",
                      typed(y->dtype(), {qs[0], qs[2], qs[1], Dim::known(h.dv)}), a)
                      ->output(0);
    NewNode back;
    back.op_type = "Transpose";
    back.inputs = {bshd};
    back.attributes = {Attribute::ofInts("perm", {0, 2, 1, 3})};
    rw.replaceMatch(pattern.name, m, y, std::move(back));
    if (merged == y) return;
    NewNode reshape;
    reshape.op_type = "Reshape";
    reshape.inputs = {contrib->output(0),
                      rw.addConstant(merged->name() + "_shape",
                                     Tensor::fromValues<int64_t>(
                                         DType::Int64,
                                         {static_cast<int64_t>(merged->shape().rank())},
                                         merged->shape().staticDims()))};
    // The chain from the Transpose to the reshaped value, read by nothing then, goes with it.
    rw.replaceNode(merged->producer(), std::move(reshape));
    rw.context().count("head_merge_chains_read_by_one_reshape");
  }

  // The mask as MultiHeadAttention's attention_bias, or nullptr for none.
  Value* bias(Rewriter& rw, Node* a, Value* query) {
    Value* m = a->numInputs() > 3 ? a->input(3) : nullptr;
    if (!m) return nullptr;
    if (maskIsZero(m)) return nullptr;
    const Shape& ms = m->shape();
    const Shape& qs = a->input(0)->shape();
    if (ms[2].provablyEqual(qs[2])) return m;
    const std::string length =
        qs[2].isStatic() || qs[2].isSymbolic() ? qs[2].str() : "query " + query->name();
    auto key = std::make_pair(static_cast<const Value*>(m), length);
    if (auto it = masks_.find(key); it != masks_.end()) return it->second;
    // [., ., 1, T] -> [., ., S, T]: Expand by [1, 1, S, 1], S read from the query's shape.
    Node* pos = a;
    Value* shape = add(rw, "Shape", {query}, {}, m->name() + "_query_shape",
                       typed(DType::Int64, {Dim::known(3)}), pos)
                       ->output(0);
    Value* one = rw.addConstant(m->name() + "_dim1", Tensor::fromValues<int64_t>(DType::Int64, {1}, {1}));
    Value* two = rw.addConstant(m->name() + "_dim2", Tensor::fromValues<int64_t>(DType::Int64, {1}, {2}));
    Value* s = add(rw, "Slice", {shape, one, two}, {}, m->name() + "_queries",
                   typed(DType::Int64, {Dim::known(1)}), pos)
                   ->output(0);
    Value* ones = rw.addConstant(m->name() + "_ones",
                                 Tensor::fromValues<int64_t>(DType::Int64, {2}, {1, 1}));
    Value* target = add(rw, "Concat", {ones, s, one}, {Attribute::ofInt("axis", 0)},
                        m->name() + "_expand_shape", typed(DType::Int64, {Dim::known(4)}), pos)
                        ->output(0);
    Value* expanded = add(rw, "Expand", {m, target}, {}, m->name() + "_per_query",
                          typed(m->dtype(), {ms[0], ms[1], qs[2], ms[3]}), pos)
                          ->output(0);
    masks_[key] = expanded;
    return expanded;
  }

  // Replaces the bias-only FusedMatMul `lin` (biasOnlyLinear) by a plain MatMul, whose output
  // takes over its readers and name. Returns the bias, which the caller's contrib op now adds,
  // as a constant of its own (the replacement erases those only `lin` read) under the bias's
  // name; nullptr when `keep_bias` is false (the caller copied what it needs).
  static Value* dropBias(Rewriter& rw, Node* lin, bool keep_bias = true) {
    const std::string name = lin->input(2)->name();
    Value* bias = keep_bias ? rw.addConstant(name, *lin->input(2)->initializer()) : nullptr;
    NewNode mm;
    mm.op_type = "MatMul";
    mm.inputs = {lin->input(0), lin->input(1)};
    mm.name = lin->name();
    Match site(1);
    site[0] = lin;
    rw.replaceMatch("ort-matmul-bias-into-consumer", site, lin->output(0), std::move(mm));
    if (bias && bias->name() != name && !rw.graph().findValue(name)) rw.renameValue(bias, name);
    rw.context().count("biases_moved_into_next_node");
    return bias;
  }

  // The bias-only FusedMatMul producing the 3-D `x3` that attention `a` reads through its
  // head split (Reshape -> Transpose(0,2,1,3) -> a, each read only by the next), or nullptr.
  static Node* headSplitLinear(Value* x3, const Node* a, size_t input) {
    Node* t = a->input(input)->producer();
    Node* r = t ? t->input(0)->producer() : nullptr;
    if (!t || !r || r->input(0) != x3 || onlyReader(*t) != a || onlyReader(*r) != t) return nullptr;
    return biasOnlyLinear(x3, r);
  }

  // MultiHeadAttention's `bias` [D + D + Dv] from the q/k/v projections that add a bias and
  // nothing else (zeros for the others), each made a plain MatMul; nullptr when none does.
  static Value* packedProjectionBias(Rewriter& rw, Node* a, Value* q3, Value* k3, Value* v3,
                                     const Heads& h) {
    Node* lin[3] = {headSplitLinear(q3, a, 0), headSplitLinear(k3, a, 1),
                    headSplitLinear(v3, a, 2)};
    if (!lin[0] && !lin[1] && !lin[2]) return nullptr;
    const int64_t width[3] = {h.heads * h.d, h.heads * h.d, h.heads * h.dv};
    for (int i = 0; i < 3; ++i)
      if (lin[i] && lin[i]->input(2)->initializer()->numel() != width[i]) lin[i] = nullptr;
    if (!lin[0] && !lin[1] && !lin[2]) return nullptr;
    std::vector<float> packed;
    for (int i = 0; i < 3; ++i) {
      if (!lin[i]) {
        packed.insert(packed.end(), static_cast<size_t>(width[i]), 0.f);
        continue;
      }
      const float* b = lin[i]->input(2)->initializer()->data<float>();
      packed.insert(packed.end(), b, b + width[i]);
    }
    const int64_t total = static_cast<int64_t>(packed.size());
    Value* bias = rw.addConstant(a->output(0)->name() + "_qkv_bias",
                                 Tensor::fromValues(DType::Float, {total}, packed));
    for (Node* l : lin)
      if (l) dropBias(rw, l, /*keep_bias=*/false);
    return bias;
  }

  // [B, H, L, D] as [B, L, H*D]: Transpose(0,2,1,3) and Reshape, before `position`.
  static Value* toBsh(Rewriter& rw, Value* v4, int64_t heads, Node* position) {
    const Shape& vs = v4->shape();
    const int64_t d = vs[3].value();
    Value* bshd = add(rw, "Transpose", {v4}, {Attribute::ofInts("perm", {0, 2, 1, 3})},
                      v4->name() + "_bshd", typed(v4->dtype(), {vs[0], vs[2], vs[1], vs[3]}),
                      position)
                      ->output(0);
    Value* target = rw.addConstant(v4->name() + "_bsh_shape",
                                   Tensor::fromValues<int64_t>(DType::Int64, {3}, {0, 0, heads * d}));
    return add(rw, "Reshape", {bshd, target}, {}, v4->name() + "_bsh",
               typed(v4->dtype(), {vs[0], vs[2], Dim::known(heads * d)}), position)
        ->output(0);
  }

  // Heads folded into a dynamic batch (Heads::folded): MultiHeadAttention with one head over
  // the N = B*H batches, on the [N, L, D] values the [1, N, L, D] views were made of; its
  // [N, S, Dv] output goes straight to the readers of the Squeeze(axes [0]) that unfolded the
  // attention's output, else back to a's readers through an Unsqueeze.
  static void lowerFolded(Rewriter& rw, const Pattern& pattern, const Match& m, Node* a,
                          const Heads& h) {
    Value* y = a->output(0);
    Value* query = foldedSource(a->input(0));
    NewNode node;
    node.domain = kMs;
    node.op_type = "MultiHeadAttention";
    node.name = a->name();
    node.inputs = {query, foldedSource(a->input(1)), foldedSource(a->input(2))};
    node.attributes = {Attribute::ofInt("num_heads", 1),
                       Attribute::ofFloat("scale", a->attrFloat("scale", 1.f / std::sqrt(
                                                                         static_cast<float>(h.d)))),
                       Attribute::ofInt("unidirectional", a->attrInt("causal", 0))};
    const Shape& qs = query->shape();
    Node* contrib = rw.addNode(std::move(node), y->name() + "_heads_batch",
                               typed(y->dtype(), {qs[0], qs[1], Dim::known(h.dv)}), a);
    Value* axis0 = rw.addConstant(y->name() + "_batch_axis",
                                  Tensor::fromValues<int64_t>(DType::Int64, {1}, {0}));
    NewNode view;
    view.op_type = "Unsqueeze";
    view.inputs = {contrib->output(0), axis0};
    Node* unsqueeze = rw.replaceMatch(pattern.name, m, y, std::move(view));
    rw.context().count("multi_head_attention_folded_heads");
    // Unsqueeze -> Squeeze(axes [0]) is the contrib op's output itself.
    Node* squeeze = onlyReader(*unsqueeze);
    if (!squeeze || !squeeze->is("Squeeze") || !squeeze->domain().empty() ||
        squeeze->numInputs() != 2 || intsConstant(squeeze->input(1)) != std::vector<int64_t>{0} ||
        contrib->output(0)->isGraphOutput())
      return;
    // A Squeeze output that is a graph output passes its name on to the contrib op's.
    rw.replaceByEquivalent(squeeze, contrib);  // erases the Unsqueeze with it
  }

  // Grouped-query attention as com.microsoft::GroupQueryAttention on a prompt with no KV cache:
  // Q/K/V as [B, S, H*D], seqlens_k = T - 1 for every sequence and total_sequence_length = T,
  // both int32 and read from K's shape at run time; the present key/value outputs it must have
  // stay unread.
  void lowerGrouped(Rewriter& rw, const Pattern& pattern, Rule r, const Match& m, Node* a,
                    const Heads& h) {
    Value* query = query3d(rw, a, h);
    Value* key = toBsh(rw, a->input(1), h.kv_heads, a);
    Value* value = toBsh(rw, a->input(2), h.kv_heads, a);
    Value* k4 = a->input(1);
    const std::string base = a->output(0)->name();
    Value* shape = add(rw, "Shape", {k4}, {}, base + "_key_shape",
                       typed(DType::Int64, {Dim::known(4)}), a)
                       ->output(0);
    Value* two = rw.addConstant(base + "_seq_axis",
                                Tensor::fromValues<int64_t>(DType::Int64, {}, {2}));
    Value* t64 = add(rw, "Gather", {shape, two}, {Attribute::ofInt("axis", 0)},
                     base + "_total_length_i64", typed(DType::Int64, {}), a)
                     ->output(0);
    Value* total = add(rw, "Cast", {t64}, {Attribute::ofInt("to", static_cast<int64_t>(DType::Int32))},
                       base + "_total_length", typed(DType::Int32, {}), a)
                       ->output(0);
    Value* one = rw.addConstant(base + "_one", Tensor::fromValues<int32_t>(DType::Int32, {}, {1}));
    Value* last = add(rw, "Sub", {total, one}, {}, base + "_last_position",
                      typed(DType::Int32, {}), a)
                      ->output(0);
    Value* zero = rw.addConstant(base + "_batch_start",
                                 Tensor::fromValues<int64_t>(DType::Int64, {1}, {0}));
    Value* first = rw.addConstant(base + "_batch_end",
                                  Tensor::fromValues<int64_t>(DType::Int64, {1}, {1}));
    Value* batch = add(rw, "Slice", {shape, zero, first}, {}, base + "_batch",
                       typed(DType::Int64, {Dim::known(1)}), a)
                       ->output(0);
    Value* seqlens = add(rw, "Expand", {last, batch}, {}, base + "_seqlens_k",
                         typed(DType::Int32, {k4->shape()[0]}), a)
                         ->output(0);
    NewNode node;
    node.domain = kMs;
    node.op_type = "GroupQueryAttention";
    node.name = a->name();
    node.inputs = {query, key, value, nullptr, nullptr, seqlens, total};
    node.attributes = {Attribute::ofInt("num_heads", h.heads),
                       Attribute::ofInt("kv_num_heads", h.kv_heads),
                       Attribute::ofFloat("scale", a->attrFloat("scale", 1.f / std::sqrt(
                                                                         static_cast<float>(h.d))))};
    node.extra_outputs = {base + "_present_key", base + "_present_value"};
    replaceAttention(rw, pattern, r, m, a, h, std::move(node));
    rw.context().count("group_query_attention");
  }

  // fusectl::SkipLayerNorm as Sum(X, Skip[, the Linear layer's bias]) -> LayerNormalization,
  // not as com.microsoft::SkipLayerNormalization: ONNX Runtime's CPU kernel for that contrib op
  // took about 0.51 ms on [1, 128, 768] where Sum + LayerNormalization took 0.11 (1.30, one
  // thread; bench/ort_norm_kernels.py, docs/passes.md), and a BERT-base export spent 13 ms a
  // run in its 25 of them. The
  // sum is a Sum, not an Add, because ONNX Runtime fuses Add -> LayerNormalization back into
  // SkipLayerNormalization itself (as it does on the original model) and leaves Sum alone. A
  // Linear layer that adds a bias and nothing else becomes a plain MatMul whose bias is the
  // Sum's third input (broadcast over the last axis), so that ONNX Runtime does not make its
  // MatMul + Add a Reshape -> Gemm -> Reshape. A Sum that something reads stays that value.
  static void lowerSkipLayerNorm(Rewriter& rw, const Pattern& pattern, Node* n, const Match& m) {
    Value* linear_bias = nullptr;
    for (size_t i = 0; i < 2 && !linear_bias; ++i)
      if (Node* lin = biasOnlyLinear(n->input(i), n)) linear_bias = dropBias(rw, lin);
    Value* y = n->output(0);
    Value* read_sum = n->numOutputs() > 1 && n->output(1) && n->output(1)->hasUses()
                          ? n->output(1)
                          : nullptr;
    const std::string sum_name = read_sum ? read_sum->name() : y->name() + "_sum";
    NewNode add;
    add.op_type = "Sum";
    add.inputs = {n->input(0), n->input(1)};
    if (linear_bias) add.inputs.push_back(linear_bias);
    add.name = n->name().empty() ? "" : n->name() + "_sum";
    Value* sum = rw.addNode(std::move(add), sum_name, y->type, n)->output(0);
    if (read_sum) {
      for (Node* reader : read_sum->consumers())
        for (size_t i = 0; i < reader->numInputs(); ++i)
          if (reader->input(i) == read_sum) rw.rewireInput(reader, i, sum);
    }
    NewNode norm;
    norm.op_type = "LayerNormalization";
    norm.name = n->name();
    norm.inputs = {sum, n->input(2)};
    if (n->numInputs() > 3 && n->input(3)) norm.inputs.push_back(n->input(3));
    norm.attributes = {Attribute::ofInt("axis", -1),
                       Attribute::ofFloat("epsilon", n->attrFloat("epsilon", 1e-5f))};
    rw.replaceMatch(pattern.name, m, y, std::move(norm));
    // The fused op's Sum was erased with it: its name is free for the value that replaced it.
    if (read_sum && sum->name() != sum_name && !rw.graph().findValue(sum_name))
      rw.renameValue(sum, sum_name);
    rw.context().count("skip_norms_as_sum");
  }

  static void lowerMatMul(Rewriter& rw, const Pattern& pattern, Node* n, const Match& m) {
    Value* y = n->output(0);
    Value* bias = n->numInputs() > 2 ? n->input(2) : nullptr;
    Value* residual = n->numInputs() > 3 ? n->input(3) : nullptr;
    const std::string act = n->attrString("activation", "");
    const bool gelu = act == "Gelu", gelu_tanh = act == "GeluTanh";
    // The last node takes y's place; the ones before it are added in front of n.
    std::vector<NewNode> chain;
    NewNode mm;
    mm.op_type = "MatMul";
    mm.inputs = {n->input(0), n->input(1)};
    chain.push_back(std::move(mm));
    const auto add = [&](Value* operand) {
      NewNode a;
      a.op_type = "Add";
      a.inputs = {nullptr, operand};
      chain.push_back(std::move(a));
    };
    // The activation applies to the whole sum, residual included: act(MatMul + bias + Z). Its
    // contrib op takes the bias in (BiasGelu, FastGelu's bias) only when no residual follows.
    Value* act_bias = residual ? nullptr : bias;
    if (bias && !act_bias) add(bias);
    if (residual) add(residual);
    if (gelu || gelu_tanh) {
      NewNode a;
      a.op_type = gelu_tanh ? "FastGelu" : act_bias ? "BiasGelu" : "Gelu";
      a.domain = kMs;
      a.inputs = {nullptr};
      if (act_bias) a.inputs.push_back(act_bias);
      chain.push_back(std::move(a));
    } else if (act_bias) {
      add(act_bias);
    }
    Value* prev = nullptr;
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      if (prev) {
        if (chain[i].inputs.empty()) chain[i].inputs = {prev};
        else chain[i].inputs[0] = prev;
      }
      prev = rw.addNode(std::move(chain[i]), y->name() + (i == 0 ? "_matmul" : "_biased"), y->type,
                        n)->output(0);
    }
    NewNode last = std::move(chain.back());
    if (prev) {
      if (last.inputs.empty()) last.inputs = {prev};
      else last.inputs[0] = prev;
    }
    last.name = n->name();
    rw.replaceMatch(pattern.name, m, y, std::move(last));
    rw.context().count("linear_layers");
  }

  void lower(Rewriter& rw, const Pattern& pattern, Rule r, const Match& m) {
    NewNode node;
    node.domain = kMs;
    if (r == Rule::AttentionMerged || r == Rule::Attention) {
      Node* a = m.get("a");
      Why checked(false);
      const Heads h = *attentionHeads(*a, checked);
      if (h.grouped()) {
        lowerGrouped(rw, pattern, r, m, a, h);
        return;
      }
      if (h.folded) {
        lowerFolded(rw, pattern, m, a, h);
        return;
      }
      Value* query = query3d(rw, a, h);
      node.op_type = "MultiHeadAttention";
      // Keys and values before their head split too when both have one (MultiHeadAttention
      // takes both 3-D or both 4-D), else in the BNSH form they are in.
      Value* k3 = beforeHeadSplit(a->input(1), h);
      Value* v3 = beforeHeadSplit(a->input(2), h);
      Value* key = k3 && v3 ? k3 : a->input(1);
      Value* value = k3 && v3 ? v3 : a->input(2);
      if (!(k3 && v3)) {
        // Head splits spelled otherwise: one Reshape each of what they split, when both are.
        Value* k_source = bshSource(a->input(1), h.heads);
        Value* v_source = bshSource(a->input(2), h.heads);
        if (k_source && v_source) {
          key = reshapedBsh(rw, k_source, a->input(1), h.heads, a);
          value = reshapedBsh(rw, v_source, a->input(2), h.heads, a);
        }
      }
      // The projections' biases go in as `bias` where q, k and v are all read before their
      // head split (the contrib op adds them there; with 4-D keys it would not).
      Value* projection_bias = nullptr;
      if (k3 && v3 && query == beforeHeadSplit(a->input(0), h)) {
        projection_bias = packedProjectionBias(rw, a, query, k3, v3, h);
        if (projection_bias) {
          // The MatMuls that replaced the projections stand where their values stood.
          query = beforeHeadSplit(a->input(0), h);
          key = beforeHeadSplit(a->input(1), h);
          value = beforeHeadSplit(a->input(2), h);
        }
      }
      node.inputs = {query, key, value, projection_bias, nullptr, bias(rw, a, query)};
      while (node.inputs.size() > 3 && !node.inputs.back()) node.inputs.pop_back();
      node.attributes = {Attribute::ofInt("num_heads", h.heads),
                         Attribute::ofFloat("scale", a->attrFloat("scale", 1.f / std::sqrt(
                                                                              static_cast<float>(h.d)))),
                         Attribute::ofInt("unidirectional", a->attrInt("causal", 0))};
      node.name = a->name();
      replaceAttention(rw, pattern, r, m, a, h, std::move(node));
      rw.context().count("multi_head_attention");
      return;
    }
    Node* n = m.get(r == Rule::FastGelu || r == Rule::QuickGelu ? "g" : "n");
    node.name = n->name();
    if (r == Rule::MatMul) {
      lowerMatMul(rw, pattern, n, m);
      return;
    }
    switch (r) {
      case Rule::LayerNorm:
      case Rule::RmsNorm:
        // ONNX Runtime's ONNX-domain registrations, not com.microsoft's.
        node.domain = "";
        node.op_type = r == Rule::LayerNorm ? "LayerNormalization" : "SimplifiedLayerNormalization";
        node.inputs = {n->input(0), n->input(1)};
        if (r == Rule::LayerNorm) node.inputs.push_back(n->input(2));
        node.attributes = {Attribute::ofInt("axis", n->attrInt("axis", -1)),
                           Attribute::ofFloat("epsilon", n->attrFloat("epsilon", 1e-5f))};
        break;
      case Rule::SkipLayerNorm:
        lowerSkipLayerNorm(rw, pattern, n, m);
        return;
      case Rule::SkipRmsNorm: {
        node.op_type = "SkipSimplifiedLayerNormalization";
        node.inputs = {n->input(0), n->input(1), n->input(2)};
        node.attributes = {Attribute::ofFloat("epsilon", n->attrFloat("epsilon", 1e-5f))};
        // A Sum that something reads is the contrib op's output 3, input_skip_bias_sum (after
        // mean and inv_std_var, which stay omitted).
        if (Value* sum = n->numOutputs() > 1 ? n->output(1) : nullptr; sum && sum->hasUses()) {
          rw.replaceMatchKeeping(pattern.name, m, n->output(0), sum, std::move(node), 3);
          rw.context().count("contrib_ops");
          return;
        }
        break;
      }
      case Rule::FastGelu:
        node.op_type = "FastGelu";
        node.inputs = {n->input(0)};
        break;
      default:
        node.op_type = "QuickGelu";
        node.inputs = {n->input(0)};
        node.attributes = {Attribute::ofFloat("alpha", 1.702f)};
        break;
    }
    rw.replaceMatch(pattern.name, m, n->output(0), std::move(node));
    rw.context().count("contrib_ops");
  }
};

}  // namespace

std::unique_ptr<Pass> createEmitOrtPass() { return std::make_unique<EmitOrtPass>(); }

}  // namespace fusectl::passes
