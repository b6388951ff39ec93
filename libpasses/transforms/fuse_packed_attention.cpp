// fuse-packed-attention: an Attention whose q, k and v are the thirds of one merged projection
// (merge-parallel-matmuls' output, read through Slices) and whose result is merged back to
// [B, S, Hq * D] becomes one fusectl::AttentionPacked that reads the projection in place and
// writes the merged heads directly.
//
//   X -> Slice [0, Hq D)             -> Reshape [B, S, Hq, D]  -> Transpose(0,2,1,3) -> Q ─┐
//   X -> Slice [Hq D, (Hq+Hkv) D)    -> Reshape [B, S, Hkv, D] -> Transpose(0,2,1,3) -> K ─┤
//   X -> Slice [(Hq+Hkv) D, (Hq+2Hkv) D) -> Reshape            -> Transpose(0,2,1,3) -> V ─┤
//   Attention(Q, K, V, M) -> Transpose(0,2,1,3) -> Reshape [B, S, Hq D] -> Y               <┘
//     =>   Y = fusectl.AttentionPacked<num_heads = Hq, kv_num_heads = Hkv, scale, causal>(X, M)
//
// Ten nodes and their copies go (three slices, three head splits of two nodes each, the head
// merge of two): in BERT-base they took 2.3 of 142 ms a run, and the run got 3% faster
// (bench/README.md, "Attention on the packed projection"); the attention's own time did not
// change measurably for reading its heads with a row stride.
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. Every intermediate of the three input chains and of the head merge is read by the chain
//     only and is no graph output (they all disappear); except that q, k and v (the Slices' or
//     the Split's outputs) and the head merge's input may also be read by Shapes for their dims
//     0 and 1 (through Gathers of index 0 or 1, directly or through a Reshape only such Shapes
//     read), as dynamic exports compute their Reshape targets: those dims are X's B and S, so
//     the rewrite moves the Shapes onto X.
//  2. The three Slices take consecutive ranges of one value X's last axis, step 1, in the order
//     q, k, v, and cover all of it: [0, Hq D), [Hq D, (Hq + Hkv) D), [(Hq + Hkv) D, W), W the
//     static width of X.
//  3. Each Reshape is a head split: [B, S, H D] to [B, S, H, D], B and S provably X's, H and D
//     static; the head sizes of q, k and v are one D.
//  4. The Reshape after the head merge gives [B, S, Hq D], B and S provably X's (it goes); or
//     [B*S, Hq D] by a constant shape without zeros (it stays, reading the merged heads).
// A third form takes ViT's stacked split: X -> Reshape [B, S, 3, H, D] -> Transpose(2, 0, 3, 1, 4)
// -> Split(axis 0) -> Squeeze(0) for each of q, k and v (timm and torch export it so), or
// -> Gather(axis 0, index 0 / 1 / 2) for each (torchvision's Swin-T, `q, k, v = qkv[0], qkv[1],
// qkv[2]`; the Transpose is then read by the three Gathers only), or -> Slice(axis 0, [i, i + 1))
// -> Squeeze(0) for each (Paddle2ONNX's, PP-OCR's SVTR; read by the three Slices only).
// The Transposes' perm [0, 2, 1, 3] is a condition of the pattern. A second form takes the three
// outputs of one Split of X's last axis instead of the Slices (GPT-2's c_attn, torch's packed
// in_proj): condition 2 is then that the Split is on the last axis and its parts are the q, k
// and v widths the head splits show.
// A fourth form takes torch's nn.MultiheadAttention (torchvision's ViT), sequence first with the
// heads folded into the batch: X = [S, 1, W] (batch 1) -> three Slices -> Reshape [S, H, D] ->
// Transpose(1, 0, 2) -> [H, S, D], which fuse-attention runs as [1, H, S, D] views (Unsqueeze(0)
// before, Squeeze(0) after); the merge is Transpose(1, 0, 2) -> a Reshape by a constant shape.
// With a batch of 1, X's rows are [1, S, W]'s, and the merged heads [S, H, D] are [1, S, Hq D]'s
// elements in the same order: the node reads a [1, S, W] view of X, and the merge Reshape stays,
// reading its output (a constant target without zeros gives the same result). A static batch B
// other than 1 interleaves the sequences in X ([S, B*H, D] after the head split): the node reads
// X through a Transpose(1, 0, 2) to [B, S, W] and a Transpose(1, 0, 2) gives its [B, S, Hq D]
// back as [S, B, Hq D] to the merge Reshape, two copies where the chains made seven of a third
// of X's width each (three Slices, three head Transposes, the merge Transpose). The mask must
// then be the same for every folded batch and head. The batch may be dynamic (B*H provably H
// times X's B); the merge's target is then computed, and a Reshape [0, -1, D] after the
// Transpose back gives it exactly the [S, B*H, D] it read.
// A fifth form takes LLaMA's (Qwen's, Mistral's) heads: q and k each go through a
// fusectl::RotaryEmbedding (fuse-rotary's rotate_half node) between the head split and the
// Attention, with the same Cos and Sin. The node is then AttentionPackedRotary(X, M, Cos, Sin),
// which rotates the rows as it reads them: the two rotations go with the rest (13 of the 14
// nodes between a LLaMA layer's merged projection and its o_proj). Its tables must be the same
// for every head ([B or 1, 1, S or 1, D], or fewer leading dims: `shared-rotary-tables`).
// Interleaved and QK-norm rotations have no packed form and leave the Attention as it is.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

constexpr const char* kRoles[3] = {"q", "k", "v"};

// The packed layout a match reads, once conditions 2 and 3 hold.
struct Packed {
  Value* x = nullptr;
  int64_t heads[3] = {0, 0, 0};  // Hq, Hkv, Hkv
  int64_t head_size = 0;
};

// Whether dims 0 and 1 of a and b are provably the same (B and S).
bool sameBatchAndSequence(const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank() || a.rank() < 2 || b.rank() < 2) return false;
  return a[0].provablyEqual(b[0]) && a[1].provablyEqual(b[1]);
}

// Whether `shape` (a Shape node) is read only for dim 0 or 1 of its input, and those are X's
// B and S: every reader a Gather on axis 0 by a constant index 0 or 1 (not negative: the
// input's rank changes when the Shape is moved to X). Dynamic exports compute the head split's
// and the merge's targets so.
bool readsBatchOrSequenceOnly(const Node& shape, const Shape& xs) {
  if (!shape.is("Shape") || !shape.domain().empty() || shape.hasAttr("start") ||
      shape.hasAttr("end") || shape.output(0)->isGraphOutput() ||
      !sameBatchAndSequence(shape.input(0)->shape(), xs))
    return false;
  for (const Node* g : shape.output(0)->consumers()) {
    if (!g->is("Gather") || !g->domain().empty() || g->attrInt("axis", 0) != 0 ||
        g->input(0) != shape.output(0))
      return false;
    std::optional<double> index = scalarConstant(g->input(1));
    if (!index || (*index != 0 && *index != 1)) return false;
  }
  return true;
}

// A reader of an intermediate that uses only its B and S: such a Shape, or a Reshape read only
// by such Shapes (GPT-2's head merge to [B, S, E], whose dims c_proj reads while its Gemm reads
// a second, 2-D Reshape).
bool dimsOnlyReader(const Node& c, const Shape& xs) {
  if (readsBatchOrSequenceOnly(c, xs)) return true;
  if (!c.is("Reshape") || !c.domain().empty() || c.output(0)->isGraphOutput() ||
      c.output(0)->consumers().empty())
    return false;
  for (const Node* r : c.output(0)->consumers())
    if (!readsBatchOrSequenceOnly(*r, xs)) return false;
  return true;
}

// The one reader of `v` that is not dims-only (the next node of the chain), or null.
Node* chainReader(const Value* v, const Shape& xs) {
  Node* found = nullptr;
  for (Node* c : v->consumers()) {
    if (dimsOnlyReader(*c, xs)) continue;
    if (found && found != c) return nullptr;
    found = c;
  }
  return found;
}

// Condition 1 for an intermediate that a dynamic export also reads for its dims (a Slice's or
// the Split's output, the head merge's input): one reader in the chain, the others dims-only
// readers of B and S, which are X's (the rewrite moves those Shapes onto X); no graph output.
bool readOnceBesidesDims(const Value* v, const Shape& xs, Why& why) {
  if (!v->isGraphOutput() && chainReader(v, xs)) return true;
  const Node& n = *v->producer();
  return why.fail(n, [&] {
    if (v->isGraphOutput())
      return fmt::format("{} output '{}' is a graph output", n.label(), v->name());
    std::string list;
    for (const Node* c : v->consumers()) list += (list.empty() ? "" : ", ") + c->label();
    return fmt::format("{} output '{}' is read by {}: besides the next node of the chain only "
                       "Shapes of dims 0 and 1 (through Gathers of index 0 or 1), directly or "
                       "through a Reshape, may read it, with those dims provably {}'s",
                       n.label(), v->name(), list, xs.str());
  });
}

// q, k and v as cut from X: the Split's three outputs or the three Slices'; none in the stacked
// form, whose Split cuts a Transpose of X.
std::vector<Value*> qkvParts(const Match& m) {
  if (m.get("r5")) return {};
  if (Node* split = m.get("split")) return {split->output(0), split->output(1), split->output(2)};
  return {m.get("sq")->output(0), m.get("sk")->output(0), m.get("sv")->output(0)};
}

Constraint slicesReadOnce() {
  return {"read-once-besides-dims:q,k,v", [](const Match& m, Why& why) {
            for (const Value* part : qkvParts(m))
              if (!readOnceBesidesDims(part, part->producer()->input(0)->shape(), why))
                return false;
            return true;
          }};
}

// Whether a Squeeze (Unsqueeze) has exactly axis 0, given, of its rank-`rank` input (output);
// a reported rejection when not.
bool onAxisZero(const Node& n, int64_t rank, Why& why) {
  std::optional<std::vector<int64_t>> axes = unsqueezeAxes(n);
  if (axes && axes->size() == 1 && ((*axes)[0] == 0 || (*axes)[0] == -rank)) return true;
  return why.fail(n, [&] {
    return fmt::format("{} does not {} axis 0 alone (its axes must be given)", n.label(),
                       n.is("Squeeze") ? "squeeze" : "unsqueeze");
  });
}

// Whether q, k and v are cut from the stacked heads as the form's nodes say: a Split of axis 0
// into three then Squeeze(0) each, or one Slice of axis 0 then Squeeze(0) each, or one Gather
// of axis 0 each, the Transpose then read by those three only; a reported rejection when not.
bool stackedPartsCut(const Match& m, Why& why) {
  if (Node* split = m.get("split")) {
    const int64_t axis = split->attrInt("axis", 0);
    if (split->numOutputs() != 3 || (axis != 0 && axis != -5)) {
      return why.fail(*split, [&] {
        return fmt::format("{} splits axis {} into {} parts, not the stacked q, k, v of axis 0",
                           split->label(), axis, split->numOutputs());
      });
    }
    for (int i = 0; i < 3; ++i)
      if (!onAxisZero(*m.get(fmt::format("z{}", kRoles[i])), 5, why)) return false;
    return true;
  }
  const bool slices = m.get("lq") != nullptr;
  Node* t5 = m.get("t5");
  const Value* stacked_heads = t5->output(0);
  if (stacked_heads->isGraphOutput() || stacked_heads->uses().size() != 3) {
    return why.fail(*t5, [&] {
      return fmt::format("{} output '{}' is read by more than the q, k and v {}", t5->label(),
                         stacked_heads->name(), slices ? "Slices" : "Gathers");
    });
  }
  for (int i = 0; i < 3; ++i) {
    if (slices) {
      Node* l = m.get(fmt::format("l{}", kRoles[i]));
      const std::optional<SliceRange> r = sliceRange(*l, 5);
      const bool picks = r && r->axis == 0 && r->step == 1 && (r->start == i || r->start == i - 3) &&
                         (r->end == i + 1 || (i < 2 && r->end == i - 2) ||
                          (i == 2 && r->end >= 3));
      if (!picks) {
        return why.fail(*l, [&] {
          return fmt::format("{} does not take part {} alone of axis 0 (constant [{}, {}), step 1), "
                             "as the {} of the stacked q, k, v",
                             l->label(), i, i, i + 1, kRoles[i]);
        });
      }
      if (!onAxisZero(*m.get(fmt::format("z{}", kRoles[i])), 5, why)) return false;
      continue;
    }
    Node* g = m.get(fmt::format("g{}", kRoles[i]));
    const int64_t axis = g->attrInt("axis", 0);
    const Value* index = g->input(1);
    const Tensor* t = index && index->isConstant() ? index->initializer() : nullptr;
    const bool picks = t && t->dims().empty() &&
                       (t->valueAsInt64(0) == i || t->valueAsInt64(0) == i - 3);
    if ((axis != 0 && axis != -5) || !picks) {
      return why.fail(*g, [&] {
        return fmt::format("{} does not pick part {} of axis 0 by a scalar constant index, as "
                           "the {} of the stacked q, k, v",
                           g->label(), i, kRoles[i]);
      });
    }
  }
  return true;
}

// The third form (timm's and torch's ViT): X -> Reshape [B, S, 3, H, D] -> Transpose(2, 0, 3, 1, 4)
// -> Split on axis 0 into three -> Squeeze(0) each: q, k and v as [B, H, S, D]. X's rows hold the
// q heads, then the k heads, then the v heads, as AttentionPacked reads them.
std::optional<Packed> stackedLayout(const Match& m, Why& why) {
  Packed p;
  Node* r5 = m.get("r5");
  p.x = r5->input(0);
  const Shape& xs = p.x->shape();
  const Shape& out = r5->output(0)->shape();
  const bool stacked = xs.hasRank() && xs.rank() == 3 && xs[2].isStatic() && out.hasRank() &&
                       out.rank() == 5 && out[2].isStatic() && out[2].value() == 3 &&
                       out[3].isStatic() && out[4].isStatic() &&
                       3 * out[3].value() * out[4].value() == xs[2].value() &&
                       sameBatchAndSequence(out, xs);
  if (!stacked) {
    why.fail(*r5, [&] {
      return fmt::format("{} reshapes '{}' {} to {}: not [B, S, 3, H, D] of a [B, S, 3*H*D]",
                         r5->label(), p.x->name(), xs.str(), out.str());
    });
    return std::nullopt;
  }
  if (!stackedPartsCut(m, why)) return std::nullopt;
  p.heads[0] = p.heads[1] = p.heads[2] = out[3].value();
  p.head_size = out[4].value();
  return p;
}

std::optional<Packed> packedLayout(const Match& m, Why& why) {
  if (m.get("r5")) return stackedLayout(m, why);
  const bool sequence_first = m.get("uq") != nullptr;
  Packed p;
  Node* split = m.get("split");  // the Split form; else three Slices
  Node* slices[3];
  for (int i = 0; i < 3; ++i) slices[i] = split ? split : m.get(fmt::format("s{}", kRoles[i]));
  p.x = slices[0]->input(0);
  for (int i = 1; i < 3 && !split; ++i) {
    if (slices[i]->input(0) != p.x) {
      why.fail(*slices[i], [&] {
        return fmt::format("{} slices '{}', not '{}' as the q slice {} does",
                           slices[i]->label(), slices[i]->input(0)->name(), p.x->name(),
                           slices[0]->label());
      });
      return std::nullopt;
    }
  }
  const Shape& xs = p.x->shape();
  if (!xs.hasRank() || xs.rank() != 3 || !xs[2].isStatic()) {
    why.fail(*slices[0], [&] {
      return fmt::format("{} input '{}' is {}, not [{}] with a static width",
                         slices[0]->label(), p.x->name(), xs.str(),
                         sequence_first ? "S, 1, W" : "B, S, W");
    });
    return std::nullopt;
  }
  // The sequence-first head split's [S, B*H, D] holds B batches of H heads; B may be symbolic
  // (a dynamic batch), as the head count H comes from the static widths.
  const Dim folded = sequence_first ? xs[1] : Dim::known(1);
  const int64_t width = xs[2].value();
  // Condition 3: each chain's Reshape is a head split of its Slice's output ([S, B, H*D] ->
  // [S, B*H, D] in the sequence-first form).
  const size_t head_axis = sequence_first ? 1 : 2;
  for (int i = 0; i < 3; ++i) {
    Node* r = m.get(fmt::format("r{}", kRoles[i]));
    const Shape& in = r->input(0)->shape();
    const Shape& out = r->output(0)->shape();
    const bool widths = in.hasRank() && out.hasRank() && in.rank() == 3 &&
                        out.rank() == head_axis + 2 && out[head_axis + 1].isStatic() &&
                        out[head_axis + 1].value() > 0 && in[2].isStatic() &&
                        in[2].value() % out[head_axis + 1].value() == 0;
    const int64_t heads = widths ? in[2].value() / out[head_axis + 1].value() : 0;
    const bool head_split =
        widths && out[head_axis].provablyEqual(Dim::known(heads) * folded) &&
        (sequence_first
             ? in[0].provablyEqual(xs[0]) && in[1].provablyEqual(xs[1]) &&
                   out[0].provablyEqual(xs[0])
             : sameBatchAndSequence(in, xs) && sameBatchAndSequence(out, xs));
    if (!head_split) {
      why.fail(*r, [&] {
        return fmt::format("{} reshapes {} to {}: not a head split {} of '{}' {}", r->label(),
                           in.str(), out.str(),
                           sequence_first ? "[S, B, H*D] -> [S, B*H, D]"
                                          : "[B, S, H*D] -> [B, S, H, D]",
                           p.x->name(), xs.str());
      });
      return std::nullopt;
    }
    p.heads[i] = heads;
    if (i == 0) p.head_size = out[head_axis + 1].value();
    if (out[head_axis + 1].value() != p.head_size) {
      why.fail(*r, [&] {
        return fmt::format("{} splits heads of {}, the q heads are {} wide", r->label(),
                           out[head_axis + 1].value(), p.head_size);
      });
      return std::nullopt;
    }
  }
  // The [1, H, S, D] views fuse-attention put around the folded heads.
  for (const char* view : {"uq", "uk", "uv", "zo"}) {
    Node* n = sequence_first ? m.get(view) : nullptr;
    if (n && !onAxisZero(*n, 4, why)) return std::nullopt;
  }
  // With more than one batch folded in, a mask over the folded axis [1, B*H, S, T] is not one
  // over AttentionPacked's [B, H, S, T]: only masks the same for every batch and head carry
  // over.
  if (!(folded.isStatic() && folded.value() == 1)) {
    Node* a = m.get("a");
    const Value* mask = a->numInputs() > 3 ? a->input(3) : nullptr;
    const Shape& ms = mask ? mask->shape() : Shape();
    std::optional<double> zero = mask ? scalarConstant(mask) : std::nullopt;
    const bool shared = !mask || (zero && *zero == 0.0) ||
                        (ms.hasRank() && ms.rank() <= 4 &&
                         (ms.rank() < 3 || (ms[ms.rank() - 3].isStatic() &&
                                            ms[ms.rank() - 3].value() == 1)) &&
                         (ms.rank() < 4 || (ms[0].isStatic() && ms[0].value() == 1)));
    if (!shared) {
      why.fail(*a, [&] {
        return fmt::format("{} has a mask {} over the {} heads folded from {} batches: "
                           "AttentionPacked takes one per batch and head",
                           a->label(), ms.str(), (Dim::known(p.heads[0]) * folded).str(),
                           folded.str());
      });
      return std::nullopt;
    }
  }
  if (p.heads[1] != p.heads[2] || p.heads[1] <= 0 || p.heads[0] % p.heads[1] != 0) {
    why.fail(*m.get("a"), [&] {
      return fmt::format("{} has {} q, {} k and {} v heads: not Hq, Hkv, Hkv with Hq a multiple "
                         "of Hkv",
                         m.get("a")->label(), p.heads[0], p.heads[1], p.heads[2]);
    });
    return std::nullopt;
  }
  // Condition 2: consecutive ranges q, k, v covering the width. A Split's parts are consecutive
  // by definition; its three outputs feed q, k and v in order (the pattern).
  if (split) {
    const int64_t axis = split->attrInt("axis", 0);
    if (split->numOutputs() != 3 || (axis != 2 && axis != -1)) {
      why.fail(*split, [&] {
        return fmt::format("{} splits axis {} of '{}' {} into {} parts, not the last axis into "
                           "q, k and v",
                           split->label(), axis, p.x->name(), xs.str(), split->numOutputs());
      });
      return std::nullopt;
    }
  }
  int64_t from = 0;
  for (int i = 0; i < 3 && !split; ++i) {
    const int64_t to = from + p.heads[i] * p.head_size;
    if (lastAxisSpan(*slices[i], 3, width) != std::make_pair(from, to)) {
      why.fail(*slices[i], [&] {
        return fmt::format("{} is not the {} range [{}, {}) of the last axis of '{}' {} (q, k "
                           "and v must be its consecutive thirds, in that order)",
                           slices[i]->label(), kRoles[i], from, to, p.x->name(), xs.str());
      });
      return std::nullopt;
    }
    from = to;
  }
  const int64_t used = (p.heads[0] + 2 * p.heads[1]) * p.head_size;
  if (used != width) {
    why.fail(*slices[2], [&] {
      return fmt::format("q, k and v cover [0, {}) of '{}', whose last axis is {} wide", used,
                         p.x->name(), width);
    });
    return std::nullopt;
  }
  return p;
}

Constraint packedQkv() {
  return {"packed-qkv", [](const Match& m, Why& why) { return packedLayout(m, why).has_value(); }};
}

// Condition 4.
Constraint mergedHeads() {
  return {"merged-heads", [](const Match& m, Why& why) {
            Why checked(false);  // packedQkv held
            const Packed p = *packedLayout(m, checked);
            Node* r = m.get("merge");
            const Shape& out = r->output(0)->shape();
            if (out.hasRank() && out.rank() == 3 && out[2].isStatic() &&
                out[2].value() == p.heads[0] * p.head_size &&
                sameBatchAndSequence(out, p.x->shape()))
              return true;
            return why.fail(*r, [&] {
              return fmt::format("{} gives {}, not the merged heads [B, S, {}] of '{}' {}",
                                 r->label(), out.str(), p.heads[0] * p.head_size, p.x->name(),
                                 p.x->shape().str());
            });
          }};
}

// Transpose(1, 0, 2) of `x`, named `name`: batch first to sequence first or back.
NewNode swapFirstTwoAxes(Value* x, const std::string& name) {
  NewNode swap;
  swap.op_type = "Transpose";
  swap.inputs = {x};
  swap.attributes = {Attribute::ofInts("perm", {1, 0, 2})};
  swap.name = name;
  swap.naming = NodeNaming::Unique;
  return swap;
}

// Reshape of `x` by the constant `target` (named after `constant_hint`), named `name`: the
// views of X and of the node's output the sequence-first forms need.
NewNode reshapeView(Rewriter& rw, Value* x, std::vector<int64_t> target,
                    const std::string& constant_hint, const std::string& name) {
  const int64_t rank = static_cast<int64_t>(target.size());
  NewNode view;
  view.op_type = "Reshape";
  view.inputs = {x, rw.addConstant(constant_hint,
                                   Tensor::fromValues(DType::Int64, {rank}, std::move(target)))};
  view.name = name;
  view.naming = NodeNaming::Unique;
  return view;
}

// After packedQkv: X is known.
Constraint mergeInputReadOnce() {
  return {"read-once-besides-dims:ta", [](const Match& m, Why& why) {
            Why checked(false);  // packedQkv held
            const Packed p = *packedLayout(m, checked);
            const Value* merged = m.get("ta")->output(0);
            if (!readOnceBesidesDims(merged, p.x->shape(), why)) return false;
            // The reader in the chain must be the merge the pattern matched: a merge Reshape
            // that only Shapes read is a dims-only reader, which the rewrite removes.
            Node* merge = m.get("merge");
            Node* reader = chainReader(merged, p.x->shape());
            if (!merge || reader == merge) return true;
            return why.fail(*merge, [&] {
              return fmt::format("{} is read only for its dims; '{}' goes on to {}", merge->label(),
                                 merged->name(), reader->label());
            });
          }};
}

// Whether `r` is a Reshape of `merged` by a constant shape without zeros: given the node's
// output instead, the same elements in the same order, it gives the same result (a 0 would copy
// a dim of whichever input it reads).
bool reshapesByConstantWithoutZeros(const Node& r, const Value* merged) {
  if (!r.is("Reshape") || !r.domain().empty() || r.input(0) != merged) return false;
  std::optional<std::vector<int64_t>> target = intsConstant(r.input(1));
  return target && std::find(target->begin(), target->end(), 0) == target->end();
}

// Condition 4, second case: the head merge goes straight to 2-D, [B*S, Hq D], for a Gemm
// (GPT-2's c_proj after eliminate-noop-reshape merged its two Reshapes). That Reshape stays,
// reading the AttentionPacked's [B, S, Hq D] instead of [B, S, Hq, D]: the same elements in the
// same order, so a constant target without zeros (a 0 would copy a dim of the new input) gives
// the same result.
Constraint mergedHeadsTo2d() {
  return {"merged-heads-2d", [](const Match& m, Why& why) {
            Why checked(false);  // packedQkv held
            const Packed p = *packedLayout(m, checked);
            Node* ta = m.get("ta");
            Node* r = chainReader(ta->output(0), p.x->shape());  // mergeInputReadOnce held
            const Shape& xs = p.x->shape();
            const Shape& out = r->output(0)->shape();
            const bool ok = reshapesByConstantWithoutZeros(*r, ta->output(0)) && out.hasRank() &&
                            out.rank() == 2 && out[1].isStatic() &&
                            out[1].value() == p.heads[0] * p.head_size &&
                            out[0].provablyEqual(xs[0] * xs[1]);
            if (ok) return true;
            return why.fail(*r, [&] {
              return fmt::format("{} gives {}: neither the merged heads [B, S, {}] nor [B*S, {}] "
                                 "by a constant shape without zeros, of '{}' {}",
                                 r->label(), out.str(), p.heads[0] * p.head_size,
                                 p.heads[0] * p.head_size, p.x->name(), xs.str());
            });
          }};
}

// Condition 4, sequence-first form: the merge is Transpose(1, 0, 2) -> a Reshape by a constant
// shape without zeros, which stays and reads the node's output as [S, B, Hq D] (with a batch of
// 1 the node's own [1, S, Hq D], else a Transpose of it): the same elements in the same order as
// the [S, B*Hq, D] it read.
// With a batch that is not static the merge's target is computed (from X's dims), and the
// rewrite hands the merge exactly the [S, B*Hq, D] it read (a Reshape [0, -1, D] after the
// Transpose): any merge then does.
Constraint mergedSequenceFirst() {
  return {"merged-heads-sequence-first", [](const Match& m, Why& why) {
            Why checked(false);  // packedQkv held
            if (!packedLayout(m, checked)->x->shape()[1].isStatic()) return true;
            Node* ta = m.get("ta");
            Node* r = ta->output(0)->uniqueConsumer();  // uniqueConsumer(ta) held
            if (reshapesByConstantWithoutZeros(*r, ta->output(0))) return true;
            return why.fail(*r, [&] {
              return fmt::format("{} is not a Reshape of the merged heads '{}' by a constant "
                                 "shape without zeros",
                                 r->label(), ta->output(0)->name());
            });
          }};
}

constexpr const char* kSequenceFirst =
    "rq:Reshape -> tq:Transpose[perm=[1, 0, 2]] -> uq:Unsqueeze -> 0:a:fusectl::Attention"
    " -> zo:Squeeze -> ^ta:Transpose[perm=[1, 0, 2]] ;"
    " rk:Reshape -> tk:Transpose[perm=[1, 0, 2]] -> uk:Unsqueeze -> 1:a ;"
    " rv:Reshape -> tv:Transpose[perm=[1, 0, 2]] -> uv:Unsqueeze -> 2:a ;"
    " sq:Slice -> rq ; sk:Slice -> rk ; sv:Slice -> rv";

constexpr const char* kHeadChains =
    "rq:Reshape -> tq:Transpose[perm=[0, 2, 1, 3]] -> 0:a:fusectl::Attention"
    " -> ^ta:Transpose[perm=[0, 2, 1, 3]] ;"
    " rk:Reshape -> tk:Transpose[perm=[0, 2, 1, 3]] -> 1:a ;"
    " rv:Reshape -> tv:Transpose[perm=[0, 2, 1, 3]] -> 2:a";
// LLaMA's: q and k rotated between their head splits and the attention.
constexpr const char* kRotaryHeadChains =
    "rq:Reshape -> tq:Transpose[perm=[0, 2, 1, 3]] -> 0:eq:fusectl::RotaryEmbedding"
    " -> 0:a:fusectl::Attention -> ^ta:Transpose[perm=[0, 2, 1, 3]] ;"
    " rk:Reshape -> tk:Transpose[perm=[0, 2, 1, 3]] -> 0:ek:fusectl::RotaryEmbedding -> 1:a ;"
    " rv:Reshape -> tv:Transpose[perm=[0, 2, 1, 3]] -> 2:a";
constexpr const char* kSlices = " ; sq:Slice -> rq ; sk:Slice -> rk ; sv:Slice -> rv";
constexpr const char* kSplit = " ; split:Split.0 -> rq ; split.1 -> rk ; split.2 -> rv";
constexpr const char* kStacked =
    "r5:Reshape -> t5:Transpose[perm=[2, 0, 3, 1, 4]] -> split:Split.0 -> zq:Squeeze"
    " -> 0:a:fusectl::Attention -> ^ta:Transpose[perm=[0, 2, 1, 3]] ;"
    " split.1 -> zk:Squeeze -> 1:a ; split.2 -> zv:Squeeze -> 2:a";
// Paddle2ONNX's: each part a Slice of axis 0 then a Squeeze (PP-OCR's SVTR blocks).
constexpr const char* kStackedSlices =
    "r5:Reshape -> t5:Transpose[perm=[2, 0, 3, 1, 4]] -> lq:Slice -> zq:Squeeze"
    " -> 0:a:fusectl::Attention -> ^ta:Transpose[perm=[0, 2, 1, 3]] ;"
    " t5 -> lk:Slice -> zk:Squeeze -> 1:a ; t5 -> lv:Slice -> zv:Squeeze -> 2:a";
constexpr const char* kStackedGather =
    "r5:Reshape -> t5:Transpose[perm=[2, 0, 3, 1, 4]] -> gq:Gather"
    " -> 0:a:fusectl::Attention -> ^ta:Transpose[perm=[0, 2, 1, 3]] ;"
    " t5 -> gk:Gather -> 1:a ; t5 -> gv:Gather -> 2:a";

// The rotary forms' condition: q and k rotated by the same tables, which AttentionPackedRotary
// reads for every head alike: [..., S or 1, D] with no head dim other than 1, B or 1 before it.
Constraint sharedRotaryTables() {
  return {"shared-rotary-tables", [](const Match& m, Why& why) {
            Why checked(false);  // packedQkv held
            const Packed p = *packedLayout(m, checked);
            Node* eq = m.get("eq");
            Node* ek = m.get("ek");
            if (eq->input(1) != ek->input(1) || eq->input(2) != ek->input(2)) {
              return why.fail(*ek, [&] {
                return fmt::format("{} rotates k by '{}' and '{}', {} rotates q by '{}' and '{}': "
                                   "AttentionPackedRotary takes one pair of tables",
                                   ek->label(), ek->input(1)->name(), ek->input(2)->name(),
                                   eq->label(), eq->input(1)->name(), eq->input(2)->name());
              });
            }
            const Shape& xs = p.x->shape();
            const Value* table = eq->input(1);
            const Shape& t = table->shape();
            const int64_t r = t.hasRank() ? static_cast<int64_t>(t.rank()) : 0;
            auto is = [&](int64_t from_end, const Dim& want) {
              const Dim& d = t[static_cast<size_t>(r - from_end)];
              return (d.isStatic() && d.value() == 1) || d.provablyEqual(want);
            };
            const bool ok = t.hasRank() && r >= 1 && r <= 4 &&
                            table->dtype() == p.x->dtype() &&
                            eq->input(2)->shape() == t &&
                            t[static_cast<size_t>(r - 1)].isStatic() &&
                            t[static_cast<size_t>(r - 1)].value() == p.head_size &&
                            p.head_size % 2 == 0 && (r < 2 || is(2, xs[1])) &&
                            (r < 3 || is(3, Dim::known(1))) && (r < 4 || is(4, xs[0]));
            if (ok) return true;
            return why.fail(*eq, [&] {
              return fmt::format("{} reads tables '{}' {} {}: AttentionPackedRotary takes "
                                 "[B or 1, 1, S or 1, {}] (or fewer leading dims) of X's dtype, "
                                 "the same for every head, with S and B provably '{}' {}'s",
                                 eq->label(), table->name(), dtypeName(table->dtype()), t.str(),
                                 p.head_size, p.x->name(), xs.str());
            });
          }};
}

// The forms: q, k and v cut from X by three Slices or by one Split into three; each with the
// head merge a Reshape to [B, S, Hq D] that the node replaces, or one to [B*S, Hq D] that stays;
// and each with q and k rotated (AttentionPackedRotary) or not.
std::vector<Pattern> build() {
  using namespace constraints;
  std::vector<Pattern> forms;
  // The 2-D forms first: where neither fits, theirs is the reason reported, and it names both
  // merges.
  for (const bool rotary : {true, false})
  for (const bool to_2d : {true, false}) {
    const std::string chains = std::string(rotary ? kRotaryHeadChains : kHeadChains) +
                               (to_2d ? "" : " ; ta -> merge:Reshape");
    const std::string suffix = std::string(rotary ? "-rotary" : "") + (to_2d ? "-2d" : "");
    // Dynamic exports also read q, k, v and the merge's input for B and S (Shape -> Gather),
    // to compute the head split's and merge's targets: those readers move onto X.
    Pattern slices = Pattern::parse(chains + kSlices, "packed-attention" + suffix);
    Pattern split = Pattern::parse(chains + kSplit, "packed-attention-split" + suffix);
    for (Pattern* p : {&slices, &split}) {
      p->require(slicesReadOnce());
      for (const char* c : {"rq", "tq", "rk", "tk", "rv", "tv"}) p->require(uniqueConsumer(c));
      if (rotary) {
        p->require(uniqueConsumer("eq"));
        p->require(uniqueConsumer("ek"));
      }
    }
    std::vector<Pattern*> these = {&slices, &split};
    // ViT's stacked split has no rotary form: its exporters rotate nothing.
    std::optional<Pattern> stacked, gathered, sliced;
    if (!rotary) {
      const std::string merge = to_2d ? "" : " ; ta -> merge:Reshape";
      stacked = Pattern::parse(std::string(kStacked) + merge, "packed-attention-stacked" + suffix);
      for (const char* c : {"r5", "t5", "zq", "zk", "zv", "ta"}) stacked->require(uniqueConsumer(c));
      for (int i = 0; i < 3; ++i) stacked->require(uniqueConsumer("split", i));
      these.push_back(&*stacked);
      gathered = Pattern::parse(std::string(kStackedGather) + merge,
                                "packed-attention-gathered" + suffix);
      for (const char* c : {"r5", "gq", "gk", "gv", "ta"}) gathered->require(uniqueConsumer(c));
      these.push_back(&*gathered);
      sliced = Pattern::parse(std::string(kStackedSlices) + merge,
                              "packed-attention-sliced" + suffix);
      for (const char* c : {"r5", "lq", "lk", "lv", "zq", "zk", "zv", "ta"})
        sliced->require(uniqueConsumer(c));
      these.push_back(&*sliced);
    }
    for (Pattern* p : these) {
      p->producing({rotary ? "fusectl::AttentionPackedRotary" : "fusectl::AttentionPacked"});
      p->require(uniqueConsumer("a"));
      p->require(packedQkv());
      if (rotary) p->require(sharedRotaryTables());
      if (p == &slices || p == &split) p->require(mergeInputReadOnce());  // not the stacked forms
      p->require(to_2d ? mergedHeadsTo2d() : mergedHeads());
      forms.push_back(std::move(*p));
    }
  }
  Pattern sequence_first = Pattern::parse(kSequenceFirst, "packed-attention-sequence-first");
  // A dynamic sequence length is read from k's [S, B, W] (Shape -> Gather 0): such readers
  // move onto X, whose dims 0 and 1 are the same S and B.
  sequence_first.require(slicesReadOnce());
  for (const char* c : {"rq", "tq", "uq", "rk", "tk", "uk", "rv", "tv", "uv", "a", "zo", "ta"})
    sequence_first.require(uniqueConsumer(c));
  sequence_first.producing({"fusectl::AttentionPacked"});
  sequence_first.require(packedQkv());
  sequence_first.require(mergedSequenceFirst());
  forms.push_back(std::move(sequence_first));
  return forms;
}

class FusePackedAttentionPass : public Pass {
 public:
  const PassInfo& info() const override { return FusePackedAttentionPassInfo; }

  std::vector<Pattern> patterns() const override { return build(); }

  bool run(const Graph& graph, PassContext& ctx) override {
    const std::vector<Pattern> forms = build();
    // Every Transpose is an anchor: only failed conditions are near misses.
    DriverOptions driver;
    driver.report_structural = false;
    std::vector<const Pattern*> alternatives;
    for (const Pattern& f : forms) alternatives.push_back(&f);
    return applyPatterns(graph, ctx, alternatives,
                         [&](Rewriter& rw, size_t form, const Match& m) {
             Why checked(false);  // the constraints held
             const Packed p = *packedLayout(m, checked);
             Node* a = m.get("a");
             Node* merge = m.get("merge");  // null in the 2-D forms: the Reshape stays
             Node* rotary_q = m.get("eq");  // the rotary forms
             NewNode node;
             node.domain = "fusectl";
             node.op_type = rotary_q ? "AttentionPackedRotary" : "AttentionPacked";
             node.name = a->name();
             Value* x = p.x;
             Node* batch_first = nullptr;
             const Shape& xs = p.x->shape();
             const bool sequence_first = m.get("uq") != nullptr;
             const bool one_batch =
                 !sequence_first || (xs[1].isStatic() && xs[1].value() == 1);
             if (sequence_first && !one_batch) {  // [S, B, W] -> [B, S, W]: a copy of X
               batch_first = rw.addNode(
                   swapFirstTwoAxes(p.x, p.x->name() + "_batch_first"), p.x->name() + "_batch_first",
                   ValueType{p.x->dtype(), Shape({xs[1], xs[0], xs[2]}), {}}, m.get("ta"));
               x = batch_first->output(0);
             } else if (sequence_first) {  // [S, 1, W] read as [1, S, W]: a view
               batch_first = rw.addNode(
                   reshapeView(rw, p.x, {1, -1, xs[2].value()}, "packed_attention_batch_first",
                               p.x->name() + "_batch_first"),
                   p.x->name() + "_batch_first",
                   ValueType{p.x->dtype(), Shape({Dim::known(1), xs[0], xs[2]}), {}}, m.get("ta"));
               x = batch_first->output(0);
             }
             node.inputs = {x, a->input(3)};
             if (rotary_q) {
               node.inputs.push_back(rotary_q->input(1));
               node.inputs.push_back(rotary_q->input(2));
             }
             node.attributes.push_back(Attribute::ofInt("num_heads", p.heads[0]));
             node.attributes.push_back(Attribute::ofInt("kv_num_heads", p.heads[1]));
             for (const char* name : {"scale", "causal"})
               if (const Attribute* attr = a->attr(name)) node.attributes.push_back(*attr);
             node.doc_string = a->doc_string;  // keeps the history of earlier rewrites
             // The Shapes that read B and S of the values that go read them from X.
             std::vector<Value*> read_for_dims = qkvParts(m);
             read_for_dims.push_back(m.get("ta")->output(0));
             std::vector<Node*> dims_reshapes;  // read by nothing once their Shapes move
             for (Value* v : read_for_dims) {
               const std::vector<Node*> readers = v->consumers();  // rewiring changes them
               for (Node* c : readers) {
                 if (!dimsOnlyReader(*c, xs)) continue;
                 if (c->is("Shape")) {
                   rw.rewireInput(c, 0, p.x);
                   continue;
                 }
                 const std::vector<Node*> shapes = c->output(0)->consumers();
                 for (Node* shape : shapes) rw.rewireInput(shape, 0, p.x);
                 dims_reshapes.push_back(c);
               }
             }
             for (Node* r : dims_reshapes)
               if (!rw.erased(r)) rw.eraseWithDeadProducers(r);
             Value* replaced = merge ? merge->output(0) : m.get("ta")->output(0);
             Node* packed = rw.replaceMatch(forms[form].name, m, replaced, std::move(node));
             // It stands for the head merge's input [B, S, Hq, D] in the 2-D forms, for
             // [S, Hq, D] in the sequence-first one.
             const Dim merged_width = Dim::known(p.heads[0] * p.head_size);
             packed->output(0)->type.shape =
                 sequence_first ? Shape({xs[1], xs[0], merged_width})
                                : Shape({xs[0], xs[1], merged_width});
             if (batch_first) rw.noteHelperNode(*batch_first);
             if (!one_batch) {
               // [B, S, Hq D] back to sequence first: the merge Reshape reads [S, B, Hq D],
               // the elements of the [S, B*Hq, D] it read, in the same order.
               const std::string back = packed->output(0)->name() + "_sequence_first";
               Node* t = rw.insertAfterValue(
                   packed->output(0), swapFirstTwoAxes(packed->output(0), back), back,
                   ValueType{packed->output(0)->dtype(), Shape({xs[0], xs[1], merged_width}), {}});
               rw.noteHelperNode(*t);
               if (!xs[1].isStatic()) {
                 // The merge's computed target may take dims of its input: give it the
                 // [S, B*Hq, D] it read, a view of the same elements.
                 const std::string heads = packed->output(0)->name() + "_heads";
                 Node* r = rw.insertAfterValue(
                     t->output(0),
                     reshapeView(rw, t->output(0), {0, -1, p.head_size}, "packed_attention_heads",
                                 heads),
                     heads,
                     ValueType{packed->output(0)->dtype(),
                               Shape({xs[0], Dim::known(p.heads[0]) * xs[1],
                                      Dim::known(p.head_size)}),
                               {}});
                 rw.noteHelperNode(*r);
               }
             }
             ctx.count(rotary_q ? "fused_packed_rotary_attention" : "fused_packed_attention");
             return true;
           }, driver) > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createFusePackedAttentionPass() {
  return std::make_unique<FusePackedAttentionPass>();
}

}  // namespace fusectl::passes
