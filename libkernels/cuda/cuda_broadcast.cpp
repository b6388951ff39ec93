// BroadcastIndex::make: the broadcast shape and, per input, element strides over it, with
// dims merged wherever every input walks them as one (so most launches index in rank 1 or 2).
#include "cuda_common.h"

#include <algorithm>

#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {

BroadcastIndex BroadcastIndex::make(const std::vector<const std::vector<int64_t>*>& inputs,
                                    std::vector<int64_t>& out_dims) {
  if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxInputs)) {
    throw Error(ErrorKind::Internal, "BroadcastIndex: 1 to 8 inputs");
  }
  size_t rank = 0;
  for (const auto* d : inputs) rank = std::max(rank, d->size());
  out_dims.assign(rank, 1);
  for (const auto* d : inputs) {
    const size_t pad = rank - d->size();
    for (size_t i = 0; i < d->size(); ++i) {
      const int64_t v = (*d)[i];
      int64_t& o = out_dims[pad + i];
      if (v == o || v == 1) continue;
      if (o != 1) {
        throw Error(ErrorKind::InvalidInput, "shapes " + formatDims(*inputs.front()) + " and " +
                                                 formatDims(*d) + " do not broadcast");
      }
      o = v;
    }
  }
  // Per input, the stride of each output dim (0 where the input has size 1 there).
  const size_t n = inputs.size();
  std::vector<std::vector<int64_t>> strides(n, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n; ++k) {
    const auto& d = *inputs[k];
    const size_t pad = rank - d.size();
    int64_t stride = 1;
    for (size_t i = d.size(); i-- > 0;) {
      strides[k][pad + i] = d[i] == 1 ? 0 : stride;
      stride *= d[i];
    }
  }
  // Merge dim i into the kept dim before it when, for every input, one step of that outer dim
  // is out_dims[i] steps of dim i; size-1 dims vanish.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> merged(n);
  for (size_t i = 0; i < rank; ++i) {
    if (out_dims[i] == 1) continue;
    bool can_merge = !dims.empty();
    for (size_t k = 0; k < n && can_merge; ++k) {
      can_merge = merged[k].back() == strides[k][i] * out_dims[i];
    }
    if (can_merge) {
      dims.back() *= out_dims[i];
      for (size_t k = 0; k < n; ++k) merged[k].back() = strides[k][i];
    } else {
      dims.push_back(out_dims[i]);
      for (size_t k = 0; k < n; ++k) merged[k].push_back(strides[k][i]);
    }
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    throw Error(ErrorKind::Unsupported,
                "broadcast of " + std::to_string(dims.size()) + " irreducible dims (CUDA kernels take " +
                    std::to_string(kMaxRank) + ")");
  }
  BroadcastIndex b;
  b.rank = static_cast<int>(dims.size());
  b.num_inputs = static_cast<int>(n);
  for (size_t i = 0; i < dims.size(); ++i) {
    b.out_dims[i] = dims[i];
    b.numel *= dims[i];
    for (size_t k = 0; k < n; ++k) b.strides[k][i] = merged[k][i];
  }
  if (dims.empty()) b.numel = 1;
  for (int64_t d : out_dims) {
    if (d == 0) b.numel = 0;
  }
  return b;
}

bool BroadcastIndex::contiguous(int k) const {
  int64_t expect = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (strides[k][d] != expect) return false;
    expect *= out_dims[d];
  }
  return true;
}

}  // namespace fusectl::kernels::cuda
