// Patterns: textual syntax (round trip, errors naming the column) and matching on graphs written
// in ONNX textual syntax, with the near-miss reasons users see in `fusectl match --explain`.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/pattern.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::passes;

namespace {

std::unique_ptr<Model> model(const std::string& text) { return parseModelText(text, "test"); }

std::string parseError(const std::string& text) {
  try {
    Pattern::parse(text);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Usage);
    return e.what();
  }
  FAIL("pattern parsed: " << text);
  return "";
}

std::vector<std::string> labels(const Match& m) {
  std::vector<std::string> out;
  for (Node* n : m.nodes()) out.push_back(n ? n->label() : "-");
  return out;
}

// Conv_3 -> BatchNormalization_4 -> Relu_5, plus Conv_6 -> Add_7 (no BN), with node names.
const char* kConvChains = R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X, float[1, 2, 4, 4] R) => (float[1, 2, 4, 4] Y, float[1, 2, 4, 4] Z)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}, float[2] s = {1, 1}, float[2] b = {0, 0},
 float[2] mean = {0, 0}, float[2] var = {1, 1}>
{
  C = Conv (X, W)
  N = BatchNormalization (C, s, b, mean, var)
  Y = Relu (N)
  C2 = Conv (X, W)
  Z = Add (C2, R)
}
#@ node 0 name "Conv_3"
#@ node 1 name "BatchNormalization_4"
#@ node 2 name "Relu_5"
#@ node 3 name "Conv_6"
#@ node 4 name "Add_7"
)";

// `text` prints back as written, and the printed text parses to the same structure.
void checkRoundTrip(const char* text) {
  INFO(text);
  Pattern p = Pattern::parse(text);
  CHECK(p.str() == text);
  Pattern q = Pattern::parse(p.str());
  CHECK(q.str() == p.str());
  REQUIRE(q.nodes.size() == p.nodes.size());
  REQUIRE(q.edges.size() == p.edges.size());
  REQUIRE(q.leaves.size() == p.leaves.size());
  CHECK(q.root == p.root);
  for (size_t i = 0; i < p.edges.size(); ++i) {
    CHECK(q.edges[i].from == p.edges[i].from);
    CHECK(q.edges[i].to == p.edges[i].to);
    CHECK(q.edges[i].from_output == p.edges[i].from_output);
    CHECK(q.edges[i].to_input == p.edges[i].to_input);
    CHECK(q.edges[i].operand == p.edges[i].operand);
  }
  for (size_t i = 0; i < p.nodes.size(); ++i)
    CHECK(q.nodes[i].operands.size() == p.nodes[i].operands.size());
  for (size_t i = 0; i < p.leaves.size(); ++i) {
    CHECK(q.leaves[i].capture == p.leaves[i].capture);
    CHECK(q.leaves[i].kind == p.leaves[i].kind);
    CHECK(q.leaves[i].equals == p.leaves[i].equals);
  }
}

}  // namespace

TEST_CASE("pattern: parse and print round trip", "[pattern]") {
  const char* texts[] = {
      "Conv -> BatchNormalization -> Relu",
      "conv:Conv -> bn:BatchNormalization -> act:Relu|Clip|LeakyRelu",
      "c:Conv -> add:Add ; other:* -> add",
      "c:Conv.1 -> 1:add:Add",
      "x:* -> ^m:MatMul",
      "x:* -> q:MatMul ; x -> k:MatMul ; x -> v:MatMul",
      "f:fusectl::FusedConv|FusedGemm -> Relu",
      "com.microsoft::* -> Add",
      "Conv",
      "a:Conv -> b:Relu -> c:Add ; a -> 0:c",
  };
  for (const char* t : texts) checkRoundTrip(t);

  // Spacing is free; printing is canonical.
  CHECK(Pattern::parse("  c : Conv->bn:BatchNormalization ;other:*->bn ").str() ==
        "c:Conv -> bn:BatchNormalization ; other:* -> bn");
  // Fields.
  Pattern p = Pattern::parse("c:Conv.0 -> 1:add:Add ; ^other:fusectl::* -> 0:add");
  REQUIRE(p.nodes.size() == 3);
  CHECK(p.root == 2);
  CHECK(p.nodes[1].op_types == std::vector<std::string>{"Add"});
  CHECK(p.nodes[2].op_types.empty());
  CHECK(p.nodes[2].domain == "fusectl");
  CHECK(p.edges[0].to_input == 1);
  CHECK(p.edges[1].to_input == 0);
  CHECK(*p.indexOf("add") == 1);
  CHECK(!p.indexOf("nope"));
  CHECK(p.str() == "c:Conv -> 1:add:Add ; ^other:fusectl::* -> 0:add");

  // A pattern built in code prints so that it parses back to the same structure.
  Pattern built;
  built.nodes = {PatternNode{"", {"Relu"}, "", {}, {}}, PatternNode{"", {"Add"}, "", {}, {}},
                 PatternNode{"", {"Conv"}, "", {}, {}}};
  built.edges = {PatternEdge{2, 1, 0, 1, false}, PatternEdge{0, 1, 0, 0, false}};
  std::string text = built.str();
  Pattern back = Pattern::parse(text);
  INFO(text);
  REQUIRE(back.nodes.size() == 3);
  CHECK(back.nodes[0].op_types[0] == "Relu");
  CHECK(back.nodes[2].op_types[0] == "Conv");
  CHECK(back.edges[0].from == 2);
  CHECK(back.edges[0].to_input == 1);
  CHECK(back.edges[1].from == 0);
}

TEST_CASE("pattern: syntax errors name the column", "[pattern]") {
  CHECK_THAT(parseError(""), Catch::Contains("empty pattern"));
  CHECK_THAT(parseError("Conv ->"), Catch::Contains("column 8: expected a node after '->'"));
  CHECK_THAT(parseError("Conv -> -> Relu"), Catch::Contains("column 9"));
  CHECK_THAT(parseError("c:Conv -> c:Relu"),
             Catch::Contains("column 11: capture 'c' is already defined"));
  CHECK_THAT(parseError("1:Conv -> Relu"), Catch::Contains("input slot 1 given, but nothing"));
  CHECK_THAT(parseError("Conv -> Relu.0"), Catch::Contains("output slot 0 given"));
  CHECK_THAT(parseError("a:Conv ; b:Relu"),
             Catch::Contains("column 10: 'b' is not connected to the root"));
  CHECK_THAT(parseError("Conv -> Relu|"), Catch::Contains("column 14: expected an op type, found the end"));
  CHECK_THAT(parseError("Conv Relu"), Catch::Contains("column 6: expected '->', ';' or the end"));
  CHECK_THAT(parseError("Relu|Relu"), Catch::Contains("'Relu' listed twice"));
  CHECK_THAT(parseError("c:Conv -> c"), Catch::Contains("a node cannot feed itself"));
  CHECK_THAT(parseError("c:Conv ; c"), Catch::Contains("'c' alone says nothing"));
  CHECK_THAT(parseError("^a:Conv -> ^b:Relu"), Catch::Contains("more than one node marked"));
  CHECK_THAT(parseError("a:Conv -> b:Relu\n-> -> x"), Catch::Contains("line 2, column 4"));
  CHECK_THAT(parseError("Conv -> $"), Catch::Contains("found '$'"));
}

TEST_CASE("pattern: a pattern parsed again is a fresh copy, errors are raised every time",
          "[pattern]") {
  // Pattern::parse keeps what it parsed by text and name: each caller still owns its copy.
  const std::string text = "c:Conv -> ^r:Relu";
  Pattern first = Pattern::parse(text, "first-name");
  first.require(Constraint("always", [](const Match&, Why&) { return true; })).withBenefit(7);
  first.nodes[0].capture = "changed";
  const Pattern again = Pattern::parse(text, "first-name");
  CHECK(again.constraints.empty());
  CHECK(again.benefit == 1);
  CHECK(again.nodes[0].capture == "c");
  CHECK(again.str() == Pattern::parse(again.str()).str());
  // The name is part of what was parsed.
  CHECK(Pattern::parse(text, "other-name").name == "other-name");
  CHECK(Pattern::parse(text).name.empty());
  // A text that failed fails again with the same message.
  CHECK_THAT(parseError("Conv -> -> Relu"), Catch::Contains("column 9"));
  CHECK_THAT(parseError("Conv -> -> Relu"), Catch::Contains("column 9"));
}

TEST_CASE("pattern: Conv -> BN -> Relu chain", "[pattern]") {
  auto m = model(kConvChains);
  Pattern p = Pattern::parse("conv:Conv -> bn:BatchNormalization -> act:Relu", "conv-bn-relu");
  MatchResult r = matchPattern(*m->graph, p);
  CHECK(r.candidates == 2);
  REQUIRE(r.matches.size() == 1);
  CHECK(labels(r.matches[0]) ==
        std::vector<std::string>{"Conv_3", "BatchNormalization_4", "Relu_5"});
  CHECK(r.matches[0].get("bn")->label() == "BatchNormalization_4");
  CHECK(r.matches[0].root()->label() == "Conv_3");
  CHECK(r.matches[0].get("nope") == nullptr);
  REQUIRE(r.near_misses.size() == 1);
  const NearMiss& miss = r.near_misses[0];
  CHECK(miss.pattern == "conv-bn-relu");
  CHECK(miss.anchor == "Conv_6");
  CHECK(miss.constraint == "structure");
  CHECK(miss.node == "Conv_6");
  CHECK(miss.reason == "Conv_6 output 0 feeds Add_7, not BatchNormalization");

  // Rooted at the end, the walk goes consumer -> producer.
  Pattern up = Pattern::parse("conv:Conv -> bn:BatchNormalization -> ^act:Relu");
  r = matchPattern(*m->graph, up);
  REQUIRE(r.matches.size() == 1);
  CHECK(labels(r.matches[0]) ==
        std::vector<std::string>{"Conv_3", "BatchNormalization_4", "Relu_5"});

  // Alternatives and a wrong input slot.
  Pattern alt = Pattern::parse("c:Conv -> a:Relu|Add");
  r = matchPattern(*m->graph, alt);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].get("a")->label() == "Add_7");
  r = matchPattern(*m->graph, Pattern::parse("c:Conv -> 1:a:Add"));
  CHECK(r.matches.empty());
  REQUIRE(r.near_misses.size() == 2);
  CHECK(r.near_misses[1].reason == "Conv_6 output 0 feeds Add_7 at input 0, not input 1");
  r = matchPattern(*m->graph, Pattern::parse("c:Conv -> 0:a:Add"));
  CHECK(r.matches.size() == 1);

  // Without explanations nothing is formatted, and structural misses can be left out.
  MatchOptions quiet;
  quiet.explain = false;
  r = matchPattern(*m->graph, p, quiet);
  CHECK(r.matches.size() == 1);
  CHECK(r.near_misses.empty());
  MatchOptions constraints_only;
  constraints_only.report_structural = false;
  r = matchPattern(*m->graph, p, constraints_only);
  CHECK(r.near_misses.empty());

  // matchAt on one anchor.
  Match one;
  NearMiss why;
  CHECK(matchAt(*m->graph, p, m->graph->findNode("Conv_3"), one, &why));
  CHECK(one.get("act")->label() == "Relu_5");
  CHECK_FALSE(matchAt(*m->graph, p, m->graph->findNode("Relu_5"), one, &why));
  CHECK(why.reason == "Relu_5 is Relu, not Conv");
}

TEST_CASE("pattern: residual Add with one input from a Conv", "[pattern]") {
  auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[1, 2, 4, 4] Z)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}>
{
  R = Relu (X)
  C = Conv (X, W)
  Y = Add (R, C)
  S = Sigmoid (X)
  Z = Add (S, X)
}
#@ node 0 name "Relu_1"
#@ node 1 name "Conv_2"
#@ node 2 name "Add_3"
#@ node 3 name "Sigmoid_4"
#@ node 4 name "Add_5"
)");
  // Rooted at the Add: one input from a Conv, the other from anything.
  Pattern p = Pattern::parse("c:Conv -> ^add:Add ; other:* -> add", "residual");
  MatchResult r = matchPattern(*m->graph, p);
  CHECK(r.candidates == 2);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].get("add")->label() == "Add_3");
  CHECK(r.matches[0].get("c")->label() == "Conv_2");
  CHECK(r.matches[0].get("other")->label() == "Relu_1");
  REQUIRE(r.near_misses.size() == 1);
  CHECK(r.near_misses[0].anchor == "Add_5");
  CHECK(r.near_misses[0].reason ==
        "no other input of Add_5 comes from Conv (inputs from Sigmoid_4, 'X')");

  // Rooted at the Conv, "other" must be a different node than the Conv (injective binding).
  Pattern q = Pattern::parse("c:Conv -> add:Add ; other:* -> add");
  r = matchPattern(*m->graph, q);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].get("other")->label() == "Relu_1");
}

TEST_CASE("pattern: three MatMuls sharing one input", "[pattern]") {
  auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 4] X) => (float[2, 4] Q, float[2, 4] K, float[2, 4] V)
<float[4, 4] Wq = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1},
 float[4, 4] Wk = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1},
 float[4, 4] Wv = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1}>
{
  H = Relu (X)
  Q = MatMul (H, Wq)
  K = MatMul (H, Wk)
  V = MatMul (H, Wv)
}
)");
  Pattern p = Pattern::parse("x:Relu -> q:MatMul ; x -> k:MatMul ; x -> v:MatMul", "qkv");
  MatchResult r = matchPattern(*m->graph, p);
  REQUIRE(r.matches.size() == 1);
  const Match& mt = r.matches[0];
  CHECK(mt.get("q") != mt.get("k"));
  CHECK(mt.get("k") != mt.get("v"));
  CHECK(mt.get("q") != mt.get("v"));
  CHECK(mt.get("q")->label() == "MatMul(Q)");
  CHECK(mt.get("v")->label() == "MatMul(V)");

  // A fourth MatMul is one too many: the reason says the consumers are used up.
  Pattern four = Pattern::parse(
      "x:Relu -> q:MatMul ; x -> k:MatMul ; x -> v:MatMul ; x -> o:MatMul", "qkvo");
  r = matchPattern(*m->graph, four);
  CHECK(r.matches.empty());
  REQUIRE(r.near_misses.size() == 1);
  CHECK(r.near_misses[0].reason ==
        "Relu(H) output 0 feeds no other MatMul (consumers: MatMul(Q), MatMul(K), MatMul(V))");

  // Rooted at a MatMul, every MatMul anchors a match (overlapping matches are allowed).
  Pattern rooted = Pattern::parse("x:Relu -> ^q:MatMul ; x -> k:MatMul ; x -> v:MatMul");
  r = matchPattern(*m->graph, rooted);
  CHECK(r.matches.size() == 3);
}

TEST_CASE("pattern: near-miss reasons from constraints", "[pattern]") {
  SECTION("multi-consumer") {
    auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[1, 4, 4, 4] K)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}, float[2] s = {1, 1}, float[2] b = {0, 0},
 float[2] mean = {0, 0}, float[2] var = {1, 1}>
{
  C = Conv (X, W)
  Y = BatchNormalization (C, s, b, mean, var)
  K = Concat <axis = 1> (C, Y)
}
#@ node 0 name "Conv_12"
#@ node 1 name "BatchNormalization_13"
#@ node 2 name "Concat_40"
)");
    Pattern p = Pattern::parse("conv:Conv -> bn:BatchNormalization", "conv-bn");
    p.require(constraints::uniqueConsumer("conv"));
    MatchResult r = matchPattern(*m->graph, p);
    CHECK(r.matches.empty());
    REQUIRE(r.near_misses.size() == 1);
    CHECK(r.near_misses[0].constraint == "unique-consumer:conv");
    CHECK(r.near_misses[0].node == "Conv_12");
    CHECK(r.near_misses[0].reason ==
          "Conv_12 output has 2 consumers: BatchNormalization_13, Concat_40");
    // Without the constraint, it matches.
    CHECK(matchPattern(*m->graph, Pattern::parse("conv:Conv -> bn:BatchNormalization"))
              .matches.size() == 1);
  }

  SECTION("non-constant weight") {
    auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X, float[2] var) => (float[1, 2, 4, 4] Y)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}, float[2] s = {1, 1}, float[2] b = {0, 0},
 float[2] mean = {0, 0}>
{
  C = Conv (X, W)
  Y = BatchNormalization (C, s, b, mean, var)
}
#@ node 1 name "BatchNormalization_7"
)");
    Pattern p = Pattern::parse("conv:Conv -> bn:BatchNormalization", "conv-bn");
    p.require(constraints::constantInput("conv", 1));
    for (int i = 1; i <= 4; ++i) p.require(constraints::constantInput("bn", i));
    MatchResult r = matchPattern(*m->graph, p);
    REQUIRE(r.near_misses.size() == 1);
    CHECK(r.near_misses[0].constraint == "constant-input:bn.4");
    CHECK(r.near_misses[0].node == "BatchNormalization_7");
    CHECK(r.near_misses[0].reason ==
          "BatchNormalization_7 input 'var' is not a constant (it is a graph input)");
  }

  SECTION("training-form BatchNormalization") {
    auto m = model(R"(
<ir_version: 8, opset_import: ["" : 15]>
g (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[2] RM, float[2] RV)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}, float[2] s = {1, 1}, float[2] b = {0, 0},
 float[2] mean = {0, 0}, float[2] var = {1, 1}>
{
  C = Conv (X, W)
  Y, RM, RV = BatchNormalization <training_mode = 1> (C, s, b, mean, var)
}
#@ node 1 name "BatchNormalization_7"
)");
    Pattern p = Pattern::parse("conv:Conv -> bn:BatchNormalization", "conv-bn");
    p.require(constraints::batchNormInference("bn"));
    MatchResult r = matchPattern(*m->graph, p);
    REQUIRE(r.near_misses.size() == 1);
    CHECK(r.near_misses[0].reason == "BatchNormalization_7 has 3 outputs (training form)");
  }

  SECTION("graph output swallowed") {
    auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X, float[1, 2, 4, 4] R) => (float[1, 2, 4, 4] y, float[1, 2, 4, 4] Z)
{
  y = Relu (X)
  Z = Add (y, R)
}
#@ node 0 name "Relu_9"
)");
    Pattern p = Pattern::parse("act:Relu -> add:Add", "relu-add");
    p.require(constraints::uniqueConsumer("act"));
    MatchResult r = matchPattern(*m->graph, p);
    REQUIRE(r.near_misses.size() == 1);
    CHECK(r.near_misses[0].reason == "Relu_9 output 'y' is a graph output");
    Pattern q = Pattern::parse("act:Relu -> add:Add", "relu-add");
    q.require(constraints::notGraphOutput("act"));
    CHECK(matchPattern(*m->graph, q).near_misses.at(0).reason ==
          "Relu_9 output 'y' is a graph output");
  }

  SECTION("dtype, rank and shape") {
    auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float16[2, 3] A, float16[2, 3] B, float[N, 3] C, float[M, 3] D) => (float16[2, 3] Y, float[N, 3] Z)
{
  Y = Add (A, B)
  Z = Add (C, D)
}
)");
    Pattern p = Pattern::parse("add:Add", "add");
    p.require(constraints::dtypeIn({"add"}, {DType::Float}));
    MatchResult r = matchPattern(*m->graph, p);
    CHECK(r.matches.size() == 1);
    REQUIRE(r.near_misses.size() == 1);
    CHECK(r.near_misses[0].reason == "Add(Y) input 0 'A' is float16, expected float");

    Pattern s = Pattern::parse("add:Add", "add");
    s.require(constraints::rankKnown("add")).require(constraints::sameShapeAs("add", 1, "add"));
    r = matchPattern(*m->graph, s);
    CHECK(r.matches.size() == 1);  // Y: [2,3] vs [2,3]
    REQUIRE(r.near_misses.size() == 1);
    CHECK(r.near_misses[0].reason ==
          "Add(Z) input 'D' has shape [M,3], not provably the shape [N,3] of Add(Z) output");
  }
}

TEST_CASE("pattern: any-op roots and domains", "[pattern]") {
  auto m = model(kConvChains);
  // `*` as root visits every node.
  Pattern any = Pattern::parse("a:* -> r:Relu");  // matches refer to it: keep it alive
  MatchResult r = matchPattern(*m->graph, any);
  CHECK(r.candidates == 5);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].get("a")->label() == "BatchNormalization_4");
  // Domain-qualified ops only match that domain.
  r = matchPattern(*m->graph, Pattern::parse("fusectl::Conv"));
  CHECK(r.candidates == 0);
  r = matchPattern(*m->graph, Pattern::parse("fusectl::*"));
  CHECK(r.candidates == 0);
}

TEST_CASE("op classes: one table for fusion legality", "[pattern]") {
  CHECK(opClassOf("", "Add") == OpClass::ElementwiseBinary);
  CHECK(opClassOf("", "Exp") == OpClass::ElementwiseUnary);
  CHECK(opClassOf("", "Relu") == OpClass::Activation);
  CHECK(opClassOf("", "Transpose") == OpClass::Injective);
  CHECK(opClassOf("", "ReduceMean") == OpClass::Reduction);
  CHECK(opClassOf("", "Softmax") == OpClass::Normalization);
  CHECK(opClassOf("", "Conv") == OpClass::Compute);
  CHECK(opClassOf("fusectl", "FusedGemm") == OpClass::Compute);
  CHECK(opClassOf("ai.onnx", "MatMul") == OpClass::Compute);
  CHECK(opClassOf("", "Loop") == OpClass::Opaque);
  CHECK(opClassOf("com.example", "Relu") == OpClass::Opaque);
  CHECK(isElementwise(OpClass::Activation));
  CHECK_FALSE(isElementwise(OpClass::Injective));
  CHECK(opClassName(OpClass::ElementwiseBinary) == "elementwise-binary");
  const OpClassInfo* relu = findOpClass("", "Relu");
  REQUIRE(relu);
  CHECK(relu->epilogue_activation);
  CHECK_FALSE(findOpClass("", "Elu")->epilogue_activation);
  CHECK(findOpClass("", "Conv")->accepts_epilogue);
  CHECK_FALSE(findOpClass("", "ConvTranspose")->accepts_epilogue);
  // The table has no duplicates and is sorted (lookup relies on it).
  const auto& all = allOpClasses();
  for (size_t i = 1; i < all.size(); ++i) {
    INFO(all[i].op_type);
    CHECK((all[i - 1].domain < all[i].domain ||
           (all[i - 1].domain == all[i].domain && all[i - 1].op_type < all[i].op_type)));
  }
}

TEST_CASE("pattern: conditions on attributes and dtype", "[pattern]") {
  // Round trip: conditions print as written, canonically (strings quoted, floats with a point).
  for (const char* text :
       {"c:Conv[group=1, dtype=float|float16] -> Relu",
        "Conv[strides=[2, 2], auto_pad=\"SAME_UPPER\"] -> LeakyRelu[alpha=0.5]",
        "* -> Relu", "Conv -> *[dtype=float]", "Clip[min=-1.0, max=6]"}) {
    INFO(text);
    CHECK(Pattern::parse(Pattern::parse(text).str()).str() == Pattern::parse(text).str());
  }
  CHECK(Pattern::parse("Conv[group=1,dtype=float]").str() == "Conv[group=1, dtype=float]");
  CHECK(Pattern::parse("LeakyRelu[alpha=1]").str() == "LeakyRelu[alpha=1]");
  CHECK(Pattern::parse("Conv[auto_pad=VALID]").str() == "Conv[auto_pad=\"VALID\"]");
  CHECK(Pattern::parse("* -> Relu").nodes[0].op_types.empty());  // a bare `*` parses
  CHECK_THAT(parseError("Conv[group=1"), Catch::Contains("expected ',' or ']' in the conditions"));
  CHECK_THAT(parseError("Conv[dtype=floaty]"), Catch::Contains("unknown dtype 'floaty'"));
  CHECK_THAT(parseError("Conv[group=1, group=2]"), Catch::Contains("condition 'group' given twice"));
  CHECK_THAT(parseError("Conv[group]"), Catch::Contains("expected '=' after 'group'"));
  CHECK_THAT(parseError("Conv[group=1x]"), Catch::Contains("expected ',' or ']'"));
  CHECK_THAT(parseError("Conv[pads=[1, 2]"), Catch::Contains("expected ',' or ']'"));

  // Depthwise (group=2) and plain Convs: group absent means ONNX's default, 1.
  auto m = model(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X, float16[1, 2, 4, 4] H, float16[2, 2, 1, 1] W16)
    => (float[1, 2, 4, 4] A, float[1, 2, 4, 4] B, float16[1, 2, 4, 4] C)
<float[2, 2, 1, 1] W = {1.0, 0.5, -0.5, 2.0}, float[2, 1, 1, 1] D = {1.0, 2.0}>
{
  a = Conv (X, W)
  A = Relu (a)
  b = Conv <group = 2> (X, D)
  B = Relu (b)
  c = Conv <group = 1> (H, W16)
  C = Relu (c)
}
)");
  Pattern plain = Pattern::parse("c:Conv[group=1] -> Relu", "plain");
  MatchResult r = matchPattern(*m->graph, plain);
  CHECK(r.matches.size() == 2);  // a (default group) and c
  REQUIRE(r.near_misses.size() == 1);
  CHECK(r.near_misses[0].constraint == "attr:c.group");
  CHECK(r.near_misses[0].node == "Conv(b)");
  CHECK(r.near_misses[0].reason == "Conv(b) has group=2, the pattern wants group=1");

  Pattern depthwise = Pattern::parse("Conv[group=2] -> Relu", "depthwise");
  r = matchPattern(*m->graph, depthwise);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].root()->label() == "Conv(b)");
  bool default_named = false;
  for (const NearMiss& miss : r.near_misses)
    default_named |= miss.reason == "Conv(a) has group=1 (the default), the pattern wants group=2";
  CHECK(default_named);

  Pattern floats = Pattern::parse("Conv[dtype=float] -> Relu", "floats");
  r = matchPattern(*m->graph, floats);
  CHECK(r.matches.size() == 2);
  REQUIRE(r.near_misses.size() == 1);
  CHECK(r.near_misses[0].constraint == "dtype:Conv");
  CHECK(r.near_misses[0].reason == "Conv(c) output is float16, the pattern wants float");

  // No schema default: said so. A float condition matches an int literal's value.
  Pattern strides = Pattern::parse("Conv[strides=[1, 1]] -> Relu", "strides");
  r = matchPattern(*m->graph, strides);
  CHECK(r.matches.empty());
  REQUIRE(!r.near_misses.empty());
  CHECK(r.near_misses[0].reason ==
        "Conv(a) has no attribute 'strides', and its ONNX schema gives no default");
}

TEST_CASE("pattern: operands in call form, leaves and numbers", "[pattern]") {
  for (const char* text : {
           "m:Mul($x, 0.5)",
           "Pow(Sub($x, mean:ReduceMean($x)), 2.0)",
           "Conv($x:input, $w:const) -> Relu",
           "a:Add(c:Conv.1, $r) -> Relu",
           "x:Relu -> m:Mul(x, 0.5)",
           "m:Mul(x:Relu, -1.5e-05) ; x -> Sigmoid",
           "Div($x, Sqrt(Add(ReduceMean(Pow(Sub($x, ReduceMean($x)), 2.0)), $eps:const)))",
           "Mul(^r:Relu[dtype=float], 0.5)",
           "Sum(a:Relu, b:Relu, a)",
       }) {
    checkRoundTrip(text);
  }
  // Canonical spacing and numbers written so they read back as numbers.
  CHECK(Pattern::parse("Mul( $x ,0.50 )").str() == "Mul($x, 0.5)");
  CHECK(Pattern::parse("Pow ($x, 2)").str() == "Pow($x, 2.0)");

  Pattern p = Pattern::parse("m:Mul(r:Relu, $c:const) ; Sub($y:input, r)");
  REQUIRE(p.nodes.size() == 3);
  REQUIRE(p.leaves.size() == 2);
  CHECK(p.leaves[0].capture == "c");
  CHECK(p.leaves[0].kind == LeafKind::Constant);
  CHECK_FALSE(p.leaves[0].equals);
  CHECK(p.leaves[1].kind == LeafKind::GraphInput);
  CHECK(*p.leafIndexOf("y") == 1);
  REQUIRE(p.nodes[0].operands.size() == 2);
  CHECK_FALSE(p.nodes[0].operands[0].leaf);
  CHECK(p.nodes[0].operands[1].leaf);
  const PatternEdge& e = p.edges[p.nodes[0].operands[0].index];
  CHECK((e.from == 1 && e.to == 0 && e.to_input == 0 && e.operand));
  CHECK(p.nodes[0].commutative());        // Mul
  CHECK_FALSE(p.nodes[2].commutative());  // Sub
  CHECK(Pattern::parse("Mul(0.5, 0.5)").leaves[1].equals == 0.5);
  CHECK_FALSE(Pattern::parse("Add|Sub($x, $y)").nodes[0].commutative());
  CHECK_FALSE(Pattern::parse("Add($x)").nodes[0].commutative());
  CHECK_FALSE(Pattern::parse("com.ms::Add($x, $y)").nodes[0].commutative());
  CHECK(Pattern::parse("Max|Min|Equal|And($x, $y)").nodes[0].commutative());

  const std::pair<const char*, const char*> errors[] = {
      {"Mul()", "column 5: empty operand list"},
      {"Mul($x 0.5)", "expected ',' or ')' in the operands"},
      {"Mul($x:weird)", "unknown leaf kind 'weird'"},
      {"Mul($x:const, $x:input)", "leaf $x is already defined"},
      {"Mul($)", "expected a leaf name after '$'"},
      {"Mul(1:Relu, 0.5)", "column 5: an operand's input slot is its position (0)"},
      {"Mul($x, 1:Relu)", "its position (1)"},
      {"m:Mul(m, 1.0)", "a node cannot feed itself"},
      {"x:Relu -> Add ; x($y)", "'x' is a reference"},
      {"a:Relu -> Mul($a)", "'a' already names a node"},
      {"Mul($a, a:Relu)", "'a' already names the leaf $a"},
      {"Conv -> $x", "found '$'"},  // leaves are operands only
  };
  for (const auto& [text, message] : errors) {
    INFO(text);
    CHECK_THAT(parseError(text), Catch::Contains(message));
  }
}

namespace {

// Mul nodes reading X and a constant in every way a pattern `Mul($x, 0.5)` must tell apart.
const char* kMulConstants = R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[2] X, float[2] Wi) => (float[2] A, float[2] B, float[2] C, float[2] D, float[2] E,
                                float[2] F, float[2] G, float[2] H, float[2] I, float[2] J,
                                float[2] P, float[2] Q)
<float[1] half = {0.5}, float[1] seven = {0.7}, float[2] halves = {0.5, 0.5},
 float[2] mixed = {0.5, 0.6}, float[1] Wi = {0.5}, float[1] k = {0.044715},
 int64[1] two = {2}>
{
  A = Mul (X, half)
  B = Mul (half, X)
  C = Mul (X, seven)
  K = Constant <value_float = 0.5> ()
  D = Mul (X, K)
  E = Mul (X, halves)
  F = Mul (X, mixed)
  G = Mul (X, X)
  H = Mul (X, Wi)
  R = Relu (X)
  I = Mul (half, R)
  J = Sub (half, R)
  P = Pow (X, two)
  Q = Mul (X, k)
}
)";

// kMulConstants plus S = Mul(h16, X16), h16 a float16 0.5 rounded up by one step
// (0.50048828125) and X16 float16 {1, 2}: the text syntax has no float16 literals.
std::unique_ptr<Model> mulConstantsModel() {
  std::unique_ptr<Model> m = model(kMulConstants);
  Graph& g = *m->graph;
  Value* h16 = g.addInitializer("h16", Tensor::fromValues<uint16_t>(DType::Float16, {1}, {0x3801}));
  Value* x16 =
      g.addInitializer("X16", Tensor::fromValues<uint16_t>(DType::Float16, {2}, {0x3C00, 0x4000}));
  g.createNode({"Mul", "", {h16, x16}, {"S"}, "", {}});
  return m;
}

std::vector<std::string> roots(const MatchResult& r) {
  std::vector<std::string> out;
  for (const Match& m : r.matches) out.push_back(m.root()->label());
  return out;
}

const NearMiss* missAt(const MatchResult& r, const std::string& anchor) {
  for (const NearMiss& m : r.near_misses)
    if (m.anchor == anchor) return &m;
  return nullptr;
}

}  // namespace

TEST_CASE("pattern: constant-value operands and commutative ops", "[pattern]") {
  auto m = mulConstantsModel();
  Pattern p = Pattern::parse("m:Mul($x, 0.5)", "half");
  MatchResult r = matchPattern(*m->graph, p);
  // A: as written; B and I: the other order (Mul is commutative); D: a Constant node's value;
  // E: every element 0.5; S: float16. H reads a graph input that has an initializer: not a
  // constant.
  CHECK(roots(r) == std::vector<std::string>{"Mul(A)", "Mul(B)", "Mul(D)", "Mul(E)", "Mul(I)",
                                             "Mul(S)"});
  CHECK(r.matches[4].value("x")->name() == "R");
  CHECK(r.matches[5].value("x")->name() == "X16");
  CHECK(r.matches[0].value("x")->name() == "X");
  CHECK(r.matches[1].value("x")->name() == "X");
  CHECK(r.matches[1].get("m")->label() == "Mul(B)");
  CHECK(r.matches[0].value("nope") == nullptr);
  REQUIRE(missAt(r, "Mul(C)"));
  CHECK(missAt(r, "Mul(C)")->constraint == "operand:m.1");
  CHECK(missAt(r, "Mul(C)")->node == "Mul(C)");
  CHECK(missAt(r, "Mul(C)")->reason == "Mul(C) input 1: 'seven' is 0.7, the pattern wants 0.5");
  CHECK(missAt(r, "Mul(F)")->reason ==
        "Mul(F) input 1: 'mixed' has element 1 = 0.6 (of 2), the pattern wants every one 0.5");
  CHECK(missAt(r, "Mul(G)")->reason == "Mul(G) input 1: 'X' is a graph input, not a constant");
  CHECK(missAt(r, "Mul(H)")->reason == "Mul(H) input 1: 'Wi' is a graph input, not a constant");
  CHECK(missAt(r, "Mul(Q)")->reason ==
        "Mul(Q) input 1: 'k' is 0.044715, the pattern wants 0.5");

  // A node operand of a commutative op, in either order; Sub keeps its order.
  Pattern relu = Pattern::parse("m:Mul(r:Relu, 0.5)", "relu-half");
  r = matchPattern(*m->graph, relu);
  REQUIRE(roots(r) == std::vector<std::string>{"Mul(I)"});
  CHECK(r.matches[0].get("r")->label() == "Relu(R)");
  r = matchPattern(*m->graph, Pattern::parse("s:Sub(r:Relu, 0.5)"));
  CHECK(r.matches.empty());
  CHECK(r.near_misses.at(0).reason == "Sub(J) input 0 'half' is a constant");
  CHECK(matchPattern(*m->graph, Pattern::parse("s:Sub(0.5, r:Relu)")).matches.size() == 1);

  // Numbers compare within the rounding of the constant's dtype (float32 0.044715 is not the
  // double 0.044715), an int64 exponent matches 2.0, and a wrong dtype rounding does not pass.
  CHECK(roots(matchPattern(*m->graph, Pattern::parse("Mul($x, 0.044715)"))) ==
        std::vector<std::string>{"Mul(Q)"});
  CHECK(roots(matchPattern(*m->graph, Pattern::parse("Pow($x, 2.0)"))) ==
        std::vector<std::string>{"Pow(P)"});
  CHECK(matchPattern(*m->graph, Pattern::parse("Pow($x, 2.001)")).matches.empty());
  // float16 within its rounding: 0.50048828125 is 0.5 (and not 0.502); float32 is stricter.
  CHECK(roots(matchPattern(*m->graph, Pattern::parse("Mul($x, 0.50001)"))) ==
        std::vector<std::string>{"Mul(S)"});
  CHECK(matchPattern(*m->graph, Pattern::parse("Mul($x, 0.502)")).matches.empty());
}

TEST_CASE("pattern: graph inputs and constants as leaves", "[pattern]") {
  auto m = model(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[1, 2, 4, 4] Z, float[1, 2, 4, 4] V,
                           float[1, 2, 4, 4] T)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}>
{
  C = Conv (X, W)
  Y = Relu (C)
  R = Relu (X)
  Z = Conv (R, W)
  M = ReduceMean <axes = [1]> (X)
  S = Sub (X, M)
  T = Sub (Z, M)
  V = Relu (S)
}
)");
  Pattern p = Pattern::parse("c:Conv($x:input, $w:const) -> Relu", "conv-on-input");
  MatchResult r = matchPattern(*m->graph, p);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].value("x")->name() == "X");
  CHECK(r.matches[0].value("w")->name() == "W");
  CHECK(r.matches[0].values().size() == 2);
  Pattern q = Pattern::parse("c:Conv($x:input, $w:const)", "conv-on-input");
  r = matchPattern(*m->graph, q);
  REQUIRE(r.matches.size() == 1);
  REQUIRE(r.near_misses.size() == 1);
  CHECK(r.near_misses[0].constraint == "operand:c.0");
  CHECK(r.near_misses[0].reason ==
        "Conv(Z) input 0: 'R' is computed by Relu(R), not a graph input");

  // $x written twice is one value.
  Pattern centered = Pattern::parse("s:Sub($x, ReduceMean($x))", "centered");
  r = matchPattern(*m->graph, centered);
  REQUIRE(roots(r) == std::vector<std::string>{"Sub(S)"});
  CHECK(r.matches[0].value("x")->name() == "X");
  REQUIRE(missAt(r, "Sub(T)"));
  CHECK_THAT(missAt(r, "Sub(T)")->reason, Catch::Contains("is not $x"));

  // Operands written fix the node's inputs: a commutative node exactly, another at least.
  r = matchPattern(*m->graph, Pattern::parse("Conv($x, $w, $b)"));
  CHECK(r.matches.empty());
  CHECK(r.near_misses.at(0).constraint == "structure");
  CHECK(r.near_misses.at(0).reason == "Conv(C) has 2 inputs, the pattern writes 3 operands");
  CHECK(matchPattern(*m->graph, Pattern::parse("Conv($x)")).matches.size() == 2);
  CHECK(matchPattern(*m->graph, Pattern::parse("Sub($x)")).matches.size() == 2);
}

TEST_CASE("pattern: constraint failures carry their node; reasons only when listening",
          "[pattern]") {
  auto m = model(kConvChains);
  int formatted = 0;
  Pattern p = Pattern::parse("conv:Conv -> bn:BatchNormalization", "conv-bn");
  // The reason does not open with the node's label: the node is data, not read from the text.
  p.require({"custom", [&formatted](const Match& mt, Why& why) {
               return why.fail(*mt.get("bn"), [&] {
                 ++formatted;
                 return std::string("the statistics are not what we want");
               });
             }});
  MatchResult r = matchPattern(*m->graph, p);
  REQUIRE(r.near_misses.size() == 2);  // Conv_3's constraint, Conv_6's structure
  CHECK(r.near_misses[0].constraint == "custom");
  CHECK(r.near_misses[0].node == "BatchNormalization_4");
  CHECK(r.near_misses[0].reason == "the statistics are not what we want");
  CHECK(formatted == 1);
  MatchOptions quiet;
  quiet.explain = false;
  r = matchPattern(*m->graph, p, quiet);
  CHECK(r.near_misses.empty());
  CHECK(formatted == 1);  // not formatted when nobody listens
  Match one;
  CHECK_FALSE(AnchorMatcher(p).match(*m->graph, m->graph->findNode("Conv_3"), quiet, one,
                                     nullptr, nullptr));
  CHECK(formatted == 1);

  // A Why that is not listening keeps the node and no text.
  Why silent(false);
  CHECK_FALSE(silent.fail(*m->graph->findNode("Conv_3"), [] { return std::string("x"); }));
  CHECK(silent.node()->label() == "Conv_3");
  CHECK(silent.reason().empty());

  // A reason that opens with another bound node's label does not move the failure there.
  Pattern about_bn = Pattern::parse("conv:Conv -> bn:BatchNormalization", "conv-bn");
  about_bn.require({"about-bn", [](const Match& mt, Why& why) {
                      return why.fail(*mt.get("bn"), [&] {
                        return mt.get("conv")->label() + " feeds a statistics node we reject";
                      });
                    }});
  r = matchPattern(*m->graph, about_bn);
  REQUIRE(!r.near_misses.empty());
  CHECK(r.near_misses[0].node == "BatchNormalization_4");
  CHECK(r.near_misses[0].reason == "Conv_3 feeds a statistics node we reject");
}

TEST_CASE("pattern: benefit and produced op types are declared per pattern", "[pattern]") {
  Pattern plain = Pattern::parse("c:Conv -> r:Relu");
  CHECK(plain.benefit == 1);
  CHECK(plain.produces.empty());
  Pattern p = Pattern::parse("c:Conv -> r:Relu", "conv-relu")
                  .withBenefit(3)
                  .producing({"fusectl::FusedConv"});
  CHECK(p.benefit == 3);
  CHECK(p.produces == std::vector<std::string>{"fusectl::FusedConv"});
  CHECK(p.str() == "c:Conv -> r:Relu");  // not part of the text
}

TEST_CASE("pattern syntax: numbers out of range are errors, integers are kept exactly",
          "[pattern]") {
  // fuzz_pattern's finding (testdata/bad/fuzz_pattern_int_overflow.txt): an integer attribute
  // of 120 digits saturated in strtoll and was then converted back from a double, which is
  // undefined behaviour (UBSan).
  const std::string finding = fusectl::testing::slurp(FUSECTL_SOURCE_DIR "/testdata/bad/fuzz_pattern_int_overflow.txt");
  CHECK_THAT(parseError(finding), Catch::Contains("is out of range"));
  CHECK_THAT(parseError("m:MatMul[k=99999999999999999999]"),
             Catch::Contains("'99999999999999999999' is out of range"));
  CHECK_THAT(parseError("m:MatMul[k=[1, -99999999999999999999]]"), Catch::Contains("out of range"));
  CHECK_THAT(parseError("m:MatMul[alpha=1e999]"), Catch::Contains("'1e999' is out of range"));
  // 2^53 + 1 has no double: parsed through a double it would come back as 2^53.
  const Pattern p = Pattern::parse("m:MatMul[k=9007199254740993]");
  CHECK(p.str().find("9007199254740993") != std::string::npos);
}
