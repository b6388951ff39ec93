// fusectl::Elementwise: the program's text form (parse/print round trip, one-line errors) and
// the kernel against the unfused ops it replaces, on random programs over random broadcast
// shapes (several blocks per row and a tail, stride-0 rows, scalars, one and two threads).
// The golden cases (testdata/passes/fuse-elementwise/) hold what the pass writes; the
// functions test holds the per-program ONNX bodies.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/elementwise_program.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/passes/optimize.h"

using namespace fusectl;
using namespace fusectl::kernels;
using namespace fusectl::passes;

TEST_CASE("elementwise program: text round trip", "[elementwise]") {
  std::string all;
  int t = 0;
  for (const EwOpInfo& op : allEwOps()) {
    std::string args = op.operands == 2 ? fmt::format("x{}, {}", t % 3, t ? "t0" : "-0.25")
                                        : (t ? "t0" : "x1");
    for (int p = 0; p < op.params; ++p) args += p ? ", inf" : ", 0.125";
    all += fmt::format("{}t{} = {}({})", t ? "; " : "", t, op.name, args);
    ++t;
  }
  const ElementwiseProgram p = ElementwiseProgram::parse(all, 3);
  REQUIRE(p.instructions.size() == allEwOps().size());
  CHECK(p.str() == all);
  CHECK(ElementwiseProgram::parse(p.str(), 3).str() == all);
  // Numbers read back as the same float.
  for (float v : {0.1f, -10000.f, 1e-30f, 3.4028235e38f, 1.f / 3.f, -0.f}) {
    const std::string text = fmt::format("t0 = Mul(x0, {})", ewNumber(v));
    const ElementwiseProgram q = ElementwiseProgram::parse(text, 1);
    CHECK(q.instructions[0].args[1].value == v);
    CHECK(q.str() == text);
  }
  // Whitespace is free.
  CHECK(ElementwiseProgram::parse(" t0=Add( x0 ,1 ) ;t1 = Relu(t0);", 1).str() ==
        "t0 = Add(x0, 1); t1 = Relu(t0)");
}

TEST_CASE("elementwise program: malformed text is one clear error", "[elementwise]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "the program is empty"},
      {"t0 = Foo(x0)", "unknown op 'Foo'"},
      {"t1 = Relu(x0)", "expected 't0'"},
      {"t0 = Relu(t0)", "t0 read before it is defined"},
      {"t0 = Relu(x2)", "x2 read, but the node has 2 inputs"},
      {"t0 = Add(x0)", "expected ','"},
      {"t0 = Relu(x0, x1)", "Relu takes 1 operand(s) and 0 parameter(s)"},
      {"t0 = Clip(x0, 1)", "expected ','"},
      {"t0 = Add(x0, 1a)", "'1a' is not a number"},
      {"t0 = Relu(x0) t1 = Relu(t0)", "expected ';'"},
  };
  for (const auto& [text, why] : bad) {
    INFO(text);
    try {
      ElementwiseProgram::parse(text, 2);
      FAIL("parsed");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidInput);
      CHECK_THAT(e.what(), Catch::Contains(why));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
  std::string long_program;
  for (size_t i = 0; i <= kMaxElementwiseInstructions; ++i)
    long_program += fmt::format("t{} = Neg({}); ", i, i ? fmt::format("t{}", i - 1) : "x0");
  CHECK_THROWS_WITH(ElementwiseProgram::parse(long_program, 1),
                    Catch::Contains("more than 64 instructions"));
}

TEST_CASE("elementwise program: spellings name the program", "[elementwise]") {
  const std::string a = elementwiseSpelling("t0 = Relu(x0)");
  CHECK(a == elementwiseSpelling("t0 = Relu(x0)"));
  CHECK(a != elementwiseSpelling("t0 = Relu(x1)"));
  CHECK(a.size() == std::string("Elementwise_").size() + 16);
  CHECK(fusedOpBaseName(a) == "Elementwise");
  CHECK(fusedOpBaseName("Elementwise") == "Elementwise");
  CHECK(fusedOpBaseName("Elementwise_xyz") == "Elementwise_xyz");
  CHECK(fusedOpBaseName("FusedConv_Relu") == "FusedConv_Relu");
}

namespace {

// A random chain/DAG of standard elementwise ops over `inputs` inputs, every value read, as
// ONNX text, with input shapes that broadcast to `out`.
std::string randomModel(std::mt19937& rng, const std::vector<int64_t>& out, int inputs,
                        int ops) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<std::string> header;
  for (int i = 0; i < inputs; ++i) {
    std::vector<std::string> dims;
    // Input 0 has the output's shape (so the output keeps its rank); the others drop leading
    // dims and set some to 1.
    const size_t lead = i == 0 ? 0 : static_cast<size_t>(pick(static_cast<int>(out.size()) + 1));
    for (size_t d = lead; d < out.size(); ++d)
      dims.push_back(i > 0 && pick(2) ? "1" : std::to_string(out[d]));
    header.push_back(dims.empty() ? fmt::format("float X{}", i)
                                  : fmt::format("float[{}] X{}", fmt::join(dims, ", "), i));
  }
  std::vector<std::string> body;
  std::vector<std::string> values;
  std::vector<int> reads;
  for (int i = 0; i < inputs; ++i) {
    values.push_back(fmt::format("X{}", i));
    reads.push_back(0);
  }
  int fresh = 0;
  auto emit = [&](const std::string& op, const std::vector<std::string>& args,
                  const std::string& attrs = "") {
    const std::string name = fmt::format("v{}", fresh++);
    body.push_back(fmt::format("  {} = {}{} ({})", name, op, attrs, fmt::join(args, ", ")));
    values.push_back(name);
    reads.push_back(0);
    return name;
  };
  auto operand = [&] {
    // Prefer values nobody read yet, so that every value ends up read.
    std::vector<int> unread;
    for (size_t k = 0; k < values.size(); ++k)
      if (reads[k] == 0) unread.push_back(static_cast<int>(k));
    const int k = !unread.empty() && pick(3) ? unread[static_cast<size_t>(pick(static_cast<int>(unread.size())))]
                                             : pick(static_cast<int>(values.size()));
    ++reads[static_cast<size_t>(k)];
    return values[static_cast<size_t>(k)];
  };
  const std::vector<std::string> unary = {"Neg", "Abs", "Sigmoid", "Tanh", "Relu", "Erf",
                                          "Floor", "Ceil", "Sin", "Cos", "Softplus", "Softsign",
                                          "HardSwish"};
  const std::vector<std::string> binary = {"Add", "Sub", "Mul", "Max", "Min", "PRelu"};
  for (int i = 0; i < ops; ++i) {
    switch (pick(8)) {
      case 0:
      case 1: emit(unary[static_cast<size_t>(pick(static_cast<int>(unary.size())))], {operand()}); break;
      case 2:
      case 3:
      case 4: {
        const std::string a = operand(), b = operand();
        emit(binary[static_cast<size_t>(pick(static_cast<int>(binary.size())))], {a, b});
        break;
      }
      case 5: {  // bounded before Exp; positive before Log/Sqrt; away from zero before Div
        const std::string t = emit("Tanh", {operand()});
        emit(pick(2) ? "Exp" : "Reciprocal", {emit("Add", {emit("Exp", {t}), "one"})});
        break;
      }
      case 6: {
        const std::string s = emit("Sigmoid", {operand()});
        emit(pick(2) ? "Log" : "Sqrt", {s});
        break;
      }
      default: {
        const int which = pick(5);
        const std::string x = operand();
        if (which == 0) emit("LeakyRelu", {x}, "<alpha = 0.3>");
        else if (which == 1) emit("Elu", {x}, "<alpha = 0.7>");
        else if (which == 2) emit("HardSigmoid", {x}, "<alpha = 0.25, beta = 0.45>");
        else if (which == 3) emit("Selu", {x});
        else emit("Clip", {x, "lo", "hi"});
      }
    }
  }
  // Everything not read yet goes into the output.
  std::string acc;
  for (size_t k = 0, n = values.size(); k < n; ++k) {
    if (reads[k] != 0) continue;
    acc = acc.empty() ? values[k] : emit("Add", {acc, values[k]});
  }
  body.push_back(fmt::format("  Y = Mul ({}, half)", acc));
  return fmt::format(
      "<ir_version: 8, opset_import: [\"\" : 13]>\ng ({}) => (float[{}] Y)\n"
      "<float one = {{1}}, float half = {{0.5}}, float lo = {{-0.4}}, float hi = {{0.9}}>\n"
      "{{\n{}\n}}\n",
      fmt::join(header, ", "), fmt::join(out, ", "), fmt::join(body, "\n"));
}

// The model of `text`, and the same after fuse-elementwise.
std::pair<std::unique_ptr<Model>, std::unique_ptr<Model>> originalAndFused(
    const std::string& text) {
  std::unique_ptr<Model> original = parseModelText(text, "model");
  std::unique_ptr<Model> fused = parseModelText(text, "model");
  OptimizeRequest request;
  request.passes = "fuse-elementwise";
  optimize(*fused, request);
  return {std::move(original), std::move(fused)};
}

}  // namespace

TEST_CASE("elementwise kernel: random programs equal the unfused ops", "[elementwise][kernels]") {
  std::mt19937 rng(20261202);
  const std::vector<std::vector<int64_t>> shapes = {
      {1000}, {3, 257}, {2, 3, 5, 7}, {2, 1, 600}, {1}, {4, 256}, {2, 70, 3}};
  int fused_models = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<int64_t>& out = shapes[static_cast<size_t>(trial) % shapes.size()];
    const int inputs = 1 + static_cast<int>(rng() % 5);
    const int ops = 2 + static_cast<int>(rng() % 14);
    const std::string text = randomModel(rng, out, inputs, ops);
    INFO("trial " << trial << "\n" << text);
    auto [original, fused] = originalAndFused(text);
    size_t elementwise = 0, others = 0;
    for (const Node* n : fused->graph->nodes())
      (fusedOpBaseName(n->opType()) == "Elementwise" ? elementwise : others) += 1;
    // Some group forms; the whole model is one group unless a value smaller than the output
    // (an op of broadcast inputs only) stays out, or the eight-input cap splits it.
    CHECK(elementwise >= 1);
    if (elementwise == 1 && others == 0) ++fused_models;
    for (int threads : {1, 2}) {
      ComparisonInputs in;
      in.seed = static_cast<uint64_t>(trial);
      in.execution.num_threads = threads;
      Tolerance tol;
      tol.atol = 1e-6;
      tol.rtol = 1e-6;
      const Comparison c = compareModels(*original, *fused, in, tol);
      for (const OutputComparison& o : c.outputs) {
        INFO("threads " << threads << ": " << o.detail);
        CHECK(o.passed);
      }
    }
  }
  CHECK(fused_models >= 20);
}

namespace {

// The model of `text` fused by -O3 into exactly one node, an Elementwise, that computes the
// original's outputs bit for bit on seeded inputs, on one and two threads.
void requireOneExactElementwise(const std::string& text, uint32_t seed) {
  auto [original, fused] = originalAndFused(text);
  size_t nodes = 0, elementwise = 0;
  for (const Node* n : fused->graph->nodes()) {
    ++nodes;
    if (fusedOpBaseName(n->opType()) == "Elementwise") ++elementwise;
  }
  REQUIRE(nodes == 1);
  REQUIRE(elementwise == 1);
  for (int threads : {1, 2}) {
    ComparisonInputs in;
    in.seed = seed;
    in.execution.num_threads = threads;
    Tolerance exact;
    exact.atol = 0;
    exact.rtol = 0;
    const Comparison cmp = compareModels(*original, *fused, in, exact);
    for (const OutputComparison& o : cmp.outputs) {
      INFO("threads " << threads << ": " << o.detail);
      CHECK(o.passed);
    }
  }
}

}  // namespace

// x * a + b (then Relu) with a and b one value per row runs affineRow, one AVX-512 pass per row
// (a batch norm and its activation that the fold could not take): the same bits as the unfused
// Mul, Add and Relu, rows of odd lengths (a partial last vector), either Add operand order,
// with and without the Relu, and a and b per channel of a 4-D tensor or per row of a 2-D one.
TEST_CASE("elementwise kernel: the per-row affine path equals the unfused ops bit for bit",
          "[elementwise][kernels]") {
  struct Case {
    const char* x;
    const char* ab;
    const char* body;
  };
  const Case cases[] = {
      {"2, 5, 3, 37", "5, 1, 1", "m = Mul (X, A)\n  s = Add (m, B)\n  Y = Relu (s)"},
      {"1, 7, 4, 4", "7, 1, 1", "m = Mul (X, A)\n  Y = Add (B, m)"},
      {"9, 19", "9, 1", "m = Mul (X, A)\n  s = Add (B, m)\n  Y = Relu (s)"},
  };
  for (const Case& c : cases) {
    const std::string text = fmt::format(
        "<ir_version: 8, opset_import: [\"\" : 13]>\n"
        "g (float[{0}] X, float[{1}] A, float[{1}] B) => (float[{0}] Y)\n{{\n  {2}\n}}\n",
        c.x, c.ab, c.body);
    INFO(text);
    requireOneExactElementwise(text, 7);
  }
}

// x * Sigmoid(x) (SiLU as PyTorch exports it) runs vec::swishRow, one pass per row: the same bits
// as the unfused Sigmoid and Mul, either Mul operand order, rows of odd lengths, and a row that
// is the whole tensor; an input broadcast along the rows keeps the general path.
TEST_CASE("elementwise kernel: the SiLU path equals the unfused ops bit for bit",
          "[elementwise][kernels]") {
  struct Case {
    const char* x;
    const char* body;
  };
  const Case cases[] = {
      {"2, 5, 3, 37", "s = Sigmoid (X)\n  Y = Mul (X, s)"},
      {"1, 64, 9, 9", "s = Sigmoid (X)\n  Y = Mul (s, X)"},
      {"1001", "s = Sigmoid (X)\n  Y = Mul (X, s)"},
  };
  for (const Case& c : cases) {
    const std::string text = fmt::format(
        "<ir_version: 8, opset_import: [\"\" : 13]>\n"
        "g (float[{0}] X) => (float[{0}] Y)\n{{\n  {1}\n}}\n",
        c.x, c.body);
    INFO(text);
    requireOneExactElementwise(text, 11);
  }
}
