// `fusectl profile` (apps/cmd_profile.cpp) end to end, and the statistics and fusion-site
// accounting of libkernels' profile.h against figures worked out here by hand.
//
// No test asserts a time: timings only have to be there and be consistent with each other
// (a node's share, the per-op sums); what is checked is structure and counts.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dump_schema_check.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/cuda_device.h"
#include "fusectl/kernels/profile.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/optimize.h"
#include "onnx_checker.h"
#include "shell_util.h"
#include "test_files.h"

namespace {

using fusectl::test::shellQuote;
using fusectl::testing::slurp;
using fusectl::testing::TempDir;
using nlohmann::json;
namespace kernels = fusectl::kernels;

const std::string kSource = FUSECTL_SOURCE_DIR;

struct CliResult {
  int code = -1;
  std::string out, err;
};

CliResult runFusectl(const std::string& args) {
  static TempDir io("profile-io");
  const std::string out = io / "stdout", err = io / "stderr";
  const std::string cmd = "timeout 300 " + shellQuote(FUSECTL_BINARY) + " " + args + " >" +
                          out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

size_t lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

json profileSchema() {
  return json::parse(slurp(kSource + "/docs/schemas/profile.schema.json"));
}

std::string schemaProblem(const json& report) {
  static const json schema = profileSchema();
  return fusectl::testing::checkJsonSchema(report, schema, schema);
}

// The testdata models with the dims their symbolic inputs get here (seq 8, not the default 1).
struct TestModel {
  std::string file;
  std::string shapes;  // --shape flags
  std::vector<std::pair<std::string, fusectl::Shape>> dims;
};

std::vector<TestModel> testModels() {
  auto shape = [](const char* text) { return *fusectl::Shape::parse(text); };
  return {
      {"resnet_mini", "--shape input=1x3x32x32", {{"input", shape("1x3x32x32")}}},
      {"mobilenet_mini", "--shape input=1x3x32x32", {{"input", shape("1x3x32x32")}}},
      {"bert_layer", "--shape hidden=1x8x64 --shape attention_mask=1x1x1x8",
       {{"hidden", shape("1x8x64")}, {"attention_mask", shape("1x1x1x8")}}},
      {"llama_layer", "--shape hidden=1x8x64 --shape cos=8x16 --shape sin=8x16",
       {{"hidden", shape("1x8x64")}, {"cos", shape("8x16")}, {"sin", shape("8x16")}}},
      // A Loop whose body -O3 fuses (MatMul + Add + Tanh): its nodes and its fusion site are
      // timed inside the body.
      {"control_flow/greedy_decode", "", {}},
  };
}

std::string modelPath(const std::string& name) {
  return kSource + "/testdata/models/" + name + ".onnx";
}

// Node counts of the model as given and after the optimize() facade at -O3, loaded here.
std::pair<size_t, size_t> nodeCounts(const TestModel& m) {
  fusectl::LoadOptions load;
  load.input_shapes = m.dims;
  auto model = fusectl::loadModel(modelPath(m.file), load);
  const size_t before = model->graph->numNodes();
  fusectl::passes::OptimizeRequest request;
  request.level = 3;
  fusectl::passes::optimize(*model, request);
  return {before, model->graph->numNodes()};
}

// The JSON's structure without its figures: objects' keys, arrays' lengths, value types.
json skeleton(const json& v) {
  if (v.is_object()) {
    json s = json::object();
    for (const auto& [k, item] : v.items()) s[k] = skeleton(item);
    return s;
  }
  if (v.is_array()) return json{{"length", v.size()}};
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  return v;  // bool, null
}

TEST_CASE("profile: each testdata model, JSON by the schema, trace, annotated model",
          "[profile]") {
  for (const TestModel& m : testModels()) {
    SECTION(m.file) {
      TempDir tmp("profile");
      const std::string json_path = tmp / "p.json", trace = tmp / "t.json",
                        annotated = tmp / "a.onnx";
      const CliResult r = runFusectl(
          "profile " + shellQuote(modelPath(m.file)) + " " + m.shapes +
          " --runs 3 --warmup 1 --top 4 --json " + shellQuote(json_path) + " --trace " +
          shellQuote(trace) + " --annotate " + shellQuote(annotated));
      INFO(r.err);
      REQUIRE(r.code == 0);
      CHECK(r.err.empty());  // no progress line: stderr is not a terminal
      CHECK(r.out.find("speedup: ") != std::string::npos);
      CHECK(r.out.find("outputs agree: yes") != std::string::npos);
      CHECK(r.out.find("\nfusion sites: ") != std::string::npos);
      CHECK(r.out.find("per op type, unfused") != std::string::npos);

      const json report = json::parse(slurp(json_path));
      CHECK(schemaProblem(report) == "");
      CHECK(report["outputs_agree"] == true);
      CHECK(report["runs"] == 3);
      CHECK(report["warmup"] == 1);
      CHECK(report["threads"] == 1);

      const auto [unfused_nodes, fused_nodes] = nodeCounts(m);
      CHECK(r.out.find(fmt::format("slowest {} node{}, fused", std::min<size_t>(4, fused_nodes),
                                   fused_nodes == 1 ? "" : "s")) != std::string::npos);
      const json& unfused = report["sides"]["unfused"];
      const json& fused = report["sides"]["fused"];
      CHECK(unfused["kernel_invocations"] == unfused_nodes);
      CHECK(fused["kernel_invocations"] == fused_nodes);
      CHECK(unfused["graph_nodes"] == unfused_nodes);
      CHECK(fused["graph_nodes"] == fused_nodes);
      for (const json* side : {&unfused, &fused}) {
        CHECK((*side)["runs_ms"].size() == 3);
        CHECK((*side)["node_runs_ms"].size() == 3);
        CHECK((*side)["trace_run"] < 3);
        CHECK((*side)["top_nodes"].size() == std::min<size_t>(4, (*side)["graph_nodes"]));
        size_t calls = 0;
        double share = 0;
        for (const json& op : (*side)["per_op"]) {
          calls += op["calls"].get<size_t>();
          share += op["share"].get<double>();
        }
        CHECK(calls == (*side)["kernel_invocations"]);
        CHECK(share == Approx(1.0).epsilon(1e-9));
        const double median = (*side)["median_ms"], lo = (*side)["min_ms"],
                     hi = (*side)["max_ms"], p90 = (*side)["p90_ms"];
        CHECK(lo <= median);
        CHECK(median <= hi);
        CHECK(p90 <= hi);
        CHECK(p90 >= median);
      }
      const json& speedup = report["speedup"];
      CHECK(speedup["median"].get<double>() ==
            Approx(unfused["median_ms"].get<double>() / fused["median_ms"].get<double>()));
      CHECK(speedup["ci_low"] <= speedup["ci_high"]);
      // Every testdata model has -O3 sites (llama_layer's attention since fuse-attention).
      CHECK_FALSE(report["fusion_sites"].empty());
      for (const json& site : report["fusion_sites"]) {
        INFO(site.dump());
        // Every site of the testdata models is found: timed, or superseded by a later one
        // (a fusion of the MatMul merge-parallel-matmuls made is linked back to the q/k/v sites
        // through their helper nodes).
        CHECK(site["status"] != "unmatched");
        CHECK(site["missing_nodes"].empty());
      }

      // One complete event per kernel invocation of each side's median run, and one per node
      // inside a control-flow node's subgraphs (its calls summed), within its parent's event.
      const json events = json::parse(slurp(trace))["traceEvents"];
      const bool control_flow = m.file.rfind("control_flow/", 0) == 0;
      std::map<int, size_t> kernels_of, body_nodes_of;
      std::map<int, std::string> name_of;
      std::map<std::pair<int, std::string>, const json*> main_event;  // (pid, node)
      for (const json& e : events) {
        if (e["ph"] == "X") {
          CHECK(e["dur"].get<double>() >= 0);
          CHECK(e["args"].contains("input_shapes"));
          if (e["args"].contains("parent")) {
            ++body_nodes_of[e["pid"].get<int>()];
            CHECK(e["args"]["calls"].get<int>() >= 1);
          } else {
            ++kernels_of[e["pid"].get<int>()];
            main_event[{e["pid"].get<int>(), e["name"].get<std::string>()}] = &e;
          }
        } else if (e["ph"] == "M" && e["name"] == "process_name") {
          name_of[e["pid"].get<int>()] = e["args"]["name"];
        }
      }
      REQUIRE(name_of.size() == 2);
      for (const auto& [pid, name] : name_of) {
        CHECK(kernels_of[pid] == report["sides"][name]["kernel_invocations"]);
        CHECK((body_nodes_of[pid] > 0) == control_flow);
      }
      for (const json& e : events) {
        if (e["ph"] != "X" || !e["args"].contains("parent")) continue;
        // A body directly inside a main-graph node ("/Loop/body"): within that node's event.
        const std::string parent = e["args"]["parent"];
        if (parent.find(" > ") != std::string::npos) continue;
        const auto owner = main_event.find({e["pid"].get<int>(), parent.substr(0, parent.rfind('/'))});
        REQUIRE(owner != main_event.end());
        const json& o = *owner->second;
        CHECK(e["ts"].get<double>() >= o["ts"].get<double>());
        CHECK(e["ts"].get<double>() + e["dur"].get<double>() <=
              o["ts"].get<double>() + o["dur"].get<double>() + 1e-6);
      }

      for (const char* side : {"unfused", "fused"}) {
        INFO(side);
        const json& s = report["sides"][side];
        CHECK(s.contains("top_body_nodes") == control_flow);
        if (!control_flow) continue;
        CHECK(r.out.find(std::string("inside control flow, ") + side) != std::string::npos);
        REQUIRE(s["top_body_nodes"].size() == 4);
        for (const json& n : s["top_body_nodes"]) {
          CHECK(n["parent"] == "/Loop/body");
          CHECK(n["calls"].get<size_t>() >= 1);
        }
      }

      CHECK(fusectl::test::onnxFullCheckProblem(annotated) == "");
      auto back = fusectl::loadModel(annotated);
      CHECK(back->graph->numNodes() == fused_nodes);
      bool summary = false;
      for (const auto& [key, value] : back->metadata_props)
        summary = summary || (key == "fusectl.profile" && value.find("fused median") == 0);
      CHECK(summary);
      for (const fusectl::Node* n : back->graph->nodes()) {
        INFO(n->label());
        CHECK(n->doc_string.str().find("fusectl profile: ") != std::string::npos);
        // Nodes inside a body carry their figures per run, with their calls.
        n->forEachSubgraph([&](const fusectl::Graph& body) {
          for (const fusectl::Node* inner : body.nodes()) {
            INFO(inner->label());
            CHECK(inner->doc_string.str().find(" ms median per run (") != std::string::npos);
          }
        });
      }
    }
  }
}

TEST_CASE("profile: the JSON's structure does not depend on the timings", "[profile]") {
  TempDir tmp("profile");
  const std::string model = shellQuote(modelPath("resnet_mini"));
  const std::string a = tmp / "a.json", b = tmp / "b.json";
  REQUIRE(runFusectl("profile " + model + " --runs 2 --warmup 0 --json " + shellQuote(a)).code ==
          0);
  REQUIRE(runFusectl("profile " + model + " --runs 2 --warmup 0 --json " + shellQuote(b)).code ==
          0);
  CHECK(skeleton(json::parse(slurp(a))) == skeleton(json::parse(slurp(b))));
}

TEST_CASE("profile --only: one side, no speedup", "[profile]") {
  TempDir tmp("profile");
  for (const std::string side : {"fused", "unfused"}) {
    const std::string j = tmp / (side + ".json"), trace = tmp / (side + ".trace.json");
    const CliResult r = runFusectl("profile " + shellQuote(modelPath("mobilenet_mini")) +
                                   " --runs 2 --warmup 0 --only " + side + " --json " +
                                   shellQuote(j) + " --trace " + shellQuote(trace));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const json report = json::parse(slurp(j));
    CHECK(schemaProblem(report) == "");
    CHECK(report["only"] == side);
    CHECK(report["sides"].size() == 1);
    CHECK(report["sides"].contains(side));
    CHECK_FALSE(report.contains("speedup"));
    CHECK(report["outputs_agree"].is_null());
    CHECK(r.out.find("speedup") == std::string::npos);
    size_t processes = 0;
    const json events = json::parse(slurp(trace))["traceEvents"];
    for (const json& e : events)
      processes += e["name"] == "process_name" ? 1 : 0;
    CHECK(processes == 1);
  }
}

TEST_CASE("profile --baseline: exit 1 only when slower than the saved run allows",
          "[profile]") {
  TempDir tmp("profile");
  const std::string model = shellQuote(modelPath("resnet_mini"));
  const std::string saved = tmp / "saved.json";
  REQUIRE(runFusectl("profile " + model + " --runs 3 --warmup 1 --json " + shellQuote(saved))
              .code == 0);
  json report = json::parse(slurp(saved));
  const double median = report["sides"]["fused"]["median_ms"];

  // A baseline a thousand times faster than anything this run can do, and one a thousand
  // times slower: the verdicts cannot depend on the machine's noise.
  json faster = report, slower = report;
  faster["sides"]["fused"]["median_ms"] = median / 1000;
  slower["sides"]["fused"]["median_ms"] = median * 1000;
  const std::string faster_path = tmp / "faster.json", slower_path = tmp / "slower.json";
  fusectl::writeFileAtomically(faster_path, faster.dump());
  fusectl::writeFileAtomically(slower_path, slower.dump());

  const CliResult regressed = runFusectl("profile " + model + " --runs 3 --baseline " +
                                         shellQuote(faster_path) + " --max-regression 10");
  CHECK(regressed.code == 1);
  CHECK(regressed.out.find("REGRESSION") != std::string::npos);
  CHECK(lines(regressed.err) == 1);
  CHECK(regressed.err.rfind("fusectl: check failed: fused median", 0) == 0);
  CHECK(regressed.err.find(faster_path) != std::string::npos);

  const CliResult fine =
      runFusectl("profile " + model + " --runs 3 --baseline " + shellQuote(slower_path));
  CHECK(fine.code == 0);
  CHECK(fine.err.empty());
  CHECK(fine.out.find("baseline: fused median") != std::string::npos);

  // A baseline that is no profile report: one line naming it, before any model is run.
  const std::string bad = tmp / "bad.json";
  fusectl::writeFileAtomically(bad, "{not json");
  const CliResult garbage = runFusectl("profile " + model + " --baseline " + shellQuote(bad));
  CHECK(garbage.code == 3);
  CHECK(lines(garbage.err) == 1);
  CHECK(garbage.err.find(bad) != std::string::npos);
  CHECK(garbage.out.empty());
  fusectl::writeFileAtomically(bad, R"({"schema": "fusectl.profile/1", "sides": {}})");
  const CliResult no_side = runFusectl("profile " + model + " --baseline " + shellQuote(bad));
  CHECK(no_side.code == 3);
  CHECK(no_side.err.find("sides.fused.median_ms") != std::string::npos);
  const CliResult missing =
      runFusectl("profile " + model + " --baseline " + shellQuote(tmp / "nope.json"));
  CHECK(missing.code == 4);
  CHECK(lines(missing.err) == 1);
  CHECK(missing.err.find("nope.json") != std::string::npos);
}

TEST_CASE("profile: errors are one line with the documented exit code", "[profile]") {
  const std::string model = shellQuote(modelPath("resnet_mini"));
  // Without a usable GPU, every command that takes --device cuda refuses it the same way.
  if (fusectl::cuda::deviceCount() == 0) {
    for (const std::string& command :
         {"profile " + model, "run " + model, "verify " + model + " " + model}) {
      INFO(command);
      const CliResult cuda = runFusectl(command + " --device cuda");
      CHECK(cuda.code == 5);
      CHECK(lines(cuda.err) == 1);
      CHECK(cuda.err.find("fusectl: error: --device cuda: no CUDA backend: ") == 0);
      CHECK(cuda.err.find(fusectl::cuda::describe()) != std::string::npos);
      CHECK(cuda.out.empty());
    }
  } else {
    WARN("a GPU is present: the no-GPU refusal of --device cuda is not exercised");
  }

  const CliResult missing = runFusectl("profile /nonexistent/model.onnx");
  CHECK(missing.code == 4);
  CHECK(lines(missing.err) == 1);
  CHECK(missing.err.find("/nonexistent/model.onnx") != std::string::npos);

  const CliResult cpu_graph = runFusectl("profile " + model + " --cuda-graph");
  CHECK(cpu_graph.code == 2);
  CHECK(cpu_graph.err == "fusectl: error: --cuda-graph needs --device cuda\n");
  CHECK(runFusectl("profile " + model + " --no-cuda-graph --runs 1 --warmup 0").code == 0);
  CHECK(runFusectl("profile " + model + " --runs 0").code == 2);
  CHECK(runFusectl("profile " + model + " --only both").code == 2);
  CHECK(runFusectl("profile " + model + " -O3 --passes dce").code == 2);
  CHECK(runFusectl("profile " + model + " --shape input=1xAx3").code == 2);
  const CliResult over = runFusectl("profile " + model + " --json " + model);
  CHECK(over.code == 2);
  CHECK(lines(over.err) == 1);
}

TEST_CASE("profile: fusion chains of unnamed nodes are followed", "[profile]") {
  TempDir tmp("profile");
  const std::string j = tmp / "p.json";
  const CliResult r = runFusectl("profile " +
                                 shellQuote(kSource + "/testdata/fixtures/conv_bn_relu.onnxtxt") +
                                 " --runs 2 --warmup 0 --json " + shellQuote(j));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json sites = json::parse(slurp(j))["fusion_sites"];
  REQUIRE(sites.size() == 2);
  CHECK(sites[0]["status"] == "superseded");
  CHECK(sites[0]["superseded_by"] == "FusedConv_Relu(Y)");
  CHECK(sites[1]["fused_node"] == "FusedConv_Relu(Y)");
  CHECK(sites[1]["compared_nodes"] ==
        json::array({"Conv(C)", "BatchNormalization(N)", "Relu(Y)"}));
  CHECK(sites[1]["missing_nodes"].empty());
  CHECK(sites[1]["fused_ms"].is_number());
  // Two runs give a wide interval: any of the three verdicts can come out; `paid` says which of
  // the two decided ones it is, and is null for level.
  const std::string status = sites[1]["status"];
  CHECK((status == "paid" || status == "did-not-pay" || status == "level"));
  CHECK(sites[1]["paid"].is_boolean() == (status != "level"));
  REQUIRE(sites[1]["speedup"].is_object());
  CHECK(sites[1]["speedup"]["ci_low"].get<double>() <= sites[1]["speedup"]["ci_high"].get<double>());
}

// ---- The library's statistics, against figures worked out by hand ----

TEST_CASE("profile statistics: median, p90, min, max", "[profile]") {
  const auto odd = kernels::SampleSummary::of({5, 1, 4, 2, 3});
  CHECK(odd.median == 3);
  CHECK(odd.min == 1);
  CHECK(odd.max == 5);
  CHECK(odd.p90 == 5);  // ceil(0.9 * 5) = 5th smallest
  std::vector<double> ten;
  for (int i = 10; i >= 1; --i) ten.push_back(i);
  const auto even = kernels::SampleSummary::of(ten);
  CHECK(even.median == 5.5);
  CHECK(even.p90 == 9);  // ceil(0.9 * 10) = 9th smallest
}

TEST_CASE("profile statistics: the bootstrap interval", "[profile]") {
  // Every pair has ratio 2: so has every resample.
  const std::vector<double> u = {2, 4, 6, 8}, f = {1, 2, 3, 4};
  const auto e = kernels::estimateSpeedup(u, f, 500, 1, 0.95);
  CHECK(e.median == Approx(2.0));
  CHECK(e.ci_low == Approx(2.0));
  CHECK(e.ci_high == Approx(2.0));

  // Noisy pairs: the interval holds the point estimate, and the same timings and seed give the
  // same interval.
  std::vector<double> a, b;
  for (int i = 0; i < 30; ++i) {
    a.push_back(10 + (i * 7 % 11));
    b.push_back(8 + (i * 5 % 13));
  }
  const auto x = kernels::estimateSpeedup(a, b, 2000, 42, 0.95);
  const auto y = kernels::estimateSpeedup(a, b, 2000, 42, 0.95);
  CHECK(x.ci_low == y.ci_low);
  CHECK(x.ci_high == y.ci_high);
  CHECK(x.ci_low <= x.median);
  CHECK(x.median <= x.ci_high);
  CHECK(x.ci_low < x.ci_high);

  CHECK(kernels::checkRegression(1.10, 1.0, 5).regressed);
  CHECK_FALSE(kernels::checkRegression(1.04, 1.0, 5).regressed);
  CHECK(kernels::checkRegression(1.10, 1.0, 5).change_percent == Approx(10));
}

// A node of a hand-made side: its median, and its per-run times when a test gives them.
kernels::NodeProfile nodeOf(const std::string& label, double median,
                            std::vector<double> runs = {}) {
  kernels::NodeProfile n;
  n.node = label;
  n.op_type = "Op";
  n.median_seconds = median;
  n.run_seconds = std::move(runs);
  return n;
}

kernels::SideProfile sideOf(const std::vector<std::pair<std::string, double>>& nodes) {
  kernels::SideProfile s;
  for (const auto& [label, seconds] : nodes) s.nodes.push_back(nodeOf(label, seconds));
  return s;
}

TEST_CASE("profile fusion sites: chains, missing nodes, did not pay", "[profile]") {
  // c1+b1 folded into c1, then c1+r1 fused into f1 (named c1 again in the final model);
  // c2+r2 fused into f2, which is slower than c2 and r2 were; a site naming a node the
  // unfused run lacks.
  const kernels::SideProfile unfused =
      sideOf({{"c1", 0.010}, {"b1", 0.002}, {"r1", 0.001}, {"c2", 0.004}, {"r2", 0.001}});
  const kernels::SideProfile fused = sideOf({{"c1", 0.011}, {"f2", 0.006}, {"x", 0.001}});
  std::vector<kernels::FusionSiteInput> sites(4);
  sites[0] = {"fold-conv-bn", "conv-bn", "c1", "", "Conv", {"c1", "b1"}, {}};
  sites[1] = {"fuse-epilogue", "conv-act", "c1_7", "c1", "FusedConv", {"c1", "r1"}, {}};
  sites[2] = {"fuse-epilogue", "conv-act", "f2", "", "FusedConv", {"c2", "r2"}, {}};
  sites[3] = {"fuse-gelu", "gelu", "x", "", "Gelu", {"gone", ""}, {}};
  const auto timed = kernels::timeFusionSites(sites, unfused, fused);
  REQUIRE(timed.size() == 4);

  CHECK(timed[0].status == "superseded");
  CHECK(timed[0].superseded_by == "c1");
  CHECK(timed[0].replaced_seconds == Approx(0.012));

  CHECK(timed[1].status == "paid");  // 11 ms against 10 + 2 + 1
  CHECK(timed[1].compared_nodes == std::vector<std::string>{"c1", "b1", "r1"});
  CHECK(timed[1].fused_seconds == Approx(0.011));
  CHECK(timed[1].replaced_seconds == Approx(0.013));

  CHECK(timed[2].status == "did-not-pay");  // 6 ms against 4 + 1
  CHECK(timed[2].replaced_seconds == Approx(0.005));

  CHECK(timed[3].status == "unmatched");
  CHECK(timed[3].missing_nodes ==
        std::vector<std::string>{"gone", "(a node without a label)"});
}

TEST_CASE("profile fusion sites: a node canonicalize respelled is found by its name",
          "[profile]") {
  // canonicalize turned Div(D) into Mul(D) before fuse-elementwise took it; the unfused run
  // has Div(D). Two unfused nodes named E: that name is no evidence, so Mul(E) stays missing.
  const kernels::SideProfile unfused =
      sideOf({{"Div(D)", 0.002}, {"Exp(C)", 0.003}, {"Add(E)", 0.001}, {"Sub(E)", 0.001}});
  const kernels::SideProfile fused = sideOf({{"Elementwise(Y)", 0.004}});
  std::vector<kernels::FusionSiteInput> sites(2);
  sites[0] = {"fuse-elementwise", "elementwise", "Elementwise(Y)", "", "Elementwise",
              {"Mul(D)", "Exp(C)"}, {}};
  sites[1] = {"fuse-elementwise", "elementwise", "Elementwise(Y)", "", "Elementwise",
              {"Mul(E)"}, {}};
  const auto timed = kernels::timeFusionSites(sites, unfused, fused);
  REQUIRE(timed.size() == 2);
  CHECK(timed[0].status == "paid");
  CHECK(timed[0].replaced_seconds == Approx(0.005));
  CHECK(timed[1].status == "unmatched");
  CHECK(timed[1].missing_nodes == std::vector<std::string>{"Mul(E)"});
}

TEST_CASE("profile fusion sites: a merge's shared MatMul links its members to the later fusion",
          "[profile]") {
  // merge-parallel-matmuls: q and k (MatMul + Add each) become one merged MatMul + Add read by
  // a Slice per member (site fused node sq, sk; the merged nodes are helpers of both); then
  // fuse-matmul-epilogue makes the merged MatMul + Add one FusedMatMul m.
  const kernels::SideProfile unfused = sideOf(
      {{"qm", 0.003}, {"qa", 0.001}, {"km", 0.003}, {"ka", 0.001}});
  const kernels::SideProfile fused = sideOf({{"m", 0.005}, {"sq", 0.0005}, {"sk", 0.0005}});
  std::vector<kernels::FusionSiteInput> sites(3);
  sites[0] = {"merge-parallel-matmuls", "merge", "sq", "", "Slice", {"qm", "qa"}, {"m", "ma"}};
  sites[1] = {"merge-parallel-matmuls", "merge", "sk", "", "Slice", {"km", "ka"}, {"m", "ma"}};
  sites[2] = {"fuse-matmul-epilogue", "linear", "m", "", "FusedMatMul", {"m", "ma"}, {}};
  const auto timed = kernels::timeFusionSites(sites, unfused, fused);
  REQUIRE(timed.size() == 3);
  CHECK(timed[0].status == "superseded");
  CHECK(timed[0].superseded_by == "m");
  CHECK(timed[1].status == "superseded");
  CHECK(timed[2].compared_nodes == std::vector<std::string>{"qm", "qa", "km", "ka"});
  CHECK(timed[2].missing_nodes.empty());
  CHECK(timed[2].also_fused == std::vector<std::string>{"sq", "sk"});
  CHECK(timed[2].fused_seconds == Approx(0.006));  // the FusedMatMul and both Slices
  CHECK(timed[2].replaced_seconds == Approx(0.008));
  CHECK(timed[2].status == "paid");
}

TEST_CASE("profile fusion sites: a later fusion met through an earlier one's view is timed once",
          "[profile]") {
  // fuse-attention: MatMul qk, Softmax sm, MatMul pv become Attention "pv" with a view u (an
  // Unsqueeze helper); fuse-packed-attention then replaces u before the Attention itself, under
  // the same label "pv". The Attention is no second node beside the AttentionPacked.
  const kernels::SideProfile unfused =
      sideOf({{"qk", 0.004}, {"sm", 0.002}, {"pv", 0.004}, {"sl", 0.001}});
  const kernels::SideProfile fused = sideOf({{"pv", 0.007}});
  std::vector<kernels::FusionSiteInput> sites(2);
  sites[0] = {"fuse-attention", "attention", "pv", "", "Attention", {"qk", "sm", "pv"}, {"u"}};
  sites[1] = {"fuse-packed-attention", "packed", "pv", "", "AttentionPacked", {"u", "pv", "sl"},
              {}};
  const auto timed = kernels::timeFusionSites(sites, unfused, fused);
  REQUIRE(timed.size() == 2);
  CHECK(timed[0].status == "superseded");
  CHECK(timed[1].also_fused.empty());
  CHECK(timed[1].fused_seconds == Approx(0.007));
  CHECK(timed[1].compared_nodes == std::vector<std::string>{"qk", "sm", "pv", "sl"});
  CHECK(timed[1].replaced_seconds == Approx(0.011));
  CHECK(timed[1].status == "paid");
}

// A side whose nodes carry per-run times; each node's median is that of its runs.
kernels::SideProfile sideOfRuns(
    const std::vector<std::pair<std::string, std::vector<double>>>& nodes) {
  kernels::SideProfile s;
  for (const auto& [label, runs] : nodes)
    s.nodes.push_back(nodeOf(label, kernels::SampleSummary::of(runs).median, runs));
  return s;
}

TEST_CASE("profile fusion sites: a difference within the run-to-run spread is level",
          "[profile]") {
  // Three sites over eight paired runs (times in ms):
  //  f1 against a1 + b1: 1% slower by the medians, but run to run the two sides cross: level
  //     (by medians alone it was "did-not-pay", the verdict this interval replaces);
  //  f2 against a2 + b2: slower in every run by 20%: did-not-pay;
  //  f3 against a3: faster in every run by 25%: paid.
  const kernels::SideProfile unfused = sideOfRuns({
      {"a1", {3.0, 3.2, 2.8, 3.1, 2.9, 3.3, 2.7, 3.0}},
      {"b1", {1.0, 0.9, 1.1, 1.0, 1.0, 0.8, 1.2, 1.0}},
      {"a2", {2.0, 2.1, 1.9, 2.0, 2.0, 2.2, 1.8, 2.0}},
      {"b2", {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}},
      {"a3", {4.0, 4.2, 3.9, 4.1, 4.0, 4.3, 3.8, 4.0}},
  });
  const kernels::SideProfile fused = sideOfRuns({
      {"f1", {4.2, 3.9, 4.1, 4.0, 4.3, 3.8, 4.0, 4.1}},
      {"f2", {3.6, 3.8, 3.5, 3.6, 3.6, 3.9, 3.4, 3.6}},
      {"f3", {3.0, 3.1, 2.9, 3.1, 3.0, 3.2, 2.8, 3.0}},
  });
  std::vector<kernels::FusionSiteInput> sites(3);
  sites[0] = {"fuse-epilogue", "add", "f1", "", "FusedMatMul_Add", {"a1", "b1"}, {}};
  sites[1] = {"fuse-epilogue", "add", "f2", "", "FusedMatMul_Add", {"a2", "b2"}, {}};
  sites[2] = {"fuse-epilogue", "act", "f3", "", "FusedConv_Relu", {"a3"}, {}};
  const auto timed = kernels::timeFusionSites(sites, unfused, fused);
  REQUIRE(timed.size() == 3);

  REQUIRE(timed[0].speedup);
  CHECK(timed[0].fused_seconds > timed[0].replaced_seconds);  // slower by the medians
  CHECK(timed[0].speedup->ci_low < 1);
  CHECK(timed[0].speedup->ci_high > 1);
  CHECK(timed[0].status == "level");
  CHECK(timed[0].comparable());

  REQUIRE(timed[1].speedup);
  CHECK(timed[1].speedup->median == Approx(3.0 / 3.6));
  CHECK(timed[1].speedup->ci_high < 1);
  CHECK(timed[1].status == "did-not-pay");

  REQUIRE(timed[2].speedup);
  CHECK(timed[2].speedup->median == Approx(4.0 / 3.0));
  CHECK(timed[2].speedup->ci_low > 1);
  CHECK(timed[2].status == "paid");

  // The same interval from the same runs: the bootstrap is seeded.
  const auto again = kernels::timeFusionSites(sites, unfused, fused);
  CHECK(again[0].speedup->ci_low == timed[0].speedup->ci_low);
  CHECK(again[0].speedup->ci_high == timed[0].speedup->ci_high);

  // Nodes with per-run counts that differ cannot be paired: the medians decide, as before.
  kernels::SideProfile short_fused = fused;
  short_fused.nodes[0].run_seconds.pop_back();
  const auto unpaired = kernels::timeFusionSites(sites, unfused, short_fused);
  CHECK_FALSE(unpaired[0].speedup);
  CHECK(unpaired[0].status == "did-not-pay");
}

// ---- The library on its own: profileModels on Conv -> BatchNormalization -> Relu ----

TEST_CASE("profileModels: two passes over both sides, counts, agreement, sites", "[profile]") {
  const std::string path = kSource + "/testdata/fixtures/conv_bn_relu.onnxtxt";
  auto unfused = fusectl::loadModel(path);
  auto fused = fusectl::loadModel(path);
  fusectl::passes::OptimizeRequest request;
  request.level = 3;
  const fusectl::passes::Report report = fusectl::passes::optimize(*fused, request);
  REQUIRE(fused->graph->numNodes() == 1);  // Conv+BN folded, then fused with the Relu
  REQUIRE(report.fusions.size() == 2);
  // The sites as `fusectl profile` hands them over (apps/cmd_profile.cpp sitesOf): the folded
  // Conv by the label the second fusion knows it by (it took over N), the fused node by its
  // label in the fused model.
  std::vector<kernels::FusionSiteInput> sites = {
      {"fold-conv-bn", "conv-bn", "Conv(N)", "", "Conv", report.fusions[0].replaced_nodes, {}},
      {"fuse-epilogue", "conv-act", report.fusions[1].new_node,
       fused->graph->firstNode()->label(), "fusectl::FusedConv",
       report.fusions[1].replaced_nodes, {}}};
  CHECK(sites[1].replaced_nodes == std::vector<std::string>{"Conv(N)", "Relu(Y)"});

  kernels::ProfileOptions options;
  options.warmup = 2;
  options.runs = 5;
  std::map<std::string, int> calls;  // "<side> <pass> <warmup>" -> progress calls
  options.progress = [&](const kernels::ProfileProgress& p) {
    calls[std::string(p.side) + (p.node_times ? " nodes" : " timing") +
          (p.warmup ? " warmup" : "")]++;
    CHECK(p.done < p.total);
  };
  const std::vector<kernels::NamedTensor> inputs = kernels::makeRandomInputs(*unfused->graph, 7);
  const kernels::ProfileResult r =
      kernels::profileModels(unfused.get(), fused.get(), inputs, sites, options);

  for (const char* side : {"unfused", "fused"}) {
    for (const char* pass : {" timing", " nodes"}) {
      CHECK(calls[std::string(side) + pass] == 5);
      CHECK(calls[std::string(side) + pass + " warmup"] == 2);
    }
  }
  REQUIRE(r.unfused);
  REQUIRE(r.fused);
  CHECK(r.unfused->run_seconds.size() == 5);
  CHECK(r.unfused->node_run_seconds.size() == 5);
  CHECK(r.unfused->kernel_invocations == 3);
  CHECK(r.fused->kernel_invocations == 1);
  CHECK(r.unfused->nodes.size() == 3);
  CHECK(r.unfused->trace_run_nodes.size() == 3);
  // The trace's nodes are the median run's, node by node: its times are each node's sample of
  // that run, and its records name the nodes as the per-node table does.
  for (const kernels::SideProfile* side : {&*r.unfused, &*r.fused}) {
    REQUIRE(side->trace_run_nodes.size() == side->nodes.size());
    for (size_t i = 0; i < side->nodes.size(); ++i) {
      const kernels::NodeProfile& n = side->nodes[i];
      REQUIRE(n.run_seconds.size() == 5);
      CHECK(side->trace_run_nodes[i].node == n.node);
      CHECK(side->trace_run_nodes[i].output_dims == n.output_dims);
      CHECK(side->trace_run_nodes[i].seconds == n.run_seconds[side->trace_run]);
    }
  }
  CHECK(r.fused->per_op.size() == 1);
  // Bytes written: Conv, BN and Relu each write 1x2x4x4 floats; the fused node once.
  CHECK(r.unfused->activation_bytes_written == 3 * 32 * 4);
  CHECK(r.fused->activation_bytes_written == 32 * 4);
  REQUIRE(r.agreement);
  CHECK(r.agreement->passed);
  REQUIRE(r.speedup);
  CHECK(r.speedup->ci_low <= r.speedup->ci_high);
  REQUIRE(r.fusion_sites.size() == report.fusions.size());
  const kernels::FusionSiteProfile& last = r.fusion_sites.back();
  CHECK(last.comparable());
  CHECK(last.compared_nodes.size() == 3);  // Conv, BN and Relu of the unfused side
  for (size_t i = 0; i + 1 < r.fusion_sites.size(); ++i)
    CHECK(r.fusion_sites[i].status == "superseded");

  kernels::ProfileOptions one = options;
  one.sides = kernels::ProfiledSides::FusedOnly;
  const kernels::ProfileResult only = kernels::profileModels(nullptr, fused.get(), inputs, {}, one);
  CHECK_FALSE(only.unfused);
  CHECK(only.fused);
  CHECK_FALSE(only.speedup);
  CHECK_FALSE(only.agreement);
}

TEST_CASE("annotateModel: one line per node, a summary, annotating twice changes nothing more",
          "[profile]") {
  auto model = fusectl::loadModel(kSource + "/testdata/fixtures/conv_bn_relu.onnxtxt");
  kernels::SideProfile side = sideOf({{"Conv(C)", 0.002}, {"BatchNormalization(N)", 0.001}});
  side.nodes[0].share = 2.0 / 3;
  side.nodes[1].share = 1.0 / 3;
  model->graph->firstNode()->doc_string = "from the exporter";
  kernels::annotateModel(*model, side, "first");
  kernels::annotateModel(*model, side, "second");
  std::vector<std::string> docs;
  for (const fusectl::Node* n : model->graph->nodes()) docs.push_back(n->doc_string);
  CHECK(docs == std::vector<std::string>{
                    "from the exporter\nfusectl profile: 2.0000 ms median, 66.7% of the run",
                    "fusectl profile: 1.0000 ms median, 33.3% of the run", ""});
  size_t summaries = 0;
  for (const auto& [key, value] : model->metadata_props) {
    if (key != "fusectl.profile") continue;
    ++summaries;
    CHECK(value == "second");
  }
  CHECK(summaries == 1);
}

}  // namespace

TEST_CASE("profile trace: nodes inside subgraphs sit inside their control-flow node's event",
          "[profile]") {
  auto node = [](std::string name, double seconds) {
    kernels::NodeTime t;
    t.node = std::move(name);
    t.op_type = "Op";
    t.seconds = seconds;
    return t;
  };
  auto body = [&](std::string parent, std::string name, double seconds, size_t calls) {
    kernels::BodyNodeTime b;
    b.parent = std::move(parent);
    b.time = node(std::move(name), seconds);
    b.calls = calls;
    return b;
  };
  kernels::ProfileResult r;
  r.unfused.emplace();
  r.unfused->name = "unfused";
  r.unfused->trace_run_nodes = {node("a", 1e-3), node("/Loop", 10e-3)};
  // In the order of first calls: the inner If's nodes finish before the If itself is recorded.
  r.unfused->trace_run_body_nodes = {
      body("/Loop/body", "x", 3e-3, 5), body("/Loop/body > /If/then_branch", "y", 2e-3, 3),
      body("/Loop/body", "/If", 4e-3, 5), body("/Loop/body > /If/else_branch", "z", 3e-3, 2),
      body("gone/body", "w", 1e-3, 1)};
  const json events = json::parse(kernels::profileTraceJson(r))["traceEvents"];
  std::map<std::string, const json*> by_name;
  for (const json& e : events)
    if (e["ph"] == "X") by_name[e["name"]] = &e;
  REQUIRE(by_name.size() == 6);  // a, /Loop, x, /If, y, z; w's parent did not run
  auto ts = [&](const char* n) { return (*by_name.at(n))["ts"].get<double>(); };
  auto dur = [&](const char* n) { return (*by_name.at(n))["dur"].get<double>(); };
  CHECK(ts("/Loop") == Approx(1000));
  CHECK(ts("x") == Approx(1000));
  CHECK(dur("x") == Approx(3000));
  CHECK(ts("/If") == Approx(4000));
  CHECK(dur("/If") == Approx(4000));
  // y and z summed 5 ms inside an If of 4 ms: squeezed by 0.8, their own times in args.
  CHECK(ts("y") == Approx(4000));
  CHECK(dur("y") == Approx(1600));
  CHECK(ts("z") == Approx(5600));
  CHECK(dur("z") == Approx(2400));
  const json& z = *by_name.at("z");
  CHECK(z["args"]["parent"] == "/Loop/body > /If/else_branch");
  CHECK(z["args"]["calls"] == 2);
  CHECK(z["args"]["summed_seconds"].get<double>() == Approx(3e-3));
  CHECK(z["tid"] == 0);
  CHECK_FALSE((*by_name.at("a"))["args"].contains("parent"));
}

TEST_CASE("profile trace: a device side's kernels get their own track, its CPU nodes the cpu track",
          "[profile]") {
  auto node = [](std::string name, kernels::Device device, double seconds) {
    kernels::NodeTime t;
    t.node = std::move(name);
    t.op_type = "Op";
    t.seconds = seconds;
    t.device = device;
    return t;
  };
  kernels::ProfileResult r;
  r.unfused.emplace();
  r.unfused->name = "unfused";
  r.unfused->trace_run_nodes = {node("a", kernels::Device::Cpu, 1e-3), node("b", kernels::Device::Cpu, 2e-3)};
  r.fused.emplace();
  r.fused->name = "fused";
  r.fused->trace_run = 4;
  r.fused->trace_run_nodes = {node("gemm", kernels::Device::Cuda, 1e-3), node("shape", kernels::Device::Cpu, 1e-6),
                              node("norm", kernels::Device::Cuda, 5e-4)};
  const json events = json::parse(kernels::profileTraceJson(r))["traceEvents"];
  std::map<std::string, std::pair<int, int>> where;  // kernel -> (pid, tid)
  std::map<std::pair<int, int>, std::string> tracks;
  std::map<std::string, double> start;
  for (const json& e : events) {
    if (e["ph"] == "X") {
      where[e["name"]] = {e["pid"].get<int>(), e["tid"].get<int>()};
      start[e["name"]] = e["ts"].get<double>();
    } else if (e["name"] == "thread_name") {
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
    }
  }
  // The CPU-only side keeps one track, named as before.
  CHECK(where["a"] == std::make_pair(1, 0));
  CHECK(where["b"] == std::make_pair(1, 0));
  CHECK(tracks[{1, 0}] == "per-node run 0 (the median)");
  CHECK(tracks.count({1, 1}) == 0);
  // The device side: CUDA kernels on tid 1, the CPU node on tid 0, in the run's order in time.
  CHECK(where["gemm"] == std::make_pair(2, 1));
  CHECK(where["norm"] == std::make_pair(2, 1));
  CHECK(where["shape"] == std::make_pair(2, 0));
  CHECK(tracks[{2, 1}] == "cuda kernels: per-node run 4 (the median)");
  CHECK(tracks[{2, 0}] == "cpu: per-node run 4 (the median)");
  CHECK(start["gemm"] == 0);
  CHECK(start["shape"] == Approx(1000));
  CHECK(start["norm"] == Approx(1001));
}
