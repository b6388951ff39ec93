// The GEMM and convolution kernels on every path (each micro-kernel ISA forced, prepacked or
// packed per call, each epilogue, 1/2/3 threads, the skinny M path) against naive
// double-precision loops written here from the definitions.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../libkernels/cpu/conv_direct.h"
#include "../libkernels/cpu/conv_few_outputs.h"
#include "../libkernels/cpu/conv_implicit.h"
#include "../libkernels/cpu/conv_pixel_rows.h"
#include "../libkernels/cpu/conv_winograd.h"
#include "../libkernels/cpu/gemm_micro.h"
#include "../libkernels/cpu/vec_kernels.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/epilogue.h"
#include "fusectl/kernels/kernel.h"
#include "random_values.h"

using namespace fusectl;
using namespace fusectl::kernels;
using namespace fusectl::kernels::cpu;
using Dims = std::vector<int64_t>;

namespace {

// The ISAs this CPU can run, portable always among them; restores the automatic choice after.
struct EachKernel {
  std::vector<std::string> names;
  EachKernel() {
    for (const char* n : {"avx512", "avx2", "portable"}) {
      if (gemmForceKernel(n)) names.push_back(n);
    }
    gemmForceKernel("auto");
  }
  ~EachKernel() { gemmForceKernel("auto"); }
};

double activationRef(Activation act, double x, float alpha, float beta) {
  switch (act) {
    case Activation::None: return x;
    case Activation::Relu: return std::max(x, 0.0);
    case Activation::Clip: return std::min(std::max(x, double(alpha)), double(beta));
    case Activation::LeakyRelu: return x < 0 ? alpha * x : x;
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::HardSigmoid: return std::min(1.0, std::max(0.0, alpha * x + beta));
    case Activation::HardSwish: return x * std::min(1.0, std::max(0.0, x / 6 + 0.5));
    case Activation::Silu: return x / (1 + std::exp(-x));
    case Activation::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::Tanh: return std::tanh(x);
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

const Activation kAllActivations[] = {
    Activation::None,        Activation::Relu,      Activation::Clip, Activation::LeakyRelu,
    Activation::Sigmoid,     Activation::HardSigmoid, Activation::HardSwish, Activation::Silu,
    Activation::Gelu,        Activation::Tanh,        Activation::GeluTanh};

void requireNear(const std::vector<float>& got, const std::vector<double>& want, double atol,
                 double rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i])) {
      INFO("index " << i << ": got " << got[i] << ", want " << want[i]);
      REQUIRE(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
    }
  }
}

// ---- GEMM ----

struct GemmCase {
  int64_t M, N, K;
  bool ta, tb;
  std::vector<float> a, b, c0;
  float alpha = 1.f;
  bool accumulate = false;

  GemmParams params(float* c) const {
    GemmParams p = gemmParams(M, N, K, a.data(), ta ? M : K, ta, b.data(), tb ? K : N, tb, c, N);
    p.alpha = alpha;
    p.accumulate = accumulate;
    return p;
  }
  double aAt(int64_t i, int64_t k) const { return ta ? a[k * M + i] : a[i * K + k]; }
  double bAt(int64_t k, int64_t j) const { return tb ? b[j * K + k] : b[k * N + j]; }
  // alpha * A * B (+ C0), before any epilogue.
  std::vector<double> reference() const {
    std::vector<double> want(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += aAt(i, k) * bAt(k, j);
        want[i * N + j] = alpha * acc + (accumulate ? c0[i * N + j] : 0.0);
      }
    }
    return want;
  }
};

GemmCase makeGemmCase(int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint32_t seed) {
  GemmCase g{M, N, K, ta, tb, randomFloats(M * K, seed), randomFloats(K * N, seed + 1),
             randomFloats(M * N, seed + 2)};
  return g;
}

enum class Packing { None, A, B };

// Runs the case on the current kernel with the given packing; C starts as c0.
// With `a_in_place`, A may be read in place (GemmParams::a_in_place, where the kernel can).
std::vector<float> runGemm(const GemmCase& g, Packing packing, int threads,
                           const Epilogue* ep = nullptr, bool a_in_place = false) {
  std::vector<float> c = g.c0;
  GemmParams p = g.params(c.data());
  p.epilogue = ep;
  p.a_in_place = a_in_place;
  PackedMatrix pa, pb;
  if (packing == Packing::A) {
    pa = packGemmA(g.M, g.K, g.a.data(), p.a_rs, p.a_cs);
    p.packed_a = &pa;
  } else if (packing == Packing::B) {
    pb = packGemmB(g.K, g.N, g.b.data(), p.b_rs, p.b_cs);
    p.packed_b = &pb;
  }
  gemm(p, threads);
  return c;
}

}  // namespace

TEST_CASE("gemm: every micro-kernel, packing and thread count matches a double reference",
          "[kernels][gemm]") {
  EachKernel kernels;
  REQUIRE(!kernels.names.empty());
  const int64_t outer[] = {1, 7, 17, 33, 100};
  const int64_t depth[] = {1, 17, 100, 300, 530};  // 300 and 530 cross KC blocks (256, 512)
  uint32_t seed = 100;
  for (int64_t M : outer) {
    for (int64_t N : outer) {
      for (int64_t K : depth) {
        const int trans = static_cast<int>(seed % 4);
        GemmCase g = makeGemmCase(M, N, K, trans & 1, trans & 2, seed);
        g.alpha = seed % 3 == 0 ? 0.75f : 1.f;
        g.accumulate = seed % 2 == 0;
        ++seed;
        const std::vector<double> want = g.reference();
        std::vector<float> first, unpacked;
        for (const std::string& isa : kernels.names) {
          REQUIRE(gemmForceKernel(isa.c_str()));
          for (Packing packing : {Packing::None, Packing::A, Packing::B}) {
            // A packed A carries no alpha: gemm falls back to the source operand.
            for (int threads : {1, 2, 3}) {
              INFO("M=" << M << " N=" << N << " K=" << K << " trans=" << trans << " alpha="
                        << g.alpha << " accumulate=" << g.accumulate << " kernel=" << isa
                        << " packing=" << int(packing) << " threads=" << threads);
              const std::vector<float> got = runGemm(g, packing, threads);
              requireNear(got, want, 1e-5 * (K + 1), 1e-5);
              // Threads split whole panels, so each element sums in the same order.
              if (threads == 1) first = got;
              if (threads > 1) REQUIRE(got == first);
              // A prepacked B's tiles run their k loop between prefetch requests
              // (TileArgs::prefetch_in_runs): the same sums in the same order as unpacked.
              if (packing == Packing::None && threads == 1) unpacked = got;
              if (packing == Packing::B) REQUIRE(got == unpacked);
              // A read in place, where the kernel reads it so (a row-major A, alpha 1, at most
              // four column panels): operands of exactly their size, so that a read past one
              // shows under AddressSanitizer (N = 1 did, d0a0d78).
              if (packing == Packing::None) {
                requireNear(runGemm(g, packing, threads, nullptr, true), want, 1e-5 * (K + 1),
                            1e-5);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("gemm: the fused epilogue equals Epilogue::apply on the plain product",
          "[kernels][gemm]") {
  EachKernel kernels;
  struct Shape {
    int64_t M, N, K;
  };
  // A full-tile case, ragged edges on both sides, and the skinny (decode) path.
  const Shape shapes[] = {{37, 83, 29}, {64, 64, 530}, {3, 70, 50}, {1, 33, 17}};
  for (const Shape& s : shapes) {
    GemmCase g = makeGemmCase(s.M, s.N, s.K, false, false, 7);
    const std::vector<float> bias = randomFloats(std::max(s.M, s.N), 8);
    const std::vector<float> residual = randomFloats(s.M * s.N, 9);
    for (const std::string& isa : kernels.names) {
      REQUIRE(gemmForceKernel(isa.c_str()));
      const std::vector<float> plain = runGemm(g, Packing::None, 1);
      for (Activation act : kAllActivations) {
        for (int variant = 0; variant < 6; ++variant) {
          Epilogue ep;
          ep.bias = variant % 3 == 0 ? nullptr : bias.data();
          ep.bias_per_row = variant % 3 == 2;
          ep.residual = variant >= 3 ? residual.data() : nullptr;
          ep.ld_residual = s.N;
          const float clip[] = {-0.3f, 0.4f}, leaky[] = {0.1f}, hsig[] = {0.3f, 0.4f};
          const float* params = act == Activation::Clip        ? clip
                                : act == Activation::LeakyRelu   ? leaky
                                : act == Activation::HardSigmoid ? hsig
                                                                 : nullptr;
          ep.setActivation(act, params, params ? (act == Activation::LeakyRelu ? 1 : 2) : 0);
          std::vector<float> expected = plain;
          ep.apply(expected.data(), s.N, 0, 0, s.M, s.N);
          std::vector<double> want(expected.begin(), expected.end());
          // Independently: act(acc + bias + residual) in double.
          const std::vector<double> acc = g.reference();
          std::vector<double> direct(acc.size());
          for (int64_t i = 0; i < s.M; ++i) {
            for (int64_t j = 0; j < s.N; ++j) {
              double v = acc[i * s.N + j];
              if (ep.bias) v += ep.bias_per_row ? bias[i] : bias[j];
              if (ep.residual) v += residual[i * s.N + j];
              direct[i * s.N + j] = activationRef(act, v, ep.alpha, ep.beta);
            }
          }
          for (Packing packing : {Packing::None, Packing::B}) {
            for (int threads : {1, 2}) {
              INFO("shape " << s.M << "x" << s.N << "x" << s.K << " kernel " << isa
                            << " activation " << activationInfo(act).name << " variant "
                            << variant << " packing " << int(packing) << " threads " << threads);
              const std::vector<float> got = runGemm(g, packing, threads, &ep);
              requireNear(got, want, 1e-6, 1e-6);
              requireNear(got, direct, 1e-5 * s.K, 1e-4);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("gemm: vector Sigmoid, Silu, Tanh and Gelu agree with the scalar epilogue",
          "[kernels][gemm]") {
  EachKernel kernels;
  // C = 1 * B (K = 1) puts chosen values through the epilogue: tiny, huge, both signs, zeros.
  std::vector<float> values = {0.f,    -0.f,    1e-30f,  -1e-30f, 1e-7f,   -1e-7f,
                               88.f,   -88.f,   89.f,    -89.f,   100.f,   -100.f,
                               103.9f, -103.9f, 103.98f, -103.98f, 104.f,  -104.f,
                               120.f,  -120.f,  1e30f,   -1e30f};
  for (int i = -2000; i <= 2000; ++i) values.push_back(static_cast<float>(i) * 0.0137f);
  // +-inf; not Gelu(-inf): 0.5 * -inf * 0 is NaN in the scalar form, 0 in the vector one.
  values.push_back(INFINITY);
  const float negative_infinity = -INFINITY;
  const std::vector<float> one = {1.f};
  for (const std::string& isa : kernels.names) {
    REQUIRE(gemmForceKernel(isa.c_str()));
    for (Activation act :
         {Activation::Sigmoid, Activation::Silu, Activation::Tanh, Activation::Gelu,
          Activation::GeluTanh}) {
      Epilogue ep;
      ep.setActivation(act, nullptr, 0);
      std::vector<float> inputs = values;
      if (act != Activation::Gelu) inputs.push_back(negative_infinity);
      const int64_t N = static_cast<int64_t>(inputs.size());
      std::vector<float> got(static_cast<size_t>(N)), want = inputs;
      GemmParams p = gemmParams(1, N, 1, one.data(), 1, false, inputs.data(), N, false,
                                got.data(), N);
      p.epilogue = &ep;
      gemm(p, 1);
      ep.activate(want.data(), N);
      for (int64_t j = 0; j < N; ++j) {
        INFO("kernel " << isa << " activation " << activationInfo(act).name << " x = "
                       << inputs[j] << ": got " << got[j] << ", want " << want[j]);
        if (std::isnan(want[j])) {  // Silu(-inf) = -inf * 0
          REQUIRE(std::isnan(got[j]));
          continue;
        }
        if (std::isinf(want[j])) {
          REQUIRE(got[j] == want[j]);
          continue;
        }
        // exp-based: a few ulp. Gelu: its erfc fit is 1.2e-7 relative, but below x = -5.5 the
        // scalar 1 + erf(x) rounds to 0 while the vector form keeps the true, tiny values
        // (< 1e-8): there the tolerance is ONNX's absolute 1e-7.
        // GeluTanh: where tanh is near -1, 1 + tanh keeps only the absolute error of the
        // tanh (an ulp of 1), times 0.5 x.
        // Silu below x = -88.72, where its vector form's e^-x overflows: -0 for values under
        // 4e-37 in magnitude (silu512).
        const double atol = act == Activation::Gelu       ? 1e-7
                            : act == Activation::GeluTanh ? 1e-7 * std::max(1.f, std::abs(inputs[j]))
                            : act == Activation::Silu && inputs[j] < -88.72f ? 4e-37
                                                                              : 1e-37;
        REQUIRE(std::abs(got[j] - want[j]) <= atol + 1e-6 * std::abs(want[j]));
        // (The product itself turns -0 into +0: 0 + 1 * -0 = +0.)
        if (inputs[j] != 0.f) REQUIRE(std::signbit(got[j]) == std::signbit(want[j]));
      }
    }
  }
}

TEST_CASE("gemm: skinny products (M = 1..16) read B in place and stay exact",
          "[kernels][gemm]") {
  EachKernel kernels;
  for (int64_t M = 1; M <= 16; ++M) {
    for (int64_t N : {5, 32, 77}) {
      GemmCase g = makeGemmCase(M, N, 530, false, false, static_cast<uint32_t>(M * 10 + N));
      const std::vector<double> want = g.reference();
      for (const std::string& isa : kernels.names) {
        REQUIRE(gemmForceKernel(isa.c_str()));
        for (Packing packing : {Packing::None, Packing::B}) {
          INFO("M=" << M << " N=" << N << " kernel " << isa << " packing " << int(packing));
          const std::vector<float> one = runGemm(g, packing, 1);
          requireNear(one, want, 3e-3, 1e-5);
          REQUIRE(runGemm(g, packing, 2) == one);
          REQUIRE(runGemm(g, packing, 3) == one);
        }
      }
    }
  }
}

// An in-place B over 512 KiB has its next panel's rows prefetched by the row tiles of the
// current one (gemm_micro.cpp); the requests must not change a sum, whatever the ragged last
// panel, the K slices or the thread split.
TEST_CASE("gemm: an in-place B large enough to be prefetched gives the reference sums",
          "[kernels][gemm]") {
  EachKernel kernels;
  uint32_t seed = 900;
  for (int64_t M : {24, 100}) {
    for (int64_t K : {144, 530}) {  // 530 crosses the AVX-512 kernel's 512-deep slices
      for (int64_t N : {1000, 1013}) {
        GemmCase g = makeGemmCase(M, N, K, false, false, seed++);
        REQUIRE(K * N * 4 > 512 * 1024);
        const std::vector<double> want = g.reference();
        for (const std::string& isa : kernels.names) {
          REQUIRE(gemmForceKernel(isa.c_str()));
          for (Packing packing : {Packing::None, Packing::A}) {
            INFO("M=" << M << " N=" << N << " K=" << K << " kernel " << isa << " packing "
                      << int(packing));
            const std::vector<float> one = runGemm(g, packing, 1);
            requireNear(one, want, 1e-5 * (K + 1), 1e-5);
            REQUIRE(runGemm(g, packing, 2) == one);
          }
        }
      }
    }
  }
}

namespace {

// g with prepacked filters (A) on every micro-kernel: near the double reference, and bit for bit
// the same at two threads and with `other` packing, whose path sums each element in the same
// order.
void requirePrepackedASums(const GemmCase& g, Packing other) {
  EachKernel kernels;
  const std::vector<double> want = g.reference();
  for (const std::string& isa : kernels.names) {
    REQUIRE(gemmForceKernel(isa.c_str()));
    INFO("M=" << g.M << " N=" << g.N << " K=" << g.K << " kernel " << isa);
    const std::vector<float> prepacked = runGemm(g, Packing::A, 1);
    requireNear(prepacked, want, 1e-5 * (g.K + 1), 1e-5);
    REQUIRE(runGemm(g, other, 1) == prepacked);
    REQUIRE(runGemm(g, Packing::A, 2) == prepacked);
  }
}

}  // namespace

TEST_CASE("gemm: a B at most 64 deep is read in place under up to 256 rows, same sums",
          "[kernels][gemm]") {
  // 17-32 row tiles (AVX-512's 8-row tiles) read such a B in place, not packed; a prepacked B
  // runs the same k order.
  uint32_t seed = 970;
  for (int64_t M : {200, 256}) {
    for (int64_t K : {17, 64}) {
      for (int64_t N : {100, 1013}) {
        requirePrepackedASums(makeGemmCase(M, N, K, false, false, seed++), Packing::B);
      }
    }
  }
}

TEST_CASE("gemm: a B block over 1 MiB packed per call against a prepacked A, in column blocks",
          "[kernels][gemm]") {
  // More than 16 row tiles, so B is packed, not read in place; K x N floats over 1 MiB for the
  // AVX-512 kernel's 512-deep slices, so its columns are packed in blocks (gemmRegion's NC), which
  // change which panels are packed together, not any element's sum: filters packed per call
  // (one block of B) give the same bits.
  uint32_t seed = 950;
  for (int64_t K : {300, 530}) {
    for (int64_t N : {1000, 1013}) {
      REQUIRE(std::min<int64_t>(K, 512) * N * 4 > (int64_t{1} << 20));
      requirePrepackedASums(makeGemmCase(200, N, K, false, false, seed++), Packing::None);
    }
  }
}

TEST_CASE("gemm: a matrix packed for one micro-kernel still works under another",
          "[kernels][gemm]") {
  EachKernel kernels;
  if (kernels.names.size() < 2) return;
  GemmCase g = makeGemmCase(20, 40, 50, false, true, 3);
  const std::vector<double> want = g.reference();
  REQUIRE(gemmForceKernel(kernels.names[0].c_str()));
  const PackedMatrix pb = packGemmB(g.K, g.N, g.b.data(), 1, g.K);
  REQUIRE(packedForCurrentKernel(pb));
  REQUIRE(gemmForceKernel(kernels.names[1].c_str()));
  REQUIRE_FALSE(packedForCurrentKernel(pb));
  std::vector<float> c(static_cast<size_t>(g.M * g.N));
  GemmParams p = g.params(c.data());
  p.packed_b = &pb;
  gemm(p, 1);
  requireNear(c, want, 1e-4, 1e-5);
}

// ---- kernels through the registry, with a persistent state slot as the executor gives ----

namespace {

HostTensor floatTensor(const Dims& dims, const std::vector<float>& v) {
  HostTensor t(DType::Float, dims);
  std::copy(v.begin(), v.end(), t.mutableData<float>());
  return t;
}

std::vector<float> valuesOf(const HostTensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class FreshAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return HostTensor(dtype, dims);
  }
};

// One node whose kernel keeps its state across run() calls, with `constant` marking inputs
// that are initializers.
class StatefulNode {
 public:
  // With `output_read_by_node`, y is no graph output but read by a node after it, as an
  // intermediate value is (what KernelContext::overwriteInput asks for).
  StatefulNode(const std::string& domain, const std::string& op, size_t inputs,
               std::vector<Attribute> attrs, uint64_t constant, bool output_read_by_node = false)
      : constant_(constant), domain_(domain) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs; ++i) {
      ValueType vt;
      vt.dtype = DType::Float;
      ins.push_back(graph_.addInput("in" + std::to_string(i), vt));
    }
    node_ = graph_.createNode({op, domain, ins, {"y"}, "node", std::move(attrs)});
    if (output_read_by_node) {
      graph_.addOutput(
          graph_.createNode({"Identity", "", {node_->output(0)}, {"read"}, "reader", {}})
              ->output(0));
    } else {
      graph_.addOutput(node_->output(0));
    }
    kernel_ = KernelRegistry::global().find(domain, op, opset());
    REQUIRE(kernel_ != nullptr);
  }
  // `donatable`: the inputs the node may overwrite, as an executor would offer them.
  HostTensor run(const std::vector<const HostTensor*>& inputs, int threads = 1,
                 uint64_t donatable = 0) {
    FreshAllocator alloc;
    KernelContext ctx(*node_, opset(), inputs, alloc, threads);
    ctx.bindPersistentState(&state_, constant_);
    ctx.bindDonatableInputs(donatable);
    kernel_->fn(ctx);
    return ctx.outputs()[0];
  }
  bool hasState() const { return state_ != nullptr; }

 private:
  int64_t opset() const { return domain_.empty() ? 17 : 1; }
  Graph graph_{"t"};
  Node* node_ = nullptr;
  const KernelInfo* kernel_ = nullptr;
  std::unique_ptr<KernelState> state_;
  uint64_t constant_;
  std::string domain_;
};

}  // namespace

TEST_CASE("Gemm and MatMul pack a constant B once and repack when it changes",
          "[kernels][gemm]") {
  EachKernel kernels;
  const int64_t M = 9, K = 40, N = 35;
  const std::vector<float> av = randomFloats(M * K, 1), bv = randomFloats(N * K, 2),
                           bv2 = randomFloats(N * K, 3), cv = randomFloats(N, 4);
  auto reference = [&](const std::vector<float>& b, bool trans_b, bool bias) {
    std::vector<double> y(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = bias ? cv[j] : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          acc += double(av[i * K + k]) * (trans_b ? b[j * K + k] : b[k * N + j]);
        }
        y[i * N + j] = acc;
      }
    return y;
  };
  HostTensor a = floatTensor({M, K}, av), c = floatTensor({N}, cv);
  HostTensor b1 = floatTensor({N, K}, bv), b2 = floatTensor({N, K}, bv2);
  StatefulNode gemmNode("", "Gemm", 3, {Attribute::ofInt("transB", 1)}, 0b110);
  requireNear(valuesOf(gemmNode.run({&a, &b1, &c})), reference(bv, true, true), 1e-4, 1e-5);
  REQUIRE(gemmNode.hasState());
  requireNear(valuesOf(gemmNode.run({&a, &b1, &c}, 2)), reference(bv, true, true), 1e-4, 1e-5);
  // Another weight tensor (another address): the state must not serve the old packing.
  requireNear(valuesOf(gemmNode.run({&a, &b2, &c})), reference(bv2, true, true), 1e-4, 1e-5);
  // Another micro-kernel: repacked for it.
  for (const std::string& isa : kernels.names) {
    REQUIRE(gemmForceKernel(isa.c_str()));
    requireNear(valuesOf(gemmNode.run({&a, &b2, &c})), reference(bv2, true, true), 1e-4, 1e-5);
  }

  HostTensor bm = floatTensor({K, N}, bv);
  HostTensor a3 = floatTensor({1, M, K}, av);
  StatefulNode matmul("", "MatMul", 2, {}, 0b10);
  for (int run = 0; run < 2; ++run) {
    const HostTensor y = matmul.run({&a3, &bm}, run + 1);
    REQUIRE(y.dims() == Dims{1, M, N});
    requireNear(valuesOf(y), reference(bv, false, false), 1e-4, 1e-5);
  }
  REQUIRE(matmul.hasState());
}

// ---- convolution ----

namespace {

struct ConvSpec {
  Dims x;  // N, C, spatial...
  int64_t M;
  Dims k, strides, dilations, pads;  // pads: begins then ends
  int64_t group = 1;
};

Dims convOutDims(const ConvSpec& c) {
  const size_t r = c.k.size();
  Dims y = {c.x[0], c.M};
  for (size_t i = 0; i < r; ++i) {
    y.push_back((c.x[2 + i] + c.pads[i] + c.pads[i + r] - (c.k[i] - 1) * c.dilations[i] - 1) /
                    c.strides[i] + 1);
  }
  return y;
}

// act(conv(x, w) + b + z) by the definition, in double.
std::vector<double> convReference(const ConvSpec& c, const std::vector<float>& x,
                                  const std::vector<float>& w, const std::vector<float>& b,
                                  const std::vector<float>* z, Activation act) {
  const size_t r = c.k.size();
  const Dims yd = convOutDims(c);
  const int64_t N = c.x[0], C = c.x[1], Cg = C / c.group, Mg = c.M / c.group;
  int64_t P = 1, taps = 1, in_pixels = 1;
  for (size_t i = 0; i < r; ++i) {
    P *= yd[2 + i];
    taps *= c.k[i];
    in_pixels *= c.x[2 + i];
  }
  std::vector<double> y(static_cast<size_t>(N * c.M * P));
  Dims op(r), kp(r);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t rem = p, i = static_cast<int64_t>(r) - 1; i >= 0; --i) {
          op[i] = rem % yd[2 + i];
          rem /= yd[2 + i];
        }
        double acc = b[m];
        const int64_t g = m / Mg;
        for (int64_t cc = 0; cc < Cg; ++cc)
          for (int64_t t = 0; t < taps; ++t) {
            for (int64_t rem = t, i = static_cast<int64_t>(r) - 1; i >= 0; --i) {
              kp[i] = rem % c.k[i];
              rem /= c.k[i];
            }
            int64_t idx = 0;
            bool inside = true;
            for (size_t i = 0; i < r && inside; ++i) {
              const int64_t pos = op[i] * c.strides[i] - c.pads[i] + kp[i] * c.dilations[i];
              inside = pos >= 0 && pos < c.x[2 + i];
              idx = idx * c.x[2 + i] + pos;
            }
            if (!inside) continue;
            acc += double(x[(n * C + g * Cg + cc) * in_pixels + idx]) *
                   w[(m * Cg + cc) * taps + t];
          }
        const int64_t o = (n * c.M + m) * P + p;
        if (z) acc += (*z)[o];
        y[o] = activationRef(act, acc, 0.f, 6.f);  // Clip runs as [0, 6] (ReLU6)
      }
  return y;
}

// A case's operands, seeded: X, W, B and a residual Z of Y's shape, values in [-1, 1]. The
// seeds are seed + id, seed + 10 + id, ... for X, W, B and Z.
struct ConvOperands {
  const ConvSpec& c;
  Dims yd;
  std::vector<float> xv, wv, bv, zv;
  HostTensor x, w, b, z;
  double atol = 0;  // float rounding over a sum of (weights per output channel) products

  ConvOperands(const ConvSpec& spec, uint32_t seed, int id) : c(spec) {
    Dims wd = {c.M, c.x[1] / c.group};
    wd.insert(wd.end(), c.k.begin(), c.k.end());
    yd = convOutDims(c);
    const auto count = [](const Dims& d) {
      return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>());
    };
    const int64_t wn = count(wd);
    xv = randomFloats(count(c.x), seed + id);
    wv = randomFloats(wn, seed + 10 + id);
    bv = randomFloats(c.M, seed + 20 + id);
    zv = randomFloats(count(yd), seed + 30 + id);
    x = floatTensor(c.x, xv);
    w = floatTensor(wd, wv);
    b = floatTensor({c.M}, bv);
    z = floatTensor(yd, zv);
    atol = 2e-5 * (wn / c.M + 1);
  }
  // act(conv(X, W) + B (+ Z)) in double.
  std::vector<double> reference(bool residual, Activation act) const {
    return convReference(c, xv, wv, bv, residual ? &zv : nullptr, act);
  }
  std::vector<const HostTensor*> plainInputs() const { return {&x, &w, &b}; }
  std::vector<const HostTensor*> fusedInputs() const { return {&x, &w, &b, &z}; }
};

std::vector<Attribute> convAttrs(const ConvSpec& c) {
  return {Attribute::ofInts("kernel_shape", c.k), Attribute::ofInts("strides", c.strides),
          Attribute::ofInts("dilations", c.dilations), Attribute::ofInts("pads", c.pads),
          Attribute::ofInt("group", c.group)};
}

}  // namespace

TEST_CASE("Conv and FusedConv on every path match the definition", "[kernels][gemm]") {
  EachKernel kernels;
  const std::vector<ConvSpec> cases = {
      {{1, 3, 9, 9}, 5, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {{2, 7, 11, 10}, 17, {3, 3}, {2, 2}, {1, 1}, {1, 0, 1, 2}},       // odd sizes, stride
      {{1, 33, 8, 8}, 7, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},         // pointwise
      {{1, 16, 13, 13}, 33, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}},      // strided 1x1
      {{1, 8, 12, 12}, 8, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}},        // dilation
      {{1, 12, 10, 9}, 18, {3, 3}, {1, 2}, {1, 1}, {1, 1, 1, 1}, 3},    // groups
      // Groups of 8-32 output channels: the direct product per group (groupedDirectPays).
      {{2, 48, 7, 9}, 48, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3},     // RegNetX's 16 x 16
      {{1, 16, 12, 11}, 64, {3, 3}, {2, 2}, {1, 1}, {1, 0, 1, 1}, 2},   // 8 -> 32, stride 2
      {{1, 32, 3, 3}, 32, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 4},     // 8 x 8 on a 3x3 plane
      {{1, 16, 14, 14}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 16},  // depthwise 3x3 s1
      {{1, 24, 15, 15}, 24, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 24},  // depthwise 3x3 s2
      {{1, 10, 17, 16}, 10, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 10},  // depthwise 5x5 s1
      {{1, 10, 17, 16}, 10, {5, 5}, {2, 2}, {1, 1}, {2, 2, 2, 2}, 10},  // depthwise 5x5 s2
      {{1, 6, 11, 11}, 12, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 6},    // depthwise x2
      {{1, 8, 23, 37}, 8, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, 8},     // depthwise dilated, 3 blocks
      {{2, 6, 9, 40}, 6, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}, 6},      // depthwise 7x7 s2, batch 2
      // ConvNeXt's 7x7 stride 1 (the row-reusing kernel): two column blocks, row counts that
      // leave 3 after the groups of four, a plane narrower than the window, uneven pads.
      {{1, 5, 24, 24}, 5, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 5},
      {{2, 3, 7, 19}, 3, {7, 7}, {1, 1}, {1, 1}, {3, 2, 1, 3}, 3},
      {{1, 4, 6, 6}, 4, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 4},
      // The row-reusing 3x3/5x5 kernels: several column blocks, row counts that leave 1, 0 and
      // 3 rows after the groups of four, uneven pads.
      {{1, 4, 37, 45}, 4, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 4},
      {{2, 3, 41, 50}, 3, {3, 3}, {2, 2}, {1, 1}, {0, 1, 1, 0}, 3},
      {{1, 5, 30, 35}, 5, {5, 5}, {2, 2}, {1, 1}, {1, 2, 2, 1}, 5},
      // Channels across the vector (depthwiseChannelsAvx512, planes up to 14 wide): three
      // channel blocks, the last of 8; uneven pads; stride 2 with an input column no output
      // reaches in full; a single output pixel; two images.
      {{1, 40, 7, 7}, 40, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 40},
      {{2, 33, 14, 13}, 33, {3, 3}, {1, 1}, {1, 1}, {0, 1, 2, 1}, 33},
      {{1, 17, 14, 14}, 17, {5, 5}, {2, 2}, {1, 1}, {1, 2, 2, 1}, 17},
      {{1, 20, 11, 11}, 20, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 20},
      {{1, 16, 3, 3}, 16, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 16},
      // Rows 64-byte aligned (widths a multiple of 16, left pad K/2): whole aligned vectors
      // shifted into taps. Several blocks, uneven right and bottom pads, a single block, two
      // images, 3x3 and 5x5 at strides 1 and 2.
      {{1, 4, 13, 32}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 4},
      {{2, 3, 9, 48}, 3, {3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 0}, 3},
      {{1, 5, 10, 32}, 5, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 5},
      {{1, 3, 11, 64}, 3, {5, 5}, {2, 2}, {1, 1}, {2, 2, 1, 2}, 3},
      {{1, 2, 5, 16}, 2, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 2},
      {{1, 2, 6, 16}, 2, {5, 5}, {1, 1}, {1, 1}, {2, 2, 0, 1}, 2},
      {{2, 5, 23}, 9, {4}, {2}, {1}, {1, 2}},                           // 1-D
      {{1, 4, 5, 6, 7}, 6, {3, 2, 3}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 1, 1, 2}, 2},  // 3-D
      {{1, 64, 20, 20}, 40, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},  // K > KC
      // Five im2col chunks of 224 pixels that start and end inside output rows, K over two
      // slices, a last chunk of 4 pixels.
      {{1, 128, 30, 30}, 9, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {{1, 96, 31, 29}, 5, {3, 3}, {2, 2}, {1, 1}, {0, 1, 2, 1}},  // strided, uneven pads
      // Pixels as GEMM rows (conv_pixel_rows.h): 7x7 and 9x9 planes, pointwise and im2col,
      // two images, 96 channels (three 32-wide tiles).
      {{1, 40, 7, 7}, 64, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {{2, 24, 14, 14}, 96, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {{1, 16, 9, 9}, 64, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      // A squeeze-and-excitation block's 1x1 convolutions on a 1x1 plane: 64+ output channels
      // as one pixel row (its channels stored 16 a vector, the last 3 masked), two images of
      // it, and fewer channels as a matrix-vector product (one-column tiles, the last of 5
      // rows, K over two slices).
      {{1, 40, 1, 1}, 67, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {{2, 12, 1, 1}, 80, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {{1, 300, 1, 1}, 21, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      // One input channel per group and many outputs: a GEMM over the taps (perChannelProduct),
      // wav2vec 2.0's waveform layer (k=10, stride 5) and a grayscale 7x7 stem; with two
      // groups; and a 1-D depthwise one, dilated, which stays plane by plane.
      {{1, 1, 203}, 64, {10}, {5}, {1}, {0, 0}},
      {{2, 1, 23, 21}, 16, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}},
      {{1, 2, 19, 17}, 24, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 2},
      {{1, 6, 50}, 6, {3}, {1}, {4}, {4, 4}, 6},
      // 1-D depthwise lines in vectors (depthwiseLine): Conformer's k=31 over a line shorter
      // than four vectors, and a dilated window wider than its 10-sample line.
      {{1, 4, 37}, 4, {31}, {1}, {1}, {15, 15}, 4},
      {{2, 3, 10}, 3, {5}, {1}, {3}, {6, 2}, 3},
  };
  int id = 0;
  for (const ConvSpec& c : cases) {
    ++id;
    const ConvOperands ops(c, 10, id);
    // The double-precision references, once per case rather than once per micro-kernel.
    const Activation activations[] = {Activation::Relu, Activation::Clip, Activation::Sigmoid,
                                      Activation::Silu};
    const std::vector<double> plain = ops.reference(false, Activation::None);
    std::vector<std::vector<double>> wanted;
    for (const Activation act : activations) {
      wanted.push_back(ops.reference(true, act));
    }
    for (const std::string& isa : kernels.names) {
      REQUIRE(gemmForceKernel(isa.c_str()));
      StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
      for (size_t ai = 0; ai < std::size(activations); ++ai) {
        const Activation act = activations[ai];
        std::vector<Attribute> attrs = convAttrs(c);
        attrs.push_back(Attribute::ofString("activation", std::string(activationInfo(act).name)));
        if (act == Activation::Clip) {
          attrs.push_back(Attribute::ofFloats("activation_params", {0.f, 6.f}));
        }
        StatefulNode fused("fusectl", "FusedConv", 4, attrs, 0b110);
        const std::vector<double>& want = wanted[ai];
        for (int threads : {1, 2, 3}) {
          for (int run = 0; run < 2; ++run) {  // the second run uses the packed weights
            INFO("case " << id << " kernel " << isa << " activation "
                         << activationInfo(act).name << " threads " << threads << " run " << run);
            const HostTensor y = conv.run(ops.plainInputs(), threads);
            REQUIRE(y.dims() == ops.yd);
            requireNear(valuesOf(y), plain, ops.atol, 1e-4);
            requireNear(valuesOf(fused.run(ops.fusedInputs(), threads)), want, ops.atol, 1e-4);
          }
        }
      }
    }
  }
}

namespace {

// Forces a convolution algorithm for one scope.
struct ForcedConvAlgorithm {
  explicit ForcedConvAlgorithm(ConvAlgorithm a) { convForceAlgorithm(a); }
  ~ForcedConvAlgorithm() { convForceAlgorithm(ConvAlgorithm::Auto); }
};

// The FusedConv of `c` with a residual and Relu, Silu or Gelu (one in registers without an
// exp, two with one) on two threads against the definition.
void requireFusedEpilogues(const ConvSpec& c, const ConvOperands& ops) {
  for (const Activation act : {Activation::Relu, Activation::Silu, Activation::Gelu}) {
    std::vector<Attribute> attrs = convAttrs(c);
    attrs.push_back(Attribute::ofString("activation", std::string(activationInfo(act).name)));
    StatefulNode fused("fusectl", "FusedConv", 4, attrs, 0b110);
    INFO("activation " << activationInfo(act).name);
    requireNear(valuesOf(fused.run(ops.fusedInputs(), 2)), ops.reference(true, act), ops.atol,
                1e-4);
  }
}

}  // namespace


TEST_CASE("Depthwise channel blocks re-zero their padding when the geometry changes",
          "[kernels][gemm][depthwise]") {
  // depthwiseChannels zeroes the padding of its per-thread scratch image once for a run of
  // blocks of one geometry. Between two runs of A, B (an unpadded 9x9 image with the same 9x9
  // scratch) writes input values where A's padding lies: A must find zeros there again. Then
  // A with a 3-channel last block, and a stride-2 geometry (another instantiation of the
  // kernel, with a larger scratch) after which the second round starts with A again.
  const ConvSpec a = {{1, 16, 7, 7}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 16};
  const ConvSpec b = {{1, 16, 9, 9}, 16, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 16};
  const ConvSpec a3 = {{1, 19, 7, 7}, 19, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 19};
  const ConvSpec s2 = {{1, 16, 16, 16}, 16, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 16};
  const ConvOperands oa(a, 30, 1), ob(b, 30, 2), oa3(a3, 30, 3), os2(s2, 30, 4);
  StatefulNode na("", "Conv", 3, convAttrs(a), 0b110), nb("", "Conv", 3, convAttrs(b), 0b110),
      na3("", "Conv", 3, convAttrs(a3), 0b110), ns2("", "Conv", 3, convAttrs(s2), 0b110);
  const std::vector<double> ra = oa.reference(false, Activation::None);
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    requireNear(valuesOf(na.run(oa.plainInputs(), 1)), ra, oa.atol, 1e-4);
    requireNear(valuesOf(nb.run(ob.plainInputs(), 1)), ob.reference(false, Activation::None),
                ob.atol, 1e-4);
    requireNear(valuesOf(na.run(oa.plainInputs(), 1)), ra, oa.atol, 1e-4);
    requireNear(valuesOf(na3.run(oa3.plainInputs(), 1)), oa3.reference(false, Activation::None),
                oa3.atol, 1e-4);
    requireNear(valuesOf(ns2.run(os2.plainInputs(), 1)), os2.reference(false, Activation::None),
                os2.atol, 1e-4);
  }
}

TEST_CASE("Convolutions onto 1-12 output channels match the definition",
          "[kernels][gemm][few-outputs]") {
  // conv_few_outputs.h: every output-channel block size (4 + 4 + 2 at 10, 3 alone), the
  // row-reusing 3x3, 5x5 and 7x7 tiles and the general one (5x3, dilated, vertical stride 2),
  // rows and columns that leave partial tiles and vectors, asymmetric pads, one input channel
  // and several 8-channel chunks (the partial sums kept in Y between), two images.
  const std::vector<ConvSpec> cases = {
      {{1, 64, 32, 32}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},     // a UNet's last layer
      {{2, 13, 19, 37}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {{1, 5, 23, 18}, 2, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}},
      {{1, 9, 17, 21}, 3, {7, 7}, {1, 1}, {1, 1}, {3, 2, 1, 3}},
      {{1, 1, 20, 33}, 10, {3, 3}, {1, 1}, {1, 1}, {0, 1, 2, 0}},
      {{1, 20, 15, 16}, 12, {5, 3}, {2, 1}, {1, 1}, {2, 1, 2, 1}},
      {{1, 11, 25, 30}, 7, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}},
      {{2, 17, 9, 50}, 5, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}},      // 4 + 1, general tile
  };
  int id = 0;
  for (const ConvSpec& c : cases) {
    ++id;
    const ConvOperands ops(c, 40, id);
    StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
    INFO("case " << id);
    const std::vector<float> one = valuesOf(conv.run(ops.plainInputs(), 1));
    requireNear(one, ops.reference(false, Activation::None), ops.atol, 1e-4);
    // Threads split bands of rows and channel blocks; each output sums in the same order.
    REQUIRE(valuesOf(conv.run(ops.plainInputs(), 3)) == one);
    requireFusedEpilogues(c, ops);
  }
  // The GEMM paths keep what they do better: a 1x1 window, 13 outputs and up, stride 2 across.
  Window win;
  win.in = {32, 32}, win.kernel = {3, 3}, win.strides = {1, 1}, win.dilations = {1, 1};
  win.pad_begin = win.pad_end = {1, 1}, win.out = {32, 32};
  if (__builtin_cpu_supports("avx512f")) {
    CHECK(fewOutputsConvTakes(1, 12, win));
    CHECK_FALSE(fewOutputsConvTakes(1, 13, win));
    CHECK_FALSE(fewOutputsConvTakes(2, 4, win));
    Window pointwise = win;
    pointwise.kernel = {1, 1}, pointwise.pad_begin = pointwise.pad_end = {0, 0};
    CHECK_FALSE(fewOutputsConvTakes(1, 4, pointwise));
    Window across = win;
    across.strides = {1, 2}, across.out = {32, 16};
    CHECK_FALSE(fewOutputsConvTakes(1, 4, across));
  }
}

TEST_CASE("The direct pixels-by-channels convolution matches the definition",
          "[kernels][gemm][direct]") {
  // Forced wherever it can run: input channels over several 32-channel blocks with a partial
  // last one, output channels over several 32-wide panels with a partial last one, pixel
  // tiles with a partial last one, uneven pads, unequal strides, a 7x7 stem, 1x1, two images.
  const std::vector<ConvSpec> cases = {
      {{1, 40, 17, 17}, 70, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {{1, 300, 9, 9}, 40, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},  // blocks of 113, 113, 74
      {{2, 3, 30, 26}, 64, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}},
      {{1, 20, 6, 5}, 33, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {{1, 70, 12, 11}, 9, {5, 3}, {1, 2}, {1, 1}, {2, 1, 0, 1}},
      {{1, 3, 224, 224}, 32, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},  // MobileNetV2's stem
      {{1, 48, 9, 8}, 40, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},     // stride 1, a small map
  };
  ForcedConvAlgorithm forced(ConvAlgorithm::Direct);
  EachKernel kernels;  // under another GEMM kernel the direct product cannot run: the others do
  for (const std::string& isa : kernels.names) {
    REQUIRE(gemmForceKernel(isa.c_str()));
    int id = 0;
    for (const ConvSpec& c : cases) {
      ++id;
      const ConvOperands ops(c, 20, id);
      StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
      INFO("case " << id << " kernel " << isa);
      const std::vector<float> one = valuesOf(conv.run(ops.plainInputs(), 1));
      requireNear(one, ops.reference(false, Activation::None), ops.atol, 1e-4);
      // Threads split the pixel tiles; each output sums its taps in the same order.
      REQUIRE(valuesOf(conv.run(ops.plainInputs(), 2)) == one);
      REQUIRE(valuesOf(conv.run(ops.plainInputs(), 3)) == one);
      requireFusedEpilogues(c, ops);
    }
  }
  // A channel block follows the input's plane size too: one node fed a larger image repacks
  // its weights (blocks of 113 channels at 9x9, of 32 at 64x64) and stays right.
  {
    const ConvSpec small = {{1, 300, 9, 9}, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}};
    ConvSpec large = small;
    large.x = {1, 300, 64, 64};
    const ConvOperands a(small, 21, 1), b(large, 21, 1);
    REQUIRE(a.wv == b.wv);
    StatefulNode conv("", "Conv", 3, convAttrs(small), 0b110);
    requireNear(valuesOf(conv.run(a.plainInputs(), 1)), a.reference(false, Activation::None),
                a.atol, 1e-4);
    // The same weight tensor: only the variant (the channel block) tells the cache to repack.
    requireNear(valuesOf(conv.run({&b.x, &a.w, &a.b}, 1)), b.reference(false, Activation::None),
                b.atol, 1e-4);
    DirectConvShape s{1, 300, 8, 9, 9, 3, 3, 2, 2, 1, 1, 5, 5};
    REQUIRE(directConvBlockChannels(s) == 113);
    s.H = s.W = 64, s.OH = s.OW = 32;
    REQUIRE(directConvBlockChannels(s) == 32);
  }
  // Left to choose, AVX-512 machines take it for stride 2 onto 49 pixels or more, for the
  // stems, and at stride 1 onto small maps with 32 outputs and up and at most 1M weights (any
  // weights onto 64 pixels or fewer); not onto 16 pixels at stride 2, nor at stride 1 onto
  // larger maps, fewer outputs or more weights.
  if (std::string_view(gemmKernelName()) == "avx512") {
    DirectConvShape s;
    s.N = 1, s.C = 128, s.M = 128, s.H = s.W = 56, s.KH = s.KW = 3, s.SH = s.SW = 2;
    s.pad_top = s.pad_left = 1, s.OH = s.OW = 28;
    REQUIRE(directConvPays(s));
    s.C = s.M = 512, s.H = s.W = 14, s.OH = s.OW = 7;
    REQUIRE(directConvPays(s));
    s.H = s.W = 8, s.OH = s.OW = 4;
    REQUIRE_FALSE(directConvPays(s));
    s.C = 3, s.M = 64, s.H = s.W = 224, s.KH = s.KW = 7, s.pad_top = s.pad_left = 3;
    s.OH = s.OW = 112;
    REQUIRE(directConvPays(s));
    s.C = 64, s.SH = s.SW = 1, s.H = s.W = s.OH = s.OW = 56, s.KH = s.KW = 3, s.pad_top = 1,
    s.pad_left = 1;
    REQUIRE_FALSE(directConvPays(s));  // 3136 output pixels
    s.H = s.W = s.OH = s.OW = 32;      // SqueezeNet's and DenseNet's small maps: 1024 pixels
    REQUIRE(directConvPays(s));
    s.M = 16;
    REQUIRE_FALSE(directConvPays(s));
    s.C = s.M = 512, s.H = s.W = s.OH = s.OW = 12;  // 2.4M weights onto 144 pixels
    REQUIRE_FALSE(directConvPays(s));
    s.H = s.W = s.OH = s.OW = 7;  // onto 49 pixels, whatever the weights
    REQUIRE(directConvPays(s));
    s.KH = 1, s.KW = 7, s.C = s.M = 64, s.pad_top = 0, s.pad_left = 3;  // Inception's 1x7
    REQUIRE_FALSE(directConvPays(s));
  }
}

TEST_CASE("FusedConv writes into a donated residual only where it reads each element first",
          "[kernels][gemm]") {
  // In place where the residual is added in registers before the one store of each output
  // element: the channel-rows GEMM with K in one slice of a vector micro-kernel, and the
  // AVX-512 pixel-rows store. Not where partial sums are stored first (K over two slices, the
  // portable tile that applies its epilogue to what it stored), nor on the depthwise, Winograd
  // and few-output paths, which do not offer it (the last stores partial sums between channel
  // chunks).
  struct Case {
    ConvSpec spec;
    std::vector<std::string> in_place_on;  // micro-kernels that write in place
  };
  const std::vector<Case> cases = {
      {{{1, 33, 8, 8}, 7, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, {"avx512", "avx2"}},
      {{{1, 8, 12, 12}, 16, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}}, {"avx512", "avx2"}},
      {{{1, 64, 20, 20}, 40, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {}},  // K = 576 > KC
      {{{1, 40, 7, 7}, 64, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, {"avx512"}},  // pixel rows
      {{{1, 16, 14, 14}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 16}, {}},     // depthwise
      {{{1, 32, 14, 14}, 32, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {}},         // Winograd
      {{{1, 24, 12, 12}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {}},  // few outputs (AVX-512)
  };
  EachKernel kernels;
  int id = 0;
  for (const Case& k : cases) {
    ++id;
    const ConvOperands ops(k.spec, 50, id);
    const std::vector<double> want = ops.reference(true, Activation::Relu);
    std::vector<Attribute> attrs = convAttrs(k.spec);
    attrs.push_back(Attribute::ofString("activation", "Relu"));
    for (const std::string& isa : kernels.names) {
      REQUIRE(gemmForceKernel(isa.c_str()));
      const bool expect_in_place =
          std::find(k.in_place_on.begin(), k.in_place_on.end(), isa) != k.in_place_on.end();
      for (int threads : {1, 2}) {
        StatefulNode fused("fusectl", "FusedConv", 4, attrs, 0b110, true);
        for (int run = 0; run < 2; ++run) {  // the second run uses the packed weights
          INFO("case " << id << " kernel " << isa << " threads " << threads << " run " << run);
          HostTensor z = floatTensor(ops.yd, ops.zv);  // a buffer of its own, like a pooled one
          const HostTensor y = fused.run({&ops.x, &ops.w, &ops.b, &z}, threads, 0b1000);
          CHECK((y.raw() == z.raw()) == expect_in_place);
          if (y.raw() != z.raw()) CHECK(valuesOf(z) == ops.zv);
          requireNear(valuesOf(y), want, ops.atol, 1e-4);
          // Bit for bit what the same node computes into a buffer of its own.
          const HostTensor apart = fused.run(ops.fusedInputs(), threads);
          CHECK(apart.raw() != ops.z.raw());
          CHECK(valuesOf(apart) == valuesOf(y));
        }
      }
    }
  }
}
TEST_CASE("Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions match the definition",
          "[kernels][gemm][winograd]") {
  EachKernel kernels;
  const std::vector<ConvSpec> cases = {
      {{1, 16, 8, 8}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {{2, 19, 13, 11}, 21, {3, 3}, {1, 1}, {1, 1}, {1, 0, 2, 1}},  // odd sizes, uneven pads
      {{1, 33, 7, 7}, 40, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}},    // unpadded, odd output
      {{1, 5, 4, 5}, 3, {3, 3}, {1, 1}, {1, 1}, {2, 2, 3, 2}},      // pads wider than a tile
      {{1, 64, 30, 30}, 24, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {{1, 16, 106, 106}, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},  // two chunks: 51 + 2 tile rows
      {{1, 600, 6, 6}, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},    // C over two GEMM K slices
      {{1, 1, 5, 5}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},      // one channel
      {{1, 8, 3, 3}, 9, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}},      // a single output pixel
  };
  int id = 0;
  for (const ConvSpec& c : cases) {
    ++id;
    const ConvOperands ops(c, 50, id);
    const std::vector<double> plain = ops.reference(false, Activation::None);
    const std::vector<double> silu = ops.reference(true, Activation::Silu);
    for (const ConvAlgorithm algorithm : {ConvAlgorithm::Winograd, ConvAlgorithm::Winograd4}) {
      ForcedConvAlgorithm forced(algorithm);
      for (const std::string& isa : kernels.names) {
        REQUIRE(gemmForceKernel(isa.c_str()));
        StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
        // The weights not constant: no transformed filters to keep, so the im2col path runs.
        StatefulNode varying("", "Conv", 3, convAttrs(c), 0b100);
        std::vector<Attribute> attrs = convAttrs(c);
        attrs.push_back(Attribute::ofString("activation", "Silu"));
        StatefulNode fused("fusectl", "FusedConv", 4, attrs, 0b110);
        for (int threads : {1, 2, 3}) {
          for (int run = 0; run < 2; ++run) {  // the second run uses the kept filters
            INFO("case " << id << " tile " << (algorithm == ConvAlgorithm::Winograd4 ? 4 : 2)
                          << " kernel " << isa << " threads " << threads << " run " << run);
            const HostTensor y = conv.run(ops.plainInputs(), threads);
            REQUIRE(y.dims() == ops.yd);
            requireNear(valuesOf(y), plain, ops.atol, 1e-4);
            requireNear(valuesOf(fused.run(ops.fusedInputs(), threads)), silu, ops.atol, 1e-4);
            requireNear(valuesOf(varying.run(ops.plainInputs(), threads)), plain, ops.atol, 1e-4);
          }
        }
      }
    }
  }
}

TEST_CASE("Winograd and im2col convolutions agree on ResNet shapes", "[kernels][gemm][winograd]") {
  // Float rounding only: the two algorithms sum the same products in different orders.
  struct Shape {
    int64_t C, H, M;
  };
  for (const Shape& s : {Shape{64, 56, 64}, Shape{128, 28, 128}, Shape{256, 14, 256},
                         Shape{512, 7, 512}}) {
    const ConvSpec c = {{1, s.C, s.H, s.H}, s.M, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}};
    const Dims wd = {s.M, s.C, 3, 3};
    const std::vector<float> xv = randomFloats(s.C * s.H * s.H, 90),
                             wv = randomFloats(s.M * s.C * 9, 91), bv = randomFloats(s.M, 92);
    HostTensor x = floatTensor(c.x, xv), w = floatTensor(wd, wv), b = floatTensor({s.M}, bv);
    std::vector<float> by_algorithm[3];
    const ConvAlgorithm algorithms[] = {ConvAlgorithm::Im2col, ConvAlgorithm::Winograd,
                                        ConvAlgorithm::Winograd4};
    for (int a = 0; a < 3; ++a) {
      ForcedConvAlgorithm forced(algorithms[a]);
      StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
      by_algorithm[a] = valuesOf(conv.run({&x, &w, &b}, 2));
    }
    // randomFloats are in [-1, 1]: |y| stays below about sqrt(9 C) / 3; the error grows like
    // sqrt(9 C) float roundings of values of that size.
    const std::vector<double> im2col(by_algorithm[0].begin(), by_algorithm[0].end());
    INFO("C " << s.C << " H " << s.H);
    requireNear(by_algorithm[1], im2col, 2e-6 * 9 * s.C, 1e-4);
    requireNear(by_algorithm[2], im2col, 2e-6 * 9 * s.C, 1e-4);
    // Left to choose, the kernel takes Winograd on these shapes (winogradTile): bit for bit
    // the forced result of that tile, which rounds differently from im2col. (Onto 7x7 the
    // direct product takes it where it runs: the test below.)
    const int tile = winogradTile(s.C, s.M, s.H, s.H);
    REQUIRE(tile != 0);
    if (s.H > 7 || std::string_view(gemmKernelName()) != "avx512") {
      StatefulNode automatic("", "Conv", 3, convAttrs(c), 0b110);
      REQUIRE(valuesOf(automatic.run({&x, &w, &b}, 2)) == by_algorithm[tile == 4 ? 2 : 1]);
    }
    REQUIRE(by_algorithm[1] != by_algorithm[0]);
    REQUIRE(by_algorithm[2] != by_algorithm[1]);
  }
  REQUIRE(pixelRowsPay(49, 64, 576));
  REQUIRE(pixelRowsPay(81, 64, 576));
  REQUIRE_FALSE(pixelRowsPay(196, 64, 576));  // 6 whole tiles and a 16-wide one: 94% used
  REQUIRE_FALSE(pixelRowsPay(49, 32, 576));
  // Under 16 pixels, only while the weights stay in cache (at most 1 MiB).
  REQUIRE(pixelRowsPay(9, 400, 400));
  REQUIRE_FALSE(pixelRowsPay(9, 448, 2048));
  REQUIRE(pixelRowsPay(49, 512, 2048));  // ResNet-50's 1x1 onto 7x7: the tile's waste decides
  REQUIRE(winogradTile(64, 64, 56, 56) == 4);
  {
    // 256 -> 256 onto 14x14 takes F(4x4, 3x3) only where 512-bit FMAs run at half width; 192
    // channels and 7x7 maps keep F(2x2, 3x3) there too.
    struct RestoreHalfWidth {
      ~RestoreHalfWidth() { vec::forceFma512HalfWidth(std::nullopt); }
    } restore;
    vec::forceFma512HalfWidth(false);
    REQUIRE(winogradTile(256, 256, 14, 14) == 2);
    vec::forceFma512HalfWidth(true);
    REQUIRE(winogradTile(256, 256, 14, 14) == 4);
    REQUIRE(winogradTile(192, 192, 14, 14) == 2);
    REQUIRE(winogradTile(256, 256, 7, 7) == 2);
    REQUIRE(winogradTile(512, 512, 14, 14) == 2);
  }
  // And keeps im2col where Winograd does not pay (16 channels on a small plane) or cannot run
  // (stride 2 onto few pixels: the direct product takes stride 2 from 49 output pixels on).
  REQUIRE_FALSE(winogradPays(16, 64, 8, 8));
  for (const int64_t stride : {int64_t{1}, int64_t{2}}) {
    const int64_t C = stride == 1 ? 16 : 64;
    const ConvSpec c = {{1, C, 8, 8}, 64, {3, 3}, {stride, stride}, {1, 1}, {1, 1, 1, 1}};
    const std::vector<float> xv = randomFloats(C * 64, 93), wv = randomFloats(64 * C * 9, 94),
                             bv = randomFloats(64, 95);
    HostTensor x = floatTensor(c.x, xv), w = floatTensor({64, C, 3, 3}, wv),
               b = floatTensor({64}, bv);
    std::vector<float> im2col;
    {
      ForcedConvAlgorithm forced(ConvAlgorithm::Im2col);
      StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
      im2col = valuesOf(conv.run({&x, &w, &b}));
    }
    StatefulNode automatic("", "Conv", 3, convAttrs(c), 0b110);
    INFO("stride " << stride);
    REQUIRE(valuesOf(automatic.run({&x, &w, &b})) == im2col);
  }
}

TEST_CASE("On small maps with 32 channels on one side the direct product takes F(2x2, 3x3)'s place",
          "[kernels][gemm][winograd][direct]") {
  if (std::string_view(gemmKernelName()) != "avx512") {
    WARN("skipped: the direct product runs with the AVX-512 GEMM kernel only");
    return;
  }
  // SqueezeNet's 32 -> 128 at 11x11 and DenseNet's 128 -> 32 at 12x12 go direct (bit for bit the
  // forced direct result, which Winograd's differs from) on either kind of machine; any channel
  // count onto 64 pixels or fewer (ResNet's 7x7 layers) goes direct where 512-bit FMAs run at
  // full width and stays Winograd where they run as two halves (vec::fma512HalfWidth); 64 -> 64
  // at 12x12 stays Winograd on both.
  const bool half_width = GENERATE(false, true);
  struct RestoreHalfWidth {
    ~RestoreHalfWidth() { vec::forceFma512HalfWidth(std::nullopt); }
  } restore;
  vec::forceFma512HalfWidth(half_width);
  INFO("512-bit FMAs at half width: " << half_width);
  struct Shape {
    int64_t C, H, M;
    bool direct;
  };
  for (const Shape& s : {Shape{32, 11, 128, true}, Shape{128, 12, 32, true},
                         Shape{256, 7, 256, !half_width}, Shape{64, 12, 64, false}}) {
    const ConvSpec c = {{1, s.C, s.H, s.H}, s.M, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}};
    const std::vector<float> xv = randomFloats(s.C * s.H * s.H, 96),
                             wv = randomFloats(s.M * s.C * 9, 97), bv = randomFloats(s.M, 98);
    HostTensor x = floatTensor(c.x, xv), w = floatTensor({s.M, s.C, 3, 3}, wv),
               b = floatTensor({s.M}, bv);
    std::vector<float> direct, winograd;
    for (const bool forced_direct : {true, false}) {
      ForcedConvAlgorithm forced(forced_direct ? ConvAlgorithm::Direct : ConvAlgorithm::Winograd);
      StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
      (forced_direct ? direct : winograd) = valuesOf(conv.run({&x, &w, &b}));
    }
    INFO("C " << s.C << " H " << s.H << " M " << s.M);
    REQUIRE(direct != winograd);
    StatefulNode automatic("", "Conv", 3, convAttrs(c), 0b110);
    REQUIRE(valuesOf(automatic.run({&x, &w, &b})) == (s.direct ? direct : winograd));
  }
}


TEST_CASE("The implicit im2col convolution equals the im2col matrix's bit for bit",
          "[kernels][gemm][conv]") {
  // The implicit im2col (conv_implicit.h) packs the GEMM's panels from phase planes of the
  // input: the same values in the same order as packing them from an im2col matrix, so the
  // result must be identical, not merely close. The cases cover the phase split (strides 2 and
  // 3, unequal strides, dilation with stride, kernels narrower than the stride), pads on every
  // side, groups, 1-D, 3-D (depth phases, (2+1)-D windows), output rows of 1-9 pixels (a 16-lane
  // group spans up to 16 rows; more than five go the scalar way), K over two GEMM slices, two
  // images, and both products (channels by pixels, and pixels by channels on 7x7 and 9x9 planes
  // with 64+ channels).
  const std::vector<ConvSpec> cases = {
      {{1, 3, 23, 23}, 16, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}},  // a ResNet stem
      {{2, 5, 19, 17}, 12, {3, 3}, {2, 2}, {1, 1}, {1, 0, 0, 1}},  // uneven pads, two images
      {{1, 4, 20, 22}, 9, {3, 3}, {3, 3}, {1, 1}, {2, 1, 1, 2}},   // stride 3
      {{1, 6, 16, 15}, 8, {3, 5}, {2, 1}, {1, 1}, {1, 2, 1, 2}},   // unequal strides
      {{1, 3, 17, 18}, 7, {3, 3}, {2, 2}, {2, 2}, {2, 2, 2, 2}},   // dilation at stride 2
      {{1, 4, 12, 13}, 5, {1, 3}, {3, 1}, {1, 1}, {0, 1, 0, 1}},   // kernel rows < stride
      {{1, 12, 10, 9}, 18, {3, 3}, {1, 2}, {1, 1}, {1, 1, 1, 1}, 3},  // groups
      {{2, 5, 23}, 9, {4}, {2}, {1}, {1, 2}},                         // 1-D
      {{1, 3, 2, 9}, 4, {2, 2}, {1, 1}, {1, 1}, {0, 0, 0, 0}},        // one output row
      {{1, 4, 9, 1}, 3, {3, 1}, {1, 1}, {1, 1}, {1, 0, 1, 0}},        // rows of 1 pixel
      {{1, 5, 6, 6}, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},        // rows of 3
      {{1, 5, 8, 8}, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},        // rows of 4
      {{1, 64, 20, 20}, 40, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},    // K over two slices
      {{1, 96, 31, 29}, 5, {3, 3}, {2, 2}, {1, 1}, {0, 1, 2, 1}},
      {{2, 24, 14, 14}, 96, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},    // pixels x channels, 7x7
      {{1, 20, 9, 9}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},      // pixels x channels, 9x9
      {{1, 70, 13, 13}, 64, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},    // the same, K in 2 slices
      // 3-D (a video model's): phases along depth too.
      {{1, 4, 6, 9, 10}, 8, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}},
      {{2, 3, 7, 11, 12}, 6, {3, 5, 3}, {2, 2, 1}, {1, 1, 1}, {1, 2, 0, 1, 2, 1}},
      {{1, 5, 9, 8, 9}, 7, {3, 3, 3}, {3, 2, 2}, {2, 1, 1}, {2, 1, 1, 2, 1, 1}},
      {{1, 4, 4, 10, 10}, 6, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1, 0, 1, 1}},  // (2+1)-D
      {{1, 6, 4, 6, 6}, 6, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, 2},  // groups
      {{1, 40, 3, 7, 7}, 64, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}},  // pixel rows
  };
  EachKernel kernels;
  int id = 0;
  for (const ConvSpec& c : cases) {
    ++id;
    const ConvOperands ops(c, 70, id);
    const std::vector<double> plain = ops.reference(false, Activation::None);
    const std::vector<double> fused_want = ops.reference(true, Activation::Relu);
    std::vector<Attribute> attrs = convAttrs(c);
    attrs.push_back(Attribute::ofString("activation", "Relu"));
    for (const std::string& isa : kernels.names) {
      REQUIRE(gemmForceKernel(isa.c_str()));
      for (int threads : {1, 2, 3}) {
        std::vector<float> by_algorithm[2][2];  // [im2col, implicit][plain, fused]
        const ConvAlgorithm algorithms[] = {ConvAlgorithm::Im2col, ConvAlgorithm::Implicit};
        for (int a = 0; a < 2; ++a) {
          ForcedConvAlgorithm forced(algorithms[a]);
          StatefulNode conv("", "Conv", 3, convAttrs(c), 0b110);
          StatefulNode fused("fusectl", "FusedConv", 4, attrs, 0b110);
          // The weights not constant: the product reads them unpacked.
          StatefulNode varying("", "Conv", 3, convAttrs(c), 0b100);
          for (int run = 0; run < 2; ++run) {  // the second run uses the packed weights
            INFO("case " << id << " kernel " << isa << " threads " << threads << " algorithm "
                         << (a ? "implicit" : "im2col") << " run " << run);
            by_algorithm[a][0] = valuesOf(conv.run(ops.plainInputs(), threads));
            by_algorithm[a][1] = valuesOf(fused.run(ops.fusedInputs(), threads));
            requireNear(by_algorithm[a][0], plain, ops.atol, 1e-4);
            requireNear(by_algorithm[a][1], fused_want, ops.atol, 1e-4);
            CHECK(valuesOf(varying.run(ops.plainInputs(), threads)) == by_algorithm[a][0]);
          }
        }
        INFO("case " << id << " kernel " << isa << " threads " << threads);
        CHECK(by_algorithm[1][0] == by_algorithm[0][0]);
        CHECK(by_algorithm[1][1] == by_algorithm[0][1]);
      }
    }
  }
  // Where it applies: 1-D, 2-D and 3-D windows of more than one tap (a 3-D one with more than
  // one in the plane), not where the padded planes would outgrow the input by far.
  const auto window = [](Dims in, Dims k, Dims s, Dims d, Dims out) {
    Window w;
    w.in = in;
    w.kernel = k;
    w.strides = s;
    w.dilations = d;
    w.pad_begin = Dims(in.size(), 0);
    w.pad_end = Dims(in.size(), 0);
    w.out = out;
    return w;
  };
  CHECK(ImplicitIm2col::applies(window({56, 56}, {3, 3}, {2, 2}, {1, 1}, {28, 28})));
  CHECK(ImplicitIm2col::applies(window({23}, {4}, {2}, {1}, {11})));
  CHECK_FALSE(ImplicitIm2col::applies(window({56, 56}, {1, 1}, {2, 2}, {1, 1}, {28, 28})));
  CHECK(ImplicitIm2col::applies(window({5, 6, 7}, {3, 2, 3}, {1, 1, 1}, {1, 1, 1}, {3, 5, 5})));
  CHECK_FALSE(ImplicitIm2col::applies(window({4, 5, 6, 7}, {2, 3, 2, 3}, {1, 1, 1, 1},
                                             {1, 1, 1, 1}, {3, 3, 5, 5})));
  CHECK_FALSE(ImplicitIm2col::applies(window({5, 6, 7}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
                                             {5, 6, 7})));
  // A temporal window (k x 1 x 1) keeps the im2col matrix, which measured faster there.
  CHECK_FALSE(ImplicitIm2col::applies(window({5, 6, 7}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1},
                                             {3, 6, 7})));
  CHECK(ImplicitIm2col::applies(window({5, 6, 7}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {5, 4, 5})));
  CHECK_FALSE(ImplicitIm2col::applies(window({4, 4}, {3, 3}, {1, 1}, {200, 200}, {1, 1})));
}
