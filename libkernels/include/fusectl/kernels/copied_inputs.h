// A kernel state that holds its own copy of some constant inputs (weights packed into the GEMM's
// panel layout) and reads only that copy from then on. The executor lets the originals' memory
// go once such a state is set (releaseResidentPages: file-mapped weights only, which can be read
// back), so that a model with packed weights does not hold every weight twice.
#pragma once

#include <cstdint>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

struct CopiedConstantInputs : KernelState {
  uint64_t copied_inputs = 0;  // bit i: constant input i is copied; the kernel no longer reads it
};

}  // namespace fusectl::kernels
