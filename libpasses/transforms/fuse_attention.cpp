// fuse-attention: scaled dot-product attention between the head split and the head merge
// becomes one fusectl::Attention node.
//
//   scores = MatMul(q, Transpose(k))            q [B, Hq, S, D], k [B, Hkv, T, D]
//   scores = scores * c | scores / c              (optional)
//   scores = scores + mask                        (optional)
//   scores = Where(causal condition, -big, scores) (optional)
//   y      = MatMul(Softmax(scores, -1), v)       v [B, Hkv, T, Dv] (maybe repeat_kv'd)
//     =>   y = fusectl.Attention<scale, causal>(q, K, v, M)
//
// The pattern anchors on Softmax -> MatMul and walks up the score chain. Forms taken:
//   - scale: Mul by a scalar constant c (scale = c), Div by one (scale = 1/c), and/or a Mul or
//     Div of q by a one-element constant read by the product only (torch's
//     nn.MultiheadAttention); with none the scale is 1 (the model folded it into q's weights);
//   - a windowed mask: Reshape(Add(Reshape(scores, [G, W, ...]), c), scores' shape) with c a
//     constant, the scores' batch axis split into G groups of W windows and merged back
//     (torchvision's Swin-T shifted windows, `attn.view(B // nW, nW, H, N, N) + mask`): c is
//     summed with the additive mask below into one constant M of at most the scores' size;
//   - mask: an Add of a value broadcast to the scores (the additive mask, input M), and/or a
//     Where(cond, fill, scores) whose cond is the causal mask: Greater(Unsqueeze(r, 0),
//     Unsqueeze(r, 1)) (or Less with the operands swapped), possibly through a Cast to bool, of
//     r = Range(0, n, 1) with n the query length, or a constant bool matrix that is strictly
//     upper triangular; fill a scalar constant at most -1e9 (masked keys get weight 0); or
//     GPT-2's Where(keep, scores, fill) with keep a lower triangular constant buffer sliced from
//     0 to the sequence length on its last two axes;
//   - scales on q and K as well (MaxViT's `k * scale`, Whisper's d^-1/4 on each, torch's
//     masked nn.MultiheadAttention's q / sqrt(d) with the product multiplied by 1): a Mul or
//     Div of q, or of K^T's input, by a one-element constant read by the product (the
//     Transpose) only; all the scales found multiply;
//   - more batch axes, rank 5 and up ([B, G, H, S, D]: MaxViT's windows as a second batch
//     axis), all dims static, K^T swapping the last two axes only: the attention runs on
//     [B*G, H, S, D] views (Reshapes by constant shapes) and a Reshape gives its readers the
//     rank-5 result; the mask must vary along the last three axes only (a constant one of rank
//     5 or more is written again as its last four dims), and no windowed mask;
//   - K^T: a Transpose of rank 4 (K is its input with the last two axes swapped back: no node
//     when the Transpose swapped only those, else a new Transpose), or K^T as it is (a new
//     Transpose makes K: latent diffusion's attention block, MatMul(Transpose(q), k) with q and
//     k [B, C, N], after canonicalize's weights-first), or of rank 3 when the heads
//     are folded into the batch, [B*H, S, D] (torch's nn.MultiheadAttention): the attention then
//     runs on [1, B*H, S, D] views of q, K and v (Unsqueeze), and a Squeeze gives its readers
//     [B*H, S, Dv] back (fuse-packed-attention takes both in, static or dynamic batch); K and V
//     may come through HF's repeat_kv (Unsqueeze(2) -> Expand -> Reshape), which is peeled: the
//     kernel maps query head h to key/value head h / (Hq / Hkv).
// Conditions, checked in this order, each a reported rejection:
//  1. the scores chain between the two MatMuls is one of the forms above, each intermediate
//     read only by the next node and no graph output (they disappear);
//  2. Softmax is over the last axis alone;
//  3. the scale is a one-element constant;
//  4. the additive mask broadcasts to the scores without enlarging them (the Add's output has
//     the scores' shape) and has rank <= 4; with a windowed mask, the additive mask (if any) is a
//     constant too, of the scores' dtype (the two are summed once, when the pass runs: the
//     kernel adds c + M where the model added M, then c, which differs by rounding only);
//  5. the causal condition is one of the forms above, over a length equal to the query and the
//     key length (S = T, so the bottom-right alignment of `causal` changes nothing);
//  6. K^T is a Transpose of a rank-4 value, or of a rank-3 one, or of a rank-5+ one swapping
//     its last two axes only; or, not a Transpose, a value of Q's rank 3 or 4 (K is then its
//     transpose, a new node);
//  7. Q, K and V have rank 4, one batch, equal head sizes, and the head counts are derivable:
//     Hq a static multiple of Hkv, or the two provably equal; or all rank 3 with one count of
//     folded batches and heads; or all of one rank >= 5 with static dims, the same batch axes,
//     and a mask as above;
//  8. float32, float16 or bfloat16 (fusibleFloatTypes; the mask of the scores' dtype), and the
//     model's opset is at least 11 (the function body's Range). Before opset 13 Softmax's
//     default axis is 1 (condition 2 reads it so), and the views of the rank-3 form are
//     Unsqueeze/Squeeze with an `axes` attribute.
#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <optional>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

struct Site {
  Node* qk = nullptr;
  Value* q = nullptr;
  Node* k_transpose = nullptr;
  Value* k_source = nullptr;               // K^T's Transpose input
  std::vector<int64_t> k_perm;             // K = Transpose(k_source, k_perm); identity: K is k_source
  Value* k = nullptr;                      // K when no new Transpose is needed (after repeat_kv)
  Value* v = nullptr;
  Value* mask = nullptr;
  Node* mask_add = nullptr;
  // The windowed mask (header): the split Reshape, the Add of the constant, the merge Reshape.
  Node* window_split = nullptr;
  Node* window_add = nullptr;
  Node* window_merge = nullptr;
  Value* window_mask = nullptr;
  Node* where = nullptr;
  Node* scale_node = nullptr;
  float scale = 1.f;
  Node* k_scale_node = nullptr;  // K^T's input is Mul(K, c) / Div(K, c) (MaxViT scales k)
  bool causal = false;
  bool where_keeps = false;  // Where(keep, scores, fill) rather than Where(hide, fill, scores)
};

std::string describe(const Value* v) {
  if (!v->isConstant()) return fmt::format("'{}' ({})", v->name(), nonConstantOrigin(*v));
  std::optional<double> c = scalarConstant(v);
  if (c) return fmt::format("'{}' (= {})", v->name(), *c);
  return fmt::format("'{}' ({} elements)", v->name(), v->initializer()->numel());
}

Node* producerOf(const Value* v, std::string_view op) {
  Node* p = v ? v->producer() : nullptr;
  return p && p->domain().empty() && p->is(op) ? p : nullptr;
}

// The intermediate `v` (output of `n`) is read by one node and is no graph output.
bool disappears(const Node& n, Why& why) {
  const Value* v = n.output(0);
  if (!v->isGraphOutput() && v->uniqueConsumer() && v->uses().size() == 1) return true;
  return why.fail(n, [&] {
    return fmt::format("{} output '{}' is read elsewhere too, so the attention cannot absorb it",
                       n.label(), v->name());
  });
}


// HF repeat_kv, Reshape(Expand(Unsqueeze(x, 2), [B, H, n, T, D]), [B, H*n, T, D]): x when `v`
// is that (dims checked by shape inference), else `v`.
Value* peelRepeatKv(Value* v) {
  Node* reshape = producerOf(v, "Reshape");
  Node* expand = reshape ? producerOf(reshape->input(0), "Expand") : nullptr;
  Node* unsq = expand ? producerOf(expand->input(0), "Unsqueeze") : nullptr;
  if (!unsq) return v;
  std::optional<std::vector<int64_t>> axes = unsqueezeAxes(*unsq);
  if (!axes || axes->size() != 1 || ((*axes)[0] != 2 && (*axes)[0] != -3)) return v;
  Value* x = unsq->input(0);
  const Shape& xs = x->shape();
  const Shape& es = expand->output(0)->shape();
  const Shape& rs = v->shape();
  if (!xs.hasRank() || !es.hasRank() || !rs.hasRank() || xs.rank() != 4 || es.rank() != 5 ||
      rs.rank() != 4)
    return v;
  // Only axis 2 is expanded, and the Reshape merges it into the heads.
  const bool only_group_grows = xs[0].provablyEqual(es[0]) && xs[1].provablyEqual(es[1]) &&
                                xs[2].provablyEqual(es[3]) && xs[3].provablyEqual(es[4]);
  const bool merges_heads = rs[0].provablyEqual(xs[0]) && rs[2].provablyEqual(xs[2]) &&
                            rs[3].provablyEqual(xs[3]) && es[2].isStatic() && xs[1].isStatic() &&
                            rs[1].isStatic() && rs[1].value() == xs[1].value() * es[2].value();
  return only_group_grows && merges_heads ? x : v;
}

// Whether `n` traces, through Casts, to Gather(Shape(x), i) with x's dim i provably `want`, or
// is a constant equal to a static `want`.
bool isLength(const Value* n, const Dim& want) {
  // One-element plumbing that keeps the value: Cast, Squeeze, Unsqueeze.
  for (;;) {
    Node* p = n->producer();
    if (!p || !p->domain().empty() || !(p->is("Cast") || p->is("Squeeze") || p->is("Unsqueeze")))
      break;
    n = p->input(0);
  }
  if (std::optional<double> c = scalarConstant(n)) return want.isStatic() && *c == want.value();
  Node* gather = producerOf(n, "Gather");
  if (!gather) gather = producerOf(n, "Slice");  // Slice(Shape(x), [i], [i + 1])
  Node* shape = gather ? producerOf(gather->input(0), "Shape") : nullptr;
  if (!shape || shape->numInputs() != 1 || shape->attr("start") || shape->attr("end")) return false;
  if (gather->is("Slice")) {
    std::optional<double> from = scalarConstant(gather->input(1));
    std::optional<double> to = gather->numInputs() > 2 ? scalarConstant(gather->input(2)) : std::nullopt;
    if (!from || !to || *to != *from + 1) return false;  // [-2, -1) is dim -2 too
    if (gather->numInputs() > 3 && gather->input(3)) {
      std::optional<double> axis = scalarConstant(gather->input(3));
      if (!axis || *axis != 0) return false;
    }
    if (gather->numInputs() > 4 && gather->input(4)) {
      std::optional<double> step = scalarConstant(gather->input(4));
      if (!step || *step != 1) return false;
    }
  }
  std::optional<double> index = scalarConstant(gather->input(1));
  const Shape& s = shape->input(0)->shape();
  if (!index || !s.hasRank()) return false;
  int64_t i = static_cast<int64_t>(*index);
  if (i < 0) i += static_cast<int64_t>(s.rank());
  return i >= 0 && i < static_cast<int64_t>(s.rank()) && s[static_cast<size_t>(i)].provablyEqual(want);
}

// Whether `cond` is key t hidden from query s exactly when t > s, for S = T = `len`.
bool isCausalCondition(const Value* cond, const Dim& len) {
  while (Node* c = producerOf(cond, "Cast")) cond = c->input(0);
  if (cond->isConstant()) {
    const Tensor* t = cond->initializer();
    const std::vector<int64_t>& d = t->dims();
    if (d.size() < 2 || !len.isStatic() || d[d.size() - 1] != len.value() ||
        d[d.size() - 2] != len.value() || t->numel() != len.value() * len.value())
      return false;
    const int64_t n = len.value();
    for (int64_t s = 0; s < n; ++s)
      for (int64_t k = 0; k < n; ++k)
        if ((t->valueAsDouble(s * n + k) != 0) != (k > s)) return false;
    return true;
  }
  Node* cmp = producerOf(cond, "Greater");
  Value *col = nullptr, *row = nullptr;  // Greater(col, row) or Less(row, col)
  if (cmp) {
    col = cmp->input(0);
    row = cmp->input(1);
  } else if ((cmp = producerOf(cond, "Less"))) {
    row = cmp->input(0);
    col = cmp->input(1);
  } else {
    return false;
  }
  Node* uc = producerOf(col, "Unsqueeze");
  Node* ur = producerOf(row, "Unsqueeze");
  if (!uc || !ur || uc->input(0) != ur->input(0)) return false;
  std::optional<std::vector<int64_t>> ac = unsqueezeAxes(*uc), ar = unsqueezeAxes(*ur);
  if (!ac || !ar || *ac != std::vector<int64_t>{0} || *ar != std::vector<int64_t>{1}) return false;
  Node* range = producerOf(uc->input(0), "Range");
  if (!range) return false;
  std::optional<double> start = scalarConstant(range->input(0));
  std::optional<double> delta = scalarConstant(range->input(2));
  return start && *start == 0 && delta && *delta == 1 && isLength(range->input(1), len);
}

// Whether `keep` is GPT-2's causal buffer: Slices from 0 to `len` on the last two axes of a
// constant whose last two axes hold a lower triangular (t <= s) matrix; the top-left block of
// a lower triangular matrix is lower triangular.
bool isCausalKeep(const Value* keep, const Dim& len) {
  bool sliced[2] = {false, false};
  while (Node* slice = producerOf(keep, "Slice")) {
    if (slice->numInputs() < 4 || !slice->input(3)) return false;
    const Shape& in = slice->input(0)->shape();
    std::optional<double> start = scalarConstant(slice->input(1));
    std::optional<double> axis = scalarConstant(slice->input(3));
    if (!in.hasRank() || !start || *start != 0 || !axis || !isLength(slice->input(2), len)) return false;
    if (slice->numInputs() > 4 && slice->input(4)) {
      std::optional<double> step = scalarConstant(slice->input(4));
      if (!step || *step != 1) return false;
    }
    int64_t a = static_cast<int64_t>(*axis);
    const int64_t rank = static_cast<int64_t>(in.rank());
    if (a < 0) a += rank;
    if (a != rank - 1 && a != rank - 2) return false;
    sliced[a - (rank - 2)] = true;
    keep = slice->input(0);
  }
  if (!keep->isConstant()) return false;
  const Tensor* t = keep->initializer();
  const std::vector<int64_t>& d = t->dims();
  if (d.size() < 2) return false;
  const int64_t rows = d[d.size() - 2], cols = d[d.size() - 1];
  // Unsliced axes must already have the length.
  if ((!sliced[0] && !(len.isStatic() && rows == len.value())) ||
      (!sliced[1] && !(len.isStatic() && cols == len.value())))
    return false;
  for (int64_t i = 0; i < t->numel(); ++i) {
    const int64_t s = (i / cols) % rows, k = i % cols;
    if ((t->valueAsDouble(i) != 0) != (k <= s)) return false;
  }
  return true;
}

// Whether `v` is MatMul(Q, K^T) or its scale (Mul/Div of it): the scores operand of the mask
// Add, told apart from a mask computed in the graph ((1 - m) * -10000).
bool leadsToScores(const Value* v) {
  if (producerOf(v, "MatMul")) return true;
  Node* p = v->producer();
  if (!p || !p->domain().empty() || !(p->is("Mul") || p->is("Div")) || p->numInputs() != 2) return false;
  return producerOf(p->input(0), "MatMul") || (p->is("Mul") && producerOf(p->input(1), "MatMul"));
}

// Q scaled before the product, Mul(q, c) or Div(q, c) with c a nonzero one-element constant
// read by the QK MatMul only (torch's nn.MultiheadAttention scales q so): when the scores have
// no scale of their own, the attention takes q unscaled and c as its scale, and the Mul goes.
// (c q) . k and c (q . k) differ by rounding only.
struct QScale {
  Value* q;
  float scale;
};
// `x` = Mul(v, c), Mul(c, v) or Div(v, c), read by `reader` only: v and the scale (c or 1/c).
std::optional<QScale> scaledOperand(Value* x, const Node* reader) {
  Node* p = x->producer();
  if (!p || !p->domain().empty() || !(p->is("Mul") || p->is("Div")) || p->numInputs() != 2 ||
      x->uniqueConsumer() != reader || x->isGraphOutput())
    return std::nullopt;
  const bool constant_first = p->is("Mul") && p->input(0)->isConstant();
  Value* c = p->input(constant_first ? 0 : 1);
  Value* q = p->input(constant_first ? 1 : 0);
  std::optional<double> value = scalarConstant(c);
  const Shape& cs = c->shape();
  const Shape& qs = q->shape();
  if (!value || *value == 0 || !std::isfinite(*value) || q->isConstant() || !cs.hasRank() ||
      !qs.hasRank() || cs.rank() > qs.rank())
    return std::nullopt;
  return QScale{q, static_cast<float>(p->is("Div") ? 1.0 / *value : *value)};
}
std::optional<QScale> scaledQuery(const Site& site) { return scaledOperand(site.q, site.qk); }

// `dims` right-aligned to `rank` with leading 1s.
std::vector<int64_t> padTo(std::vector<int64_t> dims, size_t rank) {
  dims.insert(dims.begin(), rank - dims.size(), 1);
  return dims;
}

struct WindowMask {
  Node* split;
  Node* add;
  Value* mask;
};

// `merge` = Reshape(Add(Reshape(y, [G, W, y1, ...]), c), y's dims) with G * W = y0, every dim
// static and c a constant initializer that broadcasts into the split view without enlarging
// it; nullopt otherwise (the score chain then stops at `merge`).
std::optional<WindowMask> windowMask(const Node& merge) {
  Node* add = producerOf(merge.input(0), "Add");
  if (!add || add->numInputs() != 2) return std::nullopt;
  auto constantOperand = [](const Value* v) { return v->isConstant() && v->initializer(); };
  int view = -1;
  for (int i = 0; i < 2 && view < 0; ++i)
    if (producerOf(add->input(i), "Reshape") && constantOperand(add->input(1 - i))) view = i;
  if (view < 0) return std::nullopt;
  Node* split = add->input(view)->producer();
  Value* mask = add->input(1 - view);
  for (const Value* x : {split->input(0), split->output(0), add->output(0), merge.output(0), mask})
    if (!x->shape().isStatic()) return std::nullopt;
  const std::vector<int64_t> y = split->input(0)->shape().staticDims();
  const std::vector<int64_t> v = split->output(0)->shape().staticDims();
  const std::vector<int64_t> c = mask->shape().staticDims();
  if (y.size() < 3 || v.size() != y.size() + 1 || add->output(0)->shape().staticDims() != v ||
      merge.output(0)->shape().staticDims() != y || c.size() > v.size() || v[0] * v[1] != y[0])
    return std::nullopt;
  for (size_t i = 1; i < y.size(); ++i)
    if (v[i + 1] != y[i]) return std::nullopt;
  const std::vector<int64_t> cp = padTo(c, v.size());
  for (size_t i = 0; i < cp.size(); ++i)
    if (cp[i] != 1 && cp[i] != v[i]) return std::nullopt;
  return WindowMask{split, add, mask};
}

// The windowed constant c (at its split view's batch axis, [G, W, ...]) plus the additive mask
// M (or nothing) as one constant over the scores' axes: the batch axis is G * W long where c or
// M varies along it, else 1; each other axis as long as c's or M's. Sums in double, rounded
// once to the dtype: fl(c + M), as the dtype's own addition would give.
Tensor windowedMaskSum(const Site& site) {
  const std::vector<int64_t> y = site.window_split->input(0)->shape().staticDims();
  const std::vector<int64_t> v = site.window_split->output(0)->shape().staticDims();
  const size_t r = y.size();
  const Tensor& ct = *site.window_mask->initializer();
  const std::vector<int64_t> cd = padTo(ct.dims(), r + 1);
  const Tensor* mt = site.mask ? site.mask->initializer() : nullptr;
  const std::vector<int64_t> md = mt ? padTo(mt->dims(), r) : std::vector<int64_t>(r, 1);
  std::vector<int64_t> out(r, 1);
  if (cd[0] != 1 || cd[1] != 1 || md[0] != 1) out[0] = y[0];
  for (size_t i = 1; i < r; ++i) out[i] = std::max(cd[i + 1], md[i]);
  auto strides = [](const std::vector<int64_t>& d) {
    std::vector<int64_t> st(d.size(), 1);
    for (size_t i = d.size(); i-- > 1;) st[i - 1] = st[i] * d[i];
    return st;
  };
  const std::vector<int64_t> cs = strides(cd), ms = strides(md), os = strides(out);
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t ci = 0, mi = 0, rest = flat;
    for (size_t i = 0; i < r; ++i) {
      const int64_t at = rest / os[i];
      rest %= os[i];
      if (i == 0) {
        const int64_t g = at / v[1], w = at % v[1];
        if (cd[0] != 1) ci += g * cs[0];
        if (cd[1] != 1) ci += w * cs[1];
      } else if (cd[i + 1] != 1) {
        ci += at * cs[i + 1];
      }
      if (md[i] != 1) mi += at * ms[i];
    }
    values[static_cast<size_t>(flat)] = ct.valueAsDouble(ci) + (mt ? mt->valueAsDouble(mi) : 0.0);
  }
  return tensorFromDoubles(site.window_mask->dtype(), out, values);
}

// For scores of rank r >= 5 run as [prod(batch axes), H, S, T]: the mask varies along its
// last three axes only (the ones before are 1), and is a constant when its rank is over 4 (it
// is then written again as its last four dims).
bool maskFitsBatchView(const Value& mask, size_t scores_rank) {
  const Shape& ms = mask.shape();
  if (!ms.hasRank() || ms.rank() > scores_rank) return false;
  for (size_t i = 0; i + 3 < ms.rank(); ++i)
    if (!ms[i].isStatic() || ms[i].value() != 1) return false;
  return ms.rank() <= 4 || (mask.isConstant() && mask.initializer());
}

enum Check { kChain = 1, kSoftmax, kScale, kMask, kCausal, kTranspose, kHeads, kAll };

// The site, or nullopt with `why`; checks conditions 1..upto (the header's numbering).
std::optional<Site> analyze(const Match& m, Why& why, int upto, int64_t opset) {
  Node* softmax = m.get("sm");
  Node* pv = m.get("pv");
  Site site;
  if (pv->input(0) != softmax->output(0)) {
    why.fail(*pv, [&] { return fmt::format("{} reads {} as V, not as the weights", pv->label(), softmax->label()); });
    return std::nullopt;
  }
  if (!disappears(*softmax, why)) return std::nullopt;
  site.v = pv->input(1);
  // 1. Walk the score chain up from the Softmax.
  Value* x = softmax->input(0);
  for (int step = 0; step < 4; ++step) {
    Node* p = x->producer();
    if (!p || !p->domain().empty()) break;
    if (p->is("Reshape") && !site.window_merge && !site.mask_add && !site.scale_node) {
      std::optional<WindowMask> w = windowMask(*p);
      if (!w) break;
      if (!disappears(*p, why) || !disappears(*w->add, why) || !disappears(*w->split, why))
        return std::nullopt;
      site.window_merge = p;
      site.window_add = w->add;
      site.window_split = w->split;
      site.window_mask = w->mask;
      x = w->split->input(0);
    } else if (p->is("Where") && !site.where && !site.window_merge && !site.mask_add &&
               !site.scale_node) {
      if (!disappears(*p, why)) return std::nullopt;
      site.where = p;
      // Where(hide, fill, scores), or GPT-2's Where(keep, scores, fill).
      site.where_keeps = !p->input(1)->isConstant() && p->input(2)->isConstant();
      x = p->input(site.where_keeps ? 1 : 2);
    } else if (p->is("Add") && !site.mask_add && !site.scale_node) {
      // The scores operand is the one produced by the MatMul or its scale.
      int scores = -1;
      for (int i = 0; i < 2 && scores < 0; ++i)
        if (leadsToScores(p->input(i))) scores = i;
      if (scores < 0) break;
      if (!disappears(*p, why)) return std::nullopt;
      site.mask_add = p;
      site.mask = p->input(1 - scores);
      x = p->input(scores);
    } else if ((p->is("Mul") || p->is("Div")) && !site.scale_node) {
      if (!disappears(*p, why)) return std::nullopt;
      site.scale_node = p;
      const bool swapped = p->is("Mul") && producerOf(p->input(1), "MatMul") && !producerOf(p->input(0), "MatMul");
      x = p->input(swapped ? 1 : 0);
    } else {
      break;
    }
  }
  site.qk = producerOf(x, "MatMul");
  if (!site.qk) {
    Node* p = x->producer();
    why.fail(*softmax, [&] {
      return fmt::format("{} input is not MatMul(Q, K^T) under an optional scale, mask and causal "
                         "Where: the chain stops at {}",
                         softmax->label(), p ? p->label() : fmt::format("'{}'", x->name()));
    });
    return std::nullopt;
  }
  if (!disappears(*site.qk, why)) return std::nullopt;
  site.q = site.qk->input(0);
  if (upto < kSoftmax) return site;

  // 2. Softmax over the last axis.
  const Shape& scores_shape = site.qk->output(0)->shape();
  // Before opset 13 the default axis is 1 and Softmax normalises axes axis..rank-1 together
  // (the input seen as 2-D): the last axis alone only for axis = rank - 1 (or -1).
  int64_t axis = softmax->attrInt("axis", opset > 0 && opset < 13 ? 1 : -1);
  const int64_t rank = scores_shape.hasRank() ? static_cast<int64_t>(scores_shape.rank()) : -1;
  if (!(axis == -1 || (rank > 0 && axis == rank - 1))) {
    why.fail(*softmax, [&] { return fmt::format("{} normalizes axis {}, not the last (key) axis", softmax->label(), axis); });
    return std::nullopt;
  }
  if (upto < kScale) return site;

  // 3. The scale is a one-element constant.
  if (Node* s = site.scale_node) {
    const Value* c = s->is("Div") ? s->input(1) : otherOperand(*s, x);
    std::optional<double> value = c ? scalarConstant(c) : std::nullopt;
    if (!value || *value == 0 || !std::isfinite(*value)) {
      why.fail(*s, [&] {
        return fmt::format("{} scales the scores by {}, not by a nonzero one-element constant",
                           s->label(), c ? describe(c) : std::string("its own input"));
      });
      return std::nullopt;
    }
    site.scale = static_cast<float>(s->is("Div") ? 1.0 / *value : *value);
  }
  // A scale on q as well (torch's nn.MultiheadAttention with a mask: q / sqrt(d), then its
  // baddbmm multiplies the product by alpha = 1): the scales multiply.
  if (std::optional<QScale> qs = scaledQuery(site)) {
    site.q = qs->q;
    site.scale *= qs->scale;  // from 1 when the scores have no scale: exact
  }
  if (upto < kMask) return site;

  // 4. The additive mask broadcasts to the scores.
  if (Node* add = site.mask_add) {
    const Shape& out = add->output(0)->shape();
    const Shape& ms = site.mask->shape();
    const DType out_type = add->output(0)->dtype();
    bool same = out.hasRank() && scores_shape.hasRank() && out.rank() == scores_shape.rank();
    for (size_t i = 0; same && i < out.rank(); ++i) same = out[i].provablyEqual(scores_shape[i]);
    const size_t max_rank = std::max<size_t>(4, scores_shape.hasRank() ? scores_shape.rank() : 0);
    if (!same || !ms.hasRank() || ms.rank() > max_rank || site.mask->dtype() != out_type) {
      why.fail(*add, [&] {
        return fmt::format("{} mask '{}' of shape {} does not provably broadcast to the scores {} "
                           "(the sum has shape {}; the mask must be {} of rank <= 4, or of "
                           "the scores' rank)",
                           add->label(), site.mask->name(), ms.str(), scores_shape.str(), out.str(),
                           dtypeName(out_type));
      });
      return std::nullopt;
    }
  }
  if (Node* add = site.window_add) {
    const DType scores_type = site.qk->output(0)->dtype();
    if (site.window_mask->dtype() != scores_type) {
      why.fail(*add, [&] {
        return fmt::format("{} windowed mask '{}' is {}, not the scores' {}", add->label(),
                           site.window_mask->name(), dtypeName(site.window_mask->dtype()),
                           dtypeName(scores_type));
      });
      return std::nullopt;
    }
    if (site.mask && !(site.mask->isConstant() && site.mask->initializer())) {
      why.fail(*add, [&] {
        return fmt::format("{} adds a windowed constant mask after {} added '{}' ({}): the "
                           "attention takes one mask, and only two constants can be summed into it",
                           add->label(), site.mask_add->label(), site.mask->name(),
                           nonConstantOrigin(*site.mask));
      });
      return std::nullopt;
    }
  }
  if (upto < kCausal) return site;

  // 5. The causal Where.
  if (Node* w = site.where) {
    const Shape& qs = site.q->shape();
    const Value* fill_value = w->input(site.where_keeps ? 2 : 1);
    std::optional<double> fill = scalarConstant(fill_value);
    if (!fill || *fill > -1e9) {
      why.fail(*w, [&] {
        return fmt::format("{} fills masked scores with {}, not a one-element constant <= -1e9 "
                           "(masked keys would keep some weight)", w->label(), describe(fill_value));
      });
      return std::nullopt;
    }
    const size_t r = scores_shape.hasRank() ? scores_shape.rank() : 0;
    const bool square = qs.hasRank() && (qs.rank() == 3 || qs.rank() == 4) && r == qs.rank() &&
                        scores_shape[r - 2].provablyEqual(scores_shape[r - 1]);
    const bool causal =
        square && (site.where_keeps ? isCausalKeep(w->input(0), scores_shape[r - 2])
                                    : isCausalCondition(w->input(0), scores_shape[r - 2]));
    if (!causal) {
      why.fail(*w, [&] {
        return fmt::format("{} condition '{}' is not a causal mask (t > s over Range(0, n, 1) with n "
                           "the query length, a constant strictly upper triangular matrix, or for "
                           "Where(keep, scores, fill) a lower triangular constant sliced from 0 to "
                           "the length) of scores {} whose query and key lengths are provably equal",
                           w->label(), w->input(0)->name(), scores_shape.str());
      });
      return std::nullopt;
    }
    site.causal = true;
  }
  if (upto < kTranspose) return site;

  // 6. K^T is a Transpose of a rank-4 K, or of rank 3 (heads folded into the batch); or K^T
  // itself, of q's rank 3 or 4, which a new Transpose turns into K (the attention block of
  // latent-diffusion UNets and VAEs multiplies Transpose(q) by k as it is: q, k [B, C, N]).
  Node* kt = producerOf(site.qk->input(1), "Transpose");
  const Shape& kt_shape = site.qk->input(1)->shape();
  const bool plain_kt = !kt && kt_shape.hasRank() && site.q->shape().hasRank() &&
                        kt_shape.rank() == site.q->shape().rank() &&
                        (kt_shape.rank() == 3 || kt_shape.rank() == 4);
  if (plain_kt) {
    site.k_source = site.qk->input(1);
    site.k_perm = lastTwoAxesSwapped(kt_shape.rank());
  } else {
    const std::vector<int64_t> perm = kt && kt->hasAttr("perm")
                                          ? transposePerm(*kt, nullptr).value_or(std::vector<int64_t>{})
                                          : std::vector<int64_t>{};
    // Rank 5 and up: more batch axes before the heads (MaxViT's [B, G, H, N, D], windows as a
    // second batch axis); K^T must then swap the last two axes only.
    const bool swaps_last_two = perm.size() >= 5 && perm == lastTwoAxesSwapped(perm.size());
    if (perm.size() != 4 && perm.size() != 3 && !swaps_last_two) {
      why.fail(*site.qk, [&] {
        return fmt::format("{} second operand '{}' is not a Transpose of a rank-4 (or rank-3) K, "
                           "or of a rank-5+ K swapping only its last two axes, so K is not "
                           "available untransposed",
                           site.qk->label(), site.qk->input(1)->name());
      });
      return std::nullopt;
    }
    site.k_transpose = kt;
    site.k_source = kt->input(0);
    // A K scaled by a one-element constant before its transpose (MaxViT; Whisper scales q and k
    // by d^-1/4 each) multiplies the scale too: c (q . k) and q . (c k) differ by rounding only.
    if (std::optional<QScale> ks = scaledOperand(site.k_source, kt)) {
      site.k_scale_node = site.k_source->producer();
      site.k_source = ks->q;
      site.scale *= ks->scale;
    }
    site.k_perm = perm;
    std::swap(site.k_perm[perm.size() - 1], site.k_perm[perm.size() - 2]);
    if (isIdentityPermutation(site.k_perm))
      site.k = perm.size() == 4 ? peelRepeatKv(site.k_source) : site.k_source;
  }
  site.v = peelRepeatKv(site.v);
  if (upto < kHeads) return site;

  // 7. Ranks, batch, head size and head counts.
  const Shape& qs = site.q->shape();
  const Shape& vs = site.v->shape();
  Shape ks;
  if (site.k) {
    ks = site.k->shape();
  } else if (site.k_source->shape().hasRank() &&
             site.k_source->shape().rank() == site.k_perm.size()) {
    std::vector<Dim> d;
    for (int64_t a : site.k_perm) d.push_back(site.k_source->shape()[static_cast<size_t>(a)]);
    ks = Shape(d);
  }
  const size_t qrank = qs.hasRank() ? qs.rank() : 0;
  auto ranked = [&](const Shape& s) { return s.hasRank() && s.rank() == qrank; };
  if (qrank >= 5 && ranked(ks) && ranked(vs)) {
    // Batch axes 0 .. r-4 become one in [batch, heads, sequence, head size] views (Reshapes by
    // constant shapes), so every dim must be static.
    bool ok = qs.isStatic() && ks.isStatic() && vs.isStatic();
    if (ok) {
      const std::vector<int64_t> qd = qs.staticDims(), kd = ks.staticDims(), vd = vs.staticDims();
      for (size_t i = 0; ok && i + 3 < qrank; ++i) ok = qd[i] == kd[i] && qd[i] == vd[i];
      const size_t h = qrank - 3;
      ok = ok && qd[qrank - 1] == kd[qrank - 1] && kd[h] == vd[h] && kd[qrank - 2] == vd[qrank - 2] &&
           kd[h] > 0 && qd[h] % kd[h] == 0;
    }
    if (!ok) {
      why.fail(*site.qk, [&] {
        return fmt::format("Q {}, K {} and V {} of rank {} do not have static dims with the same "
                           "batch axes, head size and key length, Q's heads a multiple of K's",
                           qs.str(), ks.str(), vs.str(), qrank);
      });
      return std::nullopt;
    }
    if (site.window_add || (site.mask && !maskFitsBatchView(*site.mask, qrank))) {
      why.fail(*site.qk, [&] {
        return fmt::format("the scores have rank {}: their mask '{}' {} must vary along the last "
                           "three axes only (and be a constant when of rank 5 or more), with no "
                           "windowed mask",
                           qrank, site.mask ? site.mask->name() : std::string(),
                           site.mask ? site.mask->shape().str() : std::string());
      });
      return std::nullopt;
    }
    return site;
  }
  if ((qrank != 4 && qrank != 3) || !ranked(ks) || !ranked(vs)) {
    why.fail(*site.qk, [&] {
      return fmt::format("Q {}, K {} or V {} is not of rank 4 ([batch, heads, sequence, head "
                         "size]) or all of rank 3 ([batch x heads, sequence, head size])",
                         qs.str(), ks.str(), vs.str());
    });
    return std::nullopt;
  }
  // Rank 3: the heads are folded into the batch, so Q, K and V have one "head" count, N.
  const size_t h = qrank - 3;  // the head axis at rank 4; at rank 3 the batch axis stands for it
  const bool agree = qs[0].provablyEqual(ks[0]) && qs[0].provablyEqual(vs[0]) &&
                     qs[qrank - 1].provablyEqual(ks[qrank - 1]) &&
                     ks[h].provablyEqual(vs[h]) && ks[qrank - 2].provablyEqual(vs[qrank - 2]);
  const bool heads = qs[h].provablyEqual(ks[h]) ||
                     (qrank == 4 && qs[1].isStatic() && ks[1].isStatic() && ks[1].value() > 0 &&
                      qs[1].value() % ks[1].value() == 0);
  if (!agree || !heads) {
    why.fail(*site.qk, [&] {
      return fmt::format("the head count is not derivable: Q {}, K {} and V {} do not provably "
                         "share batch, head size and key length with Q's heads a multiple of K's",
                         qs.str(), ks.str(), vs.str());
    });
    return std::nullopt;
  }
  return site;
}

Constraint check(const char* name, int upto, int64_t opset) {
  return {name, [upto, opset](const Match& m, Why& why) {
            return analyze(m, why, upto, opset).has_value();
          }};
}

Pattern buildPattern(int64_t opset) {
  using namespace constraints;
  Pattern p = Pattern::parse("^sm:Softmax -> pv:MatMul", "attention");
  p.require(check("attention-chain", kChain, opset))
      .require(check("softmax-last-axis", kSoftmax, opset))
      .require(check("scale-constant", kScale, opset))
      .require(check("mask-broadcastable", kMask, opset))
      .require(check("causal-mask", kCausal, opset))
      .require(check("k-transposed", kTranspose, opset))
      .require(check("heads-derivable", kHeads, opset))
      .require(dtypeIn({"sm", "pv"}, fusibleFloatTypes()))
      .require(opsetAtLeast("sm", opset, 11, "Attention's function body needs 11 (Range)"));
  p.producing({"fusectl::Attention"});
  return p;
}

// `n` reads `x` and `arg`: a Reshape's shape, or the axes input of an Unsqueeze or Squeeze of
// axis 0; a null `arg` (before opset 13, where Squeeze and Unsqueeze take no axes input) is an
// `axes` attribute of [0] instead.
void readsWithAxisZero(NewNode& n, Value* x, Value* arg) {
  if (arg) {
    n.inputs = {x, arg};
    return;
  }
  n.inputs = {x};
  n.attributes.push_back(Attribute::ofInts("axes", {0}));
}

class FuseAttentionPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseAttentionPassInfo; }

  std::vector<Pattern> patterns() const override { return {buildPattern(13)}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const Pattern pattern = buildPattern(ctx.opset());
    // The attention's output dims are exact where the unfused chain (mask, Where, head merge)
    // left some unknown; the residual Add after the block is then provably one shape, which
    // fuse-skip-norm needs, and so is the next layer's input. GPT-2's causal mask, a Slice of a
    // [1, 1, P, P] buffer to the sequence length, leaves the scores' sequence dims unknown
    // until the attention is fused, so each layer's q, k and v dims are exact only once the
    // layer before it is fused: rounds until one fuses nothing take a stack of such layers in
    // this run (12 rounds for a 12-layer GPT-2), where one round a -O3 iteration stopped at the
    // iteration cap (8 of 12 layers fused).
    constexpr int kMaxRounds = 256;
    bool fused = false;
    for (int round = 0; round < kMaxRounds; ++round) {
      const size_t rewrites = applyPattern(graph, ctx, pattern, [&](Rewriter& rw, const Match& m) {
        fuse(rw, pattern, m, ctx.opset());
        return true;
      });
      if (rewrites == 0) break;
      fused = true;
      Rewriter(ctx).reinferShapes();
    }
    return fused;
  }

 private:
  static void fuse(Rewriter& rw, const Pattern& pattern, const Match& m, int64_t opset) {
    Why checked(false);  // every constraint held
    Site site = *analyze(m, checked, kAll, opset);
    // Squeeze and Unsqueeze take their axes as an input from opset 13, an attribute before.
    const bool axes_input = opset >= 13;
    Node* pv = m.get("pv");
    Value* k = site.k;
    Node* untransposed = nullptr;
    if (!k) {
      const Shape& src = site.k_source->shape();
      std::vector<Dim> d;
      for (int64_t a : site.k_perm) d.push_back(src[static_cast<size_t>(a)]);
      NewNode t;
      t.op_type = "Transpose";
      t.inputs = {site.k_source};
      t.attributes.push_back(Attribute::ofInts("perm", site.k_perm));
      if (site.k_transpose) {
        t.name = site.k_transpose->name() + "_untransposed";
      } else {
        t.name = (site.qk->name().empty() ? std::string("attention") : site.qk->name()) + "_k";
      }
      t.naming = NodeNaming::Unique;
      ValueType type;
      type.dtype = site.k_source->dtype();
      type.shape = Shape(d);
      untransposed = rw.addNode(std::move(t), site.k_source->name() + "_heads", type, pv);
      k = untransposed->output(0);
    }
    Value* mask = site.mask;
    if (site.window_mask) {
      mask = rw.addConstant(site.window_add->output(0)->name() + "_attention_mask",
                            windowedMaskSum(site));
    } else if (!mask) {
      const DType t = pv->output(0)->dtype();
      const std::string name = t == DType::Float ? "attention_no_mask"
                                                 : fmt::format("attention_no_mask_{}", dtypeName(t));
      mask = rw.addConstant(name, tensorFromDoubles(t, {}, {0.0}));
    }
    // Heads folded into the batch (rank 3, torch's nn.MultiheadAttention export): the
    // attention runs on [1, N, S, D] views, and a Squeeze gives its readers [N, S, Dv] back.
    const bool folded = site.q->shape().rank() == 3;
    Value* axis0 = nullptr;
    std::vector<Node*> views;
    // A view of x before the attention: `op`(x, arg), named after x and `suffix`.
    auto view = [&](const char* op, Value* x, Value* arg, const char* suffix, std::vector<Dim> d) {
      NewNode n;
      n.op_type = op;
      readsWithAxisZero(n, x, arg);
      n.name = x->name() + suffix;
      n.naming = NodeNaming::Unique;
      Node* node = rw.addNode(std::move(n), x->name() + suffix,
                              ValueType{x->dtype(), Shape(std::move(d)), {}}, pv);
      views.push_back(node);
      return node->output(0);
    };
    auto batchOfOne = [&](Value* x) {
      if (!axis0 && axes_input) {
        axis0 = rw.addConstant("attention_batch_axis",
                               Tensor::fromValues(DType::Int64, {1}, std::vector<int64_t>{0}));
      }
      std::vector<Dim> d = {Dim::known(1)};
      for (const Dim& dim : x->shape().dims()) d.push_back(dim);
      return view("Unsqueeze", x, axis0, "_batch", std::move(d));
    };
    // Rank 5 and up: the attention runs on [prod(batch axes), H, S, D] views (Reshapes by
    // constant shapes), and a Reshape gives its readers the [..., H, S, Dv] they read.
    const bool batch_axes = site.q->shape().rank() >= 5;
    auto batchView = [&](Value* x) {
      const std::vector<int64_t> d = x->shape().staticDims();
      const size_t r = d.size();
      int64_t batch = 1;
      for (size_t i = 0; i + 3 < r; ++i) batch *= d[i];
      const std::vector<int64_t> target = {batch, d[r - 3], d[r - 2], d[r - 1]};
      Value* shape = rw.addConstant(x->name() + "_batch_view_shape",
                                    Tensor::fromValues(DType::Int64, {4}, target));
      std::vector<Dim> dims;
      for (int64_t t : target) dims.push_back(Dim::known(t));
      return view("Reshape", x, shape, "_batch_view", std::move(dims));
    };
    if (batch_axes && mask->shape().rank() > 4) {  // a constant (analyze): its last four dims
      const Tensor& t = *mask->initializer();
      std::vector<int64_t> d = t.dims();
      d.erase(d.begin(), d.end() - 4);
      mask = rw.addConstant(mask->name() + "_rank4",
                            tensorFromDoubles(t.dtype(), d, constantAsDoubles(t)));
    }
    Value* q = folded ? batchOfOne(site.q) : batch_axes ? batchView(site.q) : site.q;
    Value* k4 = folded ? batchOfOne(k) : batch_axes ? batchView(k) : k;
    Value* v = folded ? batchOfOne(site.v) : batch_axes ? batchView(site.v) : site.v;
    NewNode attention;
    attention.op_type = "Attention";
    attention.domain = "fusectl";
    attention.inputs = {q, k4, v, mask};
    attention.attributes.push_back(Attribute::ofFloat("scale", site.scale));
    attention.attributes.push_back(Attribute::ofInt("causal", site.causal ? 1 : 0));
    attention.name = pv->name();
    const ValueType replaced_type = pv->output(0)->type;
    Node* fused = rw.replaceMatch(pattern.name, m, pv->output(0), std::move(attention));
    // A later fusion that takes the new Transpose in (fuse-packed-attention) is traced back to
    // this site through it, so that profile compares it with the original nodes.
    if (untransposed) {
      rw.noteHelperNode(*untransposed);
      rw.context().count("untransposed_k");
    }
    // The node after the attention that gives its readers the shape they read: `op`(y, arg),
    // the attention's own output y then being `fused_shape`.
    auto restore = [&](const char* op, Value* arg, const char* suffix, Shape fused_shape,
                       const char* counter) {
      Value* y = fused->output(0);
      y->type.shape = std::move(fused_shape);
      NewNode n;
      n.op_type = op;
      readsWithAxisZero(n, y, arg);
      n.name = fused->name() + suffix;
      n.naming = NodeNaming::Unique;
      Node* back = rw.insertAfterValue(y, std::move(n), y->name() + suffix, replaced_type);
      for (Node* v : views) rw.noteHelperNode(*v);
      rw.noteHelperNode(*back);
      rw.context().count(counter);
    };
    if (folded) {
      std::vector<Dim> d = {Dim::known(1)};
      for (const Dim& dim : replaced_type.shape.dims()) d.push_back(dim);
      restore("Squeeze", axis0, "_heads", Shape(d), "heads_folded_into_batch");
    }
    if (batch_axes) {
      const std::vector<int64_t> d = replaced_type.shape.staticDims();
      const size_t r = d.size();
      int64_t batch = 1;
      for (size_t i = 0; i + 3 < r; ++i) batch *= d[i];
      Value* shape = rw.addConstant(fused->output(0)->name() + "_batch_axes_shape",
                                    Tensor::fromValues(DType::Int64, {static_cast<int64_t>(r)}, d));
      restore("Reshape", shape, "_batch_axes",
              Shape({Dim::known(batch), replaced_type.shape[r - 3], replaced_type.shape[r - 2],
                     replaced_type.shape[r - 1]}),
              "batch_axes_viewed");
    }
    if (site.k_scale_node) rw.context().count("scaled_k");
    rw.context().count(site.causal ? "fused_causal_attention" : "fused_attention");
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseAttentionPass() { return std::make_unique<FuseAttentionPass>(); }

}  // namespace fusectl::passes
