#include "fusectl/graph/tensor_limit.h"

#include <fmt/format.h>

namespace fusectl {

std::string tensorOverLimitMessage(DType dtype, const std::vector<int64_t>& dims, uint64_t bytes,
                                   uint64_t limit) {
  return fmt::format("{} dims [{}] take {} bytes, more than the limit of {} (--max-tensor-bytes)",
                     dtypeName(dtype), fmt::join(dims, ","), bytes, limit);
}

}  // namespace fusectl
