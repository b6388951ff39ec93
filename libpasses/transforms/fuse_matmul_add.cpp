// fuse-matmul-add: turn a 2-D MatMul followed by an Add of a bias into one Gemm.
//
//   A [M,K] -> MatMul(A, B [K,N]) -> m -> Add(m, bias) -> y   =>  Gemm(A, B, bias) -> y
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The MatMul output is read by the Add only and is not a graph output.
//  2. A has rank 2 (known statically). MatMul broadcasts a batched A [B,S,K]; Gemm has no batch
//     dims, and this pass does not insert Reshapes around it.
//  3. B has rank 2.
//  4. The Add's other operand (the bias, constant or not) has a known shape that Gemm's
//     unidirectional broadcast takes to [M,N] without changing the output: rank <= 2, each dim
//     1 or provably equal to the output's ([N], [1,N], [M,N], [M,1], a scalar).
//  5. A, B, bias and the output are float, double, float16 or bfloat16 (Gemm's float types).
//
// Math: Gemm(A, B, C) = 1 * A*B + 1 * C, which is MatMul + Add with C broadcast as Add would.
#include <fmt/format.h>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

Constraint operandRank(size_t input, const char* name) {
  return {fmt::format("rank-2:matmul.{}", input), [input, name](const Match& m, Why& why) {
            Node* mm = m.get("matmul");
            if (!mm->input(input))
              return why.fail(*mm, [&] { return mm->label() + " has no input " + name; });
            const Shape& s = mm->input(input)->shape();
            if (!s.hasRank()) {
              return why.fail(*mm, [&] {
                return fmt::format("{} input {} '{}' has unknown rank; Gemm needs rank 2",
                                   mm->label(), name, mm->input(input)->name());
              });
            }
            if (s.rank() != 2) {
              return why.fail(*mm, [&] {
                return fmt::format("{} input {} has rank {}; Gemm needs rank 2", mm->label(), name,
                                   s.rank());
              });
            }
            return true;
          }};
}

Constraint biasBroadcast() {
  return {"gemm-broadcast:add", [](const Match& m, Why& why) {
            Node* mm = m.get("matmul");
            Node* add = m.get("add");
            Value* bias = otherOperand(*add, mm->output(0));
            if (!bias) {
              return why.fail(*add, [&] {
                return fmt::format("{} adds {} output to itself", add->label(), mm->label());
              });
            }
            const Shape& b = bias->shape();
            if (!b.hasRank()) {
              return why.fail(*add, [&] {
                return fmt::format("{} operand '{}' has unknown shape", add->label(), bias->name());
              });
            }
            if (b.rank() > 2) {
              return why.fail(*add, [&] {
                return fmt::format("{} operand '{}' {} has rank {}; Gemm's C has rank <= 2",
                                   add->label(), bias->name(), b.str(), b.rank());
              });
            }
            // The output [M, N] from A [M, K] and B [K, N].
            const Dim out[2] = {mm->input(0)->shape()[0], mm->input(1)->shape()[1]};
            for (size_t i = 0; i < b.rank(); ++i) {
              const size_t axis = 2 - b.rank() + i;
              if (b[i].isStatic() && b[i].value() == 1) continue;
              if (b[i].provablyEqual(out[axis])) continue;
              return why.fail(*add, [&] {
                return fmt::format(
                    "{} operand '{}' {} does not broadcast to the MatMul output "
                    "[{},{}] without changing it (dim {})",
                    add->label(), bias->name(), b.str(), out[0].str(), out[1].str(), axis);
              });
            }
            return true;
          }};
}

Constraint floatTypes() {
  return {"dtype:matmul,add", [](const Match& m, Why& why) {
            Node* mm = m.get("matmul");
            Node* add = m.get("add");
            const std::pair<Node*, Value*> values[] = {{mm, mm->input(0)},
                                                       {mm, mm->input(1)},
                                                       {add, add->input(0)},
                                                       {add, add->input(1)},
                                                       {add, add->output(0)}};
            for (const std::pair<Node*, Value*>& read : values) {
              Node* node = read.first;  // named, not bound: the lambda below captures them
              Value* v = read.second;
              if (isFoldableFloat(v->dtype())) continue;
              return why.fail(*node, [&] {
                return fmt::format(
                    "{} {} '{}' is {}, expected float, double, float16 or bfloat16", node->label(),
                    v->producer() == node ? "output" : "input", v->name(),
                    v->dtype() == DType::Undefined ? "of unknown type" : dtypeName(v->dtype()));
              });
            }
            return true;
          }};
}

class FuseMatMulAddPass : public Pass {
 public:
  const PassInfo& info() const override { return FuseMatMulAddPassInfo; }

  std::vector<Pattern> patterns() const override { return {build()}; }

  bool run(const Graph& graph, PassContext& ctx) override {
    return applyPattern(graph, ctx, build(), [&](Rewriter& rw, const Match& m) {
             fuse(rw, m);
             ctx.count("fused");
             return true;
           }) > 0;
  }

 private:
  static Pattern build() {
    using namespace constraints;
    Pattern p = Pattern::parse("matmul:MatMul -> add:Add", "matmul-add");
    p.require(uniqueConsumer("matmul"))
        .require(operandRank(0, "A"))
        .require(operandRank(1, "B"))
        .require(biasBroadcast())
        .require(floatTypes());
    return p;
  }

  static void fuse(Rewriter& rw, const Match& m) {
    Node* mm = m.get("matmul");
    Node* add = m.get("add");
    NewNode gemm;
    gemm.op_type = "Gemm";
    gemm.inputs = {mm->input(0), mm->input(1), otherOperand(*add, mm->output(0))};
    // Before opset 7 a C smaller than [M, N] needs broadcast=1.
    const int64_t opset = rw.context().opset();
    if (opset > 0 && opset < 7) gemm.attributes.push_back(Attribute::ofInt("broadcast", 1));
    gemm.name = mm->name();
    gemm.doc_string = mm->doc_string;  // keeps the history of earlier rewrites
    // The bias may be computed after the MatMul; the Gemm sits where the Add was.
    rw.replaceMatch("matmul-add", m, add->output(0), std::move(gemm));
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseMatMulAddPass() { return std::make_unique<FuseMatMulAddPass>(); }

}  // namespace fusectl::passes
