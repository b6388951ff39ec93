// Passes inside If/Loop/Scan bodies: the PassManager runs every pass in each body too (depth
// first), with a body's formal inputs and captured values never taken for constants, names
// unique across scopes, and the sites made in bodies counted per pass ("fusions_in_bodies").
// The golden cases (testdata/passes/*/in_bodies.onnxtxt) check the rewrites one pass at a time;
// here whole -O3 runs on exported torch.jit.script loops, with ONNX Runtime as the numeric
// oracle (fusectl's executor is not relied on for If/Loop here).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "dump_schema_check.h"
#include "ort_runner.h"
#include "test_files.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/optimize.h"
#include "fusectl/passes/pipeline.h"

using namespace fusectl;
using namespace fusectl::passes;

namespace {

// "op" or "domain::op" -> count in one graph (one scope: nested bodies are not counted).
std::map<std::string, size_t> histogram(const Graph& g) {
  std::map<std::string, size_t> out;
  for (const auto& [key, n] : g.opHistogram())
    out[key.first.empty() ? key.second : key.first + "::" + key.second] += n;
  return out;
}

const Graph& onlyBody(const Graph& g, std::string_view op = "Loop") {
  const Node* owner = nullptr;
  for (const Node* n : g.nodes())
    if (n->is(op)) owner = n;
  REQUIRE(owner);
  const Attribute* a = owner->attr(op == "If" ? "then_branch" : "body");
  REQUIRE(a);
  REQUIRE(a->g);
  return *a->g;
}

std::string modelPath(const std::string& name) {
  return std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/control_flow_passes/" + name;
}

// Seeded inputs, with the loop's trip count set to `trips` (random integers would be up to 9).
std::vector<kernels::NamedTensor> inputsWithTrips(const Graph& g, const std::string& trips_input,
                                                  int64_t trips) {
  std::vector<kernels::NamedTensor> inputs = kernels::makeRandomInputs(g, 3);
  for (kernels::NamedTensor& in : inputs) {
    if (in.name != trips_input) continue;
    in.tensor = kernels::HostTensor(in.tensor.dtype(), in.tensor.dims());
    *in.tensor.mutableData<int64_t>() = trips;
  }
  return inputs;
}

// Runs the original and the optimized model under ONNX Runtime and compares every output.
void sameOutputsUnderOrt(const std::string& original_path, const Model& optimized,
                         const std::vector<kernels::NamedTensor>& inputs, const std::string& tag) {
  const test::OrtSetup ort = test::findOrtSetup();
  INFO(ort.skip_reason);
  REQUIRE(ort.found);
  testing::TempDir dir("subgraph-ort-" + tag);
  const std::string optimized_path = (dir.path / "optimized.onnx").string();
  saveModel(optimized, optimized_path);
  std::unique_ptr<Model> original = loadModel(original_path);
  std::vector<std::string> outputs;
  for (const Value* v : original->graph->outputs()) outputs.push_back(v->name());
  const auto expected = test::runOrt(ort, original_path, inputs, outputs, dir.path / "a");
  const auto actual = test::runOrt(ort, optimized_path, inputs, outputs, dir.path / "b");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const kernels::CompareResult r = kernels::compareTensors(actual[i].tensor, expected[i].tensor);
    INFO(tag << " output '" << outputs[i] << "': " << r.describe(expected[i].tensor.dims()));
    CHECK(r.passed);
  }
}

size_t sitesInBodies(const Report& report) {
  size_t n = 0;
  for (const PassStatistics& p : report.passes) {
    auto it = p.counters.find("fusions_in_bodies");
    if (it != p.counters.end()) n += static_cast<size_t>(it->second);
  }
  return n;
}

Report optimizeO3(Model& m) {
  OptimizeRequest request;
  request.level = 3;
  request.pass_manager.verify_each = true;  // invariants (bodies included) after every pass
  return optimize(m, request);
}

}  // namespace

TEST_CASE("subgraph passes: -O3 fuses Linear+GELU+LayerNorm inside a scripted loop's body",
          "[passes][subgraphs]") {
  const std::string path = modelPath("mlp_loop.onnx");
  std::unique_ptr<Model> m = loadModel(path);
  const std::map<std::string, size_t> before = histogram(onlyBody(*m->graph));
  CHECK(before.at("Erf") == 1);
  CHECK(before.at("ReduceMean") == 2);

  const Report report = optimizeO3(*m);
  const Graph& body = onlyBody(*m->graph);
  const std::map<std::string, size_t> after = histogram(body);
  INFO(modelToText(*m));
  CHECK(after.count("Erf") == 0);
  CHECK(after.count("ReduceMean") == 0);
  CHECK(after.count("Gemm") == 0);
  CHECK(m->graph->verify() == "");

  // Every site of this model is in the body, and the passes' counters say so.
  CHECK(report.fusions.size() >= 2);
  CHECK(sitesInBodies(report) == report.fusions.size());

}

TEST_CASE("subgraph passes: -O3 fuses Conv+ReLU inside a scripted loop's body",
          "[passes][subgraphs]") {
  const std::string path = modelPath("conv_loop.onnx");
  std::unique_ptr<Model> m = loadModel(path);
  optimizeO3(*m);
  const std::map<std::string, size_t> after = histogram(onlyBody(*m->graph));
  INFO(modelToText(*m));
  CHECK(after.count("Relu") == 0);
  CHECK(after.count("Conv") == 0);
  CHECK(after.count("fusectl::FusedConv_Relu") + after.count("fusectl::FusedConv") == 1);
}

TEST_CASE("subgraph passes: -O3 fuses inside a greedy decode loop's body",
          "[passes][subgraphs]") {
  const std::string path = modelPath("greedy_decode.onnx");
  std::unique_ptr<Model> m = loadModel(path);
  const Report report = optimizeO3(*m);
  INFO(modelToText(*m));
  CHECK(m->graph->verify() == "");
  CHECK(sitesInBodies(report) >= 2);
  const std::map<std::string, size_t> after = histogram(onlyBody(*m->graph));
  CHECK(after.count("Erf") == 0);
  CHECK(after.count("ReduceMean") == 0);
  CHECK(after.at("fusectl::LayerNorm") == 1);
  CHECK(after.count("ArgMax") == 1);  // the decode step itself stays
}

TEST_CASE("subgraph passes: a pass that cannot reason about bodies skips them and says so",
          "[passes][subgraphs]") {
  std::unique_ptr<Model> m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool C0, float[2, 3] X) => (int64[2] Y)
{
  S0 = Shape (X)
  Y = Loop (M, C0, S0) <body = loop_body (int64 i, bool c, int64[2] s) => (bool c_out, int64[2] y)
  {
    c_out = Identity (c)
    y = Shape (X)
  }>
}
)", "skip.onnxtxt");
  Report report;
  PassManagerOptions options;
  options.verify_each = true;
  PassManager(options).run(*m, Pipeline::parse("fold-shape-subgraphs"), report);
  REQUIRE(report.passes.size() == 1);
  CHECK(report.passes[0].counters.at("bodies_skipped") == 1);
  // The main graph's Shape folded; the body's stays.
  CHECK(histogram(*m->graph).count("Shape") == 0);
  CHECK(histogram(onlyBody(*m->graph)).at("Shape") == 1);
}

TEST_CASE("subgraph passes: new names stay unique across scopes", "[passes][subgraphs]") {
  // The main graph already has a value named as the body's folded constant is first named
  // (a fresh variant of "kk" while the folded node still writes "kk"): the body picks another,
  // since ONNX forbids a body value shadowing an enclosing one.
  std::unique_ptr<Model> m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool C0, float[2] X) => (float[2] Y, float[2] kk_1)
{
  kk_1 = Neg (X)
  Y = Loop (M, C0, X) <body = loop_body (int64 i, bool c, float[2] x) => (bool c_out, float[2] y)
  <float[2] a = {0.5, 0.25}, float[2] b = {2.0, 4.0}>
  {
    c_out = Identity (c)
    kk = Mul (a, b)
    y = Add (x, kk)
  }>
}
)", "names.onnxtxt");
  Report report;
  PassManagerOptions options;
  options.verify_each = true;
  PassManager(options).run(*m, Pipeline::parse("fold-constants,eliminate-dead-code"), report);
  const Graph& body = onlyBody(*m->graph);
  CHECK(histogram(body).count("Mul") == 0);
  for (const Value* v : body.allValues()) {
    INFO(v->name());
    if (v->kind() != Value::Kind::OuterRef) CHECK(m->graph->findValue(v->name()) == nullptr);
  }
  // And the text round trip (whose loader refuses shadowing) accepts it.
  CHECK_NOTHROW(parseModelText(modelToText(*m), "roundtrip.onnxtxt"));
}

TEST_CASE("subgraph passes: a capture the body stops reading is dropped, then its producer",
          "[passes][subgraphs]") {
  // The body's only read of T is dead code; once it goes, the Loop no longer captures T, so
  // the main graph's Exp computing T is dead as well and goes in the same -O3 run.
  std::unique_ptr<Model> m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool C0, float[2] X) => (float[2] Y)
{
  T = Exp (X)
  Y = Loop (M, C0, X) <body = loop_body (int64 i, bool c, float[2] x) => (bool c_out, float[2] y)
  {
    c_out = Identity (c)
    unused = Add (x, T)
    y = Neg (x)
  }>
}
)", "capture.onnxtxt");
  const Node* loop = m->graph->findValue("Y")->producer();
  REQUIRE(loop->implicitInputs().size() == 1);
  optimizeO3(*m);
  INFO(modelToText(*m));
  CHECK(m->graph->verify() == "");
  CHECK(histogram(*m->graph).count("Exp") == 0);
  CHECK(m->graph->findValue("T") == nullptr);
  loop = m->graph->findValue("Y")->producer();
  CHECK(loop->implicitInputs().empty());
  CHECK(onlyBody(*m->graph).outerRefs().empty());
  // A capture still read stays, with its producer.
  std::unique_ptr<Model> kept = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool C0, float[2] X) => (float[2] Y)
{
  T = Exp (X)
  Y = Loop (M, C0, X) <body = loop_body (int64 i, bool c, float[2] x) => (bool c_out, float[2] y)
  {
    c_out = Identity (c)
    y = Add (x, T)
  }>
}
)", "kept.onnxtxt");
  optimizeO3(*kept);
  CHECK(histogram(*kept->graph).at("Exp") == 1);
  CHECK(onlyBody(*kept->graph).outerRefs().size() == 1);
}

TEST_CASE("subgraph passes: merging two values one body captures reuses its capture",
          "[passes][subgraphs]") {
  // replaceAllUsesWith(T2, T1) where the body reads both: its reference to T2 now reads its
  // reference to T1 (two references cannot share one name) and is removed.
  std::unique_ptr<Model> m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool C0, float[2] X) => (float[2] Y)
{
  T1 = Exp (X)
  T2 = Neg (X)
  Y = Loop (M, C0, X) <body = loop_body (int64 i, bool c, float[2] x) => (bool c_out, float[2] y)
  {
    c_out = Identity (c)
    a = Add (x, T1)
    y = Mul (a, T2)
  }>
}
)", "merge.onnxtxt");
  Graph& g = *m->graph;
  Value* t1 = g.findValue("T1");
  Value* t2 = g.findValue("T2");
  g.replaceAllUsesWith(t2, t1);
  INFO(modelToText(*m));
  CHECK(g.verify() == "");
  const Graph& body = onlyBody(g);
  REQUIRE(body.outerRefs().size() == 1);
  CHECK(body.outerRefs()[0]->outerValue() == t1);
  CHECK(body.findValue("y")->producer()->input(1) == body.outerRefs()[0]);
  CHECK(g.findValue("Y")->producer()->implicitInputs() == std::vector<Value*>{t1});
  CHECK_FALSE(t2->hasUses());
  CHECK_NOTHROW(parseModelText(modelToText(*m), "roundtrip.onnxtxt"));
}

TEST_CASE("subgraph passes: the report names each fusion site's scope", "[passes][subgraphs]") {
  std::unique_ptr<Model> m = loadModel(modelPath("mlp_loop.onnx"));
  const Report report = optimizeO3(*m);
  REQUIRE(report.fusions.size() >= 2);
  const Node* loop = nullptr;
  for (const Node* n : m->graph->nodes())
    if (n->is("Loop")) loop = n;
  REQUIRE(loop);
  const std::string body_scope = loop->label() + "/body";
  for (const FusionSite& f : report.fusions) CHECK(f.scope == body_scope);
  const std::map<std::string, size_t> by_scope = report.fusionsByScope();
  CHECK(by_scope == std::map<std::string, size_t>{{body_scope, report.fusions.size()}});
  const nlohmann::json j = nlohmann::json::parse(report.toJson());
  CHECK(j["fusions"][0]["scope"] == body_scope);
  CHECK(j["fusions_by_scope"][body_scope] == report.fusions.size());
  std::ifstream in(std::string(FUSECTL_SOURCE_DIR) + "/docs/schemas/report.schema.json");
  const nlohmann::json schema = nlohmann::json::parse(in);
  CHECK(fusectl::testing::checkJsonSchema(j, schema, schema) == "");
}

TEST_CASE("subgraph passes: diff lists the changes inside a Loop body under its scope",
          "[passes][subgraphs]") {
  const char* text = R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool C0, float[2] X) => (float[2] Y)
{
  Y = Loop (M, C0, X) <body = loop_body (int64 i, bool c, float[2] x) => (bool c_out, float[2] y)
  {
    c_out = Identity (c)
    unused = Exp (x)
    y = Neg (x)
  }>
}
)";
  std::unique_ptr<Model> a = parseModelText(text, "a.onnxtxt");
  std::unique_ptr<Model> b = parseModelText(text, "b.onnxtxt");
  Report report;
  PassManager(PassManagerOptions{}).run(*b, Pipeline::parse("eliminate-dead-code"), report);
  const GraphDiff d = diffGraphs(*a->graph, *b->graph);
  CHECK_FALSE(d.identical());
  CHECK(d.nodes_changed.empty());  // the Loop itself is the same node
  REQUIRE(d.bodies.size() == 1);
  CHECK(d.bodies[0].scope == "Loop(Y)/body");
  CHECK(d.toText("a", "b") == "--- a (1 nodes, 0 initializers)\n"
                              "+++ b (1 nodes, 0 initializers)\n"
                              "nodes: 0 removed, 0 added, 0 changed\n"
                              "initializers: 0 removed, 0 added, 0 changed\n"
                              "fusion sites: 0\n"
                              "body Loop(Y)/body (3 -> 2 nodes, 0 -> 0 initializers):\n"
                              "  op histogram:\n"
                              "    Exp       1 -> 0      (-1)\n"
                              "  nodes: 1 removed, 0 added, 0 changed\n"
                              "    - Exp Exp(unused) -> [unused]\n"
                              "  initializers: 0 removed, 0 added, 0 changed\n"
                              "  fusion sites: 0\n");
  const nlohmann::json j = nlohmann::json::parse(d.toJson("a", "b"));
  REQUIRE(j["bodies"].size() == 1);
  CHECK(j["bodies"][0]["scope"] == "Loop(Y)/body");
  CHECK(j["bodies"][0]["nodes"]["removed"][0]["op"] == "Exp");
  CHECK(diffGraphs(*b->graph, *b->graph).identical());
}

// Run by CTest's ort_differential (which points FUSECTL_ORT_DIR at onnxruntime-node).
TEST_CASE("subgraph passes: ONNX Runtime gives the -O3 loop models the original's outputs",
          "[.][ort][subgraphs]") {
  {
    const std::string path = modelPath("mlp_loop.onnx");
    std::unique_ptr<Model> m = loadModel(path);
    optimizeO3(*m);
    sameOutputsUnderOrt(path, *m, inputsWithTrips(*loadModel(path)->graph, "n", 3), "mlp");
  }
  {
    const std::string path = modelPath("conv_loop.onnx");
    std::unique_ptr<Model> m = loadModel(path);
    optimizeO3(*m);
    sameOutputsUnderOrt(path, *m, inputsWithTrips(*loadModel(path)->graph, "n", 2), "conv");
  }
  {
    // Greedy decoding: the optimized loop must pick the very same tokens at every step.
    const std::string path = modelPath("greedy_decode.onnx");
    std::unique_ptr<Model> m = loadModel(path);
    optimizeO3(*m);
    std::vector<kernels::NamedTensor> inputs;
    kernels::HostTensor tokens(DType::Int64, {2, 1});
    tokens.mutableData<int64_t>()[0] = 1;
    tokens.mutableData<int64_t>()[1] = 5;
    kernels::HostTensor steps(DType::Int64, {});
    *steps.mutableData<int64_t>() = 4;
    inputs.push_back({"tokens", std::move(tokens)});
    inputs.push_back({"steps", std::move(steps)});
    sameOutputsUnderOrt(path, *m, inputs, "decode");
  }
}
