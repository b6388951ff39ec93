// Bulk float16/bfloat16 <-> float32 conversions (fusectl/kernels/half.h), with F16C's
// VCVTPH2PS/VCVTPS2PH where the CPU has them.
//
// The hardware conversions are IEEE's: round to nearest even, subnormals and infinities exact,
// overflow to infinity; so are the scalar ones. They differ on NaN only where the hardware keeps
// a signalling NaN signalling on widening, so the widening sets the quiet bit of every NaN lane
// as halfToFloat does (tests/test_half_conversion.cpp checks all 65536 halves and float classes
// around every rounding boundary against the scalar functions).
#include <atomic>
#include <cstdint>

#include "fusectl/kernels/half.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <immintrin.h>
#define FUSECTL_HALF_X86 1
#endif

namespace fusectl::kernels {
namespace {

std::atomic<bool> g_force_portable{false};

#ifdef FUSECTL_HALF_X86
bool cpuHasF16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c". AVX2's
    // check also says the OS saves the YMM state the conversions use.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return has;
}

__attribute__((target("avx2,f16c"))) int64_t halfToFloatF16c(const uint16_t* src, float* dst,
                                                              int64_t n) {
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  const __m256i mantissa = _mm256_set1_epi32(0x007fffff);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    // NaN lanes: all exponent bits and a mantissa; their quiet bit set.
    const __m256i all_ones = _mm256_cmpeq_epi32(_mm256_and_si256(f, exponent), exponent);
    const __m256i no_mantissa =
        _mm256_cmpeq_epi32(_mm256_and_si256(f, mantissa), _mm256_setzero_si256());
    const __m256i nan = _mm256_andnot_si256(no_mantissa, all_ones);
    f = _mm256_or_si256(f, _mm256_and_si256(nan, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f);
  }
  return i;
}

__attribute__((target("avx2,f16c"))) int64_t floatToHalfF16c(const float* src, uint16_t* dst,
                                                              int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  return i;
}
#endif

bool useF16c() {
#ifdef FUSECTL_HALF_X86
  return cpuHasF16c() && !g_force_portable.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

}  // namespace

void halfToFloat(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#ifdef FUSECTL_HALF_X86
  if (useF16c()) i = halfToFloatF16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = halfToFloat(src[i]);
}

void floatToHalf(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#ifdef FUSECTL_HALF_X86
  if (useF16c()) i = floatToHalfF16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = floatToHalf(src[i]);
}

void bfloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16ToFloat(src[i]);
}

void floatToBFloat16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = floatToBFloat16(src[i]);
}

bool bulkHalfUsesF16c() { return useF16c(); }

void forcePortableHalfConversion(bool portable) {
  g_force_portable.store(portable, std::memory_order_relaxed);
}

}  // namespace fusectl::kernels
