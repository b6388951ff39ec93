// The expression program of fusectl::Elementwise: a group of elementwise ops (fuse-elementwise)
// written as one straight-line program over the node's inputs, which one kernel runs in one
// pass over memory. The text form is the node's `program` attribute:
//
//   t0 = Mul(x0, x1); t1 = Add(t0, 0.5); t2 = Sigmoid(t1); t3 = Mul(t0, t2)
//
// `xK` is input K, `tK` the result of instruction K (defined in order, each read only after it
// is defined), a number is a float constant (written with the shortest digits that read back as
// the same float; `inf`, `-inf`, `nan` too). The last instruction's result is the
// output. Operand counts are fixed per op; an op's parameters (LeakyRelu's alpha, Clip's
// bounds...) are numbers after its operands. Every value is float32 and broadcasts as ONNX's
// binary ops do (multidirectionally), so an instruction computes at each output element what the
// ONNX op it stands for computes there.
//
// The parser, the printer, the kernel (libkernels/cpu/elementwise_program.cpp) and the ONNX
// function body (fused_bodies/elementwise.cpp) read the op list below; adding an op is one row
// there, one case in the kernel and one in the body.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fusectl {

// The instructions, unary first. What each computes is the ONNX op of the same name (Gelu the
// exact one, fusectl::Gelu); parameters in the order of ONNX's attributes.
enum class EwOp : uint8_t {
  Neg, Abs, Exp, Log, Sqrt, Reciprocal, Sigmoid, Tanh, Relu, Erf, Floor, Ceil, Sin, Cos,
  Softplus, Softsign, HardSwish, Gelu,
  LeakyRelu,    // alpha
  Elu,          // alpha
  Selu,         // alpha, gamma
  HardSigmoid,  // alpha, beta
  Clip,         // lo, hi
  Add, Sub, Mul, Div, Pow, Max, Min, PRelu,
};

struct EwOpInfo {
  EwOp op;
  std::string_view name;
  int operands = 1;  // 1 or 2
  int params = 0;    // numbers after the operands
};
const std::vector<EwOpInfo>& allEwOps();
const EwOpInfo& ewOpInfo(EwOp op);
std::optional<EwOp> findEwOp(std::string_view name);

struct EwOperand {
  enum class Kind : uint8_t { Input, Temp, Constant };
  Kind kind = Kind::Input;
  int index = 0;      // input or temp number
  float value = 0.f;  // Constant
};

struct EwInstruction {
  EwOp op = EwOp::Neg;
  std::array<EwOperand, 2> args{};  // the first ewOpInfo(op).operands are used
  std::array<float, 2> params{};    // the first ewOpInfo(op).params are used
};

// Groups larger than this are split by the pass; the kernel keeps a register block per temp.
inline constexpr size_t kMaxElementwiseInstructions = 64;
// fusectl::Elementwise's inputs X0..X7.
inline constexpr size_t kMaxElementwiseInputs = 8;

struct ElementwiseProgram {
  std::vector<EwInstruction> instructions;

  // Parses the text form; `num_inputs` bounds the xK operands. Throws fusectl::Error
  // (InvalidInput) naming the position and the reason: an unknown op, a wrong operand count,
  // a temp read before it is defined, an input out of range, an empty or over-long program.
  static ElementwiseProgram parse(std::string_view text, size_t num_inputs);
  // The text form; parse(str()) gives the same program back.
  std::string str() const;
};

// A float as the program writes it: the shortest digits that read back as the same float.
std::string ewNumber(float v);

}  // namespace fusectl
