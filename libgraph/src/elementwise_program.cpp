// fusectl::Elementwise's program: the op table, the parser and the printer
// (elementwise_program.h).
#include "fusectl/graph/elementwise_program.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "fusectl/graph/error.h"

namespace fusectl {

const std::vector<EwOpInfo>& allEwOps() {
  static const std::vector<EwOpInfo> table = {
      {EwOp::Neg, "Neg"},
      {EwOp::Abs, "Abs"},
      {EwOp::Exp, "Exp"},
      {EwOp::Log, "Log"},
      {EwOp::Sqrt, "Sqrt"},
      {EwOp::Reciprocal, "Reciprocal"},
      {EwOp::Sigmoid, "Sigmoid"},
      {EwOp::Tanh, "Tanh"},
      {EwOp::Relu, "Relu"},
      {EwOp::Erf, "Erf"},
      {EwOp::Floor, "Floor"},
      {EwOp::Ceil, "Ceil"},
      {EwOp::Sin, "Sin"},
      {EwOp::Cos, "Cos"},
      {EwOp::Softplus, "Softplus"},
      {EwOp::Softsign, "Softsign"},
      {EwOp::HardSwish, "HardSwish"},
      {EwOp::Gelu, "Gelu"},
      {EwOp::LeakyRelu, "LeakyRelu", 1, 1},
      {EwOp::Elu, "Elu", 1, 1},
      {EwOp::Selu, "Selu", 1, 2},
      {EwOp::HardSigmoid, "HardSigmoid", 1, 2},
      {EwOp::Clip, "Clip", 1, 2},
      {EwOp::Add, "Add", 2},
      {EwOp::Sub, "Sub", 2},
      {EwOp::Mul, "Mul", 2},
      {EwOp::Div, "Div", 2},
      {EwOp::Pow, "Pow", 2},
      {EwOp::Max, "Max", 2},
      {EwOp::Min, "Min", 2},
      {EwOp::PRelu, "PRelu", 2},
  };
  return table;
}

const EwOpInfo& ewOpInfo(EwOp op) { return allEwOps()[static_cast<size_t>(op)]; }

std::optional<EwOp> findEwOp(std::string_view name) {
  for (const EwOpInfo& info : allEwOps())
    if (info.name == name) return info.op;
  return std::nullopt;
}

std::string ewNumber(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // fmt's shortest form that reads back as the same float ("0.2", "-10000", "1e-30").
  std::string s = fmt::format("{}", v);
  if (std::strtof(s.c_str(), nullptr) == v) return s;
  return fmt::format("{:.9g}", v);
}

namespace {

std::string operandText(const EwOperand& a) {
  switch (a.kind) {
    case EwOperand::Kind::Input: return fmt::format("x{}", a.index);
    case EwOperand::Kind::Temp: return fmt::format("t{}", a.index);
    case EwOperand::Kind::Constant: return ewNumber(a.value);
  }
  return "";
}

// A cursor over the text with error reporting by position.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  [[noreturn]] void fail(const std::string& why) const {
    throwInvalid(fmt::format("Elementwise program, at character {}: {}", pos_ + 1, why));
  }
  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool atEnd() {
    skipSpace();
    return pos_ >= text_.size();
  }
  bool accept(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(fmt::format("expected '{}'", c));
  }
  std::string_view word() {
    skipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }
  // A register name xK / tK: its letter and number; nullopt when the next token is no register.
  std::optional<std::pair<char, int>> reg() {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != 'x' && text_[pos_] != 't')) return std::nullopt;
    if (pos_ + 1 >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_ + 1])))
      return std::nullopt;
    const char letter = text_[pos_++];
    int64_t n = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      n = n * 10 + (text_[pos_++] - '0');
      if (n > 1000000) fail("register number out of range");
    }
    return std::make_pair(letter, static_cast<int>(n));
  }
  float number() {
    skipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != ')' &&
           !std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
    const std::string token(text_.substr(start, pos_ - start));
    if (token.empty()) fail("expected an operand");
    char* end = nullptr;
    const float v = std::strtof(token.c_str(), &end);
    if (end != token.c_str() + token.size()) fail(fmt::format("'{}' is not a number", token));
    return v;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

ElementwiseProgram ElementwiseProgram::parse(std::string_view text, size_t num_inputs) {
  ElementwiseProgram p;
  Reader r(text);
  while (!r.atEnd()) {
    if (p.instructions.size() >= kMaxElementwiseInstructions)
      r.fail(fmt::format("more than {} instructions", kMaxElementwiseInstructions));
    const int index = static_cast<int>(p.instructions.size());
    std::optional<std::pair<char, int>> target = r.reg();
    if (!target || target->first != 't' || target->second != index)
      r.fail(fmt::format("expected 't{}' (instructions define t0, t1... in order)", index));
    r.expect('=');
    const std::string_view name = r.word();
    std::optional<EwOp> op = findEwOp(name);
    if (!op) r.fail(fmt::format("unknown op '{}'", name));
    const EwOpInfo& info = ewOpInfo(*op);
    EwInstruction ins;
    ins.op = *op;
    r.expect('(');
    for (int k = 0; k < info.operands + info.params; ++k) {
      if (k > 0) r.expect(',');
      if (k >= info.operands) {
        ins.params[static_cast<size_t>(k - info.operands)] = r.number();
        continue;
      }
      EwOperand& a = ins.args[static_cast<size_t>(k)];
      if (std::optional<std::pair<char, int>> reg = r.reg()) {
        if (reg->first == 'x') {
          if (static_cast<size_t>(reg->second) >= num_inputs)
            r.fail(fmt::format("x{} read, but the node has {} inputs", reg->second, num_inputs));
          a.kind = EwOperand::Kind::Input;
        } else {
          if (reg->second >= index)
            r.fail(fmt::format("t{} read before it is defined", reg->second));
          a.kind = EwOperand::Kind::Temp;
        }
        a.index = reg->second;
      } else {
        a.kind = EwOperand::Kind::Constant;
        a.value = r.number();
      }
    }
    if (!r.accept(')'))
      r.fail(fmt::format("{} takes {} operand(s) and {} parameter(s)", info.name, info.operands,
                         info.params));
    p.instructions.push_back(ins);
    if (!r.accept(';') && !r.atEnd()) r.fail("expected ';' between instructions");
  }
  if (p.instructions.empty()) r.fail("the program is empty");
  return p;
}

std::string ElementwiseProgram::str() const {
  std::string s;
  for (size_t i = 0; i < instructions.size(); ++i) {
    const EwInstruction& ins = instructions[i];
    const EwOpInfo& info = ewOpInfo(ins.op);
    s += fmt::format("{}t{} = {}(", i == 0 ? "" : "; ", i, info.name);
    for (int k = 0; k < info.operands; ++k)
      s += fmt::format("{}{}", k ? ", " : "", operandText(ins.args[static_cast<size_t>(k)]));
    for (int k = 0; k < info.params; ++k)
      s += fmt::format(", {}", ewNumber(ins.params[static_cast<size_t>(k)]));
    s += ")";
  }
  return s;
}

}  // namespace fusectl
