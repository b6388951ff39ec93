// Shape rules of the standard transformer ops of opsets 23-28 that libonnx 1.12 does not know:
// Attention, RMSNormalization, RotaryEmbedding, Swish, SwiGLU and TensorScatter (the CPU kernels
// are libkernels/cpu/std_*.cpp and tensor_scatter.cpp). Each output keeps symbolic dims where
// its input has them.
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Output 0 is input 0's type (RMSNormalization's Y takes scale's dtype when it is known).
bool sameAsInput0(RuleContext& ctx) {
  propagateInput(ctx, 0, 0);
  return true;
}

bool rmsNormShape(RuleContext& ctx) {
  const DType dt = ctx.hasInput(1) && ctx.inDType(1) != DType::Undefined ? ctx.inDType(1)
                                                                         : ctx.inDType(0);
  ctx.setOutput(0, dt, ctx.inShape(0));
  return true;
}

// Attention. Q [B, Hq, S, D] or [B, S, Hq * D]; K [B, Hkv, L, D] or [B, L, Hkv * D]; V likewise
// with Dv; past_key [B, Hkv, P, D]. Y is [B, Hq, S, Dv] or [B, S, Hq * Dv]; present_key
// [B, Hkv, P + L, D], present_value [B, Hkv, P + L, Dv]; qk_matmul_output [B, Hq, S, P + L].
bool attentionShape(RuleContext& ctx) {
  const DType qt = ctx.inDType(0);
  const DType vt = ctx.inDType(2);
  const Shape& q = ctx.inShape(0);
  const Shape& k = ctx.inShape(1);
  const Shape& v = ctx.inShape(2);
  const int64_t rank = ctx.inRank(0);
  if ((rank != 3 && rank != 4) || ctx.inRank(1) != rank || ctx.inRank(2) != rank) {
    ctx.setOutput(0, qt, Shape::unknownRank());
    if (ctx.hasOutput(1)) ctx.setOutput(1, qt, unknownDims(4));
    if (ctx.hasOutput(2)) ctx.setOutput(2, vt, unknownDims(4));
    if (ctx.hasOutput(3)) ctx.setOutput(3, qt, unknownDims(4));
    return true;
  }
  Dim B = q[0], Hq, S, D, Hkv, L, Dv;
  if (rank == 4) {
    Hq = q[1], S = q[2], D = q[3], Hkv = k[1], L = k[2], Dv = v[3];
  } else {
    const int64_t hq = ctx.node.attrInt("q_num_heads", 0);
    const int64_t hkv = ctx.node.attrInt("kv_num_heads", 0);
    S = q[1], L = k[1];
    if (hq > 0 && hkv > 0) {
      Hq = Dim::known(hq), Hkv = Dim::known(hkv);
      D = q[2] / Hq, Dv = v[2] / Hkv;
    }
  }
  Dim T = L;
  if (ctx.hasInput(4)) {
    const Shape& past = ctx.inShape(4);
    T = past.hasRank() && past.rank() == 4 ? past[2] + L : Dim::unknown();
  }
  if (rank == 4) {
    ctx.setOutput(0, qt, Shape({B, Hq, S, Dv}));
  } else {
    ctx.setOutput(0, qt, Shape({B, S, Hq * Dv}));
  }
  if (ctx.hasOutput(1)) ctx.setOutput(1, qt, Shape({B, Hkv, T, D}));
  if (ctx.hasOutput(2)) ctx.setOutput(2, vt, Shape({B, Hkv, T, Dv}));
  if (ctx.hasOutput(3)) ctx.setOutput(3, qt, Shape({B, Hq, S, T}));
  return true;
}

}  // namespace

void registerStdTransformerOpRules(RuleRegistry& r) {
  r.add("", "Attention", attentionShape);
  r.add("", "RMSNormalization", rmsNormShape);
  r.add("", "RotaryEmbedding", sameAsInput0);
  r.add("", "Swish", sameAsInput0);
  r.add("", "SwiGLU", sameAsInput0);
  r.add("", "TensorScatter", sameAsInput0);
}

}  // namespace fusectl::shape_rules
