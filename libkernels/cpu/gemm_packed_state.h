// Weights packed once per session: a node's constant GEMM operand, packed into the micro-kernel's
// panel format on the first run and kept in the node's KernelState for the runs after it.
//
// Only an input that is a model initializer (KernelContext::inputIsConstant) is cached: its bytes
// and address stay the same for every run of the executor. The state still checks that it was
// packed from these bytes (HostTensor::identity: the executor may have released them since), these
// dims, this variant (transposition, group count) and for the micro-kernel in use now, and
// repacks otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "fusectl/kernels/copied_inputs.h"
#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "gemm_micro.h"

namespace fusectl::kernels::cpu {

struct PackedWeights : CopiedConstantInputs {
  const void* source = nullptr;
  std::vector<int64_t> dims;
  int64_t variant = 0;
  std::vector<PackedMatrix> parts;  // one per Conv group; one for Gemm/MatMul
};

// The packed form of input `input`, packing it with `pack` when the cache is empty or stale;
// nullptr when the input is not constant (then the GEMM packs per call as before).
inline const PackedWeights* cachedPackedWeights(KernelContext& ctx, size_t input, int64_t variant,
                                                const std::function<void(PackedWeights&)>& pack) {
  const HostTensor* t = ctx.input(input);
  if (!t || !ctx.inputIsConstant(input)) return nullptr;
  if (auto* s = dynamic_cast<PackedWeights*>(ctx.state())) {
    bool fresh = s->source == t->identity() && s->dims == t->dims() && s->variant == variant;
    for (const PackedMatrix& m : s->parts) fresh = fresh && packedForCurrentKernel(m);
    if (fresh) return s;
  }
  // The executor may have let the bytes go once this state held its copy; `pack` reads them
  // through views of the same tensor object, which this brings them back into.
  t = ctx.restoredInput(input);
  auto packed = std::make_unique<PackedWeights>();
  packed->source = t->identity();
  packed->dims = t->dims();
  packed->variant = variant;
  packed->copied_inputs = input < 64 ? uint64_t{1} << input : 0;
  pack(*packed);
  const PackedWeights* result = packed.get();
  ctx.setState(std::move(packed));
  return result;
}

// Sets p.packed_b from the cache (packing B, input 1, on a miss) and p.B where the GEMM must read
// B itself. p.B is B in place for float32, nullptr for a half B: a half B that is cached packed
// is never converted again (its panels are all the GEMM reads), one that is not is converted
// here. The packed matrix forgets the converted copy it was packed from, which ends with this
// call.
inline void bindPackedB(KernelContext& ctx, GemmParams& p, LazyFloatView& b, int64_t variant) {
  // A float32 B is read in place (p.B, null while the executor has released it), another is
  // converted; ask the dtype, which a release keeps.
  const bool in_place = ctx.input(1)->dtype() == DType::Float;
  const PackedWeights* packed = cachedPackedWeights(ctx, 1, variant, [&](PackedWeights& w) {
    w.parts.push_back(packGemmB(p.K, p.N, b.data(), p.b_rs, p.b_cs));
    if (!in_place) w.parts.back().source = nullptr;
  });
  if (packed) p.packed_b = &packed->parts[0];
  if (!p.B && !packed) p.B = b.data();
}

}  // namespace fusectl::kernels::cpu
