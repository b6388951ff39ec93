// Writes full-size models for the GPU check (scripts/gpu-check.sh), built in code over libgraph
// so that no Python or PyTorch is needed on the machine that runs it:
//
//   gen_gpu_models --model resnet50|bert_base --out FILE.onnx [--batch N] [--seq S]
//                  [--dtype float|float16] [--seed S]
//
// resnet50: torchvision's ResNet-50 at opset 13, each Conv followed by its BatchNormalization
// (as an export in eval mode writes it before any folding), so that fusectl -O3 has the BN
// folds and Conv epilogue fusions to do. Input "input" [batch,3,224,224], output "logits"
// [batch,1000].
//
// bert_base: a BERT-base-sized encoder (12 layers, hidden 768, 12 heads, FFN 3072) spelled as a
// PyTorch opset-13 export spells it (the same op chains as testdata/models/bert_layer.onnx):
// MatMul + Add(bias) projections, Reshape/Transpose heads, Div by sqrt(64), additive mask,
// Softmax, LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add and GELU as
// Div/Erf/Add/Mul/Mul. Inputs "hidden" [batch,seq,768] and "mask" [batch,1,1,seq] (additive,
// float; 0 keeps a position), output "last_hidden" [batch,seq,768]. Shapes are static: the
// Reshape targets are int64 initializers holding the given batch and seq.
//
// Weights are random from a seeded PCG32 (the same seed gives the same file): ResNet's convs
// He-scaled (std sqrt(2 / fan_in)), BN statistics near the identity (mean ~0, var ~1, scale ~1,
// bias ~0) except the last BN of each residual branch, whose scale is ~0.2 so that the sum of
// 16 residual blocks stays O(1); BERT's weights N(0, 0.02), LayerNorm gammas 1 and betas 0.
// --dtype float16 makes every float tensor (inputs, weights, constants, outputs) float16,
// rounded to nearest even. Exit status: 0 written, 1 failed, 2 usage.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/half.h"

namespace {

using fusectl::Attribute;
using fusectl::DType;
using fusectl::Graph;
using fusectl::Model;
using fusectl::Node;
using fusectl::Shape;
using fusectl::Tensor;
using fusectl::Value;
using fusectl::ValueType;

// float16 weights are rounded by libkernels' header-only converter (half.h).
using fusectl::kernels::floatToHalf;

// ---- deterministic random numbers ------------------------------------------------------------

// PCG32 (XSH-RR, O'Neill): a fixed algorithm, so a seed gives the same weights everywhere.
class Pcg32 {
 public:
  explicit Pcg32(uint64_t seed) {
    inc_ = (0xda3e39cb94b95bdbULL << 1u) | 1u;
    next();
    state_ += seed;
    next();
  }
  uint32_t next() {
    const uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    const auto xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    const auto rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
  }
  // Uniform in (0, 1): never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next()) + 0.5) * (1.0 / 4294967296.0); }
  // Standard normal (Box-Muller; the second value of each pair is kept for the next call).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double t = 6.283185307179586 * uniform();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  uint64_t state_ = 0;
  uint64_t inc_ = 0;
  double spare_ = 0;
  bool has_spare_ = false;
};

// ---- graph building --------------------------------------------------------------------------

struct Options {
  std::string model;
  std::string out;
  int64_t batch = 1;
  int64_t seq = 128;
  DType dtype = DType::Float;
  uint64_t seed = 1;
};

class Builder {
 public:
  Builder(Graph& g, DType dtype, uint64_t seed) : g_(g), dtype_(dtype), rng_(seed) {}

  DType dtype() const { return dtype_; }
  Pcg32& rng() { return rng_; }

  // A float tensor of the model's dtype from float32 values.
  Tensor floatTensor(std::vector<int64_t> dims, const std::vector<float>& values) const {
    if (dtype_ == DType::Float) return Tensor::fromValues<float>(DType::Float, std::move(dims), values);
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = floatToHalf(values[i]);
    return Tensor::fromValues<uint16_t>(DType::Float16, std::move(dims), half);
  }

  Value* weight(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& values) {
    return g_.addInitializer(name, floatTensor(std::move(dims), values));
  }
  // N(mean, std) values.
  std::vector<float> normals(int64_t count, double mean, double std) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = static_cast<float>(mean + std * rng_.normal());
    return v;
  }
  Value* normalWeight(const std::string& name, std::vector<int64_t> dims, double mean, double std) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    return weight(name, std::move(dims), normals(count, mean, std));
  }
  Value* filled(const std::string& name, std::vector<int64_t> dims, float value) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    return weight(name, std::move(dims), std::vector<float>(static_cast<size_t>(count), value));
  }
  Value* int64s(const std::string& name, const std::vector<int64_t>& values) {
    return g_.addInitializer(name, Tensor::fromValues<int64_t>(DType::Int64,
                                                               {static_cast<int64_t>(values.size())}, values));
  }

  // One node named `name`, its single output "<name>_output_0" (PyTorch's naming).
  Value* node(const std::string& op, const std::string& name, std::vector<Value*> inputs,
              std::vector<Attribute> attrs = {}) {
    Node* n = g_.createNode({op, "", std::move(inputs), {name + "_output_0"}, name, std::move(attrs)});
    return n->output(0);
  }
  // A scalar float Constant node, as an export writes `x / 8.0` or `x + 1e-12`.
  Value* scalar(const std::string& name, float value) {
    return node("Constant", name, {}, {Attribute::ofTensor("value", floatTensor({}, {value}))});
  }

  ValueType floatType(const std::vector<int64_t>& dims) const {
    ValueType t;
    t.dtype = dtype_;
    t.shape = Shape::ofStatic(dims);
    return t;
  }

 private:
  Graph& g_;
  DType dtype_;
  Pcg32 rng_;
};

// ---- ResNet-50 -------------------------------------------------------------------------------

// Conv (no bias, as torchvision's convs before a BN) + BatchNormalization. `bn_scale` is the
// mean of the BN's gamma.
Value* convBn(Builder& b, const std::string& prefix, const std::string& conv_name,
              const std::string& bn_name, Value* x, int64_t in_ch, int64_t out_ch, int64_t k,
              int64_t stride, int64_t pad, float bn_scale = 1.0f) {
  const int64_t fan_in = in_ch * k * k;
  Value* w = b.normalWeight(prefix + "." + conv_name + ".weight", {out_ch, in_ch, k, k}, 0.0,
                            std::sqrt(2.0 / static_cast<double>(fan_in)));
  Value* y = b.node("Conv", "/" + prefix + "/" + conv_name + "/Conv", {x, w},
                    {Attribute::ofInts("dilations", {1, 1}), Attribute::ofInt("group", 1),
                     Attribute::ofInts("kernel_shape", {k, k}),
                     Attribute::ofInts("pads", {pad, pad, pad, pad}),
                     Attribute::ofInts("strides", {stride, stride})});
  const std::string p = prefix + "." + bn_name;
  std::vector<float> gamma = b.normals(out_ch, 1.0, 0.05);
  for (float& v : gamma) v *= bn_scale;
  std::vector<float> var(static_cast<size_t>(out_ch));
  for (float& v : var) v = static_cast<float>(0.75 + 0.5 * b.rng().uniform());  // in (0.75, 1.25)
  Value* scale = b.weight(p + ".weight", {out_ch}, gamma);
  Value* bias = b.normalWeight(p + ".bias", {out_ch}, 0.0, 0.02);
  Value* mean = b.normalWeight(p + ".running_mean", {out_ch}, 0.0, 0.02);
  Value* variance = b.weight(p + ".running_var", {out_ch}, var);
  return b.node("BatchNormalization", "/" + prefix + "/" + bn_name + "/BatchNormalization",
                {y, scale, bias, mean, variance},
                {Attribute::ofFloat("epsilon", 1e-5f), Attribute::ofFloat("momentum", 0.9f)});
}

Value* bottleneck(Builder& b, const std::string& prefix, Value* x, int64_t in_ch, int64_t width,
                  int64_t stride, bool project) {
  const int64_t out_ch = width * 4;
  Value* y = convBn(b, prefix, "conv1", "bn1", x, in_ch, width, 1, 1, 0);
  y = b.node("Relu", "/" + prefix + "/relu/Relu", {y});
  y = convBn(b, prefix, "conv2", "bn2", y, width, width, 3, stride, 1);
  y = b.node("Relu", "/" + prefix + "/relu_1/Relu", {y});
  // The branch's last BN starts small (torchvision's zero_init_residual, softened) so that the
  // residual sum stays O(1) through 16 blocks of random weights.
  y = convBn(b, prefix, "conv3", "bn3", y, width, out_ch, 1, 1, 0, 0.2f);
  Value* shortcut = x;
  if (project)
    shortcut = convBn(b, prefix + ".downsample", "0", "1", x, in_ch, out_ch, 1, stride, 0);
  Value* sum = b.node("Add", "/" + prefix + "/Add", {y, shortcut});
  return b.node("Relu", "/" + prefix + "/relu_2/Relu", {sum});
}

void buildResNet50(Model& m, const Options& o) {
  Graph& g = *m.graph;
  g.name = "resnet50";
  Builder b(g, o.dtype, o.seed);
  Value* x = g.addInput("input", b.floatType({o.batch, 3, 224, 224}));
  Value* y = convBn(b, "stem", "conv1", "bn1", x, 3, 64, 7, 2, 3);
  y = b.node("Relu", "/relu/Relu", {y});
  y = b.node("MaxPool", "/maxpool/MaxPool", {y},
             {Attribute::ofInt("ceil_mode", 0), Attribute::ofInts("kernel_shape", {3, 3}),
              Attribute::ofInts("pads", {1, 1, 1, 1}), Attribute::ofInts("strides", {2, 2})});
  const int blocks[4] = {3, 4, 6, 3};
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t ch = 64;
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < blocks[s]; ++i) {
      const std::string prefix = "layer" + std::to_string(s + 1) + "." + std::to_string(i);
      const int64_t stride = (i == 0 && s > 0) ? 2 : 1;
      y = bottleneck(b, prefix, y, ch, widths[s], stride, i == 0);
      ch = widths[s] * 4;
    }
  }
  y = b.node("GlobalAveragePool", "/avgpool/GlobalAveragePool", {y});
  y = b.node("Flatten", "/Flatten", {y}, {Attribute::ofInt("axis", 1)});
  Value* fc_w = b.normalWeight("fc.weight", {1000, ch}, 0.0, 1.0 / std::sqrt(static_cast<double>(ch)));
  Value* fc_b = b.normalWeight("fc.bias", {1000}, 0.0, 0.01);
  Node* fc = g.createNode({"Gemm", "", {y, fc_w, fc_b}, {"logits"}, "/fc/Gemm",
                           {Attribute::ofFloat("alpha", 1.0f), Attribute::ofFloat("beta", 1.0f),
                            Attribute::ofInt("transB", 1)}});
  fc->output(0)->type = b.floatType({o.batch, 1000});
  g.addOutput(fc->output(0));
}

// ---- BERT-base encoder -----------------------------------------------------------------------

constexpr int64_t kHidden = 768;
constexpr int64_t kHeads = 12;
constexpr int64_t kHeadDim = 64;
constexpr int64_t kFfn = 3072;
constexpr int kLayers = 12;
constexpr double kWeightStd = 0.02;

// MatMul(x, W[in,out]) + Add(bias, .) with the bias first, as torch.nn.Linear exports.
Value* linear(Builder& b, const std::string& prefix, Value* x, int64_t in, int64_t out) {
  Value* w = b.normalWeight("onnx::MatMul_" + prefix, {in, out}, 0.0, kWeightStd);
  Value* bias = b.normalWeight(prefix + ".bias", {out}, 0.0, kWeightStd);
  Value* y = b.node("MatMul", "/" + prefix + "/MatMul", {x, w});
  return b.node("Add", "/" + prefix + "/Add", {bias, y});
}

// LayerNorm over the last axis, the arithmetic of an exported hand-written LayerNorm.
Value* layerNorm(Builder& b, const std::string& prefix, Value* x) {
  const std::string p = "/" + prefix + "/";
  Value* gamma = b.filled(prefix + ".weight", {kHidden}, 1.0f);
  Value* beta = b.filled(prefix + ".bias", {kHidden}, 0.0f);
  Value* mean = b.node("ReduceMean", p + "ReduceMean", {x}, {Attribute::ofInts("axes", {-1})});
  Value* diff = b.node("Sub", p + "Sub", {x, mean});
  Value* two = b.scalar(p + "Constant", 2.0f);
  Value* sq = b.node("Pow", p + "Pow", {diff, two});
  Value* var = b.node("ReduceMean", p + "ReduceMean_1", {sq}, {Attribute::ofInts("axes", {-1})});
  Value* eps = b.scalar(p + "Constant_1", 1e-12f);
  Value* ve = b.node("Add", p + "Add", {var, eps});
  Value* sd = b.node("Sqrt", p + "Sqrt", {ve});
  Value* norm = b.node("Div", p + "Div", {diff, sd});
  Value* scaled = b.node("Mul", p + "Mul", {norm, gamma});
  return b.node("Add", p + "Add_1", {scaled, beta});
}

// GELU(x) = x * 0.5 * (1 + erf(x / sqrt(2))), as exported from the erf formula.
Value* gelu(Builder& b, const std::string& prefix, Value* x) {
  const std::string p = "/" + prefix + "/";
  Value* s2 = b.scalar(p + "Constant", 1.4142135f);
  Value* d = b.node("Div", p + "Div", {x, s2});
  Value* e = b.node("Erf", p + "Erf", {d});
  Value* one = b.scalar(p + "Constant_1", 1.0f);
  Value* e1 = b.node("Add", p + "Add", {e, one});
  Value* xm = b.node("Mul", p + "Mul", {x, e1});
  Value* half = b.scalar(p + "Constant_2", 0.5f);
  return b.node("Mul", p + "Mul_1", {xm, half});
}

Value* encoderLayer(Builder& b, int layer, Value* x, Value* mask, Value* heads_shape,
                    Value* hidden_shape) {
  const std::string L = "encoder.layer." + std::to_string(layer);
  const std::string p = "/" + L + "/attention/self/";
  auto headsOf = [&](Value* v, const std::string& which, std::vector<int64_t> perm) {
    Value* r = b.node("Reshape", p + which + "/Reshape", {v, heads_shape});
    return b.node("Transpose", p + which + "/Transpose", {r}, {Attribute::ofInts("perm", perm)});
  };
  Value* q = headsOf(linear(b, L + ".attention.self.query", x, kHidden, kHidden), "query", {0, 2, 1, 3});
  Value* k = headsOf(linear(b, L + ".attention.self.key", x, kHidden, kHidden), "key", {0, 2, 3, 1});
  Value* v = headsOf(linear(b, L + ".attention.self.value", x, kHidden, kHidden), "value", {0, 2, 1, 3});
  Value* scores = b.node("MatMul", p + "MatMul", {q, k});
  Value* scale = b.scalar(p + "Constant", std::sqrt(static_cast<float>(kHeadDim)));
  scores = b.node("Div", p + "Div", {scores, scale});
  scores = b.node("Add", p + "Add", {scores, mask});
  Value* probs = b.node("Softmax", p + "Softmax", {scores}, {Attribute::ofInt("axis", -1)});
  Value* ctx = b.node("MatMul", p + "MatMul_1", {probs, v});
  ctx = b.node("Transpose", p + "Transpose", {ctx}, {Attribute::ofInts("perm", {0, 2, 1, 3})});
  ctx = b.node("Reshape", p + "Reshape", {ctx, hidden_shape});

  Value* attn = linear(b, L + ".attention.output.dense", ctx, kHidden, kHidden);
  Value* res1 = b.node("Add", "/" + L + "/attention/output/Add", {attn, x});
  Value* h1 = layerNorm(b, L + ".attention.output.LayerNorm", res1);

  Value* up = linear(b, L + ".intermediate.dense", h1, kHidden, kFfn);
  Value* act = gelu(b, L + ".intermediate.intermediate_act_fn", up);
  Value* down = linear(b, L + ".output.dense", act, kFfn, kHidden);
  Value* res2 = b.node("Add", "/" + L + "/output/Add", {down, h1});
  return layerNorm(b, L + ".output.LayerNorm", res2);
}

void buildBertBase(Model& m, const Options& o) {
  Graph& g = *m.graph;
  g.name = "bert_base";
  Builder b(g, o.dtype, o.seed);
  Value* x = g.addInput("hidden", b.floatType({o.batch, o.seq, kHidden}));
  Value* mask = g.addInput("mask", b.floatType({o.batch, 1, 1, o.seq}));
  Value* heads_shape = b.int64s("heads_shape", {o.batch, o.seq, kHeads, kHeadDim});
  Value* hidden_shape = b.int64s("hidden_shape", {o.batch, o.seq, kHidden});
  for (int l = 0; l < kLayers; ++l) x = encoderLayer(b, l, x, mask, heads_shape, hidden_shape);
  // The last LayerNorm's output becomes the graph output, named as the brief names it.
  g.renameValue(x, "last_hidden");
  x->type = b.floatType({o.batch, o.seq, kHidden});
  g.addOutput(x);
}

// ---- command line ----------------------------------------------------------------------------

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "gen_gpu_models: %s\n", problem.c_str());
  std::fprintf(stderr,
               "usage: gen_gpu_models --model resnet50|bert_base --out FILE.onnx [--batch N] "
               "[--seq S] [--dtype float|float16] [--seed S]\n");
  std::exit(2);
}

int64_t positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v <= 0 || v > (1LL << 20))
    usage(flag + " wants a positive integer (at most 2^20), not '" + text + "'");
  return v;
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fprintf(stdout,
                   "usage: gen_gpu_models --model resnet50|bert_base --out FILE.onnx [--batch N] "
                   "[--seq S] [--dtype float|float16] [--seed S]\n"
                   "  resnet50: input [N,3,224,224] -> logits [N,1000]; opset 13, Conv+BN kept\n"
                   "  bert_base: hidden [N,S,768], mask [N,1,1,S] -> last_hidden [N,S,768]; 12 "
                   "layers, opset 13\n"
                   "  defaults: --batch 1 --seq 128 --dtype float --seed 1\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--out" || a == "-o") {
      o.out = v;
    } else if (a == "--batch") {
      o.batch = positive(a, v);
    } else if (a == "--seq") {
      o.seq = positive(a, v);
    } else if (a == "--dtype") {
      if (v == "float" || v == "float32") o.dtype = DType::Float;
      else if (v == "float16" || v == "fp16") o.dtype = DType::Float16;
      else usage("--dtype wants float or float16, not '" + v + "'");
    } else if (a == "--seed") {
      char* end = nullptr;
      o.seed = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') usage("--seed wants an unsigned integer, not '" + v + "'");
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (o.model != "resnet50" && o.model != "bert_base")
    usage(o.model.empty() ? "--model is required" : "unknown --model '" + o.model + "'");
  if (o.out.empty()) usage("--out is required");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parseArgs(argc, argv);
  try {
    Model m;
    m.ir_version = 8;
    m.producer_name = "fusectl gen_gpu_models";
    m.setOpsetVersion("", 13);
    if (o.model == "resnet50") buildResNet50(m, o);
    else buildBertBase(m, o);
    m.graph->verifyOrThrow();
    const std::string external = fusectl::saveModel(m, o.out);
    size_t params = 0;
    for (const Value* v : m.graph->initializers()) params += static_cast<size_t>(v->initializer()->numel());
    std::printf("gen_gpu_models: wrote %s (%s, %s, batch %lld%s, %zu nodes, %zu parameters%s%s)\n",
                o.out.c_str(), o.model.c_str(), o.dtype == DType::Float ? "float" : "float16",
                static_cast<long long>(o.batch),
                o.model == "bert_base" ? (", seq " + std::to_string(o.seq)).c_str() : "",
                m.graph->numNodes(), params, external.empty() ? "" : ", weights in ",
                external.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gen_gpu_models: error: %s\n", e.what());
    return 1;
  }
}
