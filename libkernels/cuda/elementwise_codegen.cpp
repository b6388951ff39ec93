// The generated kernel (elementwise_codegen.h). Its layout, for a program over x0 (contiguous)
// and x1 (broadcast) in rank 2:
//
//   struct EwIndex {...};                      // cuda_common.h's BroadcastIndex
//   ew_load / ew_store                         // element type <-> float
//   ew_Mul, ew_Sigmoid...                      // one helper per op the program uses
//   extern "C" __global__ void name(EwIndex idx, float* y, const float* in0, const float* in1) {
//     const float k0 = 0x1p-1f;  // 0.5      constants and parameters, exact
//     (scalar inputs read, instructions on them and constants only computed: once per thread)
//     for (long long i = ...; i < n; i += ...) {
//       (offsets of the strided inputs: one division per dim, shared by all of them)
//       const float x0 = ew_load(in0[i]);
//       const float x1 = ew_load(in1[o1]);
//       const float t0 = ew_Mul(x0, x1);
//       ...
//       y[i] = ew_store(t2);
//     }
//   }
//
// Half is handled as its bits (unsigned short) converted with the PTX cvt instructions that
// cuda_fp16.h itself uses: NVRTC does not have cuda_fp16.h among its built-in headers (CUDA 13),
// and a machine that runs fusectl need not have the toolkit's include directory, so the source
// includes nothing. Bfloat16 likewise (cuda_bf16.h is no built-in either): its bits are the top
// half of a float's, so loading is a shift, and storing rounds to nearest even with integer
// arithmetic (half.h's floatToBFloat16, bit for bit, NaNs included) rather than cvt.rn.bf16.f32,
// which needs sm_80 where the float16 cvt runs on every architecture.
#include "elementwise_codegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {
namespace {

// Each op as a device function of floats. The bodies are the CPU kernel's expressions
// (vec_impl.h's functors, the scalar lambdas of cpu/elementwise_program.cpp, scalar_ops.h),
// comparisons kept in the same sense so that NaN and -0 come out the same: Relu and the clamps
// of HardSigmoid/HardSwish give 0 for NaN, Abs keeps -0, Max/Min give NaN when either operand
// is NaN and otherwise keep the CPU's choice between -0 and +0.
const char* opHelper(EwOp op) {
  switch (op) {
    case EwOp::Neg: return "float ew_Neg(float x) { return -x; }";
    case EwOp::Abs: return "float ew_Abs(float x) { return x < 0.0f ? -x : x; }";
    case EwOp::Exp: return "float ew_Exp(float x) { return expf(x); }";
    case EwOp::Log: return "float ew_Log(float x) { return logf(x); }";
    case EwOp::Sqrt: return "float ew_Sqrt(float x) { return sqrtf(x); }";
    case EwOp::Reciprocal: return "float ew_Reciprocal(float x) { return 1.0f / x; }";
    case EwOp::Sigmoid:
      // exp of -|x| only: a large negative x gives e / (1 + e) in the subnormals, not 1 / inf.
      return "float ew_Sigmoid(float x) {\n"
             "  const float e = expf(-fabsf(x));\n"
             "  const float r = 1.0f / (1.0f + e);\n"
             "  return x >= 0.0f ? r : e * r;\n"
             "}";
    case EwOp::Tanh: return "float ew_Tanh(float x) { return tanhf(x); }";
    case EwOp::Relu: return "float ew_Relu(float x) { return x > 0.0f ? x : 0.0f; }";
    case EwOp::Erf: return "float ew_Erf(float x) { return erff(x); }";
    case EwOp::Floor: return "float ew_Floor(float x) { return floorf(x); }";
    case EwOp::Ceil: return "float ew_Ceil(float x) { return ceilf(x); }";
    case EwOp::Sin: return "float ew_Sin(float x) { return sinf(x); }";
    case EwOp::Cos: return "float ew_Cos(float x) { return cosf(x); }";
    case EwOp::Softplus:
      // Never overflows exp: the argument of exp is at most 0 on either side.
      return "float ew_Softplus(float x) {\n"
             "  return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));\n"
             "}";
    case EwOp::Softsign: return "float ew_Softsign(float x) { return x / (1.0f + fabsf(x)); }";
    case EwOp::HardSwish:
      return "float ew_HardSwish(float x) { return x * ew_clamp01(x / 6.0f + 0.5f); }";
    case EwOp::Gelu:
      return "float ew_Gelu(float x) {\n"
             "  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));\n"
             "}";
    case EwOp::LeakyRelu:
      return "float ew_LeakyRelu(float x, float alpha) { return x < 0.0f ? x * alpha : x; }";
    case EwOp::Elu:
      return "float ew_Elu(float x, float alpha) {\n"
             "  return x < 0.0f ? alpha * (expf(x) - 1.0f) : x;\n"
             "}";
    case EwOp::Selu:
      return "float ew_Selu(float x, float alpha, float gamma) {\n"
             "  return x > 0.0f ? gamma * x : gamma * (alpha * expf(x) - alpha);\n"
             "}";
    case EwOp::HardSigmoid:
      return "float ew_HardSigmoid(float x, float alpha, float beta) {\n"
             "  return ew_clamp01(alpha * x + beta);\n"
             "}";
    case EwOp::Clip:
      return "float ew_Clip(float x, float lo, float hi) {\n"
             "  x = x < lo ? lo : x;\n"
             "  return x > hi ? hi : x;\n"
             "}";
    case EwOp::Add: return "float ew_Add(float a, float b) { return a + b; }";
    case EwOp::Sub: return "float ew_Sub(float a, float b) { return a - b; }";
    case EwOp::Mul: return "float ew_Mul(float a, float b) { return a * b; }";
    case EwOp::Div: return "float ew_Div(float a, float b) { return a / b; }";
    case EwOp::Pow: return "float ew_Pow(float a, float b) { return powf(a, b); }";
    case EwOp::Max:
      return "float ew_Max(float a, float b) {\n"
             "  return a != a || b != b ? __uint_as_float(0x7fc00000u) : (a < b ? b : a);\n"
             "}";
    case EwOp::Min:
      return "float ew_Min(float a, float b) {\n"
             "  return a != a || b != b ? __uint_as_float(0x7fc00000u) : (b < a ? b : a);\n"
             "}";
    case EwOp::PRelu: return "float ew_PRelu(float a, float b) { return a < 0.0f ? a * b : a; }";
  }
  return nullptr;
}

// std::max(0, std::min(1, v)) with its NaN handling (NaN gives 0), as vec_impl.h's clamp01.
constexpr const char* kClamp01 =
    "float ew_clamp01(float v) {\n"
    "  const float m = v < 1.0f ? v : 1.0f;\n"
    "  return 0.0f < m ? m : 0.0f;\n"
    "}";

constexpr const char* kIndexStruct =
    "struct EwIndex {\n"
    "  int rank;\n"
    "  int num_inputs;\n"
    "  long long out_dims[6];\n"
    "  long long strides[8][6];\n"
    "  long long numel;\n"
    "};\n";

constexpr const char* kFloatIo =
    "typedef float ew_elem;\n"
    "static __device__ __forceinline__ float ew_load(float v) { return v; }\n"
    "static __device__ __forceinline__ float ew_store(float v) { return v; }\n";

// Round to nearest even, as __float2half_rn; NaN stays NaN, overflow gives infinity.
constexpr const char* kHalfIo =
    "typedef unsigned short ew_elem;  // IEEE binary16 bits\n"
    "static __device__ __forceinline__ float ew_load(unsigned short h) {\n"
    "  float f;\n"
    "  asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    "  return f;\n"
    "}\n"
    "static __device__ __forceinline__ unsigned short ew_store(float f) {\n"
    "  unsigned short h;\n"
    "  asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "  return h;\n"
    "}\n";

// Round to nearest even, as __float2bfloat16_rn; NaN stays a quiet NaN with its sign, overflow
// gives infinity (the carry runs into the exponent).
constexpr const char* kBFloat16Io =
    "typedef unsigned short ew_elem;  // bfloat16 bits (__nv_bfloat16's layout)\n"
    "static __device__ __forceinline__ float ew_load(unsigned short b) {\n"
    "  return __uint_as_float((unsigned int)b << 16);\n"
    "}\n"
    "static __device__ __forceinline__ unsigned short ew_store(float f) {\n"
    "  const unsigned int u = __float_as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);\n"
    "  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n";

bool isIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

[[noreturn]] void invalid(const std::string& why) {
  throwInternal("Elementwise CUDA source: " + why);
}

uint32_t floatBits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

}  // namespace

std::string cudaFloatLiteral(float v) {
  const uint32_t bits = floatBits(v);
  if (!std::isfinite(v)) return fmt::format("__uint_as_float(0x{:08x}u)", bits);
  const char* sign = (bits >> 31) ? "-" : "";
  const uint32_t exponent = (bits >> 23) & 0xffu;
  const uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0) {
    // Zero and the subnormals: mantissa * 2^-149 exactly.
    if (mantissa == 0) return fmt::format("{}0x0p+0f", sign);
    return fmt::format("{}0x{:x}p-149f", sign, mantissa);
  }
  // 1.mantissa in hex: 23 bits padded to 24 make six digits; trailing zero digits dropped.
  std::string digits = fmt::format("{:06x}", mantissa << 1);
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return fmt::format("{}0x1{}{}p{:+d}f", sign, digits.empty() ? "" : ".", digits,
                     static_cast<int>(exponent) - 127);
}

std::vector<std::string> elementwiseCompileOptions() { return {"--fmad=false"}; }

std::string elementwiseKernelSource(const ElementwiseProgram& program, size_t num_inputs,
                                    int rank, DType dtype, const std::string& kernel_name,
                                    const std::vector<EwAccess>& access_in) {
  if (dtype != DType::Float && dtype != DType::Float16 && dtype != DType::BFloat16)
    throwUnsupported(fmt::format(
        "Elementwise on CUDA computes float32, float16 and bfloat16, not {}", dtypeName(dtype)));
  if (num_inputs == 0 || num_inputs > static_cast<size_t>(kEwMaxInputs))
    invalid(fmt::format("{} inputs (1 to {})", num_inputs, kEwMaxInputs));
  if (!isIdentifier(kernel_name)) invalid(fmt::format("kernel name '{}' is no identifier", kernel_name));
  const auto& ins = program.instructions;
  if (ins.empty() || ins.size() > kMaxElementwiseInstructions)
    invalid(fmt::format("{} instructions (1 to {})", ins.size(), kMaxElementwiseInstructions));
  std::vector<EwAccess> access = access_in;
  if (access.empty()) access.assign(num_inputs, EwAccess::Strided);
  if (access.size() != num_inputs)
    invalid(fmt::format("{} input accesses for {} inputs", access.size(), num_inputs));
  const bool any_strided =
      std::find(access.begin(), access.end(), EwAccess::Strided) != access.end();
  if (any_strided && (rank < 1 || rank > kEwMaxRank))
    invalid(fmt::format("index rank {} (1 to {})", rank, kEwMaxRank));

  // Which inputs the program reads; constants and parameters numbered by first appearance, one
  // name per bit pattern. A value is uniform when it is the same at every element (a constant,
  // a scalar input, an op of those): uniform instructions run before the loop.
  std::vector<bool> read(num_inputs, false);
  std::map<uint32_t, size_t> constant_index;
  std::vector<float> constants;
  std::vector<bool> uniform(ins.size(), false);
  std::vector<bool> used_op(allEwOps().size(), false);
  auto constantName = [&](float v) {
    auto [it, fresh] = constant_index.emplace(floatBits(v), constants.size());
    if (fresh) constants.push_back(v);
    return fmt::format("k{}", it->second);
  };
  std::vector<std::string> calls(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    const EwInstruction& in = ins[i];
    if (static_cast<size_t>(in.op) >= allEwOps().size())
      invalid(fmt::format("t{}: op number {}", i, static_cast<int>(in.op)));
    const EwOpInfo& info = ewOpInfo(in.op);
    used_op[static_cast<size_t>(in.op)] = true;
    bool all_uniform = true;
    std::vector<std::string> args;
    for (int k = 0; k < info.operands; ++k) {
      const EwOperand& a = in.args[static_cast<size_t>(k)];
      switch (a.kind) {
        case EwOperand::Kind::Input:
          if (a.index < 0 || static_cast<size_t>(a.index) >= num_inputs)
            invalid(fmt::format("t{} reads x{}, the node has {} inputs", i, a.index, num_inputs));
          read[static_cast<size_t>(a.index)] = true;
          all_uniform = all_uniform && access[static_cast<size_t>(a.index)] == EwAccess::Scalar;
          args.push_back(fmt::format("x{}", a.index));
          break;
        case EwOperand::Kind::Temp:
          if (a.index < 0 || static_cast<size_t>(a.index) >= i)
            invalid(fmt::format("t{} reads t{} before it is defined", i, a.index));
          all_uniform = all_uniform && uniform[static_cast<size_t>(a.index)];
          args.push_back(fmt::format("t{}", a.index));
          break;
        case EwOperand::Kind::Constant: args.push_back(constantName(a.value)); break;
      }
    }
    for (int k = 0; k < info.params; ++k)
      args.push_back(constantName(in.params[static_cast<size_t>(k)]));
    uniform[i] = all_uniform;
    calls[i] = fmt::format("const float t{} = ew_{}({});", i, info.name, fmt::join(args, ", "));
  }

  const char* dtype_label = dtype == DType::Float16    ? "float16"
                           : dtype == DType::BFloat16 ? "bfloat16"
                                                      : "float32";
  const char* io = dtype == DType::Float16    ? kHalfIo
                   : dtype == DType::BFloat16 ? kBFloat16Io
                                              : kFloatIo;
  std::string s;
  s += fmt::format("// fusectl::Elementwise: {}\n", program.str());
  std::vector<std::string> reads;
  for (size_t k = 0; k < num_inputs; ++k) {
    const char* how = access[k] == EwAccess::Contiguous ? "contiguous"
                      : access[k] == EwAccess::Scalar   ? "scalar"
                                                        : "strided";
    reads.push_back(fmt::format("x{} {}{}", k, how, read[k] ? "" : " (unread)"));
  }
  s += fmt::format("// {}; {}", dtype_label, fmt::join(reads, ", "));
  s += any_strided ? fmt::format("; index rank {}\n", rank) : "\n";
  s += kIndexStruct;
  s += fmt::format("static_assert(sizeof(EwIndex) == {}, \"EwIndex is cuda_common.h's BroadcastIndex\");\n",
                   kEwIndexBytes);
  s += io;
  if (used_op[static_cast<size_t>(EwOp::HardSwish)] || used_op[static_cast<size_t>(EwOp::HardSigmoid)])
    s += fmt::format("static __device__ __forceinline__ {}\n", kClamp01);
  for (const EwOpInfo& info : allEwOps())
    if (used_op[static_cast<size_t>(info.op)])
      s += fmt::format("static __device__ __forceinline__ {}\n", opHelper(info.op));

  // Pointers do not alias: the executor serves outputs from buffers no live value holds.
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n    const EwIndex idx, ew_elem* __restrict__ y",
                   kEwThreadsPerBlock, kernel_name);
  for (size_t k = 0; k < num_inputs; ++k)
    s += fmt::format(",\n    const ew_elem* __restrict__ in{}", k);
  s += ") {\n";
  for (size_t c = 0; c < constants.size(); ++c)
    s += fmt::format("  const float k{} = {};  // {}\n", c, cudaFloatLiteral(constants[c]),
                     ewNumber(constants[c]));
  for (size_t k = 0; k < num_inputs; ++k)
    if (read[k] && access[k] == EwAccess::Scalar)
      s += fmt::format("  const float x{} = ew_load(in{}[0]);\n", k, k);
  for (size_t i = 0; i < ins.size(); ++i)
    if (uniform[i]) s += fmt::format("  {}\n", calls[i]);
  s += "  const long long n = idx.numel;\n";
  s += "  const long long step = (long long)blockDim.x * gridDim.x;\n";
  s += "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {\n";

  std::vector<size_t> strided;
  for (size_t k = 0; k < num_inputs; ++k)
    if (read[k] && access[k] == EwAccess::Strided) strided.push_back(k);
  if (!strided.empty()) {
    // The output coordinates, innermost first, each feeding every strided input's offset; the
    // outermost one is what is left of i, with no division.
    for (size_t k : strided) s += fmt::format("    long long o{} = 0;\n", k);
    s += "    long long r = i;\n";
    for (int d = rank - 1; d >= 1; --d) {
      s += fmt::format("    {{\n      const long long q = r / idx.out_dims[{}];\n", d);
      s += fmt::format("      const long long c = r - q * idx.out_dims[{}];\n", d);
      for (size_t k : strided) s += fmt::format("      o{} += c * idx.strides[{}][{}];\n", k, k, d);
      s += "      r = q;\n    }\n";
    }
    for (size_t k : strided) s += fmt::format("    o{} += r * idx.strides[{}][0];\n", k, k);
  }
  for (size_t k = 0; k < num_inputs; ++k) {
    if (!read[k] || access[k] == EwAccess::Scalar) continue;
    s += fmt::format("    const float x{} = ew_load(in{}[{}]);\n", k, k,
                     access[k] == EwAccess::Contiguous ? std::string("i") : fmt::format("o{}", k));
  }
  for (size_t i = 0; i < ins.size(); ++i)
    if (!uniform[i]) s += fmt::format("    {}\n", calls[i]);
  s += fmt::format("    y[i] = ew_store(t{});\n", ins.size() - 1);
  s += "  }\n}\n";
  return s;
}

}  // namespace fusectl::kernels::cuda
