// The refusal of a tensor larger than the tensor-size limit (LoadOptions::max_tensor_bytes,
// ExecutorOptions::max_tensor_bytes, `--max-tensor-bytes`), worded once for the loader, which
// checks what a file declares, and the executor, which checks what a run computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusectl/graph/dtype.h"

namespace fusectl {

// "float dims [2,3] take 24 bytes, more than the limit of 16 (--max-tensor-bytes)"
std::string tensorOverLimitMessage(DType dtype, const std::vector<int64_t>& dims, uint64_t bytes,
                                   uint64_t limit);

}  // namespace fusectl
