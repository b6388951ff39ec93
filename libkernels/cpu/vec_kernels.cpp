// The three builds of vec_impl.h (AVX-512, AVX2+FMA, portable) and the run-time choice
// between them.
#include "vec_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace fusectl::kernels::vec {

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define FUSECTL_VEC_X86 1
#endif

namespace portable {
#define FUSECTL_VEC_BYTES 16
#include "vec_impl.h"
#undef FUSECTL_VEC_BYTES
}  // namespace portable

#ifdef FUSECTL_VEC_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast")  // a * b + c as one FMA: half the polynomial work
namespace avx2 {
#define FUSECTL_VEC_BYTES 32
#include "vec_impl.h"
#undef FUSECTL_VEC_BYTES
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
#pragma GCC optimize("fp-contract=fast")
namespace avx512 {
#define FUSECTL_VEC_BYTES 64
#include "vec_impl.h"
#undef FUSECTL_VEC_BYTES
}  // namespace avx512
#pragma GCC pop_options
#endif

namespace {

struct Table {
  void (*unary)(Unary, const float*, float*, int64_t, float, float);
  void (*binary)(Binary, const float*, float, const float*, float, float*, int64_t);
  void (*affine)(const float*, float*, int64_t, float, float);
  void (*centredAffine)(const float*, float*, int64_t, float, float, float);
  void (*addSquaredDeviations)(const float*, const float*, float*, int64_t);
  void (*normalizeColumns)(const float*, const float*, const float*, float*, int64_t, float, float);
  double (*sum)(const float*, int64_t);
  double (*sumSquaredDeviations)(const float*, int64_t, float);
  float (*max)(const float*, int64_t);
  void (*softmaxRow)(const float*, float*, int64_t, bool);
  void (*softmaxRowAdd)(float*, int64_t, const float*, bool);
  void (*softmaxRowsAdd)(float*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, bool);
  float (*onlineSoftmaxRow)(float*, int64_t, const float*, bool, float*);
  void (*softmaxColumns)(const float*, float*, int64_t, int64_t, bool, float*, float*);
  void (*layerNormRow)(const float*, float*, int64_t, const float*, const float*, float, float*,
                       float*);
  void (*skipLayerNormRow)(const float*, const float*, float*, float*, int64_t, const float*,
                           const float*, float);
  void (*rmsNormRow)(const float*, const float*, float*, float*, int64_t, const float*, float);
  void (*swishRow)(const float*, const float*, float*, int64_t, float);
  void (*maxRows)(const float* const*, int, float*, int64_t);
  void (*sumRows)(const float* const*, int, float*, int64_t);
  void (*windowMax)(const float*, int64_t, int64_t, int64_t, float*, int64_t);
  void (*windowMean)(const float*, int64_t, int64_t, int64_t, const float*, float, float*,
                     int64_t);
  void (*gatherStrided)(const float*, int64_t, float*, int64_t);
  void (*rotateHalfRow)(const float*, float*, int64_t, const float*, const float*);
};

#define FUSECTL_VEC_TABLE(ns)                                                            \
  Table {                                                                                \
    ns::unary, ns::binary, ns::affine, ns::centredAffine, ns::addSquaredDeviations,      \
        ns::normalizeColumns, ns::sum, ns::sumSquaredDeviations, ns::max, ns::softmaxRow,   \
        ns::softmaxRowAdd, ns::softmaxRowsAdd, ns::onlineSoftmaxRow,                      \
        ns::softmaxColumns, ns::layerNormRow, ns::skipLayerNormRow, ns::rmsNormRow,      \
        ns::swishRow,                                                                     \
        ns::maxRows, ns::sumRows, ns::windowMax,                                         \
        ns::windowMean, ns::gatherStrided, ns::rotateHalfRow                             \
  }

const Table kPortable = FUSECTL_VEC_TABLE(portable);
#ifdef FUSECTL_VEC_X86
const Table kAvx2 = FUSECTL_VEC_TABLE(avx2);
const Table kAvx512 = FUSECTL_VEC_TABLE(avx512);
#endif

Isa detect() {
#ifdef FUSECTL_VEC_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
  return Isa::Portable;
}

// The environment may only narrow the choice: asking for more than the CPU has is ignored.
Isa fromEnvironment(Isa best) {
  const char* env = std::getenv("FUSECTL_ISA");
  if (!env) return best;
  const std::string want = env;
  Isa isa = best;
  if (want == "portable") isa = Isa::Portable;
  else if (want == "avx2") isa = Isa::Avx2;
  else if (want == "avx512") isa = Isa::Avx512;
  return std::min(isa, best);
}

std::atomic<int> g_forced{-1};

// The ISA unless forceIsa says otherwise, with FUSECTL_ISA read once: activeIsa() is asked per
// kernel call (pool.cpp), where a getenv each time showed in profiles.
Isa automaticIsa() {
  static const Isa automatic = fromEnvironment(bestSupportedIsa());
  return automatic;
}

const Table& table() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  const Isa isa = forced >= 0 ? static_cast<Isa>(forced) : automaticIsa();
#ifdef FUSECTL_VEC_X86
  if (isa == Isa::Avx512) return kAvx512;
  if (isa == Isa::Avx2) return kAvx2;
#endif
  return kPortable;
}

}  // namespace

Isa bestSupportedIsa() {
  static const Isa best = detect();
  return best;
}

Isa activeIsa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : automaticIsa();
}

void forceIsa(std::optional<Isa> isa) {
  g_forced.store(isa ? static_cast<int>(std::min(*isa, bestSupportedIsa())) : -1,
                 std::memory_order_relaxed);
}

namespace {
bool detectFma512HalfWidth() {
#ifdef FUSECTL_VEC_X86
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "AuthenticAMD") != 0) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  unsigned family = (eax >> 8) & 0xF;
  if (family == 0xF) family += (eax >> 20) & 0xFF;
  __builtin_cpu_init();
  // Zen 3 is family 0x19 too but has no AVX-512; Zen 5 (0x1A) has full-width units.
  return family == 0x19 && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

std::atomic<int> g_forced_half_width{-1};
}  // namespace

bool fma512HalfWidth() {
  const int forced = g_forced_half_width.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  static const bool half = [] {
    const char* env = std::getenv("FUSECTL_FMA_HALF_WIDTH");
    if (env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0)) return env[0] == '1';
    return detectFma512HalfWidth();
  }();
  return half;
}

void forceFma512HalfWidth(std::optional<bool> half) {
  g_forced_half_width.store(half ? (*half ? 1 : 0) : -1, std::memory_order_relaxed);
}

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::Portable: return "portable";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

void unary(Unary op, const float* x, float* y, int64_t n, float alpha, float beta) {
  table().unary(op, x, y, n, alpha, beta);
}
void binary(Binary op, const float* a, float av, const float* b, float bv, float* y, int64_t n) {
  table().binary(op, a, av, b, bv, y, n);
}
void affine(const float* x, float* y, int64_t n, float scale, float shift) {
  table().affine(x, y, n, scale, shift);
}
void centredAffine(const float* x, float* y, int64_t n, float centre, float scale, float shift) {
  table().centredAffine(x, y, n, centre, scale, shift);
}
void addSquaredDeviations(const float* x, const float* mean, float* acc, int64_t n) {
  table().addSquaredDeviations(x, mean, acc, n);
}
void normalizeColumns(const float* x, const float* mean, const float* rstd, float* y, int64_t n,
                      float scale, float shift) {
  table().normalizeColumns(x, mean, rstd, y, n, scale, shift);
}
double sum(const float* x, int64_t n) { return table().sum(x, n); }
double sumSquaredDeviations(const float* x, int64_t n, float mean) {
  return table().sumSquaredDeviations(x, n, mean);
}
float max(const float* x, int64_t n) { return table().max(x, n); }
void softmaxRow(const float* x, float* y, int64_t n, bool log_softmax) {
  table().softmaxRow(x, y, n, log_softmax);
}
void softmaxRowAdd(float* row, int64_t n, const float* add, bool add_scalar) {
  table().softmaxRowAdd(row, n, add, add_scalar);
}
void softmaxRowsAdd(float* rows, int64_t count, int64_t ld, int64_t first_n, int64_t n_step,
                    const float* add, int64_t add_ld, bool add_scalar) {
  table().softmaxRowsAdd(rows, count, ld, first_n, n_step, add, add_ld, add_scalar);
}
float onlineSoftmaxRow(float* row, int64_t n, const float* add, bool add_scalar,
                       float* running_max) {
  return table().onlineSoftmaxRow(row, n, add, add_scalar, running_max);
}
void softmaxColumns(const float* x, float* y, int64_t rows, int64_t cols, bool log_softmax,
                    float* colmax, float* colsum) {
  table().softmaxColumns(x, y, rows, cols, log_softmax, colmax, colsum);
}
void skipLayerNormRow(const float* x, const float* skip, float* s, float* y, int64_t n,
                      const float* scale, const float* bias, float eps) {
  table().skipLayerNormRow(x, skip, s, y, n, scale, bias, eps);
}
void swishRow(const float* x, const float* u, float* y, int64_t n, float alpha) {
  table().swishRow(x, u, y, n, alpha);
}
void rmsNormRow(const float* x, const float* skip, float* s, float* y, int64_t n,
                const float* scale, float eps) {
  table().rmsNormRow(x, skip, s, y, n, scale, eps);
}
void layerNormRow(const float* x, float* y, int64_t n, const float* scale, const float* bias,
                  float eps, float* mean, float* inv_std) {
  table().layerNormRow(x, y, n, scale, bias, eps, mean, inv_std);
}
void maxRows(const float* const* rows, int k, float* out, int64_t n) {
  table().maxRows(rows, k, out, n);
}
void sumRows(const float* const* rows, int k, float* out, int64_t n) {
  table().sumRows(rows, k, out, n);
}
void windowMax(const float* in, int64_t stride, int64_t k, int64_t dilation, float* out,
               int64_t n) {
  table().windowMax(in, stride, k, dilation, out, n);
}
void windowMean(const float* in, int64_t stride, int64_t k, int64_t dilation,
                const float* col_scale, float row_scale, float* out, int64_t n) {
  table().windowMean(in, stride, k, dilation, col_scale, row_scale, out, n);
}
void gatherStrided(const float* in, int64_t stride, float* out, int64_t n) {
  table().gatherStrided(in, stride, out, n);
}
void rotateHalfRow(const float* x, float* y, int64_t half, const float* c, const float* s) {
  table().rotateHalfRow(x, y, half, c, s);
}

}  // namespace fusectl::kernels::vec
