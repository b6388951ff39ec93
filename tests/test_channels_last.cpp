// Channels-last values between convolutions (HostTensor::channelsLast, KernelInfo::
// reads_channels_last / writes_channels_last, ExecutorOptions::channels_last): which values the
// executor stores that way, that a model computes the same with and without them, and the
// kernels behind them (the depthwise channel blocks on either layout, a GEMM reading a
// transposed B or its A in place) against double-precision loops written here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../libkernels/cpu/conv_depthwise.h"
#include "../libkernels/cpu/gemm_micro.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "random_values.h"

using namespace fusectl;
using namespace fusectl::kernels;
using namespace fusectl::kernels::cpu;

namespace {

// One image's tensor of dims [C, H, W] moved between layouts.
std::vector<float> toChannelsLast(const std::vector<float>& planar, int64_t C, int64_t pixels) {
  std::vector<float> out(planar.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = 0; p < pixels; ++p) out[p * C + c] = planar[c * pixels + p];
  return out;
}

// ---- the executor's choice and the model's numbers ----

// An initializer in ONNX text: `float[dims] name = {values}`, the values seeded random.
std::string randomInitializer(const std::string& name, const std::vector<int64_t>& dims,
                              uint32_t seed) {
  size_t n = 1;
  std::string text = "float[";
  for (size_t i = 0; i < dims.size(); ++i) {
    n *= static_cast<size_t>(dims[i]);
    text += (i ? ", " : "") + std::to_string(dims[i]);
  }
  text += "] " + name + " = {";
  const std::vector<float> v = randomFloats(n, seed);
  for (size_t i = 0; i < n; ++i) text += (i ? ", " : "") + std::to_string(v[i]);
  return text + "}";
}

struct LayoutRun {
  std::vector<std::string> channels_last;  // names, in execution order
  std::vector<float> y;
};

LayoutRun runWith(const Model& model, bool channels_last, int threads) {
  ExecutorOptions options;
  options.num_threads = threads;
  options.channels_last = channels_last;
  Executor ex(model, options);
  LayoutRun r;
  for (const Value* v : ex.channelsLastValues()) r.channels_last.push_back(v->name());
  const std::vector<NamedTensor> out = ex.run(makeRandomInputs(*model.graph, 3));
  const HostTensor& y = out.at(0).tensor;
  REQUIRE_FALSE(y.channelsLast());
  r.y.assign(y.data<float>(), y.data<float>() + y.numel());
  return r;
}

// An inverted residual block (MobileNetV2's, or EfficientNet's without its squeeze-and-
// excitation): a 1x1 expansion, a depthwise convolution, a 1x1 projection with the block's
// input as residual, with `extra` nodes and outputs appended.
std::string blockModel(int64_t C, int64_t E, int64_t H, int64_t W, int64_t k, int64_t s,
                       const std::string& act, const std::string& extra_outputs = "",
                       const std::string& extra_nodes = "") {
  const int64_t pad = k / 2;
  const int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
  const std::string x = "float[1, " + std::to_string(C) + ", " + std::to_string(H) + ", " +
                        std::to_string(W) + "]";
  const std::string y = "float[1, " + std::to_string(C) + ", " + std::to_string(OH) + ", " +
                        std::to_string(OW) + "]";
  const std::string e = std::to_string(E), ks = std::to_string(k);
  const std::string activation = "activation = \"" + act + "\"" +
                                 (act == "Clip" ? ", activation_params = [0.0, 6.0]" : "");
  const std::string projection =
      s == 1 ? "Y = fusectl.FusedConv (d, wp, bp, X)" : "Y = Conv (d, wp, bp)";
  return "<ir_version: 8, opset_import: [\"\" : 13, \"fusectl\" : 1]>\n"
         "g (" + x + " X) => (" + y + " Y" + extra_outputs + ")\n<" +
         randomInitializer("we", {E, C, 1, 1}, 1) + ", " + randomInitializer("be", {E}, 2) + ", " +
         randomInitializer("wd", {E, 1, k, k}, 3) + ", " + randomInitializer("bd", {E}, 4) + ", " +
         randomInitializer("wp", {C, E, 1, 1}, 5) + ", " + randomInitializer("bp", {C}, 6) +
         ">\n{\n"
         "  e = fusectl.FusedConv <" + activation + "> (X, we, be)\n"
         "  d = fusectl.FusedConv <" + activation + ", group = " + e + ", kernel_shape = [" + ks +
         ", " + ks + "], pads = [" + std::to_string(pad) + ", " + std::to_string(pad) + ", " +
         std::to_string(pad) + ", " + std::to_string(pad) + "], strides = [" + std::to_string(s) +
         ", " + std::to_string(s) + "]> (e, wd, bd)\n"
         "  " + projection + "\n" + extra_nodes + "}\n";
}

// EfficientNet's block: blockModel's with a squeeze-and-excitation between the depthwise
// convolution and the projection (a global average pool, two 1x1 convolutions on [1, E, 1, 1],
// the scale m = Mul(s, d), `scale_first` or Mul(d, s)); `extra` nodes and outputs appended.
std::string squeezeExcitationModel(int64_t C, int64_t E, int64_t H, int64_t W, bool scale_first,
                                   const std::string& extra_outputs = "",
                                   const std::string& extra_nodes = "") {
  const std::string x = "float[1, " + std::to_string(C) + ", " + std::to_string(H) + ", " +
                        std::to_string(W) + "]";
  const std::string e = std::to_string(E);
  return "<ir_version: 8, opset_import: [\"\" : 13, \"fusectl\" : 1]>\n"
         "g (" + x + " X) => (" + x + " Y" + extra_outputs + ")\n<" +
         randomInitializer("we", {E, C, 1, 1}, 1) + ", " + randomInitializer("be", {E}, 2) + ", " +
         randomInitializer("wd", {E, 1, 3, 3}, 3) + ", " + randomInitializer("bd", {E}, 4) + ", " +
         randomInitializer("w1", {4, E, 1, 1}, 7) + ", " + randomInitializer("b1", {4}, 8) + ", " +
         randomInitializer("w2", {E, 4, 1, 1}, 9) + ", " + randomInitializer("b2", {E}, 10) + ", " +
         randomInitializer("wp", {C, E, 1, 1}, 5) + ", " + randomInitializer("bp", {C}, 6) +
         ">\n{\n"
         "  e = fusectl.FusedConv <activation = \"Silu\"> (X, we, be)\n"
         "  d = fusectl.FusedConv <activation = \"Silu\", group = " + e +
         ", kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (e, wd, bd)\n"
         "  g = GlobalAveragePool (d)\n"
         "  h = fusectl.FusedConv <activation = \"Silu\"> (g, w1, b1)\n"
         "  s = fusectl.FusedConv <activation = \"Sigmoid\"> (h, w2, b2)\n" +
         (scale_first ? "  m = Mul (s, d)\n" : "  m = Mul (d, s)\n") +
         "  Y = fusectl.FusedConv (m, wp, bp, X)\n" + extra_nodes + "}\n";
}

void requireClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-5 + 1e-5 * std::abs(want[i]));
  }
}

bool hasAvx512() { return __builtin_cpu_supports("avx512f"); }

// Float values of these dims, as fusectl's optimized models declare every value's: the executor
// chooses the layout from declared shapes.
void declareFloatShapes(Model& model,
                        const std::vector<std::pair<std::string, std::vector<int64_t>>>& values) {
  for (const auto& [name, dims] : values) {
    Value* v = model.graph->findValue(name);
    REQUIRE(v);
    v->type.dtype = DType::Float;
    v->type.shape = Shape::ofStatic(dims);
  }
}

// The declared shapes of squeezeExcitationModel's values.
std::vector<std::pair<std::string, std::vector<int64_t>>> withScale(int64_t E, int64_t H,
                                                                    int64_t W) {
  return {{"e", {1, E, H, W}}, {"d", {1, E, H, W}}, {"g", {1, E, 1, 1}}, {"h", {1, 4, 1, 1}},
          {"s", {1, E, 1, 1}}, {"m", {1, E, H, W}}};
}

// The declared shapes of a block's expansion e ([1, E, H, W]) and depthwise output d.
std::vector<std::pair<std::string, std::vector<int64_t>>> inner(int64_t E, int64_t H, int64_t W,
                                                                int64_t OH, int64_t OW) {
  return {{"e", {1, E, H, W}}, {"d", {1, E, OH, OW}}};
}

}  // namespace

TEST_CASE("The executor stores a block's inner values channels-last and computes the same",
          "[kernels][channels_last]") {
  if (!hasAvx512()) {
    WARN("skipped: this CPU has no AVX-512, so no convolution takes the channels-last layout");
    return;
  }
  struct Case {
    std::string name;
    std::string text;
    std::vector<std::string> expected;
    std::vector<std::pair<std::string, std::vector<int64_t>>> declared;
  };
  const std::vector<Case> cases = {
      // MobileNetV2's 14x14 block: both inner values. Odd channel counts (the last channel block
      // partial), a plane 9 wide, stride 2, 5x5, a non-square plane.
      {"3x3 block", blockModel(16, 96, 14, 14, 3, 1, "Clip"), {"e", "d"},
       inner(96, 14, 14, 14, 14)},
      {"odd channels", blockModel(20, 40, 9, 11, 3, 1, "Clip"), {"e", "d"},
       inner(40, 9, 11, 9, 11)},
      {"5x5 stride 2 Silu", blockModel(33, 72, 13, 15, 5, 2, "Silu"), {"e", "d"},
       inner(72, 13, 15, 7, 8)},
      {"3x3 stride 2 HardSwish", blockModel(8, 24, 28, 27, 3, 2, "HardSwish"), {"e", "d"},
       inner(24, 28, 27, 14, 14)},
      {"LeakyRelu (a scalar epilogue)", blockModel(8, 20, 10, 10, 3, 1, "LeakyRelu"), {"e", "d"},
       inner(20, 10, 10, 10, 10)},
      // The depthwise output is a graph output: it stays planar, and then the depthwise
      // convolution keeps its input planar too.
      {"depthwise output read by the caller",
       blockModel(16, 32, 14, 14, 3, 1, "Clip", ", float[1, 32, 14, 14] d"), {},
       inner(32, 14, 14, 14, 14)},
      // The expansion is also read by a Relu: it stays planar; the depthwise convolution reads
      // planes and writes channels-last.
      {"expansion read by another op",
       blockModel(16, 32, 14, 14, 3, 1, "Clip", ", float[1, 32, 14, 14] r", "  r = Relu (e)\n"),
       {"d"}, inner(32, 14, 14, 14, 14)},
      // Planes over 28x28 keep the planar kernels (measured faster there).
      {"56x56 plane", blockModel(8, 16, 56, 56, 3, 1, "Clip"), {}, inner(16, 56, 56, 56, 56)},
      // Squeeze-and-excitation: the pool and the scale read the depthwise output channels-last,
      // the scale writes it for the projection (either operand order).
      {"squeeze-and-excitation", squeezeExcitationModel(16, 40, 14, 14, true), {"e", "d", "m"},
       withScale(40, 14, 14)},
      {"squeeze-and-excitation, scale second", squeezeExcitationModel(24, 48, 7, 9, false),
       {"e", "d", "m"}, withScale(48, 7, 9)},
      // The scaled value also read by a Relu: the scale writes planes, so the depthwise
      // convolution keeps planes in, and only its output is channels-last.
      {"scaled value read by another op",
       squeezeExcitationModel(16, 40, 14, 14, true, ", float[1, 40, 14, 14] r", "  r = Relu (m)\n"),
       {"d"}, withScale(40, 14, 14)},
  };
  for (const Case& c : cases) {
    // The layout is chosen from the shapes the graph declares, as fusectl's optimized models
    // declare every value's; here the test declares them.
    const auto model = parseModelText(c.text, "<channels-last test>");
    declareFloatShapes(*model, c.declared);
    for (const int threads : {1, 2}) {
      INFO(c.name << ", " << threads << " threads");
      const LayoutRun planar = runWith(*model, false, threads);
      const LayoutRun cl = runWith(*model, true, threads);
      CHECK(planar.channels_last.empty());
      CHECK(cl.channels_last == c.expected);
      requireClose(cl.y, planar.y);
    }
  }
}

TEST_CASE("A stride-1 depthwise convolution channels-last in and out writes over its input",
          "[kernels][channels_last][in_place]") {
  if (!hasAvx512()) {
    WARN("skipped: this CPU has no AVX-512, so no convolution takes the channels-last layout");
    return;
  }
  struct Case {
    int64_t C, E, H, W;
  };
  // 96 channels on 14x14 run in one band of every channel block; 192 on 28x28 run each group of
  // blocks over the whole image. (Bands of rows, each taking the input rows the one before it
  // wrote over from its scratch, are for planes the executor keeps planar: the kernel test
  // above covers them.)
  for (const Case c : {Case{16, 96, 14, 14}, Case{32, 192, 28, 28}}) {
    const auto model = parseModelText(blockModel(c.C, c.E, c.H, c.W, 3, 1, "Clip"), "<block>");
    declareFloatShapes(*model, inner(c.E, c.H, c.W, c.H, c.W));
    const std::vector<NamedTensor> inputs = makeRandomInputs(*model->graph, 5);
    auto run = [&](bool donate, int threads, std::vector<float>& y) {
      ExecutorOptions options;
      options.num_threads = threads;
      options.donate_inputs = donate;
      Executor ex(*model, options);
      REQUIRE(ex.channelsLastValues().size() == 2);  // e and d
      ExecutionStats stats;
      const HostTensor out = ex.run(inputs, &stats).at(0).tensor;
      y.assign(out.data<float>(), out.data<float>() + out.numel());
      return stats.peak_activation_bytes;
    };
    const uint64_t inner_bytes = static_cast<uint64_t>(c.E * c.H * c.W) * sizeof(float);
    const uint64_t out_bytes = static_cast<uint64_t>(c.C * c.H * c.W) * sizeof(float);
    for (const int threads : {1, 2}) {
      INFO(c.E << " channels on " << c.H << "x" << c.W << ", " << threads << " threads");
      std::vector<float> own, over;
      const uint64_t own_peak = run(false, threads, own);
      const uint64_t over_peak = run(true, threads, over);
      CHECK(over == own);
      // With buffers of their own, e and d are live side by side at the depthwise step. Over
      // its input (one thread), d takes e's buffer, and the peak is d and Y at the projection.
      // Two threads split the depthwise rows, and each would read rows the other overwrote.
      CHECK(own_peak == 2 * inner_bytes);
      CHECK(over_peak == (threads == 1 ? inner_bytes + out_bytes : own_peak));
    }
  }
}

TEST_CASE("A channels-last tensor refuses to be reshaped or copied out as a graph tensor",
          "[kernels][channels_last]") {
  HostTensor t(DType::Float, {1, 2, 3, 3});
  t.setChannelsLast(true);
  REQUIRE_THROWS_AS(t.reshaped({1, 18}), Error);
  REQUIRE_THROWS_AS(t.toTensor(), Error);
  t.setChannelsLast(false);
  REQUIRE(t.reshaped({1, 18}).numel() == 18);
}

// ---- the depthwise channel blocks on either layout ----

namespace {

struct DepthwiseCase {
  int64_t C, H, W, k, s, pad_top, pad_left, pad_bottom, pad_right;
};

Window windowOf(const DepthwiseCase& c) {
  Window w;
  w.in = {c.H, c.W};
  w.kernel = {c.k, c.k};
  w.strides = {c.s, c.s};
  w.dilations = {1, 1};
  w.pad_begin = {c.pad_top, c.pad_left};
  w.pad_end = {c.pad_bottom, c.pad_right};
  w.out = {(c.H + c.pad_top + c.pad_bottom - c.k) / c.s + 1,
           (c.W + c.pad_left + c.pad_right - c.k) / c.s + 1};
  return w;
}

double activate(Activation act, double v, float alpha, float beta) {
  switch (act) {
    case Activation::Clip: return std::min<double>(std::max<double>(v, alpha), beta);
    case Activation::Silu: return v / (1 + std::exp(-v));
    case Activation::LeakyRelu: return v < 0 ? alpha * v : v;
    default: return v;
  }
}

}  // namespace

TEST_CASE("Depthwise channel blocks read and write either layout like the definition",
          "[kernels][channels_last][depthwise]") {
  const std::vector<DepthwiseCase> cases = {
      {16, 7, 7, 3, 1, 1, 1, 1, 1},      // one block
      {33, 14, 13, 3, 1, 0, 1, 2, 1},    // three blocks, the last of one; uneven pads
      {40, 9, 9, 5, 2, 2, 2, 2, 2},      // 5x5 stride 2
      {1152, 7, 7, 5, 1, 2, 2, 2, 2},    // many channels on a small plane: blocks in groups
      {24, 60, 70, 3, 2, 1, 1, 1, 1},    // a large plane: bands of every block
      {20, 61, 33, 5, 1, 2, 2, 2, 2},    // bands with 5x5
      {17, 5, 6, 3, 2, 1, 0, 0, 1},      // an input column no output reaches
      {48, 40, 44, 3, 1, 1, 1, 1, 1},    // bands of every block at stride 1 (in place below)
  };
  const Activation acts[] = {Activation::Clip, Activation::Silu, Activation::LeakyRelu};
  int id = 0;
  for (const DepthwiseCase& c : cases) {
    ++id;
    const Window win = windowOf(c);
    const int64_t in_pixels = c.H * c.W, OH = win.out[0], OW = win.out[1], P = OH * OW;
    const std::vector<float> x = randomFloats(static_cast<size_t>(c.C * in_pixels), 10 + id);
    const std::vector<float> w = randomFloats(static_cast<size_t>(c.C * c.k * c.k), 20 + id);
    const std::vector<float> bias = randomFloats(static_cast<size_t>(c.C), 30 + id);
    const std::vector<float> residual = randomFloats(static_cast<size_t>(c.C * P), 40 + id);
    const std::vector<float> x_cl = toChannelsLast(x, c.C, in_pixels);
    for (const Activation act : acts) {
      Epilogue ep;
      ep.bias = bias.data();
      const float params[] = {-0.5f, 0.75f};
      const size_t num_params = act == Activation::Clip ? 2 : act == Activation::LeakyRelu ? 1 : 0;
      ep.setActivation(act, params, num_params);
      for (const bool x_nhwc : {false, true}) {
        for (const bool y_nhwc : {false, true}) {
          if (!x_nhwc && !y_nhwc) continue;
          // A residual only with a planar output (the contract).
          const float* z = y_nhwc ? nullptr : residual.data();
          std::vector<float> y(static_cast<size_t>(c.C * P), std::nanf(""));
          // Rows in two calls, as two threads split them.
          const int64_t split = OH / 3;
          depthwiseChannelsLast(x_nhwc ? x_cl.data() : x.data(), x_nhwc, w.data(), y.data(),
                                y_nhwc, win, ep, c.C, z, 0, split);
          depthwiseChannelsLast(x_nhwc ? x_cl.data() : x.data(), x_nhwc, w.data(), y.data(),
                                y_nhwc, win, ep, c.C, z, split, OH);
          // Channels-last both sides, where the kernel may write over its input: y starts as
          // a copy of x, and one call covers every row (depthwiseChannelsLastInPlace).
          const bool in_place = x_nhwc && y_nhwc && depthwiseChannelsLastInPlace(win);
          if (in_place) {
            y = x_cl;
            depthwiseChannelsLast(y.data(), true, w.data(), y.data(), true, win, ep, c.C, nullptr,
                                  0, OH);
          }
          for (int64_t ch = 0; ch < c.C; ++ch) {
            for (int64_t oh = 0; oh < OH; ++oh) {
              for (int64_t ow = 0; ow < OW; ++ow) {
                double sum = 0;
                for (int64_t kh = 0; kh < c.k; ++kh) {
                  for (int64_t kw = 0; kw < c.k; ++kw) {
                    const int64_t ih = oh * c.s - c.pad_top + kh, iw = ow * c.s - c.pad_left + kw;
                    if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                    sum += double(w[(ch * c.k + kh) * c.k + kw]) * x[(ch * c.H + ih) * c.W + iw];
                  }
                }
                const int64_t p = oh * OW + ow;
                sum += bias[ch];
                if (z) sum += z[ch * P + p];
                const double want = activate(act, sum, ep.alpha, ep.beta);
                const float got = y_nhwc ? y[p * c.C + ch] : y[ch * P + p];
                if (!(std::abs(got - want) <= 1e-5 + 1e-5 * std::abs(want))) {
                  INFO("case " << id << " x_nhwc " << x_nhwc << " y_nhwc " << y_nhwc
                               << " in place " << in_place
                               << " activation " << int(act) << " channel " << ch << " pixel ("
                               << oh << ", " << ow << "): got " << got << ", want " << want);
                  REQUIRE(std::abs(got - want) <= 1e-5 + 1e-5 * std::abs(want));
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---- the GEMM paths a channels-last input takes ----

TEST_CASE("GEMM with a transposed B, and with A read in place, matches a double reference",
          "[kernels][channels_last][gemm]") {
  std::vector<std::string> isas;
  for (const char* n : {"avx512", "avx2", "portable"})
    if (gemmForceKernel(n)) isas.push_back(n);
  struct Shape3 {
    int64_t M, N, K;
  };
  // N over whole 32-wide panels and ragged; K a multiple of 16, not one, and over KC (512).
  // N = 1, under and over 16 row tiles: matrix-vector products, B one column of exactly K
  // floats, so that a read past it shows under AddressSanitizer.
  const Shape3 shapes[] = {{13, 24, 40}, {49, 96, 144}, {8, 16, 5}, {30, 128, 600},
                           {17, 200, 33}, {64, 64, 16}, {40, 1, 37}, {300, 1, 70}};
  int id = 0;
  for (const Shape3& s : shapes) {
    ++id;
    const std::vector<float> a = randomFloats(static_cast<size_t>(s.M * s.K), 50 + id);
    const std::vector<float> bt = randomFloats(static_cast<size_t>(s.N * s.K), 60 + id);  // N x K
    const std::vector<float> bias = randomFloats(static_cast<size_t>(s.N), 70 + id);
    std::vector<double> want(static_cast<size_t>(s.M * s.N));
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        double acc = bias[j];
        for (int64_t k = 0; k < s.K; ++k) acc += double(a[i * s.K + k]) * bt[j * s.K + k];
        want[i * s.N + j] = std::max(acc, 0.0);
      }
    Epilogue ep;
    ep.bias = bias.data();
    ep.setActivation(Activation::Relu, nullptr, 0);
    for (const std::string& isa : isas) {
      REQUIRE(gemmForceKernel(isa.c_str()));
      for (const bool in_place : {false, true}) {
        for (const int threads : {1, 2}) {
          INFO("shape " << id << " kernel " << isa << " A in place " << in_place << " threads "
                        << threads);
          std::vector<float> c(static_cast<size_t>(s.M * s.N), std::nanf(""));
          GemmParams p = gemmParams(s.M, s.N, s.K, a.data(), s.K, false, bt.data(), s.K, true,
                                    c.data(), s.N);
          p.epilogue = &ep;
          p.a_in_place = in_place;
          gemm(p, threads);
          for (size_t i = 0; i < c.size(); ++i) {
            if (!(std::abs(c[i] - want[i]) <= 1e-4 + 1e-5 * std::abs(want[i]))) {
              INFO("element " << i << ": got " << c[i] << ", want " << want[i]);
              REQUIRE(std::abs(c[i] - want[i]) <= 1e-4 + 1e-5 * std::abs(want[i]));
            }
          }
        }
      }
    }
  }
  gemmForceKernel("auto");
}
