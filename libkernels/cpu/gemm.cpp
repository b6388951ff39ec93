// Gemm, MatMul, MatMulInteger, QLinearMatMul and the fused FusedGemm and FusedMatMul (domain
// "fusectl").
//
// All float products run on the packed GEMM (gemm_micro.h); a constant B (an initializer) is
// packed once per session and kept in the node's state (gemm_packed_state.h). Gemm's C is
// applied either as the epilogue's per-column bias (a [N] or [1,N] C with beta 1, the common
// Linear layer) or by filling Y with beta*C and accumulating. MatMul broadcasts batch dims
// numpy-style; a batched A against a plain 2-D B is folded into one tall GEMM.
//
// FusedGemm (domain "fusectl", since_opset 1): Y = activation(alpha*A'*B' + beta*C + Z)
//   inputs:  A, B, C (optional, broadcast to [M,N] as in Gemm), Z (optional residual, [M,N])
//   attributes: Gemm's (alpha, beta, transA, transB), plus
//     activation        string: Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Silu,
//                       Gelu, Tanh; absent or "" means none
//     activation_params floats: Clip [min, max] (default -inf, +inf), LeakyRelu [alpha]
//                       (0.01), HardSigmoid [alpha, beta] (0.2, 0.5); others take none
//   Also registered under the portable spellings FusedGemm[_NoBias][_Add][_<activation>] that
//   exported models use (epilogue.h, docs/ops.md); those list their inputs without gaps.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute_common.h"
#include "fusectl/kernels/epilogue.h"
#include "gemm_micro.h"
#include "gemm_packed_state.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void runGemm(KernelContext& ctx, bool fused) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  if (!isFloatComputeType(a.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(a.dtype())));
  }
  if (a.rank() != 2 || b.rank() != 2) ctx.fail("A and B must be 2-D");
  const bool ta = ctx.attrInt("transA", 0) != 0, tb = ctx.attrInt("transB", 0) != 0;
  const float alpha = ctx.attrFloat("alpha", 1.f), beta = ctx.attrFloat("beta", 1.f);
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1), Kb = tb ? b.dim(1) : b.dim(0);
  if (K != Kb) {
    ctx.fail("inner dimensions differ: A gives K=" + std::to_string(K) + ", B gives K=" +
             std::to_string(Kb));
  }
  const FusedOperands operands = fused ? fusedOperands(ctx)
                                        : FusedOperands{ctx.input(2), nullptr};
  const HostTensor* c = operands.bias;
  const bool has_c = c != nullptr;
  if (c && (c->numel() == 0 && M * N != 0)) c = nullptr;
  int64_t cm = 1, cn = 1;  // C's broadcast dims
  if (c) {
    if (c->rank() > 2) ctx.fail("C must have rank <= 2");
    if (c->rank() == 2) cm = c->dim(0);
    if (c->rank() >= 1) cn = c->dim(c->rank() - 1);
    if ((cm != 1 && cm != M) || (cn != 1 && cn != N)) ctx.fail("C is not broadcastable to [M, N]");
  }
  const HostTensor* z = operands.residual;
  if (z && (z->numel() != M * N)) ctx.fail("residual Z must have shape [M, N]");
  if (fused) {
    requireSameDType(ctx, a, "A", &b, "B");
    requireSameDType(ctx, a, "A", c, "C");
    requireSameDType(ctx, a, "A", z, "Z");
  }

  HostTensor& y = ctx.allocateOutput(0, a.dtype(), {M, N});
  FloatView af(a), cf(c), zf(z);
  LazyFloatView bf(b);
  FloatSink ys(y);
  float* yp = ys.data();
  Epilogue ep;
  if (fused) {
    const Activation kind = readNodeActivation(ctx, ep);
    checkFusedSpelling(ctx, "FusedGemm", has_c, z != nullptr, kind);
  }
  if (z) {
    ep.residual = zf.data();
    ep.ld_residual = N;
  }
  bool accumulate = false;
  if (c && beta != 0.f) {
    if (cm == 1 && cn == N && beta == 1.f) {
      ep.bias = cf.data();  // per-column bias, added in the epilogue
    } else {
      for (int64_t i = 0; i < M; ++i) {
        const float* crow = cf.data() + (cm == 1 ? 0 : i * cn);
        float* yrow = yp + i * N;
        for (int64_t j = 0; j < N; ++j) yrow[j] = beta * crow[cn == 1 ? 0 : j];
      }
      accumulate = true;
    }
  }
  GemmParams p = gemmParams(M, N, K, af.data(), a.dim(1), ta, bf.inPlace(), b.dim(1), tb, yp, N);
  p.alpha = alpha;
  p.accumulate = accumulate;
  p.epilogue = &ep;
  bindPackedB(ctx, p, bf, tb);
  gemm(p, ctx.numThreads());
  ys.commit();
}

// ---- MatMul-shaped ops: numpy batch broadcasting ----

struct MatMulPlan {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> out_dims;
  std::vector<int64_t> a_off, b_off;  // element offsets of each batch's matrices
  bool b_shared = false;              // every batch uses the same B matrix
  bool a_contiguous_batches = false;  // A's batches are consecutive matrices (foldable into M)
};

MatMulPlan planMatMul(const KernelContext& ctx, std::vector<int64_t> ad, std::vector<int64_t> bd) {
  if (ad.empty() || bd.empty()) ctx.fail("MatMul operands must have rank >= 1");
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  MatMulPlan p;
  p.M = ad[ad.size() - 2];
  p.K = ad.back();
  p.N = bd.back();
  if (bd[bd.size() - 2] != p.K) {
    ctx.fail("inner dimensions differ: " + std::to_string(p.K) + " vs " +
             std::to_string(bd[bd.size() - 2]));
  }
  const size_t ab = ad.size() - 2, bb = bd.size() - 2, rb = std::max(ab, bb);
  std::vector<int64_t> batch(rb);
  for (size_t i = 0; i < rb; ++i) {
    const int64_t x = i + ab >= rb ? ad[i + ab - rb] : 1;
    const int64_t y = i + bb >= rb ? bd[i + bb - rb] : 1;
    if (x != y && x != 1 && y != 1) ctx.fail("batch dimensions are not broadcastable");
    batch[i] = x == 1 ? y : x;
  }
  // Strides (in matrices) of each operand over the broadcast batch dims; 0 where broadcast.
  std::vector<int64_t> sa(rb, 0), sb(rb, 0);
  for (int64_t i = static_cast<int64_t>(rb) - 1, ma = 1, mb = 1; i >= 0; --i) {
    const int64_t x = static_cast<size_t>(i) + ab >= rb ? ad[i + ab - rb] : 1;
    const int64_t y = static_cast<size_t>(i) + bb >= rb ? bd[i + bb - rb] : 1;
    sa[i] = x == 1 ? 0 : ma;
    sb[i] = y == 1 ? 0 : mb;
    ma *= x;
    mb *= y;
  }
  const int64_t count = product(batch);
  p.a_off.resize(count);
  p.b_off.resize(count);
  std::vector<int64_t> idx(rb, 0);
  p.b_shared = true;
  p.a_contiguous_batches = true;
  for (int64_t t = 0; t < count; ++t) {
    int64_t oa = 0, ob = 0;
    for (size_t i = 0; i < rb; ++i) {
      oa += idx[i] * sa[i];
      ob += idx[i] * sb[i];
    }
    p.a_off[t] = oa * p.M * p.K;
    p.b_off[t] = ob * p.K * p.N;
    if (ob != 0) p.b_shared = false;
    if (oa != t) p.a_contiguous_batches = false;
    for (int64_t i = static_cast<int64_t>(rb) - 1; i >= 0; --i) {
      if (++idx[i] < batch[i]) break;
      idx[i] = 0;
    }
  }
  p.out_dims = batch;
  if (!a_vec) p.out_dims.push_back(p.M);
  if (!b_vec) p.out_dims.push_back(p.N);
  return p;
}

template <typename T>
void matmulIntegral(const T* a, const T* b, T* y, const MatMulPlan& p) {
  const int64_t M = p.M, N = p.N, K = p.K;
  for (size_t t = 0; t < p.a_off.size(); ++t) {
    const T* at = a + p.a_off[t];
    const T* bt = b + p.b_off[t];
    T* yt = y + static_cast<int64_t>(t) * M * N;
    std::fill(yt, yt + M * N, T(0));
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t k = 0; k < K; ++k) {
        const T av = at[i * K + k];
        for (int64_t j = 0; j < N; ++j) yt[i * N + j] += av * bt[k * N + j];
      }
    }
  }
}

void runMatMul(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  if (a.dtype() != b.dtype()) ctx.fail("A and B must have the same element type");
  MatMulPlan p = planMatMul(ctx, a.dims(), b.dims());
  HostTensor& y = ctx.allocateOutput(0, a.dtype(), p.out_dims);
  const int64_t batches = static_cast<int64_t>(p.a_off.size());
  switch (a.dtype()) {
    case DType::Int32:
      matmulIntegral(a.data<int32_t>(), b.data<int32_t>(), y.mutableData<int32_t>(), p);
      return;
    case DType::Int64:
      matmulIntegral(a.data<int64_t>(), b.data<int64_t>(), y.mutableData<int64_t>(), p);
      return;
    case DType::UInt32:
      matmulIntegral(a.data<uint32_t>(), b.data<uint32_t>(), y.mutableData<uint32_t>(), p);
      return;
    case DType::UInt64:
      matmulIntegral(a.data<uint64_t>(), b.data<uint64_t>(), y.mutableData<uint64_t>(), p);
      return;
    default: break;
  }
  if (!isFloatComputeType(a.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(a.dtype())));
  }
  FloatView af(a);
  LazyFloatView bf(b);
  FloatSink ys(y);
  float* yp = ys.data();
  const int64_t M = p.M, N = p.N, K = p.K;
  if (batches == 0 || M * N == 0) {
    ys.commit();
    return;
  }
  // A weight matrix shared by every batch is packed once per session.
  const PackedWeights* packed =
      p.b_shared ? cachedPackedWeights(ctx, 1, 0, [&](PackedWeights& w) {
        w.parts.push_back(packGemmB(K, N, bf.data(), N, 1));
        if (!bf.inPlace()) w.parts.back().source = nullptr;  // that copy ends with this call
      })
                 : nullptr;
  const PackedMatrix* packed_b = packed ? &packed->parts[0] : nullptr;
  // A cached half weight is read from its packed panels only: no float32 copy per run.
  const float* bp = packed_b && !bf.inPlace() ? nullptr : bf.data();
  if (p.b_shared && p.a_contiguous_batches) {  // one tall GEMM: [batches*M, K] x [K, N]
    GemmParams g = gemmParams(batches * M, N, K, af.data(), K, false, bp, N, false, yp, N);
    g.packed_b = packed_b;
    gemm(g, ctx.numThreads());
  } else {
    // Many small products run one per thread; big ones use the GEMM's own threads.
    const bool per_batch_threads = batches >= ctx.numThreads() && 2.0 * M * N * K < 4e6;
    const int inner_threads = per_batch_threads ? 1 : ctx.numThreads();
    parallelFor(batches, per_batch_threads ? ctx.numThreads() : 1, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t t = b0; t < b1; ++t) {
        GemmParams g = gemmParams(M, N, K, af.data() + p.a_off[t], K, false,
                                  bp ? bp + p.b_off[t] : nullptr, N, false, yp + t * M * N, N);
        g.packed_b = packed_b;
        gemm(g, inner_threads);
      }
    });
  }
  ys.commit();
}

// FusedMatMul: Y = act(MatMul(A, B) + C + Z) with a 2-D B, as one [prod(A.dims[:-1]), K] x
// [K, N] GEMM (A's leading dims are rows of one tall matrix) whose epilogue adds the [N] bias
// and the residual and applies the activation to each tile in registers.
void runFusedMatMul(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  if (!isFloatComputeType(a.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(a.dtype())));
  }
  if (a.rank() < 2) ctx.fail("A must have rank >= 2, it has rank " + std::to_string(a.rank()));
  if (b.rank() != 2) ctx.fail("B must be 2-D, it has rank " + std::to_string(b.rank()));
  const int64_t K = a.dims().back(), N = b.dim(1);
  if (b.dim(0) != K) {
    ctx.fail("inner dimensions differ: A gives K=" + std::to_string(K) + ", B gives K=" +
             std::to_string(b.dim(0)));
  }
  const int64_t M = product(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 1));
  std::vector<int64_t> out_dims = a.dims();
  out_dims.back() = N;

  const FusedOperands operands = fusedOperands(ctx);
  const HostTensor* c = operands.bias;
  const HostTensor* z = operands.residual;
  if (c && c->numel() != N) {
    ctx.fail("bias C must have N=" + std::to_string(N) +
             " elements (one per output column), it has " + std::to_string(c->numel()));
  }
  if (z && z->dims() != out_dims) ctx.fail("residual Z must have exactly the shape of Y");
  requireSameDType(ctx, a, "A", &b, "B");
  requireSameDType(ctx, a, "A", c, "C");
  requireSameDType(ctx, a, "A", z, "Z");
  Epilogue ep;
  const Activation kind = readNodeActivation(ctx, ep);
  checkFusedSpelling(ctx, "FusedMatMul", c != nullptr, z != nullptr, kind);

  HostTensor& y = ctx.allocateOutput(0, a.dtype(), out_dims);
  FloatView af(a), cf(c), zf(z);
  LazyFloatView bf(b);
  FloatSink ys(y);
  if (M * N == 0) {
    ys.commit();
    return;
  }
  if (c) ep.bias = cf.data();
  if (z) {
    ep.residual = zf.data();
    ep.ld_residual = N;
  }
  GemmParams p = gemmParams(M, N, K, af.data(), K, false, bf.inPlace(), N, false, ys.data(), N);
  p.epilogue = &ep;
  bindPackedB(ctx, p, bf, 0);
  gemm(p, ctx.numThreads());
  ys.commit();
}

// ---- quantized products ----

int32_t int8At(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::UInt8 ? int32_t(t.data<uint8_t>()[i]) : int32_t(t.data<int8_t>()[i]);
}

// A minus its zero point, as int32. The zero point is a scalar, one value per row of A ([M], or
// [..., M, 1] matching A's batch), or for B (per_column) one per column ([N] or [..., 1, N]).
std::vector<int32_t> shiftOperand(const KernelContext& ctx, const HostTensor& t,
                                  const HostTensor* zp, int64_t rows, int64_t cols,
                                  bool per_column, const char* what) {
  const int64_t n = t.numel();
  std::vector<int32_t> out(static_cast<size_t>(n));
  const int64_t zn = zp ? zp->numel() : 0;
  if (zp && zp->dtype() != t.dtype()) ctx.fail(std::string(what) + " zero point type mismatch");
  const int64_t per_matrix = per_column ? cols : rows;
  if (zn > 1 && (per_matrix == 0 || zn % per_matrix != 0)) {
    ctx.fail(std::string(what) + " zero point must be a scalar or per-" +
             (per_column ? "column" : "row"));
  }
  for (int64_t i = 0; i < n; ++i) {
    int32_t z = 0;
    if (zn == 1) {
      z = int8At(*zp, 0);
    } else if (zn > 1) {
      const int64_t mat = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
      const int64_t j = (per_column ? c : r) + (zn > per_matrix ? mat * per_matrix : 0);
      z = int8At(*zp, j % zn);
    }
    out[static_cast<size_t>(i)] = int8At(t, i) - z;
  }
  return out;
}

// int32 batched product of shifted operands, written to acc (one matrix per batch).
void matmulS32(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int32_t* acc,
               const MatMulPlan& p, int threads) {
  for (size_t t = 0; t < p.a_off.size(); ++t) {
    gemmS32(p.M, p.N, p.K, a.data() + p.a_off[t], p.K, b.data() + p.b_off[t], p.N,
            acc + static_cast<int64_t>(t) * p.M * p.N, p.N, false, threads);
  }
}

void runMatMulInteger(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  checkInt8(ctx, a, "A");
  checkInt8(ctx, b, "B");
  MatMulPlan p = planMatMul(ctx, a.dims(), b.dims());
  std::vector<int32_t> as = shiftOperand(ctx, a, ctx.input(2), p.M, p.K, false, "a");
  std::vector<int32_t> bs = shiftOperand(ctx, b, ctx.input(3), p.K, p.N, true, "b");
  HostTensor& y = ctx.allocateOutput(0, DType::Int32, p.out_dims);
  matmulS32(as, bs, y.mutableData<int32_t>(), p, ctx.numThreads());
}

// Index into a scale/zero-point tensor that is a scalar, per-row ([M] or batch x M) or, for
// columns, per-column ([N] or batch x N).
int64_t paramIndex(int64_t numel, int64_t batch, int64_t i, int64_t extent) {
  if (numel <= 1) return 0;
  if (numel == extent) return i;
  return (batch * extent + i) % numel;
}

void runQLinearMatMul(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(3);
  checkInt8(ctx, a, "a");
  checkInt8(ctx, b, "b");
  FloatView as(ctx.requireInput(1)), bs(ctx.requireInput(4)), ys(ctx.requireInput(6));
  const HostTensor* azp = ctx.input(2);
  const HostTensor* bzp = ctx.input(5);
  const HostTensor* yzp = ctx.input(7);
  if (as.size() == 0 || bs.size() == 0 || ys.size() == 0)
    ctx.fail("a_scale, b_scale and y_scale must not be empty");
  MatMulPlan p = planMatMul(ctx, a.dims(), b.dims());
  std::vector<int32_t> ai = shiftOperand(ctx, a, azp, p.M, p.K, false, "a");
  std::vector<int32_t> bi = shiftOperand(ctx, b, bzp, p.K, p.N, true, "b");
  std::vector<int32_t> acc(static_cast<size_t>(product(p.out_dims)));
  matmulS32(ai, bi, acc.data(), p, ctx.numThreads());
  const DType ytype = yzp ? yzp->dtype() : a.dtype();
  if (ytype != DType::UInt8 && ytype != DType::Int8) ctx.fail("y must be uint8 or int8");
  HostTensor& y = ctx.allocateOutput(0, ytype, p.out_dims);
  const double lo = ytype == DType::UInt8 ? 0 : -128, hi = ytype == DType::UInt8 ? 255 : 127;
  const int64_t yzn = yzp ? yzp->numel() : 0;
  const int64_t a_batch_mats = std::max<int64_t>(1, a.numel() / std::max<int64_t>(1, p.M * p.K));
  const int64_t b_batch_mats = std::max<int64_t>(1, b.numel() / std::max<int64_t>(1, p.K * p.N));
  for (size_t t = 0; t < p.a_off.size(); ++t) {
    const int64_t abatch = p.a_off[t] / std::max<int64_t>(1, p.M * p.K) % a_batch_mats;
    const int64_t bbatch = p.b_off[t] / std::max<int64_t>(1, p.K * p.N) % b_batch_mats;
    for (int64_t i = 0; i < p.M; ++i) {
      const float sa = as[paramIndex(as.size(), abatch, i, p.M)];
      const float sy = ys[paramIndex(ys.size(), static_cast<int64_t>(t), i, p.M)];
      const int32_t zy = yzn ? int8At(*yzp, paramIndex(yzn, static_cast<int64_t>(t), i, p.M)) : 0;
      for (int64_t j = 0; j < p.N; ++j) {
        const float sb = bs[paramIndex(bs.size(), bbatch, j, p.N)];
        const double scale = sa * sb / sy;  // float32 multiplier, double product (as ONNX's ref)
        const int64_t o = (static_cast<int64_t>(t) * p.M + i) * p.N + j;
        const double v = saturateQuantized(std::nearbyint(acc[o] * scale) + zy, lo, hi);
        if (ytype == DType::UInt8) {
          y.mutableData<uint8_t>()[o] = static_cast<uint8_t>(v);
        } else {
          y.mutableData<int8_t>()[o] = static_cast<int8_t>(v);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpu

void registerGemmKernels(KernelRegistry& r) {
  r.add({"", "Gemm", 1, 1000, [](KernelContext& c) { cpu::runGemm(c, false); }});
  // FusedGemm and its portable spellings FusedGemm[_NoBias][_Add][_<activation>] (fused_ops.h).
  forEachFusedSpelling("FusedGemm", [&r](const std::string& name) {
    r.add({"fusectl", name, 1, 1000, [](KernelContext& c) { cpu::runGemm(c, true); }});
  });
  forEachFusedSpelling("FusedMatMul", [&r](const std::string& name) {
    r.add({"fusectl", name, 1, 1000, cpu::runFusedMatMul});
  });
  r.add({"", "MatMul", 1, 1000, cpu::runMatMul});
  r.add({"", "MatMulInteger", 10, 1000, cpu::runMatMulInteger});
  r.add({"", "QLinearMatMul", 10, 1000, cpu::runQLinearMatMul});
}

}  // namespace fusectl::kernels
