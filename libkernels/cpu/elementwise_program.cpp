// fusectl::Elementwise: runs a fuse-elementwise group's program (elementwise_program.h) in one
// pass over memory. The output is walked one broadcast row at a time (broadcast.h: each input
// either runs along the row or holds one value for it) and each row in blocks of kBlock
// elements; every instruction runs over the whole block before the next, into a block-sized
// register that stays in L1, so a chain of k ops reads each input and writes the output once,
// where the unfused chain reads and writes k intermediate tensors.
//
// A value that is one number for the whole block (a broadcast input, a constant, or an op of
// those) stays one number: it is computed once per block, not per element. Each op computes
// what its standard kernel computes (elementwise.cpp): the transcendentals through the same
// vectorised loops (vec_kernels.h), the binary arithmetic through vec::binary (the same
// IEEE operations, per ISA), the rest with the same scalar expressions.
//
// float16/bfloat16 groups run the float32 program on float32 copies of the inputs and round the
// output once: where the unfused half chain rounds after every op, the group rounds at its end,
// so the two agree to the intermediates' rounding, not bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "broadcast.h"
#include "fusectl/graph/elementwise_program.h"
#include "fusectl/kernels/kernel.h"
#include "scalar_ops.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

using namespace kutil;

constexpr int64_t kBlock = 256;  // elements per register: 1 KiB, a few of them fit L1
constexpr size_t N = kMaxElementwiseInputs;

// The parsed program, with each temp given a register slot: a slot is reused once the last
// reader of the temp it held has run, so a long chain needs two or three slots, not one per op.
struct ProgramState : KernelState {
  std::string text;
  size_t num_inputs = 0;
  ElementwiseProgram program;
  std::vector<int> slot;  // per instruction: the register it writes
  int num_slots = 0;
  std::vector<int> operands;  // per instruction: ewOpInfo(op).operands, looked up once
  // The program is x * a + b, then optionally Relu (a batch norm the fold could not take, and
  // its activation: DenseNet's pre-activation blocks, ConvTasNet's group norms): the inputs of
  // x, a and b. Rows where a and b are one value each run affineRows, one pass per row.
  struct Affine {
    int x = -1, a = -1, b = -1;
    bool relu = false;
  };
  std::optional<Affine> affine;
  // The program is x * Sigmoid(x) (SiLU, as PyTorch exports it: a GroupNorm's or a
  // LayerNorm's activation, which no producer's epilogue took): the input of x. Rows where x runs
  // along the row go through vec::swishRow, one pass with the sigmoid in registers, where the
  // general path writes the block's sigmoids to a register and reads them back for the product.
  std::optional<int> silu;
};

// x * Sigmoid(x) as prepare() recognises it: Sigmoid of an input, then Mul of that input and
// the sigmoid, in either order.
std::optional<int> siluForm(const ElementwiseProgram& program) {
  const auto& ins = program.instructions;
  if (ins.size() != 2 || ins[0].op != EwOp::Sigmoid || ins[1].op != EwOp::Mul) return std::nullopt;
  const EwOperand& x = ins[0].args[0];
  if (x.kind != EwOperand::Kind::Input) return std::nullopt;
  const auto isX = [&](const EwOperand& o) {
    return o.kind == EwOperand::Kind::Input && o.index == x.index;
  };
  const auto isSigmoid = [](const EwOperand& o) {
    return o.kind == EwOperand::Kind::Temp && o.index == 0;
  };
  const EwOperand &a = ins[1].args[0], &b = ins[1].args[1];
  if ((isX(a) && isSigmoid(b)) || (isSigmoid(a) && isX(b))) return x.index;
  return std::nullopt;
}

// x * a + b (then Relu) as prepare() recognises it: Mul of two inputs, Add of that and a third
// input, optionally a Relu of the sum, each temp read once by the next instruction.
std::optional<ProgramState::Affine> affineForm(const ElementwiseProgram& program) {
  const auto& ins = program.instructions;
  if (ins.size() < 2 || ins.size() > 3) return std::nullopt;
  const auto isInput = [](const EwOperand& o) { return o.kind == EwOperand::Kind::Input; };
  const auto isTemp = [](const EwOperand& o, int t) {
    return o.kind == EwOperand::Kind::Temp && o.index == t;
  };
  if (ins[0].op != EwOp::Mul || !isInput(ins[0].args[0]) || !isInput(ins[0].args[1]))
    return std::nullopt;
  if (ins[1].op != EwOp::Add) return std::nullopt;
  ProgramState::Affine f;
  if (isTemp(ins[1].args[0], 0) && isInput(ins[1].args[1])) f.b = ins[1].args[1].index;
  else if (isTemp(ins[1].args[1], 0) && isInput(ins[1].args[0])) f.b = ins[1].args[0].index;
  else return std::nullopt;
  if (ins.size() == 3) {
    if (ins[2].op != EwOp::Relu || !isTemp(ins[2].args[0], 1)) return std::nullopt;
    f.relu = true;
  }
  f.x = ins[0].args[0].index;
  f.a = ins[0].args[1].index;
  return f;
}

std::unique_ptr<ProgramState> prepare(const KernelContext& ctx, std::string text) {
  auto s = std::make_unique<ProgramState>();
  s->num_inputs = ctx.numInputs();
  try {
    s->program = ElementwiseProgram::parse(text, ctx.numInputs());
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  s->text = std::move(text);
  const auto& ins = s->program.instructions;
  for (const EwInstruction& i : ins) s->operands.push_back(ewOpInfo(i.op).operands);
  s->affine = affineForm(s->program);
  s->silu = siluForm(s->program);
  std::vector<size_t> last_use(ins.size(), 0);
  for (size_t i = 0; i < ins.size(); ++i)
    for (int k = 0; k < s->operands[i]; ++k)
      if (ins[i].args[static_cast<size_t>(k)].kind == EwOperand::Kind::Temp)
        last_use[static_cast<size_t>(ins[i].args[static_cast<size_t>(k)].index)] = i;
  std::vector<int> free_slots;
  s->slot.assign(ins.size(), -1);
  for (size_t i = 0; i < ins.size(); ++i) {
    // Operands read for the last time here give their slot back first: an elementwise loop may
    // write the register it reads.
    for (int k = 0; k < s->operands[i]; ++k) {
      const EwOperand& a = ins[i].args[static_cast<size_t>(k)];
      if (a.kind != EwOperand::Kind::Temp || last_use[static_cast<size_t>(a.index)] != i) continue;
      const int sl = s->slot[static_cast<size_t>(a.index)];
      if (std::find(free_slots.begin(), free_slots.end(), sl) == free_slots.end())
        free_slots.push_back(sl);
    }
    if (free_slots.empty()) {
      s->slot[i] = s->num_slots++;
    } else {
      s->slot[i] = free_slots.back();
      free_slots.pop_back();
    }
  }
  return s;
}

// An operand on one block: n elements at p, or one value for all of them.
struct Operand {
  const float* p = nullptr;
  float value = 0.f;
  bool scalar() const { return p == nullptr; }
};

template <typename F>
void mapUnary(const Operand& x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x.p[i]);
}

// y = op(x) on a block; returns whether the op ran through vec::unary.
bool vectorUnary(const EwInstruction& ins, const float* x, float* y, int64_t n) {
  switch (ins.op) {
    case EwOp::Exp: vec::unary(vec::Unary::Exp, x, y, n); return true;
    case EwOp::Erf: vec::unary(vec::Unary::Erf, x, y, n); return true;
    case EwOp::Tanh: vec::unary(vec::Unary::Tanh, x, y, n); return true;
    case EwOp::Sigmoid: vec::unary(vec::Unary::Sigmoid, x, y, n); return true;
    case EwOp::Relu: vec::unary(vec::Unary::Relu, x, y, n); return true;
    case EwOp::Softsign: vec::unary(vec::Unary::Softsign, x, y, n); return true;
    case EwOp::HardSwish: vec::unary(vec::Unary::HardSwish, x, y, n); return true;
    case EwOp::Gelu: vec::unary(vec::Unary::Gelu, x, y, n); return true;
    case EwOp::Sqrt: vec::unary(vec::Unary::Sqrt, x, y, n); return true;
    case EwOp::Reciprocal: vec::unary(vec::Unary::Reciprocal, x, y, n); return true;
    case EwOp::Neg: vec::unary(vec::Unary::Neg, x, y, n); return true;
    case EwOp::Abs: vec::unary(vec::Unary::Abs, x, y, n); return true;
    case EwOp::LeakyRelu:
      vec::unary(vec::Unary::LeakyRelu, x, y, n, ins.params[0]);
      return true;
    case EwOp::Elu: vec::unary(vec::Unary::Elu, x, y, n, ins.params[0]); return true;
    case EwOp::Selu:
      vec::unary(vec::Unary::Selu, x, y, n, ins.params[0], ins.params[1]);
      return true;
    case EwOp::HardSigmoid:
      vec::unary(vec::Unary::HardSigmoid, x, y, n, ins.params[0], ins.params[1]);
      return true;
    default: return false;
  }
}

void unaryBlock(const EwInstruction& ins, const float* x, float* y, int64_t n) {
  if (vectorUnary(ins, x, y, n)) return;
  const Operand a{x};
  switch (ins.op) {
    case EwOp::Log: mapUnary(a, y, n, [](float v) { return std::log(v); }); return;
    case EwOp::Floor: mapUnary(a, y, n, [](float v) { return std::floor(v); }); return;
    case EwOp::Ceil: mapUnary(a, y, n, [](float v) { return std::ceil(v); }); return;
    case EwOp::Sin: mapUnary(a, y, n, [](float v) { return std::sin(v); }); return;
    case EwOp::Cos: mapUnary(a, y, n, [](float v) { return std::cos(v); }); return;
    case EwOp::Softplus: mapUnary(a, y, n, scalar::softplus<float>); return;
    case EwOp::Clip: {
      const float lo = ins.params[0], hi = ins.params[1];
      mapUnary(a, y, n, [=](float v) {
        v = v < lo ? lo : v;
        return v > hi ? hi : v;
      });
      return;
    }
    default: break;
  }
}

template <typename F>
void mapBinary(const Operand& a, const Operand& b, float* y, int64_t n, F f) {
  if (!a.scalar() && !b.scalar()) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a.p[i], b.p[i]);
  } else if (a.scalar()) {
    const float av = a.value;
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b.p[i]);
  } else {
    const float bv = b.value;
    for (int64_t i = 0; i < n; ++i) y[i] = f(a.p[i], bv);
  }
}

template <typename F>
void dispatchBinary(EwOp op, F&& apply) {
  switch (op) {
    case EwOp::Add: apply([](float a, float b) { return a + b; }); return;
    case EwOp::Sub: apply([](float a, float b) { return a - b; }); return;
    case EwOp::Mul: apply([](float a, float b) { return a * b; }); return;
    case EwOp::Div: apply([](float a, float b) { return a / b; }); return;
    case EwOp::Pow: apply([](float a, float b) { return std::pow(a, b); }); return;
    case EwOp::Max: apply(scalar::maxOp<float>); return;
    case EwOp::Min: apply(scalar::minOp<float>); return;
    case EwOp::PRelu: apply([](float v, float s) { return v < 0 ? v * s : v; }); return;
    default: return;
  }
}

vec::Binary vectorOp(EwOp op) {
  switch (op) {
    case EwOp::Add: return vec::Binary::Add;
    case EwOp::Sub: return vec::Binary::Sub;
    case EwOp::Mul: return vec::Binary::Mul;
    case EwOp::Div: return vec::Binary::Div;
    case EwOp::Max: return vec::Binary::Max;
    case EwOp::Min: return vec::Binary::Min;
    case EwOp::PRelu: return vec::Binary::PRelu;
    default: break;
  }
  return vec::Binary::Add;  // not reached: Pow runs through std::pow (runBlock)
}

// y = x * a + b, then Relu when asked, over one row: the Mul and the Add rounded apart as the
// program's two instructions round them (no FMA), and Relu as vec::unary's (x > 0 ? x : 0), so
// the result is the general path's bit for bit. False without AVX-512.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void affineRowAvx512(
    const float* x, float a, float b, bool relu, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), av), bv);
    if (relu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}
bool affineRow(const float* x, float a, float b, bool relu, float* y, int64_t n) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (!has_avx512) return false;
  affineRowAvx512(x, a, b, relu, y, n);
  return true;
}
#else
bool affineRow(const float*, float, float, bool, float*, int64_t) { return false; }
#endif

// Runs the program over one block of n elements whose inputs are `in` (a pointer per input and
// whether it runs along the block), into `out`. `regs` holds num_slots blocks.
void runBlock(const ProgramState& s, const std::array<Operand, N>& in, float* out, int64_t n,
              float* regs, std::vector<Operand>& temps) {
  const auto& prog = s.program.instructions;
  auto operand = [&](const EwOperand& a) -> Operand {
    switch (a.kind) {
      case EwOperand::Kind::Input: return in[static_cast<size_t>(a.index)];
      case EwOperand::Kind::Temp: return temps[static_cast<size_t>(a.index)];
      case EwOperand::Kind::Constant: return Operand{nullptr, a.value};
    }
    return {};
  };
  for (size_t i = 0; i < prog.size(); ++i) {
    const EwInstruction& ins = prog[i];
    const bool last = i + 1 == prog.size();
    float* y = last ? out : regs + static_cast<int64_t>(s.slot[i]) * kBlock;
    if (s.operands[i] == 1) {
      const Operand x = operand(ins.args[0]);
      if (x.scalar()) {
        float v;
        unaryBlock(ins, &x.value, &v, 1);
        if (!last) {
          temps[i] = Operand{nullptr, v};
          continue;
        }
        std::fill(out, out + n, v);
        continue;
      }
      unaryBlock(ins, x.p, y, n);
    } else {
      const Operand a = operand(ins.args[0]);
      const Operand b = operand(ins.args[1]);
      if (a.scalar() && b.scalar()) {
        float v = 0.f;
        dispatchBinary(ins.op, [&](auto f) { v = f(a.value, b.value); });
        if (!last) {
          temps[i] = Operand{nullptr, v};
          continue;
        }
        std::fill(out, out + n, v);
        continue;
      }
      if (ins.op == EwOp::Pow) {
        dispatchBinary(ins.op, [&](auto f) { mapBinary(a, b, y, n, f); });  // std::pow
      } else {
        vec::binary(vectorOp(ins.op), a.p, a.value, b.p, b.value, y, n);
      }
    }
    if (!last) temps[i] = Operand{y};
  }
}

void runElementwise(KernelContext& ctx) {
  const size_t num_inputs = ctx.numInputs();
  if (num_inputs == 0 || num_inputs > N)
    ctx.fail(fmt::format("takes 1 to {} inputs, has {}", N, num_inputs));
  std::vector<const std::vector<int64_t>*> shapes;
  const HostTensor& x0 = ctx.requireInput(0);
  if (!isFloatOrHalf(x0.dtype()))
    ctx.fail(fmt::format("input 0 is {}; Elementwise computes float32, float16 or bfloat16",
                         dtypeName(x0.dtype())));
  for (size_t i = 0; i < num_inputs; ++i) {
    const HostTensor& t = ctx.requireInput(i);
    if (t.dtype() != x0.dtype())
      ctx.fail(fmt::format("input {} is {} but input 0 is {}; the inputs must have one element "
                           "type", i, dtypeName(t.dtype()), dtypeName(x0.dtype())));
    shapes.push_back(&t.dims());
  }
  auto* state = dynamic_cast<ProgramState*>(ctx.state());
  // The program text is compared where it lies, not copied: on a tensor of a few hundred
  // elements the kernel's fixed costs are most of its time.
  const Attribute* program = ctx.node().attr("program");
  const std::string_view text =
      program && program->kind == AttrKind::String ? std::string_view(program->s.str()) : "";
  if (!state || state->text != text || state->num_inputs != num_inputs) {
    ctx.setState(prepare(ctx, ctx.attrString("program", "")));
    state = static_cast<ProgramState*>(ctx.state());
  }
  const std::vector<int64_t> dims = broadcastDims(ctx, shapes);
  static const std::vector<int64_t> kScalar;
  std::array<const std::vector<int64_t>*, N> plan_shapes;
  plan_shapes.fill(&kScalar);
  for (size_t i = 0; i < num_inputs; ++i) plan_shapes[i] = shapes[i];
  const BroadcastPlan<N> plan = planBroadcast<N>(dims, plan_shapes);
  // Only the program's last instruction writes the output, after every input of that block
  // was read: the output may take an input's buffer.
  HostTensor& y = ctx.allocateOutputOverInputs(0, x0.dtype(), dims);
  if (y.numel() == 0) return;
  std::array<FloatView, N> views;
  std::array<const float*, N> base{};
  for (size_t i = 0; i < num_inputs; ++i) {
    views[i] = FloatView(ctx.requireInput(i));
    base[i] = views[i].data();
  }
  FloatSink ys(y);
  float* yp = ys.data();
  const ProgramState& s = *state;
  // parallelRows' split, with the registers set up once per piece rather than once per row (a
  // row is as short as one channel's H x W when an input is per channel).
  const int64_t inner = plan.dims.back();
  const int64_t rows = plan.numel / inner;
  auto piece = [&](auto&& walk) {
    // Per thread and reused: no allocation (nor zeroing) per call. A piece runs to its end
    // before its thread starts another.
    thread_local std::vector<float> regs;
    thread_local std::vector<Operand> temps;
    const size_t num_regs = static_cast<size_t>(std::max(1, s.num_slots)) * kBlock;
    if (regs.size() < num_regs) regs.resize(num_regs);
    temps.assign(s.program.instructions.size(), Operand{});
    std::array<Operand, N> in{};
    walk([&](int64_t out_off, const std::array<int64_t, N>& off, int64_t len,
             const std::array<int64_t, N>& stride) {
      if (const auto& f = s.affine) {
        const auto at = [&](int k) { return static_cast<size_t>(k); };
        if (stride[at(f->x)] == 1 && stride[at(f->a)] == 0 && stride[at(f->b)] == 0 &&
            affineRow(base[at(f->x)] + off[at(f->x)], base[at(f->a)][off[at(f->a)]],
                      base[at(f->b)][off[at(f->b)]], f->relu, yp + out_off, len))
          return;
      }
      if (s.silu && stride[static_cast<size_t>(*s.silu)] == 1) {
        // The same bits as the program: vsigmoid(x), then x times it (1 * x is x).
        vec::swishRow(base[static_cast<size_t>(*s.silu)] + off[static_cast<size_t>(*s.silu)],
                      nullptr, yp + out_off, len, 1.0f);
        return;
      }
      for (int64_t b = 0; b < len; b += kBlock) {
        const int64_t n = std::min(kBlock, len - b);
        for (size_t k = 0; k < num_inputs; ++k) {
          const float* p = base[k] + off[k];
          in[k] = stride[k] == 0 ? Operand{nullptr, *p} : Operand{p + b * stride[k]};
        }
        runBlock(s, in, yp + out_off + b, n, regs.data(), temps);
      }
    });
  };
  if (rows == 1) {
    std::array<int64_t, N> st{};
    for (size_t k = 0; k < N; ++k) st[k] = plan.strides[k].back();
    parallelFor(inner, ctx.numThreads(), kParallelGrain, [&](int64_t b, int64_t e) {
      piece([&](auto&& row) {
        std::array<int64_t, N> off{};
        for (size_t k = 0; k < N; ++k) off[k] = b * st[k];
        row(b, off, e - b, st);
      });
    });
  } else {
    parallelFor(rows, ctx.numThreads(), std::max<int64_t>(1, kParallelGrain / inner),
                [&](int64_t b, int64_t e) {
                  piece([&](auto&& row) { forEachRow<N>(plan, row, b, e); });
                });
  }
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerElementwiseProgramKernels(KernelRegistry& r) {
  r.add({"fusectl", "Elementwise", 1, 1000, cpu::runElementwise});
}

}  // namespace fusectl::kernels
