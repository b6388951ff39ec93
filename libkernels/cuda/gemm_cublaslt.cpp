// MatMul, Gemm and the fused FusedGemm and FusedMatMul (domain "fusectl") on the device, through
// cuBLASLt. Shapes, attributes and errors are cpu/gemm.cpp's.
//
// Our tensors are row-major and cuBLASLt is column-major. A row-major Y[M,N] is the
// column-major Y^T, so every product is issued as Y^T = op(B)^T op(A)^T: cuBLASLt's A is our B,
// its B our A, its m our N and its n our M. Its bias epilogue adds one value per row of its D,
// which is one per column of our Y: Gemm's [N] C and FusedMatMul's bias.
//
// The epilogue contract (epilogue.h) is left to cuBLASLt where it computes exactly that: a
// per-column bias (BIAS), a residual passed as its C with beta 1, Relu. Its GELU is the tanh
// approximation, not the contract's erf Gelu, so Gelu, the other activations, a per-row or
// scalar C and a residual that cannot be its C (C is taken by Gemm's full [M,N] C) are applied
// afterwards by one applyEpilogue launch.
//
// Each node keeps the cuBLASLt descriptors and the algorithm chosen for a shape in its state,
// so a run with shapes seen before asks the heuristic nothing.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_common.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// The most alignment promised to cuBLASLt (it assumes 256 unless told less). The executor's
// buffers are 64-byte aligned; promising no more than that keeps one plan per shape wherever a
// buffer lands (from 64 on the choice is not expected to change: vector loads and TMA need 16).
constexpr uintptr_t kMaxAlignment = 64;
// Enough for the shapes of one node, even with dynamic dims; past it the cache starts over
// rather than grow without bound.
constexpr size_t kMaxPlansPerNode = 64;

[[noreturn]] void throwLt(cublasStatus_t status, const std::string& what) {
  const char* name = cublasLtGetStatusName(status);
  throw Error(ErrorKind::Internal, "cuBLASLt " + what + ": " + (name ? name : "unknown status") +
                                       " (" + std::to_string(static_cast<int>(status)) + ")");
}

void checkLt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throwLt(status, what);
}

// Never destroyed: kernels may run until exit, after static destructors would have freed it.
// A magic static is initialised once even when threads race for it (and retried if it threw).
cublasLtHandle_t ltHandle() {
  static const cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    checkLt(cublasLtCreate(&h), "handle creation");
    return h;
  }();
  return handle;
}

size_t elementBytes(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? 2 : 4; }
cudaDataType_t cudaType(DType t) {
  switch (t) {
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// The largest power of two (capped at kMaxAlignment) dividing every address and stride OR-ed
// into `bits`.
uint32_t alignmentOf(uintptr_t bits) {
  if (bits == 0) return static_cast<uint32_t>(kMaxAlignment);
  const uintptr_t lowest = bits & (~bits + 1);
  return static_cast<uint32_t>(std::min(lowest, kMaxAlignment));
}

uintptr_t addressBits(const void* p) { return reinterpret_cast<uintptr_t>(p); }

[[noreturn]] void unsupported(const KernelContext& ctx, const std::string& message) {
  throw Error(ErrorKind::Unsupported,
              "node '" + ctx.node().label() + "' (" + ctx.node().opType() + "): " + message);
}

void requireFloatType(const KernelContext& ctx, const HostTensor& a) {
  if (!cudaFloatType(a.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(a.dtype())));
  }
}

// cuBLASLt reads every operand as one element type; the CPU kernels convert each on its own.
void requireDType(const KernelContext& ctx, const HostTensor* t, DType dtype, const char* what) {
  if (t && t->dtype() != dtype) {
    ctx.fail(std::string(what) + " has element type " + std::string(dtypeName(t->dtype())) +
             ", A has " + std::string(dtypeName(dtype)));
  }
}

void zeroFill(void* p, size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(p, 0, bytes, stream()), "memset");
  countLaunches(1);
}

// ---- cuBLASLt calls ----

// `batch` row-major products Y_t[M,N] (leading dim N, consecutive) = alpha * op(A_t) op(B_t)
// + beta * C_t, then cuBLASLt's `epilogue`.
struct GemmProblem {
  DType dtype = DType::Float;
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;  // row-major leading dims of A and B as stored
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0;  // elements from one batch's matrix to the next; 0 shares it
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // [N] of Y's dtype, for a BIAS epilogue
  float alpha = 1.f;
  float beta = 0.f;  // scales C; a call without C runs with beta 0
};

// One cublasLtMatmul of a problem. C has Y's layout; null: not read.
struct GemmCall {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* y = nullptr;
};

// The descriptors of one shape and the algorithm the heuristic chose for them.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr;  // our B
  cublasLtMatrixLayout_t lt_b = nullptr;  // our A
  cublasLtMatrixLayout_t lt_d = nullptr;  // Y, and C
  cublasLtMatmulAlgo_t algo{};

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (lt_d) cublasLtMatrixLayoutDestroy(lt_d);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct PreferenceOwner {
  cublasLtMatmulPreference_t pref = nullptr;
  PreferenceOwner() { checkLt(cublasLtMatmulPreferenceCreate(&pref), "preference creation"); }
  PreferenceOwner(const PreferenceOwner&) = delete;
  PreferenceOwner& operator=(const PreferenceOwner&) = delete;
  ~PreferenceOwner() { cublasLtMatmulPreferenceDestroy(pref); }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, T value) {
    checkLt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value),
            "preference attribute");
  }
};

template <typename T>
void setDescAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, T value) {
  checkLt(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value), "matmul attribute");
}

template <typename T>
void setLayoutAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                        T value) {
  checkLt(cublasLtMatrixLayoutSetAttribute(layout, attr, &value, sizeof value),
          "layout attribute");
}

bool hasBias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS;
}

// What an algorithm depends on: the problem's shape and the operands' alignments (cuBLASLt
// excludes algorithms that need more alignment than it is promised).
struct Alignments {
  uint32_t a = 0, b = 0, c = 0, d = 0, bias = 0;
};
using PlanKey = std::array<int64_t, 17>;

PlanKey planKey(const GemmProblem& p, const Alignments& al) {
  return {static_cast<int64_t>(p.dtype), p.M, p.N, p.K, p.trans_a, p.trans_b, p.lda, p.ldb,
          p.batch, p.stride_a, p.stride_b, static_cast<int64_t>(p.epilogue), al.a, al.b, al.c,
          al.d, al.bias};
}

cublasLtMatrixLayout_t makeLayout(DType dtype, int64_t rows, int64_t cols, int64_t ld,
                                  int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  checkLt(cublasLtMatrixLayoutCreate(&layout, cudaType(dtype), static_cast<uint64_t>(rows),
                                     static_cast<uint64_t>(cols), ld),
          "layout creation");
  if (batch > 1) {
    try {
      setLayoutAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
      setLayoutAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
    } catch (...) {
      cublasLtMatrixLayoutDestroy(layout);
      throw;
    }
  }
  return layout;
}

std::unique_ptr<LtPlan> buildPlan(const GemmProblem& p, const Alignments& al) {
  auto plan = std::make_unique<LtPlan>();
  // COMPUTE_32F, not 32F_FAST_TF32: float32 results are compared with the CPU's to 1e-7. For
  // float16 and bfloat16 it also keeps the sums in float32 (the CPU's FloatView does), rounding
  // only D; the scale type stays CUDA_R_32F, so alpha and beta are floats for every dtype.
  checkLt(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "matmul descriptor creation");
  setDescAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  setDescAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  setDescAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
  if (hasBias(p.epilogue)) {
    // The bias has Y's dtype (requireDType), which is also cuBLASLt's default for 16F and 16BF
    // D; said explicitly so that the descriptor does not depend on that default.
    setDescAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                     static_cast<int32_t>(cudaType(p.dtype)));
    // The heuristic reads the pointer's alignment.
    setDescAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  }
  // Row-major stored [r, c] with leading dim ld is column-major [c, r]; the op makes it what
  // Y^T = op(B)^T op(A)^T needs: [N, K] from B, [K, M] from A.
  plan->lt_a = makeLayout(p.dtype, p.trans_b ? p.K : p.N, p.trans_b ? p.N : p.K, p.ldb, p.batch,
                          p.stride_b);
  plan->lt_b = makeLayout(p.dtype, p.trans_a ? p.M : p.K, p.trans_a ? p.K : p.M, p.lda, p.batch,
                          p.stride_a);
  plan->lt_d = makeLayout(p.dtype, p.N, p.M, p.N, p.batch, p.M * p.N);

  PreferenceOwner pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al.b);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al.a);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al.c);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al.d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  checkLt(cublasLtMatmulAlgoGetHeuristic(ltHandle(), plan->desc, plan->lt_a, plan->lt_b,
                                         plan->lt_d, plan->lt_d, pref.pref, 1, &result, &found),
          "algorithm heuristic");
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    throwLt(found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state,
            "found no algorithm for " + std::to_string(p.M) + " x " + std::to_string(p.N) +
                " x " + std::to_string(p.K) + " (batch " + std::to_string(p.batch) + ")");
  }
  plan->algo = result.algo;
  return plan;
}

class GemmState final : public KernelState {
 public:
  LtPlan& plan(const GemmProblem& p, const Alignments& al) {
    const PlanKey key = planKey(p, al);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    // Work queued with a dropped plan is unaffected: cuBLASLt reads descriptors when it
    // queues a call, not when the call runs.
    if (plans_.size() >= kMaxPlansPerNode) plans_.clear();
    return *plans_.emplace(key, buildPlan(p, al)).first->second;
  }

 private:
  std::map<PlanKey, std::unique_ptr<LtPlan>> plans_;
};

GemmState& gemmState(KernelContext& ctx) {
  if (auto* state = dynamic_cast<GemmState*>(ctx.state())) return *state;
  auto state = std::make_unique<GemmState>();
  GemmState& ref = *state;
  ctx.setState(std::move(state));
  return ref;
}

// Queues one cublasLtMatmul per call, all of the same problem (one plan; the alignments are
// the worst over the calls).
void runGemms(KernelContext& ctx, GemmProblem p, const std::vector<GemmCall>& calls) {
  if (calls.empty()) return;
  const int64_t int32_max = INT32_MAX;
  if (p.M > int32_max || p.N > int32_max || p.K > int32_max || p.batch > int32_max) {
    unsupported(ctx, "a product of " + std::to_string(p.M) + " x " + std::to_string(p.N) +
                         " x " + std::to_string(p.K) + " (batch " + std::to_string(p.batch) +
                         ") exceeds cuBLASLt's 32-bit dims");
  }
  const uintptr_t eb = elementBytes(p.dtype);
  const bool batched = p.batch > 1;
  uintptr_t a_bits = batched ? static_cast<uintptr_t>(p.stride_a) * eb : 0;
  uintptr_t b_bits = batched ? static_cast<uintptr_t>(p.stride_b) * eb : 0;
  uintptr_t d_bits = batched ? static_cast<uintptr_t>(p.M * p.N) * eb : 0;
  uintptr_t c_bits = d_bits;
  for (const GemmCall& call : calls) {
    a_bits |= addressBits(call.a);
    b_bits |= addressBits(call.b);
    c_bits |= addressBits(call.c ? call.c : call.y);
    d_bits |= addressBits(call.y);
  }
  Alignments al;
  al.a = alignmentOf(a_bits);
  al.b = alignmentOf(b_bits);
  al.c = alignmentOf(c_bits);
  al.d = alignmentOf(d_bits);
  al.bias = hasBias(p.epilogue) ? alignmentOf(addressBits(p.bias)) : 0;

  LtPlan& plan = gemmState(ctx).plan(p, al);
  if (hasBias(p.epilogue)) {
    setDescAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  }
  void* ws = workspace(kWorkspaceBytes);
  const float zero = 0.f;
  for (const GemmCall& call : calls) {
    checkLt(cublasLtMatmul(ltHandle(), plan.desc, &p.alpha, call.b, plan.lt_a, call.a, plan.lt_b,
                           call.c ? &p.beta : &zero, call.c ? call.c : call.y, plan.lt_d, call.y,
                           plan.lt_d, &plan.algo, ws, kWorkspaceBytes, stream()),
            "matmul");
    countLaunches(1);
  }
}

// ---- Gemm-shaped products with the epilogue contract ----

// Y = act(alpha * op(A) op(B) + beta * C + Z) over a 2-D Y[M,N].
struct GemmEpilogue {
  const HostTensor* c = nullptr;  // broadcast to [M,N] from its [cm, cn]
  int64_t cm = 1, cn = 1;
  float beta = 1.f;
  const HostTensor* z = nullptr;  // exactly [M,N]'s elements
  Activation activation = Activation::None;
  float act_alpha = 0.f, act_beta = 0.f;
};

// C as applyEpilogue's bias: per column, per row ([M,1]) or one value (a row period of 1).
DeviceEpilogue broadcastOf(const GemmEpilogue& e, int64_t N) {
  DeviceEpilogue d;
  d.bias = e.c->raw();
  d.bias_dtype = e.c->dtype();
  d.bias_per_row = !(e.cm == 1 && e.cn == N);
  d.bias_period = d.bias_per_row ? e.cm : 0;
  return d;
}

void runGemmWithEpilogue(KernelContext& ctx, GemmProblem p, const void* a, const void* b,
                         HostTensor& y, const GemmEpilogue& e) {
  const int64_t M = p.M, N = p.N;
  if (M * N == 0) return;
  void* yp = y.mutableRaw();
  if (p.K == 0) {
    // The product is zero, but beta * C + Z and the activation still apply: a K = 1 product of
    // zeros keeps the one path below (a [M,1] A and a [1,N] B share max(M,N) zeros, kept past
    // cuBLASLt's part of the workspace).
    const size_t zero_bytes = static_cast<size_t>(std::max(M, N)) * elementBytes(p.dtype);
    void* zeros = static_cast<char*>(workspace(kWorkspaceBytes + zero_bytes)) + kWorkspaceBytes;
    zeroFill(zeros, zero_bytes);
    p.K = 1;
    p.trans_a = p.trans_b = false;
    p.lda = 1;
    p.ldb = N;
    a = b = zeros;
  }
  GemmCall call{a, b, nullptr, yp};
  DeviceEpilogue after;
  if (e.c && e.beta != 0.f) {
    const bool per_column = e.cm == 1 && e.cn == N;
    if (per_column && e.beta == 1.f) {
      p.epilogue = CUBLASLT_EPILOGUE_BIAS;
      p.bias = e.c->raw();
    } else if (e.c->numel() == M * N) {  // C has Y's layout
      call.c = e.c->raw();
      p.beta = e.beta;
    } else if (e.beta == 1.f) {
      after = broadcastOf(e, N);
    } else {
      // Broadcast C into Y first, so that the product scales it as its C, in place.
      zeroFill(yp, static_cast<size_t>(M * N) * elementBytes(p.dtype));
      applyEpilogue(yp, p.dtype, M, N, broadcastOf(e, N));
      call.c = yp;
      p.beta = e.beta;
    }
  }
  if (e.z) {
    if (call.c) {
      after.residual = e.z->raw();
    } else {
      call.c = e.z->raw();
      p.beta = 1.f;
    }
  }
  if (e.activation == Activation::Relu && after.empty()) {
    p.epilogue = p.epilogue == CUBLASLT_EPILOGUE_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                      : CUBLASLT_EPILOGUE_RELU;
  } else if (e.activation != Activation::None) {
    after.activation = e.activation;
    after.alpha = e.act_alpha;
    after.beta = e.act_beta;
  }
  runGemms(ctx, p, {call});
  if (!after.empty()) applyEpilogue(yp, p.dtype, M, N, after);
}

// The activation a fused node names, with its parameters' defaults filled in.
void readActivation(const KernelContext& ctx, GemmEpilogue& e) {
  Epilogue host;
  readNodeActivation(ctx, host);
  e.activation = host.activation;
  e.act_alpha = host.alpha;
  e.act_beta = host.beta;
}

void runGemm(KernelContext& ctx, bool fused) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  requireFloatType(ctx, a);
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
  GemmEpilogue e;
  e.c = operands.bias;
  const bool has_c = e.c != nullptr;
  if (e.c && (e.c->numel() == 0 && M * N != 0)) e.c = nullptr;
  if (e.c) {
    if (e.c->rank() > 2) ctx.fail("C must have rank <= 2");
    if (e.c->rank() == 2) e.cm = e.c->dim(0);
    if (e.c->rank() >= 1) e.cn = e.c->dim(e.c->rank() - 1);
    if ((e.cm != 1 && e.cm != M) || (e.cn != 1 && e.cn != N)) {
      ctx.fail("C is not broadcastable to [M, N]");
    }
  }
  e.beta = beta;
  e.z = operands.residual;
  if (e.z && (e.z->numel() != M * N)) ctx.fail("residual Z must have shape [M, N]");
  requireDType(ctx, &b, a.dtype(), "B");
  requireDType(ctx, e.c, a.dtype(), "C");
  requireDType(ctx, e.z, a.dtype(), "residual Z");

  HostTensor& y = ctx.allocateOutput(0, a.dtype(), {M, N});
  if (fused) {
    readActivation(ctx, e);
    checkFusedSpelling(ctx, "FusedGemm", has_c, e.z != nullptr, e.activation);
  }
  GemmProblem p;
  p.dtype = a.dtype();
  p.M = M;
  p.N = N;
  p.K = K;
  p.trans_a = ta;
  p.trans_b = tb;
  p.lda = a.dim(1);
  p.ldb = b.dim(1);
  p.alpha = alpha;
  runGemmWithEpilogue(ctx, p, a.raw(), b.raw(), y, e);
}

// FusedMatMul: Y = act(MatMul(A, B) + C + Z) with a 2-D B, as one [prod(A.dims[:-1]), K] x
// [K, N] product (A's leading dims are rows of one tall matrix).
void runFusedMatMul(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  requireFloatType(ctx, a);
  if (a.rank() < 2) ctx.fail("A must have rank >= 2, it has rank " + std::to_string(a.rank()));
  if (b.rank() != 2) ctx.fail("B must be 2-D, it has rank " + std::to_string(b.rank()));
  const int64_t K = a.dims().back(), N = b.dim(1);
  if (b.dim(0) != K) {
    ctx.fail("inner dimensions differ: A gives K=" + std::to_string(K) + ", B gives K=" +
             std::to_string(b.dim(0)));
  }
  int64_t M = 1;
  for (size_t i = 0; i + 1 < a.rank(); ++i) M *= a.dim(i);
  std::vector<int64_t> out_dims = a.dims();
  out_dims.back() = N;

  const FusedOperands operands = fusedOperands(ctx);
  GemmEpilogue e;
  e.c = operands.bias;
  e.cn = N;
  e.z = operands.residual;
  if (e.c && e.c->numel() != N) {
    ctx.fail("bias C must have N=" + std::to_string(N) +
             " elements (one per output column), it has " + std::to_string(e.c->numel()));
  }
  if (e.z && e.z->dims() != out_dims) ctx.fail("residual Z must have exactly the shape of Y");
  readActivation(ctx, e);
  checkFusedSpelling(ctx, "FusedMatMul", e.c != nullptr, e.z != nullptr, e.activation);
  requireDType(ctx, &b, a.dtype(), "B");
  requireDType(ctx, e.c, a.dtype(), "bias C");
  requireDType(ctx, e.z, a.dtype(), "residual Z");

  HostTensor& y = ctx.allocateOutput(0, a.dtype(), out_dims);
  GemmProblem p;
  p.dtype = a.dtype();
  p.M = M;
  p.N = N;
  p.K = K;
  p.lda = K;
  p.ldb = N;
  runGemmWithEpilogue(ctx, p, a.raw(), b.raw(), y, e);
}

// ---- MatMul: numpy batch broadcasting ----

struct MatMulPlan {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> batch;  // the broadcast batch dims
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
  auto a_dim = [&](size_t i) { return i + ab >= rb ? ad[i + ab - rb] : int64_t{1}; };
  auto b_dim = [&](size_t i) { return i + bb >= rb ? bd[i + bb - rb] : int64_t{1}; };
  p.batch.resize(rb);
  for (size_t i = 0; i < rb; ++i) {
    const int64_t x = a_dim(i), y = b_dim(i);
    if (x != y && x != 1 && y != 1) ctx.fail("batch dimensions are not broadcastable");
    p.batch[i] = x == 1 ? y : x;
  }
  // Strides (in matrices) of each operand over the broadcast batch dims; 0 where broadcast.
  std::vector<int64_t> sa(rb, 0), sb(rb, 0);
  for (size_t i = rb, ma = 1, mb = 1; i-- > 0;) {
    const int64_t x = a_dim(i), y = b_dim(i);
    sa[i] = x == 1 ? 0 : static_cast<int64_t>(ma);
    sb[i] = y == 1 ? 0 : static_cast<int64_t>(mb);
    ma *= static_cast<size_t>(x);
    mb *= static_cast<size_t>(y);
  }
  int64_t count = 1;
  for (int64_t d : p.batch) count *= d;
  p.a_off.resize(static_cast<size_t>(count));
  p.b_off.resize(static_cast<size_t>(count));
  std::vector<int64_t> idx(rb, 0);
  p.b_shared = true;
  p.a_contiguous_batches = true;
  for (int64_t t = 0; t < count; ++t) {
    int64_t oa = 0, ob = 0;
    for (size_t i = 0; i < rb; ++i) {
      oa += idx[i] * sa[i];
      ob += idx[i] * sb[i];
    }
    p.a_off[static_cast<size_t>(t)] = oa * p.M * p.K;
    p.b_off[static_cast<size_t>(t)] = ob * p.K * p.N;
    if (ob != 0) p.b_shared = false;
    if (oa != t) p.a_contiguous_batches = false;
    for (size_t i = rb; i-- > 0;) {
      if (++idx[i] < p.batch[i]) break;
      idx[i] = 0;
    }
  }
  p.out_dims = p.batch;
  if (!a_vec) p.out_dims.push_back(p.M);
  if (!b_vec) p.out_dims.push_back(p.N);
  return p;
}

// Whether `offsets`, cut into blocks of `block` batches, step by one stride within every block
// (the same stride in all), and which.
bool stepsEvenly(const std::vector<int64_t>& offsets, int64_t block, int64_t& stride) {
  stride = offsets[1] - offsets[0];
  if (stride < 0) return false;
  for (size_t t = 0; t < offsets.size(); ++t) {
    const size_t first = t - t % static_cast<size_t>(block);
    if (offsets[t] != offsets[first] + static_cast<int64_t>(t - first) * stride) return false;
  }
  return true;
}

void runMatMul(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  if (a.dtype() != b.dtype()) ctx.fail("A and B must have the same element type");
  const MatMulPlan plan = planMatMul(ctx, a.dims(), b.dims());
  HostTensor& y = ctx.allocateOutput(0, a.dtype(), plan.out_dims);
  requireFloatType(ctx, a);
  const int64_t batches = static_cast<int64_t>(plan.a_off.size());
  const int64_t M = plan.M, N = plan.N, K = plan.K;
  if (batches == 0 || M * N == 0) return;
  const size_t eb = elementBytes(a.dtype());
  if (K == 0) {
    zeroFill(y.mutableRaw(), static_cast<size_t>(batches * M * N) * eb);
    return;
  }
  GemmProblem p;
  p.dtype = a.dtype();
  p.M = M;
  p.N = N;
  p.K = K;
  p.lda = K;
  p.ldb = N;
  if (plan.b_shared && plan.a_contiguous_batches) {  // one tall product: [batches*M, K] x [K, N]
    p.M = batches * M;
    runGemms(ctx, p, {{a.raw(), b.raw(), nullptr, y.mutableRaw()}});
    return;
  }
  // The longest run of trailing batch dims over which both operands step by one stride each
  // (0 for one broadcast there) is one strided-batched call; the dims before it are a loop.
  int64_t block = 1, stride_a = 0, stride_b = 0;
  for (size_t first = 0; first < plan.batch.size(); ++first) {
    int64_t candidate = 1;
    for (size_t i = first; i < plan.batch.size(); ++i) candidate *= plan.batch[i];
    if (candidate <= 1) break;
    if (stepsEvenly(plan.a_off, candidate, stride_a) &&
        stepsEvenly(plan.b_off, candidate, stride_b)) {
      block = candidate;
      break;
    }
  }
  if (block > 1) {
    p.batch = block;
    p.stride_a = stride_a;
    p.stride_b = stride_b;
  }
  const char* ap = static_cast<const char*>(a.raw());
  const char* bp = static_cast<const char*>(b.raw());
  char* yp = static_cast<char*>(y.mutableRaw());
  std::vector<GemmCall> calls;
  calls.reserve(static_cast<size_t>(batches / block));
  for (int64_t t = 0; t < batches; t += block) {
    const size_t i = static_cast<size_t>(t);
    calls.push_back({ap + static_cast<size_t>(plan.a_off[i]) * eb,
                     bp + static_cast<size_t>(plan.b_off[i]) * eb, nullptr,
                     yp + static_cast<size_t>(t * M * N) * eb});
  }
  runGemms(ctx, p, calls);
}


// cuBLASLt takes one element type for every operand, where the CPU kernels convert each input
// on its own: a node declaring inputs of mixed types runs there instead of failing here.
bool declaresOneDType(const Node& node) {
  const DType dtype = kernelDType(node);
  for (const Value* v : node.inputs()) {
    if (v && v->dtype() != DType::Undefined && v->dtype() != dtype) return false;
  }
  return true;
}

void addGemmKernel(KernelRegistry& r, const std::string& domain, const std::string& op,
                   KernelFn fn) {
  addCudaKernel(r, domain, op, 1, 1000, std::move(fn),
                kCudaFloatTypes, 0, declaresOneDType);
}

}  // namespace

void registerGemmKernels(KernelRegistry& r) {
  addGemmKernel(r, "", "MatMul", runMatMul);
  addGemmKernel(r, "", "Gemm", [](KernelContext& c) { runGemm(c, false); });
  // Every spelling FusedGemm[_NoBias][_Add][_<activation>] (fused_ops.h), as on the CPU.
  forEachFusedSpelling("FusedGemm", [&r](const std::string& name) {
    addGemmKernel(r, "fusectl", name, [](KernelContext& c) { runGemm(c, true); });
  });
  forEachFusedSpelling("FusedMatMul", [&r](const std::string& name) {
    addGemmKernel(r, "fusectl", name, runFusedMatMul);
  });
}

}  // namespace fusectl::kernels::cuda
