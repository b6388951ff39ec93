// The bulk float16/bfloat16 conversions (F16C where the CPU has it, libkernels/src/half.cpp)
// against the scalar ones of fusectl/kernels/half.h, which define the results bit for bit.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fusectl/kernels/half.h"

using namespace fusectl::kernels;

namespace {

// Both paths (F16C and the scalar loop) of the bulk conversions, restoring the CPU's choice.
template <typename F>
void onEachPath(F check) {
  for (bool portable : {false, true}) {
    forcePortableHalfConversion(portable);
    INFO((portable ? "portable" : (bulkHalfUsesF16c() ? "F16C" : "portable (no F16C here)")));
    check();
  }
  forcePortableHalfConversion(false);
}

// Float bit patterns around every float16 rounding boundary and class edge: each half value's
// float, the midpoints to its neighbours and one ulp either side of them, in both signs; the
// float16 overflow threshold; subnormal halves and below; infinities and NaNs with payloads.
std::vector<uint32_t> interestingFloats() {
  std::vector<uint32_t> bits;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const uint32_t lo = floatBits(halfToFloat(static_cast<uint16_t>(h)));
    const uint32_t hi = floatBits(halfToFloat(static_cast<uint16_t>(h + 1)));
    const uint32_t mid = floatBits((bitsToFloat(lo) + bitsToFloat(hi)) / 2);  // exact in float
    for (uint32_t b : {lo, mid - 1, mid, mid + 1}) {
      bits.push_back(b);
      bits.push_back(b | 0x80000000u);
    }
  }
  for (uint32_t b : {0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u, 0x7f7fffffu,
                     0x33000000u, 0x33000001u, 0x32ffffffu, 0x00000001u, 0x007fffffu,
                     0x7f800000u, 0x7f800001u, 0x7fa00000u, 0x7fc00000u, 0x7fffffffu,
                     0x7f802000u, 0x7fbfe000u}) {
    bits.push_back(b);
    bits.push_back(b | 0x80000000u);
  }
  // A long run so that most of it goes through the 8-wide loop; an odd length leaves a tail.
  while (bits.size() % 8 != 5) bits.push_back(0x3f800000u);
  return bits;
}

}  // namespace

TEST_CASE("half conversion: bulk float16 -> float32 equals the scalar conversion for every half",
          "[half]") {
  std::vector<uint16_t> halves(65536 + 3);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  onEachPath([&] {
    std::vector<float> got(halves.size());
    halfToFloat(halves.data(), got.data(), static_cast<int64_t>(halves.size()));
    size_t mismatches = 0;
    for (size_t i = 0; i < halves.size(); ++i) {
      if (floatBits(got[i]) != floatBits(halfToFloat(halves[i]))) {
        if (++mismatches <= 5) UNSCOPED_INFO("half 0x" << std::hex << halves[i]);
      }
    }
    CHECK(mismatches == 0);
  });
}

TEST_CASE("half conversion: bulk float32 -> float16 rounds as the scalar conversion does",
          "[half]") {
  const std::vector<uint32_t> bits = interestingFloats();
  std::vector<float> floats(bits.size());
  std::memcpy(floats.data(), bits.data(), bits.size() * sizeof(float));
  onEachPath([&] {
    std::vector<uint16_t> got(floats.size());
    floatToHalf(floats.data(), got.data(), static_cast<int64_t>(floats.size()));
    size_t mismatches = 0;
    for (size_t i = 0; i < floats.size(); ++i) {
      if (got[i] != floatToHalf(floats[i])) {
        if (++mismatches <= 5)
          UNSCOPED_INFO("float 0x" << std::hex << bits[i] << ": 0x" << got[i] << " against 0x"
                                   << floatToHalf(floats[i]));
      }
    }
    CHECK(mismatches == 0);
  });
  // Round to nearest even at a tie (1 + 2^-11 lies midway between 1 and 1 + 2^-10).
  const float tie = 1.0f + 1.0f / 2048;
  uint16_t h = 0;
  floatToHalf(&tie, &h, 1);
  CHECK(h == 0x3c00);
}

TEST_CASE("half conversion: bulk bfloat16 conversions equal the scalar ones", "[half]") {
  std::vector<uint16_t> bf(65536);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(bf.size());
  bfloat16ToFloat(bf.data(), wide.data(), static_cast<int64_t>(bf.size()));
  for (size_t i = 0; i < bf.size(); ++i) REQUIRE(floatBits(wide[i]) == floatBits(bfloat16ToFloat(bf[i])));
  const std::vector<uint32_t> bits = interestingFloats();
  std::vector<float> floats(bits.size());
  std::memcpy(floats.data(), bits.data(), bits.size() * sizeof(float));
  std::vector<uint16_t> narrow(floats.size());
  floatToBFloat16(floats.data(), narrow.data(), static_cast<int64_t>(floats.size()));
  for (size_t i = 0; i < floats.size(); ++i) REQUIRE(narrow[i] == floatToBFloat16(floats[i]));
}
