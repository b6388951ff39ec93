// A kernel state that holds its own copy of some constant inputs (weights packed into the GEMM's
// panel layout) and reads only that copy from then on. The executor lets the originals' memory
// go once such a state is set, so that a model with packed weights does not hold every weight
// twice: a file mapping's pages at once (releaseResidentPages), the executor's own copy of
// bytes it could not borrow once every reader has packed it. The kernel then sees a released
// tensor (HostTensor::released: dims, no bytes) and must call KernelContext::restoredInput()
// before it reads the bytes again (cachedPackedWeights does, when it repacks).
#pragma once

#include <cstdint>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

struct CopiedConstantInputs : KernelState {
  uint64_t copied_inputs = 0;  // bit i: constant input i is copied; the kernel no longer reads it
};

}  // namespace fusectl::kernels
