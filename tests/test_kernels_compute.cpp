// Compute kernels (conv, gemm, pool, norm, resize, quantize) against naive double-precision
// references written here, one direct loop per definition, independent of the kernels' code.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fusectl/kernels/epilogue.h"
#include "../libkernels/cpu/gemm_micro.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/kernel.h"

using namespace fusectl;
using namespace fusectl::kernels;
using Dims = std::vector<int64_t>;
using Vec = std::vector<double>;

namespace {

// ---- harness: one node, run through its registered kernel ----

class TestAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return HostTensor(dtype, dims);
  }
};

int64_t numel(const Dims& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<int64_t>());
}

HostTensor floatTensor(const Dims& dims, const Vec& v) {
  HostTensor t(DType::Float, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutableData<float>()[i] = static_cast<float>(v[i]);
  return t;
}

template <typename T>
HostTensor typedTensor(DType dt, const Dims& dims, const std::vector<T>& v) {
  HostTensor t(dt, dims);
  std::memcpy(t.mutableRaw(), v.data(), v.size() * sizeof(T));
  return t;
}

HostTensor int64Tensor(const Dims& dims, const std::vector<int64_t>& v) {
  return typedTensor(DType::Int64, dims, v);
}

Vec toVec(const HostTensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::Float:
        v[i] = t.data<float>()[i];
        break;
      case DType::Float16:
        v[i] = halfToFloat(t.data<uint16_t>()[i]);
        break;
      case DType::Int64:
        v[i] = static_cast<double>(t.data<int64_t>()[i]);
        break;
      case DType::Int32:
        v[i] = t.data<int32_t>()[i];
        break;
      case DType::UInt8:
        v[i] = t.data<uint8_t>()[i];
        break;
      case DType::Int8:
        v[i] = t.data<int8_t>()[i];
        break;
      default:
        FAIL("unexpected dtype");
    }
  }
  return v;
}

Vec randomVec(int64_t n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<float>(dist(gen));  // representable in float
  return v;
}

struct OpRun {
  std::string op;
  std::string domain;
  int64_t opset = 17;
  std::vector<HostTensor> inputs;  // DType::Undefined = omitted optional input
  std::vector<Attribute> attrs;
  int outputs = 1;
  int threads = 1;

  std::vector<HostTensor> run() const {
    Graph g("test");
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].dtype() == DType::Undefined) {
        ins.push_back(nullptr);
        continue;
      }
      ValueType vt;
      vt.dtype = inputs[i].dtype();
      ins.push_back(g.addInput("in" + std::to_string(i), vt));
    }
    std::vector<std::string> out_names;
    for (int i = 0; i < outputs; ++i) out_names.push_back("out" + std::to_string(i));
    Node* n = g.createNode({op, domain, ins, out_names, "n0", attrs});
    for (int i = 0; i < outputs; ++i) g.addOutput(n->output(i));
    const KernelInfo* k = KernelRegistry::global().find(domain, op, opset);
    REQUIRE(k != nullptr);
    std::vector<const HostTensor*> ptrs;
    for (const HostTensor& t : inputs) ptrs.push_back(t.dtype() == DType::Undefined ? nullptr : &t);
    TestAllocator alloc;
    KernelContext ctx(*n, opset, ptrs, alloc, threads);
    k->fn(ctx);
    return ctx.outputs();
  }
};

void requireClose(const Vec& got, const Vec& want, double atol = 1e-4, double rtol = 1e-4) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("index " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

Attribute ints(const char* name, Dims v) { return Attribute::ofInts(name, std::move(v)); }
Attribute intAttr(const char* name, int64_t v) { return Attribute::ofInt(name, v); }
Attribute str(const char* name, const char* v) { return Attribute::ofString(name, v); }
Attribute flt(const char* name, float v) { return Attribute::ofFloat(name, v); }

// ---- references ----

double actRef(const std::string& act, double x, const std::vector<float>& p) {
  if (act == "Relu") return std::max(x, 0.0);
  if (act == "Clip") return std::min(std::max(x, double(p[0])), double(p[1]));
  if (act == "LeakyRelu") return x < 0 ? p[0] * x : x;
  if (act == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (act == "HardSigmoid") return std::min(1.0, std::max(0.0, p[0] * x + p[1]));
  if (act == "HardSwish") return x * std::min(1.0, std::max(0.0, x / 6 + 0.5));
  if (act == "Silu") return x / (1 + std::exp(-x));
  if (act == "Gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (act == "Tanh") return std::tanh(x);
  return x;
}

struct ConvCase {
  Dims x;  // N, C, spatial
  int64_t M;
  Dims k;
  int64_t group = 1;
  Dims strides{}, dilations{}, pads{};  // empty = defaults
  std::string auto_pad = "NOTSET";
  bool bias = true;
};

// Explicit pads a case resolves to (auto_pad per the ONNX spec formulas).
Dims resolvedPads(const ConvCase& c) {
  const size_t r = c.k.size();
  Dims pads = c.pads.empty() ? Dims(2 * r, 0) : c.pads;
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = c.strides.empty() ? 1 : c.strides[i];
    const int64_t d = c.dilations.empty() ? 1 : c.dilations[i];
    const int64_t in = c.x[2 + i], span = (c.k[i] - 1) * d + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in);
      pads[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
      pads[i + r] = total - pads[i];
    } else if (c.auto_pad == "VALID") {
      pads[i] = pads[i + r] = 0;
    }
  }
  return pads;
}

// Direct N-D convolution by definition.
Vec refConv(const ConvCase& c, const Vec& x, const Vec& w, const Vec* b, Dims* out_dims) {
  const size_t r = c.k.size();
  const Dims pads = resolvedPads(c);
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = c.strides.empty() ? 1 : c.strides[i];
    const int64_t d = c.dilations.empty() ? 1 : c.dilations[i];
    out[i] = (c.x[2 + i] + pads[i] + pads[i + r] - (c.k[i] - 1) * d - 1) / s + 1;
  }
  const int64_t N = c.x[0], C = c.x[1], Cg = C / c.group, Mg = c.M / c.group;
  *out_dims = {N, c.M};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  Vec y(static_cast<size_t>(numel(*out_dims)), 0.0);
  const int64_t P = numel(out), taps = numel(c.k);
  Dims in(c.x.begin() + 2, c.x.end());
  const int64_t in_pixels = numel(in);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t p = 0; p < P; ++p) {
        Dims op(r);
        for (int64_t rem = p, i = r - 1; i >= 0; --i) {
          op[i] = rem % out[i];
          rem /= out[i];
        }
        double acc = b ? (*b)[m] : 0.0;
        const int64_t g = m / Mg;
        for (int64_t cc = 0; cc < Cg; ++cc)
          for (int64_t t = 0; t < taps; ++t) {
            Dims kp(r);
            for (int64_t rem = t, i = r - 1; i >= 0; --i) {
              kp[i] = rem % c.k[i];
              rem /= c.k[i];
            }
            int64_t idx = 0;
            bool inside = true;
            for (size_t i = 0; i < r; ++i) {
              const int64_t s = c.strides.empty() ? 1 : c.strides[i];
              const int64_t d = c.dilations.empty() ? 1 : c.dilations[i];
              const int64_t pos = op[i] * s - pads[i] + kp[i] * d;
              if (pos < 0 || pos >= in[i]) inside = false;
              idx = idx * in[i] + pos;
            }
            if (!inside) continue;
            acc += x[(n * C + g * Cg + cc) * in_pixels + idx] * w[(m * Cg + cc) * taps + t];
          }
        y[(n * c.M + m) * P + p] = acc;
      }
  return y;
}

std::vector<Attribute> convAttrs(const ConvCase& c) {
  std::vector<Attribute> a = {intAttr("group", c.group), ints("kernel_shape", c.k)};
  if (!c.strides.empty()) a.push_back(ints("strides", c.strides));
  if (!c.dilations.empty()) a.push_back(ints("dilations", c.dilations));
  if (!c.pads.empty()) a.push_back(ints("pads", c.pads));
  if (c.auto_pad != "NOTSET") a.push_back(str("auto_pad", c.auto_pad.c_str()));
  return a;
}

Dims weightDims(const ConvCase& c) {
  Dims wd = {c.M, c.x[1] / c.group};
  wd.insert(wd.end(), c.k.begin(), c.k.end());
  return wd;
}

}  // namespace

// ---- GEMM core ----

TEST_CASE("gemm micro-kernel matches a double reference for odd sizes", "[kernels][gemm]") {
  using namespace fusectl::kernels::cpu;
  struct Size {
    int64_t M, N, K;
  };
  const Size sizes[] = {{1, 1, 1}, {7, 13, 5}, {65, 129, 33}, {6, 16, 300}, {150, 40, 520}};
  for (bool portable : {false, true}) {
    gemmForcePortableKernel(portable);
    for (const Size& s : sizes) {
      for (int trans = 0; trans < 4; ++trans) {
        const bool ta = trans & 1, tb = trans & 2;
        Vec a = randomVec(s.M * s.K, 1), b = randomVec(s.K * s.N, 2), c0 = randomVec(s.M * s.N, 3);
        std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
        std::vector<float> cf(c0.begin(), c0.end());
        const float alpha = 0.75f;
        GemmParams p = gemmParams(s.M, s.N, s.K, af.data(), ta ? s.M : s.K, ta, bf.data(),
                                  tb ? s.K : s.N, tb, cf.data(), s.N);
        p.alpha = alpha;
        p.accumulate = true;
        gemm(p, 1);
        Vec want(static_cast<size_t>(s.M * s.N));
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < s.K; ++k) {
              const double av = ta ? a[k * s.M + i] : a[i * s.K + k];
              const double bv = tb ? b[j * s.K + k] : b[k * s.N + j];
              acc += av * bv;
            }
            want[i * s.N + j] = c0[i * s.N + j] + alpha * acc;
          }
        INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " trans=" << trans
                  << " portable=" << portable);
        requireClose(Vec(cf.begin(), cf.end()), want, 1e-4, 1e-4);
      }
    }
  }
  gemmForcePortableKernel(false);
}

TEST_CASE("gemm epilogue variants and threading", "[kernels][gemm]") {
  using namespace fusectl::kernels::cpu;
  const int64_t M = 37, N = 83, K = 29;
  Vec a = randomVec(M * K, 4), b = randomVec(K * N, 5), bias = randomVec(std::max(M, N), 6);
  Vec res = randomVec(M * N, 7);
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  std::vector<float> biasf(bias.begin(), bias.end()), resf(res.begin(), res.end());
  const char* acts[] = {"",          "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
                        "HardSwish", "Silu", "Gelu", "Tanh"};
  for (const char* act : acts) {
    for (int per_row = 0; per_row < 2; ++per_row) {
      Epilogue ep;
      ep.bias = biasf.data();
      ep.bias_per_row = per_row != 0;
      ep.residual = resf.data();
      ep.ld_residual = N;
      std::vector<float> params;
      if (std::string(act) == "Clip") params = {-0.3f, 0.4f};
      if (std::string(act) == "LeakyRelu") params = {0.1f};
      if (std::string(act) == "HardSigmoid") params = {0.3f, 0.4f};
      ep.setActivation(*parseActivation(act), params.data(), params.size());
      std::vector<float> c1(M * N), c2(M * N);
      GemmParams p = gemmParams(M, N, K, af.data(), K, false, bf.data(), N, false, c1.data(), N);
      p.epilogue = &ep;
      gemm(p, 1);
      p.C = c2.data();
      gemm(p, 2);  // small: may still run on one thread; see the big case below
      std::vector<float> pdef = params;
      if (std::string(act) == "LeakyRelu" && pdef.empty()) pdef = {0.01f};
      Vec want(M * N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += a[i * K + k] * b[k * N + j];
          acc += bias[per_row ? i : j] + res[i * N + j];
          want[i * N + j] = actRef(act, acc, pdef);
        }
      INFO("activation " << act << " per_row " << per_row);
      requireClose(Vec(c1.begin(), c1.end()), want, 1e-5, 1e-4);
      REQUIRE(c1 == c2);
    }
  }
  // Large enough to split across threads: must equal the single-thread result bit for bit.
  for (auto [m, n] : {std::pair<int64_t, int64_t>{300, 70}, {70, 300}}) {
    const int64_t k = 200;
    Vec a2 = randomVec(m * k, 8), b2 = randomVec(k * n, 9), bias2 = randomVec(std::max(m, n), 10);
    std::vector<float> a2f(a2.begin(), a2.end()), b2f(b2.begin(), b2.end());
    std::vector<float> bias2f(bias2.begin(), bias2.end());
    Epilogue ep;
    ep.bias = bias2f.data();
    ep.bias_per_row = m > n;
    ep.activation = Activation::Relu;
    std::vector<float> c1(m * n), c4(m * n);
    GemmParams p = gemmParams(m, n, k, a2f.data(), k, false, b2f.data(), n, false, c1.data(), n);
    p.epilogue = &ep;
    gemm(p, 1);
    p.C = c4.data();
    gemm(p, 4);
    REQUIRE(c1 == c4);
  }
}

// Speed is measured in bench/ (bench_latency), never asserted here: this only checks that the
// blocked single-thread path gets a large product exactly right (every partial sum is exact).
TEST_CASE("gemm on 256^3 single-threaded gives every element exactly", "[kernels][gemm]") {
  using namespace fusectl::kernels::cpu;
  const int64_t n = 256;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, -1.0f);
  GemmParams p = gemmParams(n, n, n, a.data(), n, false, b.data(), n, false, c.data(), n);
  gemm(p, 1);
  for (int64_t i = 0; i < n * n; ++i) REQUIRE(c[i] == static_cast<float>(n) * 0.125f);
}

// ---- Conv ----

TEST_CASE("Conv matches the direct definition", "[kernels][conv]") {
  std::vector<ConvCase> cases = {
      {{1, 1, 5, 5}, 1, {3, 3}},
      {{2, 3, 7, 6}, 4, {3, 3}, 1, {}, {}, {1, 1, 1, 1}},
      {{1, 4, 9, 9}, 6, {3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 2, 1}},
      {{2, 8, 6, 7}, 8, {3, 3}, 8, {1, 1}, {}, {1, 1, 1, 1}},      // depthwise
      {{1, 4, 7, 7}, 8, {3, 3}, 4, {2, 2}, {2, 2}, {2, 1, 0, 2}},  // depthwise, multiplier 2
      {{1, 6, 5, 4}, 9, {1, 1}},                                   // pointwise
      {{1, 6, 5, 4}, 9, {1, 1}, 3, {2, 2}},                        // strided 1x1, groups
      {{1, 3, 8, 8}, 5, {3, 3}, 1, {2, 2}, {}, {}, "SAME_UPPER"},
      {{1, 3, 8, 7}, 5, {4, 3}, 1, {3, 2}, {}, {}, "SAME_LOWER"},
      {{1, 3, 8, 7}, 5, {3, 3}, 1, {2, 2}, {}, {}, "VALID", false},
      {{2, 4, 11}, 6, {3}, 2, {2}, {2}, {1, 3}},  // 1-D
      {{1, 3, 10}, 2, {5}, 1, {1}, {}, {}, "SAME_UPPER"},
      {{1, 2, 4, 5, 6}, 4, {2, 3, 2}, 2, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}},  // 3-D
      {{1, 2, 5, 5, 5}, 2, {3, 3, 3}, 2, {}, {}, {1, 1, 1, 1, 1, 1}},                // 3-D dw
      {{1, 16, 20, 20}, 24, {3, 3}, 1, {1, 1}, {}, {1, 1, 1, 1}},  // several GEMM tiles
      {{2, 64, 24, 24}, 8, {3, 3}, 1, {1, 1}, {}, {1, 1, 1, 1}},   // im2col in pixel chunks
      {{1, 32, 40, 30}, 4, {3, 3}, 2, {1, 1}, {1, 2}, {0, 2, 1, 2}},
  };
  int id = 0;
  for (const ConvCase& c : cases) {
    ++id;
    const Dims wd = weightDims(c);
    Vec x = randomVec(numel(c.x), 10 + id), w = randomVec(numel(wd), 20 + id),
        b = randomVec(c.M, 30 + id);
    Dims ydims;
    const Vec want = refConv(c, x, w, c.bias ? &b : nullptr, &ydims);
    for (int threads : {1, 3}) {
      OpRun r{"Conv", "", 11, {floatTensor(c.x, x), floatTensor(wd, w)}, convAttrs(c)};
      if (c.bias) r.inputs.push_back(floatTensor({c.M}, b));
      r.threads = threads;
      auto out = r.run();
      INFO("case " << id << " threads " << threads);
      REQUIRE(out[0].dims() == ydims);
      requireClose(toVec(out[0]), want, 1e-4, 1e-4);
    }
  }
}

TEST_CASE("Conv float16 input converts and rounds back", "[kernels][conv]") {
  ConvCase c{{1, 2, 5, 5}, 3, {3, 3}, 1, {}, {}, {1, 1, 1, 1}};
  const Dims wd = weightDims(c);
  Vec x = randomVec(numel(c.x), 1), w = randomVec(numel(wd), 2), b = randomVec(3, 3);
  auto half = [](const Dims& d, const Vec& v) {
    HostTensor t(DType::Float16, d);
    for (size_t i = 0; i < v.size(); ++i) t.mutableData<uint16_t>()[i] = floatToHalf(float(v[i]));
    return t;
  };
  Vec xh(x.size()), wh(w.size()), bh(b.size());
  for (size_t i = 0; i < x.size(); ++i) xh[i] = halfToFloat(floatToHalf(float(x[i])));
  for (size_t i = 0; i < w.size(); ++i) wh[i] = halfToFloat(floatToHalf(float(w[i])));
  for (size_t i = 0; i < b.size(); ++i) bh[i] = halfToFloat(floatToHalf(float(b[i])));
  Dims ydims;
  const Vec want = refConv(c, xh, wh, &bh, &ydims);
  OpRun r{"Conv", "", 11, {half(c.x, x), half(wd, w), half({3}, b)}, convAttrs(c)};
  auto out = r.run();
  REQUIRE(out[0].dtype() == DType::Float16);
  requireClose(toVec(out[0]), want, 1e-2, 2e-3);
}

TEST_CASE("FusedConv applies bias and residual and activation", "[kernels][conv][fused]") {
  const char* acts[] = {"Relu",      "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
                        "HardSwish", "Silu", "Gelu",      "Tanh",    ""};
  ConvCase c{{2, 4, 6, 6}, 6, {3, 3}, 2, {1, 1}, {}, {1, 1, 1, 1}};
  ConvCase dw{{1, 4, 6, 6}, 4, {3, 3}, 4, {1, 1}, {}, {1, 1, 1, 1}};
  for (const ConvCase* cc : {&c, &dw}) {
    const Dims wd = weightDims(*cc);
    Vec x = randomVec(numel(cc->x), 1), w = randomVec(numel(wd), 2), b = randomVec(cc->M, 3);
    Dims ydims;
    const Vec conv = refConv(*cc, x, w, &b, &ydims);
    Vec z = randomVec(numel(ydims), 4);
    for (const char* act : acts) {
      std::vector<float> params;
      if (std::string(act) == "Clip") params = {-0.2f, 0.5f};
      if (std::string(act) == "LeakyRelu") params = {0.2f};
      if (std::string(act) == "HardSigmoid") params = {0.2f, 0.5f};
      std::vector<Attribute> attrs = convAttrs(*cc);
      if (*act) attrs.push_back(str("activation", act));
      if (!params.empty()) attrs.push_back(Attribute::ofFloats("activation_params", params));
      OpRun r{"FusedConv",
              "fusectl",
              1,
              {floatTensor(cc->x, x), floatTensor(wd, w), floatTensor({cc->M}, b),
               floatTensor(ydims, z)},
              attrs};
      auto out = r.run();
      Vec want(conv.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = actRef(act, conv[i] + z[i], params);
      INFO("activation " << act);
      requireClose(toVec(out[0]), want, 1e-5, 1e-4);
    }
  }
}

TEST_CASE("ConvTranspose matches the scatter definition", "[kernels][conv]") {
  struct Case {
    Dims x;
    int64_t Mg;
    Dims k;
    int64_t group;
    Dims strides, dilations, pads, output_padding, output_shape;
    std::string auto_pad;
  };
  std::vector<Case> cases = {
      {{1, 1, 3, 3}, 2, {3, 3}, 1, {}, {}, {}, {}, {}, ""},
      {{2, 4, 3, 4}, 3, {3, 2}, 2, {3, 2}, {1, 2}, {1, 0, 2, 1}, {1, 1}, {}, ""},
      {{1, 2, 5}, 2, {3}, 1, {2}, {}, {1, 1}, {1}, {}, ""},
      {{1, 1, 3, 3}, 2, {3, 3}, 1, {3, 2}, {}, {}, {}, {10, 8}, ""},
      {{1, 1, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_UPPER"},
      {{1, 1, 3, 3}, 2, {3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_LOWER"},
      {{1, 2, 2, 3, 2}, 2, {2, 2, 2}, 2, {2, 1, 2}, {1, 2, 1}, {}, {}, {}, ""},
  };
  int id = 0;
  for (const Case& c : cases) {
    ++id;
    const size_t r = c.k.size();
    const int64_t N = c.x[0], C = c.x[1], M = c.Mg * c.group, Cg = C / c.group;
    Dims wd = {C, c.Mg};
    wd.insert(wd.end(), c.k.begin(), c.k.end());
    Vec x = randomVec(numel(c.x), 40 + id), w = randomVec(numel(wd), 50 + id),
        b = randomVec(M, 60 + id);
    auto at = [&](const Dims& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; };
    // Pads and output size per the ONNX reference (op_conv_transpose.py).
    Dims pads(2 * r, 0), out(r);
    for (size_t i = 0; i < r; ++i) {
      const int64_t s = at(c.strides, i, 1), d = at(c.dilations, i, 1);
      const int64_t op = at(c.output_padding, i, 0), in = c.x[2 + i];
      const int64_t full = s * (in - 1) + op + (c.k[i] - 1) * d + 1;
      if (!c.auto_pad.empty()) {
        out[i] = in * s;
        const int64_t total = full - out[i];
        pads[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pads[i + r] = total - pads[i];
      } else {
        if (!c.pads.empty()) {
          pads[i] = c.pads[i];
          pads[i + r] = c.pads[i + r];
        }
        out[i] = c.output_shape.empty() ? full - pads[i] - pads[i + r] : c.output_shape[i];
      }
    }
    Dims ydims = {N, M};
    ydims.insert(ydims.end(), out.begin(), out.end());
    Vec want(static_cast<size_t>(numel(ydims)), 0.0);
    const Dims in(c.x.begin() + 2, c.x.end());
    const int64_t ip = numel(in), opix = numel(out), taps = numel(c.k);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ci = 0; ci < C; ++ci)
        for (int64_t p = 0; p < ip; ++p) {
          Dims ipos(r);
          for (int64_t rem = p, i = r - 1; i >= 0; --i) {
            ipos[i] = rem % in[i];
            rem /= in[i];
          }
          const int64_t g = ci / Cg;
          for (int64_t mg = 0; mg < c.Mg; ++mg)
            for (int64_t t = 0; t < taps; ++t) {
              Dims kp(r);
              for (int64_t rem = t, i = r - 1; i >= 0; --i) {
                kp[i] = rem % c.k[i];
                rem /= c.k[i];
              }
              int64_t idx = 0;
              bool inside = true;
              for (size_t i = 0; i < r; ++i) {
                const int64_t pos =
                    ipos[i] * at(c.strides, i, 1) - pads[i] + kp[i] * at(c.dilations, i, 1);
                if (pos < 0 || pos >= out[i]) inside = false;
                idx = idx * out[i] + pos;
              }
              if (!inside) continue;
              want[(n * M + g * c.Mg + mg) * opix + idx] +=
                  x[(n * C + ci) * ip + p] * w[(ci * c.Mg + mg) * taps + t];
            }
        }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t p = 0; p < opix; ++p) want[(n * M + m) * opix + p] += b[m];
    std::vector<Attribute> attrs = {intAttr("group", c.group)};
    if (!c.strides.empty()) attrs.push_back(ints("strides", c.strides));
    if (!c.dilations.empty()) attrs.push_back(ints("dilations", c.dilations));
    if (!c.pads.empty()) attrs.push_back(ints("pads", c.pads));
    if (!c.output_padding.empty()) attrs.push_back(ints("output_padding", c.output_padding));
    if (!c.output_shape.empty()) attrs.push_back(ints("output_shape", c.output_shape));
    if (!c.auto_pad.empty()) attrs.push_back(str("auto_pad", c.auto_pad.c_str()));
    OpRun run{"ConvTranspose",
              "",
              11,
              {floatTensor(c.x, x), floatTensor(wd, w), floatTensor({M}, b)},
              attrs};
    auto got = run.run();
    INFO("case " << id);
    REQUIRE(got[0].dims() == ydims);
    requireClose(toVec(got[0]), want, 1e-4, 1e-4);
  }
}

TEST_CASE("ConvInteger and QLinearConv", "[kernels][conv][quant]") {
  ConvCase c{{1, 4, 5, 6}, 6, {3, 3}, 2, {2, 1}, {}, {1, 1, 0, 1}};
  const Dims wd = weightDims(c);
  std::mt19937 gen(7);
  std::vector<uint8_t> xq(numel(c.x));
  std::vector<int8_t> wq(numel(wd));
  for (auto& v : xq) v = static_cast<uint8_t>(gen() % 256);
  for (auto& v : wq) v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
  const uint8_t xzp = 131;
  const std::vector<int8_t> wzp = {3, -2, 0, 5, -7, 1};  // per output channel
  Vec xs(xq.size()), ws(wq.size());
  for (size_t i = 0; i < xq.size(); ++i) xs[i] = double(xq[i]) - xzp;
  const int64_t per_m = numel(wd) / c.M;
  for (size_t i = 0; i < wq.size(); ++i) ws[i] = double(wq[i]) - wzp[i / per_m];
  Dims ydims;
  const Vec acc = refConv(c, xs, ws, nullptr, &ydims);

  OpRun ci{"ConvInteger",
           "",
           10,
           {typedTensor(DType::UInt8, c.x, xq), typedTensor(DType::Int8, wd, wq),
            typedTensor(DType::UInt8, {}, std::vector<uint8_t>{xzp}),
            typedTensor(DType::Int8, {c.M}, wzp)},
           convAttrs(c)};
  auto out = ci.run();
  REQUIRE(out[0].dtype() == DType::Int32);
  REQUIRE(out[0].dims() == ydims);
  requireClose(toVec(out[0]), acc, 0, 0);

  const float x_scale = 0.02f, y_scale = 0.9f;
  const std::vector<float> w_scale = {0.01f, 0.02f, 0.015f, 0.03f, 0.005f, 0.01f};
  const std::vector<int32_t> bias = {100, -200, 0, 50, 7, -1};
  const uint8_t yzp = 120;
  OpRun q{
      "QLinearConv",
      "",
      10,
      {typedTensor(DType::UInt8, c.x, xq), floatTensor({}, {x_scale}),
       typedTensor(DType::UInt8, {}, std::vector<uint8_t>{xzp}), typedTensor(DType::Int8, wd, wq),
       floatTensor({c.M}, Vec(w_scale.begin(), w_scale.end())),
       typedTensor(DType::Int8, {c.M}, wzp), floatTensor({}, {y_scale}),
       typedTensor(DType::UInt8, {}, std::vector<uint8_t>{yzp}),
       typedTensor(DType::Int32, {c.M}, bias)},
      convAttrs(c)};
  auto qo = q.run();
  REQUIRE(qo[0].dtype() == DType::UInt8);
  const int64_t P = numel(ydims) / c.M;
  Vec want(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t m = (i / P) % c.M;
    const double scale = double(float(x_scale * w_scale[m] / y_scale));
    want[i] = std::min(255.0, std::max(0.0, std::nearbyint((acc[i] + bias[m]) * scale) + yzp));
  }
  requireClose(toVec(qo[0]), want, 0, 0);
}

// ---- Gemm / MatMul ----

TEST_CASE("Gemm attributes and C broadcasting", "[kernels][gemm]") {
  struct Case {
    int64_t M, N, K;
    int ta, tb;
    float alpha, beta;
    Dims cdims;
    int64_t opset;
  };
  const Case cases[] = {
      {3, 5, 4, 0, 0, 1.f, 1.f, {5}, 13},      {3, 5, 4, 1, 0, 0.5f, 2.f, {3, 5}, 13},
      {3, 5, 4, 0, 1, 1.f, 0.3f, {3, 1}, 13},  {3, 5, 4, 1, 1, 2.f, 1.f, {}, 13},
      {7, 13, 5, 0, 0, 1.f, 1.f, {1, 13}, 13}, {65, 129, 33, 1, 1, 1.f, 1.f, {1}, 9},
      {1, 1, 1, 0, 0, 1.f, 1.f, {}, 11},       {4, 6, 3, 0, 0, 1.f, 1.f, {4, 6}, 6},
  };
  for (const Case& c : cases) {
    Vec a = randomVec(c.M * c.K, 1), b = randomVec(c.K * c.N, 2);
    const bool has_c = !(c.cdims.empty() && (c.opset >= 11));
    Dims cd = c.cdims;
    Vec cv = randomVec(numel(cd), 3);
    OpRun r{"Gemm",
            "",
            c.opset,
            {floatTensor(c.ta ? Dims{c.K, c.M} : Dims{c.M, c.K}, a),
             floatTensor(c.tb ? Dims{c.N, c.K} : Dims{c.K, c.N}, b)},
            {intAttr("transA", c.ta), intAttr("transB", c.tb), flt("alpha", c.alpha),
             flt("beta", c.beta)}};
    if (has_c) r.inputs.push_back(floatTensor(cd, cv));
    auto out = r.run();
    Vec want(c.M * c.N);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < c.K; ++k)
          acc +=
              (c.ta ? a[k * c.M + i] : a[i * c.K + k]) * (c.tb ? b[j * c.K + k] : b[k * c.N + j]);
        double cval = 0;
        if (has_c) {
          const int64_t cm = cd.size() == 2 ? cd[0] : 1, cn = cd.empty() ? 1 : cd.back();
          cval = cv[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
        }
        want[i * c.N + j] = c.alpha * acc + c.beta * cval;
      }
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.ta << " tb=" << c.tb);
    REQUIRE(out[0].dims() == Dims{c.M, c.N});
    requireClose(toVec(out[0]), want);
  }
}

TEST_CASE("FusedGemm adds C and residual and activation", "[kernels][gemm][fused]") {
  const int64_t M = 9, N = 21, K = 7;
  Vec a = randomVec(M * K, 1), b = randomVec(N * K, 2), c = randomVec(N, 3),
      z = randomVec(M * N, 4);
  for (const char* act : {"Relu", "Gelu", "HardSwish", "Tanh"}) {
    OpRun r{"FusedGemm",
            "fusectl",
            1,
            {floatTensor({M, K}, a), floatTensor({N, K}, b), floatTensor({N}, c),
             floatTensor({M, N}, z)},
            {intAttr("transB", 1), flt("alpha", 0.5f), str("activation", act)}};
    auto out = r.run();
    Vec want(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += a[i * K + k] * b[j * K + k];
        want[i * N + j] = actRef(act, 0.5 * acc + c[j] + z[i * N + j], {});
      }
    INFO(act);
    requireClose(toVec(out[0]), want, 1e-5, 1e-4);
  }
}

namespace {
// numpy matmul by definition (1-D promotion, batch broadcast).
Vec refMatMul(const Dims& ad0, const Vec& a, const Dims& bd0, const Vec& b, Dims* out) {
  Dims ad = ad0, bd = bd0;
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
  const size_t rb = std::max(ad.size(), bd.size()) - 2;
  Dims abat(rb, 1), bbat(rb, 1), bat(rb);
  for (size_t i = 0; i < ad.size() - 2; ++i) abat[rb - (ad.size() - 2) + i] = ad[i];
  for (size_t i = 0; i < bd.size() - 2; ++i) bbat[rb - (bd.size() - 2) + i] = bd[i];
  for (size_t i = 0; i < rb; ++i) bat[i] = std::max(abat[i], bbat[i]);
  *out = bat;
  if (ad0.size() > 1) out->push_back(M);
  if (bd0.size() > 1) out->push_back(N);
  const int64_t nb = numel(bat);
  Vec y(nb * M * N);
  for (int64_t t = 0; t < nb; ++t) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0, rem = t, div = nb; i < rb; ++i) {
      div /= bat[i];
      const int64_t idx = (rem / div) % bat[i];
      ia = ia * abat[i] + (abat[i] == 1 ? 0 : idx);
      ib = ib * bbat[i] + (bbat[i] == 1 ? 0 : idx);
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += a[(ia * M + i) * K + k] * b[(ib * K + k) * N + j];
        y[(t * M + i) * N + j] = acc;
      }
  }
  return y;
}
}  // namespace

TEST_CASE("MatMul batching and broadcasting and 1-D operands", "[kernels][gemm]") {
  const std::pair<Dims, Dims> cases[] = {
      {{4}, {4}},
      {{3, 4}, {4}},
      {{4}, {4, 5}},
      {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {3, 4, 5}},
      {{1, 3, 4}, {6, 4, 2}},
      {{4}, {2, 3, 4, 5}},
      {{7, 13}, {13, 5}},
      {{65, 33}, {33, 129}},
      {{5, 20, 30}, {5, 30, 40}},
  };
  for (const auto& [ad, bd] : cases) {
    Vec a = randomVec(numel(ad), 1), b = randomVec(numel(bd), 2);
    Dims yd;
    const Vec want = refMatMul(ad, a, bd, b, &yd);
    for (int threads : {1, 2}) {
      OpRun r{"MatMul", "", 13, {floatTensor(ad, a), floatTensor(bd, b)}, {}};
      r.threads = threads;
      auto out = r.run();
      REQUIRE(out[0].dims() == yd);
      requireClose(toVec(out[0]), want);
    }
  }
}

TEST_CASE("MatMulInteger and QLinearMatMul with per-row/column parameters",
          "[kernels][gemm][quant]") {
  const int64_t M = 5, K = 7, N = 6;
  std::mt19937 gen(3);
  std::vector<uint8_t> a(M * K);
  std::vector<int8_t> b(K * N);
  for (auto& v : a) v = static_cast<uint8_t>(gen() % 256);
  for (auto& v : b) v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
  const std::vector<uint8_t> azp = {1, 130, 7, 255, 0};      // per row
  const std::vector<int8_t> bzp = {0, -3, 4, 9, -128, 127};  // per column
  Vec acc(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += (double(a[i * K + k]) - azp[i]) * (double(b[k * N + j]) - bzp[j]);
      acc[i * N + j] = s;
    }
  OpRun mi{"MatMulInteger",
           "",
           10,
           {typedTensor(DType::UInt8, {M, K}, a), typedTensor(DType::Int8, {K, N}, b),
            typedTensor(DType::UInt8, {M}, azp), typedTensor(DType::Int8, {N}, bzp)},
           {}};
  requireClose(toVec(mi.run()[0]), acc, 0, 0);

  const std::vector<float> as = {0.1f, 0.2f, 0.05f, 0.3f, 0.01f};
  const std::vector<float> bs = {0.02f, 0.01f, 0.03f, 0.04f, 0.005f, 0.02f};
  const float ys = 0.7f;
  const int8_t yzp = -5;
  OpRun q{"QLinearMatMul",
          "",
          10,
          {typedTensor(DType::UInt8, {M, K}, a), floatTensor({M}, Vec(as.begin(), as.end())),
           typedTensor(DType::UInt8, {M}, azp), typedTensor(DType::Int8, {K, N}, b),
           floatTensor({N}, Vec(bs.begin(), bs.end())), typedTensor(DType::Int8, {N}, bzp),
           floatTensor({}, {ys}), typedTensor(DType::Int8, {}, std::vector<int8_t>{yzp})},
          {}};
  auto out = q.run();
  REQUIRE(out[0].dtype() == DType::Int8);
  Vec want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const double scale = double(float(as[i] * bs[j] / ys));
      want[i * N + j] =
          std::min(127.0, std::max(-128.0, std::nearbyint(acc[i * N + j] * scale) + yzp));
    }
  requireClose(toVec(out[0]), want, 0, 0);
}

// ---- pools ----

namespace {
struct PoolCase {
  Dims x;
  Dims k{}, strides{}, dilations{}, pads{};
  std::string auto_pad = "NOTSET";
  int ceil = 0;
  int include_pad = 0;
};

// Direct pooling: windows clipped to the input; the pad-inclusive count stops at in + pad_end.
Vec refPool(const PoolCase& c, const Vec& x, bool is_max, Dims* ydims, std::vector<int64_t>* arg,
            bool col_major = false) {
  const size_t r = c.k.size();
  Dims pads = c.pads.empty() ? Dims(2 * r, 0) : c.pads, out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = c.strides.empty() ? 1 : c.strides[i],
                  d = c.dilations.empty() ? 1 : c.dilations[i];
    const int64_t in = c.x[2 + i], span = (c.k[i] - 1) * d + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      out[i] = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out[i] - 1) * s + span - in);
      pads[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[i + r] = total - pads[i];
    } else if (c.auto_pad == "VALID") {
      out[i] = (in - span) / s + 1;
    } else {
      const double f = double(in + pads[i] + pads[i + r] - span) / s;
      out[i] = (c.ceil ? int64_t(std::ceil(f)) : int64_t(std::floor(f))) + 1;
      if (c.ceil && (out[i] - 1) * s >= in + pads[i]) --out[i];
    }
  }
  *ydims = {c.x[0], c.x[1]};
  ydims->insert(ydims->end(), out.begin(), out.end());
  const Dims in(c.x.begin() + 2, c.x.end());
  const int64_t planes = c.x[0] * c.x[1], ip = numel(in), op = numel(out), taps = numel(c.k);
  Vec y(planes * op);
  if (arg) arg->assign(planes * op, 0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t p = 0; p < op; ++p) {
      Dims o(r);
      for (int64_t rem = p, i = r - 1; i >= 0; --i) {
        o[i] = rem % out[i];
        rem /= out[i];
      }
      double best = -INFINITY, sum = 0;
      int64_t count_valid = 0, count_pad = 0, best_idx = 0;
      for (int64_t t = 0; t < taps; ++t) {
        Dims kp(r);
        for (int64_t rem = t, i = r - 1; i >= 0; --i) {
          kp[i] = rem % c.k[i];
          rem /= c.k[i];
        }
        bool inside = true, in_padded = true;
        int64_t idx = 0, cidx = 0, mul = 1;
        for (size_t i = 0; i < r; ++i) {
          const int64_t s = c.strides.empty() ? 1 : c.strides[i],
                        d = c.dilations.empty() ? 1 : c.dilations[i];
          const int64_t pos = o[i] * s - pads[i] + kp[i] * d;
          if (pos < 0 || pos >= in[i]) inside = false;
          if (pos < -pads[i] || pos >= in[i] + pads[i + r]) in_padded = false;
          idx = idx * in[i] + pos;
          cidx += pos * mul;
          mul *= in[i];
        }
        if (in_padded) ++count_pad;
        if (!inside) continue;
        const double v = x[pl * ip + idx];
        ++count_valid;
        sum += v;
        if (v > best) {
          best = v;
          best_idx = pl * ip + (col_major ? cidx : idx);
        }
      }
      y[pl * op + p] = is_max ? best : sum / (c.include_pad ? count_pad : count_valid);
      if (arg) (*arg)[pl * op + p] = best_idx;
    }
  return y;
}

std::vector<Attribute> poolAttrs(const PoolCase& c) {
  std::vector<Attribute> a = {ints("kernel_shape", c.k)};
  if (!c.strides.empty()) a.push_back(ints("strides", c.strides));
  if (!c.dilations.empty()) a.push_back(ints("dilations", c.dilations));
  if (!c.pads.empty()) a.push_back(ints("pads", c.pads));
  if (c.auto_pad != "NOTSET") a.push_back(str("auto_pad", c.auto_pad.c_str()));
  if (c.ceil) a.push_back(intAttr("ceil_mode", 1));
  if (c.include_pad) a.push_back(intAttr("count_include_pad", 1));
  return a;
}
}  // namespace

TEST_CASE("MaxPool and AveragePool match direct windows", "[kernels][pool]") {
  const std::vector<PoolCase> cases = {
      {{1, 2, 6, 6}, {2, 2}, {2, 2}},
      {{2, 3, 7, 5}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}},
      {{1, 2, 7, 7}, {3, 3}, {2, 2}, {}, {}, "NOTSET", 1},
      {{1, 1, 2, 2}, {1, 1}, {2, 2}, {}, {}, "NOTSET", 1},  // ceil window would start in padding
      {{1, 2, 8, 9}, {3, 2}, {2, 3}, {2, 1}, {1, 0, 2, 1}, "NOTSET", 1, 1},
      {{1, 2, 7, 7}, {3, 3}, {2, 2}, {}, {}, "SAME_UPPER"},
      {{1, 2, 8, 7}, {2, 3}, {3, 2}, {}, {}, "SAME_LOWER", 0, 1},
      {{1, 2, 7, 7}, {3, 2}, {2, 2}, {}, {}, "VALID"},
      {{2, 3, 11}, {4}, {3}, {2}, {1, 2}, "NOTSET", 1, 1},                     // 1-D
      {{1, 2, 5, 6, 7}, {2, 3, 2}, {2, 1, 2}, {1, 2, 2}, {1, 1, 0, 0, 1, 1}},  // 3-D
      {{1, 3, 4, 9, 8}, {3, 3, 3}, {1, 1, 1}, {}, {1, 1, 1, 1, 1, 1}},         // S3D's branch pool
      // Rows wider than two vectors take the separable path, narrower ones maxPoolNarrowPlanes
      // (one vector up to 16 wide, two up to 32, 2-D or 3-D).
      {{1, 2, 5, 40}, {3, 3}, {1, 2}, {}, {1, 1, 1, 1}},
      {{1, 2, 5, 33}, {3, 3}, {1, 1}, {}, {1, 1, 1, 1}},
      {{1, 3, 16, 16}, {3, 3}, {1, 1}, {}, {1, 1, 1, 1}},
      {{1, 2, 17, 17}, {3, 3}, {1, 1}, {}, {1, 1, 1, 1}},
      {{1, 2, 6, 32}, {3, 3}, {1, 1}, {}, {1, 1, 1, 1}},
      {{1, 2, 7, 28}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}},                    // 32 wide in, 14 out
      {{1, 2, 5, 30}, {2, 3}, {1, 1}, {1, 2}, {0, 2, 1, 1}},                // dilated, uneven pads
      {{1, 3, 4, 14, 14}, {3, 3, 3}, {1, 1, 1}, {}, {1, 1, 1, 1, 1, 1}},   // S3D's, 14 wide
      {{1, 2, 4, 9, 28}, {3, 3, 3}, {1, 1, 1}, {}, {1, 1, 1, 1, 1, 1}},    // S3D's, 28 wide
      {{1, 2, 4, 8, 28}, {3, 3, 3}, {2, 2, 2}, {}, {1, 1, 1, 1, 1, 1}},    // stride 2, 28 -> 14
      {{1, 2, 3, 6, 20}, {2, 2, 3}, {1, 1, 1}, {2, 1, 2}, {1, 0, 2, 0, 1, 1}, "NOTSET", 1},
      // Windows over the whole input (AveragePool as GlobalAveragePool): S3D's closing pool,
      // 2-D with ceil_mode and count_include_pad (no padding to count), 1-D.
      {{1, 3, 2, 7, 7}, {2, 7, 7}, {1, 1, 1}},
      {{2, 4, 5, 6}, {5, 6}, {2, 2}, {}, {}, "NOTSET", 1, 1},
      {{1, 2, 9}, {9}, {1}},
      {{2, 2, 6, 7, 5}, {3, 2, 3}, {2, 2, 1}, {1, 1, 2}, {1, 0, 2, 1, 1, 1}, "NOTSET", 1, 1},
      {{1, 1, 5, 5}, {3, 3}, {1, 1}, {}, {2, 2, 2, 2}, "NOTSET", 0, 1},
  };
  int id = 0;
  for (const PoolCase& c : cases) {
    ++id;
    Vec x = randomVec(numel(c.x), 70 + id);
    Dims yd;
    std::vector<int64_t> arg;
    const Vec want_max = refPool(c, x, true, &yd, &arg);
    const Vec want_avg = refPool(c, x, false, &yd, nullptr);
    OpRun mp{"MaxPool", "", 12, {floatTensor(c.x, x)}, poolAttrs(c), 2};
    auto mo = mp.run();
    INFO("case " << id);
    REQUIRE(mo[0].dims() == yd);
    requireClose(toVec(mo[0]), want_max, 0, 0);
    requireClose(toVec(mo[1]), Vec(arg.begin(), arg.end()), 0, 0);
    // Without Indices, MaxPool takes the separable path (rows combined, then the window).
    OpRun mp1{"MaxPool", "", 12, {floatTensor(c.x, x)}, poolAttrs(c)};
    requireClose(toVec(mp1.run()[0]), want_max, 0, 0);
    OpRun ap{"AveragePool", "", 19, {floatTensor(c.x, x)}, poolAttrs(c)};
    auto ao = ap.run();
    REQUIRE(ao[0].dims() == yd);
    requireClose(toVec(ao[0]), want_avg, 1e-6, 1e-5);
  }
  // storage_order=1: column-major indices within a plane.
  PoolCase c{{1, 2, 5, 4}, {2, 2}, {1, 2}};
  Vec x = randomVec(numel(c.x), 99);
  Dims yd;
  std::vector<int64_t> arg;
  refPool(c, x, true, &yd, &arg, true);
  std::vector<Attribute> attrs = poolAttrs(c);
  attrs.push_back(intAttr("storage_order", 1));
  OpRun mp{"MaxPool", "", 8, {floatTensor(c.x, x)}, attrs, 2};
  requireClose(toVec(mp.run()[1]), Vec(arg.begin(), arg.end()), 0, 0);
  // int8 MaxPool (opset 12) is exact.
  std::vector<int8_t> xi = {-5, 3, 7, -128, 127, 0, 1, 2, 9};
  OpRun mi{"MaxPool",
           "",
           12,
           {typedTensor(DType::Int8, {1, 1, 3, 3}, xi)},
           {ints("kernel_shape", {2, 2})}};
  auto out = mi.run();
  REQUIRE(out[0].dtype() == DType::Int8);
  requireClose(toVec(out[0]), {127, 127, 127, 127}, 0, 0);
}

TEST_CASE("GlobalAveragePool and GlobalMaxPool", "[kernels][pool]") {
  const Dims xd = {2, 3, 4, 5};
  Vec x = randomVec(numel(xd), 5);
  OpRun ga{"GlobalAveragePool", "", 1, {floatTensor(xd, x)}, {}};
  OpRun gm{"GlobalMaxPool", "", 1, {floatTensor(xd, x)}, {}};
  auto a = ga.run(), m = gm.run();
  REQUIRE(a[0].dims() == Dims{2, 3, 1, 1});
  Vec wa(6), wm(6, -INFINITY);
  for (int64_t p = 0; p < 6; ++p) {
    for (int64_t i = 0; i < 20; ++i) {
      wa[p] += x[p * 20 + i] / 20;
      wm[p] = std::max(wm[p], x[p * 20 + i]);
    }
  }
  requireClose(toVec(a[0]), wa, 1e-6);
  requireClose(toVec(m[0]), wm, 0, 0);
}

// ---- normalization ----

TEST_CASE("BatchNormalization inference and spatial 0 and training mode", "[kernels][norm]") {
  const Dims xd = {2, 3, 4, 5};
  Vec x = randomVec(numel(xd), 1), s = randomVec(3, 2), b = randomVec(3, 3), m = randomVec(3, 4),
      v = randomVec(3, 5, 0.1, 2);
  const double eps = 1e-3;
  Vec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / 20) % 3;
    want[i] = s[c] * (x[i] - m[c]) / std::sqrt(v[c] + eps) + b[c];
  }
  for (int64_t opset : {6, 9, 15}) {
    OpRun r{"BatchNormalization",
            "",
            opset,
            {floatTensor(xd, x), floatTensor({3}, s), floatTensor({3}, b), floatTensor({3}, m),
             floatTensor({3}, v)},
            {flt("epsilon", float(eps))}};
    requireClose(toVec(r.run()[0]), want, 1e-5);
  }
  // spatial=0: per-element parameters of shape [C, H, W].
  const Dims pd = {3, 4, 5};
  Vec s2 = randomVec(60, 6), b2 = randomVec(60, 7), m2 = randomVec(60, 8),
      v2 = randomVec(60, 9, 0.1, 2);
  OpRun r2{"BatchNormalization",
           "",
           7,
           {floatTensor(xd, x), floatTensor(pd, s2), floatTensor(pd, b2), floatTensor(pd, m2),
            floatTensor(pd, v2)},
           {intAttr("spatial", 0)}};
  Vec want2(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t f = i % 60;
    want2[i] = s2[f] * (x[i] - m2[f]) / std::sqrt(v2[f] + 1e-5) + b2[f];
  }
  requireClose(toVec(r2.run()[0]), want2, 1e-5);
  // training_mode=1 at opset 15: batch statistics and running averages.
  OpRun r3{"BatchNormalization",
           "",
           15,
           {floatTensor(xd, x), floatTensor({3}, s), floatTensor({3}, b), floatTensor({3}, m),
            floatTensor({3}, v)},
           {intAttr("training_mode", 1), flt("momentum", 0.8f)},
           3};
  auto out = r3.run();
  Vec bm(3, 0), bv(3, 0);
  for (size_t i = 0; i < x.size(); ++i) bm[(i / 20) % 3] += x[i] / 40;
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / 20) % 3;
    bv[c] += (x[i] - bm[c]) * (x[i] - bm[c]) / 40;
  }
  Vec want3(x.size()), rm(3), rv(3);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / 20) % 3;
    want3[i] = s[c] * (x[i] - bm[c]) / std::sqrt(bv[c] + 1e-5) + b[c];
  }
  for (int c = 0; c < 3; ++c) {
    rm[c] = m[c] * 0.8 + bm[c] * 0.2;
    rv[c] = v[c] * 0.8 + bv[c] * 0.2;
  }
  requireClose(toVec(out[0]), want3, 1e-5);
  requireClose(toVec(out[1]), rm, 1e-5);
  requireClose(toVec(out[2]), rv, 1e-5);
}

TEST_CASE("LayerNormalization axes and statistics outputs", "[kernels][norm]") {
  const Dims xd = {2, 3, 4};
  Vec x = randomVec(numel(xd), 1);
  for (int64_t axis : {-1, 1, 0, 2, -2}) {
    const int64_t a = axis < 0 ? axis + 3 : axis;
    const Dims nd(xd.begin() + a, xd.end());
    const int64_t cols = numel(nd), rows = numel(xd) / cols;
    Vec s = randomVec(cols, 2), b = randomVec(cols, 3);
    OpRun r{"LayerNormalization",
            "",
            17,
            {floatTensor(xd, x), floatTensor(nd, s), floatTensor(nd, b)},
            {intAttr("axis", axis), flt("epsilon", 1e-3f)},
            3};
    auto out = r.run();
    Vec want(x.size()), mean(rows), inv(rows);
    for (int64_t i = 0; i < rows; ++i) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mu += x[i * cols + j] / cols;
      for (int64_t j = 0; j < cols; ++j)
        var += (x[i * cols + j] - mu) * (x[i * cols + j] - mu) / cols;
      mean[i] = mu;
      inv[i] = 1 / std::sqrt(var + 1e-3);
      for (int64_t j = 0; j < cols; ++j)
        want[i * cols + j] = (x[i * cols + j] - mu) * inv[i] * s[j] + b[j];
    }
    INFO("axis " << axis);
    requireClose(toVec(out[0]), want, 1e-5);
    Dims sd(xd.begin(), xd.begin() + a);
    sd.resize(3, 1);
    REQUIRE(out[1].dims() == sd);
    requireClose(toVec(out[1]), mean, 1e-6);
    requireClose(toVec(out[2]), inv, 1e-5);
  }
  // Scale broadcast over the normalized shape, no bias.
  OpRun r{"LayerNormalization",
          "",
          17,
          {floatTensor(xd, x), floatTensor({1, 4}, {1, 2, 3, 4})},
          {intAttr("axis", 1)}};
  auto out = r.run();
  Vec want(x.size());
  for (int64_t i = 0; i < 2; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < 12; ++j) mu += x[i * 12 + j] / 12;
    for (int64_t j = 0; j < 12; ++j) var += (x[i * 12 + j] - mu) * (x[i * 12 + j] - mu) / 12;
    for (int64_t j = 0; j < 12; ++j)
      want[i * 12 + j] = (x[i * 12 + j] - mu) / std::sqrt(var + 1e-5) * (j % 4 + 1);
  }
  requireClose(toVec(out[0]), want, 1e-5);
}

TEST_CASE("InstanceNormalization", "[kernels][norm]") {
  const Dims xd = {2, 3, 5, 2};
  Vec x = randomVec(numel(xd), 1), s = randomVec(3, 2), b = randomVec(3, 3);
  OpRun r{"InstanceNormalization",
          "",
          6,
          {floatTensor(xd, x), floatTensor({3}, s), floatTensor({3}, b)},
          {flt("epsilon", 1e-2f)}};
  Vec want(x.size());
  for (int64_t p = 0; p < 6; ++p) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < 10; ++i) mu += x[p * 10 + i] / 10;
    for (int64_t i = 0; i < 10; ++i) var += (x[p * 10 + i] - mu) * (x[p * 10 + i] - mu) / 10;
    for (int64_t i = 0; i < 10; ++i)
      want[p * 10 + i] = s[p % 3] * (x[p * 10 + i] - mu) / std::sqrt(var + 1e-2) + b[p % 3];
  }
  requireClose(toVec(r.run()[0]), want, 1e-5);
}

// ---- Resize ----

namespace {
// A port of the ONNX reference's per-point recursion (op_resize.py), in double: for each output
// coordinate, interpolate the inner dims for every index of the outer dim, then the outer dim.
struct ResizeRef {
  std::string mode = "nearest", coord = "half_pixel", nearest_mode = "round_prefer_floor";
  double A = -0.75, extrapolation = 0;
  bool exclude_outside = false, antialias = false;

  std::vector<double> coeffs(double ratio, double scale) const {
    if (mode == "nearest") {
      if (ratio == std::floor(ratio)) return {0, 1};
      if (nearest_mode == "round_prefer_floor") return {double(ratio <= 0.5), double(ratio > 0.5)};
      if (nearest_mode == "round_prefer_ceil") return {double(ratio < 0.5), double(ratio >= 0.5)};
      if (nearest_mode == "floor") return {1, 0};
      return {0, 1};
    }
    if (mode == "linear") {
      if (!antialias) return {1 - ratio, ratio};
      const double s = std::min(scale, 1.0);
      const int64_t start = int64_t(std::floor(-1 / s) + 1), fp = 2 - 2 * start;
      std::vector<double> c;
      double sum = 0;
      for (int64_t i = start; i < start + fp; ++i) {
        c.push_back(std::min(1.0, std::max(0.0, 1 - std::abs((i - ratio) * s))));
        sum += c.back();
      }
      for (double& v : c) v /= sum;
      return c;
    }
    auto cc = [&](double x) {
      x = std::abs(x);
      if (x <= 1) return (A + 2) * x * x * x - (A + 3) * x * x + 1;
      if (x < 2) return A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
      return 0.0;
    };
    if (!antialias) return {cc(ratio + 1), cc(ratio), cc(1 - ratio), cc(2 - ratio)};
    const double s = std::min(scale, 1.0);
    const int64_t is = int64_t(std::floor(-2 / s) + 1), ie = 2 - is;
    std::vector<double> c;
    double sum = 0;
    for (int64_t i = is; i < ie; ++i) {
      c.push_back(cc(s * (i - ratio)));
      sum += c.back();
    }
    for (double& v : c) v /= sum;
    return c;
  }

  double interp1d(const std::vector<double>& data, double scale, int64_t out_int, double x,
                  double r0, double r1) const {
    const int64_t n_in = data.size();
    const double out_w = scale * n_in;
    double xo;
    if (coord == "align_corners")
      xo = out_w == 1 ? 0 : x * (n_in - 1) / (out_w - 1);
    else if (coord == "asymmetric")
      xo = x / scale;
    else if (coord == "tf_crop_and_resize") {
      xo = out_w == 1 ? (r1 - r0) * (n_in - 1) / 2 : x * (r1 - r0) * (n_in - 1) / (out_w - 1);
      xo += r0 * (n_in - 1);
      if (xo < 0 || xo > n_in - 1) return extrapolation;
    } else if (coord == "pytorch_half_pixel")
      xo = out_w == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    else if (coord == "half_pixel_symmetric") {
      const double adj = out_int / out_w, center = n_in / 2.0;
      xo = center * (1 - adj) + (x + 0.5) / scale - 0.5;
    } else
      xo = (x + 0.5) / scale - 0.5;
    const int64_t xi = int64_t(std::floor(xo));
    const double ratio = xo == std::floor(xo) ? 1.0 : xo - xi;
    std::vector<double> c = coeffs(ratio, scale);
    const int64_t n = c.size();
    // The n nearest indices of the edge-padded array, preferring smaller ones.
    const int64_t pad = (n + 1) / 2;
    std::vector<std::pair<double, int64_t>> order;
    for (int64_t i = 0; i < n_in + 2 * pad; ++i) order.push_back({std::abs(xo + pad - i), i});
    std::sort(order.begin(), order.end());
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < n; ++i) idx.push_back(order[i].second - pad);
    std::sort(idx.begin(), idx.end());
    if (exclude_outside) {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (idx[i] < 0 || idx[i] >= n_in) c[i] = 0;
        sum += c[i];
      }
      for (double& v : c) v /= sum;
    }
    double acc = 0;
    for (int64_t i = 0; i < n; ++i)
      acc += c[i] * data[std::min(std::max<int64_t>(idx[i], 0), n_in - 1)];
    return acc;
  }

  // data is a dense tensor of dims; x the output coordinate.
  double point(const Vec& data, const Dims& dims, const std::vector<double>& scales,
               const Dims& out, const Dims& x, const Vec& roi, size_t d0) const {
    const size_t r = dims.size();
    if (d0 == r - 1) {
      return interp1d(std::vector<double>(data.begin(), data.end()), scales[d0], out[d0],
                      double(x[d0]), roi[d0], roi[d0 + r]);
    }
    const int64_t inner = data.size() / dims[d0];
    std::vector<double> res;
    for (int64_t i = 0; i < dims[d0]; ++i) {
      Vec sub(data.begin() + i * inner, data.begin() + (i + 1) * inner);
      res.push_back(point(sub, dims, scales, out, x, roi, d0 + 1));
    }
    return interp1d(res, scales[d0], out[d0], double(x[d0]), roi[d0], roi[d0 + r]);
  }

  Vec run(const Vec& data, const Dims& dims, const std::vector<double>& scales, const Dims& out,
          const Vec& roi) const {
    Vec y(numel(out));
    const size_t r = dims.size();
    for (int64_t p = 0; p < numel(out); ++p) {
      Dims x(r);
      for (int64_t rem = p, i = r - 1; i >= 0; --i) {
        x[i] = rem % out[i];
        rem /= out[i];
      }
      y[p] = point(data, dims, scales, out, x, roi, 0);
    }
    return y;
  }
};
}  // namespace

TEST_CASE("Resize modes against the reference recursion", "[kernels][resize]") {
  struct Case {
    ResizeRef ref;
    Dims x;
    std::vector<float> scales;
    Dims sizes;
    Vec roi;
  };
  std::vector<Case> cases;
  const Dims x4 = {1, 2, 4, 5};
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                            "half_pixel_symmetric"}) {
    for (const char* nm : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
      ResizeRef r;
      r.coord = coord;
      r.nearest_mode = nm;
      cases.push_back({r, x4, {1, 1, 2.f, 1.5f}, {}, {}});
      cases.push_back({r, x4, {}, {1, 2, 3, 7}, {}});
    }
    for (const char* mode : {"linear", "cubic"}) {
      ResizeRef r;
      r.mode = mode;
      r.coord = coord;
      cases.push_back({r, x4, {1, 1, 0.6f, 1.7f}, {}, {}});
      cases.push_back({r, x4, {}, {1, 2, 7, 3}, {}});
      r.exclude_outside = true;
      r.A = -0.5;
      cases.push_back({r, x4, {1, 1, 2.f, 0.8f}, {}, {}});
      r.exclude_outside = false;
      r.antialias = true;
      cases.push_back({r, x4, {1, 1, 0.5f, 0.6f}, {}, {}});
      cases.push_back({r, x4, {1, 1, 1.5f, 0.4f}, {}, {}});
    }
  }
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    ResizeRef r;
    r.mode = mode;
    r.coord = "tf_crop_and_resize";
    r.extrapolation = 10;
    cases.push_back({r, x4, {}, {1, 2, 3, 3}, {0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8}});
    cases.push_back({r, x4, {}, {1, 2, 5, 4}, {0, 0, -0.2, 0.1, 1, 1, 1.3, 1.1}});
  }
  {
    ResizeRef r;
    r.mode = "linear";
    cases.push_back({r, {2, 3, 4}, {1, 2.5f, 0.75f}, {}, {}});  // 3-D, resized channel dim
  }
  int id = 0;
  for (const Case& c : cases) {
    ++id;
    Vec x = randomVec(numel(c.x), 200 + id);
    Dims out = c.x;
    std::vector<double> scales(c.x.size());
    for (size_t i = 0; i < c.x.size(); ++i) {
      if (!c.scales.empty()) {
        scales[i] = c.scales[i];
        out[i] = int64_t(std::floor(double(c.scales[i]) * c.x[i]));
      } else {
        out[i] = c.sizes[i];
        scales[i] = double(c.sizes[i]) / c.x[i];
      }
    }
    Vec roi = c.roi;
    for (double& v : roi) v = static_cast<float>(v);  // the kernel reads a float tensor
    if (roi.empty()) {
      roi.assign(2 * c.x.size(), 0);
      std::fill(roi.begin() + c.x.size(), roi.end(), 1);
    }
    const Vec want = c.ref.run(x, c.x, scales, out, roi);
    std::vector<Attribute> attrs = {str("mode", c.ref.mode.c_str()),
                                    str("coordinate_transformation_mode", c.ref.coord.c_str()),
                                    str("nearest_mode", c.ref.nearest_mode.c_str()),
                                    flt("cubic_coeff_a", float(c.ref.A)),
                                    intAttr("exclude_outside", c.ref.exclude_outside),
                                    flt("extrapolation_value", float(c.ref.extrapolation))};
    if (c.ref.antialias) attrs.push_back(intAttr("antialias", 1));
    OpRun r{"Resize",
            "",
            19,
            {c.roi.empty() ? HostTensor() : floatTensor({int64_t(c.roi.size())}, c.roi),
             c.scales.empty()
                 ? HostTensor()
                 : floatTensor({int64_t(c.scales.size())}, Vec(c.scales.begin(), c.scales.end())),
             c.sizes.empty() ? HostTensor() : int64Tensor({int64_t(c.sizes.size())}, c.sizes)},
            attrs};
    r.inputs.insert(r.inputs.begin(), floatTensor(c.x, x));
    auto got = r.run();
    INFO("case " << id << " mode " << c.ref.mode << " coord " << c.ref.coord << " nearest "
                 << c.ref.nearest_mode << " antialias " << c.ref.antialias << " exclude "
                 << c.ref.exclude_outside);
    REQUIRE(got[0].dims() == out);
    requireClose(toVec(got[0]), want, 1e-5, 1e-4);
  }
}

TEST_CASE("Resize axes and keep_aspect_ratio_policy and opset 10 and Upsample",
          "[kernels][resize]") {
  const Dims xd = {1, 1, 4, 6};
  Vec x = randomVec(numel(xd), 3);
  ResizeRef ref;
  ref.mode = "linear";
  for (const char* policy : {"not_larger", "not_smaller"}) {
    // sizes (5, 5) on axes (3, 2): not_larger -> scale min(5/6, 5/4) = 5/6 on both axes.
    const double s = std::string(policy) == "not_larger" ? 5.0 / 6 : 5.0 / 4;
    const Dims out = {1, 1, int64_t(s * 4 + 0.5), int64_t(s * 6 + 0.5)};
    const Vec want = ref.run(x, xd, {1, 1, s, s}, out, {0, 0, 0, 0, 1, 1, 1, 1});
    OpRun r{"Resize",
            "",
            18,
            {floatTensor(xd, x), HostTensor(), HostTensor(), int64Tensor({2}, {5, 5})},
            {str("mode", "linear"), ints("axes", {3, 2}), str("keep_aspect_ratio_policy", policy)}};
    auto got = r.run();
    INFO(policy);
    REQUIRE(got[0].dims() == out);
    requireClose(toVec(got[0]), want, 1e-5, 1e-4);
  }
  // Upsample-7 (scales attribute) and -9 (input), and Resize-10: asymmetric, nearest = floor.
  Vec want(1 * 1 * 8 * 18);
  for (int64_t h = 0; h < 8; ++h)
    for (int64_t w = 0; w < 18; ++w) want[h * 18 + w] = x[(h / 2) * 6 + w / 3];
  OpRun u7{"Upsample", "", 7, {floatTensor(xd, x)}, {Attribute::ofFloats("scales", {1, 1, 2, 3})}};
  requireClose(toVec(u7.run()[0]), want, 0, 0);
  OpRun u9{"Upsample", "", 9, {floatTensor(xd, x), floatTensor({4}, {1, 1, 2, 3})}, {}};
  requireClose(toVec(u9.run()[0]), want, 0, 0);
  OpRun r10{"Resize", "", 10, {floatTensor(xd, x), floatTensor({4}, {1, 1, 2, 3})}, {}};
  requireClose(toVec(r10.run()[0]), want, 0, 0);
  ResizeRef lin;
  lin.mode = "linear";
  lin.coord = "asymmetric";
  const Vec wl = lin.run(x, xd, {1, 1, 2, 1.5}, {1, 1, 8, 9}, {0, 0, 0, 0, 1, 1, 1, 1});
  OpRun u9l{"Upsample",
            "",
            9,
            {floatTensor(xd, x), floatTensor({4}, {1, 1, 2, 1.5})},
            {str("mode", "linear")}};
  requireClose(toVec(u9l.run()[0]), wl, 1e-5, 1e-4);
  // Nearest copies integers exactly.
  OpRun ri{"Resize",
           "",
           13,
           {int64Tensor({1, 3}, {1, 1LL << 60, -7}), HostTensor(), floatTensor({2}, {1, 2})},
           {}};
  auto gi = ri.run();
  REQUIRE(gi[0].dtype() == DType::Int64);
  const int64_t* gp = gi[0].data<int64_t>();
  REQUIRE(std::vector<int64_t>(gp, gp + 6) ==
          std::vector<int64_t>{1, 1, 1LL << 60, 1LL << 60, -7, -7});
}

TEST_CASE("Resize and RoiAlign reject absurd scales and coordinates with a reason",
          "[kernels][resize]") {
  const Dims xd = {1, 1, 2, 3};
  const Vec x = randomVec(numel(xd), 5);
  const auto resizeBy = [&](Vec scales, Vec roi, const char* coord) {
    OpRun r{"Resize",
            "",
            13,
            {floatTensor(xd, x), roi.empty() ? HostTensor() : floatTensor({8}, roi),
             floatTensor({4}, scales)},
            {str("coordinate_transformation_mode", coord)}};
    return r;
  };
  // 3 * 1e30 is finite but no axis holds it; NaN and infinity are not scales.
  REQUIRE_THROWS_WITH(resizeBy({1, 1, 1, 1e30}, {}, "half_pixel").run(),
                      Catch::Contains("too long"));
  REQUIRE_THROWS_WITH(resizeBy({1, 1, NAN, 1}, {}, "half_pixel").run(),
                      Catch::Contains("not a positive finite number"));
  REQUIRE_THROWS_WITH(resizeBy({1, 1, 1, INFINITY}, {}, "half_pixel").run(),
                      Catch::Contains("not a positive finite number"));
  REQUIRE_THROWS_WITH(
      resizeBy({1, 1, 2, 2}, {0, 0, 0, NAN, 1, 1, 1, 1}, "tf_crop_and_resize").run(),
      Catch::Contains("not finite"));
  OpRun u7{"Upsample", "", 7, {floatTensor(xd, x)}, {Attribute::ofFloats("scales", {1, 1, 2, -3})}};
  REQUIRE_THROWS_WITH(u7.run(), Catch::Contains("not a positive finite number"));
  // A finite roi reaching outside the input still extrapolates, as before.
  auto crop = resizeBy({1, 1, 2, 2}, {0, 0, 0, -1e30f, 1, 1, 1, 1e30f}, "tf_crop_and_resize").run();
  REQUIRE(crop[0].dims() == Dims{1, 1, 4, 6});

  const Dims fd = {1, 1, 4, 4};
  const auto roiAlign = [&](Vec roi, int64_t sampling) {
    return OpRun{"RoiAlign",
                 "",
                 16,
                 {floatTensor(fd, randomVec(numel(fd), 6)), floatTensor({1, 4}, roi),
                  int64Tensor({1}, {0})},
                 {intAttr("sampling_ratio", sampling)}};
  };
  REQUIRE_THROWS_WITH(roiAlign({0, 0, INFINITY, 2}, 0).run(), Catch::Contains("not finite"));
  REQUIRE_THROWS_WITH(roiAlign({0, 0, 1e12f, 1e12f}, 0).run(),
                      Catch::Contains("sampling grid per bin"));
  REQUIRE_THROWS_WITH(roiAlign({0, 0, 2, 2}, 1LL << 40).run(),
                      Catch::Contains("sampling grid per bin"));
  // An inverted roi samples nothing in half_pixel mode: zeros, not an error.
  auto inverted = roiAlign({3e6f, 3e6f, 0, 0}, 0).run();
  REQUIRE(toVec(inverted[0]) == Vec{0});
}

// ---- Quantize ----

TEST_CASE("QuantizeLinear rounds half to even and saturates", "[kernels][quant]") {
  const Vec x = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, 1000, -1000, 0.25};
  OpRun q{"QuantizeLinear",
          "",
          13,
          {floatTensor({10}, x), floatTensor({}, {0.5}),
           typedTensor(DType::UInt8, {}, std::vector<uint8_t>{10})},
          {}};
  auto out = q.run();
  REQUIRE(out[0].dtype() == DType::UInt8);
  // x / 0.5 = 1, 3, 5, -1, -3, -5, 6.98, 2000, -2000, 0.5 -> rint + 10.
  requireClose(toVec(out[0]), {11, 13, 15, 9, 7, 5, 17, 255, 0, 10}, 0, 0);
  // Default uint8 without zero point; int8 with it: 2.5 -> 2, 3.5 -> 4.
  OpRun q2{"QuantizeLinear",
           "",
           10,
           {floatTensor({4}, {2.5, 3.5, -2.5, 300}), floatTensor({}, {1})},
           {}};
  auto o2 = q2.run();
  REQUIRE(o2[0].dtype() == DType::UInt8);
  requireClose(toVec(o2[0]), {2, 4, 0, 255}, 0, 0);
  OpRun q3{"QuantizeLinear",
           "",
           13,
           {floatTensor({4}, {2.5, 3.5, -2.5, -300}), floatTensor({}, {1}),
            typedTensor(DType::Int8, {}, std::vector<int8_t>{0})},
           {}};
  requireClose(toVec(q3.run()[0]), {2, 4, -2, -128}, 0, 0);
}

TEST_CASE("Quantize/Dequantize per axis and float16 scales", "[kernels][quant]") {
  const Dims xd = {2, 3, 2};
  Vec x = randomVec(numel(xd), 4, -5, 5);
  const Vec sc = {0.1, 0.05, 0.2};
  const std::vector<int8_t> zp = {0, -3, 5};
  OpRun q{"QuantizeLinear",
          "",
          13,
          {floatTensor(xd, x), floatTensor({3}, sc), typedTensor(DType::Int8, {3}, zp)},
          {intAttr("axis", 1)}};
  auto qo = q.run();
  Vec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / 2) % 3;
    want[i] = std::min(
        127.0, std::max(-128.0, double(std::nearbyint(float(x[i]) / float(sc[c]))) + zp[c]));
  }
  requireClose(toVec(qo[0]), want, 0, 0);
  OpRun d{"DequantizeLinear",
          "",
          13,
          {qo[0], floatTensor({3}, sc), typedTensor(DType::Int8, {3}, zp)},
          {intAttr("axis", 1)}};
  auto dq = d.run();
  Vec wd(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / 2) % 3;
    wd[i] = (want[i] - zp[c]) * float(sc[c]);
  }
  requireClose(toVec(dq[0]), wd, 1e-6);
  // Opset 19: a float16 scale makes DequantizeLinear return float16.
  HostTensor hs(DType::Float16, {});
  hs.mutableData<uint16_t>()[0] = floatToHalf(0.5f);
  OpRun d19{"DequantizeLinear",
            "",
            19,
            {typedTensor(DType::UInt8, {3}, std::vector<uint8_t>{0, 10, 255}), hs,
             typedTensor(DType::UInt8, {}, std::vector<uint8_t>{10})},
            {}};
  auto o19 = d19.run();
  REQUIRE(o19[0].dtype() == DType::Float16);
  requireClose(toVec(o19[0]), {-5, 0, 122.5}, 0, 0);
  // int32 dequantization (bias tensors).
  OpRun d32{
      "DequantizeLinear",
      "",
      13,
      {typedTensor(DType::Int32, {2}, std::vector<int32_t>{-1000, 7}), floatTensor({}, {0.25})},
      {}};
  requireClose(toVec(d32.run()[0]), {-250, 1.75}, 0, 0);
}

TEST_CASE("compute kernels report bad attributes clearly", "[kernels][errors]") {
  OpRun r{"Conv",
          "",
          11,
          {floatTensor({1, 3, 4, 4}, Vec(48, 1)), floatTensor({2, 2, 3, 3}, Vec(36, 1))},
          {intAttr("group", 1)}};
  REQUIRE_THROWS_WITH(r.run(), Catch::Contains("input channels per group"));
  OpRun b{"BatchNormalization",
          "",
          15,
          {floatTensor({1, 2, 2}, Vec(4, 1)), floatTensor({3}, Vec(3, 1)),
           floatTensor({2}, Vec(2, 0)), floatTensor({2}, Vec(2, 0)), floatTensor({2}, Vec(2, 1))},
          {}};
  REQUIRE_THROWS_WITH(b.run(), Catch::Contains("must have 2 values"));
}
