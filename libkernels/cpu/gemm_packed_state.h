// Weights packed once per session: a node's constant GEMM operand, packed into the micro-kernel's
// panel format on the first run and kept in the node's KernelState for the runs after it.
//
// Only an input that is a model initializer (KernelContext::inputIsConstant) is cached: its bytes
// and address stay the same for every run of the executor. The state still checks that it was
// packed from this data pointer, these dims, this variant (transposition, group count) and for
// the micro-kernel in use now, and repacks otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "fusectl/kernels/copied_inputs.h"
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
    bool fresh = s->source == t->raw() && s->dims == t->dims() && s->variant == variant;
    for (const PackedMatrix& m : s->parts) fresh = fresh && packedForCurrentKernel(m);
    if (fresh) return s;
  }
  auto packed = std::make_unique<PackedWeights>();
  packed->source = t->raw();
  packed->dims = t->dims();
  packed->variant = variant;
  packed->copied_inputs = input < 64 ? uint64_t{1} << input : 0;
  pack(*packed);
  const PackedWeights* result = packed.get();
  ctx.setState(std::move(packed));
  return result;
}

}  // namespace fusectl::kernels::cpu
