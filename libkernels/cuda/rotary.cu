// fusectl::RotaryEmbedding, InterleavedRotaryEmbedding, QKNormRotaryEmbedding and
// QKNormInterleavedRotaryEmbedding on the GPU: what cpu/rotary_fused.cpp computes, in one launch.
//
// A warp takes one row of D values (a head of one token), eight rows to a block: head rows are
// 64 or 128 values, too short to keep a block busy, and a warp reduces the QK-norm's sum of
// squares with shuffles alone. Each lane rotates the pairs (k, k + D/2), or (2k, 2k + 1) when
// interleaved, k = lane, lane + 32...: it reads both members, so X's row is read once (twice
// with the norm: the sum of squares, then the rotation, from L1) and Y's written once.
//
// The arithmetic is the CPU's, in float32: the norm x * (1 / sqrt(mean(x^2) + eps)) * scale
// (the sum of squares in float32 here, in double there: a relative difference near 1e-7), then
// x1 * cos - x2 * sin and x2 * cos + x1 * sin; float16 and bfloat16 are converted on load and
// rounded once on store, the normalised row never rounded to 16 bits.
//
// Cos and Sin broadcast into X as on the CPU (last dim D, the others 1 or X's). X's leading dims
// are merged where the tables step along them as along one dim, so [B, H, S, D] against [S, D]
// walks two dims and against [B, 1, S, D] three; more than kMaxLeading after merging is
// declined (`accepts`) when X's declared rank shows it, and Unsupported when only the run does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../cpu/compute_common.h"
#include "cuda_common.h"
#include "cuda_device_util.cuh"
#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {
namespace {

constexpr int kWarps = 8;  // rows per block
constexpr int kThreads = kWarps * 32;
constexpr int kMaxLeading = 8;

// X's row r -> the offset of its row in Cos and Sin.
struct TableIndex {
  int rank = 0;
  int64_t dims[kMaxLeading] = {};
  int64_t strides[kMaxLeading] = {};  // 0 where the table broadcasts
};

__device__ __forceinline__ int64_t tableOffset(const TableIndex& t, int64_t row) {
  int64_t offset = 0;
  for (int i = t.rank - 1; i >= 0; --i) {
    const int64_t q = row / t.dims[i];
    offset += (row - q * t.dims[i]) * t.strides[i];
    row = q;
  }
  return offset;
}

template <typename T>
__global__ void rotaryKernel(const T* __restrict__ x, const T* __restrict__ scale,
                             bool scale_scalar, const T* __restrict__ cos_t,
                             const T* __restrict__ sin_t, T* __restrict__ y, TableIndex table,
                             int64_t rows, int64_t d, float eps, bool qk_norm, bool interleaved) {
  const int lane = threadIdx.x & 31;
  const int64_t half = d / 2;
  // The row is the warp's, so the loop and the shuffles inside it are warp-uniform.
  for (int64_t row = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5); row < rows;
       row += int64_t{gridDim.x} * kWarps) {
    const T* in = x + row * d;
    T* out = y + row * d;
    const int64_t t = tableOffset(table, row);
    const T* c = cos_t + t;
    const T* s = sin_t + t;
    float inv = 1.f;
    if (qk_norm) {
      float q = 0.f;
      for (int64_t j = lane; j < d; j += 32) {
        const float v = toFloat(in[j]);
        q += v * v;
      }
      // sqrtf and the division are correctly rounded, as the CPU's; rsqrtf is not.
      inv = 1.f / sqrtf(warpSum(q) / static_cast<float>(d) + eps);
    }
    for (int64_t k = lane; k < half; k += 32) {
      const int64_t i1 = interleaved ? 2 * k : k;
      const int64_t i2 = interleaved ? 2 * k + 1 : k + half;
      float x1 = toFloat(in[i1]), x2 = toFloat(in[i2]);
      if (qk_norm) {
        x1 = x1 * inv * toFloat(scale[scale_scalar ? 0 : i1]);
        x2 = x2 * inv * toFloat(scale[scale_scalar ? 0 : i2]);
      }
      out[i1] = fromFloat<T>(x1 * toFloat(c[i1]) - x2 * toFloat(s[i1]));
      out[i2] = fromFloat<T>(x2 * toFloat(c[i2]) + x1 * toFloat(s[i2]));
    }
  }
}

[[noreturn]] void unsupported(const KernelContext& ctx, const std::string& what) {
  throw Error(ErrorKind::Unsupported, "node '" + ctx.node().label() + "' (" +
                                          ctx.node().opType() + "): " + what +
                                          " is not supported by the CUDA backend");
}

// The CPU's table strides (cpu::rotaryTableStrides: same checks, same messages), then adjacent
// leading dims merged where the outer one steps the table by the inner one's whole extent (both
// broadcast, or both walking the table contiguously); dims of extent 1 drop out.
TableIndex tableIndex(const KernelContext& ctx, const HostTensor& x, const HostTensor& table) {
  const size_t rank = x.rank();
  const std::vector<int64_t> strides = cpu::rotaryTableStrides(ctx, x, table, "Cos");
  std::vector<int64_t> dims, merged;  // outermost first
  for (size_t i = 0; i + 1 < rank; ++i) {
    const int64_t extent = x.dim(i);
    if (extent == 1) continue;
    if (!dims.empty() && merged.back() == strides[i] * extent) {
      dims.back() *= extent;
      merged.back() = strides[i];
      continue;
    }
    dims.push_back(extent);
    merged.push_back(strides[i]);
  }
  if (dims.size() > static_cast<size_t>(kMaxLeading)) {
    unsupported(ctx, "Cos " + formatDims(table.dims()) + " broadcast into X " + formatDims(x.dims()) +
                         " along more than " + std::to_string(kMaxLeading) + " distinct dims");
  }
  TableIndex index;
  index.rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    index.dims[i] = dims[i];
    index.strides[i] = merged[i];
  }
  return index;
}

void runRotary(KernelContext& ctx, bool qk_norm, bool interleaved) {
  const HostTensor& x = ctx.requireInput(0);
  if (!cudaFloatType(x.dtype())) {
    ctx.fail("X is " + std::string(dtypeName(x.dtype())) +
             "; the CUDA kernel takes float32, float16 or bfloat16");
  }
  if (x.rank() == 0) ctx.fail("X must have at least one dim");
  const int64_t d = x.dim(x.rank() - 1);
  if (d % 2 != 0) {
    ctx.fail("X's last dim " + std::to_string(d) + " is odd; rotate_half needs it even");
  }
  size_t next = 1;
  const HostTensor* scale = nullptr;
  float eps = 0.f;
  if (qk_norm) {
    if (!ctx.node().hasAttr("epsilon"))
      ctx.fail("needs 'epsilon' (its function body cannot default it)");
    eps = ctx.attrFloat("epsilon", 1e-5f);
    scale = &ctx.requireInput(next++);
    cpu::requireSameDType(ctx, x, "X", scale, "Scale");
    if (scale->numel() != d && scale->numel() != 1) {
      ctx.fail("Scale has " + std::to_string(scale->numel()) + " elements; X's last dim is " +
               std::to_string(d));
    }
  }
  const HostTensor& cos_t = ctx.requireInput(next);
  const HostTensor& sin_t = ctx.requireInput(next + 1);
  cpu::requireSameDType(ctx, x, "X", &cos_t, "Cos");
  cpu::requireSameDType(ctx, x, "X", &sin_t, "Sin");
  if (cos_t.dims() != sin_t.dims()) ctx.fail("Cos and Sin differ in shape");
  const TableIndex table = tableIndex(ctx, x, cos_t);

  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / d;
  const unsigned grid = gridFor(rows, kWarps);
  const bool scale_scalar = scale && scale->numel() == 1;
  withFloatType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rotaryKernel<<<grid, kThreads, 0, stream()>>>(
        x.data<T>(), scale ? scale->data<T>() : nullptr, scale_scalar, cos_t.data<T>(),
        sin_t.data<T>(), y.mutableData<T>(), table, rows, d, eps, qk_norm, interleaved);
  });
  launched(ctx.node().opType().c_str());
}

// X's declared rank, where known, must leave at most kMaxLeading leading dims before merging:
// then the run never exceeds them, whatever the tables' shape.
bool rotaryAccepts(const Node& n) {
  const Value* x = n.input(0);
  if (!x || !x->shape().hasRank()) return true;
  return x->shape().rank() <= static_cast<size_t>(kMaxLeading) + 1;
}

}  // namespace

void registerRotaryKernels(KernelRegistry& r) {
  const auto add = [&r](const char* op, bool qk_norm, bool interleaved) {
    addCudaKernel(r, "fusectl", op, 1, 1000,
                  [qk_norm, interleaved](KernelContext& ctx) {
                    runRotary(ctx, qk_norm, interleaved);
                  },
                  kCudaFloatTypes, 0, rotaryAccepts);
  };
  add("RotaryEmbedding", /*qk_norm=*/false, /*interleaved=*/false);
  add("InterleavedRotaryEmbedding", /*qk_norm=*/false, /*interleaved=*/true);
  add("QKNormRotaryEmbedding", /*qk_norm=*/true, /*interleaved=*/false);
  add("QKNormInterleavedRotaryEmbedding", /*qk_norm=*/true, /*interleaved=*/true);
}

}  // namespace fusectl::kernels::cuda
