// The standard RotaryEmbedding (opset 23): rotates the first rotary_embedding_dim values of each
// head by the angles of its token's position. For pair k (the halves x[k], x[k + R/2], or the
// neighbours x[2k], x[2k + 1] when interleaved) with c = cos_cache[pos][k], s = sin_cache[pos][k]:
//   y1 = c * x1 - s * x2,  y2 = s * x1 + c * x2
// and the values past rotary_embedding_dim are copied. X is [B, H, S, D] or [B, S, H * D] (with
// num_heads); the caches are [max_position + 1, R/2] indexed by position_ids [B, S], or
// [B, S, R/2] when there are no position ids. Half, bfloat16 and double go through float32.
#include <cstring>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void runRotaryEmbedding(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& cos_cache = ctx.requireInput(1);
  const HostTensor& sin_cache = ctx.requireInput(2);
  const HostTensor* position_ids = ctx.input(3);
  for (const HostTensor* t : {&x, &cos_cache, &sin_cache}) {
    if (!isFloatComputeType(t->dtype()))
      ctx.fail("unsupported element type " + std::string(dtypeName(t->dtype())));
  }
  const bool four_d = x.rank() == 4;
  if (!four_d && x.rank() != 3) ctx.fail("X must have rank 3 or 4, it is " + formatDims(x.dims()));
  const int64_t B = x.dim(0);
  int64_t H, S, D;
  if (four_d) {
    H = x.dim(1), S = x.dim(2), D = x.dim(3);
  } else {
    H = ctx.attrInt("num_heads", 0);
    S = x.dim(1);
    if (H <= 0 || x.dim(2) % H != 0)
      ctx.fail("a 3D X needs num_heads dividing its hidden size " + std::to_string(x.dim(2)));
    D = x.dim(2) / H;
  }
  int64_t R = ctx.attrInt("rotary_embedding_dim", 0);
  if (R == 0) R = D;
  if (R < 0 || R > D || R % 2 != 0)
    ctx.fail("rotary_embedding_dim " + std::to_string(R) + " must be even and at most the head size " +
             std::to_string(D));
  const int64_t half = R / 2;
  const bool interleaved = ctx.attrInt("interleaved", 0) != 0;
  if (cos_cache.dims() != sin_cache.dims()) ctx.fail("cos_cache and sin_cache differ in shape");
  const std::vector<int64_t>& cd = cos_cache.dims();
  int64_t max_pos = 0;
  std::vector<int64_t> positions;
  if (position_ids) {
    if (cd.size() != 2 || cd[1] != half)
      ctx.fail("with position_ids the caches must be [max_position + 1, " + std::to_string(half) +
               "], they are " + formatDims(cd));
    if (position_ids->numel() != B * S ||
        (position_ids->dtype() != DType::Int64 && position_ids->dtype() != DType::Int32))
      ctx.fail("position_ids must be int64 [" + std::to_string(B) + "," + std::to_string(S) + "]");
    max_pos = cd[0];
    positions.resize(static_cast<size_t>(B * S));
    for (int64_t i = 0; i < B * S; ++i) {
      const int64_t p = position_ids->dtype() == DType::Int64 ? position_ids->data<int64_t>()[i]
                                                              : position_ids->data<int32_t>()[i];
      if (p < 0 || p >= max_pos)
        ctx.fail("position id " + std::to_string(p) + " is outside the caches' " +
                 std::to_string(max_pos) + " rows");
      positions[static_cast<size_t>(i)] = p;
    }
  } else if (cd.size() != 3 || cd[0] != B || cd[1] != S || cd[2] != half) {
    ctx.fail("without position_ids the caches must be [" + std::to_string(B) + "," +
             std::to_string(S) + "," + std::to_string(half) + "], they are " + formatDims(cd));
  }

  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatView xf(x), cf(cos_cache), sf(sin_cache);
  FloatSink ys(y);
  parallelFor(B * S, ctx.numThreads(), 64, [&](int64_t first, int64_t last) {
    for (int64_t bs = first; bs < last; ++bs) {
      const int64_t b = bs / S, s = bs % S;
      const int64_t row = position_ids ? positions[static_cast<size_t>(bs)] : bs;
      const float* c = cf.data() + row * half;
      const float* sn = sf.data() + row * half;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = four_d ? ((b * H + h) * S + s) * D : ((b * S + s) * H + h) * D;
        const float* xi = xf.data() + off;
        float* yo = ys.data() + off;
        if (interleaved) {
          for (int64_t k = 0; k < half; ++k) {
            const float x1 = xi[2 * k], x2 = xi[2 * k + 1];
            yo[2 * k] = c[k] * x1 - sn[k] * x2;
            yo[2 * k + 1] = sn[k] * x1 + c[k] * x2;
          }
        } else {
          for (int64_t k = 0; k < half; ++k) {
            const float x1 = xi[k], x2 = xi[k + half];
            yo[k] = c[k] * x1 - sn[k] * x2;
            yo[k + half] = sn[k] * x1 + c[k] * x2;
          }
        }
        if (D > R) std::memcpy(yo + R, xi + R, static_cast<size_t>(D - R) * sizeof(float));
      }
    }
  });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerStdRotaryKernels(KernelRegistry& r) {
  r.add({"", "RotaryEmbedding", 23, 1000, cpu::runRotaryEmbedding});
}

}  // namespace fusectl::kernels
