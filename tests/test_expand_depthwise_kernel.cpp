// The CPU kernel of fusectl::ExpandDepthwiseConv (libkernels/cpu/conv_expand_depthwise.cpp): one
// node run through the executor against a double-precision expansion and depthwise convolution
// written here, over shapes that take the band schedule and shapes that take the whole-image
// fallback (a horizontal stride of 3, pads a whole kernel tall); thread counts that must agree
// to the bit; and the shape errors a malformed node gets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"
#include "random_values.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

struct Activated {
  std::string name;  // "" for none
  std::vector<float> params;
};

struct Case {
  int64_t N = 1, C = 3, E = 8, H = 7, W = 7;
  int64_t kh = 3, kw = 3;
  int64_t sh = 1, sw = 1;
  std::vector<int64_t> pads = {1, 1, 1, 1};  // top, left, bottom, right
  Activated expand, depthwise;
  bool constant_filters = true;  // W as an initializer (packed once) or as a graph input

  int64_t outH() const { return (H + pads[0] + pads[2] - kh) / sh + 1; }
  int64_t outW() const { return (W + pads[1] + pads[3] - kw) / sw + 1; }
  std::string describe() const {
    std::ostringstream s;
    s << "N=" << N << " C=" << C << " E=" << E << " " << H << "x" << W << " kernel " << kh << "x"
      << kw << " strides " << sh << "," << sw << " pads " << pads[0] << "," << pads[1] << ","
      << pads[2] << "," << pads[3] << " expand '" << expand.name << "' depthwise '"
      << depthwise.name << "'" << (constant_filters ? "" : " W as input");
    return s.str();
  }
};

struct Operands {
  std::vector<float> x, w, b, dw, db;
};

Operands operandsFor(const Case& c, uint32_t seed) {
  Operands o;
  o.x = randomFloats(static_cast<size_t>(c.N * c.C * c.H * c.W), seed, -2.f, 2.f);
  o.w = randomFloats(static_cast<size_t>(c.E * c.C), seed + 1);
  o.b = randomFloats(static_cast<size_t>(c.E), seed + 2);
  o.dw = randomFloats(static_cast<size_t>(c.E * c.kh * c.kw), seed + 3);
  o.db = randomFloats(static_cast<size_t>(c.E), seed + 4);
  return o;
}

double activate(const Activated& a, double v) {
  if (a.name.empty() || a.name == "None") return v;
  if (a.name == "Relu") return std::max(0.0, v);
  if (a.name == "Clip") return std::min<double>(a.params[1], std::max<double>(a.params[0], v));
  if (a.name == "Silu") return v / (1 + std::exp(-v));
  if (a.name == "HardSwish") return v * std::min(1.0, std::max(0.0, v / 6 + 0.5));
  FAIL("no reference for activation " << a.name);
  return v;
}

// Y in double: the 1x1 expansion with its activation, then the depthwise convolution with its.
std::vector<double> reference(const Case& c, const Operands& o) {
  const int64_t P = c.H * c.W, OH = c.outH(), OW = c.outW();
  std::vector<double> y(static_cast<size_t>(c.N * c.E * OH * OW));
  std::vector<double> e(static_cast<size_t>(P));
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t ch = 0; ch < c.E; ++ch) {
      for (int64_t p = 0; p < P; ++p) {
        double acc = o.b[ch];
        for (int64_t k = 0; k < c.C; ++k) acc += double(o.w[ch * c.C + k]) * o.x[(n * c.C + k) * P + p];
        e[p] = activate(c.expand, acc);
      }
      for (int64_t oy = 0; oy < OH; ++oy) {
        for (int64_t ox = 0; ox < OW; ++ox) {
          double acc = o.db[ch];
          for (int64_t ky = 0; ky < c.kh; ++ky) {
            for (int64_t kx = 0; kx < c.kw; ++kx) {
              const int64_t iy = oy * c.sh - c.pads[0] + ky, ix = ox * c.sw - c.pads[1] + kx;
              if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
              acc += double(o.dw[(ch * c.kh + ky) * c.kw + kx]) * e[iy * c.W + ix];
            }
          }
          y[((n * c.E + ch) * OH + oy) * OW + ox] = activate(c.depthwise, acc);
        }
      }
    }
  }
  return y;
}

std::vector<Attribute> activationAttrs(const Activated& a, const std::string& attr,
                                       const std::string& params_attr) {
  std::vector<Attribute> attrs;
  if (a.name.empty()) return attrs;
  attrs.push_back(Attribute::ofString(attr, a.name));
  if (!a.params.empty()) attrs.push_back(Attribute::ofFloats(params_attr, a.params));
  return attrs;
}

// A model of the one fusectl node. `w_dims` overrides W's dims (for the shape errors).
std::unique_ptr<Model> modelFor(const Case& c, const Operands& o,
                                std::vector<int64_t> w_dims = {}) {
  if (w_dims.empty()) w_dims = {c.E, c.C, 1, 1};
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  m->setOpsetVersion("fusectl", 1);
  Graph& g = *m->graph;
  ValueType x_type;
  x_type.dtype = DType::Float;
  x_type.shape = Shape::ofStatic({c.N, c.C, c.H, c.W});
  Value* x = g.addInput("X", x_type);
  Value* w = nullptr;
  if (c.constant_filters) {
    w = g.addInitializer("W", Tensor::fromValues<float>(DType::Float, w_dims, o.w));
  } else {
    ValueType w_type;
    w_type.dtype = DType::Float;
    w_type.shape = Shape::ofStatic(w_dims);
    w = g.addInput("W", w_type);
  }
  Value* b = g.addInitializer("B", Tensor::fromValues<float>(DType::Float, {c.E}, o.b));
  Value* dw =
      g.addInitializer("DW", Tensor::fromValues<float>(DType::Float, {c.E, 1, c.kh, c.kw}, o.dw));
  Value* db = g.addInitializer("DB", Tensor::fromValues<float>(DType::Float, {c.E}, o.db));
  std::vector<Attribute> attrs = {Attribute::ofInts("kernel_shape", {c.kh, c.kw}),
                                  Attribute::ofInts("pads", c.pads),
                                  Attribute::ofInts("strides", {c.sh, c.sw}),
                                  Attribute::ofInt("group", c.E)};
  for (Attribute& a : activationAttrs(c.expand, "expand_activation", "expand_activation_params"))
    attrs.push_back(std::move(a));
  for (Attribute& a : activationAttrs(c.depthwise, "activation", "activation_params"))
    attrs.push_back(std::move(a));
  Node* node = g.createNode({"ExpandDepthwiseConv", "fusectl", {x, w, b, dw, db}, {"Y"},
                             "expand_depthwise", std::move(attrs)});
  g.addOutput(node->output(0));
  return m;
}

HostTensor floatTensor(std::vector<int64_t> dims, const std::vector<float>& values) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  std::memcpy(t.mutableRaw(), values.data(), values.size() * sizeof(float));
  return t;
}

std::vector<NamedTensor> inputsFor(const Case& c, const Operands& o) {
  std::vector<NamedTensor> inputs = {{"X", floatTensor({c.N, c.C, c.H, c.W}, o.x)}};
  if (!c.constant_filters) inputs.push_back({"W", floatTensor({c.E, c.C, 1, 1}, o.w)});
  return inputs;
}

// Y from `runs` runs of one executor (later runs use the filters packed by the first), checking
// that every run gives the same bits.
std::vector<float> runNode(const Model& model, const std::vector<NamedTensor>& inputs,
                           int threads, int runs = 1) {
  ExecutorOptions options;
  options.num_threads = threads;
  Executor ex(model, options);
  std::vector<float> first;
  for (int r = 0; r < runs; ++r) {
    const std::vector<NamedTensor> out = ex.run(inputs);
    REQUIRE(out.size() == 1);
    const HostTensor& y = out[0].tensor;
    std::vector<float> values(y.data<float>(), y.data<float>() + y.numel());
    if (r == 0) first = std::move(values);
    else REQUIRE(std::memcmp(first.data(), values.data(), first.size() * sizeof(float)) == 0);
  }
  return first;
}

void checkCase(const Case& c, uint32_t seed) {
  INFO(c.describe());
  const Operands o = operandsFor(c, seed);
  const std::unique_ptr<Model> model = modelFor(c, o);
  const std::vector<NamedTensor> inputs = inputsFor(c, o);
  const std::vector<float> one = runNode(*model, inputs, 1, 2);
  const std::vector<double> want = reference(c, o);
  REQUIRE(one.size() == want.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(one[i] - want[i]) / (1 + std::abs(want[i]));
    if (!(err <= worst)) {
      worst = err;
      worst_at = i;
    }
  }
  INFO("worst element " << worst_at << ": got " << one[worst_at] << ", want " << want[worst_at]);
  CHECK(worst < 1e-4);
  // Threads split (image, band) pairs, or in the fallback the GEMM's columns and the planes:
  // neither changes the order any element is summed in.
  const std::vector<float> two = runNode(*model, inputs, 2);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
}

const Activated kNone{"", {}};
const Activated kRelu{"Relu", {}};
const Activated kClip6{"Clip", {0.f, 6.f}};
const Activated kSilu{"Silu", {}};
const Activated kHardSwish{"HardSwish", {}};

}  // namespace

TEST_CASE("ExpandDepthwiseConv: the blocks of MobileNetV2 and EfficientNet-B0, small",
          "[kernels][conv][expand-depthwise]") {
  Case mobilenet;  // 3x3 stride 2, Clip(0, 6) on both sides, several bands
  mobilenet.C = 16;
  mobilenet.E = 96;
  mobilenet.H = mobilenet.W = 57;
  mobilenet.sh = mobilenet.sw = 2;
  mobilenet.expand = mobilenet.depthwise = kClip6;
  checkCase(mobilenet, 1);

  Case efficientnet;  // 5x5 stride 1, Silu, two images
  efficientnet.N = 2;
  efficientnet.C = 16;
  efficientnet.E = 24;
  efficientnet.H = efficientnet.W = 30;
  efficientnet.kh = efficientnet.kw = 5;
  efficientnet.pads = {2, 2, 2, 2};
  efficientnet.expand = efficientnet.depthwise = kSilu;
  checkCase(efficientnet, 2);

  Case three_bands;  // 17 output rows: 3 bands on one thread, 4 thinner ones on two
  three_bands.C = 16;
  three_bands.E = 24;
  three_bands.H = 17;
  three_bands.W = 57;
  three_bands.expand = kRelu;
  three_bands.depthwise = kClip6;
  checkCase(three_bands, 4);

  Case projection_without_activation = mobilenet;  // "None" spelled out on both sides
  projection_without_activation.expand = projection_without_activation.depthwise = {"None", {}};
  projection_without_activation.H = 17;
  checkCase(projection_without_activation, 3);
}

TEST_CASE("ExpandDepthwiseConv: odd shapes, asymmetric pads, mixed activations",
          "[kernels][conv][expand-depthwise]") {
  const std::vector<int64_t> channels = {3, 16}, expanded = {8, 24, 96};
  const std::vector<int64_t> sizes = {5, 7, 17, 30, 57};
  struct Kernel {
    int64_t kh, kw;
  };
  const std::vector<Kernel> kernels = {{3, 3}, {5, 5}, {3, 1}};
  const std::vector<Activated> activations = {kNone, kRelu, kClip6, kSilu, kHardSwish};
  std::mt19937 gen(2026);
  auto pick = [&](size_t n) { return static_cast<size_t>(gen() % n); };
  for (int i = 0; i < 40; ++i) {
    Case c;
    c.N = i % 4 == 0 ? 2 : 1;
    c.C = channels[pick(channels.size())];
    c.E = expanded[pick(expanded.size())];
    c.H = sizes[pick(sizes.size())];
    c.W = sizes[pick(sizes.size())];
    const Kernel k = kernels[pick(kernels.size())];
    c.kh = k.kh;
    c.kw = k.kw;
    // Strides 1 and 2 take the bands; a horizontal 3 every fifth case takes the fallback.
    c.sh = 1 + static_cast<int64_t>(pick(2));
    c.sw = i % 5 == 4 ? 3 : 1 + static_cast<int64_t>(pick(2));
    // Pads from none to one short of the kernel, each side its own.
    c.pads = {static_cast<int64_t>(pick(static_cast<size_t>(c.kh))),
              static_cast<int64_t>(pick(static_cast<size_t>(c.kw))),
              static_cast<int64_t>(pick(static_cast<size_t>(c.kh))),
              static_cast<int64_t>(pick(static_cast<size_t>(c.kw)))};
    if (c.H + c.pads[0] + c.pads[2] < c.kh || c.W + c.pads[1] + c.pads[3] < c.kw) continue;
    c.expand = activations[pick(activations.size())];
    do {
      c.depthwise = activations[pick(activations.size())];
    } while (c.depthwise.name == c.expand.name);
    c.constant_filters = i % 7 != 3;
    checkCase(c, 100 + static_cast<uint32_t>(i));
  }
}

TEST_CASE("ExpandDepthwiseConv: windows the band schedule leaves to the whole-image path",
          "[kernels][conv][expand-depthwise]") {
  Case c;
  c.C = 16;
  c.E = 24;
  c.H = 30;
  c.W = 17;
  c.expand = kRelu;
  c.depthwise = kHardSwish;
  SECTION("horizontal stride 3") {
    c.sh = 2;
    c.sw = 3;
    checkCase(c, 7);
  }
  SECTION("a pad as tall as the kernel: output rows that read no input row") {
    c.pads = {3, 1, 4, 0};
    checkCase(c, 8);
  }
  SECTION("a 3x1 kernel at stride 3, W fed as an input") {
    c.kw = 1;
    c.pads = {1, 0, 2, 0};
    c.sh = c.sw = 3;
    c.constant_filters = false;
    checkCase(c, 9);
  }
}

TEST_CASE("ExpandDepthwiseConv: a malformed node fails naming what is wrong",
          "[kernels][conv][expand-depthwise]") {
  Case c;
  const Operands o = operandsFor(c, 11);
  const std::vector<NamedTensor> inputs = inputsFor(c, o);
  auto errorOf = [&](const Model& model) -> std::string {
    try {
      runNode(model, inputs, 1);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  SECTION("W over the wrong number of input channels") {
    Operands wider = o;
    wider.w = randomFloats(static_cast<size_t>(c.E * (c.C + 1)), 12);
    const std::string message = errorOf(*modelFor(c, wider, {c.E, c.C + 1, 1, 1}));
    CHECK_THAT(message, Catch::Contains("expand_depthwise") &&
                            Catch::Contains("W must be [E, 3, 1, 1]") &&
                            Catch::Contains("[8,4,1,1]"));
  }
  SECTION("W with a 3x3 window") {
    Operands window = o;
    window.w = randomFloats(static_cast<size_t>(c.E * c.C * 9), 13);
    CHECK_THAT(errorOf(*modelFor(c, window, {c.E, c.C, 3, 3})),
               Catch::Contains("W must be [E, 3, 1, 1]"));
  }
  SECTION("group other than the expanded channels") {
    std::unique_ptr<Model> model = modelFor(c, o);
    Node* node = model->graph->firstNode();
    node->setAttr(Attribute::ofInt("group", 1));
    CHECK_THAT(errorOf(*model), Catch::Contains("group is 1") && Catch::Contains("8 channels"));
  }
  SECTION("an unknown activation") {
    c.depthwise = {"Swoosh", {}};
    CHECK_THAT(errorOf(*modelFor(c, o)), Catch::Contains("unknown activation 'Swoosh'"));
  }
}
