// The CUDA MatMul, Gemm, FusedGemm and FusedMatMul kernels (libkernels/cuda/gemm_cublaslt.cpp)
// against the CPU kernels, by normalised MSE: float32 to 1e-7 (1e-6 for K >= 1024, where the
// two sum in different orders), float16 to 1e-5, bfloat16 to 1e-4. Where a case pins down
// which path the kernel takes, the launch count says it: one cuBLASLt call per strided batch,
// plus one applyEpilogue for what cuBLASLt's epilogues cannot compute exactly.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_case.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/kernels/cuda_backend.h"
#include "fusectl/kernels/cuda_device.h"

using namespace fusectl;
using namespace fusectl::kernels;
using fusectl::testing::checkCudaAgainstCpu;
using fusectl::testing::cudaDeviceOrSkip;
using fusectl::testing::CudaRun;

namespace {

constexpr double kFloatNmse = 1e-7;
constexpr double kLongSumFloatNmse = 1e-6;  // K >= 1024
constexpr double kHalfNmse = 1e-5;
// Both backends take the same bfloat16 inputs and sum in float32, so they differ by the float32
// order of summation, then by Y's rounding to bfloat16 (8 significant bits: up to 2^-8
// relative, an nmse up to about 5e-6 for a whole tensor). Where the GPU rounds twice (the
// product is stored before applyEpilogue adds a broadcast C or an activation) and the CPU once,
// that doubles at most: 1e-4 keeps a 10x margin and still catches a wrong weight or index
// (which costs an nmse near 1).
constexpr double kBFloat16Nmse = 1e-4;

using Dims = std::vector<int64_t>;

std::string typeText(const std::string& dtype, const Dims& dims) {
  std::string out = dtype + "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// ONNX's textual syntax has no float16 literals: initializers are spelled as float zeros and
// filled by withRandomInitializers.
std::string zeroInitializer(const std::string& name, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::string values;
  for (int64_t i = 0; i < n; ++i) values += i ? ", 0" : "0";
  return typeText("float", dims) + " " + name + " = {" + values + "}";
}

// A graph named g of one node: `inputs` and `outputs` as the signature spells them,
// `initializers` ("" for none) between < and >.
std::string oneNodeModel(const std::string& inputs, const std::string& outputs,
                         const std::string& initializers, const std::string& node) {
  return fmt::format(R"(<ir_version: 8, opset_import: ["" : 17, "fusectl" : 1]>
g ({}) => ({}){}
{{
  {}
}}
)",
                     inputs, outputs, initializers.empty() ? "" : "\n<\n  " + initializers + "\n>",
                     node);
}

// Parses `text` and gives every initializer seeded random values of `dtype`.
std::unique_ptr<Model> withRandomInitializers(const std::string& text, DType dtype) {
  auto model = parseModelText(text, "<cuda gemm test>");
  for (Value* v : model->graph->initializers()) {
    v->type.dtype = dtype;
    v->setInitializer(makeRandomInput(*v, 11).toTensor());
  }
  return model;
}

// Runs `text` (its initializers random, of `initializer_dtype`) on both backends. The textual
// syntax reads `float[]` as an unknown rank, so a scalar input needs its rank 0 given here.
CudaRun checkText(const std::string& text, double nmse, DType initializer_dtype = DType::Float,
                  const std::vector<std::string>& scalar_inputs = {}) {
  INFO(text);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const std::string& name : scalar_inputs) shapes.emplace_back(name, Shape::ofStatic({}));
  return checkCudaAgainstCpu(*withRandomInitializers(text, initializer_dtype), nmse, false, 7,
                             shapes);
}

// A float attribute must be spelled with a point, or the parser reads an int.
std::string floatText(float v) { return fmt::format("{:.4f}", v); }

// numpy matmul's output dims (1-D operands promoted and their dim dropped again).
Dims matmulDims(Dims a, Dims b) {
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  const size_t rank = std::max(a.size(), b.size());
  Dims out(rank - 2, 1);
  for (size_t i = 0; i + 2 < rank; ++i) {
    const size_t pa = rank - a.size(), pb = rank - b.size();
    const int64_t x = i >= pa ? a[i - pa] : 1, y = i >= pb ? b[i - pb] : 1;
    out[i] = x == 1 ? y : x;
  }
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  return out;
}

CudaRun checkMatMul(const Dims& a, const Dims& b, const std::string& dtype = "float",
                    double nmse = kFloatNmse) {
  return checkText(oneNodeModel(typeText(dtype, a) + " A, " + typeText(dtype, b) + " B",
                                typeText(dtype, matmulDims(a, b)) + " Y", "", "Y = MatMul (A, B)"),
                   nmse);
}

struct GemmCase {
  int64_t M = 13, K = 24, N = 17;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  bool has_c = true;
  Dims c_dims;  // C's dims when has_c ([] is a scalar)
  std::string dtype = "float";

  std::vector<std::string> scalarInputs() const {
    if (has_c && c_dims.empty()) return {"C"};
    return {};
  }
};

std::string gemmAttributes(const GemmCase& c) {
  return fmt::format("transA = {}, transB = {}, alpha = {}, beta = {}", c.trans_a ? 1 : 0,
                     c.trans_b ? 1 : 0, floatText(c.alpha), floatText(c.beta));
}

std::string gemmInputs(const GemmCase& c) {
  const Dims a = c.trans_a ? Dims{c.K, c.M} : Dims{c.M, c.K};
  const Dims b = c.trans_b ? Dims{c.N, c.K} : Dims{c.K, c.N};
  std::string inputs = typeText(c.dtype, a) + " A, " + typeText(c.dtype, b) + " B";
  if (c.has_c) inputs += ", " + typeText(c.dtype, c.c_dims) + " C";
  return inputs;
}

CudaRun checkGemm(const GemmCase& c, double nmse = kFloatNmse) {
  const std::string text =
      oneNodeModel(gemmInputs(c), typeText(c.dtype, {c.M, c.N}) + " Y", "",
                   "Y = Gemm <" + gemmAttributes(c) + "> (A, B" + (c.has_c ? ", C" : "") + ")");
  return checkText(text, nmse, DType::Float, c.scalarInputs());
}

// FusedGemm with Gemm's operands, a residual Z [M, N] when `residual`, and `activation`
// ("" for none) with `params` ("" or a float list such as "[-0.2, 0.3]").
CudaRun checkFusedGemm(const GemmCase& c, bool residual, const std::string& activation,
                       const std::string& params = "", double nmse = kFloatNmse) {
  std::string inputs = gemmInputs(c);
  if (residual) inputs += ", " + typeText(c.dtype, {c.M, c.N}) + " Z";
  std::string attributes = gemmAttributes(c);
  if (!activation.empty()) attributes += ", activation = \"" + activation + "\"";
  if (!params.empty()) attributes += ", activation_params = " + params;
  std::string args = std::string("A, B") + (c.has_c ? ", C" : ", ");
  if (residual) args += ", Z";
  if (!c.has_c && !residual) args = "A, B";
  const std::string text =
      oneNodeModel(inputs, typeText(c.dtype, {c.M, c.N}) + " Y", "",
                   "Y = fusectl.FusedGemm <" + attributes + "> (" + args + ")");
  return checkText(text, nmse, DType::Float, c.scalarInputs());
}

// FusedMatMul of A (input) and a constant weight W [K, N] with a constant bias [N] when `bias`
// and a residual input Z when `residual`.
CudaRun checkFusedMatMul(const Dims& a, int64_t N, bool bias, bool residual,
                         const std::string& activation, DType dtype = DType::Float,
                         double nmse = kFloatNmse) {
  const std::string t = dtype == DType::Float ? "float" : std::string(dtypeName(dtype));
  Dims y = a;
  y.back() = N;
  std::string inputs = typeText(t, a) + " A";
  if (residual) inputs += ", " + typeText(t, y) + " Z";
  std::string initializers = zeroInitializer("W", {a.back(), N});
  if (bias) initializers += ",\n  " + zeroInitializer("Bias", {N});
  std::string args = "A, W";
  if (bias) args += ", Bias";
  if (residual) args += bias ? ", Z" : ",, Z";
  const std::string attributes =
      activation.empty() ? "" : " <activation = \"" + activation + "\">";
  const std::string text = oneNodeModel(inputs, typeText(t, y) + " Y", initializers,
                                        "Y = fusectl.FusedMatMul" + attributes + " (" + args + ")");
  return checkText(text, nmse, dtype);
}

}  // namespace

TEST_CASE("CUDA gemm kernels: MatMul, Gemm, FusedGemm and FusedMatMul are registered",
          "[cuda]") {
  const KernelRegistry& r = cudaKernelRegistry();
  if (!fusectl::cuda::builtWithCuda()) {
    CHECK(r.find("", "MatMul", 17, DType::Float, Device::Cuda) == nullptr);
    return;
  }
  for (DType t : {DType::Float, DType::Float16, DType::BFloat16}) {
    INFO(dtypeName(t));
    CHECK(r.find("", "MatMul", 1, t, Device::Cuda) != nullptr);
    CHECK(r.find("", "MatMul", 17, t, Device::Cuda) != nullptr);
    CHECK(r.find("", "Gemm", 17, t, Device::Cuda) != nullptr);
    CHECK(r.find("fusectl", "FusedGemm", 1, t, Device::Cuda) != nullptr);
    CHECK(r.find("fusectl", "FusedMatMul", 1, t, Device::Cuda) != nullptr);
    for (const char* base : {"FusedGemm", "FusedMatMul"}) {
      forEachFusedSpelling(base, [&](const std::string& name) {
        INFO(name);
        CHECK(r.find("fusectl", name, 1, t, Device::Cuda) != nullptr);
      });
    }
  }
  CHECK(r.find("", "MatMul", 17, DType::Int64, Device::Cuda) == nullptr);  // the CPU's
}

TEST_CASE("CUDA MatMul: 2-D products are one cuBLASLt call", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  CHECK(checkMatMul({37, 64}, {64, 29}).stats.device_launches == 1);
  checkMatMul({5, 3}, {3, 7});  // odd sizes: operands aligned to 4 bytes only
  checkMatMul({1, 16}, {16, 1});
  checkMatMul({64, 128}, {128, 256});
  checkMatMul({33, 1024}, {1024, 48}, "float", kLongSumFloatNmse);
}

TEST_CASE("CUDA MatMul: batch dims broadcast as numpy's", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // Both operands batched alike: one strided-batched call.
  CHECK(checkMatMul({3, 5, 16}, {3, 16, 7}).stats.device_launches == 1);
  CHECK(checkMatMul({2, 3, 5, 16}, {2, 3, 16, 7}).stats.device_launches == 1);
  // One operand's matrix shared by every batch (a batch stride of 0).
  CHECK(checkMatMul({5, 16}, {3, 16, 7}).stats.device_launches == 1);
  CHECK(checkMatMul({2, 1, 5, 8}, {1, 1, 8, 6}).stats.device_launches == 1);  // folded into M
  // Patterns no single stride covers: a loop over the leading dims of strided inner batches.
  CHECK(checkMatMul({2, 3, 5, 16}, {3, 16, 7}).stats.device_launches == 2);
  CHECK(checkMatMul({4, 1, 5, 8}, {1, 3, 8, 6}).stats.device_launches == 4);
  CHECK(checkMatMul({2, 1, 5, 8}, {2, 4, 8, 6}).stats.device_launches == 2);
  checkMatMul({2, 1, 3, 5, 8}, {4, 1, 8, 6});
}

TEST_CASE("CUDA MatMul: 1-D operands are promoted and their dim dropped", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkMatMul({16}, {16, 7});
  checkMatMul({3, 5, 16}, {16});
  checkMatMul({16}, {16});
  checkMatMul({16}, {2, 16, 7});
  checkMatMul({2, 3, 16, 5}, {5});
}

TEST_CASE("CUDA MatMul: activations times a constant weight are one tall product", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (const Dims& a : {Dims{2, 7, 32}, Dims{2, 3, 4, 32}, Dims{32}}) {
    const std::string text =
        oneNodeModel(typeText("float", a) + " A", typeText("float", matmulDims(a, {32, 24})) + " Y",
                     zeroInitializer("W", {32, 24}), "Y = MatMul (A, W)");
    CHECK(checkText(text, kFloatNmse).stats.device_launches == 1);
  }
}

TEST_CASE("CUDA MatMul: one executor over changing shapes plans each shape once", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  const auto model = withRandomInitializers(
      oneNodeModel("float[B, S, 32] A", "float[B, S, 24] Y", zeroInitializer("W", {32, 24}),
                   "Y = MatMul (A, W)"),
      DType::Float);
  ExecutorOptions options;
  options.backend = &cudaBackend();
  Executor cuda_executor(*model, options);
  for (const Dims& a : {Dims{2, 5, 32}, Dims{1, 9, 32}, Dims{2, 5, 32}, Dims{3, 1, 32}}) {
    INFO(typeText("float", a));
    const auto inputs = makeRandomInputs(*model->graph, 3, {{"A", Shape::ofStatic(a)}});
    const auto want = runModel(*model, inputs);
    const auto got = cuda_executor.run(inputs);
    REQUIRE(got.size() == 1);
    REQUIRE(got[0].tensor.dims() == want[0].tensor.dims());
    CHECK(fusectl::testing::normalizedMse(got[0].tensor, want[0].tensor) <= kFloatNmse);
  }
}

TEST_CASE("CUDA Gemm: transposes, alpha, beta and every shape of C", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  const int64_t M = 13, N = 17;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      GemmCase c;
      c.trans_a = trans_a;
      c.trans_b = trans_b;
      c.has_c = false;
      c.alpha = 0.75f;
      checkGemm(c);
      c.has_c = true;
      for (const Dims& c_dims : {Dims{N}, Dims{1, N}, Dims{M, N}, Dims{}, Dims{1}, Dims{M, 1}}) {
        c.c_dims = c_dims;
        for (const float beta : {1.f, 0.5f, 0.f}) {
          c.beta = beta;
          checkGemm(c);
        }
      }
    }
  }
}

TEST_CASE("CUDA Gemm: a per-column C is cuBLASLt's bias; other broadcasts cost launches",
          "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  GemmCase c;
  c.c_dims = {c.N};
  CHECK(checkGemm(c).stats.device_launches == 1);  // BIAS epilogue
  c.c_dims = {c.M, c.N};
  c.beta = 0.5f;
  CHECK(checkGemm(c).stats.device_launches == 1);  // C read by the product
  c.c_dims = {c.M, 1};
  c.beta = 1.f;
  CHECK(checkGemm(c).stats.device_launches == 2);  // product, then C as a per-row bias
  c.beta = 0.5f;
  CHECK(checkGemm(c).stats.device_launches == 3);  // zero Y, broadcast C into it, product
  c.M = 256;
  c.K = 512;
  c.N = 384;
  c.c_dims = {c.N};
  c.trans_b = true;
  checkGemm(c);
}

TEST_CASE("CUDA Gemm: K = 0 leaves beta * C", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  GemmCase c;
  c.M = 4;
  c.K = 0;
  c.N = 5;
  c.beta = 0.5f;
  for (const Dims& c_dims : {Dims{5}, Dims{4, 5}, Dims{4, 1}}) {
    c.c_dims = c_dims;
    checkGemm(c);
  }
  checkMatMul({2, 4, 0}, {0, 5});
}

TEST_CASE("CUDA FusedGemm: bias, residual and activation as the epilogue contract", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  GemmCase c;
  c.c_dims = {c.N};
  // Bias, residual as cuBLASLt's C and Relu: all in the one cuBLASLt call.
  CHECK(checkFusedGemm(c, true, "Relu").stats.device_launches == 1);
  CHECK(checkFusedGemm(c, false, "Relu").stats.device_launches == 1);
  CHECK(checkFusedGemm(c, false, "").stats.device_launches == 1);
  // cuBLASLt's GELU is the tanh approximation, so Gelu and the rest run after it.
  CHECK(checkFusedGemm(c, true, "Gelu").stats.device_launches == 2);
  CHECK(checkFusedGemm(c, true, "Sigmoid").stats.device_launches == 2);
  c.trans_b = true;
  c.alpha = 0.5f;
  checkFusedGemm(c, true, "Silu");
  checkFusedGemm(c, true, "Tanh");
  checkFusedGemm(c, false, "HardSwish");
  checkFusedGemm(c, true, "Clip", "[-0.2, 0.3]");
  checkFusedGemm(c, true, "HardSigmoid", "[0.3, 0.4]");
  checkFusedGemm(c, true, "LeakyRelu", "[0.1]");
  // A full C takes cuBLASLt's C, so the residual comes after.
  c.c_dims = {c.M, c.N};
  c.beta = 0.7f;
  CHECK(checkFusedGemm(c, true, "Relu").stats.device_launches == 2);
  // A per-row C is added after the product, with the residual and activation.
  c.c_dims = {c.M, 1};
  c.beta = 1.f;
  CHECK(checkFusedGemm(c, true, "LeakyRelu", "[0.1]").stats.device_launches == 2);
  // A per-column C scaled by beta is broadcast into Y first.
  c.c_dims = {c.N};
  c.beta = 0.5f;
  checkFusedGemm(c, true, "Relu");
  checkFusedGemm(c, false, "Gelu");
  c.c_dims = {};
  checkFusedGemm(c, true, "Tanh");
  // No bias.
  c.has_c = false;
  CHECK(checkFusedGemm(c, true, "Relu").stats.device_launches == 1);
  checkFusedGemm(c, false, "Sigmoid");
}

TEST_CASE("CUDA FusedGemm: the portable spellings run as the plain op", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  const std::string text = oneNodeModel(
      "float[13, 24] A, float[24, 17] B, float[13, 17] Z", "float[13, 17] Y", "",
      "Y = fusectl.FusedGemm_NoBias_Add_Relu <activation = \"Relu\"> (A, B, Z)");
  CHECK(checkText(text, kFloatNmse).stats.device_launches == 1);
}

TEST_CASE("CUDA FusedMatMul: one product over A's rows, epilogue as the contract", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (const char* act : {"", "Relu", "Gelu", "Silu", "Tanh", "Sigmoid", "HardSwish"}) {
    INFO("activation '" << act << "'");
    const bool lt_only = std::string(act).empty() || std::string(act) == "Relu";
    CHECK(checkFusedMatMul({2, 5, 37}, 29, true, false, act).stats.device_launches ==
          (lt_only ? 1 : 2));
    CHECK(checkFusedMatMul({2, 5, 37}, 29, true, true, act).stats.device_launches ==
          (lt_only ? 1 : 2));
  }
  checkFusedMatMul({3, 2, 4, 16}, 33, true, true, "Gelu");  // 4-D activations
  checkFusedMatMul({1, 70, 64}, 96, true, false, "");
  checkFusedMatMul({2, 3, 8}, 5, false, true, "Relu");     // residual, no bias
  checkFusedMatMul({4, 128, 1024}, 64, true, true, "Relu", DType::Float, kLongSumFloatNmse);
}

namespace {

// The 16-bit cases, the same for float16 and bfloat16 (`type` spells `dtype`) at its bound.
void checkSixteenBitGemms(const std::string& type, DType dtype, double nmse) {
  checkMatMul({37, 64}, {64, 29}, type, nmse);
  checkMatMul({5, 3}, {3, 7}, type, nmse);
  checkMatMul({2, 3, 5, 16}, {3, 16, 8}, type, nmse);
  checkMatMul({4, 1, 5, 8}, {1, 3, 8, 6}, type, nmse);
  checkMatMul({16}, {2, 16, 7}, type, nmse);
  GemmCase c;
  c.dtype = type;
  c.c_dims = {c.N};
  c.trans_b = true;
  checkGemm(c, nmse);
  c.c_dims = {c.M, c.N};
  c.beta = 0.5f;
  checkGemm(c, nmse);
  c.c_dims = {};
  checkGemm(c, nmse);
  c.c_dims = {c.N};
  c.beta = 1.f;
  // cuBLASLt's RELU_BIAS epilogue with a 16-bit bias: one launch.
  CHECK(checkFusedGemm(c, true, "Relu", "", nmse).stats.device_launches == 1);
  checkFusedGemm(c, true, "Gelu", "", nmse);
  c.c_dims = {c.M, 1};
  checkFusedGemm(c, true, "Sigmoid", "", nmse);
  checkFusedMatMul({2, 7, 64}, 48, true, true, "Relu", dtype, nmse);
  checkFusedMatMul({2, 7, 64}, 48, true, true, "Gelu", dtype, nmse);
  checkFusedMatMul({3, 5, 32}, 24, false, false, "", dtype, nmse);
  for (const Dims& a : {Dims{2, 7, 32}, Dims{32}}) {
    const std::string text = oneNodeModel(
        typeText(type, a) + " A", typeText(type, matmulDims(a, {32, 24})) + " Y",
        zeroInitializer("W", {32, 24}), "Y = MatMul (A, W)");
    checkText(text, nmse, dtype);
  }
}

}  // namespace

TEST_CASE("CUDA gemm kernels in float16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkSixteenBitGemms("float16", DType::Float16, kHalfNmse);
}

// Placement only (no GPU needed): every bfloat16 gemm node resolves to a CUDA kernel.
TEST_CASE("CUDA gemm kernels: bfloat16 nodes are placed on the GPU", "[cuda]") {
  if (!fusectl::cuda::builtWithCuda()) return;
  const std::string t = "bfloat16";
  for (const std::string& node :
       {std::string("Y = MatMul (A, B)"), std::string("Y = Gemm <transB = 1> (A, Bt, C)"),
        std::string("Y = fusectl.FusedGemm <transB = 1, activation = \"Gelu\"> (A, Bt, C)"),
        std::string("Y = fusectl.FusedMatMul <activation = \"Relu\"> (A, B, C)")}) {
    const std::string text = oneNodeModel(
        typeText(t, {5, 8}) + " A, " + typeText(t, {8, 6}) + " B, " + typeText(t, {6, 8}) +
            " Bt, " + typeText(t, {6}) + " C",
        typeText(t, {5, 6}) + " Y", "", node);
    INFO(text);
    const auto model = parseModelText(text, "<cuda gemm test>");
    CHECK(fusectl::testing::cudaFallbackNodes(*model).empty());
  }
}

TEST_CASE("CUDA gemm kernels in bfloat16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkSixteenBitGemms("bfloat16", DType::BFloat16, kBFloat16Nmse);
  checkMatMul({4, 1024}, {1024, 32}, "bfloat16", kBFloat16Nmse);  // a long float32 sum
}
