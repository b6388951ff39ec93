// The CUDA kernels of elementwise.cu, movement.cu and norms.cu against the CPU kernels, one small
// model per case (ONNX textual syntax), run on both backends on the same seeded inputs and
// compared by normalised MSE (cuda_case.h); then every testdata model end to end, as exported
// and after -O3.
//
// Tolerances. float32: both sides compute in float (the CPU's statistics in double) and differ by
// a few ulps of libm against CUDA's math functions and by the order of their sums: nmse near
// 1e-13, so 1e-7 leaves a wide margin and still catches a wrong index, attribute or default.
// Casts, copies and selects move or convert values exactly: 0. float16 against a CPU kernel that
// takes float16: both compute in float and round once to half, differing only where their float
// results straddle a rounding boundary: 1e-5. float16 against the float32 twin of the model (for
// the fusectl ops whose CPU kernels are float32 only): the half output's rounding itself, a
// relative error up to 2^-11, nmse about 1e-7: 1e-5 too. bfloat16 keeps 8 significant bits
// where float16 keeps 11: one rounding is a relative error up to 2^-8, nmse about 1e-5 against
// the float32 twin, and where the CPU and the GPU straddle a rounding boundary they differ by a
// whole bfloat16 ulp (2^-7 relative), 8x float16's. 1e-4 covers one rounding with a 10x margin
// and still catches a wrong index or formula, which costs an nmse near 1.
//
// The cases are data (Case), so the tests that need no GPU can parse every model, run it on the
// CPU and check where the CUDA backend would place each node: a typo in a model, an op the CUDA
// registry lacks at the opset or dtype used, or an `accepts` that declines a node shows here
// without a GPU. On a GPU each case also pins the node count left on the CPU and, where the
// kernel's path is known, the number of device launches.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_case.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/cuda_backend.h"
#include "fusectl/kernels/cuda_device.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/memory_plan.h"
#include "fusectl/passes/optimize.h"

using namespace fusectl;
using namespace fusectl::kernels;
using fusectl::testing::checkCudaAgainstCpu;
using fusectl::testing::cudaDeviceOrSkip;
using fusectl::testing::CudaRun;
using fusectl::testing::normalizedMse;

namespace {

constexpr double kFloatNmse = 1e-7;
constexpr double kHalfNmse = 1e-5;
constexpr double kBFloat16Nmse = 1e-4;
constexpr double kExact = 0;

using Dims = std::vector<int64_t>;

// ---- Model text ----------------------------------------------------------------------------

std::string dimsText(const Dims& dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out;
}

// `float[2, 3]`; a scalar without brackets, as `float[]` parses as an unknown rank.
std::string typeText(const std::string& dtype, const Dims& dims) {
  return dims.empty() ? dtype : dtype + "[" + dimsText(dims) + "]";
}

int64_t numel(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// `n` values in [lo, hi) from a fixed LCG, spelled in the text: initializer data that is not
// symmetric or trivial, and that a float16 case can reuse (its initializers are rounded after
// parsing, as the text syntax has no float16 literals).
std::string valuesText(int64_t n, double lo, double hi, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 12345u;
  std::string s = "{";
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const double u = static_cast<double>(state >> 8) / 16777216.0;
    s += fmt::format("{}{:.4f}", i ? ", " : "", lo + (hi - lo) * u);
  }
  return s + "}";
}

std::string floatInit(const std::string& name, const Dims& dims, double lo, double hi,
                      uint32_t seed) {
  return typeText("float", dims) + " " + name + " = " + valuesText(numel(dims), lo, hi, seed);
}

std::string scalarInit(const std::string& name, double v) {
  return fmt::format("float {} = {{{:.4f}}}", name, v);
}

std::string intsInit(const std::string& name, const std::vector<int64_t>& values,
                     const std::string& dtype = "int64") {
  std::string v;
  for (size_t i = 0; i < values.size(); ++i) v += (i ? ", " : "") + std::to_string(values[i]);
  return typeText(dtype, {static_cast<int64_t>(values.size())}) + " " + name + " = {" + v + "}";
}

// A graph g over `inputs` and `outputs` as the signature spells them, `initializers` between
// < and >, and `body` (one node per line), importing opset `opset` and fusectl 1.
std::string modelText(int64_t opset, const std::string& inputs, const std::string& outputs,
                      const std::vector<std::string>& initializers, const std::string& body) {
  // The IR version that first carries the opset: the loader may check the pair.
  const int ir = opset <= 18 ? 8 : opset <= 20 ? 9 : 10;
  std::string inits;
  for (size_t i = 0; i < initializers.size(); ++i)
    inits += (i ? ",\n  " : "") + initializers[i];
  return fmt::format("<ir_version: {}, opset_import: [\"\" : {}, \"fusectl\" : 1]>\n"
                     "g ({}) => ({}){}\n{{\n{}\n}}\n",
                     ir, opset, inputs, outputs, inits.empty() ? "" : "\n<\n  " + inits + "\n>",
                     body);
}

Dims broadcast(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t k = out.size() - 1 - i;
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) throw std::logic_error("test shapes do not broadcast");
    out[k] = x == 1 ? y : x;
  }
  return out;
}

std::string replaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// ---- Cases ---------------------------------------------------------------------------------

enum class Reference {
  SameModel,  // the CPU runs the model itself
  FloatTwin,  // a float16 model whose CPU kernel is float32 only: the CPU runs its float twin
};

struct Case {
  std::string name;
  std::string text;
  double nmse = kFloatNmse;
  // Float16 or BFloat16: a half model, whose float initializers become that dtype after parsing.
  DType half = DType::Float;
  Reference reference = Reference::SameModel;
  int fallbacks = 0;      // nodes the CUDA backend leaves to the CPU
  int64_t launches = -1;  // device launches of one run, where the kernels' paths fix it; -1: any
};

Case floatCase(std::string name, std::string text, int64_t launches, double nmse = kFloatNmse) {
  Case c;
  c.name = std::move(name);
  c.text = std::move(text);
  c.launches = launches;
  c.nmse = nmse;
  return c;
}

// A case of a model in the half type `half`, with that type's bound.
Case halfTypeCase(DType half, std::string name, std::string text, int64_t launches,
                  Reference reference = Reference::SameModel) {
  Case c = floatCase(std::move(name), std::move(text), launches,
                     half == DType::BFloat16 ? kBFloat16Nmse : kHalfNmse);
  c.half = half;
  c.reference = reference;
  return c;
}

Case halfCase(std::string name, std::string text, int64_t launches,
              Reference reference = Reference::SameModel) {
  return halfTypeCase(DType::Float16, std::move(name), std::move(text), launches, reference);
}

Case bfloat16Case(std::string name, std::string text, int64_t launches,
                  Reference reference = Reference::SameModel) {
  return halfTypeCase(DType::BFloat16, std::move(name), std::move(text), launches, reference);
}

// A case of a half model spelled in `dtype` ("float16" or "bfloat16"), with that dtype's bound.
Case narrowCase(const std::string& dtype, std::string name, std::string text, int64_t launches,
                Reference reference = Reference::SameModel) {
  if (dtype != "float16" && dtype != "bfloat16") throw std::logic_error("not a half dtype: " + dtype);
  return halfTypeCase(dtype == "bfloat16" ? DType::BFloat16 : DType::Float16, std::move(name),
                      std::move(text), launches, reference);
}

// float32 initializer values rounded to `half`: as a tensor of that dtype, or (for a float
// twin) as the float32 values it holds.
Tensor roundedToHalf(const Tensor& t, DType half, bool keep_float) {
  const HostTensor h = HostTensor::fromTensor(t);
  std::vector<uint16_t> halves(static_cast<size_t>(h.numel()));
  std::vector<float> floats(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    const float f = h.data<float>()[i];
    halves[i] = floatToHalfBits(half, f);
    floats[i] = halfBitsToFloat(half, halves[i]);
  }
  if (keep_float) return Tensor::fromValues(DType::Float, t.dims(), floats);
  return Tensor::fromValues(half, t.dims(), halves);
}

std::unique_ptr<Model> parseCase(const Case& c, bool float_twin = false) {
  // bfloat16 first: "float16" is a substring of it.
  const std::string text =
      float_twin ? replaceAll(replaceAll(c.text, "bfloat16", "float"), "float16", "float") : c.text;
  auto model = parseModelText(text, c.name);
  if (c.half != DType::Float) {
    for (Value* v : model->graph->initializers()) {
      if (v->dtype() != DType::Float) continue;
      const Tensor rounded = roundedToHalf(*v->initializer(), c.half, float_twin);
      v->type.dtype = rounded.dtype();
      v->setInitializer(rounded);
    }
  }
  return model;
}

// The float twin's inputs: the float32 values the float16 or bfloat16 inputs hold, so that both
// sides see the same numbers.
std::vector<NamedTensor> widened(const std::vector<NamedTensor>& inputs) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& in : inputs) {
    const DType dtype = in.tensor.dtype();
    if (dtype != DType::Float16 && dtype != DType::BFloat16) {
      out.push_back(in);
      continue;
    }
    HostTensor t(DType::Float, in.tensor.dims());
    for (int64_t i = 0; i < t.numel(); ++i)
      t.mutableData<float>()[i] = halfBitsToFloat(dtype, in.tensor.data<uint16_t>()[i]);
    out.push_back({in.name, std::move(t)});
  }
  return out;
}

void checkStats(const Case& c, const ExecutionStats& stats) {
  CHECK(stats.fallback_nodes == static_cast<size_t>(c.fallbacks));
  if (c.launches >= 0) CHECK(stats.device_launches == static_cast<uint64_t>(c.launches));
}

void runCase(const Case& c) {
  INFO(c.name << "\n" << c.text);
  if (c.reference == Reference::SameModel) {
    const auto model = parseCase(c);
    const CudaRun r = checkCudaAgainstCpu(*model, c.nmse, /*fallbacks_allowed=*/true);
    checkStats(c, r.stats);
    return;
  }
  const auto half = parseCase(c);
  const auto twin = parseCase(c, /*float_twin=*/true);
  const auto half_inputs = makeRandomInputs(*half->graph, 7);
  ExecutorOptions options;
  options.backend = &cudaBackend();
  ExecutionStats stats;
  const auto gpu = runModel(*half, half_inputs, options, &stats);
  const auto cpu = runModel(*twin, widened(half_inputs));
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("output " << cpu[i].name);
    CHECK(gpu[i].tensor.dtype() == (cpu[i].tensor.dtype() == DType::Float
                                        ? c.half
                                        : cpu[i].tensor.dtype()));
    REQUIRE(gpu[i].tensor.dims() == cpu[i].tensor.dims());
    CHECK(normalizedMse(gpu[i].tensor, cpu[i].tensor) <= c.nmse);
  }
  checkStats(c, stats);
}

void runCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) runCase(c);
}

// ---- Placement without a GPU ---------------------------------------------------------------

std::string describeNodes(const std::vector<const Node*>& nodes) {
  std::string s;
  for (const Node* n : nodes) s += (s.empty() ? "" : ", ") + n->opType();
  return s.empty() ? "none" : s;
}

bool allFinite(const HostTensor& t) {
  if (t.dtype() != DType::Float && t.dtype() != DType::Float16 && t.dtype() != DType::BFloat16)
    return true;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(elementAsDouble(t, i))) return false;
  return true;
}

// Parses the case, runs it (or its float twin) on the CPU with the inputs the GPU test uses,
// requires finite outputs, and checks the CPU fallbacks the CUDA backend would make.
void checkCaseWithoutGpu(const Case& c) {
  INFO(c.name << "\n" << c.text);
  std::unique_ptr<Model> model;
  REQUIRE_NOTHROW(model = parseCase(c));
  std::unique_ptr<Model> twin;
  if (c.reference == Reference::FloatTwin) {
    REQUIRE_NOTHROW(twin = parseCase(c, true));
    // The half model itself never runs here: at least its outputs must be declared as the
    // GPU will produce them (types are inferred when the text is parsed, before its float
    // initializers become float16 or bfloat16).
    for (const Value* out : model->graph->outputs()) {
      INFO("output " << out->name());
      CHECK(out->dtype() == c.half);
    }
  }
  const Model& cpu_model = twin ? *twin : *model;
  std::vector<NamedTensor> outputs;
  REQUIRE_NOTHROW(outputs = runModel(cpu_model, makeRandomInputs(*cpu_model.graph, 7)));
  REQUIRE(outputs.size() == cpu_model.graph->outputs().size());
  for (const NamedTensor& out : outputs) {
    INFO("output " << out.name);
    CHECK(allFinite(out.tensor));
  }
  if (!fusectl::cuda::builtWithCuda()) return;
  const auto fallbacks = fusectl::testing::cudaFallbackNodes(*model);
  INFO("on the CPU: " << describeNodes(fallbacks));
  CHECK(fallbacks.size() == static_cast<size_t>(c.fallbacks));
}

// ---- Elementwise ---------------------------------------------------------------------------

// What feeds the op under test: X itself, X * 4 (so that clamps and the negative branches of
// the activations are reached), or |X| + 0.5 (Log, Sqrt, Reciprocal).
enum class Pre { None, Scale, Positive };

int64_t preLaunches(Pre pre) { return pre == Pre::None ? 0 : pre == Pre::Scale ? 1 : 2; }

std::string unaryModel(const std::string& op, Pre pre, const std::string& dtype = "float",
                       int64_t opset = 17, const Dims& dims = {3, 7, 37}) {
  std::string body;
  std::vector<std::string> inits;
  std::string arg = "X";
  if (pre == Pre::Scale) {
    inits.push_back(scalarInit("K", 4));
    body = "  T = Mul (X, K)\n";
    arg = "T";
  } else if (pre == Pre::Positive) {
    inits.push_back(scalarInit("H", 0.5));
    body = "  A = Abs (X)\n  T = Add (A, H)\n";
    arg = "T";
  }
  body += "  Y = " + op + " (" + arg + ")";
  return modelText(opset, typeText(dtype, dims) + " X", typeText(dtype, dims) + " Y", inits, body);
}

struct UnaryOp {
  std::string op;  // with its attributes
  Pre pre;
};

const std::vector<UnaryOp>& standardUnaryOps() {
  static const std::vector<UnaryOp> ops = {
      {"Relu", Pre::Scale},
      {"Sigmoid", Pre::Scale},
      {"Tanh", Pre::Scale},
      {"Exp", Pre::Scale},
      {"Log", Pre::Positive},
      {"Sqrt", Pre::Positive},
      {"Neg", Pre::None},
      {"Abs", Pre::None},
      {"Erf", Pre::Scale},
      {"Reciprocal", Pre::Positive},
      {"Floor", Pre::Scale},
      {"Ceil", Pre::Scale},
      {"Sin", Pre::Scale},
      {"Cos", Pre::Scale},
      {"Softplus", Pre::Scale},
      {"Softsign", Pre::Scale},
      {"HardSwish", Pre::Scale},
      // The defaults, then other values: a default that differs from the CPU's, or a swapped
      // pair, shows in one of the two.
      {"LeakyRelu", Pre::Scale},
      {"LeakyRelu <alpha = 0.2>", Pre::Scale},
      {"Elu", Pre::Scale},
      {"Elu <alpha = 0.7>", Pre::Scale},
      {"Selu", Pre::Scale},
      {"Selu <alpha = 1.5, gamma = 1.1>", Pre::Scale},
      {"HardSigmoid", Pre::Scale},
      {"HardSigmoid <alpha = 0.3, beta = 0.4>", Pre::Scale},
      {"Identity", Pre::Scale},
  };
  return ops;
}

std::vector<Case> unaryCases() {
  std::vector<Case> cases;
  for (const UnaryOp& u : standardUnaryOps()) {
    cases.push_back(floatCase(u.op, unaryModel(u.op, u.pre),
                              (u.op == "Identity" ? 0 : 1) + preLaunches(u.pre)));
  }
  // Clip before opset 11: bounds as attributes (no Mul before it, as opset 6 has no CUDA Mul).
  cases.push_back(floatCase("Clip-6 min max",
                            unaryModel("Clip <min = -0.5, max = 0.75>", Pre::None, "float", 6),
                            1));
  cases.push_back(floatCase("Clip-6 max only", unaryModel("Clip <max = 0.3>", Pre::None, "float", 6),
                            1));
  // From opset 11: scalar inputs read on the host; either may be left out.
  const std::string x = "float[3, 7, 37] X", y = "float[3, 7, 37] Y";
  const std::string scaled = "  T = Mul (X, K)\n";
  cases.push_back(floatCase(
      "Clip-13 min max",
      modelText(13, x, y, {scalarInit("K", 4), scalarInit("Lo", -1.5), scalarInit("Hi", 2.25)},
                scaled + "  Y = Clip (T, Lo, Hi)"),
      2));
  cases.push_back(floatCase("Clip-13 max only",
                            modelText(13, x, y, {scalarInit("K", 4), scalarInit("Hi", 0.5)},
                                      scaled + "  Y = Clip (T, , Hi)"),
                            2));
  cases.push_back(floatCase("Clip-13 min only",
                            modelText(13, x, y, {scalarInit("K", 4), scalarInit("Lo", -0.5)},
                                      scaled + "  Y = Clip (T, Lo)"),
                            2));
  cases.push_back(floatCase("Clip-13 no bounds",
                            modelText(13, x, y, {scalarInit("K", 4)}, scaled + "  Y = Clip (T)"),
                            2));
  // Gelu of opset 20 and the fusectl spellings of the Gelu family.
  for (const char* g : {"Gelu", "Gelu <approximate = \"none\">", "Gelu <approximate = \"tanh\">"})
    cases.push_back(floatCase(std::string(g) + " (opset 20)", unaryModel(g, Pre::Scale, "float", 20),
                              2));
  for (const char* g : {"fusectl.Gelu", "fusectl.GeluTanh", "fusectl.QuickGelu"})
    cases.push_back(floatCase(g, unaryModel(g, Pre::Scale), 2));
  cases.push_back(floatCase(
      "fusectl.SwiGLU",
      modelText(17, "float[3, 7, 37] G, float[3, 7, 37] U", "float[3, 7, 37] Y",
                {scalarInit("K", 4)}, "  T = Mul (G, K)\n  Y = fusectl.SwiGLU (T, U)"),
      2));
  return cases;
}

std::vector<Case> unaryHalfCases(const std::string& dtype = "float16") {
  std::vector<Case> cases;
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "LeakyRelu <alpha = 0.2>", "HardSwish",
                         "fusectl.Gelu"})
    cases.push_back(narrowCase(dtype, std::string(op) + " " + dtype,
                               unaryModel(op, Pre::Scale, dtype), 2));
  cases.push_back(narrowCase(dtype, "Sqrt " + dtype, unaryModel("Sqrt", Pre::Positive, dtype), 3));
  cases.push_back(narrowCase(dtype, "Gelu tanh " + dtype + " (opset 20)",
                             unaryModel("Gelu <approximate = \"tanh\">", Pre::Scale, dtype, 20),
                             2));
  // Bounds of the half dtype, read on the host as such.
  const std::string xy = typeText(dtype, {3, 7, 37}) + " X";
  cases.push_back(narrowCase(
      dtype, "Clip-13 " + dtype,
      modelText(13, xy, typeText(dtype, {3, 7, 37}) + " Y",
                {scalarInit("K", 4), scalarInit("Lo", -1.5), scalarInit("Hi", 2.25)},
                "  T = Mul (X, K)\n  Y = Clip (T, Lo, Hi)"),
      2));
  // The CPU kernels of these take float32 only.
  for (const char* op : {"fusectl.GeluTanh", "fusectl.QuickGelu"})
    cases.push_back(narrowCase(dtype, std::string(op) + " " + dtype,
                               unaryModel(op, Pre::None, dtype), 1, Reference::FloatTwin));
  const std::string t = typeText(dtype, {3, 7, 37});
  cases.push_back(narrowCase(dtype, "fusectl.SwiGLU " + dtype,
                             modelText(17, t + " G, " + t + " U", t + " Y", {},
                                       "  Y = fusectl.SwiGLU (G, U)"),
                             1, Reference::FloatTwin));
  return cases;
}

struct Shapes {
  std::string name;
  Dims a, b;
};

const std::vector<Shapes>& binaryShapes() {
  static const std::vector<Shapes> shapes = {
      {"same shape", {3, 5, 7}, {3, 5, 7}},
      {"per-column bias", {6, 4, 9}, {9}},
      {"per-channel NCHW", {2, 8, 5, 5}, {8, 1, 1}},
      {"scalar", {4, 6}, {}},
      {"bidirectional", {2, 1, 4}, {3, 1}},
      {"first operand broadcast", {9}, {6, 4, 9}},
  };
  return shapes;
}

// `op` of A and B. Div divides by |B| + 0.5 and Pow raises |A| + 0.5, so that every result
// is finite and of moderate size.
std::string binaryModel(const std::string& op, const Dims& a, const Dims& b,
                        const std::string& dtype = "float") {
  std::string body;
  std::vector<std::string> inits;
  std::string lhs = "A", rhs = "B";
  if (op == "Div" || op == "Pow") {
    inits.push_back(scalarInit("H", 0.5));
    const std::string v = op == "Div" ? "B" : "A";
    body = "  P = Abs (" + v + ")\n  Q = Add (P, H)\n";
    (op == "Div" ? rhs : lhs) = "Q";
  }
  body += "  Y = " + op + " (" + lhs + ", " + rhs + ")";
  return modelText(17, typeText(dtype, a) + " A, " + typeText(dtype, b) + " B",
                   typeText(dtype, broadcast(a, b)) + " Y", inits, body);
}

std::vector<Case> binaryCases() {
  std::vector<Case> cases;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"}) {
    const int64_t launches = std::string(op) == "Div" || std::string(op) == "Pow" ? 3 : 1;
    for (const Shapes& s : binaryShapes()) {
      // PRelu's slope broadcasts to X only (unidirectionally).
      if (std::string(op) == "PRelu" && broadcast(s.a, s.b) != s.a) continue;
      cases.push_back(floatCase(std::string(op) + " " + s.name, binaryModel(op, s.a, s.b),
                                launches));
    }
  }
  // A constant exponent of 2, which the CPU computes as x * x.
  cases.push_back(floatCase("Pow by a constant 2",
                            modelText(17, "float[6, 4, 9] A", "float[6, 4, 9] Y",
                                      {scalarInit("E", 2)}, "  Y = Pow (A, E)"),
                            1));
  // A per-channel PRelu slope as a model stores it: an initializer.
  cases.push_back(floatCase("PRelu slope initializer",
                            modelText(17, "float[2, 8, 5, 5] X", "float[2, 8, 5, 5] Y",
                                      {floatInit("S", {8, 1, 1}, 0.05, 0.5, 3)},
                                      "  Y = PRelu (X, S)"),
                            1));
  return cases;
}

std::vector<Case> binaryHalfCases(const std::string& d = "float16") {
  return {
      narrowCase(d, "Add " + d + " per-channel", binaryModel("Add", {2, 8, 5, 5}, {8, 1, 1}, d), 1),
      narrowCase(d, "Mul " + d + " scalar", binaryModel("Mul", {4, 6}, {}, d), 1),
      narrowCase(d, "Sub " + d + " bidirectional", binaryModel("Sub", {2, 1, 4}, {3, 1}, d), 1),
      narrowCase(d, "Div " + d + " same shape", binaryModel("Div", {3, 5, 7}, {3, 5, 7}, d), 3),
      narrowCase(d, "Max " + d + " per-column", binaryModel("Max", {6, 4, 9}, {9}, d), 1),
      narrowCase(d, "PRelu " + d + " per-channel",
                 binaryModel("PRelu", {2, 8, 5, 5}, {8, 1, 1}, d), 1),
  };
}

std::vector<Case> whereCastCases() {
  std::vector<Case> cases;
  // The condition from a comparison, which has no CUDA kernel: Greater runs on the CPU and its
  // bool output travels to the device.
  Case greater = floatCase("Where of Greater",
                           modelText(17, "float[2, 3, 4] A, float[3, 1] B", "float[2, 3, 4] Y", {},
                                     "  C = Greater (A, B)\n  Y = Where (C, A, B)"),
                           1, kExact);
  greater.fallbacks = 1;
  cases.push_back(greater);
  cases.push_back(floatCase("Where three-way broadcast",
                            modelText(17, "bool[2, 1, 4] C, float[3, 1] X, float[4] Z",
                                      "float[2, 3, 4] Y", {}, "  Y = Where (C, X, Z)"),
                            1, kExact));
  cases.push_back(halfCase("Where float16",
                           modelText(17, "bool[2, 3, 4] C, float16[2, 3, 4] X, float16 Z",
                                     "float16[2, 3, 4] Y", {}, "  Y = Where (C, X, Z)"),
                           1));
  cases.back().nmse = kExact;
  cases.push_back(bfloat16Case("Where bfloat16",
                               modelText(17, "bool[2, 3, 4] C, bfloat16[2, 3, 4] X, bfloat16 Z",
                                         "bfloat16[2, 3, 4] Y", {}, "  Y = Where (C, X, Z)"),
                               1));
  cases.back().nmse = kExact;

  // Both sides round to nearest even, so the round trip through float16 is exact.
  cases.push_back(floatCase("Cast float -> float16 -> float",
                            modelText(17, "float[3, 7, 37] X", "float[3, 7, 37] Y", {},
                                      "  H = Cast <to = 10> (X)\n  Y = Cast <to = 1> (H)"),
                            2, kExact));
  cases.push_back(floatCase("Cast float -> float16",
                            modelText(17, "float[3, 7, 37] X", "float16[3, 7, 37] Y", {},
                                      "  Y = Cast <to = 10> (X)"),
                            1, kExact));
  cases.push_back(floatCase("Cast float16 -> float",
                            modelText(17, "float16[3, 7, 37] X", "float[3, 7, 37] Y", {},
                                      "  Y = Cast <to = 1> (X)"),
                            1, kExact));
  // bfloat16 likewise: both sides round float32 to nearest even once, and widen exactly; between
  // the two half types through float32, which holds either exactly.
  for (const auto& [from, to, code] :
       {std::tuple<const char*, const char*, int>{"float", "bfloat16", 16},
        {"bfloat16", "float", 1}, {"bfloat16", "float16", 10}, {"float16", "bfloat16", 16}}) {
    cases.push_back(floatCase(fmt::format("Cast {} -> {}", from, to),
                              modelText(17, std::string(from) + "[3, 7, 37] X",
                                        std::string(to) + "[3, 7, 37] Y", {},
                                        fmt::format("  Y = Cast <to = {}> (X)", code)),
                              1, kExact));
  }
  cases.push_back(floatCase("Cast float -> bfloat16 -> float",
                            modelText(17, "float[3, 7, 37] X", "float[3, 7, 37] Y", {},
                                      "  H = Cast <to = 16> (X)\n  Y = Cast <to = 1> (H)"),
                            2, kExact));
  // Integer targets of X * 10: truncation toward zero on both sides, of the same products.
  struct IntTarget {
    const char* name;
    int to;
    const char* dtype;
    bool abs;  // uint8 of a negative value is not defined alike
  };
  for (const IntTarget& t : {IntTarget{"int64", 7, "int64", false},
                             IntTarget{"int32", 6, "int32", false},
                             IntTarget{"int8", 3, "int8", false},
                             IntTarget{"uint8", 2, "uint8", true},
                             IntTarget{"bool", 9, "bool", false}}) {
    std::string body = "  T = Mul (X, K)\n";
    std::string arg = "T";
    if (t.abs) {
      body += "  P = Abs (T)\n";
      arg = "P";
    }
    body += fmt::format("  Y = Cast <to = {}> ({})", t.to, arg);
    cases.push_back(floatCase(std::string("Cast float -> ") + t.name,
                              modelText(17, "float[3, 7, 37] X",
                                        std::string(t.dtype) + "[3, 7, 37] Y",
                                        {scalarInit("K", 10)}, body),
                              t.abs ? 3 : 2, kExact));
  }
  cases.push_back(halfCase("Cast float16 -> int64",
                           modelText(17, "float16[3, 7, 37] X", "int64[3, 7, 37] Y",
                                     {scalarInit("K", 10)},
                                     "  T = Mul (X, K)\n  Y = Cast <to = 7> (T)"),
                           2));
  cases.back().nmse = kExact;
  cases.push_back(bfloat16Case("Cast bfloat16 -> int64",
                               modelText(17, "bfloat16[3, 7, 37] X", "int64[3, 7, 37] Y",
                                         {scalarInit("K", 10)},
                                         "  T = Mul (X, K)\n  Y = Cast <to = 7> (T)"),
                               2));
  cases.back().nmse = kExact;
  // A Cast to the input's own type is an alias.
  cases.push_back(floatCase("Cast float -> float",
                            modelText(17, "float[3, 7, 37] X", "float[3, 7, 37] Y",
                                      {scalarInit("K", 4)},
                                      "  T = Mul (X, K)\n  Y = Cast <to = 1> (T)"),
                            1, kExact));
  cases.push_back(floatCase("CastLike float -> float16",
                            modelText(17, "float[3, 7, 37] X, float16[1] L", "float16[3, 7, 37] Y",
                                      {}, "  Y = CastLike (X, L)"),
                            1, kExact));
  cases.push_back(floatCase("CastLike float16 -> float",
                            modelText(17, "float16[3, 7, 37] X, float[1] L", "float[3, 7, 37] Y",
                                      {}, "  Y = CastLike (X, L)"),
                            1, kExact));
  cases.push_back(floatCase("CastLike float -> bfloat16",
                            modelText(17, "float[3, 7, 37] X, bfloat16[1] L",
                                      "bfloat16[3, 7, 37] Y", {}, "  Y = CastLike (X, L)"),
                            1, kExact));
  cases.push_back(floatCase("CastLike bfloat16 -> float",
                            modelText(17, "bfloat16[3, 7, 37] X, float[1] L", "float[3, 7, 37] Y",
                                      {}, "  Y = CastLike (X, L)"),
                            1, kExact));
  cases.push_back(floatCase("CastLike float -> int64",
                            modelText(17, "float[3, 7, 37] X, int64[1] L", "int64[3, 7, 37] Y",
                                      {scalarInit("K", 10)},
                                      "  T = Mul (X, K)\n  Y = CastLike (T, L)"),
                            2, kExact));
  return cases;
}

// ---- Data movement -------------------------------------------------------------------------

Dims permuted(const Dims& x, const std::vector<int64_t>& perm) {
  if (perm.empty()) return Dims(x.rbegin(), x.rend());
  Dims out;
  for (int64_t p : perm) out.push_back(x[static_cast<size_t>(p)]);
  return out;
}

std::string transposeModel(const Dims& x, const std::vector<int64_t>& perm,
                           const std::string& dtype = "float") {
  const std::string attr = perm.empty() ? "" : " <perm = [" + dimsText(perm) + "]>";
  return modelText(17, typeText(dtype, x) + " X", typeText(dtype, permuted(x, perm)) + " Y", {},
                   "  Y = Transpose" + attr + " (X)");
}

std::vector<Case> transposeCases() {
  struct T {
    Dims x;
    std::vector<int64_t> perm;  // empty: the default, reversed dims
  };
  std::vector<Case> cases;
  for (const T& t : {T{{5, 7}, {}}, T{{5, 7}, {1, 0}}, T{{2, 3, 4}, {}}, T{{2, 3, 4}, {1, 0, 2}},
                     T{{2, 3, 4}, {2, 0, 1}}, T{{2, 3, 4}, {0, 2, 1}}, T{{2, 3, 4, 5}, {}},
                     T{{2, 3, 4, 5}, {0, 2, 1, 3}}, T{{2, 3, 4, 5}, {0, 2, 3, 1}},
                     T{{2, 3, 4, 5}, {0, 3, 1, 2}}, T{{2, 3, 4, 5}, {0, 1, 3, 2}},
                     // Size-1 dims dropped, the rest merged where they stay adjacent.
                     T{{2, 1, 3, 1, 4}, {4, 2, 0, 3, 1}}, T{{1, 6, 1, 5}, {0, 2, 1, 3}},
                     T{{2, 3, 4, 5, 6, 2}, {5, 0, 4, 1, 3, 2}}}) {
    cases.push_back(floatCase("Transpose " + dimsText(t.x) + " perm " +
                                  (t.perm.empty() ? "default" : dimsText(t.perm)),
                              transposeModel(t.x, t.perm), 1, kExact));
  }
  return cases;
}

std::vector<Case> concatSplitCases() {
  std::vector<Case> cases;
  cases.push_back(floatCase("Concat axis 0",
                            modelText(17, "float[2, 3, 4] A, float[1, 3, 4] B", "float[3, 3, 4] Y",
                                      {}, "  Y = Concat <axis = 0> (A, B)"),
                            2, kExact));
  cases.push_back(floatCase(
      "Concat axis 1, three inputs",
      modelText(17, "float[2, 3, 4] A, float[2, 1, 4] B, float[2, 5, 4] C", "float[2, 9, 4] Y", {},
                "  Y = Concat <axis = 1> (A, B, C)"),
      3, kExact));
  cases.push_back(floatCase("Concat last axis",
                            modelText(17, "float[2, 3, 4] A, float[2, 3, 6] B", "float[2, 3, 10] Y",
                                      {}, "  Y = Concat <axis = 2> (A, B)"),
                            2, kExact));
  cases.push_back(floatCase("Concat axis -2",
                            modelText(17, "float[2, 3, 4] A, float[2, 2, 4] B", "float[2, 5, 4] Y",
                                      {}, "  Y = Concat <axis = -2> (A, B)"),
                            2, kExact));
  cases.push_back(floatCase("Concat of an input with itself and an initializer",
                            modelText(17, "float[2, 3] A", "float[2, 8] Y",
                                      {floatInit("W", {2, 2}, -1, 1, 5)},
                                      "  Y = Concat <axis = -1> (A, W, A)"),
                            3, kExact));
  // An empty part copies nothing.
  cases.push_back(floatCase("Concat with an empty input",
                            modelText(17, "float[2, 3, 4] A, float[2, 0, 4] B", "float[2, 3, 4] Y",
                                      {}, "  Y = Concat <axis = 1> (A, B)"),
                            1, kExact));

  cases.push_back(floatCase(
      "Split-13 sizes as an initializer",
      modelText(13, "float[2, 6, 5] X", "float[2, 2, 5] Y0, float[2, 3, 5] Y1, float[2, 1, 5] Y2",
                {intsInit("S", {2, 3, 1})}, "  Y0, Y1, Y2 = Split <axis = 1> (X, S)"),
      3, kExact));
  cases.push_back(floatCase("Split-13 equal parts",
                            modelText(13, "float[2, 3, 8] X", "float[2, 3, 4] Y0, float[2, 3, 4] Y1",
                                      {}, "  Y0, Y1 = Split <axis = 2> (X)"),
                            2, kExact));
  // Only the outputs something reads are copied.
  cases.push_back(floatCase(
      "Split-13 with an unread part",
      modelText(13, "float[2, 6, 5] X", "float[2, 2, 5] Y0, float[2, 1, 5] Y2",
                {intsInit("S", {2, 3, 1})}, "  Y0, Unread, Y2 = Split <axis = 1> (X, S)"),
      2, kExact));
  cases.push_back(floatCase(
      "Split-18 num_outputs, a smaller last part",
      modelText(18, "float[2, 3, 8] X", "float[2, 3, 3] Y0, float[2, 3, 3] Y1, float[2, 3, 2] Y2",
                {}, "  Y0, Y1, Y2 = Split <axis = -1, num_outputs = 3> (X)"),
      3, kExact));
  cases.push_back(floatCase("Split-11 sizes as an attribute",
                            modelText(11, "float[4, 3] X", "float[1, 3] Y0, float[3, 3] Y1", {},
                                      "  Y0, Y1 = Split <axis = 0, split = [1, 3]> (X)"),
                            2, kExact));
  return cases;
}

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

std::string sliceModel(const Dims& x, const Dims& y, const std::vector<int64_t>& starts,
                       const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                       const std::vector<int64_t>& steps, const std::string& dtype = "float") {
  std::vector<std::string> inits = {intsInit("St", starts), intsInit("En", ends)};
  std::string args = "X, St, En";
  if (!axes.empty()) {
    inits.push_back(intsInit("Ax", axes));
    args += ", Ax";
  }
  if (!steps.empty()) {
    inits.push_back(intsInit("Sp", steps));
    args += ", Sp";
  }
  return modelText(13, typeText(dtype, x) + " X", typeText(dtype, y) + " Y", inits,
                   "  Y = Slice (" + args + ")");
}

std::vector<Case> sliceCases() {
  const Dims x = {6, 8, 10};
  std::vector<Case> cases;
  cases.push_back(floatCase("Slice negative start to INT64_MAX",
                            sliceModel(x, {6, 8, 4}, {-4}, {kInt64Max}, {2}, {}), 1, kExact));
  cases.push_back(floatCase("Slice steps 2 and 3, negative end",
                            sliceModel(x, {2, 8, 3}, {1, 0}, {-1, 7}, {0, 2}, {2, 3}), 1, kExact));
  // INT64_MIN, as exporters spell "to the start" for a negative step, and -INT64_MAX, which
  // must mean the same.
  cases.push_back(floatCase("Slice step -1 reverses an axis",
                            sliceModel(x, {6, 8, 10}, {-1}, {kInt64Min}, {1}, {-1}), 1, kExact));
  cases.push_back(floatCase("Slice step -1 to -INT64_MAX",
                            sliceModel(x, {6, 5, 10}, {4}, {-kInt64Max}, {1}, {-1}), 1, kExact));
  cases.push_back(floatCase("Slice step -2 from a clamped start",
                            sliceModel(x, {3, 8, 10}, {100}, {-100}, {0}, {-2}), 1, kExact));
  cases.push_back(floatCase("Slice without axes or steps",
                            sliceModel(x, {4, 4, 10}, {1, 2}, {5, 6}, {}, {}), 1, kExact));
  cases.push_back(floatCase("Slice negative axes",
                            sliceModel(x, {3, 8, 6}, {2, -3}, {-2, kInt64Max}, {-1, -3}, {1, 1}),
                            1, kExact));
  cases.push_back(floatCase("Slice of every axis, mixed steps",
                            sliceModel(x, {2, 3, 5}, {4, 1, 0}, {0, 8, 10}, {0, 1, 2}, {-2, 3, 2}),
                            1, kExact));
  // An empty result launches nothing.
  cases.push_back(floatCase("Slice to nothing", sliceModel(x, {6, 0, 10}, {3}, {3}, {1}, {}), 0,
                            kExact));
  return cases;
}

std::vector<Case> gatherExpandCases() {
  std::vector<Case> cases;
  const std::string table = floatInit("W", {12, 16}, -1, 1, 7);
  // Random int64 inputs are in [0, 10): the gathered axis has 12 rows.
  cases.push_back(floatCase("Gather embedding, indices as an initializer",
                            modelText(17, "float[1] Unused", "float[2, 5, 16] Y",
                                      {table, "int64[2, 5] I = {0, 11, 3, 3, 7, 1, 10, 2, 9, 5}"},
                                      "  Y = Gather <axis = 0> (W, I)"),
                            1, kExact));
  cases.push_back(floatCase("Gather embedding, indices as an input",
                            modelText(17, "int64[3, 4] I", "float[3, 4, 16] Y", {table},
                                      "  Y = Gather (W, I)"),
                            1, kExact));
  cases.push_back(floatCase("Gather axis 1",
                            modelText(17, "float[3, 11, 4] X", "float[3, 4, 4] Y",
                                      {intsInit("I", {0, 10, 5, 5})},
                                      "  Y = Gather <axis = 1> (X, I)"),
                            1, kExact));
  cases.push_back(floatCase("Gather negative indices",
                            modelText(17, "float[3, 11, 4] X", "float[3, 3, 4] Y",
                                      {intsInit("I", {-1, -11, 3})},
                                      "  Y = Gather <axis = 1> (X, I)"),
                            1, kExact));
  cases.push_back(floatCase("Gather axis -1, int32 indices",
                            modelText(17, "float[3, 5, 11] X", "float[3, 5, 3] Y",
                                      {intsInit("I", {-2, 0, 10}, "int32")},
                                      "  Y = Gather <axis = -1> (X, I)"),
                            1, kExact));
  cases.push_back(floatCase("Gather scalar index",
                            modelText(17, "float[1] Unused", "float[16] Y",
                                      {table, "int64 I = {4}"}, "  Y = Gather (W, I)"),
                            1, kExact));

  cases.push_back(floatCase("Expand [3, 1] to [2, 3, 4]",
                            modelText(17, "float[3, 1] X", "float[2, 3, 4] Y",
                                      {intsInit("S", {2, 3, 4})}, "  Y = Expand (X, S)"),
                            1, kExact));
  cases.push_back(floatCase("Expand bidirectionally, [1, 4] by [3, 1]",
                            modelText(17, "float[1, 4] X", "float[3, 4] Y", {intsInit("S", {3, 1})},
                                      "  Y = Expand (X, S)"),
                            1, kExact));
  cases.push_back(floatCase("Expand a middle dim",
                            modelText(17, "float[2, 1, 6] X", "float[2, 5, 6] Y",
                                      {intsInit("S", {2, 5, 6})}, "  Y = Expand (X, S)"),
                            1, kExact));
  cases.push_back(floatCase("Expand to a lower-rank shape",
                            modelText(17, "float[5, 1, 3] X", "float[5, 2, 3] Y",
                                      {intsInit("S", {2, 1})}, "  Y = Expand (X, S)"),
                            1, kExact));
  return cases;
}

// Reshape, Flatten, Squeeze and Unsqueeze after a Relu: the alias adds no launch, so each model
// launches once, with no node on the CPU.
std::vector<Case> aliasCases() {
  const auto relu_then = [](const Dims& x, const Dims& y, const std::string& node,
                            const std::vector<std::string>& inits, const std::string& dtype) {
    return modelText(13, typeText(dtype, x) + " X", typeText(dtype, y) + " Y", inits,
                     "  R = Relu (X)\n  Y = " + node);
  };
  std::vector<Case> cases;
  cases.push_back(floatCase("Reshape {0, -1}",
                            relu_then({2, 3, 4}, {2, 12}, "Reshape (R, S)",
                                      {intsInit("S", {0, -1})}, "float"),
                            1, kExact));
  cases.push_back(floatCase("Reshape {4, 3, 2}",
                            relu_then({2, 3, 4}, {4, 3, 2}, "Reshape (R, S)",
                                      {intsInit("S", {4, 3, 2})}, "float"),
                            1, kExact));
  cases.push_back(floatCase("Flatten axis 2",
                            relu_then({2, 3, 4, 5}, {6, 20}, "Flatten <axis = 2> (R)", {}, "float"),
                            1, kExact));
  cases.push_back(floatCase("Flatten default axis",
                            relu_then({2, 3, 4, 5}, {2, 60}, "Flatten (R)", {}, "float"), 1,
                            kExact));
  cases.push_back(floatCase("Squeeze axes {1}",
                            relu_then({2, 1, 4}, {2, 4}, "Squeeze (R, A)", {intsInit("A", {1})},
                                      "float"),
                            1, kExact));
  cases.push_back(floatCase("Squeeze every 1",
                            relu_then({1, 3, 1, 4}, {3, 4}, "Squeeze (R)", {}, "float"), 1,
                            kExact));
  cases.push_back(floatCase("Unsqueeze axes {0, 3}",
                            relu_then({2, 3, 4}, {1, 2, 3, 1, 4}, "Unsqueeze (R, A)",
                                      {intsInit("A", {0, 3})}, "float"),
                            1, kExact));
  cases.push_back(floatCase("Unsqueeze axes {-1}",
                            relu_then({2, 3, 4}, {2, 3, 4, 1}, "Unsqueeze (R, A)",
                                      {intsInit("A", {-1})}, "float"),
                            1, kExact));
  // An attention head split: the Transpose is the only copy.
  cases.push_back(floatCase(
      "Reshape, Transpose, Reshape",
      modelText(13, "float[2, 5, 24] X", "float[8, 5, 6] Y",
                {intsInit("S", {2, 5, 4, 6}), intsInit("S2", {8, 5, 6})},
                "  R = Relu (X)\n  H = Reshape (R, S)\n  T = Transpose <perm = [0, 2, 1, 3]> (H)\n"
                "  Y = Reshape (T, S2)"),
      2, kExact));
  for (const char* dtype : {"float16", "bfloat16"}) {
    cases.push_back(narrowCase(dtype, std::string("Reshape ") + dtype,
                               relu_then({2, 3, 4}, {2, 12}, "Reshape (R, S)",
                                         {intsInit("S", {0, -1})}, dtype),
                               1));
    cases.back().nmse = kExact;
  }
  return cases;
}

std::vector<Case> movementHalfCases(const std::string& d = "float16") {
  const auto t = [&d](const Dims& dims) { return typeText(d, dims); };
  std::vector<Case> cases = {
      narrowCase(d, "Transpose " + d + " [0, 2, 1, 3]",
                 transposeModel({2, 3, 4, 5}, {0, 2, 1, 3}, d), 1),
      narrowCase(d, "Transpose " + d + " [0, 2, 3, 1]",
                 transposeModel({2, 3, 4, 5}, {0, 2, 3, 1}, d), 1),
      narrowCase(d, "Concat " + d + " axis 1",
                 modelText(17, t({2, 3, 4}) + " A, " + t({2, 5, 4}) + " B", t({2, 8, 4}) + " Y", {},
                           "  Y = Concat <axis = 1> (A, B)"),
                 2),
      narrowCase(d, "Split-18 " + d,
                 modelText(18, t({2, 3, 8}) + " X",
                           t({2, 3, 3}) + " Y0, " + t({2, 3, 3}) + " Y1, " + t({2, 3, 2}) + " Y2",
                           {}, "  Y0, Y1, Y2 = Split <axis = -1, num_outputs = 3> (X)"),
                 3),
      narrowCase(d, "Slice " + d + " step -1",
                 sliceModel({6, 8, 10}, {6, 8, 10}, {-1}, {-kInt64Max}, {1}, {-1}, d), 1),
      // The table as an input: Y's dtype is inferred from it when the text is parsed, before
      // a float initializer would become float16 or bfloat16.
      narrowCase(d, "Gather " + d + " embedding",
                 modelText(17, t({12, 16}) + " W, int64[3, 4] I", t({3, 4, 16}) + " Y", {},
                           "  Y = Gather (W, I)"),
                 1),
      narrowCase(d, "Expand " + d,
                 modelText(17, t({3, 1}) + " X", t({2, 3, 4}) + " Y", {intsInit("S", {2, 3, 4})},
                           "  Y = Expand (X, S)"),
                 1),
  };
  for (Case& c : cases) c.nmse = kExact;
  return cases;
}

// ---- Rows: softmax, norms, reductions ------------------------------------------------------

std::vector<Case> softmaxCases(const std::string& dtype = "float") {
  struct S {
    int64_t opset;
    Dims x;
    std::string axis;  // "" for the default
  };
  // Rows of 7, 768 and 5000 (each block size of the row kernel); an inner axis (the strided
  // kernel); opset 11's axis flattens every dim from it on into the row.
  static const std::vector<S> float_shapes = {
      {13, {3, 7}, "-1"},    {13, {4, 768}, "-1"},    {13, {3, 5000}, "-1"},
      {13, {2, 7, 5}, "1"},  {13, {2, 768, 3}, "1"},  {13, {2, 5000, 2}, "1"},
      {13, {4, 3, 5}, "0"},  {13, {2, 3, 7}, ""},     {11, {2, 3, 5}, "1"},
      {11, {2, 4, 192}, "1"}, {11, {2, 5, 1000}, ""}, {11, {2, 3, 5}, "-2"}};
  static const std::vector<S> half_shapes = {
      {13, {4, 768}, "-1"}, {13, {2, 7, 5}, "1"}, {13, {3, 5000}, "-1"}};
  const std::vector<S>& shapes = dtype == "float" ? float_shapes : half_shapes;
  std::vector<Case> cases;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (const S& s : shapes) {
      const std::string attr = s.axis.empty() ? "" : " <axis = " + s.axis + ">";
      const std::string text = modelText(s.opset, typeText(dtype, s.x) + " X",
                                         typeText(dtype, s.x) + " Y", {},
                                         "  Y = " + std::string(op) + attr + " (X)");
      const std::string name = fmt::format("{}-{} {} {} axis {}", op, s.opset, dtype,
                                           dimsText(s.x), s.axis.empty() ? "default" : s.axis);
      cases.push_back(dtype == "float" ? floatCase(name, text, 1)
                                       : narrowCase(dtype, name, text, 1));
    }
  }
  return cases;
}

std::vector<Case> layerNormCases() {
  std::vector<Case> cases;
  const std::string x = "float[2, 7, 64] X", y = "float[2, 7, 64] Y";
  const std::string s64 = floatInit("S", {64}, 0.5, 1.5, 11), b64 = floatInit("B", {64}, -0.5, 0.5, 12);
  const std::string s448 = floatInit("S", {7, 64}, 0.5, 1.5, 13),
                    b448 = floatInit("B", {7, 64}, -0.5, 0.5, 14);
  cases.push_back(floatCase("LayerNormalization axis -1",
                            modelText(17, x, y, {s64, b64},
                                      "  Y = LayerNormalization <axis = -1, epsilon = 0.001> "
                                      "(X, S, B)"),
                            1));
  cases.push_back(floatCase("LayerNormalization defaults",
                            modelText(17, x, y, {s64, b64}, "  Y = LayerNormalization (X, S, B)"),
                            1));
  cases.push_back(floatCase("LayerNormalization axis 1",
                            modelText(17, x, y, {s448, b448},
                                      "  Y = LayerNormalization <axis = 1> (X, S, B)"),
                            1));
  cases.push_back(floatCase("LayerNormalization without B",
                            modelText(17, x, y, {s64}, "  Y = LayerNormalization (X, S)"), 1));
  cases.push_back(floatCase(
      "LayerNormalization with Mean and InvStdDev",
      modelText(17, x, y + ", float[2, 7, 1] M, float[2, 7, 1] R", {s64, b64},
                "  Y, M, R = LayerNormalization <axis = -1, epsilon = 0.001> (X, S, B)"),
      1));
  cases.push_back(floatCase(
      "LayerNormalization axis 1 with Mean and InvStdDev, no B",
      modelText(17, x, y + ", float[2, 1, 1] M, float[2, 1, 1] R", {s448},
                "  Y, M, R = LayerNormalization <axis = 1> (X, S)"),
      1));
  cases.push_back(floatCase(
      "LayerNormalization InvStdDev only",
      modelText(17, x, y + ", float[2, 7, 1] R", {s64, b64},
                "  Y, , R = LayerNormalization (X, S, B)"),
      1));
  // Rows of 768 and 4100 (the larger block sizes).
  cases.push_back(floatCase("LayerNormalization rows of 768",
                            modelText(17, "float[3, 768] X", "float[3, 768] Y",
                                      {floatInit("S", {768}, 0.5, 1.5, 15),
                                       floatInit("B", {768}, -0.5, 0.5, 16)},
                                      "  Y = LayerNormalization (X, S, B)"),
                            1));
  cases.push_back(floatCase("LayerNormalization rows of 4100",
                            modelText(17, "float[2, 4100] X", "float[2, 4100] Y",
                                      {floatInit("S", {4100}, 0.5, 1.5, 17),
                                       floatInit("B", {4100}, -0.5, 0.5, 18)},
                                      "  Y = LayerNormalization (X, S, B)"),
                            1));
  // A mean of 100 beside a spread of 0.6: the two-pass variance keeps its digits. The GPU's
  // float mean is off by about 1e-5 of the spread, an nmse near 1e-10.
  cases.push_back(floatCase("LayerNormalization of rows with a large mean",
                            modelText(17, x, y, {scalarInit("C", 100), s64, b64},
                                      "  T = Add (X, C)\n  Y = LayerNormalization (T, S, B)"),
                            2));
  return cases;
}

// fusectl LayerNorm, RMSNorm, SkipLayerNorm and SkipRMSNorm (axis and epsilon both required).
std::vector<Case> fusedNormCases(const std::string& dtype = "float") {
  const bool half = dtype != "float";
  const std::string x = typeText(dtype, {2, 7, 64}) + " X", y = typeText(dtype, {2, 7, 64}) + " Y";
  const std::string sum = ", " + typeText(dtype, {2, 7, 64}) + " Sum";
  const std::string s64 = floatInit("S", {64}, 0.5, 1.5, 21), b64 = floatInit("B", {64}, -0.5, 0.5, 22);
  const std::string s448 = floatInit("S", {7, 64}, 0.5, 1.5, 23),
                    b448 = floatInit("B", {7, 64}, -0.5, 0.5, 24);
  const std::string attrs = "<axis = -1, epsilon = 0.00001>", attrs1 = "<axis = 1, epsilon = 0.001>";
  struct N {
    std::string name, inputs, outputs;
    std::vector<std::string> inits;
    std::string node;
  };
  std::vector<N> nodes = {
      {"LayerNorm axis -1", x, y, {s64, b64}, "Y = fusectl.LayerNorm " + attrs + " (X, S, B)"},
      {"LayerNorm axis 1", x, y, {s448, b448}, "Y = fusectl.LayerNorm " + attrs1 + " (X, S, B)"},
      {"RMSNorm axis -1", x, y, {s64}, "Y = fusectl.RMSNorm " + attrs + " (X, S)"},
      {"RMSNorm weight-free Scale [1]", x, y, {floatInit("S", {1}, 1.25, 1.25, 0)},
       "Y = fusectl.RMSNorm " + attrs + " (X, S)"},
      {"RMSNorm axis 1, Scale [1]", x, y, {floatInit("S", {1}, 0.75, 0.75, 0)},
       "Y = fusectl.RMSNorm " + attrs1 + " (X, S)"},
      {"SkipLayerNorm full skip with Sum", x + ", " + typeText(dtype, {2, 7, 64}) + " K", y + sum,
       {s64, b64}, "Y, Sum = fusectl.SkipLayerNorm " + attrs + " (X, K, S, B)"},
      {"SkipLayerNorm full skip", x + ", " + typeText(dtype, {2, 7, 64}) + " K", y, {s64, b64},
       "Y = fusectl.SkipLayerNorm " + attrs + " (X, K, S, B)"},
      {"SkipLayerNorm bias skip with Sum", x, y + sum,
       {floatInit("K", {64}, -1, 1, 25), s64, b64},
       "Y, Sum = fusectl.SkipLayerNorm " + attrs + " (X, K, S, B)"},
      {"SkipLayerNorm axis 1, row skip", x, y, {floatInit("K", {7, 64}, -1, 1, 26), s448, b448},
       "Y = fusectl.SkipLayerNorm " + attrs1 + " (X, K, S, B)"},
      {"SkipRMSNorm full skip with Sum", x + ", " + typeText(dtype, {2, 7, 64}) + " K", y + sum,
       {s64}, "Y, Sum = fusectl.SkipRMSNorm " + attrs + " (X, K, S)"},
      {"SkipRMSNorm bias skip", x, y, {floatInit("K", {64}, -1, 1, 27), s64},
       "Y = fusectl.SkipRMSNorm " + attrs + " (X, K, S)"},
      {"SkipRMSNorm bias skip with Sum, Scale [1]", x, y + sum,
       {floatInit("K", {64}, -1, 1, 28), floatInit("S", {1}, 1.0, 1.0, 0)},
       "Y, Sum = fusectl.SkipRMSNorm " + attrs + " (X, K, S)"},
  };
  if (!half) {
    nodes.push_back({"LayerNorm rows of 768", "float[3, 768] X", "float[3, 768] Y",
                     {floatInit("S", {768}, 0.5, 1.5, 29), floatInit("B", {768}, -0.5, 0.5, 30)},
                     "Y = fusectl.LayerNorm " + attrs + " (X, S, B)"});
    nodes.push_back({"SkipRMSNorm rows of 4100 with Sum", "float[2, 4100] X, float[2, 4100] K",
                     "float[2, 4100] Y, float[2, 4100] Sum", {floatInit("S", {4100}, 0.5, 1.5, 31)},
                     "Y, Sum = fusectl.SkipRMSNorm " + attrs + " (X, K, S)"});
  }
  std::vector<Case> cases;
  for (const N& n : nodes) {
    const std::string text = modelText(17, n.inputs, n.outputs, n.inits, "  " + n.node);
    const std::string name = "fusectl " + n.name + " " + dtype;
    // The CPU kernels are float32 only.
    cases.push_back(half ? narrowCase(dtype, name, text, 1, Reference::FloatTwin)
                         : floatCase(name, text, 1));
  }
  return cases;
}

std::vector<Case> batchNormCases(const std::string& dtype = "float") {
  const auto params = [](int64_t c) {
    return std::vector<std::string>{
        floatInit("Sc", {c}, 0.5, 1.5, 41), floatInit("Bi", {c}, -0.5, 0.5, 42),
        floatInit("Me", {c}, -0.3, 0.3, 43), floatInit("Va", {c}, 0.5, 1.5, 44)};
  };
  std::vector<Case> cases;
  for (const Dims& x : {Dims{2, 8, 5, 5}, Dims{4, 8}, Dims{2, 8, 9}}) {
    const std::string text = modelText(15, typeText(dtype, x) + " X", typeText(dtype, x) + " Y",
                                       params(8),
                                       "  Y = BatchNormalization <epsilon = 0.001> "
                                       "(X, Sc, Bi, Me, Va)");
    const std::string name = "BatchNormalization-15 " + dtype + " " + dimsText(x);
    cases.push_back(dtype == "float" ? floatCase(name, text, 1)
                                     : narrowCase(dtype, name, text, 1));
  }
  return cases;
}

Dims reducedDims(const Dims& x, std::vector<int64_t> axes, bool keepdims) {
  if (axes.empty())
    for (size_t d = 0; d < x.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  Dims out;
  for (size_t d = 0; d < x.size(); ++d) {
    bool reduced = false;
    for (int64_t a : axes)
      reduced = reduced || (a < 0 ? a + static_cast<int64_t>(x.size()) : a) == static_cast<int64_t>(d);
    if (!reduced)
      out.push_back(x[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

// `op` over `axes` ({} for all) at `opset`, the axes as an attribute or, when `axes_input`, as
// an initializer input.
std::string reduceModel(const std::string& op, int64_t opset, const Dims& x,
                        const std::vector<int64_t>& axes, bool keepdims, bool axes_input,
                        const std::string& dtype = "float") {
  std::vector<std::string> attrs;
  if (!axes.empty() && !axes_input) attrs.push_back("axes = [" + dimsText(axes) + "]");
  attrs.push_back(fmt::format("keepdims = {}", keepdims ? 1 : 0));
  std::string attr_text;
  for (size_t i = 0; i < attrs.size(); ++i) attr_text += (i ? ", " : "") + attrs[i];
  std::vector<std::string> inits;
  std::string args = "X";
  if (axes_input && !axes.empty()) {
    inits.push_back(intsInit("Ax", axes));
    args += ", Ax";
  }
  return modelText(opset, typeText(dtype, x) + " X",
                   typeText(dtype, reducedDims(x, axes, keepdims)) + " Y", inits,
                   "  Y = " + op + " <" + attr_text + "> (" + args + ")");
}

std::vector<Case> reduceCases() {
  struct R {
    Dims x;
    std::vector<int64_t> axes;
  };
  // The last axis (one block per row: rows of 37 and 5000), a middle axis and {0, 2} (one thread
  // per output over a strided walk), and every axis.
  const std::vector<R> shapes = {{{4, 6, 37}, {-1}}, {{3, 4, 5000}, {2}}, {{4, 6, 5}, {1}},
                                 {{4, 6, 5}, {0, 2}}, {{4, 6, 5}, {}}, {{4, 6, 5}, {1, 2}}};
  std::vector<Case> cases;
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}) {
    for (const R& r : shapes) {
      for (const bool keepdims : {true, false}) {
        const std::string name = fmt::format("{}-17 {} axes {{{}}} keepdims {}", op, dimsText(r.x),
                                             dimsText(r.axes), keepdims ? 1 : 0);
        // ReduceSum takes its axes as an input from opset 13.
        const bool input = std::string(op) == "ReduceSum";
        cases.push_back(floatCase(name, reduceModel(op, 17, r.x, r.axes, keepdims, input), 1));
      }
    }
  }
  // The axes input of ReduceSum (13) and the other three (18).
  cases.push_back(floatCase("ReduceSum-13 axes input {1}",
                            reduceModel("ReduceSum", 13, {4, 6, 5}, {1}, true, true), 1));
  cases.push_back(floatCase("ReduceSum-13 axes input {0, 2}",
                            reduceModel("ReduceSum", 13, {4, 6, 5}, {0, 2}, false, true), 1));
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin"}) {
    cases.push_back(floatCase(std::string(op) + "-18 axes input {-1}",
                              reduceModel(op, 18, {4, 6, 37}, {-1}, true, true), 1));
    cases.push_back(floatCase(std::string(op) + "-18 axes input {0, 2}",
                              reduceModel(op, 18, {4, 6, 5}, {0, 2}, false, true), 1));
    cases.push_back(floatCase(std::string(op) + "-18 no axes",
                              reduceModel(op, 18, {4, 6, 5}, {}, false, true), 1));
  }
  // noop_with_empty_axes: without axes the input passes through (an alias: only the Mul
  // launches); with an empty axes tensor too.
  for (const int64_t opset : {13, 18}) {
    const char* op = opset == 13 ? "ReduceSum" : "ReduceMean";
    cases.push_back(floatCase(
        fmt::format("{}-{} noop_with_empty_axes", op, opset),
        modelText(opset, "float[4, 6, 5] X", "float[4, 6, 5] Y", {scalarInit("K", 4)},
                  fmt::format("  T = Mul (X, K)\n  Y = {} <noop_with_empty_axes = 1> (T)", op)),
        1));
    cases.push_back(floatCase(
        fmt::format("{}-{} noop_with_empty_axes, empty axes input", op, opset),
        modelText(opset, "float[4, 6, 5] X", "float[4, 6, 5] Y",
                  {scalarInit("K", 4), "int64[0] Ax = {}"},
                  fmt::format("  T = Mul (X, K)\n  Y = {} <noop_with_empty_axes = 1> (T, Ax)", op)),
        1));
  }
  cases.push_back(floatCase("ReduceSum-13 empty axes reduce everything",
                            modelText(13, "float[4, 6, 5] X", "float[1, 1, 1] Y",
                                      {"int64[0] Ax = {}"}, "  Y = ReduceSum (X, Ax)"),
                            1));
  return cases;
}

std::vector<Case> rowsHalfCases(const std::string& d = "float16") {
  std::vector<Case> cases = softmaxCases(d);
  for (Case& c : batchNormCases(d)) cases.push_back(c);
  const std::string x = typeText(d, {2, 7, 64}) + " X", y = typeText(d, {2, 7, 64}) + " Y";
  cases.push_back(narrowCase(
      d, "LayerNormalization " + d + " with Mean and InvStdDev",
      modelText(17, x, y + ", float[2, 7, 1] M, float[2, 7, 1] R",
                {floatInit("S", {64}, 0.5, 1.5, 11), floatInit("B", {64}, -0.5, 0.5, 12)},
                "  Y, M, R = LayerNormalization (X, S, B)"),
      1));
  cases.push_back(narrowCase(d, "LayerNormalization " + d + " axis 1",
                             modelText(17, x, y, {floatInit("S", {7, 64}, 0.5, 1.5, 13)},
                                       "  Y = LayerNormalization <axis = 1> (X, S)"),
                             1));
  cases.push_back(narrowCase(d, "ReduceMean " + d + " last axis",
                             reduceModel("ReduceMean", 17, {3, 4, 5000}, {-1}, false, false, d),
                             1));
  cases.push_back(narrowCase(d, "ReduceSum " + d + " middle axis",
                             reduceModel("ReduceSum", 13, {4, 6, 5}, {1}, true, true, d), 1));
  cases.push_back(narrowCase(d, "ReduceMax " + d + " axes {0, 2}",
                             reduceModel("ReduceMax", 17, {4, 6, 5}, {0, 2}, false, false, d), 1));
  cases.push_back(narrowCase(d, "ReduceMin " + d + " last axis",
                             reduceModel("ReduceMin", 18, {4, 6, 37}, {-1}, true, true, d), 1));
  for (Case& c : fusedNormCases(d)) cases.push_back(c);
  return cases;
}

// A float Constant (the CUDA kernel uploads it once and keeps it) added to X, and returned as a
// graph output of its own.
std::string constantModel() {
  return modelText(17, "float[3, 4] X", "float[3, 4] Y, float[4] K, float[3, 4] Z", {},
                   "  K = Constant <value = float[4] {1.5, -2, 0.25, 3}> ()\n"
                   "  Y = Add (X, K)\n"
                   "  F = Constant <value_float = 0.5> ()\n"
                   "  Z = Mul (X, F)");
}

std::vector<Case> constantCases() {
  return {floatCase("Constant", constantModel(), 2, kExact)};
}

// Every case, for the tests that need no GPU.
std::vector<Case> allCases() {
  std::vector<Case> all;
  for (const auto& group :
       {unaryCases(), unaryHalfCases(), binaryCases(), binaryHalfCases(), whereCastCases(),
        transposeCases(), concatSplitCases(), sliceCases(), gatherExpandCases(), aliasCases(),
        movementHalfCases(), softmaxCases(), layerNormCases(), fusedNormCases(), batchNormCases(),
        reduceCases(), rowsHalfCases(), constantCases(), unaryHalfCases("bfloat16"),
        binaryHalfCases("bfloat16"), movementHalfCases("bfloat16"), rowsHalfCases("bfloat16")}) {
    all.insert(all.end(), group.begin(), group.end());
  }
  return all;
}

}  // namespace

// ---- Without a GPU -------------------------------------------------------------------------

TEST_CASE("cuda kernels: the ops, opsets and dtypes these tests use are registered", "[cuda]") {
  const KernelRegistry& r = cudaKernelRegistry();
  if (!fusectl::cuda::builtWithCuda()) {
    CHECK(r.find("", "Relu", 17, DType::Float, Device::Cuda) == nullptr);
    return;
  }
  struct Entry {
    const char* domain;
    const char* op;
    int64_t opset;
  };
  const std::vector<Entry> floats = {
      {"", "Relu", 17}, {"", "Sigmoid", 17}, {"", "Tanh", 17}, {"", "Exp", 17}, {"", "Log", 17},
      {"", "Sqrt", 17}, {"", "Neg", 17}, {"", "Abs", 17}, {"", "Erf", 17}, {"", "Reciprocal", 17},
      {"", "Floor", 17}, {"", "Ceil", 17}, {"", "Sin", 17}, {"", "Cos", 17}, {"", "Softplus", 17},
      {"", "Softsign", 17}, {"", "HardSwish", 17}, {"", "LeakyRelu", 17}, {"", "Elu", 17},
      {"", "Selu", 17}, {"", "HardSigmoid", 17}, {"", "Identity", 17}, {"", "Clip", 6},
      {"", "Clip", 13}, {"", "Gelu", 20}, {"fusectl", "Gelu", 1}, {"fusectl", "GeluTanh", 1},
      {"fusectl", "QuickGelu", 1}, {"fusectl", "SwiGLU", 1}, {"", "Add", 17}, {"", "Sub", 17},
      {"", "Mul", 17}, {"", "Div", 17}, {"", "Pow", 17}, {"", "Max", 17}, {"", "Min", 17},
      {"", "PRelu", 17}, {"", "Cast", 17}, {"", "CastLike", 17}, {"", "Transpose", 17},
      {"", "Concat", 17}, {"", "Split", 11}, {"", "Split", 13}, {"", "Split", 18},
      {"", "Slice", 13}, {"", "Gather", 17}, {"", "Expand", 17}, {"", "Reshape", 13},
      {"", "Flatten", 13}, {"", "Squeeze", 13}, {"", "Unsqueeze", 13}, {"", "Softmax", 11},
      {"", "Softmax", 13}, {"", "LogSoftmax", 11}, {"", "LogSoftmax", 13},
      {"", "LayerNormalization", 17}, {"fusectl", "LayerNorm", 1}, {"fusectl", "RMSNorm", 1},
      {"fusectl", "SkipLayerNorm", 1}, {"fusectl", "SkipRMSNorm", 1},
      {"", "BatchNormalization", 15}, {"", "ReduceMean", 17}, {"", "ReduceMean", 18},
      {"", "ReduceSum", 13}, {"", "ReduceMax", 17}, {"", "ReduceMax", 18}, {"", "ReduceMin", 17},
      {"", "ReduceMin", 18}, {"", "Constant", 17}};
  for (const Entry& e : floats) {
    for (DType t : {DType::Float, DType::Float16, DType::BFloat16}) {
      INFO(e.domain << "::" << e.op << "-" << e.opset << " " << dtypeName(t));
      const KernelInfo* k = r.find(e.domain, e.op, e.opset, t, Device::Cuda);
      REQUIRE(k != nullptr);
      CHECK(k->device == Device::Cuda);
    }
  }
  // Where is chosen by its bool condition.
  CHECK(r.find("", "Where", 17, DType::Bool, Device::Cuda) != nullptr);
  // What the cases expect to run on the CPU, or not at all on the GPU: comparisons, and integer
  // data (shape arithmetic), whose Cast or Gather stays on the host.
  CHECK(r.find("", "Greater", 17, DType::Float, Device::Cuda) == nullptr);
  CHECK(r.find("", "Cast", 17, DType::Int64, Device::Cuda) == nullptr);
  CHECK(r.find("", "Gather", 17, DType::Int64, Device::Cuda) == nullptr);
  CHECK(r.find("", "ReduceSum", 13, DType::Int64, Device::Cuda) == nullptr);
  // The opsets whose semantics the kernels do not implement: PRelu before 7 (a per-channel
  // 1-D slope), Max before 8 (no broadcast), LayerNormalization before it existed.
  CHECK(r.find("", "PRelu", 6, DType::Float, Device::Cuda) == nullptr);
  CHECK(r.find("", "Max", 7, DType::Float, Device::Cuda) == nullptr);
  CHECK(r.find("", "LayerNormalization", 16, DType::Float, Device::Cuda) == nullptr);
  CHECK(r.find("", "Gelu", 19, DType::Float, Device::Cuda) == nullptr);
}

TEST_CASE("cuda kernels: every case parses, runs on the CPU and places as expected", "[cuda]") {
  // Catches a typo in a model, an output that is not finite (a Div or Pow the inputs blow up),
  // or a node the CUDA backend would leave to the CPU, before a GPU run.
  const std::vector<Case> cases = allCases();
  CHECK(cases.size() > 300);
  for (const Case& c : cases) checkCaseWithoutGpu(c);
}

TEST_CASE("cuda kernels: the cases' accepts predicates decline what they must", "[cuda]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  // Cast to a type the kernel does not write, Where over integers, CastLike to double: each is
  // declined by its `accepts` and runs on the CPU instead of failing on the device.
  const std::vector<std::pair<std::string, std::string>> declined = {
      {"Cast to double",
       modelText(17, "float[3, 4] X", "double[3, 4] Y", {}, "  Y = Cast <to = 11> (X)")},
      {"Where over int64",
       modelText(17, "bool[3, 4] C, int64[3, 4] X, int64[3, 4] Z", "int64[3, 4] Y", {},
                 "  Y = Where (C, X, Z)")},
      {"CastLike to double",
       modelText(17, "float[3, 4] X, double[1] L", "double[3, 4] Y", {}, "  Y = CastLike (X, L)")},
  };
  for (const auto& [name, text] : declined) {
    INFO(name << "\n" << text);
    const auto model = parseModelText(text, name);
    CHECK(fusectl::testing::cudaFallbackNodes(*model).size() == 1);
    // And the CPU runs it.
    CHECK_NOTHROW(runModel(*model, makeRandomInputs(*model->graph, 7)));
  }
}

// ---- On a GPU ------------------------------------------------------------------------------

TEST_CASE("cuda kernels: unary ops and activations, float32", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(unaryCases());
}

TEST_CASE("cuda kernels: unary ops and activations, float16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(unaryHalfCases());
}

TEST_CASE("cuda kernels: unary ops and activations, bfloat16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(unaryHalfCases("bfloat16"));
}

TEST_CASE("cuda kernels: binary ops over every broadcast", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(binaryCases());
  runCases(binaryHalfCases());
  runCases(binaryHalfCases("bfloat16"));
}

TEST_CASE("cuda kernels: Where, Cast and CastLike", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(whereCastCases());
}

TEST_CASE("cuda kernels: Transpose", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(transposeCases());
}

TEST_CASE("cuda kernels: Concat and Split", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(concatSplitCases());
}

TEST_CASE("cuda kernels: Slice", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(sliceCases());
}

TEST_CASE("cuda kernels: Gather and Expand", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(gatherExpandCases());
}

TEST_CASE("cuda kernels: Reshape, Flatten, Squeeze and Unsqueeze alias without a launch",
          "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(aliasCases());
}

TEST_CASE("cuda kernels: data movement in float16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(movementHalfCases());
}

TEST_CASE("cuda kernels: data movement in bfloat16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(movementHalfCases("bfloat16"));
}

TEST_CASE("cuda kernels: Softmax and LogSoftmax", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(softmaxCases());
}

TEST_CASE("cuda kernels: LayerNormalization", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(layerNormCases());
}

TEST_CASE("cuda kernels: fusectl LayerNorm, RMSNorm and their skip variants", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(fusedNormCases());
}

TEST_CASE("cuda kernels: BatchNormalization and reductions", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(batchNormCases());
  runCases(reduceCases());
}

TEST_CASE("cuda kernels: softmax, norms and reductions in float16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(rowsHalfCases());
}

TEST_CASE("cuda kernels: softmax, norms and reductions in bfloat16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(rowsHalfCases("bfloat16"));
}

TEST_CASE("cuda kernels: a Constant is uploaded once and served on every run", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  runCases(constantCases());
  const auto model = parseModelText(constantModel(), "constant");
  ExecutorOptions options;
  options.backend = &cudaBackend();
  Executor executor(*model, options);
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    // Other inputs each run, so that a stale output would show.
    const auto inputs = makeRandomInputs(*model->graph, 100 + static_cast<uint64_t>(run));
    const auto want = runModel(*model, inputs);
    ExecutionStats stats;
    const auto got = executor.run(inputs, &stats);
    CHECK(stats.fallback_nodes == 0);
    CHECK(stats.device_launches == 2);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("output " << want[i].name);
      REQUIRE(got[i].tensor.dims() == want[i].tensor.dims());
      CHECK(normalizedMse(got[i].tensor, want[i].tensor) == 0);
    }
  }
}

TEST_CASE("cuda kernels: the testdata models end to end, as exported and after -O3", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry :
       std::filesystem::directory_iterator(FUSECTL_SOURCE_DIR "/testdata/models")) {
    if (entry.is_regular_file() && entry.path().extension() == ".onnx")
      paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  REQUIRE(paths.size() >= 9);
  for (const auto& path : paths) {
    INFO(path.filename().string());
    auto model = loadModel(path.string());
    const size_t nodes_before = model->graph->numNodes();
    const CudaRun exported = checkCudaAgainstCpu(*model, 1e-6, /*fallbacks_allowed=*/true);
    passes::OptimizeRequest request;
    request.level = 3;
    passes::optimize(*model, request);
    const size_t nodes_after = model->graph->numNodes();
    const CudaRun fused = checkCudaAgainstCpu(*model, 1e-6, /*fallbacks_allowed=*/true);
    INFO("nodes " << nodes_before << " -> " << nodes_after << ", launches "
                  << exported.stats.device_launches << " -> " << fused.stats.device_launches
                  << ", CPU nodes " << exported.stats.fallback_nodes << " -> "
                  << fused.stats.fallback_nodes);
    CHECK(exported.stats.device_launches > 0);
    if (nodes_after < nodes_before)
      CHECK(fused.stats.device_launches < exported.stats.device_launches);
  }
}
