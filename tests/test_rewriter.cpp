// The Rewriter's actions (names, opset imports, fusion sites, constants), the two walks of the
// pattern driver, and the fusion-stamp codec that the Rewriter writes and `fusectl diff` reads.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <map>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/fusion_stamp.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/rewriter.h"

using namespace fusectl;
using namespace fusectl::passes;

namespace {

std::unique_ptr<Model> load(const std::string& text) { return parseModelText(text, "test"); }

// X -> Conv -> c -> Relu -> Y, with a second (unrelated) Relu R reading X.
const char* kConvRelu = R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[1, 2, 4, 4] R)
<float[2, 2, 1, 1] W = {1, 0, 0, 1}>
{
  c = Conv (X, W)
  Y = Relu (c)
  R = Relu (X)
}
)";

// X -> r0 -> r1 -> r2 -> Y, four Relus: each adjacent pair matches "inner:Relu -> outer:Relu".
std::string reluChain() {
  std::string text = "<ir_version: 8, opset_import: [\"\" : 13]>\n";
  text += "g (float[4] X) => (float[4] Y)\n{\n";
  const char* values[] = {"X", "r0", "r1", "r2", "Y"};
  for (size_t i = 1; i < 5; ++i)
    text += fmt::format("  {} = Relu ({})\n", values[i], values[i - 1]);
  return text + "}\n";
}

Node* producerOf(const Graph& g, std::string_view value) { return g.findValue(value)->producer(); }

struct Session {
  explicit Session(const std::string& text) : model(load(text)), ctx(*model, report) {
    ctx.setCurrentPass("test-pass");
  }
  Graph& graph() { return *model->graph; }
  std::unique_ptr<Model> model;
  Report report;
  PassContext ctx;
};

Match matchFirst(const Graph& g, const Pattern& p) {
  MatchResult r = matchPattern(g, p);
  REQUIRE_FALSE(r.matches.empty());
  return r.matches.front();
}

NewNode fusedConvRelu(const Match& m) {
  NewNode n;
  n.op_type = "FusedConv";
  n.domain = "fusectl";
  n.inputs = m.get("conv")->inputs();
  n.attributes.push_back(Attribute::ofString("activation", "Relu"));
  n.name = m.get("conv")->name();
  n.naming = NodeNaming::TakeOver;
  return n;
}

}  // namespace

TEST_CASE("rewriter: replaceMatch takes over names and type, imports the fusectl opset, reports",
          "[rewriter]") {
  Session s(kConvRelu);
  s.graph().renameNode(producerOf(s.graph(), "c"), "conv1");
  REQUIRE(s.model->opsetVersion("fusectl") == 0);
  Pattern p = Pattern::parse("conv:Conv -> act:Relu", "conv-relu");
  Match m = matchFirst(s.ctx.graph(), p);
  const ValueType y_type = m.get("act")->output(0)->type;
  REQUIRE(y_type.shape.hasRank());
  Rewriter rw(s.ctx);
  Node* f = rw.replaceMatch("conv-relu", m, m.get("act")->output(0), fusedConvRelu(m));

  CHECK(s.model->opsetVersion("fusectl") == 1);
  CHECK(f->output(0)->name() == "Y");  // a graph output keeps its name
  CHECK(f->output(0)->isGraphOutput());
  CHECK(f->output(0)->type == y_type);
  CHECK(f->name() == "conv1");  // the Conv was erased, so its name was free again
  CHECK(s.graph().numNodes() == 2);
  CHECK(s.graph().firstNode() == f);  // where the replaced nodes were, before R
  CHECK(s.graph().verify() == "");
  CHECK(std::string(f->doc_string) == "fusectl test-pass: fused conv1, Relu(Y)");

  REQUIRE(s.report.fusions.size() == 1);
  const FusionSite& site = s.report.fusions[0];
  CHECK(site.pass == "test-pass");
  CHECK(site.pattern == "conv-relu");
  CHECK(site.replaced_nodes == std::vector<std::string>{"conv1", "Relu(Y)"});
  // The name the fused node has in the result, not the temporary one it had before taking
  // over the Conv's.
  CHECK(site.new_node == "conv1");
  CHECK(site.new_op == "fusectl::FusedConv");
  CHECK(site.portability == Portability::Fusectl);
  CHECK(site.activation_bytes_saved == 32 * 4);  // c: 1x2x4x4 float
}

TEST_CASE("rewriter: node naming rules", "[rewriter]") {
  Session s(kConvRelu);
  Node* conv = producerOf(s.graph(), "c");
  s.graph().renameNode(conv, "n");
  s.graph().renameNode(producerOf(s.graph(), "R"), "n");  // ONNX allows a repeated name
  Pattern p = Pattern::parse("conv:Conv -> act:Relu", "conv-relu");
  Match m = matchFirst(s.ctx.graph(), p);
  Rewriter rw(s.ctx);

  SECTION("TakeOver keeps the fresh variant while another node has the name") {
    Node* f = rw.replaceMatch("conv-relu", m, m.get("act")->output(0), fusedConvRelu(m));
    CHECK(f->name() != "n");
    CHECK(f->name().rfind("n_", 0) == 0);
  }
  SECTION("AsGiven repeats the name") {
    NewNode n = fusedConvRelu(m);
    n.naming = NodeNaming::AsGiven;
    CHECK(rw.replaceMatch("conv-relu", m, m.get("act")->output(0), std::move(n))->name() == "n");
  }
  SECTION("Unique picks a fresh variant; an empty name stays empty") {
    NewNode extra;
    extra.op_type = "Identity";
    extra.inputs = {conv->output(0)};
    extra.name = "n";
    extra.naming = NodeNaming::Unique;
    Node* a = rw.addNode(std::move(extra), "c", conv->output(0)->type, nullptr);
    CHECK(a->name().rfind("n_", 0) == 0);
    CHECK(a->output(0)->name() != "c");  // unique too
    NewNode unnamed;
    unnamed.op_type = "Identity";
    unnamed.inputs = {conv->output(0)};
    unnamed.naming = NodeNaming::Unique;
    CHECK(rw.addNode(std::move(unnamed), "c", conv->output(0)->type, nullptr)->name().empty());
    CHECK(s.model->opsetVersion("fusectl") == 0);  // no fusectl node was created
  }
  CHECK(s.graph().verify() == "");
}

TEST_CASE("rewriter: constants", "[rewriter]") {
  Session s(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[2] X) => (float[2] Y, float[2] Z)
<float[2] A = {1, 2}, float[2] B = {3, 4}, float[2] K = {5, 6}>
{
  y1 = Add (X, A)
  y2 = Mul (y1, B)
  Y = Add (y2, B)
  Z = Sub (X, K)
}
)");
  Graph& g = s.graph();
  Rewriter rw(s.ctx);
  Node* add = producerOf(g, "y1");
  Node* mul = producerOf(g, "y2");
  auto names = [&] {
    std::vector<std::string> out;
    for (const Value* v : g.initializers()) out.push_back(v->name());
    return out;
  };

  // A has one reader: rewritten in place, keeping its name and its place in the file.
  rw.setConstantInput(add, 1, Tensor::fromValues<float>(DType::Float, {2}, {7, 8}), "A_new");
  CHECK(add->input(1)->name() == "A");
  CHECK(add->input(1)->initializer()->valueAsDouble(1) == 8);
  CHECK(names() == std::vector<std::string>{"A", "B", "K"});

  // B has two readers: the Mul gets a new constant, B stays for the Add.
  rw.setConstantInput(mul, 1, Tensor::fromValues<float>(DType::Float, {2}, {9, 9}), "B_new");
  CHECK(mul->input(1)->name() == "B_new");
  CHECK(names() == std::vector<std::string>{"A", "B", "K", "B_new"});

  // Rewiring the last reader of B away removes it; its name is then free.
  Value* b2 = rw.addConstant("B", Tensor::fromValues<float>(DType::Float, {2}, {1, 1}));
  CHECK(b2->name() != "B");
  CHECK(rw.rewireInput(producerOf(g, "Y"), 1, b2));
  CHECK_FALSE(g.findValue("B"));
  rw.renameValue(b2, "B");
  CHECK_FALSE(rw.rewireInput(mul, 0, add->output(0)));  // the same value: nothing removed

  // A folded node's outputs become constants of the same names; the graph output stays one.
  Node* sub = producerOf(g, "Z");
  std::vector<std::pair<Value*, Tensor>> folded;
  folded.emplace_back(sub->output(0), Tensor::fromValues<float>(DType::Float, {2}, {0, 0}));
  rw.replaceWithConstants(sub, std::move(folded));
  CHECK(rw.erased(sub));
  CHECK_FALSE(g.findValue("K"));  // only the Sub read it
  REQUIRE(g.findValue("Z"));
  CHECK(g.findValue("Z")->isInitializer());
  CHECK(g.outputs()[1]->name() == "Z");

  // Equal constants: readers of one read the other, which is removed.
  Value* a2 = rw.addConstant("A2", Tensor::fromValues<float>(DType::Float, {2}, {7, 8}));
  CHECK(rw.rewireInput(add, 1, a2));
  CHECK_FALSE(g.findValue("A"));  // A lost its only reader
  rw.replaceConstant(a2, g.findValue("B_new"));
  CHECK(add->input(1)->name() == "B_new");
  CHECK_FALSE(g.findValue("A2"));
  CHECK(g.verify() == "");
}

TEST_CASE("rewriter: the driver's greedy and snapshot walks", "[rewriter]") {
  Pattern p = Pattern::parse("inner:Relu -> outer:Relu", "double-relu");
  p.require(constraints::uniqueConsumer("inner"));
  auto fuse = [](Rewriter& rw, const Match& m) {
    NewNode relu;
    relu.op_type = "Relu";
    relu.inputs = {m.get("inner")->input(0)};
    rw.replaceMatch("double-relu", m, m.get("outer")->output(0), std::move(relu));
    return true;
  };

  SECTION("greedy: each anchor is matched on the graph as the earlier rewrites left it") {
    Session s(reluChain());
    CHECK(applyPattern(s.ctx.graph(), s.ctx, p, fuse) == 2);
    std::map<std::string, int64_t> c = s.ctx.takeCounters();
    CHECK(c.at("candidates") == 4);
    CHECK(c.at("matches") == 2);          // r0-r1, then r2-Y
    CHECK(c.at("skipped_overlap") == 2);  // r1 and Y were gone by their turn
    CHECK(c.at("rewrites") == 2);
    CHECK(s.graph().numNodes() == 2);
    CHECK(s.report.rejections.empty());
  }
  SECTION("snapshot: every anchor is matched first, overlapping matches are skipped") {
    Session s(reluChain());
    DriverOptions driver;
    driver.match_all_first = true;
    driver.report_structural = false;
    CHECK(applyPattern(s.ctx.graph(), s.ctx, p, fuse, driver) == 2);
    std::map<std::string, int64_t> c = s.ctx.takeCounters();
    CHECK(c.at("candidates") == 4);
    CHECK(c.at("matches") == 3);  // r0-r1, r1-r2 and r2-Y, on the graph as the sweep found it
    CHECK(c.at("skipped_overlap") == 1);  // r1-r2: r1 went with r0-r1
    CHECK(c.at("rewrites") == 2);
    CHECK(s.graph().numNodes() == 2);
    CHECK(s.report.rejections.empty());  // structural misses are not reported
  }
  SECTION("the graph must be the context's") {
    Session s(reluChain());
    auto other = load(reluChain());
    CHECK_THROWS(applyPattern(*other->graph, s.ctx, p, fuse));
  }
}

TEST_CASE("fusion stamp: the Rewriter's line reads back", "[rewriter][diff]") {
  const std::vector<std::string> labels = {"Conv(c)", "BatchNormalization(y)", "Relu_3"};
  const std::string stamp = formatFusionStamp("fold-conv-bn", labels);
  CHECK(stamp == "fusectl fold-conv-bn: fused Conv(c), BatchNormalization(y), Relu_3");
  std::string pass;
  std::vector<std::string> replaced;
  REQUIRE(parseFusionStamp(stamp, pass, replaced));
  CHECK(pass == "fold-conv-bn");
  CHECK(replaced == labels);

  CHECK(appendFusionStamp("", stamp) == stamp);
  const std::string doc = appendFusionStamp("exported by hand", stamp);
  CHECK(doc == "exported by hand\n" + stamp);
  const std::string twice = appendFusionStamp(doc, formatFusionStamp("fuse-epilogue", {"X"}));
  CHECK(fusionStampLines(twice) ==
        std::vector<std::string>{stamp, "fusectl fuse-epilogue: fused X"});
  CHECK(fusionStampLines("no stamp\nhere\n").empty());

  // What diff reads is what the Rewriter wrote: a fused node's stamp lists the nodes of A.
  Session s(kConvRelu);
  auto before = load(kConvRelu);
  Pattern p = Pattern::parse("conv:Conv -> act:Relu", "conv-relu");
  Match m = matchFirst(s.ctx.graph(), p);
  Rewriter(s.ctx).replaceMatch("conv-relu", m, m.get("act")->output(0), fusedConvRelu(m));
  GraphDiff d = diffGraphs(*before->graph, s.graph());
  REQUIRE(d.fusions.size() == 1);
  CHECK(d.fusions[0].pass == "test-pass");
  CHECK(d.fusions[0].replaced_nodes == std::vector<std::string>{"Conv(c)", "Relu(Y)"});
  CHECK(d.fusions[0].op == "fusectl::FusedConv");
}

// Erases reluChain's Relu r2 (Y's Relu then reads r1) and makes Neg(r1) -> t before Y's Relu,
// which the graph's pool puts at r2's freed address: the Rewriter's erased() still holds it.
Node* negAtErasedAddress(Session& s, Rewriter& rw) {
  Node* r2 = producerOf(s.graph(), "r2");
  const void* freed = r2;
  rw.bypass(r2);
  REQUIRE(rw.erased(r2));
  NewNode neg;
  neg.op_type = "Neg";
  neg.inputs = {s.graph().findValue("r1")};
  const ValueType type = s.graph().findValue("r1")->type;
  Node* made = rw.addNode(std::move(neg), "t", type, producerOf(s.graph(), "Y"));
  REQUIRE(static_cast<const void*>(made) == freed);  // the pool reused the address
  return made;
}

TEST_CASE("rewriter: a node made at an erased node's address is erased with dead producers",
          "[rewriter]") {
  // The Rewriter remembers erased nodes by address, and the graph's pool hands a freed node's
  // memory to the next node made. eraseWithDeadProducers once took such a new node for one
  // already erased and left it, and what only it read, in the graph (emit-ort's head-merge
  // chains, one layer in two).
  Session s(reluChain());
  Rewriter rw(s.ctx);
  Node* first = negAtErasedAddress(s, rw);
  const ValueType type = first->output(0)->type;
  NewNode abs;
  abs.op_type = "Abs";
  abs.inputs = {first->output(0)};
  Node* second = rw.addNode(std::move(abs), "u", type, producerOf(s.graph(), "Y"));
  REQUIRE(s.graph().numNodes() == 5);
  // Neither new node's output is read: both go, the Relus stay.
  CHECK(rw.eraseWithDeadProducers(second) == 2);
  CHECK(s.graph().numNodes() == 3);
  CHECK(s.graph().findValue("t") == nullptr);
  CHECK(s.graph().verify() == "");
}

TEST_CASE("rewriter: a fusion whose match holds a node made at an erased node's address erases it",
          "[rewriter]") {
  // The greedy driver matches on the graph as earlier rewrites of the sweep left it, so a match
  // can hold a node made in this sweep, which the graph's pool may have put at an erased node's
  // address. The fusion once took that node for gone: it stayed in the graph, unread, and kept
  // the rest of the match alive.
  Session s(reluChain());
  Rewriter rw(s.ctx);
  Node* made = negAtErasedAddress(s, rw);
  Node* y = producerOf(s.graph(), "Y");
  rw.rewireInput(y, 0, made->output(0));  // X -> r0 -> r1 -> Neg t -> Y
  const Pattern p = Pattern::parse("inner:Relu -> outer:Neg", "relu-neg");
  const Match m = matchFirst(s.graph(), p);
  REQUIRE(m.get("outer") == made);
  NewNode fused;
  fused.op_type = "Abs";
  fused.inputs = {s.graph().findValue("r0")};
  rw.replaceMatch("relu-neg", m, made->output(0), std::move(fused));
  CHECK(s.graph().numNodes() == 3);  // Relu r0, Abs, Relu Y
  CHECK(s.graph().findValue("r1") == nullptr);
  CHECK(producerOf(s.graph(), "Y")->input(0)->producer()->opType() == "Abs");
  REQUIRE(s.report.fusions.size() == 1);
  CHECK(s.report.fusions[0].replaced_nodes.size() == 2);
  CHECK(s.graph().verify() == "");
}
