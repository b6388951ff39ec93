// The vectorised memory-bound kernels (libkernels/cpu/vec_kernels.h and the kernels that use
// them) against naive references written here, in double precision where rounding matters:
// every ISA this CPU has is forced in turn, on odd sizes (1, 7, 17, 1000003 elements), every
// broadcast pattern in both operand orders, softmax on large magnitudes, and pools with padding,
// strides, dilations and ceil_mode.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../libkernels/cpu/vec_kernels.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"
#include "random_values.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;

std::vector<vec::Isa> isasHere() {
  std::vector<vec::Isa> isas;
  for (vec::Isa i : {vec::Isa::Portable, vec::Isa::Avx2, vec::Isa::Avx512})
    if (i <= vec::bestSupportedIsa()) isas.push_back(i);
  return isas;
}

struct ForcedIsa {
  explicit ForcedIsa(vec::Isa isa) { vec::forceIsa(isa); }
  ~ForcedIsa() { vec::forceIsa(std::nullopt); }
};

// Distance in representable floats; NaN against NaN is 0, NaN against a number is huge.
int64_t ulpDistance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

HostTensor floatTensor(std::vector<int64_t> dims, const std::vector<float>& v) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == v.size());
  if (!v.empty()) std::memcpy(t.mutableRaw(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> valuesOf(const HostTensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class PlainAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return HostTensor(dtype, dims);
  }
};

// Runs one node of the global registry's kernel (every built-in kernel) on `inputs`.
std::vector<HostTensor> runNode(const std::string& op, int64_t opset,
                                const std::vector<HostTensor>& inputs,
                                std::vector<Attribute> attrs = {}, int threads = 1) {
  Graph g("t");
  Graph::NodeSpec spec;
  spec.op_type = op;
  spec.name = "node_" + op;
  std::vector<const HostTensor*> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueType vt;
    vt.dtype = inputs[i].dtype();
    spec.inputs.push_back(g.addInput("in" + std::to_string(i), vt));
    args.push_back(&inputs[i]);
  }
  spec.output_names = {"out"};
  spec.attributes = std::move(attrs);
  Node* node = g.createNode(std::move(spec));
  const KernelInfo* info = KernelRegistry::global().find("", op, opset);
  REQUIRE(info != nullptr);
  PlainAllocator plain;
  KernelContext ctx(*node, opset, args, plain, threads);
  info->fn(ctx);
  return ctx.outputs();
}

void requireClose(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      INFO("element " << i);
      REQUIRE(std::isnan(got[i]));
      continue;
    }
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i])) {
      FAIL("element " << i << ": got " << got[i] << ", want " << want[i]);
    }
  }
}

const std::vector<int64_t> kOddSizes = {1, 7, 17, 1000003};

// ---------------------------------------------------------------------------------------------
// Transcendentals

struct UlpCase {
  vec::Unary op;
  double (*ref)(double);
  int64_t max_ulp;
};

double sigmoidRef(double x) { return 1 / (1 + std::exp(-x)); }
double expRef(double x) { return std::exp(x); }
double tanhRef(double x) { return std::tanh(x); }
double erfRef(double x) { return std::erf(x); }

std::vector<float> transcendentalInputs() {
  std::vector<float> v = randomFloats(200000, 11, -12, 12);
  const std::vector<float> wide = randomFloats(50000, 12, -104, 89);
  v.insert(v.end(), wide.begin(), wide.end());
  for (float x = -1e-3f; x < 1e-3f; x += 1.7e-6f) v.push_back(x);  // near zero: relative error
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 0.625f, -0.625f, 0.927734375f, 88.72f,
                  88.73f, -87.3f, -103.9f, -150.0f, 200.0f, inf, -inf})
    v.push_back(x);
  return v;
}

}  // namespace

TEST_CASE("vectorised exp, sigmoid, tanh and erf stay within a few ulp of double precision",
          "[kernels][vectorized]") {
  const std::vector<float> x = transcendentalInputs();
  const UlpCase cases[] = {
      {vec::Unary::Exp, expRef, 2},
      {vec::Unary::Sigmoid, sigmoidRef, 3},
      {vec::Unary::Tanh, tanhRef, 2},
      {vec::Unary::Erf, erfRef, 2},
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (const UlpCase& c : cases) {
      std::vector<float> y(x.size());
      vec::unary(c.op, x.data(), y.data(), static_cast<int64_t>(x.size()));
      int64_t worst = 0;
      float worst_x = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = static_cast<float>(c.ref(static_cast<double>(x[i])));
        const int64_t d = ulpDistance(y[i], want);
        if (d > worst) {
          worst = d;
          worst_x = x[i];
        }
      }
      INFO(vec::isaName(isa) << " op " << static_cast<int>(c.op) << ": " << worst
                             << " ulp at x = " << worst_x);
      CHECK(worst <= c.max_ulp);
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (vec::Unary op : {vec::Unary::Exp, vec::Unary::Sigmoid, vec::Unary::Tanh, vec::Unary::Erf}) {
      float y = 0;
      vec::unary(op, &nan, &y, 1);
      CHECK(std::isnan(y));
    }
  }
}

TEST_CASE("vectorised sqrt, reciprocal, neg and abs give the scalar kernels' bits, every ISA",
          "[kernels][vectorized]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Odd length: every ISA's tail (partial vector) runs too.
  std::vector<float> x = randomFloats(1003, 41, -1e3f, 1e3f);
  const float specials[] = {0.0f, -0.0f, inf, -inf, nan, -nan, 1e-40f, -1e-40f, 4.0f, 2.0f,
                            -1.0f, 3.4e38f, 1.2e-38f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7] = specials[i];
  struct Exact {
    vec::Unary op;
    float (*scalar)(float);
  };
  const Exact cases[] = {
      {vec::Unary::Sqrt, [](float v) { return std::sqrt(v); }},
      {vec::Unary::Reciprocal, [](float v) { return 1.0f / v; }},
      {vec::Unary::Neg, [](float v) { return -v; }},
      {vec::Unary::Abs, [](float v) { return v < 0 ? -v : v; }},
  };
  const auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (const Exact& c : cases) {
      std::vector<float> y(x.size());
      vec::unary(c.op, x.data(), y.data(), static_cast<int64_t>(x.size()));
      size_t differ = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = c.scalar(x[i]);
        // NaNs compare by being NaN: their payload is not part of any kernel's contract.
        if (std::isnan(want) ? !std::isnan(y[i]) : bits(y[i]) != bits(want)) ++differ;
      }
      INFO(vec::isaName(isa) << " op " << static_cast<int>(c.op));
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("vec::binary computes what the scalar kernels compute, bit for bit, every ISA",
          "[kernels][vectorized]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = randomFloats(1003, 31, -5, 5), b = randomFloats(1003, 32, -5, 5);
  const float specials[] = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -3.0f, 2.0f};
  for (size_t i = 0; i < 64; ++i) {
    a[i] = specials[i % 8];
    b[i] = specials[(i / 8) % 8];
  }
  auto scalar = [](vec::Binary op, float x, float z) -> float {
    switch (op) {
      case vec::Binary::Add: return x + z;
      case vec::Binary::Sub: return x - z;
      case vec::Binary::Mul: return x * z;
      case vec::Binary::Div: return x / z;
      case vec::Binary::Max:
        return std::isnan(x) || std::isnan(z) ? std::numeric_limits<float>::quiet_NaN()
                                              : (x < z ? z : x);
      case vec::Binary::Min:
        return std::isnan(x) || std::isnan(z) ? std::numeric_limits<float>::quiet_NaN()
                                              : (z < x ? z : x);
      case vec::Binary::PRelu: return x < 0 ? x * z : x;
    }
    return 0;
  };
  auto same = [](float x, float z) {
    uint32_t bx, bz;
    std::memcpy(&bx, &x, 4);
    std::memcpy(&bz, &z, 4);
    return bx == bz || (std::isnan(x) && std::isnan(z));
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (vec::Binary op : {vec::Binary::Add, vec::Binary::Sub, vec::Binary::Mul, vec::Binary::Div,
                           vec::Binary::Max, vec::Binary::Min, vec::Binary::PRelu}) {
      for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{33}, int64_t{1003}}) {
        std::vector<float> y(static_cast<size_t>(n));
        for (int form = 0; form < 3; ++form) {  // vector-vector, vector-scalar, scalar-vector
          const float av = -2.5f, bv = nan;
          const float* pa = form == 2 ? nullptr : a.data();
          const float* pb = form == 1 ? nullptr : b.data();
          for (float bs : {bv, -0.0f, 3.0f}) {
            vec::binary(op, pa, av, pb, bs, y.data(), n);
            for (int64_t i = 0; i < n; ++i) {
              const float x = pa ? a[static_cast<size_t>(i)] : av;
              const float z = pb ? b[static_cast<size_t>(i)] : bs;
              INFO(vec::isaName(isa) << " op " << static_cast<int>(op) << " form " << form
                                     << " n " << n << " i " << i << ": " << x << ", " << z);
              REQUIRE(same(y[static_cast<size_t>(i)], scalar(op, x, z)));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("unary kernels match double references on odd sizes, every ISA, 1 and 2 threads",
          "[kernels][vectorized]") {
  struct Case {
    std::string op;
    int64_t opset;
    std::vector<Attribute> attrs;
    double (*ref)(double);
  };
  const std::vector<Case> cases = {
      {"Relu", 14, {}, [](double v) { return v > 0 ? v : 0.0; }},
      {"LeakyRelu", 16, {Attribute::ofFloat("alpha", 0.1f)},
       [](double v) { return v < 0 ? v * static_cast<double>(0.1f) : v; }},
      {"Sigmoid", 13, {}, sigmoidRef},
      {"Tanh", 13, {}, tanhRef},
      {"Exp", 13, {}, expRef},
      {"Erf", 13, {}, erfRef},
      {"Gelu", 20, {}, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"Gelu", 20, {Attribute::ofString("approximate", "tanh")},
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       }},
      {"Elu", 6, {Attribute::ofFloat("alpha", 0.5f)},
       [](double v) { return v < 0 ? 0.5 * std::expm1(v) : v; }},
      {"Selu", 6, {},
       [](double v) {
         const double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
         return v > 0 ? g * v : g * a * std::expm1(v);
       }},
      {"HardSigmoid", 6, {}, [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); }},
      {"HardSwish", 14, {}, [](double v) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }},
      {"Softsign", 1, {}, [](double v) { return v / (1 + std::abs(v)); }},
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t n : kOddSizes) {
      const std::vector<float> x = randomFloats(static_cast<size_t>(n), 3, -9, 9);
      const HostTensor in = floatTensor({n}, x);
      for (const Case& c : cases) {
        for (int threads : {1, 2}) {
          INFO(vec::isaName(isa) << " " << c.op << " n=" << n << " threads=" << threads);
          const std::vector<float> got = valuesOf(runNode(c.op, c.opset, {in}, c.attrs, threads)[0]);
          std::vector<double> want(x.size());
          for (size_t i = 0; i < x.size(); ++i) want[i] = c.ref(x[i]);
          requireClose(got, want, 4e-6, 2e-7);
        }
      }
    }
  }
}

TEST_CASE("binary arithmetic hits every broadcast pattern in both operand orders",
          "[kernels][vectorized]") {
  struct Shapes {
    std::vector<int64_t> a, b;
  };
  const std::vector<Shapes> patterns = {
      {{1000003}, {1000003}},         // same shape
      {{17}, {17}},
      {{2, 3, 7, 5}, {}},             // scalar
      {{2, 3, 7, 5}, {1}},
      {{2, 17, 9, 7}, {17, 1, 1}},    // per channel, NCHW bias
      {{1, 64, 56, 56}, {1, 64, 1, 1}},
      {{3, 5, 17}, {17}},             // last-axis vector [batch, seq, hidden] + [hidden]
      {{2, 7, 1000}, {1000}},
      {{2, 1, 5, 1}, {3, 1, 6}},      // general N-D: both sides broadcast
      {{4, 1, 7}, {1, 3, 1}},
  };
  const std::vector<std::pair<std::string, double (*)(double, double)>> ops = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
  };
  auto numel = [](const std::vector<int64_t>& d) {
    int64_t n = 1;
    for (int64_t v : d) n *= v;
    return n;
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (const Shapes& s : patterns) {
      for (int order = 0; order < 2; ++order) {
        const std::vector<int64_t>& da = order ? s.b : s.a;
        const std::vector<int64_t>& db = order ? s.a : s.b;
        const std::vector<float> va = randomFloats(static_cast<size_t>(numel(da)), 5, 0.5f, 3);
        const std::vector<float> vb = randomFloats(static_cast<size_t>(numel(db)), 6, 0.5f, 3);
        // Output dims and each operand's index per output element, the long way.
        const size_t rank = std::max(da.size(), db.size());
        std::vector<int64_t> out(rank);
        auto dimOf = [&](const std::vector<int64_t>& d, size_t i) {
          const size_t lead = rank - d.size();
          return i < lead ? int64_t{1} : d[i - lead];
        };
        for (size_t i = 0; i < rank; ++i) out[i] = std::max(dimOf(da, i), dimOf(db, i));
        const int64_t total = numel(out);
        auto index = [&](const std::vector<int64_t>& d, int64_t flat) {
          int64_t idx = 0, stride = 1;
          for (size_t i = rank; i-- > 0;) {
            const int64_t coord = flat % out[i];
            flat /= out[i];
            const int64_t dim = dimOf(d, i);
            if (dim != 1) idx += coord * stride;
            stride *= dim;
          }
          return idx;
        };
        for (const auto& [op, f] : ops) {
          for (int threads : {1, 2}) {
            INFO(vec::isaName(isa) << " " << op << " " << formatDims(da) << " with "
                                   << formatDims(db) << " threads=" << threads);
            const HostTensor r =
                runNode(op, 14, {floatTensor(da, va), floatTensor(db, vb)}, {}, threads)[0];
            REQUIRE(r.dims() == out);
            const float* got = r.data<float>();
            for (int64_t i = 0; i < total; ++i) {
              // One correctly rounded float operation: double then float is exact.
              const float want = static_cast<float>(f(va[index(da, i)], vb[index(db, i)]));
              if (got[i] != want) FAIL("element " << i << ": got " << got[i] << ", want " << want);
            }
          }
        }
      }
    }
  }
}

namespace {

// Softmax (or LogSoftmax) of x [outer][n][inner] along n, in double.
std::vector<double> softmaxRef(const std::vector<float>& x, int64_t outer, int64_t n,
                               int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * n + j) * inner + i); };
      double m = -INFINITY;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(x[at(j)]));
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::exp(x[at(j)] - m);
      for (int64_t j = 0; j < n; ++j)
        y[at(j)] = log ? x[at(j)] - m - std::log(s) : std::exp(x[at(j)] - m) / s;
    }
  return y;
}

}  // namespace

TEST_CASE("softmax and log-softmax are stable on large magnitudes, last and middle axes",
          "[kernels][vectorized]") {
  struct Shape {
    int64_t outer, n, inner;
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (Shape s : {Shape{1, 1, 1}, Shape{3, 7, 1}, Shape{5, 17, 1}, Shape{2, 1000, 1},
                    Shape{1, 1000003, 1}, Shape{2, 7, 17}, Shape{3, 5, 1}, Shape{1, 17, 7}}) {
      for (float magnitude : {3.0f, 1000.0f, 60000.0f}) {
        const std::vector<float> x = randomFloats(static_cast<size_t>(s.outer * s.n * s.inner), 8,
                                                  -magnitude, magnitude);
        for (bool log : {false, true}) {
          for (int threads : {1, 2}) {
            INFO(vec::isaName(isa) << (log ? " LogSoftmax" : " Softmax") << " [" << s.outer << ","
                                   << s.n << "," << s.inner << "] magnitude " << magnitude
                                   << " threads=" << threads);
            const std::vector<int64_t> dims = {s.outer, s.n, s.inner};
            const HostTensor r = runNode(log ? "LogSoftmax" : "Softmax", 13,
                                         {floatTensor(dims, x)}, {Attribute::ofInt("axis", 1)},
                                         threads)[0];
            const std::vector<float> got = valuesOf(r);
            for (float v : got) REQUIRE(std::isfinite(v));
            // LogSoftmax of values ~6e4 apart: relative to the value, float's own spacing.
            requireClose(got, softmaxRef(x, s.outer, s.n, s.inner, log), 2e-6, 1e-6);
          }
        }
      }
    }
  }
}

// The softmaxes take exp(x - max) as 0 below x - max = -87, where the exponential is under
// 1.7e-38 and the multiply that made it underflowed (slowly: a microcode assist on this
// machine): a padding mask's -10000 gives exact zeros, and the rest keep their values.
TEST_CASE("softmaxes give exact zeros where x - max is below -87 and keep the rest",
          "[kernels][vectorized]") {
  // Max 0; e^-84 = 3.3e-37 stays (a normal float, also once divided by the sum of about 8);
  // e^-90 = 8.2e-40 (a subnormal) and a masked score are 0; the others in [-5, 0].
  const int64_t n = 37;
  std::vector<float> x = randomFloats(static_cast<size_t>(n), 12, -5, 0);
  x[0] = 0.f, x[5] = -84.f, x[17] = -90.f, x[33] = -10000.f;
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v));
  auto check = [&](const std::vector<float>& got) {
    REQUIRE(got[17] == 0.f);
    REQUIRE(got[33] == 0.f);
    REQUIRE(std::isnormal(got[5]));
    REQUIRE(got[5] == Approx(std::exp(-84.0) / total).epsilon(1e-5));
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] > -80.f) REQUIRE(got[i] == Approx(std::exp(double{x[i]}) / total).epsilon(1e-5));
    }
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    INFO(vec::isaName(isa));
    {
      INFO("Softmax, last axis");
      check(valuesOf(runNode("Softmax", 13, {floatTensor({1, n}, x)}, {}, 1)[0]));
    }
    {
      INFO("Softmax, a middle axis (a column per inner index)");
      std::vector<float> columns;
      for (float v : x) columns.insert(columns.end(), {v, v});
      const std::vector<float> got = valuesOf(
          runNode("Softmax", 13, {floatTensor({1, n, 2}, columns)}, {Attribute::ofInt("axis", 1)},
                  1)[0]);
      std::vector<float> first;
      for (int64_t i = 0; i < n; ++i) first.push_back(got[2 * i]);
      check(first);
    }
    {
      INFO("Attention's row: the scores plus a mask, then softmax in place");
      std::vector<float> scores(x.size(), 0.f);
      vec::softmaxRowAdd(scores.data(), n, x.data(), false);
      check(scores);
    }
    {
      INFO("Attention's tiles: the online softmax's exponentials, its sum returned");
      std::vector<float> row = x;
      float running_max = -std::numeric_limits<float>::infinity();
      const float sum = vec::onlineSoftmaxRow(row.data(), n, nullptr, false, &running_max);
      for (float& v : row) v /= sum;
      check(row);
    }
  }
}

TEST_CASE("LayerNormalization, BatchNormalization and InstanceNormalization match double "
          "references",
          "[kernels][vectorized]") {
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t cols : {1, 7, 17, 1000}) {
      for (float offset : {0.0f, 1000.0f}) {  // a large mean with a small spread: stability
        const int64_t rows = 5;
        std::vector<float> x = randomFloats(static_cast<size_t>(rows * cols), 9, -1, 1);
        for (float& v : x) v += offset;
        const std::vector<float> scale = randomFloats(static_cast<size_t>(cols), 10, 0.5f, 2);
        const std::vector<float> bias = randomFloats(static_cast<size_t>(cols), 11, -1, 1);
        for (bool with_bias : {false, true}) {
          std::vector<HostTensor> in = {floatTensor({rows, cols}, x), floatTensor({cols}, scale)};
          if (with_bias) in.push_back(floatTensor({cols}, bias));
          INFO(vec::isaName(isa) << " LayerNorm cols=" << cols << " offset=" << offset);
          const std::vector<float> got = valuesOf(runNode("LayerNormalization", 17, in)[0]);
          std::vector<double> want(x.size());
          for (int64_t r = 0; r < rows; ++r) {
            double m = 0, v = 0;
            for (int64_t c = 0; c < cols; ++c) m += x[static_cast<size_t>(r * cols + c)];
            m /= cols;
            for (int64_t c = 0; c < cols; ++c) {
              const double d = x[static_cast<size_t>(r * cols + c)] - m;
              v += d * d;
            }
            v /= cols;
            for (int64_t c = 0; c < cols; ++c) {
              const size_t i = static_cast<size_t>(r * cols + c);
              want[i] = (x[i] - m) / std::sqrt(v + 1e-5) * scale[static_cast<size_t>(c)] +
                        (with_bias ? bias[static_cast<size_t>(c)] : 0.0);
            }
          }
          // The float input itself carries 6e-5 of rounding at offset 1000.
          requireClose(got, want, 1e-5, offset > 0 ? 2e-3 : 1e-5);
        }
      }
    }

    const int64_t n = 2, c = 3, h = 7, w = 5;
    const std::vector<float> x = randomFloats(static_cast<size_t>(n * c * h * w), 12, -3, 3);
    const std::vector<float> scale = {0.5f, 1.5f, -2.0f}, b = {0.1f, -0.2f, 0.3f},
                             mean = {0.2f, -0.1f, 0.05f}, var = {1.5f, 0.25f, 4.0f};
    const std::vector<float> got = valuesOf(
        runNode("BatchNormalization", 15,
                {floatTensor({n, c, h, w}, x), floatTensor({c}, scale), floatTensor({c}, b),
                 floatTensor({c}, mean), floatTensor({c}, var)})[0]);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t ch = (i / static_cast<size_t>(h * w)) % static_cast<size_t>(c);
      want[i] = (x[i] - mean[ch]) / std::sqrt(var[ch] + 1e-5) * scale[ch] + b[ch];
    }
    INFO(vec::isaName(isa) << " BatchNormalization");
    requireClose(got, want, 1e-5, 1e-6);

    const std::vector<float> inorm = valuesOf(runNode(
        "InstanceNormalization", 6,
        {floatTensor({n, c, h, w}, x), floatTensor({c}, scale), floatTensor({c}, b)})[0]);
    for (int64_t p = 0; p < n * c; ++p) {
      const size_t ch = static_cast<size_t>(p % c);
      double m = 0, v = 0;
      for (int64_t i = 0; i < h * w; ++i) m += x[static_cast<size_t>(p * h * w + i)];
      m /= h * w;
      for (int64_t i = 0; i < h * w; ++i) {
        const double d = x[static_cast<size_t>(p * h * w + i)] - m;
        v += d * d;
      }
      v /= h * w;
      for (int64_t i = 0; i < h * w; ++i) {
        const size_t k = static_cast<size_t>(p * h * w + i);
        want[k] = (x[k] - m) / std::sqrt(v + 1e-5) * scale[ch] + b[ch];
      }
    }
    INFO(vec::isaName(isa) << " InstanceNormalization");
    requireClose(inorm, want, 1e-5, 1e-5);
  }
}

namespace {

struct PoolSpec {
  std::vector<int64_t> in;  // N, C, spatial...
  std::vector<int64_t> kernel, strides, dilations, pads;
  bool ceil_mode = false;
  bool include_pad = false;
};

// MaxPool / AveragePool by the ONNX definition, one output element at a time.
std::vector<double> poolRef(const PoolSpec& s, const std::vector<float>& x, bool is_max,
                            std::vector<int64_t>* out_dims) {
  const size_t r = s.kernel.size();
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t in = s.in[2 + i], pb = s.pads[i], pe = s.pads[i + r];
    const int64_t span = (s.kernel[i] - 1) * s.dilations[i] + 1;
    const int64_t avail = in + pb + pe - span;
    out[i] = (s.ceil_mode ? (avail + s.strides[i] - 1) / s.strides[i] : avail / s.strides[i]) + 1;
    if (s.ceil_mode && (out[i] - 1) * s.strides[i] >= in + pb) --out[i];
  }
  *out_dims = {s.in[0], s.in[1]};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  const int64_t planes = s.in[0] * s.in[1];
  const int64_t ih = r == 2 ? s.in[2] : 1, iw = s.in[r == 2 ? 3 : 2];
  const int64_t oh = r == 2 ? out[0] : 1, ow = out[r - 1];
  auto geo = [&](size_t axis_from_end, int64_t o, int64_t j) {
    const size_t i = r - 1 - axis_from_end;
    return o * s.strides[i] - s.pads[i] + j * s.dilations[i];
  };
  std::vector<double> y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t a = 0; a < oh; ++a)
      for (int64_t b = 0; b < ow; ++b) {
        double best = -INFINITY, sum = 0;
        int64_t count = 0, padded_count = 0;
        const int64_t kh = r == 2 ? s.kernel[0] : 1, kw = s.kernel[r - 1];
        for (int64_t jh = 0; jh < kh; ++jh)
          for (int64_t jw = 0; jw < kw; ++jw) {
            const int64_t hh = r == 2 ? geo(1, a, jh) : 0, ww = geo(0, b, jw);
            const bool h_in_pads = r == 2 ? hh >= -s.pads[0] && hh < ih + s.pads[2] : true;
            const bool w_in_pads = ww >= -s.pads[r - 1] && ww < iw + s.pads[2 * r - 1];
            if (h_in_pads && w_in_pads) ++padded_count;
            if (hh < 0 || hh >= ih || ww < 0 || ww >= iw) continue;
            const double v = x[static_cast<size_t>((p * ih + hh) * iw + ww)];
            best = std::max(best, v);
            sum += v;
            ++count;
          }
        const int64_t divisor = s.include_pad ? padded_count : count;
        y.push_back(is_max ? best : (divisor > 0 ? sum / divisor : 0.0));
      }
  return y;
}

}  // namespace

TEST_CASE("MaxPool and AveragePool match the definition with padding, strides, dilations and "
          "ceil_mode",
          "[kernels][vectorized]") {
  const std::vector<PoolSpec> specs = {
      {{1, 3, 112, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},  // ResNet's stem
      {{2, 5, 17, 13}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, true},
      {{1, 2, 9, 11}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}},
      {{1, 2, 9, 11}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, true},
      {{1, 3, 10, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, false, true},
      {{1, 3, 10, 12}, {3, 2}, {2, 3}, {2, 2}, {2, 1, 1, 0}, true},
      {{1, 2, 13, 13}, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}},  // YOLO's SPP
      {{2, 3, 8, 9}, {3, 3}, {3, 2}, {1, 2}, {1, 0, 2, 1}, true, true},
      {{2, 4, 1}, {1}, {1}, {1}, {0, 0}},
      {{2, 4, 17}, {3}, {2}, {1}, {1, 1}, true},  // 1-D
      {{1, 3, 23}, {4}, {3}, {2}, {2, 1}, false, true},
  };
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (const PoolSpec& s : specs) {
      int64_t n = 1;
      for (int64_t d : s.in) n *= d;
      const std::vector<float> x = randomFloats(static_cast<size_t>(n), 13, -5, 5);
      for (bool is_max : {true, false}) {
        for (int threads : {1, 2}) {
          std::vector<Attribute> attrs = {
              Attribute::ofInts("kernel_shape", s.kernel), Attribute::ofInts("strides", s.strides),
              Attribute::ofInts("pads", s.pads), Attribute::ofInt("ceil_mode", s.ceil_mode)};
          if (is_max) attrs.push_back(Attribute::ofInts("dilations", s.dilations));
          else attrs.push_back(Attribute::ofInt("count_include_pad", s.include_pad));
          PoolSpec used = s;
          if (!is_max) used.dilations.assign(s.kernel.size(), 1);  // AveragePool-19 has them too
          std::vector<int64_t> want_dims;
          const std::vector<double> want = poolRef(used, x, is_max, &want_dims);
          INFO(vec::isaName(isa) << (is_max ? " MaxPool " : " AveragePool ") << formatDims(s.in)
                                 << " k" << formatDims(s.kernel) << " s" << formatDims(s.strides)
                                 << " d" << formatDims(used.dilations) << " p"
                                 << formatDims(s.pads) << " ceil=" << s.ceil_mode
                                 << " include_pad=" << s.include_pad << " threads=" << threads);
          const HostTensor r = runNode(is_max ? "MaxPool" : "AveragePool", is_max ? 12 : 11,
                                       {floatTensor(s.in, x)}, attrs, threads)[0];
          REQUIRE(r.dims() == want_dims);
          requireClose(valuesOf(r), want, is_max ? 0.0 : 1e-5, is_max ? 0.0 : 1e-6);
        }
      }
    }
  }
}

TEST_CASE("GlobalAveragePool and GlobalMaxPool match double references", "[kernels][vectorized]") {
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{
             {1, 1, 1, 1}, {2, 3, 7, 1}, {1, 17, 7, 7}, {1, 2, 1000003}, {2, 5},
             // Planes of up to 256 (GlobalAveragePool's small-plane path on AVX-512): one and
             // two full vectors, 16 and 32 exactly, a partial last vector, 256 exactly.
             {1, 3, 4, 4}, {2, 5, 1, 32}, {1, 4, 3, 11}, {1, 9, 14, 14}, {1, 2, 16, 16},
             {1, 3, 257}}) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      const std::vector<float> x = randomFloats(static_cast<size_t>(n), 14, -2, 6);
      const int64_t planes = dims[0] * dims[1], plane = n / planes;
      for (bool is_max : {true, false}) {
        INFO(vec::isaName(isa) << (is_max ? " GlobalMaxPool " : " GlobalAveragePool ")
                               << formatDims(dims));
        const std::vector<float> got = valuesOf(
            runNode(is_max ? "GlobalMaxPool" : "GlobalAveragePool", 1, {floatTensor(dims, x)})[0]);
        std::vector<double> want;
        for (int64_t p = 0; p < planes; ++p) {
          double best = -INFINITY, sum = 0;
          for (int64_t i = 0; i < plane; ++i) {
            best = std::max(best, static_cast<double>(x[static_cast<size_t>(p * plane + i)]));
            sum += x[static_cast<size_t>(p * plane + i)];
          }
          want.push_back(is_max ? best : sum / plane);
        }
        requireClose(got, want, 1e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("gatherStrided copies every stride-th element on every ISA", "[kernels][vectorized]") {
  std::vector<float> in(4 * 97 + 3);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f - 7.f;
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t stride : {1, 2, 3, 4}) {
      for (int64_t n : {0, 1, 15, 16, 17, 33, 97}) {
        INFO(vec::isaName(isa) << " stride " << stride << " n " << n);
        std::vector<float> out(static_cast<size_t>(n) + 1, -1.f);
        vec::gatherStrided(in.data() + 1, stride, out.data(), n);
        for (int64_t i = 0; i < n; ++i) REQUIRE(out[i] == in[static_cast<size_t>(1 + i * stride)]);
        REQUIRE(out[static_cast<size_t>(n)] == -1.f);  // nothing past n is written
      }
    }
  }
}

TEST_CASE("rotateHalfRow rounds each product as the graph's Mul and Add do, on every ISA",
          "[kernels][vectorized]") {
  // The reference is the exported graph's arithmetic in float: two rounded products, one
  // rounded sum. An FMA would differ from it in the last bit on most of these random rows.
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t half : {1, 4, 8, 15, 16, 17, 32, 64, 67}) {
      INFO(vec::isaName(isa) << " half " << half);
      const size_t d = static_cast<size_t>(2 * half);
      const std::vector<float> x = randomFloats(d, 11), c = randomFloats(d, 12),
                               sn = randomFloats(d, 13);
      std::vector<float> y(d + 1, -7.f);
      vec::rotateHalfRow(x.data(), y.data(), half, c.data(), sn.data());
      for (size_t k = 0; k < static_cast<size_t>(half); ++k) {
        const size_t h = k + static_cast<size_t>(half);
        volatile float p1 = x[k] * c[k], p2 = -x[h] * sn[k];
        volatile float p3 = x[h] * c[h], p4 = x[k] * sn[h];
        REQUIRE(y[k] == p1 + p2);
        REQUIRE(y[h] == p3 + p4);
      }
      REQUIRE(y[d] == -7.f);  // nothing past the row is written
    }
  }
}

TEST_CASE("swishRow gives the bits of the Sigmoid and the products apart, on every ISA",
          "[kernels][vectorized]") {
  // SwiGLU (alpha 1, with u), QuickGelu (1.702) and Swish (0.5) without u.
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t n : {1, 7, 16, 17, 33, 100, 1024, 1031}) {
      for (const float alpha : {1.f, 1.702f, 0.5f}) {
        for (bool with_u : {true, false}) {
          INFO(vec::isaName(isa) << " n " << n << " alpha " << alpha << " u " << with_u);
          const size_t un = static_cast<size_t>(n);
          std::vector<float> x = randomFloats(un, 71, -20, 20);
          const std::vector<float> u = randomFloats(un, 72, -3, 3);
          x[0] = -100.f;  // a sigmoid in its exp's underflow
          std::vector<float> gate(un), want(un), y(un + 1, -7.f);
          for (size_t i = 0; i < un; ++i) gate[i] = alpha * x[i];
          vec::unary(vec::Unary::Sigmoid, gate.data(), gate.data(), n);
          for (size_t i = 0; i < un; ++i) {
            volatile float gated = x[i] * gate[i];
            want[i] = with_u ? gated * u[i] : gated;
          }
          vec::swishRow(x.data(), with_u ? u.data() : nullptr, y.data(), n, alpha);
          REQUIRE(std::memcmp(y.data(), want.data(), un * sizeof(float)) == 0);
          REQUIRE(y[un] == -7.f);
        }
      }
    }
  }
}

TEST_CASE("skipLayerNormRow and rmsNormRow give the bits of the add and the norm apart, on "
          "every ISA",
          "[kernels][vectorized]") {
  // Rows on and off the vector width and past the sum's 1024-element block; the sum written
  // apart or into y's row; a large mean beside a small spread (the two-pass variance's case).
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t n : {1, 7, 16, 17, 100, 768, 1030, 2053}) {
      for (bool sum_apart : {true, false}) {
        INFO(vec::isaName(isa) << " n " << n << " sum apart " << sum_apart);
        const size_t un = static_cast<size_t>(n);
        std::vector<float> x = randomFloats(un, 61, -3, 3), skip = randomFloats(un, 62, 50, 51);
        const std::vector<float> scale = randomFloats(un, 63, 0.5, 1.5),
                                 bias = randomFloats(un, 64, -1, 1);
        std::vector<float> added(un);
        for (size_t i = 0; i < un; ++i) added[i] = x[i] + skip[i];
        // LayerNorm: the add, then layerNormRow.
        std::vector<float> want(un), y(un + 1, -7.f), s(un + 1, -7.f);
        float mean = 0, inv_std = 0;
        vec::layerNormRow(added.data(), want.data(), n, scale.data(), bias.data(), 1e-5f, &mean,
                          &inv_std);
        float* sum = sum_apart ? s.data() : y.data();
        vec::skipLayerNormRow(x.data(), skip.data(), sum, y.data(), n, scale.data(), bias.data(),
                              1e-5f);
        REQUIRE(std::memcmp(y.data(), want.data(), un * sizeof(float)) == 0);
        REQUIRE(y[un] == -7.f);
        if (sum_apart) {
          REQUIRE(std::memcmp(s.data(), added.data(), un * sizeof(float)) == 0);
          REQUIRE(s[un] == -7.f);
        }
        // Without a skip: layerNormRow itself, s untouched.
        std::fill(s.begin(), s.end(), -7.f);
        vec::layerNormRow(x.data(), want.data(), n, scale.data(), nullptr, 1e-5f, &mean, &inv_std);
        vec::skipLayerNormRow(x.data(), nullptr, s.data(), y.data(), n, scale.data(), nullptr,
                              1e-5f);
        REQUIRE(std::memcmp(y.data(), want.data(), un * sizeof(float)) == 0);
        REQUIRE(s[0] == -7.f);
        // RMSNorm: the add, the mean square as sumSquaredDeviations from 0, two products.
        for (bool with_skip : {true, false}) {
          const std::vector<float>& in = with_skip ? added : x;
          const double ms = vec::sumSquaredDeviations(in.data(), n, 0.0f) / static_cast<double>(n);
          const float inv = static_cast<float>(1.0 / std::sqrt(ms + 1e-6f));
          for (size_t i = 0; i < un; ++i) {
            volatile float scaled = in[i] * inv;
            want[i] = scaled * scale[i];
          }
          std::fill(y.begin(), y.end(), -7.f);
          float* rs = sum_apart ? s.data() : y.data();
          vec::rmsNormRow(x.data(), with_skip ? skip.data() : nullptr, rs, y.data(), n,
                          scale.data(), 1e-6f);
          INFO("rms, skip " << with_skip);
          REQUIRE(std::memcmp(y.data(), want.data(), un * sizeof(float)) == 0);
          REQUIRE(y[un] == -7.f);
        }
      }
    }
  }
}

TEST_CASE("softmaxRowsAdd is softmaxRowAdd row by row, bit for bit, on every ISA",
          "[kernels][vectorized]") {
  // Blocks of 1..40 rows (more than one group of rows), widths on and off the vector, the
  // causal step (with rows that see nothing: first_n <= 0), a mask row per row, one per block,
  // a scalar, none; and rows with a NaN, a +inf and a row of only -inf among ordinary ones.
  const float inf = std::numeric_limits<float>::infinity();
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t rows : {1, 5, 16, 17, 40}) {
      for (int64_t ld : {7, 16, 33, 128}) {
        for (int64_t first_n : {ld, ld - 3, int64_t{1}, int64_t{-2}}) {
          for (int64_t n_step : {0, 1}) {
            for (int form = 0; form < 4; ++form) {  // none, a row each, one row, a scalar
              INFO(vec::isaName(isa) << " rows " << rows << " ld " << ld << " first_n "
                                     << first_n << " step " << n_step << " form " << form);
              std::vector<float> block = randomFloats(static_cast<size_t>(rows * ld), 51, -30, 30);
              const std::vector<float> mask =
                  randomFloats(static_cast<size_t>(rows * ld), 52, -10, 0);
              if (rows > 5) {
                block[static_cast<size_t>(2 * ld)] = std::numeric_limits<float>::quiet_NaN();
                block[static_cast<size_t>(3 * ld + ld - 1)] = inf;
                std::fill(block.begin() + 4 * ld, block.begin() + 5 * ld, -inf);
              }
              const float* add = form == 0 ? nullptr : mask.data();
              const int64_t add_ld = form == 1 ? ld : 0;
              std::vector<float> want = block;
              for (int64_t r = 0; r < rows; ++r) {
                float* row = want.data() + r * ld;
                const int64_t n = std::clamp<int64_t>(first_n + r * n_step, 0, ld);
                vec::softmaxRowAdd(row, n, add ? add + r * add_ld : nullptr, form == 3);
                std::fill(row + n, row + ld, 0.f);
              }
              block.push_back(-1.f);  // nothing past the block is written
              vec::softmaxRowsAdd(block.data(), rows, ld, first_n, n_step, add, add_ld,
                                  form == 3);
              REQUIRE(block.back() == -1.f);
              REQUIRE(std::memcmp(block.data(), want.data(), want.size() * sizeof(float)) == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("softmaxRowAdd adds the mask and normalises in one go on every ISA",
          "[kernels][vectorized]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> scores = randomFloats(131, 41, -30, 30);
  const std::vector<float> mask = randomFloats(131, 42, -10, 0);
  for (vec::Isa isa : isasHere()) {
    ForcedIsa forced(isa);
    for (int64_t n : {1, 7, 16, 17, 64, 128, 131}) {
      for (int form = 0; form < 3; ++form) {  // no mask, a mask row, one value for the row
        const float* add = form == 0 ? nullptr : mask.data();
        INFO(vec::isaName(isa) << " n " << n << " form " << form);
        std::vector<double> want(static_cast<size_t>(n));
        double mx = -inf, total = 0;
        for (int64_t i = 0; i < n; ++i) {
          want[i] = double(scores[i]) + (form == 0 ? 0.0 : form == 1 ? mask[i] : mask[0]);
          mx = std::max(mx, want[i]);
        }
        for (double& w : want) total += (w = std::exp(w - mx));
        std::vector<float> row(scores.begin(), scores.begin() + n);
        row.push_back(-1.f);  // nothing past n is written
        vec::softmaxRowAdd(row.data(), n, add, form == 2);
        for (int64_t i = 0; i < n; ++i) REQUIRE(std::abs(row[i] - want[i] / total) <= 1e-6);
        REQUIRE(row[static_cast<size_t>(n)] == -1.f);
      }
    }
    // softmaxRow's rules: a NaN, a +inf or a row of only -inf (from the mask too) makes every
    // output NaN, in the vector body and in the partial last vector.
    for (int64_t at : {3, 32}) {
      for (float special : {std::numeric_limits<float>::quiet_NaN(), inf}) {
        INFO(vec::isaName(isa) << " special " << special << " at " << at);
        std::vector<float> row(scores.begin(), scores.begin() + 33);
        row[static_cast<size_t>(at)] = special;
        vec::softmaxRowAdd(row.data(), 33, mask.data(), false);
        for (float y : row) REQUIRE(std::isnan(y));
      }
    }
    std::vector<float> row(scores.begin(), scores.begin() + 17);
    const float minus_inf = -inf;
    vec::softmaxRowAdd(row.data(), 17, &minus_inf, true);
    for (float y : row) REQUIRE(std::isnan(y));
  }
}
