// The ONNX function body of one fusectl::Elementwise program: the standard op each instruction
// stands for, in program order, with a Constant per number operand. The function is the group
// fuse-elementwise took, written back, so any runtime computes what the original nodes did.
#include "fusectl/graph/elementwise_program.h"
#include "fused_op_body.h"

namespace fusectl {

namespace {

Value* unaryBody(Body& b, const EwInstruction& ins, Value* x, const std::string& y) {
  switch (ins.op) {
    case EwOp::HardSwish: return activationBody(b, Activation::HardSwish, x, y);
    case EwOp::Gelu: return activationBody(b, Activation::Gelu, x, y);
    case EwOp::LeakyRelu: {
      Value* out = b.node("LeakyRelu", {x}, y);
      b.floatAttr("alpha", ins.params[0]);
      return out;
    }
    case EwOp::Elu: {
      Value* out = b.node("Elu", {x}, y);
      b.floatAttr("alpha", ins.params[0]);
      return out;
    }
    case EwOp::Selu: {
      Value* out = b.node("Selu", {x}, y);
      b.floatAttr("alpha", ins.params[0]);
      b.floatAttr("gamma", ins.params[1]);
      return out;
    }
    case EwOp::HardSigmoid: {
      Value* out = b.node("HardSigmoid", {x}, y);
      b.floatAttr("alpha", ins.params[0]);
      b.floatAttr("beta", ins.params[1]);
      return out;
    }
    case EwOp::Clip: {
      Value* hi = b.floatConstant(ins.params[1]);
      Value* lo = b.floatConstant(ins.params[0]);
      return b.clamp(x, lo, hi, y);
    }
    default: return b.node(std::string(ewOpInfo(ins.op).name), {x}, y);
  }
}

}  // namespace

std::string buildElementwiseFunction(const std::string& name, const ElementwiseProgram& program,
                                     size_t num_inputs, int64_t opset) {
  FunctionDef f = startFunction(name, opset);
  Body b(opset);
  std::vector<Value*> inputs;
  for (size_t i = 0; i < num_inputs; ++i) inputs.push_back(b.input(fmt::format("X{}", i)));
  std::vector<Value*> temps;
  auto operand = [&](const EwOperand& a) -> Value* {
    switch (a.kind) {
      case EwOperand::Kind::Input: return inputs.at(static_cast<size_t>(a.index));
      case EwOperand::Kind::Temp: return temps.at(static_cast<size_t>(a.index));
      case EwOperand::Kind::Constant: return b.floatConstant(a.value);
    }
    return nullptr;
  };
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const EwInstruction& ins = program.instructions[i];
    const std::string y = i + 1 == program.instructions.size() ? "Y" : "";
    if (ewOpInfo(ins.op).operands == 2) {
      Value* rhs = operand(ins.args[1]);  // the second operand first, as the other bodies do
      Value* lhs = operand(ins.args[0]);
      temps.push_back(b.node(std::string(ewOpInfo(ins.op).name), {lhs, rhs}, y));
    } else {
      temps.push_back(unaryBody(b, ins, operand(ins.args[0]), y));
    }
  }
  f.body = b.finish(temps.back());
  f.doc_string = fmt::format("fusectl Elementwise: {}; see docs/ops.md", program.str());
  return functionToBinary(f);
}

}  // namespace fusectl
