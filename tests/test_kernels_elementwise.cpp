// Elementwise and reduction CPU kernels against references computed directly in the test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"
#include "kernel_case.h"

using namespace fusectl;
using namespace fusectl::testing;
using Catch::Matchers::Contains;

namespace {

HostTensor iota(std::vector<int64_t> dims, float start = 0, float step = 1) {
  HostTensor t(DType::Float, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.mutableData<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

// Pseudo-random but fixed values in [-2, 2).
HostTensor noise(std::vector<int64_t> dims, uint32_t seed) {
  HostTensor t(DType::Float, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    t.mutableData<float>()[i] =
        static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) * 4 - 2;
  }
  return t;
}

// Flat index into `dims` of the broadcast source element for output multi-index `idx`.
int64_t sourceIndex(const std::vector<int64_t>& dims, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  const size_t lead = idx.size() - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) off = off * dims[i] + (dims[i] == 1 ? 0 : idx[lead + i]);
  return off;
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  return idx;
}

void checkBinaryBroadcast(const std::string& op, std::vector<int64_t> da, std::vector<int64_t> db,
                          std::vector<int64_t> dout, std::function<float(float, float)> ref) {
  HostTensor a = noise(da, 1), b = noise(db, 2);
  auto out = KernelCase(op, 14).input(a).input(b).run();
  REQUIRE(out[0].dims() == dout);
  for (int64_t i = 0; i < out[0].numel(); ++i) {
    const auto idx = unravel(i, dout);
    const float expect =
        ref(a.data<float>()[sourceIndex(da, idx)], b.data<float>()[sourceIndex(db, idx)]);
    // Exactly: the vector rows (vec::binary) compute what the scalar formula does.
    REQUIRE(out[0].data<float>()[i] == expect);
  }
}

}  // namespace

TEST_CASE("binary arithmetic broadcasts multidirectionally", "[kernels][elementwise]") {
  const std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>>
      shapes = {
          {{2, 3}, {2, 3}, {2, 3}},          {{2, 3}, {3}, {2, 3}},
          {{2, 1}, {1, 3}, {2, 3}},          {{}, {4, 5}, {4, 5}},
          {{4, 5}, {}, {4, 5}},              {{2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}},
          {{1, 3, 1, 5}, {2, 1, 4, 1}, {2, 3, 4, 5}}, {{3, 1}, {3, 7}, {3, 7}},
          {{0, 3}, {3}, {0, 3}},
          // Rows past the vector widths, a scalar per row (a squeeze-and-excitation's scale),
          // and a row of the second operand against rows of the first.
          {{1, 3, 20, 21}, {1, 3, 1, 1}, {1, 3, 20, 21}}, {{2, 37}, {2, 1}, {2, 37}},
          {{1, 1}, {3, 53}, {3, 53}},        {{3, 53}, {53}, {3, 53}},
      };
  for (const auto& [da, db, dout] : shapes) {
    checkBinaryBroadcast("Add", da, db, dout, [](float x, float y) { return x + y; });
    checkBinaryBroadcast("Sub", da, db, dout, [](float x, float y) { return x - y; });
    checkBinaryBroadcast("Mul", da, db, dout, [](float x, float y) { return x * y; });
    checkBinaryBroadcast("Div", da, db, dout, [](float x, float y) { return x / y; });
  }
}

TEST_CASE("float16 and bfloat16 binary arithmetic broadcasts, rounding each result once",
          "[kernels][elementwise]") {
  // The half rows run a block of 1024 at a time (applyHalfBinary): rows shorter and longer than
  // a block, broadcast rows and scalars, against the float32 operation on the widened operands
  // rounded once.
  const std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>>
      shapes = {{{2, 3}, {2, 3}, {2, 3}},           {{1, 3, 20, 21}, {1, 3, 1, 1}, {1, 3, 20, 21}},
                {{1, 1}, {3, 53}, {3, 53}},          {{2, 2500}, {2500}, {2, 2500}},
                {{3, 2049}, {3, 1}, {3, 2049}},      {{}, {1, 5000}, {1, 5000}},
                {{0, 3}, {3}, {0, 3}}};
  const std::vector<std::pair<std::string, std::function<float(float, float)>>> ops = {
      {"Add", [](float x, float y) { return x + y; }},
      {"Sub", [](float x, float y) { return x - y; }},
      {"Mul", [](float x, float y) { return x * y; }},
      {"Div", [](float x, float y) { return x / y; }}};
  for (DType t : {DType::Float16, DType::BFloat16}) {
    auto narrow = [&](const HostTensor& f) {
      HostTensor h(t, f.dims());
      for (int64_t i = 0; i < f.numel(); ++i)
        h.mutableData<uint16_t>()[i] = kernels::floatToHalfBits(t, f.data<float>()[i] * 37);
      return h;
    };
    for (const auto& [da, db, dout] : shapes) {
      const HostTensor a = narrow(noise(da, 3)), b = narrow(noise(db, 4));
      for (const auto& [op, ref] : ops) {
        INFO(dtypeName(t) << " " << op << " " << kernels::formatDims(da) << " x " << kernels::formatDims(db));
        auto out = KernelCase(op, 14).input(a).input(b).run();
        REQUIRE(out[0].dtype() == t);
        REQUIRE(out[0].dims() == dout);
        for (int64_t i = 0; i < out[0].numel(); ++i) {
          const auto idx = unravel(i, dout);
          const float x = kernels::halfBitsToFloat(t, a.data<uint16_t>()[sourceIndex(da, idx)]);
          const float y = kernels::halfBitsToFloat(t, b.data<uint16_t>()[sourceIndex(db, idx)]);
          REQUIRE(out[0].data<uint16_t>()[i] == kernels::floatToHalfBits(t, ref(x, y)));
        }
      }
    }
  }
}

TEST_CASE("opset-6 broadcast=1 aligns B at axis", "[kernels][elementwise]") {
  const HostTensor a = iota({2, 3, 2});
  auto out = KernelCase("Add", 6)
                 .attrInt("broadcast", 1)
                 .attrInt("axis", 1)
                 .input(a)
                 .input(floats({3}, {10, 20, 30}))
                 .run();
  CHECK(valuesOf<float>(out[0]) ==
        std::vector<float>{10, 11, 22, 23, 34, 35, 16, 17, 28, 29, 40, 41});
  auto trailing =
      KernelCase("Mul", 6).attrInt("broadcast", 1).input(a).input(floats({2}, {1, -1})).run();
  CHECK(valuesOf<float>(trailing[0])[1] == -1);
}

TEST_CASE("incompatible broadcast names the node", "[kernels][elementwise]") {
  KernelCase k("Add", 14);
  k.input(iota({2, 3})).input(iota({4}));
  try {
    k.run();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidInput);
    CHECK_THAT(e.what(), Contains("node_Add") && Contains("[2,3]") && Contains("[4]"));
  }
}

TEST_CASE("integer arithmetic: int64 Add, truncating Div, Mod signs", "[kernels][elementwise]") {
  auto add =
      KernelCase("Add", 14).input(int64s({3}, {1, -2, 1LL << 40})).input(int64s({}, {5})).run();
  CHECK(valuesOf<int64_t>(add[0]) == std::vector<int64_t>{6, 3, (1LL << 40) + 5});

  auto div = KernelCase("Div", 14)
                 .input(tensorOf<int32_t>(DType::Int32, {4}, {7, -7, 7, 5}))
                 .input(tensorOf<int32_t>(DType::Int32, {4}, {2, 2, -2, 0}))
                 .run();
  CHECK(valuesOf<int32_t>(div[0]) == std::vector<int32_t>{3, -3, -3, 0});

  const HostTensor a = int64s({4}, {7, -7, 7, -7}), b = int64s({4}, {3, 3, -3, -3});
  auto mod = KernelCase("Mod", 13).input(a).input(b).run();
  CHECK(valuesOf<int64_t>(mod[0]) == std::vector<int64_t>{1, 2, -2, -1});  // Python's %
  auto fmod = KernelCase("Mod", 13).attrInt("fmod", 1).input(a).input(b).run();
  CHECK(valuesOf<int64_t>(fmod[0]) == std::vector<int64_t>{1, -1, 1, -1});  // C's fmod
  auto fm = KernelCase("Mod", 13)
                .attrInt("fmod", 1)
                .input(floats({2}, {5.5f, -5.5f}))
                .input(floats({}, {2}))
                .run();
  CHECK(valuesOf<float>(fm[0]) == std::vector<float>{1.5f, -1.5f});
}

TEST_CASE("bool logic and comparisons", "[kernels][elementwise]") {
  const HostTensor a = bools({4}, {0, 0, 1, 1}), b = bools({4}, {0, 1, 0, 1});
  CHECK(valuesOf<uint8_t>(KernelCase("And", 7).input(a).input(b).run()[0]) ==
        std::vector<uint8_t>{0, 0, 0, 1});
  CHECK(valuesOf<uint8_t>(KernelCase("Or", 7).input(a).input(b).run()[0]) ==
        std::vector<uint8_t>{0, 1, 1, 1});
  CHECK(valuesOf<uint8_t>(KernelCase("Xor", 7).input(a).input(b).run()[0]) ==
        std::vector<uint8_t>{0, 1, 1, 0});
  CHECK(valuesOf<uint8_t>(KernelCase("Not", 1).input(a).run()[0]) ==
        std::vector<uint8_t>{1, 1, 0, 0});
  // Broadcast bool And: [2,1] with [2].
  auto bc = KernelCase("And", 7).input(bools({2, 1}, {1, 0})).input(bools({2}, {1, 0})).run();
  CHECK(valuesOf<uint8_t>(bc[0]) == std::vector<uint8_t>{1, 0, 0, 0});

  const HostTensor x = floats({3}, {1, 2, 3}), y = floats({}, {2});
  auto lt = KernelCase("Less", 13).input(x).input(y).run();
  CHECK(lt[0].dtype() == DType::Bool);
  CHECK(valuesOf<uint8_t>(lt[0]) == std::vector<uint8_t>{1, 0, 0});
  CHECK(valuesOf<uint8_t>(KernelCase("GreaterOrEqual", 16).input(x).input(y).run()[0]) ==
        std::vector<uint8_t>{0, 1, 1});
  CHECK(
      valuesOf<uint8_t>(
          KernelCase("Equal", 13).input(int64s({3}, {1, 2, 3})).input(int64s({1}, {2})).run()[0]) ==
      std::vector<uint8_t>{0, 1, 0});
}

TEST_CASE("float16 and bfloat16 compute in float32", "[kernels][elementwise]") {
  auto half = [](std::vector<float> v) {
    std::vector<uint16_t> h;
    for (float f : v) h.push_back(kernels::floatToHalf(f));
    return tensorOf<uint16_t>(DType::Float16, {static_cast<int64_t>(v.size())}, h);
  };
  auto out =
      KernelCase("Add", 14).input(half({1.5f, -2, 1000})).input(half({0.25f, 0.5f, 24})).run();
  REQUIRE(out[0].dtype() == DType::Float16);
  std::vector<float> got;
  for (uint16_t h : valuesOf<uint16_t>(out[0])) got.push_back(kernels::halfToFloat(h));
  CHECK(got == std::vector<float>{1.75f, -1.5f, 1024});

  HostTensor bf = tensorOf<uint16_t>(DType::BFloat16, {2},
                                     {kernels::floatToBFloat16(4), kernels::floatToBFloat16(-9)});
  auto sq = KernelCase("Abs", 13).input(bf).run();
  CHECK(kernels::bfloat16ToFloat(valuesOf<uint16_t>(sq[0])[1]) == 9);

  auto cmp = KernelCase("Greater", 13).input(half({1, 3})).input(half({2})).run();
  CHECK(valuesOf<uint8_t>(cmp[0]) == std::vector<uint8_t>{0, 1});
}

TEST_CASE("unary math and activations match their formulas", "[kernels][elementwise]") {
  const HostTensor x = noise({37}, 7);
  struct Case {
    const char* op;
    std::function<double(double)> ref;
    std::vector<Attribute> attrs;
  };
  const double selu_a = 1.67326319217681884765625, selu_g = 1.05070102214813232421875;
  const std::vector<Case> cases = {
      {"Relu", [](double v) { return std::max(v, 0.0); }, {}},
      {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }, {}},
      {"Tanh", [](double v) { return std::tanh(v); }, {}},
      {"Exp", [](double v) { return std::exp(v); }, {}},
      {"Erf", [](double v) { return std::erf(v); }, {}},
      {"Neg", [](double v) { return -v; }, {}},
      {"Abs", [](double v) { return std::abs(v); }, {}},
      {"Floor", [](double v) { return std::floor(v); }, {}},
      {"Ceil", [](double v) { return std::ceil(v); }, {}},
      {"Sin", [](double v) { return std::sin(v); }, {}},
      {"Cos", [](double v) { return std::cos(v); }, {}},
      {"Sign", [](double v) { return v > 0   ? 1.0
                                     : v < 0 ? -1.0
                                             : 0.0; }, {}},
      {"Softplus", [](double v) { return std::log(std::exp(v) + 1); }, {}},
      {"Mish", [](double v) { return v * std::tanh(std::log(1 + std::exp(v))); }, {}},
      {"LeakyRelu",
       [](double v) { return v < 0 ? 0.1 * v : v; },
       {Attribute::ofFloat("alpha", 0.1f)}},
      {"LeakyRelu", [](double v) { return v < 0 ? 0.01 * v : v; }, {}},
      {"Elu",
       [](double v) { return v < 0 ? 2 * (std::exp(v) - 1) : v; },
       {Attribute::ofFloat("alpha", 2)}},
      {"Selu",
       [=](double v) { return v > 0 ? selu_g * v : selu_g * selu_a * (std::exp(v) - 1); },
       {}},
      {"HardSigmoid", [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); }, {}},
      {"HardSwish", [](double v) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }, {}},
      {"Gelu", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, {}},
      {"Gelu",
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       },
       {Attribute::ofString("approximate", "tanh")}},
  };
  for (const Case& c : cases) {
    INFO(c.op);
    KernelCase k(c.op, 20);
    for (const Attribute& a : c.attrs) k.attr(a);
    auto out = k.input(x).run();
    for (int64_t i = 0; i < x.numel(); ++i)
      REQUIRE(out[0].data<float>()[i] == Approx(c.ref(x.data<float>()[i])).margin(1e-6));
  }
  auto sqrt = KernelCase("Sqrt", 13).input(floats({3}, {4, 9, 2})).run();
  CHECK(valuesOf<float>(sqrt[0])[1] == 3);
  auto recip = KernelCase("Reciprocal", 13).input(floats({2}, {4, -0.5f})).run();
  CHECK(valuesOf<float>(recip[0]) == std::vector<float>{0.25f, -2});
  auto lg = KernelCase("Log", 13).input(floats({1}, {1})).run();
  CHECK(valuesOf<float>(lg[0])[0] == 0);
  auto neg = KernelCase("Neg", 13).input(int64s({2}, {3, -4})).run();
  CHECK(valuesOf<int64_t>(neg[0]) == std::vector<int64_t>{-3, 4});
}

TEST_CASE("Round rounds half to even", "[kernels][elementwise]") {
  auto out = KernelCase("Round", 11)
                 .input(floats({7}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f}))
                 .run();
  CHECK(valuesOf<float>(out[0]) == std::vector<float>{0, 2, 2, -0.0f, -2, 2, -3});
}

TEST_CASE("Clip bounds: attributes at 6, optional inputs from 11, ints from 12",
          "[kernels][elementwise]") {
  const HostTensor x = floats({5}, {-3, -1, 0, 1, 3});
  auto v6 = KernelCase("Clip", 6).attrFloat("min", -1.5f).attrFloat("max", 2).input(x).run();
  CHECK(valuesOf<float>(v6[0]) == std::vector<float>{-1.5f, -1, 0, 1, 2});
  auto v6max = KernelCase("Clip", 6).attrFloat("max", 0.5f).input(x).run();
  CHECK(valuesOf<float>(v6max[0]) == std::vector<float>{-3, -1, 0, 0.5f, 0.5f});
  // At opset 11 the attributes are gone; an omitted min leaves the low side open.
  auto v11 = KernelCase("Clip", 11).input(x).omitted().input(floats({}, {1})).run();
  CHECK(valuesOf<float>(v11[0]) == std::vector<float>{-3, -1, 0, 1, 1});
  auto v11both =
      KernelCase("Clip", 11).input(x).input(floats({}, {-1})).input(floats({}, {0})).run();
  CHECK(valuesOf<float>(v11both[0]) == std::vector<float>{-1, -1, 0, 0, 0});
  auto none = KernelCase("Clip", 13).input(x).run();
  CHECK(valuesOf<float>(none[0]) == valuesOf<float>(x));
  auto ints = KernelCase("Clip", 12)
                  .input(int64s({4}, {-9, 0, 5, 9}))
                  .input(int64s({}, {-2}))
                  .input(int64s({}, {6}))
                  .run();
  CHECK(valuesOf<int64_t>(ints[0]) == std::vector<int64_t>{-2, 0, 5, 6});
}

TEST_CASE("Pow with mixed base and exponent dtypes", "[kernels][elementwise]") {
  auto f = KernelCase("Pow", 15).input(floats({3}, {2, 3, 4})).input(int64s({}, {2})).run();
  CHECK(f[0].dtype() == DType::Float);
  CHECK(valuesOf<float>(f[0]) == std::vector<float>{4, 9, 16});
  auto bc = KernelCase("Pow", 15).input(floats({2, 1}, {2, 3})).input(floats({2}, {0.5f, 3})).run();
  CHECK(valuesOf<float>(bc[0])[0] == Approx(std::sqrt(2.0f)));
  CHECK(valuesOf<float>(bc[0])[3] == 27);
  auto i =
      KernelCase("Pow", 15).input(int64s({3}, {2, 3, -2})).input(int64s({3}, {10, 0, 3})).run();
  CHECK(valuesOf<int64_t>(i[0]) == std::vector<int64_t>{1024, 1, -8});
  auto ifl = KernelCase("Pow", 15)
                 .input(tensorOf<int32_t>(DType::Int32, {2}, {4, 9}))
                 .input(floats({}, {0.5f}))
                 .run();
  CHECK(valuesOf<int32_t>(ifl[0]) == std::vector<int32_t>{2, 3});
}

TEST_CASE("Pow of an integer base by a float exponent converts a power beyond int64 as Cast does",
          "[kernels][elementwise]") {
  // 10^30 and -(10^19) are finite but no int64 holds them: Cast's rule (x86's conversion, numpy's
  // astype) gives int64's minimum. 2^40 fits int64 and narrows to int32 by wrapping. A NaN power
  // (a negative base to a fractional exponent) stays 0.
  auto big = KernelCase("Pow", 15)
                 .input(int64s({4}, {10, -10, 3, -4}))
                 .input(floats({4}, {30, 19, 2, 0.5f}))
                 .run();
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  CHECK(valuesOf<int64_t>(big[0]) == std::vector<int64_t>{lowest, lowest, 9, 0});
  auto cast = KernelCase("Cast", 13).attrInt("to", 7).input(floats({1}, {1e30f})).run();
  CHECK(valuesOf<int64_t>(cast[0]) == std::vector<int64_t>{lowest});
  auto narrow = KernelCase("Pow", 15)
                    .input(tensorOf<int32_t>(DType::Int32, {2}, {2, 2}))
                    .input(floats({2}, {40, 31}))
                    .run();
  CHECK(valuesOf<int32_t>(narrow[0]) ==
        std::vector<int32_t>{0, std::numeric_limits<int32_t>::min()});
}

TEST_CASE("Pow by a one-element 2 squares exactly, keeping the broadcast shape",
          "[kernels][elementwise]") {
  std::vector<float> x;
  for (int i = 0; i < 3001; ++i) x.push_back(std::ldexp(static_cast<float>(i) - 1500.5f, i % 40 - 20));
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(-0.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  auto sq = KernelCase("Pow", 15).input(floats({n}, x)).input(floats({1, 1}, {2})).run();
  REQUIRE(sq[0].dims() == std::vector<int64_t>{1, n});
  const std::vector<float> got = valuesOf<float>(sq[0]);
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << x[static_cast<size_t>(i)]);
    // The correctly rounded square, as double arithmetic rounded once gives it.
    const float want = static_cast<float>(static_cast<double>(x[static_cast<size_t>(i)]) *
                                          static_cast<double>(x[static_cast<size_t>(i)]));
    if (std::isnan(want)) CHECK(std::isnan(got[static_cast<size_t>(i)]));
    else CHECK(got[static_cast<size_t>(i)] == want);
  }
  // Other exponents still go through pow.
  auto cube = KernelCase("Pow", 15).input(floats({2}, {2, -3})).input(floats({}, {3})).run();
  CHECK(valuesOf<float>(cube[0]) == std::vector<float>{8, -27});
}

TEST_CASE("variadic Max/Min/Sum/Mean broadcast", "[kernels][elementwise]") {
  const HostTensor a = floats({2, 1}, {1, 5}), b = floats({3}, {4, 2, 6}), c = floats({}, {3});
  auto mx = KernelCase("Max", 13).input(a).input(b).input(c).run();
  CHECK(mx[0].dims() == std::vector<int64_t>{2, 3});
  CHECK(valuesOf<float>(mx[0]) == std::vector<float>{4, 3, 6, 5, 5, 6});
  auto mn = KernelCase("Min", 13).input(a).input(b).input(c).run();
  CHECK(valuesOf<float>(mn[0]) == std::vector<float>{1, 1, 1, 3, 2, 3});
  auto sum = KernelCase("Sum", 13).input(a).input(b).input(c).run();
  CHECK(valuesOf<float>(sum[0]) == std::vector<float>{8, 6, 10, 12, 10, 14});
  auto mean = KernelCase("Mean", 13).input(a).input(b).input(c).run();
  CHECK(valuesOf<float>(mean[0])[0] == Approx(8.0f / 3));
  auto one = KernelCase("Sum", 13).input(b).run();
  CHECK(valuesOf<float>(one[0]) == valuesOf<float>(b));
  auto imax = KernelCase("Max", 13).input(int64s({2}, {1, 9})).input(int64s({2}, {3, 2})).run();
  CHECK(valuesOf<int64_t>(imax[0]) == std::vector<int64_t>{3, 9});
}

TEST_CASE("variadic Max/Min/Sum/Mean over long rows equal a scalar left fold exactly",
          "[kernels][elementwise]") {
  // Rows past the vector widths (the float fold runs through vec::binary), a scalar per row,
  // and NaNs, which Max and Min return when either operand is one.
  HostTensor a = noise({3, 37}, 5), b = noise({37}, 6), c = noise({3, 1}, 7);
  a.mutableData<float>()[40] = std::numeric_limits<float>::quiet_NaN();
  b.mutableData<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int64_t> dout = {3, 37};
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    INFO(op);
    auto out = KernelCase(op, 13).input(a).input(b).input(c).run();
    REQUIRE(out[0].dims() == dout);
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      const auto idx = unravel(i, dout);
      const float x = a.data<float>()[sourceIndex(a.dims(), idx)];
      const float y = b.data<float>()[sourceIndex(b.dims(), idx)];
      const float z = c.data<float>()[sourceIndex(c.dims(), idx)];
      const auto fold = [&](auto f) { return f(f(x, y), z); };
      const auto nanOr = [](float u, float v, float r) {
        return std::isnan(u) || std::isnan(v) ? std::numeric_limits<float>::quiet_NaN() : r;
      };
      float want = 0;
      if (std::string(op) == "Max") {
        want = fold([&](float u, float v) { return nanOr(u, v, u < v ? v : u); });
      } else if (std::string(op) == "Min") {
        want = fold([&](float u, float v) { return nanOr(u, v, v < u ? v : u); });
      } else {
        want = fold([](float u, float v) { return u + v; });
        if (std::string(op) == "Mean") want *= 1.f / 3.f;
      }
      const float got = out[0].data<float>()[i];
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
      } else {
        REQUIRE(got == want);
      }
    }
  }
}

TEST_CASE("Where selects with broadcasting", "[kernels][elementwise]") {
  auto out = KernelCase("Where", 16)
                 .input(bools({2, 1}, {1, 0}))
                 .input(floats({3}, {1, 2, 3}))
                 .input(floats({2, 3}, {-1, -2, -3, -4, -5, -6}))
                 .run();
  CHECK(valuesOf<float>(out[0]) == std::vector<float>{1, 2, 3, -4, -5, -6});
  auto i = KernelCase("Where", 16)
               .input(bools({3}, {1, 0, 1}))
               .input(int64s({}, {7}))
               .input(int64s({}, {8}))
               .run();
  CHECK(valuesOf<int64_t>(i[0]) == std::vector<int64_t>{7, 8, 7});
}

TEST_CASE("PRelu broadcasts the slope", "[kernels][elementwise]") {
  auto out = KernelCase("PRelu", 16)
                 .input(floats({2, 2}, {-1, 2, -3, 4}))
                 .input(floats({2}, {0.5f, 0.25f}))
                 .run();
  CHECK(valuesOf<float>(out[0]) == std::vector<float>{-0.5f, 2, -1.5f, 4});
  // Opset 6: a 1-D slope is per channel (axis 1) even when numpy broadcasting would fail.
  auto v6 = KernelCase("PRelu", 6)
                .input(floats({1, 2, 3}, {-1, -1, -1, -2, -2, 2}))
                .input(floats({2}, {0.5f, 0.25f}))
                .run();
  CHECK(valuesOf<float>(v6[0]) == std::vector<float>{-0.5f, -0.5f, -0.5f, -0.5f, -0.5f, 2});
}

TEST_CASE("Cast between dtypes", "[kernels][elementwise]") {
  const HostTensor x = floats({5}, {-1.7f, 0, 2.9f, 3.5f, 255});
  auto cast = [&](const HostTensor& in, DType to) {
    return KernelCase("Cast", 13).attrInt("to", static_cast<int64_t>(to)).input(in).run()[0];
  };
  CHECK(valuesOf<int32_t>(cast(x, DType::Int32)) == std::vector<int32_t>{-1, 0, 2, 3, 255});
  CHECK(valuesOf<int64_t>(cast(x, DType::Int64)) == std::vector<int64_t>{-1, 0, 2, 3, 255});
  CHECK(valuesOf<uint8_t>(cast(x, DType::Bool)) == std::vector<uint8_t>{1, 0, 1, 1, 1});
  CHECK(valuesOf<uint8_t>(cast(x, DType::UInt8)) == std::vector<uint8_t>{255, 0, 2, 3, 255});
  CHECK(valuesOf<double>(cast(x, DType::Double))[2] == Approx(2.9));
  const HostTensor h = cast(int64s({2}, {3, -2048}), DType::Float16);
  CHECK(kernels::halfToFloat(valuesOf<uint16_t>(h)[1]) == -2048);
  CHECK(valuesOf<float>(cast(h, DType::Float)) == std::vector<float>{3, -2048});
  CHECK(valuesOf<float>(cast(bools({2}, {1, 0}), DType::Float)) == std::vector<float>{1, 0});
  const HostTensor bf = cast(x, DType::BFloat16);
  CHECK(kernels::bfloat16ToFloat(valuesOf<uint16_t>(bf)[4]) == 255);
  // Cast-1 names the target type as a string.
  auto v1 = KernelCase("Cast", 1).attrString("to", "INT64").input(x).run();
  CHECK(v1[0].dtype() == DType::Int64);
  auto like = KernelCase("CastLike", 15).input(x).input(int64s({1}, {0})).run();
  CHECK(valuesOf<int64_t>(like[0])[2] == 2);
}

TEST_CASE("Identity and Dropout alias their input", "[kernels][elementwise]") {
  const HostTensor x = iota({2, 3});
  auto id = KernelCase("Identity", 16).input(x).run();
  CHECK(id[0].raw() == x.raw());
  auto d = KernelCase("Dropout", 13, 2).input(x).input(floats({}, {0.3f})).run();
  CHECK(d[0].raw() == x.raw());
  CHECK(valuesOf<uint8_t>(d[1]) == std::vector<uint8_t>(6, 1));
  auto zero =
      KernelCase("Dropout", 13, 2).input(x).input(floats({}, {0})).input(bools({}, {1})).run();
  CHECK(valuesOf<float>(zero[0]) == valuesOf<float>(x));
  // Training mode draws numpy's RandomState(seed).uniform(): 0.5488, 0.7152, 0.6028, 0.5449 for
  // seed 0, so ratio 0.6 keeps elements 1 and 2, scaled by 1 / (1 - 0.6).
  auto train = KernelCase("Dropout", 13, 2)
                   .attrInt("seed", 0)
                   .input(floats({4}, {1, 1, 1, 1}))
                   .input(floats({}, {0.6f}))
                   .input(bools({}, {1}))
                   .run();
  const std::vector<float> got = valuesOf<float>(train[0]);
  CHECK(got[0] == 0);
  CHECK(got[1] == Approx(2.5));
  CHECK(got[2] == Approx(2.5));
  CHECK(got[3] == 0);
  CHECK(valuesOf<uint8_t>(train[1]) == std::vector<uint8_t>{0, 1, 1, 0});
}

// ---------------------------------------------------------------------------------------------
// Reductions

namespace {

// Reference reduction over `axes` of a float tensor; keepdims dims.
std::vector<double> referenceReduce(const HostTensor& x, const std::vector<int64_t>& axes,
                                    const std::string& op) {
  std::vector<bool> red(x.rank(), axes.empty());
  for (int64_t a : axes)
    red[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(x.rank()) : a)] = true;
  std::vector<int64_t> odims;
  for (size_t i = 0; i < x.rank(); ++i) odims.push_back(red[i] ? 1 : x.dim(i));
  int64_t on = 1;
  for (int64_t d : odims) on *= d;
  std::vector<std::vector<double>> groups(static_cast<size_t>(on));
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, x.dims());
    int64_t o = 0;
    for (size_t d = 0; d < x.rank(); ++d) o = o * odims[d] + (red[d] ? 0 : idx[d]);
    groups[static_cast<size_t>(o)].push_back(x.data<float>()[i]);
  }
  std::vector<double> out;
  for (const auto& g : groups) {
    double s = 0, p = 1, mx = -INFINITY, mn = INFINITY, l1 = 0, sq = 0, se = 0;
    for (double v : g) {
      s += v;
      p *= v;
      mx = std::max(mx, v);
      mn = std::min(mn, v);
      l1 += std::abs(v);
      sq += v * v;
      se += std::exp(v);
    }
    if (op == "ReduceSum") out.push_back(s);
    else if (op == "ReduceMean") out.push_back(s / static_cast<double>(g.size()));
    else if (op == "ReduceProd") out.push_back(p);
    else if (op == "ReduceMax") out.push_back(mx);
    else if (op == "ReduceMin") out.push_back(mn);
    else if (op == "ReduceL1") out.push_back(l1);
    else if (op == "ReduceL2") out.push_back(std::sqrt(sq));
    else if (op == "ReduceSumSquare") out.push_back(sq);
    else if (op == "ReduceLogSum") out.push_back(std::log(s));
    else out.push_back(std::log(se));
  }
  return out;
}

}  // namespace

TEST_CASE("Reduce* over every axis layout match a direct reference", "[kernels][reduce]") {
  const HostTensor x = noise({3, 4, 5, 2}, 11);
  HostTensor pos(DType::Float, x.dims());  // positive values for LogSum
  for (int64_t i = 0; i < x.numel(); ++i)
    pos.mutableData<float>()[i] = std::abs(x.data<float>()[i]) + 0.1f;
  const std::vector<std::vector<int64_t>> axis_sets = {{0},    {1},    {3},          {-1}, {0, 2},
                                                       {1, 2}, {0, 3}, {0, 1, 2, 3}, {}};
  const char* ops[] = {"ReduceSum",    "ReduceMean",     "ReduceProd", "ReduceMax",
                       "ReduceMin",    "ReduceL1",       "ReduceL2",   "ReduceSumSquare",
                       "ReduceLogSum", "ReduceLogSumExp"};
  for (const char* op : ops) {
    const HostTensor& in = std::string(op) == "ReduceLogSum" ? pos : x;
    for (const auto& axes : axis_sets) {
      INFO(op << " axes " << axes.size());
      // Opset 11: axes attribute (an empty attribute means all axes).
      KernelCase k(op, 11);
      if (!axes.empty()) k.attrInts("axes", axes);
      auto out = k.input(in).run();
      const std::vector<double> ref = referenceReduce(in, axes, op);
      REQUIRE(out[0].numel() == static_cast<int64_t>(ref.size()));
      REQUIRE(out[0].rank() == 4);  // keepdims defaults to 1
      for (size_t i = 0; i < ref.size(); ++i)
        REQUIRE(out[0].data<float>()[i] == Approx(ref[i]).epsilon(1e-4).margin(1e-5));
      // Opset 18: axes input, same result.
      KernelCase k18(op, 18);
      k18.input(in);
      if (!axes.empty()) k18.input(int64s({static_cast<int64_t>(axes.size())}, axes));
      auto out18 = k18.run();
      REQUIRE(valuesOf<float>(out18[0]) == valuesOf<float>(out[0]));
    }
  }
}

TEST_CASE("ReduceSum: attribute axes before 13, input axes after", "[kernels][reduce]") {
  const HostTensor x = iota({2, 3});
  auto v11 =
      KernelCase("ReduceSum", 11).attrInts("axes", {1}).attrInt("keepdims", 0).input(x).run();
  CHECK(v11[0].dims() == std::vector<int64_t>{2});
  CHECK(valuesOf<float>(v11[0]) == std::vector<float>{3, 12});
  auto v13 =
      KernelCase("ReduceSum", 13).attrInt("keepdims", 0).input(x).input(int64s({1}, {0})).run();
  CHECK(valuesOf<float>(v13[0]) == std::vector<float>{3, 5, 7});
  auto all = KernelCase("ReduceSum", 13).input(x).run();
  CHECK(all[0].dims() == std::vector<int64_t>{1, 1});
  CHECK(valuesOf<float>(all[0]) == std::vector<float>{15});
  auto noop = KernelCase("ReduceSum", 13)
                  .attrInt("noop_with_empty_axes", 1)
                  .input(x)
                  .input(int64s({0}, {}))
                  .run();
  CHECK(noop[0].dims() == x.dims());
  CHECK(valuesOf<float>(noop[0]) == valuesOf<float>(x));
  auto ints = KernelCase("ReduceSum", 13)
                  .attrInt("keepdims", 0)
                  .input(int64s({2, 2}, {1LL << 40, 1, 2, 3}))
                  .input(int64s({1}, {1}))
                  .run();
  CHECK(valuesOf<int64_t>(ints[0]) == std::vector<int64_t>{(1LL << 40) + 1, 5});
  auto imean = KernelCase("ReduceMean", 13)
                   .attrInts("axes", {0})
                   .input(tensorOf<int32_t>(DType::Int32, {2}, {3, 4}))
                   .run();
  CHECK(valuesOf<int32_t>(imean[0]) == std::vector<int32_t>{3});
  auto empty = KernelCase("ReduceMax", 18)
                   .attrInt("keepdims", 0)
                   .input(floats({2, 0}, {}))
                   .input(int64s({1}, {1}))
                   .run();
  CHECK(valuesOf<float>(empty[0]) == std::vector<float>(2, -INFINITY));
}

TEST_CASE("ArgMax / ArgMin with keepdims and select_last_index", "[kernels][reduce]") {
  const HostTensor x = floats({2, 3}, {1, 3, 3, 5, 2, 5});
  auto a = KernelCase("ArgMax", 13).attrInt("axis", 1).input(x).run();
  CHECK(a[0].dims() == std::vector<int64_t>{2, 1});
  CHECK(valuesOf<int64_t>(a[0]) == std::vector<int64_t>{1, 0});
  auto last = KernelCase("ArgMax", 13)
                  .attrInt("axis", -1)
                  .attrInt("select_last_index", 1)
                  .attrInt("keepdims", 0)
                  .input(x)
                  .run();
  CHECK(last[0].dims() == std::vector<int64_t>{2});
  CHECK(valuesOf<int64_t>(last[0]) == std::vector<int64_t>{2, 2});
  auto mn = KernelCase("ArgMin", 13).input(x).run();
  CHECK(valuesOf<int64_t>(mn[0]) == std::vector<int64_t>{0, 1, 0});
}

TEST_CASE("Softmax: opset 11 flattens at axis, opset 13 normalises one axis", "[kernels][reduce]") {
  const HostTensor x = noise({2, 3, 4}, 5);
  auto v11 = KernelCase("Softmax", 11).input(x).run();  // axis 1: over the 12 trailing values
  auto v13 = KernelCase("Softmax", 13).attrInt("axis", 1).input(x).run();  // over the 3 values
  const float* p = x.data<float>();
  for (int64_t b = 0; b < 2; ++b) {
    double s = 0;
    for (int64_t i = 0; i < 12; ++i) s += std::exp(p[b * 12 + i]);
    for (int64_t i = 0; i < 12; ++i)
      REQUIRE(v11[0].data<float>()[b * 12 + i] == Approx(std::exp(p[b * 12 + i]) / s));
    for (int64_t k = 0; k < 4; ++k) {
      double s3 = 0;
      for (int64_t c = 0; c < 3; ++c) s3 += std::exp(p[b * 12 + c * 4 + k]);
      for (int64_t c = 0; c < 3; ++c)
        REQUIRE(v13[0].data<float>()[b * 12 + c * 4 + k] ==
                Approx(std::exp(p[b * 12 + c * 4 + k]) / s3));
    }
  }
  auto ls = KernelCase("LogSoftmax", 13).input(floats({3}, {1, 2, 3})).run();
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(valuesOf<float>(ls[0])[2] == Approx(3 - lse));
  auto dflt =
      KernelCase("Softmax", 13).input(floats({2, 2}, {0, 0, 1000, 1000})).run();  // axis -1, stable
  CHECK(valuesOf<float>(dflt[0]) == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
}

TEST_CASE("CumSum exclusive and reverse", "[kernels][reduce]") {
  const HostTensor x = floats({5}, {1, 2, 3, 4, 5});
  const HostTensor ax = tensorOf<int32_t>(DType::Int32, {}, {0});
  CHECK(valuesOf<float>(KernelCase("CumSum", 14).input(x).input(ax).run()[0]) ==
        std::vector<float>{1, 3, 6, 10, 15});
  CHECK(valuesOf<float>(
            KernelCase("CumSum", 14).attrInt("exclusive", 1).input(x).input(ax).run()[0]) ==
        std::vector<float>{0, 1, 3, 6, 10});
  CHECK(
      valuesOf<float>(KernelCase("CumSum", 14).attrInt("reverse", 1).input(x).input(ax).run()[0]) ==
      std::vector<float>{15, 14, 12, 9, 5});
  CHECK(valuesOf<float>(KernelCase("CumSum", 14)
                            .attrInt("reverse", 1)
                            .attrInt("exclusive", 1)
                            .input(x)
                            .input(ax)
                            .run()[0]) == std::vector<float>{14, 12, 9, 5, 0});
  auto m = KernelCase("CumSum", 14)
               .input(floats({2, 3}, {1, 2, 3, 4, 5, 6}))
               .input(int64s({}, {0}))
               .run();
  CHECK(valuesOf<float>(m[0]) == std::vector<float>{1, 2, 3, 5, 7, 9});
}

TEST_CASE("TopK: k input, largest/smallest, ties by lower index", "[kernels][reduce]") {
  const HostTensor x = floats({2, 4}, {0, 1, 2, 3, 3, 1, 3, 0});
  auto top = KernelCase("TopK", 11, 2).input(x).input(int64s({1}, {3})).run();
  CHECK(top[0].dims() == std::vector<int64_t>{2, 3});
  CHECK(valuesOf<float>(top[0]) == std::vector<float>{3, 2, 1, 3, 3, 1});
  CHECK(valuesOf<int64_t>(top[1]) == std::vector<int64_t>{3, 2, 1, 0, 2, 1});
  auto small =
      KernelCase("TopK", 11, 2).attrInt("largest", 0).input(x).input(int64s({1}, {2})).run();
  CHECK(valuesOf<int64_t>(small[1]) == std::vector<int64_t>{0, 1, 3, 1});
  auto axis0 = KernelCase("TopK", 11, 2).attrInt("axis", 0).input(x).input(int64s({1}, {1})).run();
  CHECK(valuesOf<float>(axis0[0]) == std::vector<float>{3, 1, 3, 3});
  CHECK(valuesOf<int64_t>(axis0[1]) == std::vector<int64_t>{1, 0, 1, 0});
  auto v1 = KernelCase("TopK", 1, 2).attrInt("k", 1).input(x).run();
  CHECK(valuesOf<int64_t>(v1[1]) == std::vector<int64_t>{3, 0});
}

TEST_CASE("multi-threaded kernels match single-threaded ones", "[kernels][elementwise]") {
  const HostTensor a = noise({64, 3, 1000}, 3), b = noise({3, 1}, 4), row = noise({300000}, 5);
  // Builds the same case twice (KernelCase is move-only) and compares 1 thread with 3.
  auto both = [](const std::function<void(KernelCase&)>& setup, const std::string& op,
                 int64_t opset) {
    KernelCase k1(op, opset), k3(op, opset);
    setup(k1);
    setup(k3);
    auto r1 = k1.threads(1).run(), r3 = k3.threads(3).run();
    REQUIRE(r1[0].dims() == r3[0].dims());
    REQUIRE(valuesOf<float>(r1[0]) == valuesOf<float>(r3[0]));
  };
  both([&](KernelCase& k) { k.input(a).input(b); }, "Add", 14);
  both([&](KernelCase& k) { k.input(row).input(row); }, "Mul", 14);
  both([&](KernelCase& k) { k.input(row); }, "Relu", 14);
  for (std::vector<int64_t> axes : {std::vector<int64_t>{2}, {0}, {0, 2}, {1}}) {
    both([&](KernelCase& k) {
      k.input(a).input(int64s({static_cast<int64_t>(axes.size())}, axes));
    }, "ReduceSum", 13);
  }
  both([&](KernelCase& k) { k.attrInt("axis", 1).input(a); }, "Softmax", 13);
  both([&](KernelCase& k) {
    k.input(bools({3, 1}, {1, 0, 1})).input(a).input(floats({}, {0}));
  }, "Where", 16);
}
