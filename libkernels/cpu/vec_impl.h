// The bodies of the vec_kernels.h loops for one ISA. vec_kernels.cpp includes this file once per
// ISA, each time inside its own namespace, under its own `#pragma GCC target` and with
// FUSECTL_VEC_BYTES set to the vector width; hence no include guard.
//
// The code is written with GCC's generic vectors (vector_size), which the compiler lowers to
// the widest registers the region's target has, so the three ISAs share one source.
// A row's tail (n % W elements) goes through the same vector code on a partial vector, so
// every element of a row gets bit-identical arithmetic whatever its position.
//
// Approximations (constants from Cephes' single-precision library unless noted):
//   exp:  n = round(x log2 e), r = x - n ln2 (two-part ln2), exp(r) by a degree-6 polynomial,
//         times 2^n applied as two factors so that results down in the subnormals and up to
//         the overflow threshold come out right (max error about 1 ulp).
//   tanh: x + x^3 P(x^2) below |x| = 0.625, else 1 - 2 / (exp(2|x|) + 1) with x's sign.
//   erf:  x + x Q(x^2) below |x| = 0.9277, else 1 - exp(R(|x|)) with x's sign (N. Juffa's
//         minimax fits, about 1 ulp in float with FMA, a few without); R at min(|x|, 4), whose
//         exp needs neither vexp's clamps nor its two-factor scale.

constexpr int W = FUSECTL_VEC_BYTES / 4;
typedef float vf __attribute__((vector_size(FUSECTL_VEC_BYTES)));
typedef int32_t vi __attribute__((vector_size(FUSECTL_VEC_BYTES)));
typedef uint32_t vu __attribute__((vector_size(FUSECTL_VEC_BYTES)));
typedef float vf_unaligned __attribute__((vector_size(FUSECTL_VEC_BYTES), aligned(4), may_alias));

inline vf load(const float* p) { return *reinterpret_cast<const vf_unaligned*>(p); }
inline void store(float* p, vf v) { *reinterpret_cast<vf_unaligned*>(p) = v; }
inline vf splat(float x) { return vf{} + x; }
// A row's partial last vector, n < W elements (lanes past n are `fill`, and nothing past n is
// read or written). On x86 a masked load or store: the memcpy through a stack vector it
// replaced stalled on store forwarding and took a libc call, three of them per row in a
// softmax, which on rows of 197 (ViT's scores) cost a third of the row's time.
// GCC compiles vec_kernels.cpp's AVX-512 and AVX2 copies under `#pragma GCC target`, which
// clang (the sanitizer build) ignores: there the intrinsics would not compile, and the portable
// form below serves.
#if defined(FUSECTL_VEC_X86) && !defined(__clang__) && FUSECTL_VEC_BYTES == 64
inline __mmask16 firstLanes(int64_t n) {
  return n >= W ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}
inline vf loadPartial(const float* p, int64_t n, float fill) {
  return (vf)_mm512_mask_loadu_ps(_mm512_set1_ps(fill), firstLanes(n), p);
}
inline void storePartial(float* p, vf v, int64_t n) {
  _mm512_mask_storeu_ps(p, firstLanes(n), (__m512)v);
}
inline vf keepFirstLanes(vf v, int64_t n, float fill) {
  return (vf)_mm512_mask_blend_ps(firstLanes(n), _mm512_set1_ps(fill), (__m512)v);
}
#elif defined(FUSECTL_VEC_X86) && !defined(__clang__) && FUSECTL_VEC_BYTES == 32
inline __m256i firstLanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n, W))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vf loadPartial(const float* p, int64_t n, float fill) {
  const __m256i m = firstLanes(n);
  return (vf)_mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m),
                              _mm256_castsi256_ps(m));
}
inline void storePartial(float* p, vf v, int64_t n) {
  _mm256_maskstore_ps(p, firstLanes(n), (__m256)v);
}
inline vf keepFirstLanes(vf v, int64_t n, float fill) {
  return (vf)_mm256_blendv_ps(_mm256_set1_ps(fill), (__m256)v, _mm256_castsi256_ps(firstLanes(n)));
}
#else
inline vf loadPartial(const float* p, int64_t n, float fill) {
  vf v = splat(fill);
  std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
  return v;
}
inline void storePartial(float* p, vf v, int64_t n) {
  std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
}
inline vf keepFirstLanes(vf v, int64_t n, float fill) {
  for (int64_t j = n; j < W; ++j) v[j] = fill;
  return v;
}
#endif

inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
inline vf vabs(vf x) { return (vf)((vu)x & 0x7fffffffu); }
// Square root per lane, correctly rounded: the same bits as std::sqrt.
#if defined(FUSECTL_VEC_X86) && !defined(__clang__) && FUSECTL_VEC_BYTES == 64
// The zero-masked form: GCC 12's _mm512_sqrt_ps warns of its own undefined operand.
inline vf vsqrt(vf x) {
  return (vf)_mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), (__m512)x);
}
#elif defined(FUSECTL_VEC_X86) && !defined(__clang__) && FUSECTL_VEC_BYTES == 32
inline vf vsqrt(vf x) { return (vf)_mm256_sqrt_ps((__m256)x); }
#else
inline vf vsqrt(vf x) {
  for (int j = 0; j < W; ++j) x[j] = std::sqrt(x[j]);
  return x;
}
#endif
inline vf copySign(vf magnitude, vf sign) {
  return (vf)(((vu)magnitude & 0x7fffffffu) | ((vu)sign & 0x80000000u));
}
inline float hsum(vf v) {
  float s = 0;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}
inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < W; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// e^x = 2^n e^r with n = round(x log2 e) and r = x - n ln2 (two-part ln2), e^r by the degree-6
// polynomial; returns e^r and sets `n`. The callers differ only in how they clamp x and apply
// 2^n.
inline vf expReduced(vf x, vi& n_out) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const vf t = x * 1.44269504088896341f + magic;
  const vf n = t - magic;
  n_out = (vi)t - (vi)splat(magic);
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r + 1.0f;
}

inline vf vexp(vf x) {
  x = x > 88.8f ? splat(88.8f) : x;  // NaN compares false and passes through
  x = x < -104.0f ? splat(-104.0f) : x;
  vi ni;
  const vf y = expReduced(x, ni);
  // n is in [-150, 128]; each half stays a normal power of two.
  const vi n1 = ni >> 1;
  const vi n2 = ni - n1;
  const vf s1 = (vf)((vu)(n1 + 127) << 23);
  const vf s2 = (vf)((vu)(n2 + 127) << 23);
  return y * s1 * s2;
}

// vexp for arguments the caller keeps within [-87, 0] (erf's tail): no clamping, and 2^n is one
// normal power of two, so one multiply scales. A power-of-two scale is exact either way: the
// results are vexp's, bit for bit.
inline vf vexpNegativeNormal(vf x) {
  vi ni;
  const vf y = expReduced(x, ni);
  return y * (vf)((vu)(ni + 127) << 23);
}

// exp(d) for d = x - max, at most 0 (or NaN), as the softmaxes take it: vexp's value, bit for
// bit, from d = -87 up, and 0 below, where vexp's would be under 1.7e-38. Those results were
// made by a multiply that underflows, and an underflowing multiply runs about 3x slower here
// (a microcode assist): Attention's softmax over a [1, 1, 1, 128] padding mask of half zeros
// (-10000 added to half the scores) took 2.7x longer than over a mask of ones (BERT-base, 12
// layers, `perf record`). A probability under 1.7e-38 / (row sum >= 1) is lost either way
// once it meets the others in the product with V.
inline vf vexpOfShift(vf d) {
  const vf low = splat(-87.0f);
  const vf e = vexpNegativeNormal(d < low ? low : d);  // a NaN compares false and passes
  return d < low ? vf{} : e;
}

// exp of -|x| only, so that a large negative x gives e / (1 + e) down in the subnormals
// instead of 1 / (1 + inf).
inline vf vsigmoid(vf x) {
  const vf e = vexp(-vabs(x));
  const vf r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

inline vf vtanh(vf x) {
  const vf ax = vabs(x);
  const vf z = x * x;
  vf p = splat(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const vf small = x + x * z * p;
  const vf e = vexp(ax + ax);
  const vf large = copySign(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}

// The tail is evaluated at min(|x|, 4): erf(4) is 1 in float already (erfc(4) = 1.5e-8, under
// half an ulp of 1), so nothing changes, and the exponent r stays within [-17, -0.8], where
// vexpNegativeNormal needs no clamping. A NaN passes the min unchanged (the comparison is false).
inline vf verf(vf x) {
  const vf t = vabs(x);
  const vf s = x * x;
  vf q = splat(-5.96761703e-4f);
  q = q * s + 4.99119423e-3f;
  q = q * s - 2.67681349e-2f;
  q = q * s + 1.12819925e-1f;
  q = q * s - 3.76125336e-1f;
  q = q * s + 1.28379166e-1f;
  const vf small = q * x + x;
  const vf tl = t > 4.0f ? splat(4.0f) : t;
  const vf sl = tl * tl;
  vf r = splat(-1.72853470e-5f) * tl + 3.83197126e-4f;
  const vf u = splat(-3.88396438e-3f) * tl + 2.42546219e-2f;
  r = r * sl + u;
  r = r * tl - 1.06777877e-1f;
  r = r * tl - 6.34846687e-1f;
  r = r * tl - 1.28717512e-1f;
  r = r * tl - tl;
  const vf large = copySign(1.0f - vexpNegativeNormal(r), x);
  return t > 0.927734375f ? large : small;
}

// ---------------------------------------------------------------------------------------------
// Elementwise

template <typename F>
inline void mapLoop(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    const vf a = load(x + i), b = load(x + i + W), c = load(x + i + 2 * W),
             d = load(x + i + 3 * W);
    store(y + i, f(a));
    store(y + i + W, f(b));
    store(y + i + 2 * W, f(c));
    store(y + i + 3 * W, f(d));
  }
  for (; i + W <= n; i += W) store(y + i, f(load(x + i)));
  if (i < n) storePartial(y + i, f(loadPartial(x + i, n - i, 0.0f)), n - i);
}

// y = x * sigmoid(alpha * x) (* u where u is not null) in one pass: SwiGLU (alpha 1, u its up
// projection), QuickGelu (alpha 1.702), Swish. No sigmoid buffer to write and read back, and the
// products at this ISA's width (they ran as a baseline-ISA loop after unary()'s Sigmoid). The
// same bits: alpha * x rounded, vsigmoid, then (x * s) * u.
template <bool WITH_U>
inline void swishLoop(const float* x, const float* u, float* y, int64_t n, float alpha) {
  // Element i on: x's vector a (k of its lanes real); u is read only WITH_U (it may be null).
  const auto one = [&](vf a, int64_t i, int64_t k) {
    const vf t = a * vsigmoid(alpha * a);
    if constexpr (WITH_U) return t * (k == W ? load(u + i) : loadPartial(u + i, k, 0.0f));
    return t;
  };
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const vf a = load(x + i), b = load(x + i + W);
    store(y + i, one(a, i, W));
    store(y + i + W, one(b, i + W, W));
  }
  for (; i + W <= n; i += W) store(y + i, one(load(x + i), i, W));
  if (i < n) storePartial(y + i, one(loadPartial(x + i, n - i, 0.0f), i, n - i), n - i);
}

void swishRow(const float* x, const float* u, float* y, int64_t n, float alpha) {
  if (u) {
    swishLoop<true>(x, u, y, n, alpha);
  } else {
    swishLoop<false>(x, u, y, n, alpha);
  }
}

struct ReluF { vf operator()(vf x) const { return x > 0.0f ? x : vf{}; } };
struct LeakyReluF {
  float alpha;
  vf operator()(vf x) const { return x < 0.0f ? x * alpha : x; }
};
struct SigmoidF { vf operator()(vf x) const { return vsigmoid(x); } };
struct TanhF { vf operator()(vf x) const { return vtanh(x); } };
struct ExpF { vf operator()(vf x) const { return vexp(x); } };
struct ErfF { vf operator()(vf x) const { return verf(x); } };
struct GeluF {
  vf operator()(vf x) const { return 0.5f * x * (1.0f + verf(x * 0.7071067811865476f)); }
};
struct GeluTanhF {
  vf operator()(vf x) const {
    return 0.5f * x * (1.0f + vtanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
};
struct EluF {
  float alpha;
  vf operator()(vf x) const { return x < 0.0f ? alpha * (vexp(x) - 1.0f) : x; }
};
struct SeluF {
  float alpha, gamma;
  vf operator()(vf x) const { return x > 0.0f ? gamma * x : gamma * (alpha * vexp(x) - alpha); }
};
// std::max(0, std::min(1, v)), NaN handling included.
inline vf clamp01(vf v) {
  const vf m = v < 1.0f ? v : splat(1.0f);
  return 0.0f < m ? m : vf{};
}
struct HardSigmoidF {
  float alpha, beta;
  vf operator()(vf x) const { return clamp01(alpha * x + beta); }
};
struct HardSwishF {
  vf operator()(vf x) const { return x * clamp01(x / 6.0f + 0.5f); }
};
struct SoftsignF { vf operator()(vf x) const { return x / (1.0f + vabs(x)); } };
struct SqrtF { vf operator()(vf x) const { return vsqrt(x); } };
struct ReciprocalF { vf operator()(vf x) const { return 1.0f / x; } };
struct NegF { vf operator()(vf x) const { return -x; } };
// As the scalar Abs kernel: -0 stays -0, a NaN keeps its sign.
struct AbsF { vf operator()(vf x) const { return x < 0.0f ? -x : x; } };

void unary(Unary op, const float* x, float* y, int64_t n, float alpha, float beta) {
  switch (op) {
    case Unary::Relu: return mapLoop(x, y, n, ReluF{});
    case Unary::LeakyRelu: return mapLoop(x, y, n, LeakyReluF{alpha});
    case Unary::Sigmoid: return mapLoop(x, y, n, SigmoidF{});
    case Unary::Tanh: return mapLoop(x, y, n, TanhF{});
    case Unary::Exp: return mapLoop(x, y, n, ExpF{});
    case Unary::Erf: return mapLoop(x, y, n, ErfF{});
    case Unary::Gelu: return mapLoop(x, y, n, GeluF{});
    case Unary::GeluTanh: return mapLoop(x, y, n, GeluTanhF{});
    case Unary::Elu: return mapLoop(x, y, n, EluF{alpha});
    case Unary::Selu: return mapLoop(x, y, n, SeluF{alpha, beta});
    case Unary::HardSigmoid: return mapLoop(x, y, n, HardSigmoidF{alpha, beta});
    case Unary::HardSwish: return mapLoop(x, y, n, HardSwishF{});
    case Unary::Softsign: return mapLoop(x, y, n, SoftsignF{});
    case Unary::Sqrt: return mapLoop(x, y, n, SqrtF{});
    case Unary::Reciprocal: return mapLoop(x, y, n, ReciprocalF{});
    case Unary::Neg: return mapLoop(x, y, n, NegF{});
    case Unary::Abs: return mapLoop(x, y, n, AbsF{});
  }
}

template <bool VA, bool VB, typename F>
inline void binaryLoop(const float* a, float av, const float* b, float bv, float* y, int64_t n,
                       F f) {
  // Not splat(): 0 + -0 is +0, and a scalar -0 must stay -0 (1 / -0 is -inf).
  vf sa, sb;
  for (int l = 0; l < W; ++l) {
    sa[l] = av;
    sb[l] = bv;
  }
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const vf r0 = f(VA ? load(a + i) : sa, VB ? load(b + i) : sb);
    const vf r1 = f(VA ? load(a + i + W) : sa, VB ? load(b + i + W) : sb);
    store(y + i, r0);
    store(y + i + W, r1);
  }
  for (; i + W <= n; i += W) store(y + i, f(VA ? load(a + i) : sa, VB ? load(b + i) : sb));
  if (i < n) {
    const int64_t k = n - i;
    storePartial(y + i, f(VA ? loadPartial(a + i, k, 1.0f) : sa, VB ? loadPartial(b + i, k, 1.0f) : sb),
                 k);
  }
}

template <typename F>
inline void binaryLoops(const float* a, float av, const float* b, float bv, float* y, int64_t n,
                        F f) {
  if (a && b) binaryLoop<true, true>(a, av, b, bv, y, n, f);
  else if (a) binaryLoop<true, false>(a, av, b, bv, y, n, f);
  else if (b) binaryLoop<false, true>(a, av, b, bv, y, n, f);
  else binaryLoop<false, false>(a, av, b, bv, y, n, f);
}

inline vf nanIfEither(vf r, vf a, vf b) {
  return (a != a) | (b != b) ? splat(std::numeric_limits<float>::quiet_NaN()) : r;
}

// Functors, not lambdas: a lambda's body does not take the region's `#pragma GCC target`.
struct AddF { vf operator()(vf x, vf z) const { return x + z; } };
struct SubF { vf operator()(vf x, vf z) const { return x - z; } };
struct MulF { vf operator()(vf x, vf z) const { return x * z; } };
struct DivF { vf operator()(vf x, vf z) const { return x / z; } };
struct MaxF { vf operator()(vf x, vf z) const { return nanIfEither(x < z ? z : x, x, z); } };
struct MinF { vf operator()(vf x, vf z) const { return nanIfEither(z < x ? z : x, x, z); } };
struct PReluF { vf operator()(vf x, vf z) const { return x < 0.0f ? x * z : x; } };

void binary(Binary op, const float* a, float av, const float* b, float bv, float* y, int64_t n) {
  switch (op) {
    case Binary::Add: return binaryLoops(a, av, b, bv, y, n, AddF{});
    case Binary::Sub: return binaryLoops(a, av, b, bv, y, n, SubF{});
    case Binary::Mul: return binaryLoops(a, av, b, bv, y, n, MulF{});
    case Binary::Div: return binaryLoops(a, av, b, bv, y, n, DivF{});
    case Binary::Max: return binaryLoops(a, av, b, bv, y, n, MaxF{});
    case Binary::Min: return binaryLoops(a, av, b, bv, y, n, MinF{});
    case Binary::PRelu: return binaryLoops(a, av, b, bv, y, n, PReluF{});
  }
}

struct AffineF {
  float scale, shift;
  vf operator()(vf x) const { return x * scale + shift; }
};

void affine(const float* x, float* y, int64_t n, float scale, float shift) {
  mapLoop(x, y, n, AffineF{scale, shift});
}

struct CentredAffineF {
  float centre, scale, shift;
  vf operator()(vf x) const { return (x - centre) * scale + shift; }
};

void centredAffine(const float* x, float* y, int64_t n, float centre, float scale, float shift) {
  mapLoop(x, y, n, CentredAffineF{centre, scale, shift});
}

// The column statistics of a norm over rows that lie apart (ChannelLayerNorm: one channel's
// stretch of positions per call): acc[i] += (x[i] - mean[i])^2, and the normalised row
// y[i] = (x[i] - mean[i]) * rstd[i] * scale + shift.
void addSquaredDeviations(const float* x, const float* mean, float* acc, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf d = load(x + i) - load(mean + i);
    store(acc + i, load(acc + i) + d * d);
  }
  if (i < n) {
    const vf d = loadPartial(x + i, n - i, 0.0f) - loadPartial(mean + i, n - i, 0.0f);
    storePartial(acc + i, loadPartial(acc + i, n - i, 0.0f) + d * d, n - i);
  }
}

void normalizeColumns(const float* x, const float* mean, const float* rstd, float* y, int64_t n,
                      float scale, float shift) {
  int64_t i = 0;
  for (; i + W <= n; i += W)
    store(y + i, (load(x + i) - load(mean + i)) * load(rstd + i) * scale + shift);
  if (i < n) {
    const vf v = (loadPartial(x + i, n - i, 0.0f) - loadPartial(mean + i, n - i, 0.0f)) *
                     loadPartial(rstd + i, n - i, 0.0f) * scale + shift;
    storePartial(y + i, v, n - i);
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions: float lanes over blocks short enough that their rounding error stays at a few
// ulp, the block totals added in double.

constexpr int64_t kSumBlock = 1024;

// The sum over i < n of the vectors full(i) (i a multiple of W) and part(i, k) (the last k < W
// elements; lanes from k on are dropped here), in blocks of kSumBlock: the one order of
// additions that sum(), sumSquaredDeviations() and the fused rows below share, so that a row
// summed as it is written gives the bits of the same row summed after.
template <typename Full, typename Part>
inline double blockedSumOf(int64_t n, Full full, Part part) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const int64_t e = std::min(n, b + kSumBlock);
    vf a0 = vf{}, a1 = vf{}, a2 = vf{}, a3 = vf{};
    int64_t i = b;
    for (; i + 4 * W <= e; i += 4 * W) {
      a0 += full(i);
      a1 += full(i + W);
      a2 += full(i + 2 * W);
      a3 += full(i + 3 * W);
    }
    for (; i + W <= e; i += W) a0 += full(i);
    vf tail = vf{};
    if (i < e) tail = keepFirstLanes(part(i, e - i), e - i, 0.0f);
    total += static_cast<double>(hsum((a0 + a1) + (a2 + a3) + tail));
  }
  return total;
}

template <typename F>
inline double blockedSum(const float* x, int64_t n, F f) {
  return blockedSumOf(
      n, [&](int64_t i) { return f(load(x + i)); },
      [&](int64_t i, int64_t k) { return f(loadPartial(x + i, k, 0.0f)); });
}

// s = x + skip, stored as it is summed through f: blockedSum(s, n, f) without reading s back.
template <typename F>
inline double addRowSum(const float* x, const float* skip, float* s, int64_t n, F f) {
  return blockedSumOf(
      n,
      [&](int64_t i) {
        const vf v = load(x + i) + load(skip + i);
        store(s + i, v);
        return f(v);
      },
      [&](int64_t i, int64_t k) {
        const vf v = loadPartial(x + i, k, 0.0f) + loadPartial(skip + i, k, 0.0f);
        storePartial(s + i, v, k);
        return f(v);
      });
}

struct IdentityF { vf operator()(vf x) const { return x; } };
struct SquaredDeviationF {
  float mean;
  vf operator()(vf x) const {
    const vf d = x - mean;
    return d * d;
  }
};

double sum(const float* x, int64_t n) { return blockedSum(x, n, IdentityF{}); }

double sumSquaredDeviations(const float* x, int64_t n, float mean) {
  return blockedSum(x, n, SquaredDeviationF{mean});
}

float max(const float* x, int64_t n) {
  const float ninf = -std::numeric_limits<float>::infinity();
  vf m0 = splat(ninf), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    m0 = vmax(load(x + i), m0);  // a NaN element loses against the running max
    m1 = vmax(load(x + i + W), m1);
  }
  for (; i + W <= n; i += W) m0 = vmax(load(x + i), m0);
  if (i < n) m1 = vmax(loadPartial(x + i, n - i, ninf), m1);
  return hmax(vmax(m0, m1));
}

// ---------------------------------------------------------------------------------------------
// Softmax and LayerNorm

struct ExpShiftF {
  float shift;
  vf operator()(vf x) const { return vexpOfShift(x - shift); }
};

struct ShiftTwiceF {
  float first, second;
  vf operator()(vf x) const { return (x - first) - second; }
};

void softmaxRow(const float* x, float* y, int64_t n, bool log_softmax) {
  if (n <= 0) return;
  // A NaN or +inf in the row, or a row of -inf, makes every output NaN, as in the reference.
  const float m = max(x, n);
  // Both take the exponentials through y (the row is in L1 by now) and sum them from there:
  // one exp per vector in the loop keeps the exp's constants in registers, where summing four
  // exps at a time inside blockedSum ran LogSoftmax 1.5x slower.
  mapLoop(x, y, n, ExpShiftF{m});
  const double s = sum(y, n);
  if (log_softmax) {
    // (x - m) - log(s), not x - (m + log(s)): m is as large as x and would round log(s) away.
    mapLoop(x, y, n, ShiftTwiceF{m, static_cast<float>(std::log(s))});
    return;
  }
  mapLoop(y, y, n, AffineF{static_cast<float>(1.0 / s), 0.0f});
}

// Lanes [valid, W) of v set to `fill`: a row's partial last vector, whatever was loaded there.
inline vf fillPast(vf v, int64_t valid, float fill) { return keepFirstLanes(v, valid, fill); }

// Sum and maximum of a vector's lanes as a halving tree: log2(W) dependent steps, where hsum and
// hmax take W (their order is kept bit for bit by the kernels that use them). For rows short
// enough that the reduction is a real part of their cost (Attention's scores).
inline float hsumTree(vf v) {
  float a[W];
  std::memcpy(a, &v, sizeof(v));
  for (int w = W / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) a[i] += a[i + w];
  }
  return a[0];
}
inline float hmaxTree(vf v) {
  float a[W];
  std::memcpy(a, &v, sizeof(v));
  for (int w = W / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) a[i] = a[i + w] > a[i] ? a[i + w] : a[i];
  }
  return a[0];
}

// softmaxRowAdd's three passes, apart, so that softmaxRowsAdd can run each over several rows.
// Pass 1: x + add, stored, and its maximum (NaN elements lose against it).
inline float rowAddMax(float* row, int64_t n, const float* add, bool add_scalar) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const vf a0 = splat(add && add_scalar ? add[0] : 0.f);
  vf m = splat(ninf);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    vf v = load(row + i);
    if (add) v += add_scalar ? a0 : load(add + i);
    store(row + i, v);
    m = vmax(v, m);
  }
  if (i < n) {
    vf v = loadPartial(row + i, n - i, 0.f);
    if (add) v += add_scalar ? a0 : loadPartial(add + i, n - i, 0.f);
    storePartial(row + i, v, n - i);
    m = vmax(fillPast(v, n - i, ninf), m);
  }
  return hmaxTree(m);
}
// Pass 2: the exponentials of x - mx and their sum (float lanes: a row of attention scores is
// short). softmaxRow's rules come out of the arithmetic itself: a NaN element's exp is NaN, a
// +inf maximum makes inf - inf, a row of -inf makes -inf - -inf, and a NaN sum turns every
// output NaN.
inline float rowExpSum(float* row, int64_t n, float mx) {
  vf total = vf{};
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf e = vexpOfShift(load(row + i) - mx);
    store(row + i, e);
    total += e;
  }
  if (i < n) {
    const vf e = fillPast(vexpOfShift(loadPartial(row + i, n - i, 0.f) - mx), n - i, 0.f);
    storePartial(row + i, e, n - i);
    total += e;
  }
  return hsumTree(total);
}
// Pass 3: scaled to sum to 1.
inline void rowScale(float* row, int64_t n, float inv) {
  int64_t i = 0;
  for (; i + W <= n; i += W) store(row + i, load(row + i) * inv);
  if (i < n) storePartial(row + i, loadPartial(row + i, n - i, 0.f) * inv, n - i);
}

void softmaxRowAdd(float* row, int64_t n, const float* add, bool add_scalar) {
  if (n <= 0) return;
  const float mx = rowAddMax(row, n, add, add_scalar);
  rowScale(row, n, 1.f / rowExpSum(row, n, mx));
}

// Each pass runs over a group of rows before the next starts: a row's passes form one chain of
// dependent reductions (its maximum, then its sum), and a 128-key row is too short for the
// chain to hide its latency; rows of a group are independent, so their passes overlap. The
// group's rows (16 of 128 keys: 8 KiB) stay in L1 between the passes. Each row's arithmetic is
// softmaxRowAdd's, so the results are the same bit for bit.
void softmaxRowsAdd(float* rows, int64_t count, int64_t ld, int64_t first_n, int64_t n_step,
                    const float* add, int64_t add_ld, bool add_scalar) {
  constexpr int64_t kGroup = 16;
  float mx[kGroup], inv[kGroup];
  const auto visible = [&](int64_t r) {
    return std::clamp<int64_t>(first_n + r * n_step, 0, ld);
  };
  for (int64_t g = 0; g < count; g += kGroup) {
    const int64_t end = std::min(count, g + kGroup);
    for (int64_t r = g; r < end; ++r) {
      const int64_t n = visible(r);
      const float* add_row = add ? add + r * add_ld : nullptr;
      if (n > 0) mx[r - g] = rowAddMax(rows + r * ld, n, add_row, add_scalar);
    }
    for (int64_t r = g; r < end; ++r) {
      const int64_t n = visible(r);
      if (n > 0) inv[r - g] = 1.f / rowExpSum(rows + r * ld, n, mx[r - g]);
    }
    for (int64_t r = g; r < end; ++r) {
      float* row = rows + r * ld;
      const int64_t n = visible(r);
      if (n > 0) rowScale(row, n, inv[r - g]);
      std::fill(row + n, row + ld, 0.f);
    }
  }
}

float onlineSoftmaxRow(float* row, int64_t n, const float* add, bool add_scalar,
                       float* running_max) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const vf a0 = splat(add && add_scalar ? add[0] : 0.f);
  vf m = splat(ninf);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    vf v = load(row + i);
    if (add) v += add_scalar ? a0 : load(add + i);
    store(row + i, v);
    m = vmax(v, m);  // a NaN element loses against the running max, as in max()
  }
  if (i < n) {
    vf v = loadPartial(row + i, n - i, 0.f);
    if (add) v += add_scalar ? a0 : loadPartial(add + i, n - i, 0.f);
    storePartial(row + i, v, n - i);
    m = vmax(fillPast(v, n - i, ninf), m);
  }
  const float tile_max = hmaxTree(m);
  const float m_new = std::max(*running_max, tile_max);
  *running_max = m_new;
  vf total = vf{};
  for (i = 0; i + W <= n; i += W) {
    const vf e = vexpOfShift(load(row + i) - m_new);
    store(row + i, e);
    total += e;
  }
  if (i < n) {
    const vf e = fillPast(vexpOfShift(loadPartial(row + i, n - i, 0.f) - m_new), n - i, 0.f);
    storePartial(row + i, e, n - i);
    total += e;
  }
  return hsumTree(total);
}

void softmaxColumns(const float* x, float* y, int64_t rows, int64_t cols, bool log_softmax,
                    float* colmax, float* colsum) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < cols; ++c) colmax[c] = ninf;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) colmax[c] = row[c] > colmax[c] ? row[c] : colmax[c];
  }
  for (int64_t c = 0; c < cols; ++c) colsum[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float* out = y + r * cols;
    int64_t c = 0;
    for (; c + W <= cols; c += W) {
      const vf e = vexpOfShift(load(row + c) - load(colmax + c));
      store(colsum + c, load(colsum + c) + e);
      if (!log_softmax) store(out + c, e);
    }
    if (c < cols) {
      const int64_t k = cols - c;
      const vf e = vexpOfShift(loadPartial(row + c, k, 0.0f) - loadPartial(colmax + c, k, 0.0f));
      storePartial(colsum + c, loadPartial(colsum + c, k, 0.0f) + e, k);
      if (!log_softmax) storePartial(out + c, e, k);
    }
  }
  if (log_softmax) {
    for (int64_t c = 0; c < cols; ++c) colsum[c] = std::log(colsum[c]);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        y[r * cols + c] = (x[r * cols + c] - colmax[c]) - colsum[c];
  } else {
    for (int64_t c = 0; c < cols; ++c) colsum[c] = 1.0f / colsum[c];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] *= colsum[c];
  }
}

// layerNormRow on a row whose sum is known.
inline void layerNormRowOfSum(const float* x, float* y, int64_t n, double total,
                              const float* scale, const float* bias, float eps, float* mean,
                              float* inv_std) {
  const double m = n > 0 ? total / static_cast<double>(n) : 0.0;
  const float mf = static_cast<float>(m);
  const double var = n > 0 ? sumSquaredDeviations(x, n, mf) / static_cast<double>(n) : 0.0;
  const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  *mean = mf;
  *inv_std = inv;
  int64_t i = 0;
  if (bias) {
    for (; i + W <= n; i += W)
      store(y + i, (load(x + i) - mf) * inv * load(scale + i) + load(bias + i));
    if (i < n) {
      const int64_t k = n - i;
      storePartial(y + i,
                   (loadPartial(x + i, k, 0.0f) - mf) * inv * loadPartial(scale + i, k, 0.0f) +
                       loadPartial(bias + i, k, 0.0f),
                   k);
    }
  } else {
    for (; i + W <= n; i += W) store(y + i, (load(x + i) - mf) * inv * load(scale + i));
    if (i < n) {
      const int64_t k = n - i;
      storePartial(y + i, (loadPartial(x + i, k, 0.0f) - mf) * inv * loadPartial(scale + i, k, 0.0f),
                   k);
    }
  }
}

void layerNormRow(const float* x, float* y, int64_t n, const float* scale, const float* bias,
                  float eps, float* mean, float* inv_std) {
  layerNormRowOfSum(x, y, n, n > 0 ? sum(x, n) : 0.0, scale, bias, eps, mean, inv_std);
}

// The residual's sum is written in the pass that sums it for the mean: one pass over x and
// skip fewer than adding them first (SkipLayerNorm's row was 2.1x LayerNorm's, 32 against 15
// us on [128, 768], most of the difference a separate add loop at the baseline ISA).
void skipLayerNormRow(const float* x, const float* skip, float* s, float* y, int64_t n,
                      const float* scale, const float* bias, float eps) {
  float mean, inv_std;
  if (!skip) {
    layerNormRow(x, y, n, scale, bias, eps, &mean, &inv_std);
    return;
  }
  const double total = n > 0 ? addRowSum(x, skip, s, n, IdentityF{}) : 0.0;
  layerNormRowOfSum(s, y, n, total, scale, bias, eps, &mean, &inv_std);
}

void rmsNormRow(const float* x, const float* skip, float* s, float* y, int64_t n,
                const float* scale, float eps) {
  double squares = 0;
  if (skip) {
    squares = n > 0 ? addRowSum(x, skip, s, n, SquaredDeviationF{0.0f}) : 0.0;
    x = s;
  } else {
    squares = n > 0 ? sumSquaredDeviations(x, n, 0.0f) : 0.0;
  }
  const double mean_square = n > 0 ? squares / static_cast<double>(n) : 0.0;
  const float inv = static_cast<float>(1.0 / std::sqrt(mean_square + eps));
  int64_t i = 0;
  for (; i + W <= n; i += W) store(y + i, load(x + i) * inv * load(scale + i));
  if (i < n) {
    const int64_t k = n - i;
    storePartial(y + i, loadPartial(x + i, k, 0.0f) * inv * loadPartial(scale + i, k, 0.0f), k);
  }
}

// ---------------------------------------------------------------------------------------------
// Pool passes: plain loops, vectorised by the compiler for this region's target.

// Three rows (a 3-tap window, the common case) in one pass instead of a copy and two updates.
void maxRows(const float* const* rows, int k, float* out, int64_t n) {
  if (n <= 0) return;  // an empty output row may have no buffer at all
  if (k == 3) {
    const float* __restrict a = rows[0];
    const float* __restrict b = rows[1];
    const float* __restrict c = rows[2];
    float* __restrict o = out;
    for (int64_t i = 0; i < n; ++i) {
      const float m = b[i] > a[i] ? b[i] : a[i];
      o[i] = c[i] > m ? c[i] : m;
    }
    return;
  }
  std::memcpy(out, rows[0], static_cast<size_t>(n) * sizeof(float));
  for (int r = 1; r < k; ++r) {
    const float* __restrict in = rows[r];
    float* __restrict o = out;
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] > o[i] ? in[i] : o[i];
  }
}

void sumRows(const float* const* rows, int k, float* out, int64_t n) {
  if (n <= 0) return;  // an empty output row may have no buffer at all
  if (k == 3) {
    const float* __restrict a = rows[0];
    const float* __restrict b = rows[1];
    const float* __restrict c = rows[2];
    float* __restrict o = out;
    for (int64_t i = 0; i < n; ++i) o[i] = (a[i] + b[i]) + c[i];
    return;
  }
  std::memcpy(out, rows[0], static_cast<size_t>(n) * sizeof(float));
  for (int r = 1; r < k; ++r) {
    const float* __restrict in = rows[r];
    float* __restrict o = out;
    for (int64_t i = 0; i < n; ++i) o[i] += in[i];
  }
}

void windowMax(const float* in, int64_t stride, int64_t k, int64_t dilation, float* out,
               int64_t n) {
  if (n <= 0) return;
  float* __restrict o = out;
  if (stride == 1 && k == 3) {
    const float* __restrict b = in + dilation;
    const float* __restrict c = in + 2 * dilation;
    for (int64_t i = 0; i < n; ++i) {
      const float m = b[i] > in[i] ? b[i] : in[i];
      o[i] = c[i] > m ? c[i] : m;
    }
    return;
  }
  if (stride == 1) {
    std::memcpy(o, in, static_cast<size_t>(n) * sizeof(float));
    for (int64_t j = 1; j < k; ++j) {
      const float* __restrict tap = in + j * dilation;
      for (int64_t i = 0; i < n; ++i) o[i] = tap[i] > o[i] ? tap[i] : o[i];
    }
    return;
  }
  if (stride == 2 && k == 3 && dilation == 1) {  // ResNet's stem pool
    for (int64_t i = 0; i < n; ++i) {
      const float a = in[2 * i], b = in[2 * i + 1], c = in[2 * i + 2];
      const float m = b > a ? b : a;
      o[i] = c > m ? c : m;
    }
    return;
  }
  if (stride == 2 && k == 2 && dilation == 1) {
    for (int64_t i = 0; i < n; ++i) {
      const float a = in[2 * i], b = in[2 * i + 1];
      o[i] = b > a ? b : a;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* w = in + i * stride;
    float m = w[0];
    for (int64_t j = 1; j < k; ++j) m = w[j * dilation] > m ? w[j * dilation] : m;
    o[i] = m;
  }
}

void gatherStrided(const float* in, int64_t stride, float* out, int64_t n) {
  float* __restrict o = out;
  if (stride == 2) {  // a constant stride: vectorised as loads and even-lane permutes
    const float* __restrict x = in;
    for (int64_t i = 0; i < n; ++i) o[i] = x[2 * i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) o[i] = in[i * stride];
}

void windowMean(const float* in, int64_t stride, int64_t k, int64_t dilation,
                const float* col_scale, float row_scale, float* out, int64_t n) {
  if (n <= 0) return;
  float* __restrict o = out;
  const float* __restrict cs = col_scale;
  if (stride == 1 && k == 3) {  // one pass: the sum and its scale while the sum is in a register
    const float* __restrict b = in + dilation;
    const float* __restrict c = in + 2 * dilation;
    for (int64_t i = 0; i < n; ++i) o[i] = ((in[i] + b[i]) + c[i]) * (row_scale * cs[i]);
    return;
  }
  if (stride == 1) {
    std::memcpy(o, in, static_cast<size_t>(n) * sizeof(float));
    for (int64_t j = 1; j < k; ++j) {
      const float* __restrict tap = in + j * dilation;
      for (int64_t i = 0; i < n; ++i) o[i] += tap[i];
    }
    for (int64_t i = 0; i < n; ++i) o[i] *= row_scale * cs[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* w = in + i * stride;
    float s = 0;
    for (int64_t j = 0; j < k; ++j) s += w[j * dilation];
    o[i] = s * (row_scale * cs[i]);
  }
}

// A product kept rounded to float: the region's fp-contract=fast would otherwise fuse it into
// the add that follows as an FMA, which rounds once where the exported graph's Mul and Add (and
// the scalar kernels) round twice. An empty asm hides the value from that fusion.
inline vf roundedProduct(vf a, vf b) {
  vf p = a * b;
#if defined(FUSECTL_VEC_X86) && !defined(__clang__)
  asm("" : "+x"(p));
#endif
  return p;
}

void rotateHalfRow(const float* x, float* y, int64_t half, const float* c, const float* s) {
  auto pair = [&](int64_t k, auto get, auto put) {
    const vf x1 = get(x + k), x2 = get(x + k + half);
    put(y + k, roundedProduct(x1, get(c + k)) + roundedProduct(-x2, get(s + k)));
    put(y + k + half, roundedProduct(x2, get(c + k + half)) + roundedProduct(x1, get(s + k + half)));
  };
  int64_t k = 0;
  for (; k + W <= half; k += W) pair(k, load, store);
  if (k < half) {
    const int64_t n = half - k;
    pair(k, [n](const float* p) { return loadPartial(p, n, 0.f); },
         [n](float* p, vf v) { storePartial(p, v, n); });
  }
}
