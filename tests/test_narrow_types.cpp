// The narrow element types (float8 variants, float8e8m0, float4e2m1, int4/uint4, int2/uint2):
// decoding against values written out by hand from the format definitions, rounding against a
// brute-force search over every code, packing, and Tensor/file round trips.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "fusectl/graph/narrow_types.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/tensor.h"
#include "fusectl/kernels/compare.h"
#include "kernel_case.h"
#include "test_files.h"

using namespace fusectl;

namespace {

const DType kFloatFormats[] = {DType::Float8E4M3FN, DType::Float8E4M3FNUZ, DType::Float8E5M2,
                               DType::Float8E5M2FNUZ, DType::Float4E2M1};

int codeCount(DType t) { return t == DType::Float4E2M1 ? 16 : 256; }

// The finite code nearest to v, ties to the even code (even mantissa), by trying every code:
// independent of the exponent arithmetic in narrow_types.cpp. Saturating: beyond the largest
// finite value, the largest finite value is nearest.
double bruteForceNearest(double v, DType t) {
  double best = std::nan(""), best_err = HUGE_VAL;
  int best_code = -1;
  for (int c = 0; c < codeCount(t); ++c) {
    const double x = narrowFloatToDouble(static_cast<uint8_t>(c), t);
    if (!std::isfinite(x)) continue;
    const double err = std::fabs(x - v);
    if (err < best_err || (err == best_err && x != best && (c & 1) == 0 && (best_code & 1) == 1)) {
      best = x;
      best_err = err;
      best_code = c;
    }
  }
  return best;
}

bool sameValue(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("narrow types: codes decode to the values of the format definitions") {
  // E4M3FN: bias 7, S.1111.111 is NaN, no Inf; 448 the largest value, 2^-9 the smallest.
  CHECK(narrowFloatToDouble(0x7e, DType::Float8E4M3FN) == 448);
  CHECK(narrowFloatToDouble(0xfe, DType::Float8E4M3FN) == -448);
  CHECK(narrowFloatToDouble(0x01, DType::Float8E4M3FN) == std::ldexp(1, -9));
  CHECK(narrowFloatToDouble(0x38, DType::Float8E4M3FN) == 1);
  CHECK(std::isnan(narrowFloatToDouble(0x7f, DType::Float8E4M3FN)));
  CHECK(std::signbit(narrowFloatToDouble(0x80, DType::Float8E4M3FN)));
  // E4M3FNUZ: bias 8, 0x80 the only NaN, 240 the largest value.
  CHECK(narrowFloatToDouble(0x7f, DType::Float8E4M3FNUZ) == 240);
  CHECK(narrowFloatToDouble(0x40, DType::Float8E4M3FNUZ) == 1);
  CHECK(narrowFloatToDouble(0x01, DType::Float8E4M3FNUZ) == std::ldexp(1, -10));
  CHECK(std::isnan(narrowFloatToDouble(0x80, DType::Float8E4M3FNUZ)));
  // E5M2: float16's upper byte: Inf at 0x7c, NaN above, 57344 the largest value.
  CHECK(narrowFloatToDouble(0x7b, DType::Float8E5M2) == 57344);
  CHECK(narrowFloatToDouble(0x3c, DType::Float8E5M2) == 1);
  CHECK(narrowFloatToDouble(0x7c, DType::Float8E5M2) == HUGE_VAL);
  CHECK(narrowFloatToDouble(0xfc, DType::Float8E5M2) == -HUGE_VAL);
  CHECK(std::isnan(narrowFloatToDouble(0x7d, DType::Float8E5M2)));
  CHECK(narrowFloatToDouble(0x01, DType::Float8E5M2) == std::ldexp(1, -16));
  // E5M2FNUZ: bias 16, no Inf.
  CHECK(narrowFloatToDouble(0x7f, DType::Float8E5M2FNUZ) == 57344);
  CHECK(narrowFloatToDouble(0x40, DType::Float8E5M2FNUZ) == 1);
  CHECK(narrowFloatToDouble(0x01, DType::Float8E5M2FNUZ) == std::ldexp(1, -17));
  CHECK(std::isnan(narrowFloatToDouble(0x80, DType::Float8E5M2FNUZ)));
  // E2M1: the eight magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const double e2m1[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    CHECK(narrowFloatToDouble(static_cast<uint8_t>(c), DType::Float4E2M1) == e2m1[c]);
    CHECK(narrowFloatToDouble(static_cast<uint8_t>(c | 8), DType::Float4E2M1) == -e2m1[c]);
  }
  // E8M0: 2^(code - 127), 0xff NaN.
  CHECK(narrowFloatToDouble(127, DType::Float8E8M0) == 1);
  CHECK(narrowFloatToDouble(0, DType::Float8E8M0) == std::ldexp(1, -127));
  CHECK(narrowFloatToDouble(254, DType::Float8E8M0) == std::ldexp(1, 127));
  CHECK(std::isnan(narrowFloatToDouble(255, DType::Float8E8M0)));
}

TEST_CASE("narrow types: every code round-trips and rounding picks the nearest code, ties even") {
  std::mt19937 rng(7);
  for (DType t : kFloatFormats) {
    INFO(dtypeName(t));
    std::vector<double> finite;
    for (int c = 0; c < codeCount(t); ++c) {
      const double x = narrowFloatToDouble(static_cast<uint8_t>(c), t);
      // Inf comes back only without saturation (saturating, it becomes the largest value).
      const uint8_t back = doubleToNarrowFloat(x, t, !std::isinf(x));
      CHECK(sameValue(narrowFloatToDouble(back, t), x));
      if (std::isfinite(x)) finite.push_back(x);
    }
    std::sort(finite.begin(), finite.end());
    std::vector<double> probes;
    for (size_t i = 0; i + 1 < finite.size(); ++i) {
      probes.push_back((finite[i] + finite[i + 1]) / 2);  // exact ties
      probes.push_back(finite[i] + (finite[i + 1] - finite[i]) * 0.25);
      probes.push_back(finite[i] + (finite[i + 1] - finite[i]) * 0.75);
    }
    std::uniform_real_distribution<double> mant(1, 2);
    std::uniform_int_distribution<int> exp(-20, 18);
    for (int i = 0; i < 2000; ++i) {
      const float f = static_cast<float>(std::ldexp(mant(rng), exp(rng)) * (i % 2 ? -1 : 1));
      probes.push_back(f);
    }
    for (double v : probes) {
      INFO(v);
      const double got = narrowFloatToDouble(doubleToNarrowFloat(v, t, true), t);
      CHECK(got == bruteForceNearest(v, t));
    }
  }
}

TEST_CASE("narrow types: Inf, NaN and overflow follow saturate") {
  const double inf = HUGE_VAL;
  // Saturating: Inf and too-large values become the largest finite value.
  CHECK(doubleToNarrowFloat(inf, DType::Float8E4M3FN, true) == 0x7e);
  CHECK(doubleToNarrowFloat(-inf, DType::Float8E4M3FN, true) == 0xfe);
  CHECK(doubleToNarrowFloat(1e6, DType::Float8E4M3FNUZ, true) == 0x7f);
  CHECK(doubleToNarrowFloat(inf, DType::Float8E5M2, true) == 0x7b);
  CHECK(doubleToNarrowFloat(-1e9, DType::Float8E5M2FNUZ, true) == 0xff);
  // 464 is the tie between 448 and the next (absent) step: it rounds to even, 448.
  CHECK(doubleToNarrowFloat(464, DType::Float8E4M3FN, false) == 0x7e);
  // Not saturating: NaN for the formats without Inf, Inf for E5M2.
  CHECK(doubleToNarrowFloat(465, DType::Float8E4M3FN, false) == 0x7f);
  CHECK(doubleToNarrowFloat(-inf, DType::Float8E4M3FN, false) == 0xff);
  CHECK(doubleToNarrowFloat(1e6, DType::Float8E4M3FNUZ, false) == 0x80);
  CHECK(doubleToNarrowFloat(1e6, DType::Float8E5M2, false) == 0x7c);
  CHECK(doubleToNarrowFloat(-1e6, DType::Float8E5M2, false) == 0xfc);
  CHECK(doubleToNarrowFloat(1e6, DType::Float8E5M2FNUZ, false) == 0x80);
  // NaN stays NaN; FNUZ has no -0, so -0 and tiny negatives become +0.
  for (DType t : {DType::Float8E4M3FN, DType::Float8E4M3FNUZ, DType::Float8E5M2,
                  DType::Float8E5M2FNUZ})
    CHECK(std::isnan(narrowFloatToDouble(doubleToNarrowFloat(std::nan(""), t, true), t)));
  CHECK(doubleToNarrowFloat(-0.0, DType::Float8E4M3FNUZ, true) == 0x00);
  CHECK(doubleToNarrowFloat(-1e-7, DType::Float8E5M2FNUZ, true) == 0x00);
  CHECK(doubleToNarrowFloat(-1e-7, DType::Float8E5M2, true) == 0x80);
  // E2M1 has neither: it saturates always, NaN becomes 0x8 as in the reference data.
  CHECK(doubleToNarrowFloat(inf, DType::Float4E2M1, false) == 0x7);
  CHECK(doubleToNarrowFloat(-9, DType::Float4E2M1, true) == 0xf);
  CHECK(doubleToNarrowFloat(std::nan(""), DType::Float4E2M1, true) == 0x8);
  // E8M0 rounds toward a power of two per round_mode; 0 is the smallest code.
  CHECK(doubleToNarrowFloat(0.124, DType::Float8E8M0, true, E8M0Rounding::Up) == 124);
  CHECK(doubleToNarrowFloat(0.124, DType::Float8E8M0, true, E8M0Rounding::Down) == 123);
  CHECK(doubleToNarrowFloat(1.5, DType::Float8E8M0, true, E8M0Rounding::Nearest) == 128);
  CHECK(doubleToNarrowFloat(1.4, DType::Float8E8M0, true, E8M0Rounding::Nearest) == 127);
  CHECK(doubleToNarrowFloat(4, DType::Float8E8M0, true, E8M0Rounding::Up) == 129);
  CHECK(doubleToNarrowFloat(0, DType::Float8E8M0, true) == 0);
  CHECK(doubleToNarrowFloat(inf, DType::Float8E8M0, true) == 254);
  CHECK(doubleToNarrowFloat(inf, DType::Float8E8M0, false) == 255);
}

TEST_CASE("narrow types: packed elements, low bits first, and their storage size") {
  std::vector<uint8_t> bytes(2, 0);
  const int values[] = {-2, 1, 0, -1, 1};
  for (int i = 0; i < 5; ++i) storePacked(bytes.data(), i, DType::Int2, static_cast<uint32_t>(values[i]));
  CHECK(bytes[0] == 0b11000110);  // -1, 0, 1, -2 from the high bits down
  CHECK(bytes[1] == 0b01);
  for (int i = 0; i < 5; ++i) CHECK(loadPacked(bytes.data(), i, DType::Int2) == values[i]);
  CHECK(loadPacked(bytes.data(), 0, DType::UInt2) == 2);
  uint8_t nibbles = 0;
  storePacked(&nibbles, 0, DType::Int4, static_cast<uint32_t>(-8));
  storePacked(&nibbles, 1, DType::Int4, 7);
  CHECK(nibbles == 0x78);
  CHECK(loadPacked(&nibbles, 0, DType::Int4) == -8);
  CHECK(loadPacked(&nibbles, 1, DType::UInt4) == 7);
  CHECK(dtypeStorageBytes(DType::Int2, 5) == 2);
  CHECK(dtypeStorageBytes(DType::Float4E2M1, 3) == 2);
  CHECK(dtypeStorageBytes(DType::Float8E8M0, 3) == 3);
  CHECK(dtypeBits(DType::UInt2) == 2);
  CHECK(dtypeIsSubByte(DType::Float4E2M1));
  CHECK_FALSE(dtypeIsSubByte(DType::Float8E5M2));
  CHECK(dtypeFromName("float4e2m1") == DType::Float4E2M1);
  CHECK(dtypeFromName("int2") == DType::Int2);
  CHECK(dtypeMinIrVersion(DType::Int2) == 13);
  CHECK(dtypeMinIrVersion(DType::Float8E8M0) == 12);
}

TEST_CASE("narrow types: tensors of every new type keep their bytes through a .pb file") {
  namespace fs = std::filesystem;
  const fs::path dir = fusectl::testing::processTempPath("fusectl_test_narrow_types");
  fs::create_directories(dir);
  for (DType t : {DType::Float8E4M3FN, DType::Float8E4M3FNUZ, DType::Float8E5M2,
                  DType::Float8E5M2FNUZ, DType::UInt4, DType::Int4, DType::Float4E2M1,
                  DType::Float8E8M0, DType::UInt2, DType::Int2}) {
    INFO(dtypeName(t));
    Tensor x(t, {7});
    uint8_t* b = x.mutableBytes();
    for (size_t i = 0; i < x.byteSize(); ++i) b[i] = static_cast<uint8_t>(0x5a + 37 * i);
    // The unused high bits of a partly filled last byte stay as written, too.
    const std::string path = (dir / (std::string(dtypeName(t)) + ".pb")).string();
    saveTensorFile(x, "x", path);
    std::string name;
    const Tensor back = loadTensorFile(path, &name);
    CHECK(name == "x");
    CHECK(back.identical(x));
    CHECK(back.valueAsDouble(3) == x.valueAsDouble(3));
  }
  fs::remove_all(dir);
}

namespace {

// Output buffers full of 0xFF, as an arena slot reused after another tensor can be.
class DirtyAllocator : public fusectl::kernels::OutputAllocator {
 public:
  fusectl::kernels::HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    fusectl::kernels::HostTensor t(dtype, dims);
    if (t.byteSize() > 0) std::memset(t.mutableRaw(), 0xFF, t.byteSize());
    return t;
  }
};

}  // namespace

TEST_CASE("narrow types: packed outputs clear the padding of an odd count") {
  // The last byte of 5 int4 elements holds one; its other nibble was left as the arena had it,
  // so the same run wrote different bytes (a .pb output, a byte comparison) from run to run.
  using fusectl::testing::KernelCase;
  DirtyAllocator dirty;
  const auto x = fusectl::testing::floats({5}, {1, -2, 3, -4, 5});
  KernelCase cast("Cast", 21);
  cast.registry(fusectl::kernels::KernelRegistry::global()).allocator(&dirty);
  cast.input(x).attrInt("to", static_cast<int64_t>(DType::Int4));
  const auto cast_out = cast.run();
  REQUIRE(cast_out.size() == 1);
  CHECK(static_cast<const uint8_t*>(cast_out[0].raw())[2] == 0x05);
  KernelCase quantize("QuantizeLinear", 21);
  quantize.registry(fusectl::kernels::KernelRegistry::global()).allocator(&dirty);
  quantize.input(x).input(fusectl::testing::floats({}, {1.0f}))
      .input(fusectl::testing::tensorOf<uint8_t>(DType::Int4, {}, {0}));
  const auto q = quantize.run();
  REQUIRE(q.size() == 1);
  REQUIRE(q[0].dtype() == DType::Int4);
  CHECK(static_cast<const uint8_t*>(q[0].raw())[2] == 0x05);
}

TEST_CASE("narrow types: outputs compare and summarise by their values") {
  // `fusectl run` and `verify` failed on any model with a float8 or int4 output ("cannot read
  // int4 elements as numbers"): the comparison read only the byte-sized types.
  using fusectl::kernels::HostTensor;
  HostTensor a(DType::Int4, {3}), b(DType::Int4, {3});
  auto* pa = static_cast<uint8_t*>(a.mutableRaw());
  auto* pb = static_cast<uint8_t*>(b.mutableRaw());
  pa[0] = 0xF7;  // 7, -1
  pa[1] = 0x08;  // -8 (padding 0)
  std::memcpy(pb, pa, 2);
  pb[1] = 0xF8;  // the padding differs only
  CHECK(fusectl::kernels::elementAsDouble(a, 0) == 7);
  CHECK(fusectl::kernels::elementAsDouble(a, 1) == -1);
  CHECK(fusectl::kernels::elementAsDouble(a, 2) == -8);
  CHECK(fusectl::kernels::compareTensors(b, a).passed);
  pb[0] = 0xF6;  // 6, -1
  const auto differs = fusectl::kernels::compareTensors(b, a);
  CHECK(!differs.passed);
  CHECK(differs.mismatches == 1);
  HostTensor f8(DType::Float8E4M3FN, {2});
  auto* p8 = static_cast<uint8_t*>(f8.mutableRaw());
  p8[0] = 0x38;  // 1.0
  p8[1] = 0xC0;  // -2.0
  CHECK(fusectl::kernels::elementAsDouble(f8, 0) == 1.0);
  CHECK(fusectl::kernels::elementAsDouble(f8, 1) == -2.0);
  const auto summary = fusectl::kernels::summarizeTensor(f8);
  CHECK(summary.min == -2.0);
  CHECK(summary.max == 1.0);
}
