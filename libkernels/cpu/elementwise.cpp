// Elementwise CPU kernels: unary math and activations, broadcasting binary arithmetic,
// comparisons and logic, variadic Max/Min/Sum/Mean, Where, Clip, Cast, Identity and Dropout.
//
// Every op is a scalar function plugged into one of a few loop templates (unary, binary with
// broadcasting, variadic fold); the loops come from broadcast.h and vectorize. The float32
// activations and transcendentals (Relu, Sigmoid, Tanh, Exp, Erf, Gelu...) run instead the
// hand-vectorised loops of vec_kernels.h: the compiler cannot vectorise std::exp and friends,
// which left them 20-100x below memory bandwidth. float16/bfloat16
// inputs are computed in float32 (dtype_dispatch.h). Integer Div truncates toward zero (ONNX's
// reference casts numpy's true division back to the integer type); integer division by zero
// yields 0 instead of trapping. Integer Mod with fmod=0 takes the divisor's sign, as Python does.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "broadcast.h"
#include "cast_narrow.h"
#include "channels_last.h"
#include "compute_common.h"
#include "dtype_dispatch.h"
#include "fusectl/graph/clip_bounds.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/kernel.h"
#include "scalar_ops.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;
using scalar::maxOp;
using scalar::minOp;
using scalar::softplus;
using scalar::wrapAdd;
using scalar::wrapMul;
using scalar::wrapNeg;
using scalar::wrapSub;

// ---------------------------------------------------------------------------------------------
// Loop templates

// y = f(x), same dtype. f is generic over the element type; float32 (and the float16/bfloat16
// staged as float32) runs `fast` instead when given: the same function, vectorised.
struct VecUnary {
  vec::Unary op;
  float alpha = 0, beta = 0;
};

template <unsigned Set, typename F>
void unaryOp(KernelContext& ctx, F f, std::optional<VecUnary> fast = std::nullopt) {
  const HostTensor& x0 = ctx.requireInput(0);
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  StagedOutput out(ctx, 0, x0.dtype(), x0.dims(), StagedOutput::Place::OverInputs);
  dispatch<Set>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    T* dst = out.compute().template mutableData<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (fast) {
        cpu::parallelFor(x->numel(), ctx.numThreads(), kParallelGrain,
                         [&](int64_t b, int64_t e) {
                           vec::unary(fast->op, src + b, dst + b, e - b, fast->alpha, fast->beta);
                         });
        return;
      }
    }
    cpu::parallelFor(x->numel(), ctx.numThreads(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = static_cast<T>(f(src[i]));
    });
  });
  out.finish();
}

// y = f(x) with a bool result (IsNaN, IsInf).
template <unsigned Set, typename F>
void unaryPredicate(KernelContext& ctx, F f) {
  const HostTensor& x0 = ctx.requireInput(0);
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  HostTensor& out = ctx.allocateOutput(0, DType::Bool, x0.dims());
  dispatch<Set>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    bool* dst = out.mutableData<bool>();
    for (int64_t i = 0, n = x->numel(); i < n; ++i) dst[i] = f(src[i]);
  });
}

void requireSameDtype(const KernelContext& ctx, const HostTensor& a, const HostTensor& b) {
  if (a.dtype() != b.dtype())
    ctx.fail(fmt::format("inputs have different dtypes ({} and {})", dtypeName(a.dtype()),
                         dtypeName(b.dtype())));
}

// applyBinary for float Add, Sub, Mul and Div: each broadcast row through vec::binary, at the
// CPU's vector width (applyBinary's loops compile for the baseline ISA, and its in-place case
// keeps GCC from vectorising them at all: EfficientNet-B0's squeeze-and-excitation Muls on its
// 112x112 and 56x56 planes ran as scalar loops). IEEE arithmetic: the same bits.
void applyFloatBinary(const BroadcastPlan<2>& p, const float* a, const float* b, float* o,
                      vec::Binary op, int threads) {
  parallelRows<2>(p, threads, [&](int64_t oo, const std::array<int64_t, 2>& off, int64_t n,
                                  const std::array<int64_t, 2>& st) {
    const float* pa = a + off[0];
    const float* pb = b + off[1];
    vec::binary(op, st[0] ? pa : nullptr, *pa, st[1] ? pb : nullptr, *pb, o + oo, n);
  });
}

// applyFloatBinary for float16/bfloat16 tensors: each broadcast row converted a block at a time
// into float32, through vec::binary, and rounded back, which is what staging both inputs and
// the output whole computes, bit for bit (each value rounded once, after the float32
// operation), without the three float32 copies of the tensors (IS-Net's Adds of two
// [1, 64, 512, 512] halves spent most of their time allocating and faulting in those). The
// output may be one of the inputs (allocateOutputOverInputs): a block is read before it is
// written.
void applyHalfBinary(const BroadcastPlan<2>& p, DType t, const uint16_t* a, const uint16_t* b,
                     uint16_t* o, vec::Binary op, int threads) {
  parallelRows<2>(p, threads, [&](int64_t oo, const std::array<int64_t, 2>& off, int64_t n,
                                  const std::array<int64_t, 2>& st) {
    constexpr int64_t kBlock = 1024;
    float fa[kBlock], fb[kBlock], fo[kBlock];
    const uint16_t* pa = a + off[0];
    const uint16_t* pb = b + off[1];
    const float sa = halfBitsToFloat(t, *pa), sb = halfBitsToFloat(t, *pb);
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      if (st[0]) cpu::toFloat(t, pa + i, fa, m);
      if (st[1]) cpu::toFloat(t, pb + i, fb, m);
      vec::binary(op, st[0] ? fa : nullptr, sa, st[1] ? fb : nullptr, sb, fo, m);
      cpu::fromFloat(fo, t, o + oo + i, m);
    }
  });
}

// applyBinary, or applyFloatBinary where the inputs and output are float and `vector_op` is f
// as vec::binary computes it.
template <typename T, typename O, typename F>
void applyBinaryOf(const BroadcastPlan<2>& p, const T* a, const T* b, O* o, F& f,
                   std::optional<vec::Binary> vector_op, int threads) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<O, float>) {
    if (vector_op) {
      applyFloatBinary(p, a, b, o, *vector_op, threads);
      return;
    }
  }
  applyBinary(p, a, b, o, f, threads);
}

// c = f(a, b) with multidirectional broadcasting; the result has the inputs' dtype, or bool;
// `vector_op` as in applyBinaryOf.
template <unsigned Set, bool BoolOut, typename F>
void binaryOn(KernelContext& ctx, const HostTensor& a0, const HostTensor& b0, F f,
              std::optional<vec::Binary> vector_op = std::nullopt) {
  requireSameDtype(ctx, a0, b0);
  const std::vector<int64_t> dims = broadcastDims(ctx, {&a0.dims(), &b0.dims()});
  if (!BoolOut && vector_op && isHalf(a0.dtype())) {
    HostTensor& out = ctx.allocateOutputOverInputs(0, a0.dtype(), dims);
    applyHalfBinary(planBroadcast<2>(dims, {&a0.dims(), &b0.dims()}), a0.dtype(),
                    a0.data<uint16_t>(), b0.data<uint16_t>(), out.mutableData<uint16_t>(),
                    *vector_op, ctx.numThreads());
    return;
  }
  HostTensor ha, hb;
  const HostTensor* a = stageIn(&a0, ha);
  const HostTensor* b = stageIn(&b0, hb);
  StagedOutput out(ctx, 0, BoolOut ? DType::Bool : a0.dtype(), dims,
                   StagedOutput::Place::OverInputs);
  const auto plan = planBroadcast<2>(dims, {&a0.dims(), &b0.dims()});
  dispatch<Set>(ctx, a->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using O = std::conditional_t<BoolOut, bool, T>;
    applyBinaryOf(plan, a->data<T>(), b->data<T>(), out.compute().template mutableData<O>(), f,
                  vector_op, ctx.numThreads());
  });
  out.finish();
}

// Opsets 1-6 broadcast only with broadcast=1, and then align B with A starting at `axis`
// (trailing when absent): B viewed with trailing 1s gets the same result from numpy rules.
bool legacyAlignmentApplies(const KernelContext& ctx) {
  return ctx.opset() < 7 && ctx.attrInt("broadcast", 0) != 0 && ctx.node().hasAttr("axis");
}

HostTensor legacyAligned(const KernelContext& ctx, const HostTensor& a, const HostTensor& b) {
  if (!legacyAlignmentApplies(ctx)) return b;
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), static_cast<int64_t>(a.rank()));
  const int64_t trailing = static_cast<int64_t>(a.rank()) - axis - static_cast<int64_t>(b.rank());
  if (trailing < 0)
    ctx.fail(fmt::format("B {} does not fit in A {} from axis {}", formatDims(b.dims()),
                         formatDims(a.dims()), axis));
  std::vector<int64_t> dims = b.dims();
  dims.insert(dims.end(), static_cast<size_t>(trailing), 1);
  return b.reshaped(std::move(dims));
}

template <unsigned Set, bool BoolOut, typename F>
void binaryOp(KernelContext& ctx, F f, std::optional<vec::Binary> vector_op = std::nullopt) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  // B itself, not a copy, where no legacy alignment reshapes it: a copy would share B's
  // buffer, and a shared buffer is never written over (KernelContext::overwriteInput).
  if (legacyAlignmentApplies(ctx)) {
    binaryOn<Set, BoolOut>(ctx, a, legacyAligned(ctx, a, b), f, vector_op);
    return;
  }
  binaryOn<Set, BoolOut>(ctx, a, b, f, vector_op);
}

// Max/Min/Sum/Mean: a left fold of f over any number of broadcast inputs; `vector_op` as in
// applyBinaryOf.
template <unsigned Set, typename F>
void variadicOp(KernelContext& ctx, F f, bool mean, std::optional<vec::Binary> vector_op) {
  std::vector<const HostTensor*> ins;
  std::vector<const std::vector<int64_t>*> shapes;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const HostTensor& t = ctx.requireInput(i);
    if (!ins.empty()) requireSameDtype(ctx, *ins[0], t);
    ins.push_back(&t);
    shapes.push_back(&t.dims());
  }
  if (ins.empty()) ctx.fail("expects at least one input");
  const std::vector<int64_t> dims = broadcastDims(ctx, shapes);
  std::vector<HostTensor> holders(ins.size());
  std::vector<const HostTensor*> staged(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) staged[i] = stageIn(ins[i], holders[i]);
  StagedOutput out(ctx, 0, ins[0]->dtype(), dims);
  dispatch<Set>(ctx, staged[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.compute().template mutableData<T>();
    if (ins.size() == 1) {
      const auto plan = planBroadcast<2>(dims, {shapes[0], shapes[0]});
      applyBinary(plan, staged[0]->data<T>(), staged[0]->data<T>(), o,
                  [](T x, T) { return x; });
    } else {
      applyBinaryOf(planBroadcast<2>(dims, {shapes[0], shapes[1]}), staged[0]->data<T>(),
                    staged[1]->data<T>(), o, f, vector_op, ctx.numThreads());
      for (size_t i = 2; i < ins.size(); ++i)
        applyBinaryOf(planBroadcast<2>(dims, {&dims, shapes[i]}), static_cast<const T*>(o),
                      staged[i]->data<T>(), o, f, vector_op, ctx.numThreads());
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (mean) {
        const T scale = T(1) / static_cast<T>(ins.size());
        const int64_t n = out.compute().numel();
        if constexpr (std::is_same_v<T, float>) {
          vec::binary(vec::Binary::Mul, o, 0.f, nullptr, scale, o, n);
        } else {
          for (int64_t i = 0; i < n; ++i) o[i] *= scale;
        }
      }
    }
  });
  out.finish();
}

// ---------------------------------------------------------------------------------------------
// Scalar functions

template <typename T>
inline T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <typename T>
inline T intDiv(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return static_cast<T>(0u - static_cast<std::make_unsigned_t<T>>(a));
    }
    return static_cast<T>(a / b);
  } else {
    return a / b;
  }
}

template <typename T>
inline T modOp(T a, T b, bool fmod) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return 0;
      T r = static_cast<T>(a % b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(a % b);
    }
  } else {
    T r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

template <typename T>
inline T intPow(T base, int64_t e) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>) {
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    }
    return T(0);
  }
  T r = 1, b = base;  // wraps on overflow like numpy
  while (e) {
    if (e & 1) r = wrapMul(r, b);
    b = wrapMul(b, b);
    e >>= 1;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Kernels with their own input handling

// Pow(X: T, Y: T1): the exponent is converted to the base's compute type first.
void powKernel(KernelContext& ctx) {
  const HostTensor& a0 = ctx.requireInput(0);
  const HostTensor b0 = legacyAligned(ctx, a0, ctx.requireInput(1));
  const std::vector<int64_t> dims = broadcastDims(ctx, {&a0.dims(), &b0.dims()});
  const auto plan = planBroadcast<2>(dims, {&a0.dims(), &b0.dims()});
  HostTensor ha;
  const HostTensor* a = stageIn(&a0, ha);
  StagedOutput out(ctx, 0, a0.dtype(), dims, StagedOutput::Place::OverInputs);
  auto exponentAs = [&](DType t, HostTensor& holder) -> const HostTensor* {
    if (b0.dtype() == t) return &b0;
    holder = HostTensor(t, b0.dims());
    convertTensor(ctx, b0, holder);
    return &holder;
  };
  dispatch<kNumeric>(ctx, a->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.compute().template mutableData<T>();
    HostTensor hb;
    if constexpr (std::is_floating_point_v<T>) {
      const HostTensor* b = exponentAs(a->dtype(), hb);
      // x^2 (an unfused LayerNorm's variance, an RMSNorm's mean square) as x * x: the correctly
      // rounded square, where libm's pow is only within an ulp of it, at a fraction of the cost
      // (std::pow took 19 of a BERT-base export's 145 ms, 25 calls on 98K floats).
      if (b->numel() == 1 && b->data<T>()[0] == T(2)) {
        const T* x = a->data<T>();
        cpu::parallelFor(a->numel(), ctx.numThreads(), kParallelGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) o[i] = x[i] * x[i];
        });
        return;  // from the dtype lambda; out.finish() below
      }
      applyBinary(plan, a->data<T>(), b->data<T>(), o, [](T x, T y) { return std::pow(x, y); },
                  ctx.numThreads());
    } else if (dtypeIsFloat(b0.dtype())) {
      const HostTensor* b = exponentAs(DType::Double, hb);
      applyBinary(plan, a->data<T>(), b->data<double>(), o, [](T x, double y) {
        const double r = std::pow(static_cast<double>(x), y);
        // A finite power beyond int64 (a mutated exponent reaches it) converts as Cast would.
        return std::isfinite(r) ? floatToIntegral<T>(r) : T(0);
      });
    } else {
      const HostTensor* b = exponentAs(DType::Int64, hb);
      applyBinary(plan, a->data<T>(), b->data<int64_t>(), o,
                  [](T x, int64_t y) { return intPow(x, y); });
    }
  });
  out.finish();
}

// Clip: bounds are attributes before opset 11 and optional scalar inputs from 11 on.
void clipKernel(KernelContext& ctx) {
  const HostTensor& x0 = ctx.requireInput(0);
  HostTensor hx, hlo, hhi;
  const HostTensor* x = stageIn(&x0, hx);
  const HostTensor* lo_t = ctx.opset() >= 11 ? stageIn(ctx.input(1), hlo) : nullptr;
  const HostTensor* hi_t = ctx.opset() >= 11 ? stageIn(ctx.input(2), hhi) : nullptr;
  for (const HostTensor* t : {lo_t, hi_t}) {
    if (t && t->numel() != 1) ctx.fail("min and max must be scalars");
    if (t && t->dtype() != x->dtype()) ctx.fail("min/max dtype differs from the input's");
  }
  StagedOutput out(ctx, 0, x0.dtype(), x0.dims(), StagedOutput::Place::OverInputs);
  dispatch<kNumeric>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if constexpr (std::is_floating_point_v<T>) {
      // The element type's limits (x0's: a float16 input computes as float here), or Clip-6's
      // attributes: fusectl/graph/clip_bounds.h.
      const auto [start_lo, start_hi] =
          clipBoundsBeforeInputs(ctx.node(), x0.dtype(), ctx.opset() < 11);
      lo = static_cast<T>(start_lo);
      hi = static_cast<T>(start_hi);
    }
    if (lo_t) lo = lo_t->data<T>()[0];
    if (hi_t) hi = hi_t->data<T>()[0];
    const T* src = x->data<T>();
    T* dst = out.compute().template mutableData<T>();
    for (int64_t i = 0, n = x->numel(); i < n; ++i) {
      T v = src[i] < lo ? lo : src[i];
      dst[i] = v > hi ? hi : v;
    }
  });
  out.finish();
}

void whereKernel(KernelContext& ctx) {
  const HostTensor& c = ctx.requireInput(0);
  const HostTensor& x = ctx.requireInput(1);
  const HostTensor& y = ctx.requireInput(2);
  if (c.dtype() != DType::Bool) ctx.fail("condition must be bool");
  requireSameDtype(ctx, x, y);
  const std::vector<int64_t> dims = broadcastDims(ctx, {&c.dims(), &x.dims(), &y.dims()});
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  const auto plan = planBroadcast<3>(dims, {&c.dims(), &x.dims(), &y.dims()});
  // A select moves elements, so only their size matters.
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const bool* pc = c.data<bool>();
    const U* px = x.data<U>();
    const U* py = y.data<U>();
    U* po = out.mutableData<U>();
    parallelRows<3>(plan, ctx.numThreads(), [&](int64_t oo, const std::array<int64_t, 3>& off,
                                                int64_t n, const std::array<int64_t, 3>& st) {
      const bool* cr = pc + off[0];
      const U* xr = px + off[1];
      const U* yr = py + off[2];
      U* orow = po + oo;
      if (st[0] && st[1] && st[2]) {
        for (int64_t i = 0; i < n; ++i) orow[i] = cr[i] ? xr[i] : yr[i];
      } else {
        for (int64_t i = 0; i < n; ++i) orow[i] = cr[i * st[0]] ? xr[i * st[1]] : yr[i * st[2]];
      }
    });
  });
}

DType castTarget(const KernelContext& ctx) {
  const Attribute* a = ctx.node().attr("to");
  if (!a) ctx.fail("missing attribute 'to'");
  if (a->kind == AttrKind::String) {  // Cast-1 spells the type: "FLOAT"
    std::string name = a->s;
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (auto t = dtypeFromName(name)) return *t;
    ctx.fail(fmt::format("unknown Cast target '{}'", a->s));
  }
  if (a->kind != AttrKind::Int || !dtypeIsKnown(static_cast<int32_t>(a->i)))
    ctx.fail("attribute 'to' is not a known dtype");
  return static_cast<DType>(a->i);
}

void castTo(KernelContext& ctx, DType to) {
  const HostTensor& x = ctx.requireInput(0);
  if (to == x.dtype()) {
    ctx.setOutput(0, x.reshaped(x.dims()));
    return;
  }
  for (DType t : {x.dtype(), to}) {
    if (t == DType::String || t == DType::Complex64 || t == DType::Complex128 ||
        !dtypeIsKnown(static_cast<int32_t>(t)))
      throw Error(ErrorKind::Unsupported,
                  fmt::format("node '{}' ({}): Cast from {} to {} is not supported",
                              ctx.node().label(), ctx.node().opType(), dtypeName(x.dtype()),
                              dtypeName(to)));
  }
  HostTensor& out = ctx.allocateOutput(0, to, x.dims());
  if (dtypeIsNarrow(x.dtype()) || dtypeIsNarrow(to)) {
    // saturate (opset 19+) only concerns float8/float4 targets; it defaults to true.
    cpu::castNarrow(ctx, x, out, ctx.attrInt("saturate", 1) != 0, cpu::e8m0Rounding(ctx));
    return;
  }
  convertTensor(ctx, x, out);
}

// Training-mode Dropout (opset 12+, training_mode true, ratio > 0): keeps x / (1 - ratio) where
// a uniform draw is >= ratio. The draws are numpy's legacy RandomState(seed).uniform() (MT19937
// seeded like init_genrand, 53-bit doubles), so a node with a `seed` reproduces the ONNX
// reference exactly; without one the seed is random, as the spec allows.
void trainingDropout(KernelContext& ctx, const HostTensor& x0, double ratio) {
  if (!(ratio >= 0 && ratio < 1)) ctx.fail(fmt::format("ratio {} is not in [0, 1)", ratio));
  const Attribute* seed_attr = ctx.node().attr("seed");
  std::mt19937 gen(seed_attr && seed_attr->kind == AttrKind::Int
                       ? static_cast<uint32_t>(seed_attr->i)
                       : std::random_device{}());
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  StagedOutput out(ctx, 0, x0.dtype(), x0.dims());
  HostTensor keep(DType::Bool, x0.dims());
  bool* k = keep.mutableData<bool>();
  const double scale = 1.0 / (1.0 - ratio);
  dispatch<kFloats>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    T* dst = out.compute().template mutableData<T>();
    for (int64_t i = 0, n = x->numel(); i < n; ++i) {
      const uint32_t a = gen() >> 5, b = gen() >> 6;
      const double u = (a * 67108864.0 + b) / 9007199254740992.0;
      k[i] = u >= ratio;
      dst[i] = k[i] ? static_cast<T>(src[i] * static_cast<T>(scale)) : T(0);
    }
  });
  out.finish();
  if (ctx.numOutputs() > 1 && ctx.outputWanted(1)) ctx.setOutput(1, keep);
}

void dropoutKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (ctx.opset() >= 12 && ctx.input(2) && readScalar(ctx, *ctx.input(2)) != 0) {
    const double ratio = ctx.input(1) ? readScalar(ctx, *ctx.input(1)) : 0.5;
    if (ratio != 0) return trainingDropout(ctx, x, ratio);
  }
  ctx.setOutput(0, x.reshaped(x.dims()));
  if (ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    // The mask is bool from opset 10; before that it has the input's dtype.
    const DType mt = ctx.opset() >= 10 ? DType::Bool : x.dtype();
    HostTensor& mask = ctx.allocateOutput(1, mt, x.dims());
    HostTensor ones(DType::Bool, x.dims());
    std::fill(ones.mutableData<bool>(), ones.mutableData<bool>() + x.numel(), true);
    convertTensor(ctx, ones, mask);
  }
}

// ---------------------------------------------------------------------------------------------
// Registration

// Mul of a channels-last [N][H][W][C] input (HostTensor::channelsLast) by a per-channel scale
// [N or 1, C, 1, 1], as channelScaleInput admits it: each pixel's C channels times the scale's,
// written channels-last where the executor asks for it, else as planes. False, touching
// nothing, when neither input is channels-last.
bool scaleChannelsLast(KernelContext& ctx) {
  const HostTensor* a = ctx.input(0);
  const HostTensor* b = ctx.input(1);
  if (!a || !b || !(a->channelsLast() || b->channelsLast())) return false;
  const HostTensor& x = a->channelsLast() ? *a : *b;
  const HostTensor& s = a->channelsLast() ? *b : *a;
  if (x.dtype() != DType::Float || s.dtype() != DType::Float || x.rank() != 4 || s.rank() != 4 ||
      s.dim(1) != x.dim(1) || s.dim(2) != 1 || s.dim(3) != 1 ||
      (s.dim(0) != 1 && s.dim(0) != x.dim(0))) {
    throwInternal("a channels-last input to a Mul that is no per-channel scale");
  }
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3);
  const bool y_channels_last = ctx.channelsLastWanted(0);
  // Channels-last in and out scales each element where it lies, so the output may take x's
  // buffer; a planar output transposes, so it may not.
  HostTensor* over_x =
      y_channels_last ? ctx.overwriteInput(a->channelsLast() ? 0 : 1, 0, DType::Float, x.dims())
                      : nullptr;
  HostTensor& y = over_x ? *over_x : ctx.allocateOutput(0, DType::Float, x.dims());
  const float* xs = x.data<float>();
  float* ys = y.mutableData<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* scale = s.data<float>() + (s.dim(0) == 1 ? 0 : n * C);
    cpu::scaleChannelRows(xs + n * P * C, scale, P, C, ys + n * P * C, y_channels_last ? 0 : P);
  }
  y.setChannelsLast(y_channels_last);
  return true;
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({"", op, 1, 1000, std::move(fn)});
}

template <typename F>
void addFloatUnary(KernelRegistry& r, const char* op, F f,
                   std::optional<VecUnary> fast = std::nullopt) {
  add(r, op, [f, fast](KernelContext& ctx) { unaryOp<kFloats>(ctx, f, fast); });
}

}  // namespace

void registerElementwiseKernels(KernelRegistry& r) {
  // Unary math, float types only.
  addFloatUnary(r, "Sqrt", [](auto x) { return std::sqrt(x); }, VecUnary{vec::Unary::Sqrt});
  addFloatUnary(r, "Reciprocal", [](auto x) { return decltype(x)(1) / x; },
                VecUnary{vec::Unary::Reciprocal});
  addFloatUnary(r, "Exp", [](auto x) { return std::exp(x); }, VecUnary{vec::Unary::Exp});
  addFloatUnary(r, "Log", [](auto x) { return std::log(x); });
  addFloatUnary(r, "Erf", [](auto x) { return std::erf(x); }, VecUnary{vec::Unary::Erf});
  addFloatUnary(r, "Tanh", [](auto x) { return std::tanh(x); }, VecUnary{vec::Unary::Tanh});
  addFloatUnary(r, "Sigmoid", [](auto x) { return sigmoid(x); },
                VecUnary{vec::Unary::Sigmoid});
  addFloatUnary(r, "Sin", [](auto x) { return std::sin(x); });
  addFloatUnary(r, "Cos", [](auto x) { return std::cos(x); });
  addFloatUnary(r, "Tan", [](auto x) { return std::tan(x); });
  addFloatUnary(r, "Asin", [](auto x) { return std::asin(x); });
  addFloatUnary(r, "Acos", [](auto x) { return std::acos(x); });
  addFloatUnary(r, "Atan", [](auto x) { return std::atan(x); });
  addFloatUnary(r, "Sinh", [](auto x) { return std::sinh(x); });
  addFloatUnary(r, "Cosh", [](auto x) { return std::cosh(x); });
  addFloatUnary(r, "Asinh", [](auto x) { return std::asinh(x); });
  addFloatUnary(r, "Acosh", [](auto x) { return std::acosh(x); });
  addFloatUnary(r, "Atanh", [](auto x) { return std::atanh(x); });
  addFloatUnary(r, "Floor", [](auto x) { return std::floor(x); });
  addFloatUnary(r, "Ceil", [](auto x) { return std::ceil(x); });
  addFloatUnary(r, "Round", [](auto x) { return std::nearbyint(x); });  // half to even
  addFloatUnary(r, "Softplus", [](auto x) { return softplus(x); });
  addFloatUnary(r, "Softsign", [](auto x) { return x / (decltype(x)(1) + std::abs(x)); },
                VecUnary{vec::Unary::Softsign});
  addFloatUnary(r, "Mish", [](auto x) { return x * std::tanh(softplus(x)); });

  // Unary ops over signed / all numeric types.
  add(r, "Neg", [](KernelContext& ctx) {
    unaryOp<kFloats | kSigned>(ctx, [](auto x) { return wrapNeg(x); });
  });
  add(r, "Abs", [](KernelContext& ctx) {
    unaryOp<kNumeric>(ctx, [](auto x) {
      if constexpr (std::is_unsigned_v<decltype(x)>) return x;
      else return x < 0 ? wrapNeg(x) : x;
    });
  });
  add(r, "Relu", [](KernelContext& ctx) {
    unaryOp<kFloats | kSigned>(ctx, [](auto x) { return x > 0 ? x : decltype(x)(0); },
                               VecUnary{vec::Unary::Relu});
  });
  add(r, "Sign", [](KernelContext& ctx) {
    unaryOp<kNumeric>(ctx, [](auto x) {
      using T = decltype(x);
      return x > T(0) ? T(1) : (x < T(0) ? static_cast<T>(-1) : T(0));
    });
  });
  add(r, "Not", [](KernelContext& ctx) { unaryOp<kBool>(ctx, [](bool x) { return !x; }); });
  add(r, "BitwiseNot", [](KernelContext& ctx) {
    unaryOp<kInts>(ctx, [](auto x) { return static_cast<decltype(x)>(~x); });
  });
  add(r, "IsNaN", [](KernelContext& ctx) {
    unaryPredicate<kFloats>(ctx, [](auto x) { return std::isnan(x); });
  });
  add(r, "IsInf", [](KernelContext& ctx) {
    const bool neg = ctx.attrInt("detect_negative", 1) != 0;
    const bool pos = ctx.attrInt("detect_positive", 1) != 0;
    unaryPredicate<kFloats>(ctx, [=](auto x) {
      return std::isinf(x) && ((x > 0 && pos) || (x < 0 && neg));
    });
  });

  // Activations with attributes.
  add(r, "LeakyRelu", [](KernelContext& ctx) {
    const float alpha = ctx.attrFloat("alpha", 0.01f);
    unaryOp<kFloats>(ctx, [=](auto x) { return x < 0 ? x * alpha : x; },
                     VecUnary{vec::Unary::LeakyRelu, alpha});
  });
  add(r, "Elu", [](KernelContext& ctx) {
    const float alpha = ctx.attrFloat("alpha", 1.0f);
    unaryOp<kFloats>(ctx, [=](auto x) { return x < 0 ? alpha * (std::exp(x) - 1) : x; },
                     VecUnary{vec::Unary::Elu, alpha});
  });
  add(r, "Celu", [](KernelContext& ctx) {
    const float alpha = ctx.attrFloat("alpha", 1.0f);
    unaryOp<kFloats>(ctx, [=](auto x) {
      using T = decltype(x);
      return std::max(T(0), x) + std::min(T(0), static_cast<T>(alpha * (std::exp(x / alpha) - 1)));
    });
  });
  add(r, "Selu", [](KernelContext& ctx) {
    const float alpha = ctx.attrFloat("alpha", 1.67326319217681884765625f);
    const float gamma = ctx.attrFloat("gamma", 1.05070102214813232421875f);
    unaryOp<kFloats>(ctx, [=](auto x) {
      return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha);
    }, VecUnary{vec::Unary::Selu, alpha, gamma});
  });
  add(r, "ThresholdedRelu", [](KernelContext& ctx) {
    const float alpha = ctx.attrFloat("alpha", 1.0f);
    unaryOp<kFloats>(ctx, [=](auto x) { return x > alpha ? x : decltype(x)(0); });
  });
  add(r, "HardSigmoid", [](KernelContext& ctx) {
    const float alpha = ctx.attrFloat("alpha", 0.2f);
    const float beta = ctx.attrFloat("beta", 0.5f);
    unaryOp<kFloats>(ctx, [=](auto x) {
      using T = decltype(x);
      return std::max(T(0), std::min(T(1), static_cast<T>(alpha * x + beta)));
    }, VecUnary{vec::Unary::HardSigmoid, alpha, beta});
  });
  add(r, "HardSwish", [](KernelContext& ctx) {
    unaryOp<kFloats>(ctx, [](auto x) {
      using T = decltype(x);
      return x * std::max(T(0), std::min(T(1), static_cast<T>(x / T(6) + T(0.5))));
    }, VecUnary{vec::Unary::HardSwish});
  });
  const auto exact_gelu = [](auto x) {
    using T = decltype(x);
    return T(0.5) * x * (T(1) + std::erf(x * static_cast<T>(0.7071067811865476)));
  };
  add(r, "Gelu", [exact_gelu](KernelContext& ctx) {
    const std::string approx = ctx.attrString("approximate", "none");
    if (approx == "tanh") {
      unaryOp<kFloats>(ctx, [](auto x) {
        using T = decltype(x);
        const T k = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
        return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
      }, VecUnary{vec::Unary::GeluTanh});
    } else if (approx == "none") {
      unaryOp<kFloats>(ctx, exact_gelu, VecUnary{vec::Unary::Gelu});
    } else {
      ctx.fail(fmt::format("unknown approximate '{}'", approx));
    }
  });
  // fusectl::Gelu (docs/ops.md): the exact Gelu, which fuse-gelu writes for the Erf spelling
  // in models older than opset 20.
  r.add({"fusectl", "Gelu", 1, 1000,
         [exact_gelu](KernelContext& ctx) {
           unaryOp<kFloats>(ctx, exact_gelu, VecUnary{vec::Unary::Gelu});
         }});
  add(r, "Shrink", [](KernelContext& ctx) {
    const float bias = ctx.attrFloat("bias", 0.0f);
    const float lambd = ctx.attrFloat("lambd", 0.5f);
    unaryOp<kNumeric>(ctx, [=](auto x) {
      using T = decltype(x);
      if (x < -lambd) return static_cast<T>(x + bias);
      if (x > lambd) return static_cast<T>(x - bias);
      return T(0);
    });
  });

  // Binary arithmetic.
  add(r, "Add", [](KernelContext& ctx) {
    binaryOp<kNumeric, false>(
        ctx, [](auto a, auto b) { return wrapAdd(a, b); }, vec::Binary::Add);
  });
  add(r, "Sub", [](KernelContext& ctx) {
    binaryOp<kNumeric, false>(
        ctx, [](auto a, auto b) { return wrapSub(a, b); }, vec::Binary::Sub);
  });
  KernelInfo mul{"", "Mul", 1, 1000, [](KernelContext& ctx) {
    if (scaleChannelsLast(ctx)) return;
    binaryOp<kNumeric, false>(
        ctx, [](auto a, auto b) { return wrapMul(a, b); }, vec::Binary::Mul);
  }};
  mul.reads_channels_last = cpu::mulReadsChannelsLast;
  mul.writes_channels_last = cpu::mulWritesChannelsLast;
  r.add(mul);
  add(r, "Div", [](KernelContext& ctx) {
    binaryOp<kNumeric, false>(ctx, [](auto a, auto b) { return intDiv(a, b); }, vec::Binary::Div);
  });
  add(r, "Mod", [](KernelContext& ctx) {
    const bool fmod = ctx.attrInt("fmod", 0) != 0;
    binaryOp<kNumeric, false>(ctx, [=](auto a, auto b) { return modOp(a, b, fmod); });
  });
  add(r, "Pow", powKernel);
  add(r, "PRelu", [](KernelContext& ctx) {
    const HostTensor& x = ctx.requireInput(0);
    HostTensor slope = ctx.requireInput(1);
    // Before opset 7 a 1-D slope of C values is per channel (axis 1), not numpy-broadcast.
    if (ctx.opset() < 7 && x.rank() >= 2 && slope.rank() == 1 && slope.dim(0) == x.dim(1) &&
        slope.dim(0) != 1) {
      std::vector<int64_t> dims(x.rank() - 1, 1);
      dims[0] = slope.dim(0);
      slope = slope.reshaped(std::move(dims));
    }
    binaryOn<kFloats | kInts, false>(ctx, x, slope, [](auto v, auto s) {
      return v < 0 ? static_cast<decltype(v)>(v * s) : v;
    });
  });
  add(r, "BitwiseAnd", [](KernelContext& ctx) {
    binaryOp<kInts, false>(ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a & b); });
  });
  add(r, "BitwiseOr", [](KernelContext& ctx) {
    binaryOp<kInts, false>(ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a | b); });
  });
  add(r, "BitwiseXor", [](KernelContext& ctx) {
    binaryOp<kInts, false>(ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a ^ b); });
  });
  add(r, "BitShift", [](KernelContext& ctx) {
    const std::string dir = ctx.attrString("direction", "");
    if (dir != "LEFT" && dir != "RIGHT") ctx.fail("direction must be LEFT or RIGHT");
    const bool left = dir == "LEFT";
    binaryOp<kUnsigned, false>(ctx, [=](auto a, auto b) {
      using T = decltype(a);
      if (b >= sizeof(T) * 8) return T(0);
      return static_cast<T>(left ? a << b : a >> b);
    });
  });

  // Comparisons and logic (bool results).
  add(r, "Equal", [](KernelContext& ctx) {
    binaryOp<kAll, true>(ctx, [](auto a, auto b) { return a == b; });
  });
  add(r, "Less", [](KernelContext& ctx) {
    binaryOp<kNumeric, true>(ctx, [](auto a, auto b) { return a < b; });
  });
  add(r, "Greater", [](KernelContext& ctx) {
    binaryOp<kNumeric, true>(ctx, [](auto a, auto b) { return a > b; });
  });
  add(r, "LessOrEqual", [](KernelContext& ctx) {
    binaryOp<kNumeric, true>(ctx, [](auto a, auto b) { return a <= b; });
  });
  add(r, "GreaterOrEqual", [](KernelContext& ctx) {
    binaryOp<kNumeric, true>(ctx, [](auto a, auto b) { return a >= b; });
  });
  add(r, "And", [](KernelContext& ctx) {
    binaryOp<kBool, true>(ctx, [](bool a, bool b) { return a && b; });
  });
  add(r, "Or", [](KernelContext& ctx) {
    binaryOp<kBool, true>(ctx, [](bool a, bool b) { return a || b; });
  });
  add(r, "Xor", [](KernelContext& ctx) {
    binaryOp<kBool, true>(ctx, [](bool a, bool b) { return a != b; });
  });

  // Variadic.
  add(r, "Max", [](KernelContext& ctx) {
    variadicOp<kNumeric>(ctx, [](auto a, auto b) { return maxOp(a, b); }, false,
                         vec::Binary::Max);
  });
  add(r, "Min", [](KernelContext& ctx) {
    variadicOp<kNumeric>(ctx, [](auto a, auto b) { return minOp(a, b); }, false,
                         vec::Binary::Min);
  });
  add(r, "Sum", [](KernelContext& ctx) {
    variadicOp<kNumeric>(ctx, [](auto a, auto b) { return wrapAdd(a, b); }, false,
                         vec::Binary::Add);
  });
  add(r, "Mean", [](KernelContext& ctx) {
    variadicOp<kFloats>(ctx, [](auto a, auto b) { return a + b; }, true, vec::Binary::Add);
  });

  add(r, "Where", whereKernel);
  add(r, "Clip", clipKernel);
  add(r, "Cast", [](KernelContext& ctx) { castTo(ctx, castTarget(ctx)); });
  add(r, "CastLike", [](KernelContext& ctx) { castTo(ctx, ctx.requireInput(1).dtype()); });
  add(r, "Identity", [](KernelContext& ctx) {
    const HostTensor& x = ctx.requireInput(0);
    ctx.setOutput(0, x.reshaped(x.dims()));
  });
  add(r, "Dropout", dropoutKernel);
}

}  // namespace fusectl::kernels
