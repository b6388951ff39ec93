// fusectl::Elementwise on CUDA: the generated kernel source (elementwise_codegen.h) and its NVRTC
// compile (nvrtc_compile.h), which need no GPU, then the kernel against the CPU one on a GPU
// ([cuda]: skipped with a WARN where there is none). Only in builds with CUDA: the codegen and
// NVRTC headers are libkernels/cuda internals.
#ifdef FUSECTL_HAVE_CUDA

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cuda_case.h"
#include "elementwise_codegen.h"
#include "fusectl/graph/elementwise_program.h"
#include "fusectl/graph/error.h"
#include "nvrtc_compile.h"

using namespace fusectl;
using namespace fusectl::kernels::cuda;

namespace {

// Parameters each op with parameters gets in these tests: ordinary values, not defaults, so a
// swapped pair shows.
std::string paramsFor(EwOp op) {
  switch (op) {
    case EwOp::LeakyRelu: return ", 0.01";
    case EwOp::Elu: return ", 1.5";
    case EwOp::Selu: return ", 1.6732632, 1.050701";
    case EwOp::HardSigmoid: return ", 0.2, 0.5";
    case EwOp::Clip: return ", -0.5, 0.75";
    default: return "";
  }
}

// A program over x0 (the output's shape) and x1 (broadcast) that applies `op` to a value built
// from both, then once more with a constant operand (binary) or follows it with one (unary). Log,
// Sqrt and Pow get a positive operand (|x0 x1| + 0.5) so that the GPU tests compare numbers.
std::string programUsing(const EwOpInfo& op) {
  const bool positive = op.op == EwOp::Log || op.op == EwOp::Sqrt || op.op == EwOp::Pow;
  const std::string a = positive ? "t2" : "t0";
  std::string s = "t0 = Mul(x0, x1); t1 = Abs(t0); t2 = Add(t1, 0.5); ";
  if (op.operands == 1)
    return s + fmt::format("t3 = {}({}{}); t4 = Mul(t3, -0.25)", op.name, a, paramsFor(op.op));
  return s + fmt::format("t3 = {}({}, x1); t4 = {}(t3, 1.5)", op.name, a, op.name);
}

const std::vector<EwAccess> kContiguousAndStrided = {EwAccess::Contiguous, EwAccess::Strided};

std::string errorOf(const std::function<void()>& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cuda codegen: every op compiles with NVRTC, float32, float16 and bfloat16",
          "[cuda_codegen]") {
  for (const EwOpInfo& op : allEwOps()) {
    const std::string text = programUsing(op);
    INFO(text);
    const ElementwiseProgram program = ElementwiseProgram::parse(text, 2);
    for (DType dtype : {DType::Float, DType::Float16, DType::BFloat16}) {
      INFO(dtypeName(dtype));
      const std::string source =
          elementwiseKernelSource(program, 2, 3, dtype, "k", kContiguousAndStrided);
      CHECK_THAT(source, Catch::Contains(fmt::format("ew_{}(", op.name)));
      const std::string ptx = compileToCubinOrPtx(source, "ew.cu", 8, 0, /*ptx_only=*/true,
                                                  elementwiseCompileOptions());
      CHECK_THAT(ptx, Catch::Contains(".entry k("));
      CHECK_THAT(ptx, Catch::Contains(".target sm_80"));
      const std::string cubin = compileToCubinOrPtx(source, "ew.cu", 9, 0, /*ptx_only=*/false,
                                                    elementwiseCompileOptions());
      REQUIRE(cubin.size() > 4);
      CHECK(cubin.compare(0, 4, "\x7f" "ELF") == 0);
    }
  }
}

TEST_CASE("cuda codegen: the source of a small program", "[cuda_codegen]") {
  const ElementwiseProgram program =
      ElementwiseProgram::parse("t0 = Mul(x0, x1); t1 = Add(t0, 0.5); t2 = Sigmoid(t1)", 2);

  SECTION("contiguous and scalar inputs: flat index, no index arithmetic") {
    const std::string s = elementwiseKernelSource(program, 2, 0, DType::Float, "ew",
                                                  {EwAccess::Contiguous, EwAccess::Scalar});
    for (const char* line : {
             "// fusectl::Elementwise: t0 = Mul(x0, x1); t1 = Add(t0, 0.5); t2 = Sigmoid(t1)\n",
             "// float32; x0 contiguous, x1 scalar\n",
             "static_assert(sizeof(EwIndex) == 448,",
             "extern \"C\" __global__ void __launch_bounds__(256) ew(\n"
             "    const EwIndex idx, ew_elem* __restrict__ y,\n"
             "    const ew_elem* __restrict__ in0,\n"
             "    const ew_elem* __restrict__ in1) {\n",
             "  const float k0 = 0x1p-1f;  // 0.5\n",
             // The scalar is read once, before the loop.
             "  const float x1 = ew_load(in1[0]);\n"
             "  const long long n = idx.numel;\n",
             "    const float x0 = ew_load(in0[i]);\n"
             "    const float t0 = ew_Mul(x0, x1);\n"
             "    const float t1 = ew_Add(t0, k0);\n"
             "    const float t2 = ew_Sigmoid(t1);\n"
             "    y[i] = ew_store(t2);\n"}) {
      CHECK_THAT(s, Catch::Contains(line));
    }
    CHECK_THAT(s, !Catch::Contains("idx.out_dims[") && !Catch::Contains("idx.strides[") &&
                      !Catch::Contains(" % ") && !Catch::Contains("r / "));
    // Only the ops the program uses get a helper.
    CHECK_THAT(s, !Catch::Contains("ew_Relu") && !Catch::Contains("ew_clamp01"));
    CHECK_THAT(s, !Catch::Contains("#include"));
  }

  SECTION("a strided input: one division per dim but the outermost") {
    const std::string s = elementwiseKernelSource(program, 2, 3, DType::Float, "ew",
                                                  {EwAccess::Contiguous, EwAccess::Strided});
    CHECK_THAT(s, Catch::Contains("// float32; x0 contiguous, x1 strided; index rank 3\n"));
    CHECK_THAT(s, Catch::Contains("const long long q = r / idx.out_dims[2];"));
    CHECK_THAT(s, Catch::Contains("const long long q = r / idx.out_dims[1];"));
    CHECK_THAT(s, !Catch::Contains("idx.out_dims[0]"));
    CHECK_THAT(s, Catch::Contains("o1 += r * idx.strides[1][0];"));
    CHECK_THAT(s, Catch::Contains("const float x1 = ew_load(in1[o1]);"));
    CHECK_THAT(s, Catch::Contains("const float x0 = ew_load(in0[i]);"));
    CHECK_THAT(s, !Catch::Contains("o0"));
  }

  SECTION("float16: bits converted with cvt, no header") {
    const std::string s = elementwiseKernelSource(program, 2, 1, DType::Float16, "ew", {});
    CHECK_THAT(s, Catch::Contains("typedef unsigned short ew_elem;"));
    CHECK_THAT(s, Catch::Contains("cvt.rn.f16.f32"));
    CHECK_THAT(s, Catch::Contains("cvt.f32.f16"));
    CHECK_THAT(s, Catch::Contains("// float16; x0 strided, x1 strided; index rank 1\n"));
    CHECK_THAT(s, !Catch::Contains("#include"));
  }

  SECTION("bfloat16: bits shifted in, rounded to nearest even out, no header") {
    const std::string s = elementwiseKernelSource(program, 2, 1, DType::BFloat16, "ew",
                                                  {EwAccess::Contiguous, EwAccess::Scalar});
    // NVRTC has no cuda_bf16.h built in, so __nv_bfloat16 travels as its 16 bits.
    CHECK_THAT(s, Catch::Contains("typedef unsigned short ew_elem;  // bfloat16 bits "
                                  "(__nv_bfloat16's layout)\n"));
    CHECK_THAT(s, Catch::Contains("// bfloat16; x0 contiguous, x1 scalar\n"));
    // Load: the bits are a float's top half (exact).
    CHECK_THAT(s, Catch::Contains("float ew_load(unsigned short b) {\n"
                                  "  return __uint_as_float((unsigned int)b << 16);\n"));
    // Store: NaN kept quiet with its sign, otherwise round to nearest even (half.h's
    // floatToBFloat16), overflow carrying into the exponent as infinity.
    CHECK_THAT(s, Catch::Contains("unsigned short ew_store(float f) {\n"
                                  "  const unsigned int u = __float_as_uint(f);\n"
                                  "  if ((u & 0x7fffffffu) > 0x7f800000u) "
                                  "return (unsigned short)((u >> 16) | 0x40u);\n"
                                  "  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u))"
                                  " >> 16);\n"));
    // Float math in between, as for the other types.
    CHECK_THAT(s, Catch::Contains("  const float x1 = ew_load(in1[0]);\n"));
    CHECK_THAT(s, Catch::Contains("    const float x0 = ew_load(in0[i]);\n"));
    CHECK_THAT(s, Catch::Contains("    y[i] = ew_store(t2);\n"));
    CHECK_THAT(s, !Catch::Contains("#include") && !Catch::Contains("cvt.") &&
                      !Catch::Contains("__half") && !Catch::Contains("f16"));
    // Not the float16 conversions, and a different source (the compile cache keys on it).
    CHECK(s != elementwiseKernelSource(program, 2, 1, DType::Float16, "ew",
                                       {EwAccess::Contiguous, EwAccess::Scalar}));
    // Plain integer code: it compiles for architectures without bfloat16 instructions too.
    const std::string ptx =
        compileToCubinOrPtx(s, "ew.cu", 7, 5, /*ptx_only=*/true, elementwiseCompileOptions());
    CHECK_THAT(ptx, Catch::Contains(".target sm_75"));
    CHECK_THAT(ptx, !Catch::Contains("bf16"));
  }

  SECTION("instructions on scalars and constants run once, before the loop") {
    const ElementwiseProgram p = ElementwiseProgram::parse(
        "t0 = Mul(x1, 2); t1 = Exp(t0); t2 = Add(x0, t1); t3 = Max(t2, nan); t4 = Clip(t3, -inf, 6)",
        2);
    const std::string s = elementwiseKernelSource(p, 2, 0, DType::Float, "ew",
                                                  {EwAccess::Contiguous, EwAccess::Scalar});
    const size_t loop = s.find("  for (long long i");
    REQUIRE(loop != std::string::npos);
    CHECK(s.find("const float t1 = ew_Exp(t0);") < loop);
    CHECK(s.find("const float t2 = ew_Add(x0, t1);") > loop);
    CHECK_THAT(s, Catch::Contains("= __uint_as_float(0x7fc00000u);  // nan"));
    CHECK_THAT(s, Catch::Contains("= __uint_as_float(0xff800000u);  // -inf"));
    CHECK_THAT(s, Catch::Contains("= 0x1.8p+2f;  // 6"));
    CHECK_NOTHROW(compileToCubinOrPtx(s, "ew.cu", 8, 0, true, elementwiseCompileOptions()));
  }
}

TEST_CASE("cuda codegen: float literals are exact", "[cuda_codegen]") {
  CHECK(cudaFloatLiteral(0.5f) == "0x1p-1f");
  CHECK(cudaFloatLiteral(0.1f) == "0x1.99999ap-4f");
  CHECK(cudaFloatLiteral(-10000.f) == "-0x1.388p+13f");
  CHECK(cudaFloatLiteral(0.f) == "0x0p+0f");
  CHECK(cudaFloatLiteral(-0.f) == "-0x0p+0f");
  CHECK(cudaFloatLiteral(std::numeric_limits<float>::denorm_min()) == "0x1p-149f");
  CHECK(cudaFloatLiteral(std::numeric_limits<float>::infinity()) == "__uint_as_float(0x7f800000u)");
  const float values[] = {0.1f,     1.f / 3.f, -1.6732632f, 1e-30f, 3.4028235e38f,
                          1.17549435e-38f, 1e-40f, -7e-45f, 123456.789f, 0.7071067811865476f};
  for (float v : values) {
    const std::string lit = cudaFloatLiteral(v);
    INFO(lit);
    REQUIRE(lit.back() == 'f');
    // C++17 reads hex floats: the literal is the float itself.
    CHECK(std::strtof(lit.substr(0, lit.size() - 1).c_str(), nullptr) == v);
  }
}

TEST_CASE("cuda codegen: the same arguments give the same source", "[cuda_codegen]") {
  const std::string text =
      "t0 = Sub(x0, x2); t1 = Mul(t0, 0.1); t2 = Selu(t1, 1.6732632, 1.050701); "
      "t3 = Max(t2, x1); t4 = Mul(t3, 0.1)";
  const ElementwiseProgram a = ElementwiseProgram::parse(text, 3);
  const ElementwiseProgram b = ElementwiseProgram::parse(a.str(), 3);
  const std::vector<EwAccess> access = {EwAccess::Contiguous, EwAccess::Strided, EwAccess::Scalar};
  const std::string s = elementwiseKernelSource(a, 3, 2, DType::Float16, "ew", access);
  CHECK(s == elementwiseKernelSource(a, 3, 2, DType::Float16, "ew", access));
  CHECK(s == elementwiseKernelSource(b, 3, 2, DType::Float16, "ew", access));
  // One name per constant value, the parameters included.
  CHECK_THAT(s, Catch::Contains("  const float k0 = 0x1.99999ap-4f;  // 0.1\n"
                                "  const float k1 = 0x1.ac5afap+0f;  // 1.6732632\n"));
  CHECK(s.find("const float k3") == std::string::npos);
  // Without a strided input the rank is not part of the source.
  const std::vector<EwAccess> flat = {EwAccess::Contiguous, EwAccess::Contiguous, EwAccess::Scalar};
  CHECK(elementwiseKernelSource(a, 3, 1, DType::Float, "ew", flat) ==
        elementwiseKernelSource(a, 3, 5, DType::Float, "ew", flat));
  CHECK(elementwiseKernelSource(a, 3, 1, DType::Float, "ew", access) !=
        elementwiseKernelSource(a, 3, 2, DType::Float, "ew", access));
}

TEST_CASE("cuda codegen: unsupported and malformed requests are clear errors", "[cuda_codegen]") {
  const ElementwiseProgram p = ElementwiseProgram::parse("t0 = Add(x0, x1)", 2);
  ErrorKind kind{};
  CHECK_THAT(errorOf([&] { elementwiseKernelSource(p, 2, 1, DType::Int32, "ew"); }, &kind),
             Catch::Contains("float32, float16 and bfloat16, not int32"));
  CHECK(kind == ErrorKind::Unsupported);
  CHECK_THAT(errorOf([&] { elementwiseKernelSource(p, 1, 1, DType::Float, "ew"); }, &kind),
             Catch::Contains("t0 reads x1, the node has 1 inputs"));
  CHECK(kind == ErrorKind::Internal);
  CHECK_THAT(errorOf([&] { elementwiseKernelSource(p, 9, 1, DType::Float, "ew"); }),
             Catch::Contains("9 inputs (1 to 8)"));
  CHECK_THAT(errorOf([&] { elementwiseKernelSource(p, 2, 7, DType::Float, "ew"); }),
             Catch::Contains("index rank 7 (1 to 6)"));
  CHECK_THAT(errorOf([&] {
               elementwiseKernelSource(p, 2, 1, DType::Float, "ew", {EwAccess::Scalar});
             }),
             Catch::Contains("1 input accesses for 2 inputs"));
  CHECK_THAT(errorOf([&] { elementwiseKernelSource(p, 2, 1, DType::Float, "1ew"); }),
             Catch::Contains("kernel name '1ew' is no identifier"));
  CHECK_THAT(errorOf([&] { elementwiseKernelSource(ElementwiseProgram{}, 2, 1, DType::Float, "ew"); }),
             Catch::Contains("0 instructions"));

  // NVRTC's log comes back in the error.
  CHECK_THAT(errorOf([] {
               compileToCubinOrPtx("extern \"C\" __global__ void k() { undefined_thing(); }",
                                   "broken.cu", 8, 0, true);
             }, &kind),
             Catch::Contains("NVRTC could not compile broken.cu for -arch=compute_80") &&
                 Catch::Contains("undefined_thing"));
  CHECK(kind == ErrorKind::Internal);
  CHECK_THAT(errorOf([] { compileToCubinOrPtx("", "empty.cu", 3, 5, false); }, &kind),
             Catch::Contains("NVRTC does not target sm_35"));
  CHECK(kind == ErrorKind::Unsupported);
}

// --- On a GPU ------------------------------------------------------------------------------

namespace {

std::string elementwiseModel(const std::string& dtype, const std::vector<std::string>& inputs,
                             const std::string& out_dims, const std::string& program) {
  std::vector<std::string> decls, names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    decls.push_back(inputs[i].empty() ? fmt::format("{} X{}", dtype, i)
                                      : fmt::format("{}[{}] X{}", dtype, inputs[i], i));
    names.push_back(fmt::format("X{}", i));
  }
  return fmt::format(R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g ({}) => ({}[{}] Y)
{{
  Y = fusectl.Elementwise <program = "{}"> ({})
}}
)",
                     fmt::join(decls, ", "), dtype, out_dims, program, fmt::join(names, ", "));
}

}  // namespace

TEST_CASE("cuda elementwise: every op against the CPU, with a broadcast input", "[cuda]") {
  if (!fusectl::testing::cudaDeviceOrSkip()) return;
  for (const EwOpInfo& op : allEwOps()) {
    const std::string text = programUsing(op);
    INFO(text);
    fusectl::testing::checkCudaAgainstCpu(
        elementwiseModel("float", {"2, 3, 4, 5", "3, 1, 5"}, "2, 3, 4, 5", text), 1e-9);
  }
}

TEST_CASE("cuda elementwise: broadcast shapes, scalars and constants", "[cuda]") {
  if (!fusectl::testing::cudaDeviceOrSkip()) return;
  using fusectl::testing::checkCudaAgainstCpu;
  // A per-channel and a per-row input beside a full one, rank 4 (strided), a rank-0 scalar.
  checkCudaAgainstCpu(
      elementwiseModel("float", {"2, 3, 4, 5", "3, 1, 1", "2, 1, 4, 1", ""}, "2, 3, 4, 5",
                       "t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = Gelu(t1); t3 = Sub(t2, x3); "
                       "t4 = HardSwish(t3); t5 = Max(t4, -0.125); t6 = Mul(t5, 3)"),
      1e-9);
  // Same shapes and one-element inputs only: the flat kernel, more than one block.
  checkCudaAgainstCpu(
      elementwiseModel("float", {"7, 333", "7, 333", "1", ""}, "7, 333",
                       "t0 = Sigmoid(x0); t1 = Mul(x1, t0); t2 = Mul(t1, x2); t3 = Add(t2, x3); "
                       "t4 = Tanh(t3); t5 = Softplus(t4)"),
      1e-9);
  // Every input broadcasts: the output shape only comes from the combination.
  checkCudaAgainstCpu(elementwiseModel("float", {"4, 1", "1, 6"}, "4, 6",
                                       "t0 = Sub(x0, x1); t1 = PRelu(t0, x1); t2 = Clip(t1, -0.25, 0.5)"),
                      1e-9);
  // The output is one value (scalars and constants only), spread over the broadcast shape that
  // an input the program does not read gives.
  checkCudaAgainstCpu(elementwiseModel("float", {"3, 17", ""}, "3, 17",
                                       "t0 = Mul(x1, 2); t1 = Exp(t0); t2 = Add(t1, 0.25)"),
                      1e-9);
}

TEST_CASE("cuda elementwise: one executor across shapes picks each kernel", "[cuda]") {
  if (!fusectl::testing::cudaDeviceOrSkip()) return;
  const auto model = parseModelText(
      elementwiseModel("float", {"N, 8", "M, 8"}, "N, 8",
                       "t0 = Mul(x0, x1); t1 = Elu(t0, 0.5); t2 = Add(t1, x0)"),
      "<cuda test>");
  kernels::ExecutorOptions options;
  options.backend = &kernels::cudaBackend();
  kernels::Executor cuda(*model, options);
  // Contiguous, then broadcast (M = 1), then contiguous again in another size.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{5, 5}, {6, 1}, {9, 9}};
  for (const auto& [n, m] : sizes) {
    INFO(n << " x " << m);
    const auto inputs = kernels::makeRandomInputs(
        *model->graph, 11, {{"X0", Shape::ofStatic({n, 8})}, {"X1", Shape::ofStatic({m, 8})}});
    const auto cpu = kernels::runModel(*model, inputs);
    const auto gpu = cuda.run(inputs);
    REQUIRE(gpu.size() == 1);
    CHECK(fusectl::testing::normalizedMse(gpu[0].tensor, cpu[0].tensor) <= 1e-9);
  }
}

namespace {

// The CPU kernel computes float32 only: it runs the float32 model on the same (16-bit-valued)
// inputs, and the 16-bit output (`dtype`: float16 or bfloat16) may differ from it by one
// rounding, at most half an ulp per element.
void checkSixteenBitAgainstFloat(DType dtype, double max_nmse) {
  const std::vector<std::string> shapes = {"2, 3, 4, 5", "3, 1, 5", ""};
  const std::string program =
      "t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = Sigmoid(t1); t3 = Mul(t1, t2); "
      "t4 = LeakyRelu(t3, 0.1); t5 = Div(t4, 0.75)";
  const std::string type(dtypeName(dtype));
  const auto half_model =
      parseModelText(elementwiseModel(type, shapes, "2, 3, 4, 5", program), "<cuda test>");
  const auto float_model =
      parseModelText(elementwiseModel("float", shapes, "2, 3, 4, 5", program), "<cuda test>");
  const auto half_inputs = kernels::makeRandomInputs(*half_model->graph, 5);
  std::vector<kernels::NamedTensor> float_inputs;
  for (const auto& in : half_inputs) {
    kernels::HostTensor t(DType::Float, in.tensor.dims());
    for (int64_t i = 0; i < t.numel(); ++i)
      t.mutableData<float>()[i] = static_cast<float>(kernels::elementAsDouble(in.tensor, i));
    float_inputs.push_back({in.name, std::move(t)});
  }
  kernels::ExecutorOptions options;
  options.backend = &kernels::cudaBackend();
  kernels::ExecutionStats stats;
  const auto gpu = kernels::runModel(*half_model, half_inputs, options, &stats);
  const auto cpu = kernels::runModel(*float_model, float_inputs);
  REQUIRE(gpu[0].tensor.dtype() == dtype);
  CHECK(stats.fallback_nodes == 0);
  CHECK(fusectl::testing::normalizedMse(gpu[0].tensor, cpu[0].tensor) <= max_nmse);
}

}  // namespace

TEST_CASE("cuda elementwise: float16 against the float32 CPU kernel", "[cuda]") {
  if (!fusectl::testing::cudaDeviceOrSkip()) return;
  checkSixteenBitAgainstFloat(DType::Float16, 1e-6);
}

TEST_CASE("cuda elementwise: bfloat16 against the float32 CPU kernel", "[cuda]") {
  if (!fusectl::testing::cudaDeviceOrSkip()) return;
  // One rounding to 8 significant bits: a relative error up to 2^-8 per element, an nmse up to
  // about (2^-7)^2 / 12 = 5e-6 over a tensor; 1e-4 leaves a wide margin and still catches a
  // wrong conversion (a bfloat16 read as float16 bits gives an nmse near 1).
  checkSixteenBitAgainstFloat(DType::BFloat16, 1e-4);
}

// Placement only (no GPU needed): a bfloat16 Elementwise node is the CUDA kernel's.
TEST_CASE("cuda elementwise: a bfloat16 node is placed on the GPU", "[cuda_codegen]") {
  if (!fusectl::cuda::builtWithCuda()) return;
  const auto model = parseModelText(
      elementwiseModel("bfloat16", {"2, 3", "3"}, "2, 3", "t0 = Mul(x0, x1); t1 = Relu(t0)"),
      "<cuda test>");
  CHECK(fusectl::testing::cudaFallbackNodes(*model).empty());
}

#endif  // FUSECTL_HAVE_CUDA
