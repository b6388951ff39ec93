// TensorScatter (opset 24): the functional KV-cache update. present = past, then for each prefix
// index p over dims [0, axis) (p[0] is the batch) and each i < sequence_length,
// present[p, w[p0] + i, ...] = update[p, i, ...]; in "circular" mode the write position is taken
// modulo max_sequence_length, in "linear" mode it must stay inside the cache. Works on bytes, so
// every fixed-size element type is handled; the packed sub-byte types and strings are refused.
#include <cstring>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void runTensorScatter(KernelContext& ctx) {
  const HostTensor& past = ctx.requireInput(0);
  const HostTensor& update = ctx.requireInput(1);
  const HostTensor* write_indices = ctx.input(2);
  if (past.dtype() == DType::String || dtypeIsSubByte(past.dtype()) || dtypeSize(past.dtype()) == 0)
    ctx.fail("element type " + std::string(dtypeName(past.dtype())) + " is not supported");
  if (update.dtype() != past.dtype()) ctx.fail("past_cache and update differ in element type");
  const int64_t rank = static_cast<int64_t>(past.rank());
  if (rank < 2 || static_cast<int64_t>(update.rank()) != rank)
    ctx.fail("past_cache " + formatDims(past.dims()) + " and update " +
             formatDims(update.dims()) + " must have one rank, at least 2");
  int64_t axis = ctx.attrInt("axis", -2);
  if (axis < 0) axis += rank;
  if (axis <= 0 || axis >= rank)
    ctx.fail("axis " + std::to_string(ctx.attrInt("axis", -2)) + " must name a non-batch dim");
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis && past.dim(static_cast<size_t>(d)) != update.dim(static_cast<size_t>(d)))
      ctx.fail("update " + formatDims(update.dims()) + " differs from past_cache " +
               formatDims(past.dims()) + " outside the sequence axis");
  }
  const std::string mode = ctx.attrString("mode", "linear");
  if (mode != "linear" && mode != "circular") ctx.fail("unknown mode '" + mode + "'");
  const bool circular = mode == "circular";
  const int64_t batch = past.dim(0);
  const int64_t max_len = past.dim(static_cast<size_t>(axis));
  const int64_t seq_len = update.dim(static_cast<size_t>(axis));
  if (write_indices) {
    if (write_indices->dtype() != DType::Int64 || write_indices->numel() != batch)
      ctx.fail("write_indices must be int64 of shape [" + std::to_string(batch) + "]");
  }
  const int64_t* w = write_indices ? write_indices->data<int64_t>() : nullptr;
  if (!circular && seq_len > max_len)
    ctx.fail("update has " + std::to_string(seq_len) + " positions, the cache only " +
             std::to_string(max_len));
  if (max_len == 0 && seq_len > 0) ctx.fail("the cache has no positions to write");
  for (int64_t b = 0; b < batch && w; ++b) {
    if (w[b] < 0 || (!circular && w[b] + seq_len > max_len))
      ctx.fail("write index " + std::to_string(w[b]) + " of batch " + std::to_string(b) +
               " puts " + std::to_string(seq_len) + " positions outside a cache of " +
               std::to_string(max_len));
  }

  HostTensor& out = ctx.allocateOutput(0, past.dtype(), past.dims());
  if (past.byteSize() > 0) std::memcpy(out.mutableRaw(), past.raw(), past.byteSize());
  const size_t elem = dtypeSize(past.dtype());
  const int64_t prefix = product(past.dims(), 0, static_cast<size_t>(axis));
  const int64_t per_batch = prefix / std::max<int64_t>(batch, 1);
  const size_t inner = static_cast<size_t>(product(past.dims(), static_cast<size_t>(axis) + 1)) * elem;
  const char* src = static_cast<const char*>(update.raw());
  char* dst = static_cast<char*>(out.mutableRaw());
  for (int64_t p = 0; p < prefix; ++p) {
    const int64_t start = w ? w[p / per_batch] : 0;
    for (int64_t i = 0; i < seq_len; ++i) {
      int64_t pos = start + i;
      if (circular) pos %= max_len;
      std::memcpy(dst + static_cast<size_t>(p * max_len + pos) * inner,
                  src + static_cast<size_t>(p * seq_len + i) * inner, inner);
    }
  }
}

}  // namespace
}  // namespace cpu

void registerTensorScatterKernels(KernelRegistry& r) {
  r.add({"", "TensorScatter", 24, 1000, cpu::runTensorScatter});
}

}  // namespace fusectl::kernels
