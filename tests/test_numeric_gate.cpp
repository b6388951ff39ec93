// `fusectl optimize --gate`: the per-rewrite numeric gate (libpasses numeric_gate.h) and the
// measuring of one replacement node (libkernels node_numbers.h), in process and through the CLI.
//
// The undo mechanics are tested with a measure that condemns the sites of one pass (so that
// the test does not depend on which kernels round differently), the measuring itself against
// a node made wrong on purpose, and the whole path on the bundled models with the real kernels.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdlib>
#include <map>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dump_schema_check.h"
#include "shell_util.h"
#include "test_files.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/node_numbers.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/numeric_gate.h"

using namespace fusectl;
using namespace fusectl::passes;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> model(const std::string& name) {
  return loadModel(std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name + ".onnx");
}

size_t sitesOf(const Report& r, const std::string& pass) {
  size_t n = 0;
  for (const FusionSite& f : r.fusions) n += f.pass == pass;
  return n;
}


// The real measure: each new node on the original's values (what the CLI does).
SiteMeasure kernelMeasure(const Model& original, const std::vector<kernels::NamedTensor>& inputs) {
  return [&original, &inputs](const Model& optimized, const std::vector<std::string>& nodes,
                           const std::set<std::string>& redefined) {
    std::vector<SiteMeasurement> out;
    for (const kernels::NodeNumbers& n :
         kernels::measureReplacementNodes(original, optimized, nodes, inputs, redefined)) {
      SiteMeasurement m;
      m.measured = n.measured;
      m.cosine = n.cosine;
      m.max_abs_error = n.max_abs_error;
      m.p99_abs_error = n.p99_abs_error;
      m.scale = n.scale;
      m.dtype = n.dtype;
      m.detail = n.detail;
      out.push_back(m);
    }
    return out;
  };
}

struct Run {
  int code = -1;
  std::string out, err;
};

Run runFusectl(const std::string& args, const fs::path& dir) {
  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  const std::string cmd = "timeout 300 " + fusectl::test::shellQuote(FUSECTL_BINARY) + " " + args +
                          " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = fusectl::testing::slurp(out);
  r.err = fusectl::testing::slurp(err);
  return r;
}

}  // namespace

TEST_CASE("gate: the spec parses, and a bad one is a usage error naming the item", "[gate]") {
  GateThresholds d = parseGateSpec("default");
  CHECK(d.min_cosine == 0.99999);
  CHECK(d.max_rel_error == 1e-4);
  CHECK(std::isinf(d.max_abs_error));
  CHECK(std::isinf(d.max_p99_abs_error));
  GateThresholds t = parseGateSpec("cosine=0.999, max-abs=0.5,p99-abs=1e-6, max-rel=0.01");
  CHECK(t.min_cosine == 0.999);
  CHECK(t.max_rel_error == 0.01);
  CHECK(t.max_abs_error == 0.5);
  CHECK(t.max_p99_abs_error == 1e-6);
  CHECK(parseGateSpec("max-abs=0").min_cosine == 0.99999);  // the others keep their defaults
  for (const auto& [spec, words] : std::vector<std::pair<std::string, std::string>>{
           {"cosine=1.5", "at most 1"},
           {"cosine=abc", "finite number"},
           {"max-abs=-1", "finite number"},
           {"max-abs=inf", "finite number"},
           {"max-rel=-0.1", "finite number"},
           {"speed=2", "unknown key 'speed'"},
           {"cosine", "not KEY=VALUE"},
           {"cosine=0.9,cosine=0.8", "given twice"}}) {
    INFO(spec);
    try {
      parseGateSpec(spec);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Usage);
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  }
}

TEST_CASE("gate: max-rel judges a site's error against its output's largest magnitude; "
          "max-abs against a number", "[gate]") {
  auto original = model("vit_encoder_op13");
  OptimizeRequest request;
  request.level = 3;
  // Every site adds an error of 1e-3 on outputs whose largest magnitude is 100 (1e-5 of it),
  // except the layer norms', whose outputs are of magnitude 2 (5e-4 of it).
  SiteMeasure measure = [&](const Model& optimized, const std::vector<std::string>& nodes,
                           const std::set<std::string>& /*redefined*/) {
    std::vector<SiteMeasurement> out;
    for (const std::string& label : nodes) {
      const Node* n = nullptr;
      for (const Node* c : optimized.graph->nodes())
        if (c->label() == label) n = c;
      REQUIRE(n != nullptr);
      SiteMeasurement m;
      m.measured = true;
      m.max_abs_error = 1e-3;
      m.scale = n->opType().find("LayerNorm") != std::string::npos ? 2 : 100;
      out.push_back(m);
    }
    return out;
  };
  const GatedOptimization relative =
      optimizeWithGate(*original, request, parseGateSpec("default"), measure);
  size_t undone = 0;
  for (const GatedSite& s : relative.report.gate.sites) {
    INFO(s.pass << " " << s.new_op << " " << s.verdict << " " << s.detail);
    if (s.verdict == "undone") {
      ++undone;
      CHECK(s.new_op.find("LayerNorm") != std::string::npos);
      CHECK(s.max_rel_error == Approx(5e-4));
      CHECK_THAT(s.detail, Catch::Contains("max rel 0.0005 > 0.0001 (max abs 0.001 of largest "
                                           "|original| 2)"));
    } else if (s.verdict == "kept") {
      CHECK(s.max_rel_error == Approx(1e-5));
    }
  }
  CHECK(undone > 0);
  CHECK(numericGatePassed(relative.report));
  // An absolute limit undoes them all, whatever their scale.
  const GatedOptimization absolute =
      optimizeWithGate(*original, request, parseGateSpec("max-abs=1e-4,max-rel=1"), measure);
  for (const GatedSite& s : absolute.report.gate.sites) {
    INFO(s.pass << " " << s.new_op << " " << s.verdict << " " << s.detail);
    CHECK(s.verdict != "kept");
  }
}

TEST_CASE("gate: a site outside the thresholds is undone and the others kept", "[gate]") {
  auto original = model("vit_encoder_op13");
  OptimizeRequest request;
  request.level = 3;
  auto plain = original->clone();
  const Report ungated = optimize(*plain, request);
  const size_t epilogue_sites = sitesOf(ungated, "fuse-matmul-epilogue");
  REQUIRE(epilogue_sites > 0);

  // Condemn every FusedMatMul the epilogue pass makes; pass everything else.
  int calls = 0;
  SiteMeasure measure = [&](const Model& optimized, const std::vector<std::string>& nodes,
                           const std::set<std::string>& /*redefined*/) {
    ++calls;
    std::vector<SiteMeasurement> out;
    for (const std::string& label : nodes) {
      SiteMeasurement m;
      m.measured = true;
      const Node* n = nullptr;
      for (const Node* c : optimized.graph->nodes())
        if (c->label() == label) n = c;
      REQUIRE(n != nullptr);
      if (n->opType().rfind("FusedMatMul", 0) == 0) m.cosine = 0.5;
      out.push_back(m);
    }
    return out;
  };
  GatedOptimization gated = optimizeWithGate(*original, request, GateThresholds{}, measure);
  const NumericGate& g = gated.report.gate;
  CHECK(g.ran);
  CHECK(g.rounds == 2);
  CHECK(calls == 2);
  CHECK(g.undone() == epilogue_sites);
  CHECK(sitesOf(gated.report, "fuse-matmul-epilogue") == 0);
  for (const Node* n : gated.model->graph->nodes()) CHECK(n->opType().rfind("FusedMatMul", 0) != 0);
  // Everything else still fused exactly as without the gate.
  CHECK(sitesOf(gated.report, "fuse-attention") == sitesOf(ungated, "fuse-attention"));
  CHECK(sitesOf(gated.report, "fuse-layer-norm") == sitesOf(ungated, "fuse-layer-norm"));
  size_t kept = 0;
  for (const GatedSite& s : g.sites) {
    INFO(s.pass << " " << s.new_node << " " << s.verdict << " " << s.detail);
    if (s.verdict == "undone") {
      CHECK(s.pass == "fuse-matmul-epilogue");
      CHECK(s.round == 1);
      CHECK_THAT(s.detail, Catch::Contains("cosine 0.5 < 0.99999"));
    } else {
      CHECK(s.round == 2);
      CHECK((s.verdict == "kept" || s.verdict == "superseded"));
      kept += s.verdict == "kept";
    }
  }
  CHECK(kept > 0);
  CHECK(numericGatePassed(gated.report));
  // The refused rewrites are counted where the driver skipped them.
  int64_t refused = 0;
  for (const PassStatistics& p : gated.report.passes) {
    auto it = p.counters.find("refused_by_gate");
    if (it != p.counters.end()) refused += it->second;
  }
  // once per sweep that met the anchor again (the pass runs in a fixpoint group)
  CHECK(refused >= static_cast<int64_t>(epilogue_sites));
}

TEST_CASE("gate: a node made wrong on purpose is measured wrong, the right one right",
          "[gate]") {
  auto original = model("bert_op17");
  auto optimized = original->clone();
  OptimizeRequest request;
  request.level = 3;
  const Report report = optimize(*optimized, request);
  const std::vector<kernels::NamedTensor> inputs = kernels::makeRandomInputs(
      *original->graph, 7, {{"hidden", Shape::ofStatic({2, 8, 64})},
                            {"attention_mask", Shape::ofStatic({2, 1, 1, 8})}});
  std::vector<std::string> labels;
  for (const FusionSite& f : report.fusions)
    if (f.pass == "fuse-skip-norm" || f.pass == "fuse-attention") labels.push_back(f.new_node);
  REQUIRE(labels.size() >= 2);
  std::vector<kernels::NodeNumbers> right =
      kernels::measureReplacementNodes(*original, *optimized, labels, inputs);
  for (const kernels::NodeNumbers& n : right) {
    INFO(n.node << ": " << n.detail);
    CHECK(n.measured);
    CHECK(n.cosine > 0.99999);
    CHECK(n.max_abs_error < 1e-4);
    CHECK(n.p99_abs_error <= n.max_abs_error);
    CHECK(n.elements > 0);
  }
  // A norm's epsilon of 10 changes its output everywhere; the measure must see it.
  Node* norm = nullptr;
  for (Node* n : optimized->graph->nodes())
    if (n->opType() == "SkipLayerNorm" && n->label() == labels.front()) norm = n;
  if (!norm) {
    for (Node* n : optimized->graph->nodes())
      if (n->opType() == "SkipLayerNorm") norm = n;
  }
  REQUIRE(norm != nullptr);
  norm->setAttr(Attribute::ofFloat("epsilon", 10.f));
  std::vector<kernels::NodeNumbers> wrong =
      kernels::measureReplacementNodes(*original, *optimized, {norm->label()}, inputs);
  REQUIRE(wrong.size() == 1);
  CHECK(wrong[0].measured);
  CHECK(wrong[0].max_abs_error > 0.1);
  // Labels that name nothing, or a node with no counterpart, are reported, not guessed at.
  std::vector<kernels::NodeNumbers> none =
      kernels::measureReplacementNodes(*original, *optimized, {"no such node"}, inputs);
  CHECK_FALSE(none[0].measured);
  CHECK_THAT(none[0].detail, Catch::Contains("no node"));
}

TEST_CASE("gate: the real kernels keep every fusion of the bundled models at the default gate",
          "[gate]") {
  for (const std::string name : {"resnet_mini", "llama_gqa_block", "vit_encoder_op17"}) {
    SECTION(name) {
      auto original = model(name);
      std::vector<std::pair<std::string, Shape>> dims;
      if (name == "llama_gqa_block") {
        dims = {{"hidden", Shape::ofStatic({2, 8, 128})},
                {"cos", Shape::ofStatic({8, 16})},
                {"sin", Shape::ofStatic({8, 16})}};
      } else if (name == "vit_encoder_op17") {
        dims = {{"tokens", Shape::ofStatic({2, 17, 64})}};
      } else {
        dims = {{"input", Shape::ofStatic({1, 3, 32, 32})}};
      }
      const auto inputs = kernels::makeRandomInputs(*original->graph, 3, dims);
      OptimizeRequest request;
      request.level = 3;
      GatedOptimization gated =
          optimizeWithGate(*original, request, GateThresholds{}, kernelMeasure(*original, inputs));
      const NumericGate& g = gated.report.gate;
      CHECK(g.rounds == 1);
      CHECK(g.undone() == 0);
      size_t measured = 0;
      for (const GatedSite& s : g.sites) {
        INFO(name << ": " << s.pass << " " << s.new_node << " " << s.verdict << " " << s.detail);
        CHECK(s.verdict != "failed");
        CHECK(s.verdict != "unmeasured");
        measured += s.measured;
      }
      CHECK(measured > 0);
      // The gated run is the ungated run: same sites, same model.
      auto plain = original->clone();
      const Report ungated = optimize(*plain, request);
      CHECK(gated.report.fusions.size() == ungated.fusions.size());
      CHECK(modelToText(*gated.model) == modelToText(*plain));
    }
  }
}

TEST_CASE("gate: a fused node renamed on export (unnamed, respelled) is still measured",
          "[gate]") {
  // Unnamed nodes are labelled by op and output; export respells the fused ones
  // (Elementwise -> Elementwise_<hash>, FusedConv -> FusedConv_Relu), so their final labels
  // differ from the report's. The gate finds them by the fusion stamp they carry last.
  auto original = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 5, 5] X, float[2] B) => (float[1, 2, 5, 5] Y, float[1, 2, 4, 4] Z)
<float[2, 2, 2, 2] W = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8}, float half = {0.5}>
{
  A = Mul (X, half)
  T = Tanh (A)
  Y = Mul (T, X)
  C = Conv (X, W, B)
  Z = Relu (C)
}
)",
                                 "renamed");
  const auto inputs = kernels::makeRandomInputs(*original->graph, 5);
  OptimizeRequest request;
  request.level = 3;
  GatedOptimization gated =
      optimizeWithGate(*original, request, GateThresholds{}, kernelMeasure(*original, inputs));
  std::map<std::string, std::string> verdicts;
  for (const GatedSite& s : gated.report.gate.sites) {
    INFO(s.pass << " " << s.new_node << " " << s.verdict << " " << s.detail);
    verdicts[s.pass] = s.verdict;
    CHECK(s.measured);
    CHECK(s.max_abs_error <= 1e-6);
  }
  CHECK(verdicts == std::map<std::string, std::string>{{"fuse-elementwise", "kept"},
                                                       {"fuse-epilogue", "kept"}});
}

TEST_CASE("gate: fusectl optimize --gate writes the gate into the report and undoes on a "
          "strict gate",
          "[gate][cli]") {
  const fs::path dir = fusectl::testing::processTempPath("fusectl_gate_cli");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string m = fusectl::test::shellQuote(std::string(FUSECTL_SOURCE_DIR) +
                                                  "/testdata/models/bert_op17.onnx");
  const nlohmann::json schema = nlohmann::json::parse(fusectl::testing::slurp(
      std::string(FUSECTL_SOURCE_DIR) + "/docs/schemas/report.schema.json"));

  Run ok = runFusectl("optimize " + m + " -O3 -o " + (dir / "ok.onnx").string() +
                          " --shape hidden=2x8x64 --shape attention_mask=2x1x1x8 --gate default"
                          " --report " + (dir / "ok.json").string() + " --table",
                      dir);
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("Gate (cosine >= 0.99999, max rel <= 0.0001)"));
  nlohmann::json r = nlohmann::json::parse(fusectl::testing::slurp(dir / "ok.json"));
  CHECK(fusectl::testing::checkJsonSchema(r, schema, schema) == "");
  CHECK(r["gate"]["rounds"] == 1);
  CHECK(r["gate"]["undone"] == 0);
  CHECK(r["gate"]["sites"].size() == r["fusions"].size());

  // max-abs=0: every site whose kernel rounds differently from the unfused nodes is undone;
  // what is written still agrees with the original.
  Run strict = runFusectl("optimize " + m + " -O3 -o " + (dir / "strict.onnx").string() +
                              " --shape hidden=2x8x64 --shape attention_mask=2x1x1x8"
                              " --gate max-abs=0 --verify --report " +
                              (dir / "strict.json").string(),
                          dir);
  INFO(strict.err);
  REQUIRE(strict.code == 0);
  nlohmann::json s = nlohmann::json::parse(fusectl::testing::slurp(dir / "strict.json"));
  CHECK(fusectl::testing::checkJsonSchema(s, schema, schema) == "");
  CHECK(s["gate"]["undone"].get<int>() > 0);
  CHECK(s["gate"]["rounds"].get<int>() >= 2);
  CHECK(s["verification"]["passed"] == true);
  for (const auto& site : s["gate"]["sites"]) {
    if (site["verdict"] == "kept") CHECK(site["max_abs_error"].get<double>() == 0.0);
    if (site["verdict"] == "undone") CHECK(site["max_abs_error"].get<double>() > 0.0);
  }
  CHECK(s["summary"]["fusions"].get<int>() < r["summary"]["fusions"].get<int>());

  Run bad = runFusectl("optimize " + m + " -O3 -o " + (dir / "bad.onnx").string() +
                           " --gate cosine=2",
                       dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--gate: 'cosine=2': a cosine is at most 1"));
  CHECK_FALSE(fs::exists(dir / "bad.onnx"));
  fs::remove_all(dir);
}

TEST_CASE("gate: a float16 site is held to limits scaled to its type, and kept at the defaults",
          "[gate][half]") {
  const GateThresholds given;
  const GateThresholds absolute = parseGateSpec("max-abs=1e-4");
  CHECK(given.forDType(DType::Float).max_rel_error == given.max_rel_error);
  CHECK(given.forDType(DType::Float16).max_rel_error == given.max_rel_error * 8192);
  CHECK(given.forDType(DType::BFloat16).max_rel_error == given.max_rel_error * 65536);
  CHECK(absolute.forDType(DType::Float16).max_abs_error == absolute.max_abs_error * 8192);
  CHECK(absolute.forDType(DType::BFloat16).max_abs_error == absolute.max_abs_error * 65536);
  CHECK(given.forDType(DType::Float16).min_cosine == given.min_cosine);

  // A float16 LayerNorm chain: the fused node rounds once where the chain rounded nine times,
  // so its output differs from the chain's by more than float32's 1e-4, within float16's limit.
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float16[4, 16] X) => (float16[4, 16] Y)
<float eps32 = {1e-5}>
{
  eps = Cast <to = 10> (eps32)
  M = ReduceMean <axes = [-1]> (X)
  D = Sub (X, M)
  Q = Mul (D, D)
  V = ReduceMean <axes = [-1]> (Q)
  A = Add (V, eps)
  S = Sqrt (A)
  Y = Div (D, S)
}
)";
  auto original = parseModelText(text, "half_layer_norm");
  const std::vector<kernels::NamedTensor> inputs = kernels::makeRandomInputs(*original->graph, 3);
  OptimizeRequest request;
  request.passes = "fold-constants,fuse-layer-norm";
  const GatedOptimization gated =
      optimizeWithGate(*original, request, given, kernelMeasure(*original, inputs));
  REQUIRE(gated.report.gate.sites.size() == 1);
  const GatedSite& site = gated.report.gate.sites[0];
  INFO(site.detail);
  CHECK(site.verdict == "kept");
  CHECK(site.max_rel_error > given.max_rel_error);  // float32's limit would have undone it
  CHECK(site.cosine >= given.min_cosine);
  CHECK(numericGatePassed(gated.report));
}
