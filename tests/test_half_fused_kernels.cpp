// The fusectl ops' CPU kernels on float16 and bfloat16: each op is a one-node model in ONNX
// textual syntax, run by the executor once with T = float and once with T = float16 (and
// bfloat16) on the same inputs, values that the half type holds exactly. The kernels compute
// half in float32 and round once at the output, so the half output must be the float output
// rounded to half, bit for bit: a kernel that rounded an intermediate (the Sum before the norm,
// the normalised row before the rotation, an Elementwise temp) or computed in half would differ
// somewhere. Then the one-line errors of nodes that mix element types.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/kernel.h"
#include "kernel_case.h"

namespace {

using namespace fusectl;
using namespace fusectl::kernels;

using Dims = std::vector<int64_t>;

struct In {
  std::string name;
  Dims dims;
  float lo = -2.f, hi = 2.f;
  bool constant = false;  // an initializer: the GEMM and Conv pack those once per session
};

struct Out {
  std::string name;
  Dims dims;
};

struct Case {
  std::string name;
  std::vector<In> inputs;
  std::vector<Out> outputs;
  // The node line, e.g. "Y = fusectl.Gelu (X)"; a "$T" in it becomes "_float16" or "_bfloat16"
  // in the half model and nothing in the float one (the spellings of exported half nodes).
  std::string node;
};

// Seeded values in [lo, hi], rounded to `half` so that both models read the same numbers.
std::vector<float> inputValues(const In& in, DType half, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : in.dims) n *= d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(in.lo, in.hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = roundToHalf(half, dist(rng));
  return v;
}

std::string typeText(const std::string& type, const Dims& dims) {
  // A scalar is spelled without brackets: `float[] M` parses as an unknown rank.
  return dims.empty() ? type : fmt::format("{}[{}]", type, fmt::join(dims, ", "));
}

std::string spelled(std::string node, const std::string& suffix) {
  const size_t at = node.find("$T");
  if (at != std::string::npos) node.replace(at, 2, suffix);
  return node;
}

// The case's model with element type `type` ("float", "float16", "bfloat16"). The textual
// syntax has no float16 literal, so initializers are written as float and retyped after parsing.
std::unique_ptr<Model> buildModel(const Case& c, const std::string& type, DType dtype,
                                  const std::vector<std::vector<float>>& values) {
  std::vector<std::string> ins, outs, inits;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    if (in.constant) {
      inits.push_back(fmt::format("{} {} = {{{}}}", typeText("float", in.dims), in.name,
                                  fmt::join(values[i], ", ")));
    } else {
      ins.push_back(typeText(type, in.dims) + " " + in.name);
    }
  }
  for (const Out& o : c.outputs) outs.push_back(typeText(type, o.dims) + " " + o.name);
  const std::string text = fmt::format(
      "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\n"
      "g ({}) => ({}){}\n{{\n  {}\n}}\n",
      fmt::join(ins, ", "), fmt::join(outs, ", "),
      inits.empty() ? "" : fmt::format("\n<\n  {}\n>", fmt::join(inits, ",\n  ")),
      spelled(c.node, dtype == DType::Float ? "" : "_" + type));
  INFO(text);
  std::unique_ptr<Model> model = parseModelText(text, c.name);
  if (dtype != DType::Float) {
    for (Value* v : model->graph->initializers()) {
      const HostTensor t = HostTensor::fromTensor(*v->initializer());
      std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
      for (size_t k = 0; k < bits.size(); ++k) bits[k] = floatToHalfBits(dtype, t.data<float>()[k]);
      v->type.dtype = dtype;
      v->setInitializer(Tensor::fromValues(dtype, t.dims(), bits));
    }
  }
  return model;
}

std::vector<NamedTensor> graphInputs(const Case& c, DType dtype,
                                     const std::vector<std::vector<float>>& values) {
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    if (in.constant) continue;
    HostTensor t(dtype, in.dims);
    for (size_t k = 0; k < values[i].size(); ++k) {
      if (dtype == DType::Float)
        t.mutableData<float>()[k] = values[i][k];
      else
        t.mutableData<uint16_t>()[k] = floatToHalfBits(dtype, values[i][k]);
    }
    out.push_back({in.name, std::move(t)});
  }
  return out;
}

// Two runs of one executor: the second reads constant weights from the panels the first packed
// (a half weight is then not converted again), and must give the same bytes.
std::vector<NamedTensor> run(const Model& model, const std::vector<NamedTensor>& inputs) {
  ExecutorOptions options;
  options.num_threads = 2;
  Executor executor(model, options);
  std::vector<NamedTensor> first = executor.run(inputs);
  const std::vector<NamedTensor> second = executor.run(inputs);
  REQUIRE(second.size() == first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    INFO("second run, output " << first[i].name);
    const HostTensor& a = first[i].tensor;
    const HostTensor& b = second[i].tensor;
    REQUIRE(a.byteSize() == b.byteSize());
    CHECK(std::memcmp(a.raw(), b.raw(), a.byteSize()) == 0);
  }
  return first;
}

// Runs `c` in float32 and in `type`; every output of the half run must be the float run's
// output rounded to the half type.
void checkCase(const Case& c, const std::string& type, DType dtype) {
  INFO(c.name << " in " << type);
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    values.push_back(inputValues(c.inputs[i], dtype, 1000 + 17 * static_cast<uint32_t>(i)));
  const auto float_model = buildModel(c, "float", DType::Float, values);
  const auto half_model = buildModel(c, type, dtype, values);
  const std::vector<NamedTensor> want = run(*float_model, graphInputs(c, DType::Float, values));
  const std::vector<NamedTensor> got = run(*half_model, graphInputs(c, dtype, values));
  REQUIRE(got.size() == c.outputs.size());
  REQUIRE(want.size() == c.outputs.size());
  for (size_t o = 0; o < got.size(); ++o) {
    INFO("output " << got[o].name);
    const HostTensor& w = want[o].tensor;
    const HostTensor& g = got[o].tensor;
    REQUIRE(w.dtype() == DType::Float);
    REQUIRE(g.dtype() == dtype);
    REQUIRE(g.dims() == c.outputs[o].dims);
    REQUIRE(g.dims() == w.dims());
    REQUIRE(g.numel() > 0);
    int64_t differ = 0, first = -1;
    for (int64_t k = 0; k < g.numel(); ++k) {
      if (g.data<uint16_t>()[k] != floatToHalfBits(dtype, w.data<float>()[k])) {
        if (first < 0) first = k;
        ++differ;
      }
    }
    if (differ) {
      const float wf = w.data<float>()[first];
      const uint16_t gb = g.data<uint16_t>()[first];
      INFO(differ << " of " << g.numel() << " elements differ; first at " << first
                  << ": float32 gives " << wf << " (rounded: 0x" << std::hex
                  << floatToHalfBits(dtype, wf) << "), the half node 0x" << gb << std::dec);
      CHECK(differ == 0);
    }
  }
}

void checkBothHalfTypes(const Case& c) {
  checkCase(c, "float16", DType::Float16);
  checkCase(c, "bfloat16", DType::BFloat16);
}

const std::string kNorm = "<axis = -1, epsilon = 0.00001>";

}  // namespace

TEST_CASE("half fused kernels: LayerNorm, RMSNorm, GroupNorm and ChannelLayerNorm", "[kernels][half-fused]") {
  checkBothHalfTypes({"LayerNorm",
                      {{"X", {3, 5, 37}, -3.f, 3.f}, {"S", {37}}, {"B", {37}, -1.f, 1.f}},
                      {{"Y", {3, 5, 37}}},
                      "Y = fusectl.LayerNorm " + kNorm + " (X, S, B)"});
  checkBothHalfTypes({"LayerNorm over two axes",
                      {{"X", {2, 3, 13}}, {"S", {3, 13}}, {"B", {3, 13}}},
                      {{"Y", {2, 3, 13}}},
                      "Y = fusectl.LayerNorm <axis = 1, epsilon = 0.001> (X, S, B)"});
  checkBothHalfTypes({"RMSNorm",
                      {{"X", {4, 67}}, {"S", {67}, 0.5f, 1.5f}},
                      {{"Y", {4, 67}}},
                      "Y = fusectl.RMSNorm " + kNorm + " (X, S)"});
  // The weight-free norm prefold-rms-norm-weight leaves: a Scale of [1], a constant.
  checkBothHalfTypes({"RMSNorm with a unit Scale",
                      {{"X", {4, 67}}, {"S", {1}, 1.f, 1.f, true}},
                      {{"Y", {4, 67}}},
                      "Y = fusectl.RMSNorm " + kNorm + " (X, S)"});
  checkBothHalfTypes({"GroupNorm",
                      {{"X", {2, 6, 5, 7}, -3.f, 3.f}, {"S", {6}}, {"B", {6}, -1.f, 1.f}},
                      {{"Y", {2, 6, 5, 7}}},
                      "Y = fusectl.GroupNorm <num_groups = 3, epsilon = 0.00001> (X, S, B)"});
  checkBothHalfTypes({"ChannelLayerNorm",
                      {{"X", {2, 6, 5, 7}, -3.f, 3.f}, {"S", {6}}, {"B", {6}, -1.f, 1.f}},
                      {{"Y", {2, 6, 5, 7}}},
                      "Y = fusectl.ChannelLayerNorm <epsilon = 0.00001> (X, S, B)"});
}

TEST_CASE("half fused kernels: SkipLayerNorm and SkipRMSNorm, with and without Sum",
          "[kernels][half-fused]") {
  const std::vector<In> skip_ln = {
      {"X", {2, 3, 37}}, {"K", {2, 3, 37}}, {"S", {37}}, {"B", {37}, -1.f, 1.f}};
  checkBothHalfTypes({"SkipLayerNorm", skip_ln, {{"Y", {2, 3, 37}}},
                      "Y = fusectl.SkipLayerNorm " + kNorm + " (X, K, S, B)"});
  checkBothHalfTypes({"SkipLayerNorm with Sum", skip_ln, {{"Y", {2, 3, 37}}, {"Sum", {2, 3, 37}}},
                      "Y, Sum = fusectl.SkipLayerNorm " + kNorm + " (X, K, S, B)"});
  checkBothHalfTypes({"SkipLayerNorm with a per-row bias and Sum",
                      {{"X", {2, 3, 37}}, {"K", {37}}, {"S", {37}}, {"B", {37}}},
                      {{"Y", {2, 3, 37}}, {"Sum", {2, 3, 37}}},
                      "Y, Sum = fusectl.SkipLayerNorm " + kNorm + " (X, K, S, B)"});
  const std::vector<In> skip_rms = {{"X", {5, 41}}, {"K", {5, 41}}, {"S", {41}, 0.5f, 1.5f}};
  checkBothHalfTypes({"SkipRMSNorm", skip_rms, {{"Y", {5, 41}}},
                      "Y = fusectl.SkipRMSNorm " + kNorm + " (X, K, S)"});
  checkBothHalfTypes({"SkipRMSNorm with Sum", skip_rms, {{"Y", {5, 41}}, {"Sum", {5, 41}}},
                      "Y, Sum = fusectl.SkipRMSNorm " + kNorm + " (X, K, S)"});
}

TEST_CASE("half fused kernels: Gelu, GeluTanh, QuickGelu, SwiGLU and SwiGLUPacked",
          "[kernels][half-fused]") {
  for (const char* op : {"Gelu", "GeluTanh", "QuickGelu"}) {
    checkBothHalfTypes({op, {{"X", {5, 203}, -5.f, 5.f}}, {{"Y", {5, 203}}},
                        fmt::format("Y = fusectl.{} (X)", op)});
  }
  checkBothHalfTypes({"SwiGLU", {{"G", {3, 129}, -4.f, 4.f}, {"U", {3, 129}}}, {{"Y", {3, 129}}},
                      "Y = fusectl.SwiGLU (G, U)"});
  checkBothHalfTypes({"SwiGLUPacked", {{"X", {3, 2, 130}, -4.f, 4.f}}, {{"Y", {3, 2, 65}}},
                      "Y = fusectl.SwiGLUPacked (X)"});
}

TEST_CASE("half fused kernels: the rotary embeddings, with and without the QK-norm",
          "[kernels][half-fused]") {
  const Dims x = {2, 3, 5, 16};
  for (const char* op : {"RotaryEmbedding", "InterleavedRotaryEmbedding"}) {
    checkBothHalfTypes({op, {{"X", x}, {"C", {5, 16}, -1.f, 1.f}, {"S", {5, 16}, -1.f, 1.f}},
                        {{"Y", x}}, fmt::format("Y = fusectl.{} (X, C, S)", op)});
  }
  for (const char* op : {"QKNormRotaryEmbedding", "QKNormInterleavedRotaryEmbedding"}) {
    checkBothHalfTypes({op,
                        {{"X", x},
                         {"G", {16}, 0.5f, 1.5f},
                         {"C", {1, 3, 5, 16}, -1.f, 1.f},
                         {"S", {1, 3, 5, 16}, -1.f, 1.f}},
                        {{"Y", x}},
                        fmt::format("Y = fusectl.{} <epsilon = 0.000001> (X, G, C, S)", op)});
  }
}

TEST_CASE("half fused kernels: Attention with a mask, and causal with grouped heads",
          "[kernels][half-fused]") {
  checkBothHalfTypes({"Attention with a mask",
                      {{"Q", {1, 2, 5, 8}, -1.f, 1.f},
                       {"K", {1, 2, 7, 8}, -1.f, 1.f},
                       {"V", {1, 2, 7, 8}},
                       {"M", {1, 1, 5, 7}, -3.f, 0.f}},
                      {{"Y", {1, 2, 5, 8}}},
                      "Y = fusectl.Attention <scale = 0.375> (Q, K, V, M)"});
  checkBothHalfTypes({"Attention causal, grouped-query",
                      {{"Q", {2, 4, 6, 8}, -1.f, 1.f},
                       {"K", {2, 2, 6, 8}, -1.f, 1.f},
                       {"V", {2, 2, 6, 4}},
                       {"M", {2, 1, 1, 6}, -1.f, 0.f}},
                      {{"Y", {2, 4, 6, 4}}},
                      "Y = fusectl.Attention <scale = 0.5, causal = 1> (Q, K, V, M)"});
}

TEST_CASE("half fused kernels: FusedMatMul, FusedGemm and FusedConv epilogues",
          "[kernels][half-fused]") {
  // The weight as an initializer (packed once per session) and as an input (packed per call).
  for (bool constant : {true, false}) {
    checkBothHalfTypes({constant ? "FusedMatMul, constant B" : "FusedMatMul",
                        {{"A", {2, 5, 24}, -1.f, 1.f},
                         {"W", {24, 17}, -1.f, 1.f, constant},
                         {"C", {17}},
                         {"Z", {2, 5, 17}}},
                        {{"Y", {2, 5, 17}}},
                        "Y = fusectl.FusedMatMul <activation = \"Gelu\"> (A, W, C, Z)"});
  }
  checkBothHalfTypes({"FusedGemm, per-column bias",
                      {{"A", {7, 19}, -1.f, 1.f}, {"B", {13, 19}, -1.f, 1.f, true}, {"C", {13}}},
                      {{"Y", {7, 13}}},
                      "Y = fusectl.FusedGemm <transB = 1, alpha = 0.75, activation = "
                      "\"LeakyRelu\", activation_params = [0.125]> (A, B, C)"});
  checkBothHalfTypes({"FusedGemm, beta * C accumulated, with residual",
                      {{"A", {19, 7}, -1.f, 1.f},
                       {"B", {19, 13}, -1.f, 1.f},
                       {"C", {7, 1}},
                       {"Z", {7, 13}}},
                      {{"Y", {7, 13}}},
                      "Y = fusectl.FusedGemm <transA = 1, beta = 0.5, activation = \"Tanh\"> "
                      "(A, B, C, Z)"});
  checkBothHalfTypes({"FusedConv with residual and Relu",
                      {{"X", {2, 4, 9, 9}},
                       {"W", {6, 4, 3, 3}, -0.5f, 0.5f, true},
                       {"B", {6}},
                       {"Z", {2, 6, 9, 9}}},
                      {{"Y", {2, 6, 9, 9}}},
                      "Y = fusectl.FusedConv <pads = [1, 1, 1, 1], activation = \"Relu\"> "
                      "(X, W, B, Z)"});
  // Two groups, the weight constant: the second run reads each group's packed panels only.
  checkBothHalfTypes({"FusedConv grouped, constant W",
                      {{"X", {1, 4, 7, 7}},
                       {"W", {6, 2, 3, 3}, -0.5f, 0.5f, true},
                       {"B", {6}}},
                      {{"Y", {1, 6, 5, 5}}},
                      "Y = fusectl.FusedConv <group = 2, activation = \"Relu\"> (X, W, B)"});
  checkBothHalfTypes({"FusedConv depthwise with residual and Sigmoid",
                      {{"X", {1, 4, 8, 8}},
                       {"W", {4, 1, 3, 3}, -0.5f, 0.5f},
                       {"B", {4}},
                       {"Z", {1, 4, 6, 6}}},
                      {{"Y", {1, 4, 6, 6}}},
                      "Y = fusectl.FusedConv <group = 4, activation = \"Sigmoid\"> (X, W, B, Z)"});
}

TEST_CASE("half fused kernels: Elementwise with constants and broadcast inputs",
          "[kernels][half-fused]") {
  checkBothHalfTypes(
      {"Elementwise",
       {{"X0", {2, 3, 4, 5}}, {"X1", {3, 1, 5}}, {"X2", {5}, 0.5f, 2.f}},
       {{"Y", {2, 3, 4, 5}}},
       "Y = fusectl.Elementwise <program = \"t0 = Mul(x0, x1); t1 = Add(t0, 0.3); "
       "t2 = Sigmoid(t1); t3 = Mul(t1, t2); t4 = LeakyRelu(t3, 0.1); t5 = Div(t4, x2); "
       "t6 = Sub(t5, 0.7)\"> (X0, X1, X2)"});
  // A long row (one broadcast row, split into blocks) of one input.
  checkBothHalfTypes({"Elementwise, one input",
                      {{"X0", {1100}, -3.f, 3.f}},
                      {{"Y", {1100}}},
                      "Y = fusectl.Elementwise <program = \"t0 = Tanh(x0); t1 = Mul(t0, 1.7); "
                      "t2 = Exp(t1); t3 = Add(t2, -0.25)\"> (X0)"});
}

TEST_CASE("half fused kernels: nodes spelled with their type, as exported",
          "[kernels][half-fused]") {
  checkBothHalfTypes({"FusedConv_Add_Relu, spelled with its type",
                      {{"X", {1, 3, 6, 6}},
                       {"W", {5, 3, 3, 3}, -0.5f, 0.5f, true},
                       {"Z", {1, 5, 4, 4}}},
                      {{"Y", {1, 5, 4, 4}}},
                      "Y = fusectl.FusedConv_NoBias_Add_Relu$T <activation = \"Relu\"> (X, W, Z)"});
  checkBothHalfTypes({"FusedGemm_Gelu, spelled with its type",
                      {{"A", {6, 11}, -1.f, 1.f}, {"B", {11, 9}, -1.f, 1.f}, {"C", {9}}},
                      {{"Y", {6, 9}}},
                      "Y = fusectl.FusedGemm_Gelu$T <activation = \"Gelu\"> (A, B, C)"});
  checkBothHalfTypes({"LayerNorm, spelled with its type",
                      {{"X", {3, 37}}, {"S", {37}}, {"B", {37}}},
                      {{"Y", {3, 37}}},
                      "Y = fusectl.LayerNorm$T " + kNorm + " (X, S, B)"});
}

namespace {

// One fusectl node run through the registry, outside the executor: its inputs may have any
// types, whatever a model would declare.
std::vector<HostTensor> runNode(const std::string& op, const std::vector<HostTensor>& inputs,
                                std::vector<Attribute> attrs = {}) {
  fusectl::testing::KernelCase k(op, 1);
  k.domain("fusectl").registry(KernelRegistry::global());
  for (const HostTensor& t : inputs) k.input(t);
  for (Attribute& a : attrs) k.attr(std::move(a));
  return k.run();
}

// A tensor of ones (1.0 in every type).
HostTensor ones(DType t, Dims dims) {
  HostTensor h(t, std::move(dims));
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (t == DType::Float)
      h.mutableData<float>()[i] = 1.f;
    else
      h.mutableData<uint16_t>()[i] = floatToHalfBits(t, 1.f);
  }
  return h;
}

}  // namespace

TEST_CASE("half fused kernels: a node mixing element types is a one-line error",
          "[kernels][half-fused]") {
  const DType f32 = DType::Float, f16 = DType::Float16, bf16 = DType::BFloat16;
  const std::vector<Attribute> norm = {Attribute::ofInt("axis", -1),
                                       Attribute::ofFloat("epsilon", 1e-5f)};
  CHECK_THROWS_WITH(runNode("RMSNorm", {ones(f16, {2, 4}), ones(f32, {4})}, norm),
                    Catch::Contains("Scale is float but X is float16") &&
                        Catch::Contains("one element type"));
  CHECK_THROWS_WITH(
      runNode("SkipLayerNorm", {ones(bf16, {2, 4}), ones(f16, {2, 4}), ones(bf16, {4}),
                                ones(bf16, {4})},
              norm),
      Catch::Contains("Skip is float16 but X is bfloat16"));
  CHECK_THROWS_WITH(runNode("SwiGLU", {ones(f16, {8}), ones(bf16, {8})}),
                    Catch::Contains("U is bfloat16 but G is float16"));
  CHECK_THROWS_WITH(runNode("RotaryEmbedding", {ones(f16, {2, 4}), ones(f32, {2, 4}),
                                                ones(f32, {2, 4})}),
                    Catch::Contains("Cos is float but X is float16"));
  CHECK_THROWS_WITH(
      runNode("Attention", {ones(f16, {1, 1, 2, 4}), ones(f16, {1, 1, 2, 4}),
                            ones(f16, {1, 1, 2, 4}), ones(f32, {1, 1, 2, 2})}),
      Catch::Contains("M is float but Q is float16"));
  CHECK_THROWS_WITH(runNode("FusedMatMul", {ones(f16, {3, 4}), ones(f32, {4, 2})}),
                    Catch::Contains("B is float but A is float16"));
  CHECK_THROWS_WITH(runNode("FusedConv", {ones(bf16, {1, 1, 3, 3}), ones(bf16, {1, 1, 1, 1}),
                                          ones(f16, {1})}),
                    Catch::Contains("B is float16 but X is bfloat16"));
  CHECK_THROWS_WITH(
      runNode("Elementwise", {ones(f16, {4}), ones(f32, {4})},
              {Attribute::ofString("program", "t0 = Add(x0, x1)")}),
      Catch::Contains("input 1 is float but input 0 is float16"));
  // An exported half node's name says its type; the function it names casts from that type.
  CHECK_THROWS_WITH(runNode("FusedConv_NoBias_Relu_float16",
                            {ones(bf16, {1, 1, 3, 3}), ones(bf16, {1, 1, 1, 1})},
                            {Attribute::ofString("activation", "Relu")}),
                    Catch::Contains("the op type says FusedConv_NoBias_Relu_float16 but the "
                                    "inputs and attributes make it FusedConv_NoBias_Relu_bfloat16"));
  // A type none of the kernels take.
  CHECK_THROWS_WITH(runNode("QuickGelu", {HostTensor(DType::Double, {3})}),
                    Catch::Contains("X is double; the kernel takes float32, float16 or bfloat16"));
}
