// GEMM and convolution throughput: GFLOP/s of 1024^3 per micro-kernel ISA at 1 and 2 threads
// (packed per call and with B prepacked), skinny products M = 1..16 as GB/s of B streamed, and
// ResNet-50's convolution shapes (GFLOP/s through the registered Conv kernel, weights prepacked
// in its state as in a session), and the FMA peak they are bounded by (peak).
//
//   bench_gemm [--repeat R] [--only peak|gemm|skinny|cold|conv|conv-cold|conv3x3|depthwise]
//              [--clock wall|cpu]
//              [--conv-algorithm auto|im2col|implicit|winograd|winograd4|direct]
//
// conv3x3: 3x3 stride-1 shapes beyond ResNet-50's (small channel counts, large and tiny
// images), to compare the im2col and Winograd convolutions (--conv-algorithm).
//
// depthwise: MobileNetV2's depthwise convolutions with its Clip(0, 6) epilogue and
// EfficientNet-B0's with its Silu one,
// one thread, each through both AVX-512 kernels (a plane's rows across the vector, and 16
// channels across the vector), to place depthwiseChannelsPay's rule.
//
// One JSON line per measurement, the median of R runs after a warm-up; no assertions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 reports the _mm512_undefined_pd() inside _mm512_reduce_add_ps as uninitialised (as
// gemm_vector_epilogue.h notes for the kernels).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "bench_clock.h"
#include "conv_window.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"
#include "conv_depthwise.h"
#include "conv_winograd.h"
#include "gemm_micro.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;
using namespace fusectl::kernels::cpu;

using fusectl::bench::g_cpu_clock;
using fusectl::bench::now;

double medianSeconds(int repeat, const std::function<void()>& f) {
  f();
  std::vector<double> s;
  for (int r = 0; r < repeat; ++r) {
    const double t0 = now();
    f();
    s.push_back(now() - t0);
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

std::vector<float> randomFloats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// The FMA roofline: fused multiply-adds on registers only, 24 independent accumulators (more
// than latency x pipes on any x86 core), no loads. What a float GEMM on this ISA can reach at
// best, so the GEMM and model figures can be read as a share of it rather than against a quoted
// number (the machine's clock moves; measure it in the same run).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) float fmaLoop512(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(1e-3f * i);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"))) float fmaLoop256(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1e-3f * i);
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float v[8];
  _mm256_store_ps(v, s);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

void benchPeak(int repeat) {
  struct Isa {
    const char* name;
    bool ok;
    float (*loop)(int64_t);
    double flops_per_iter;
  };
  const Isa isas[] = {
      {"avx512", __builtin_cpu_supports("avx512f") != 0, fmaLoop512, 24.0 * 16 * 2},
      {"avx2-fma", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), fmaLoop256,
       12.0 * 8 * 2}};
  const int64_t iters = 2000000;
  for (const Isa& isa : isas) {
    if (!isa.ok) continue;
    for (int threads : {1, 2}) {
      volatile float sink = 0.f;
      const double s = medianSeconds(repeat, [&] {
        std::vector<std::thread> pool;
        for (int t = 1; t < threads; ++t) pool.emplace_back([&] { sink = isa.loop(iters); });
        sink = isa.loop(iters);
        for (std::thread& th : pool) th.join();
      });
      std::printf("{\"bench\":\"fma_peak\",\"kernel\":\"%s\",\"threads\":%d,\"ms\":%.3f,"
                  "\"gflops\":%.1f}\n",
                  isa.name, threads, s * 1e3, isa.flops_per_iter * iters * threads / s * 1e-9);
      std::fflush(stdout);
    }
  }
}
#else
void benchPeak(int) {}
#endif

void benchSquare(int repeat) {
  const int64_t n = 1024;
  std::vector<float> a = randomFloats(n * n, 1), b = randomFloats(n * n, 2), c(n * n);
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (!gemmForceKernel(isa)) continue;
    const PackedMatrix pb = packGemmB(n, n, b.data(), n, 1);
    for (int threads : {1, 2}) {
      for (bool prepacked : {false, true}) {
        GemmParams p = gemmParams(n, n, n, a.data(), n, false, b.data(), n, false, c.data(), n);
        if (prepacked) p.packed_b = &pb;
        const double s = medianSeconds(repeat, [&] { gemm(p, threads); });
        std::printf("{\"bench\":\"gemm\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"kernel\":\"%s\","
                    "\"threads\":%d,\"b_prepacked\":%s,\"ms\":%.3f,\"gflops\":%.1f}\n",
                    (long long)n, (long long)n, (long long)n, gemmKernelName(), threads,
                    prepacked ? "true" : "false", s * 1e3, 2.0 * n * n * n / s * 1e-9);
        std::fflush(stdout);
      }
    }
  }
  gemmForceKernel("auto");
}

// Weights as a model has them: twelve different prepacked B operands (BERT-base's FFN shapes,
// 113 MB in all) used in turn, so each product streams its weights from memory rather than
// from a cache the previous repetition warmed. GFLOP/s of the twelve products together.
void benchColdWeights(int repeat) {
  constexpr int kLayers = 12;
  const struct { int64_t M, N, K; } shapes[] = {{128, 3072, 768}, {128, 768, 3072}};
  for (const auto& sh : shapes) {
    std::vector<float> a = randomFloats(sh.M * sh.K, 5), c(sh.M * sh.N);
    std::vector<PackedMatrix> weights;
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<float> b = randomFloats(sh.K * sh.N, 10 + l);
      weights.push_back(packGemmB(sh.K, sh.N, b.data(), sh.N, 1));
    }
    for (int threads : {1, 2}) {
      const double s = medianSeconds(repeat, [&] {
        for (const PackedMatrix& w : weights) {
          GemmParams p = gemmParams(sh.M, sh.N, sh.K, a.data(), sh.K, false, nullptr, sh.N, false,
                                    c.data(), sh.N);
          p.packed_b = &w;
          gemm(p, threads);
        }
      });
      std::printf("{\"bench\":\"cold_weights\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
                  "\"layers\":%d,\"kernel\":\"%s\",\"threads\":%d,\"ms\":%.3f,"
                  "\"gflops\":%.1f}\n",
                  (long long)sh.M, (long long)sh.N, (long long)sh.K, kLayers, gemmKernelName(),
                  threads, s * 1e3, 2.0 * sh.M * sh.N * sh.K * kLayers / s * 1e-9);
      std::fflush(stdout);
    }
  }
}

// The decode case: a few rows against a large weight matrix, which must stream at bandwidth.
void benchSkinny(int repeat) {
  const int64_t K = 4096, N = 4096;
  std::vector<float> b = randomFloats(K * N, 3);
  const PackedMatrix pb = packGemmB(K, N, b.data(), N, 1);
  for (int64_t m : {1, 2, 4, 8, 16}) {
    std::vector<float> a = randomFloats(m * K, 4), c(m * N);
    for (int threads : {1, 2}) {
      for (bool prepacked : {false, true}) {
        GemmParams p = gemmParams(m, N, K, a.data(), K, false, b.data(), N, false, c.data(), N);
        if (prepacked) p.packed_b = &pb;
        const double s = medianSeconds(repeat, [&] { gemm(p, threads); });
        std::printf("{\"bench\":\"skinny\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"kernel\":\"%s\","
                    "\"threads\":%d,\"b_prepacked\":%s,\"ms\":%.3f,\"b_gbps\":%.1f,"
                    "\"gflops\":%.1f}\n",
                    (long long)m, (long long)N, (long long)K, gemmKernelName(), threads,
                    prepacked ? "true" : "false", s * 1e3, K * N * 4.0 / s * 1e-9,
                    2.0 * m * N * K / s * 1e-9);
        std::fflush(stdout);
      }
    }
  }
}

// The epilogue's share of a shallow product: MobileNetV2's and EfficientNet-B0's 16 -> 96 1x1
// expansion onto 112x112 as the GEMM runs it (A: 96 x 16 weights, B: 16 x 12544 pixels), with a
// bias per row and each activation. At K = 16 a tile spends as many vector operations on Silu's
// exponential as on its FMAs, so this is where the activation's cost shows (bench/README.md,
// "F(4x4, 3x3) onto 14x14 and a cheaper Silu"). One thread; ms per product, and the activation's
// ns per output over the bias-only product.
void benchEpilogue(int repeat) {
  const int64_t M = 96, K = 16, N = 112 * 112;
  const std::vector<float> a = randomFloats(M * K, 8), b = randomFloats(K * N, 9),
                           bias = randomFloats(M, 10);
  std::vector<float> c(static_cast<size_t>(M * N));
  const PackedMatrix pa = packGemmA(M, K, a.data(), K, 1);
  const float clip[2] = {0.f, 6.f};
  const std::vector<Activation> activations = {
      Activation::None,    Activation::Relu, Activation::Clip, Activation::Sigmoid,
      Activation::Silu,    Activation::Tanh, Activation::Gelu, Activation::GeluTanh};
  std::vector<Epilogue> epilogues(activations.size());
  for (size_t i = 0; i < activations.size(); ++i) {
    epilogues[i].bias = bias.data();
    epilogues[i].bias_per_row = true;
    if (activations[i] == Activation::Clip) {
      epilogues[i].setActivation(activations[i], clip, 2);
    } else if (activations[i] != Activation::None) {
      epilogues[i].setActivation(activations[i], nullptr, 0);
    }
  }
  // Seven rounds over the activations in turn, each a median of `repeat` products; the median
  // of the rounds: a drifting host moves every activation alike.
  constexpr int kRounds = 7;
  std::vector<std::vector<double>> seconds(activations.size());
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < activations.size(); ++i) {
      GemmParams p = gemmParams(M, N, K, a.data(), K, false, b.data(), N, false, c.data(), N);
      p.packed_a = &pa;
      p.epilogue = &epilogues[i];
      seconds[i].push_back(medianSeconds(repeat, [&] { gemm(p, 1); }));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double plain = median(seconds[0]);
  for (size_t i = 0; i < activations.size(); ++i) {
    const double sec = median(seconds[i]);
    std::printf("{\"bench\":\"epilogue\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"kernel\":\"%s\","
                "\"activation\":\"%s\",\"ms\":%.4f,\"activation_ns_per_output\":%.3f}\n",
                (long long)M, (long long)N, (long long)K, gemmKernelName(),
                activations[i] == Activation::None
                    ? "none"
                    : std::string(activationName(activations[i])).c_str(),
                sec * 1e3, (sec - plain) / static_cast<double>(M * N) * 1e9);
  }
  std::fflush(stdout);
}

class ReusingAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    if (!buffer_ || buffer_->byteSize() != count * dtypeSize(dtype)) {
      buffer_ = std::make_shared<HostTensor>(dtype, dims);
    }
    return HostTensor::borrow(dtype, dims, buffer_->raw(), buffer_);
  }

 private:
  std::shared_ptr<HostTensor> buffer_;
};

struct ConvShape {
  int64_t C, H, M, k, stride;
};

// cold: each repetition runs the convolution over enough different weight tensors (128 MiB of
// them in all, each with its own prepacked state) that their weights come from memory, as in a
// model, rather than from the cache the previous repetition warmed; ms is per convolution.
void benchConv(int repeat, const std::vector<ConvShape>& shapes, bool cold = false) {
  using Shape = ConvShape;
  const char* algorithm = convForcedAlgorithm() == ConvAlgorithm::Winograd4  ? "winograd4"
                          : convForcedAlgorithm() == ConvAlgorithm::Winograd ? "winograd"
                          : convForcedAlgorithm() == ConvAlgorithm::Im2col ? "im2col"
                          : convForcedAlgorithm() == ConvAlgorithm::Implicit ? "implicit"
                          : convForcedAlgorithm() == ConvAlgorithm::Direct   ? "direct"
                                                                           : "auto";
  const KernelInfo* conv = KernelRegistry::global().find("", "Conv", 17);
  for (int threads : {1, 2}) {
    for (const Shape& s : shapes) {
      const int64_t pad = s.k / 2, OH = (s.H + 2 * pad - s.k) / s.stride + 1;
      HostTensor x(DType::Float, {1, s.C, s.H, s.H}), w(DType::Float, {s.M, s.C, s.k, s.k});
      HostTensor bias(DType::Float, {s.M});
      std::vector<float> xv = randomFloats(x.numel(), 5), wv = randomFloats(w.numel(), 6);
      std::copy(xv.begin(), xv.end(), x.mutableData<float>());
      std::copy(wv.begin(), wv.end(), w.mutableData<float>());
      const int64_t copies =
          cold ? std::clamp<int64_t>((int64_t{128} << 20) / (w.numel() * 4) + 1, 2, 512) : 1;
      std::vector<HostTensor> weights;
      weights.push_back(w);
      for (int64_t i = 1; i < copies; ++i) {
        weights.emplace_back(DType::Float, std::vector<int64_t>{s.M, s.C, s.k, s.k});
        std::copy(wv.begin(), wv.end(), weights.back().mutableData<float>());
      }
      Graph g("bench");
      std::vector<Value*> ins;
      for (int i = 0; i < 3; ++i) {
        ValueType vt;
        vt.dtype = DType::Float;
        ins.push_back(g.addInput("in" + std::to_string(i), vt));
      }
      Node* node = g.createNode(
          {"Conv", "", ins, {"y"}, "conv",
           {Attribute::ofInts("kernel_shape", {s.k, s.k}),
            Attribute::ofInts("strides", {s.stride, s.stride}),
            Attribute::ofInts("pads", {pad, pad, pad, pad})}});
      g.addOutput(node->output(0));
      ReusingAllocator alloc;
      std::vector<std::unique_ptr<KernelState>> states(static_cast<size_t>(copies));
      const double sec = medianSeconds(repeat, [&] {
                           for (int64_t i = 0; i < copies; ++i) {
                             KernelContext ctx(*node, 17, {&x, &weights[i], &bias}, alloc,
                                               threads);
                             ctx.bindPersistentState(&states[i], 0b110);
                             conv->fn(ctx);
                           }
                         }) /
                         static_cast<double>(copies);
      const double flops = 2.0 * s.M * OH * OH * s.C * s.k * s.k;
      std::printf("{\"bench\":\"%s\",\"x\":[1,%lld,%lld,%lld],\"w\":[%lld,%lld,%lld,%lld],"
                  "\"stride\":%lld,\"kernel\":\"%s\",\"algorithm\":\"%s\",\"threads\":%d,"
                  "\"ms\":%.3f,\"gflops\":%.1f}\n",
                  cold ? "conv_cold" : "conv", (long long)s.C, (long long)s.H, (long long)s.H,
                  (long long)s.M, (long long)s.C, (long long)s.k, (long long)s.k,
                  (long long)s.stride, gemmKernelName(), algorithm,
                  threads, sec * 1e3, flops / sec * 1e-9);
      std::fflush(stdout);
    }
  }
}

struct DepthwiseShape {
  int64_t C, H, k, stride;
  bool silu;  // EfficientNet-B0's epilogue; MobileNetV2's (false) is Clip(0, 6)
};

void benchDepthwise(int repeat) {
  const std::vector<DepthwiseShape> shapes = {
      // MobileNetV2
      {32, 112, 3, 1, false}, {96, 112, 3, 2, false}, {144, 56, 3, 1, false},
      {144, 56, 3, 2, false}, {192, 28, 3, 1, false}, {192, 28, 3, 2, false},
      {384, 14, 3, 1, false}, {576, 14, 3, 1, false}, {576, 14, 3, 2, false},
      {960, 7, 3, 1, false},
      // EfficientNet-B0
      {32, 112, 3, 1, true}, {96, 112, 3, 2, true}, {144, 56, 3, 1, true}, {144, 56, 5, 2, true},
      {240, 28, 5, 1, true}, {240, 28, 3, 2, true}, {480, 14, 3, 1, true}, {480, 14, 5, 1, true},
      {672, 14, 5, 1, true}, {672, 14, 5, 2, true}, {1152, 7, 5, 1, true}, {1152, 7, 3, 1, true}};
  for (const DepthwiseShape& s : shapes) {
    const Window win = fusectl::bench::halfKernelPaddedWindow(s.H, s.H, s.k, s.stride);
    const int64_t OH = win.out[0];
    const std::vector<float> x = randomFloats(s.C * s.H * s.H, 5),
                             w = randomFloats(s.C * s.k * s.k, 6), bias = randomFloats(s.C, 7);
    std::vector<float> y(static_cast<size_t>(s.C * OH * OH));
    Epilogue ep;
    ep.bias = bias.data();
    ep.bias_per_row = true;
    const float clip[2] = {0.f, 6.f};
    if (s.silu) ep.setActivation(Activation::Silu, nullptr, 0);
    else ep.setActivation(Activation::Clip, clip, 2);
    const int64_t taps = s.k * s.k, in_plane = s.H * s.H, P = OH * OH;
    bool ok = true;
    const double rows = medianSeconds(repeat, [&] {
      for (int64_t c = 0; c < s.C; ++c)
        ok &= depthwisePlaneAvx512(x.data() + c * in_plane, w.data() + c * taps,
                                   y.data() + c * P, win, ep, c, nullptr);
    });
    const double channels = medianSeconds(repeat, [&] {
      for (int64_t c = 0; c < s.C; c += 16)
        ok &= depthwiseChannelsAvx512(x.data() + c * in_plane, w.data() + c * taps,
                                      y.data() + c * P, win, ep, c,
                                      std::min<int64_t>(16, s.C - c), nullptr);
    });
    // Both sides channels-last, as the executor runs depthwise convolutions between
    // convolutions that take the layout (planes up to 28x28): the same window over x read as
    // [H][W][C] (the values differ from the planar runs', the work does not).
    std::vector<float> y_nhwc(y.size());
    const double last = medianSeconds(repeat, [&] {
      depthwiseChannelsLast(x.data(), true, w.data(), y_nhwc.data(), true, win, ep, s.C, nullptr,
                            0, OH);
    });
    if (!ok) {
      std::printf("{\"bench\":\"depthwise\",\"skipped\":\"no AVX-512\"}\n");
      return;
    }
    std::printf("{\"bench\":\"depthwise\",\"x\":[1,%lld,%lld,%lld],\"kernel\":%lld,"
                "\"stride\":%lld,\"activation\":\"%s\",\"rows_ms\":%.4f,"
                "\"channels_ms\":%.4f,\"rows_over_channels\":%.2f,\"chosen\":\"%s\","
                "\"channels_last_ms\":%.4f,\"gflops_channels_last\":%.1f}\n",
                (long long)s.C, (long long)s.H, (long long)s.H, (long long)s.k,
                (long long)s.stride, s.silu ? "Silu" : "Clip", rows * 1e3, channels * 1e3,
                rows / channels,
                depthwiseChannelsPay(win) ? "channels" : "rows", last * 1e3,
                2.0 * s.C * P * taps / last * 1e-9);
    std::fflush(stdout);
  }
}

// ResNet-50's convolutions (im2col GEMM, or Winograd for the 3x3 stride-1 ones when it pays).
const std::vector<ConvShape> kResNet50Convs = {{3, 224, 64, 7, 2},    {64, 56, 64, 1, 1},    {64, 56, 64, 3, 1},
                          {64, 56, 256, 1, 1},   {256, 56, 64, 1, 1},   {256, 56, 128, 1, 1},
                          {128, 56, 128, 3, 2},  {128, 28, 512, 1, 1},  {512, 28, 128, 1, 1},
                          {128, 28, 128, 3, 1},  {256, 28, 256, 3, 2},  {256, 14, 1024, 1, 1},
                          {1024, 14, 256, 1, 1}, {256, 14, 256, 3, 1},  {512, 14, 512, 3, 2},
                          {512, 7, 2048, 1, 1},  {2048, 7, 512, 1, 1},  {512, 7, 512, 3, 1},
                          // the downsampling shortcuts: 1x1 at stride 2
                          {256, 56, 512, 1, 2},  {512, 28, 1024, 1, 2}, {1024, 14, 2048, 1, 2},
                          // layer3's and layer4's first 1x1, before their stride-2 3x3 (layer3's
                          // packs a 1.6 MB block of B per call)
                          {512, 28, 256, 1, 1},  {1024, 14, 512, 1, 1}};

// 3x3 stride-1 convolutions: where Winograd does and does not pay.
const std::vector<ConvShape> kConv3x3 = {
    {16, 112, 16, 3, 1},  {32, 112, 32, 3, 1}, {32, 56, 32, 3, 1},   {64, 112, 64, 3, 1},
    {16, 28, 16, 3, 1},   {64, 56, 64, 3, 1},  {128, 28, 128, 3, 1}, {256, 14, 256, 3, 1},
    {512, 7, 512, 3, 1},  {512, 14, 512, 3, 1}, {128, 7, 128, 3, 1}, {64, 14, 64, 3, 1},
    {256, 7, 256, 3, 1},  {1024, 7, 1024, 3, 1}, {32, 4, 32, 3, 1},  {16, 8, 64, 3, 1},
    {64, 28, 256, 3, 1},  {256, 28, 64, 3, 1}, {128, 14, 128, 3, 1}, {128, 14, 256, 3, 1},
    {96, 14, 96, 3, 1},   {192, 14, 192, 3, 1}};

}  // namespace

int main(int argc, char** argv) {
  int repeat = 9;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--clock") g_cpu_clock = std::string(argv[i + 1]) == "cpu";
    else if (a == "--conv-algorithm") {
      const std::string v = argv[i + 1];
      if (v == "im2col") convForceAlgorithm(ConvAlgorithm::Im2col);
      else if (v == "implicit") convForceAlgorithm(ConvAlgorithm::Implicit);
      else if (v == "winograd") convForceAlgorithm(ConvAlgorithm::Winograd);
      else if (v == "winograd4") convForceAlgorithm(ConvAlgorithm::Winograd4);
      else if (v == "direct") convForceAlgorithm(ConvAlgorithm::Direct);
      else if (v != "auto") return std::fprintf(stderr, "unknown --conv-algorithm %s\n", v.c_str()), 2;
    } else {
      std::fprintf(stderr,
                   "usage: bench_gemm [--repeat R] "
                   "[--only peak|gemm|skinny|cold|conv|conv-cold|conv3x3|depthwise|epilogue] "
                   "[--clock wall|cpu] [--conv-algorithm auto|im2col|implicit|winograd|winograd4|direct]\n");
      return 2;
    }
  }
  if (only.empty() || only == "peak") benchPeak(repeat);
  if (only.empty() || only == "gemm") benchSquare(repeat);
  if (only.empty() || only == "skinny") benchSkinny(repeat);
  if (only.empty() || only == "cold") benchColdWeights(repeat);
  if (only.empty() || only == "conv") benchConv(repeat, kResNet50Convs);
  if (only == "conv-cold") benchConv(repeat, kResNet50Convs, true);
  if (only == "conv3x3") benchConv(repeat, kConv3x3);
  if (only == "depthwise") benchDepthwise(repeat);
  if (only == "epilogue") benchEpilogue(repeat);
  return 0;
}
