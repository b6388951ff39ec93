// Patterns: textual syntax (round trip, errors naming the column) and matching on graphs written
// in ONNX textual syntax, with the near-miss reasons users see in `fusectl match --explain`.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/pattern.h"

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
  for (const char* t : texts) {
    INFO(t);
    Pattern p = Pattern::parse(t);
    CHECK(p.str() == t);
    Pattern q = Pattern::parse(p.str());
    CHECK(q.str() == p.str());
    REQUIRE(q.nodes.size() == p.nodes.size());
    REQUIRE(q.edges.size() == p.edges.size());
    CHECK(q.root == p.root);
    for (size_t i = 0; i < p.edges.size(); ++i) {
      CHECK(q.edges[i].from == p.edges[i].from);
      CHECK(q.edges[i].to == p.edges[i].to);
      CHECK(q.edges[i].from_output == p.edges[i].from_output);
      CHECK(q.edges[i].to_input == p.edges[i].to_input);
    }
  }

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
  built.nodes = {PatternNode{"", {"Relu"}, "", {}}, PatternNode{"", {"Add"}, "", {}},
                 PatternNode{"", {"Conv"}, "", {}}};
  built.edges = {PatternEdge{2, 1, 0, 1}, PatternEdge{0, 1, 0, 0}};
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
