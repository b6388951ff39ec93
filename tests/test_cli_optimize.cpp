// End-to-end tests of `fusectl optimize` and `fusectl diff` (the binary, via FUSECTL_BINARY),
// and of diffGraphs (graph_diff.h) in process.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "shell_util.h"
#include "dump_schema_check.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/bisect.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/report.h"
#include "test_files.h"

namespace fs = std::filesystem;

namespace {

using fusectl::test::shellQuote;

using fusectl::testing::slurp;

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

struct Scratch {
  fs::path path;
  Scratch() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("fusectl_opt_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

struct Run {
  int code = -1;
  std::string out, err;
};

Run runCommand(const std::string& command) {
  static Scratch io;
  std::string out = io / "stdout", err = io / "stderr";
  std::string cmd = "timeout 120 " + command + " >" + out + " 2>" + err + " </dev/null";
  int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

Run runFusectl(const std::string& args) { return runCommand(shellQuote(FUSECTL_BINARY) + " " + args); }

// The reference digest of a file: coreutils' sha256sum, not our own code.
std::string sha256sum(const std::string& path) {
  Run s = runCommand("sha256sum " + shellQuote(path));
  REQUIRE(s.code == 0);
  return s.out.substr(0, 64);
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// Identities to remove (I1, Y), one that must stay (Z = Identity(X) hands a graph input to a
// graph output), duplicate initializers (B and B2), and a Conv -> BatchNormalization -> Relu
// chain for the folding passes.
const char* kFixture = R"(<ir_version: 8, opset_import: ["" : 13]>
opt_fixture (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[1, 2, 4, 4] Z, float[1, 2, 4, 4] S)
<
  float[2, 2, 3, 3] W = {
     0.10, -0.20,  0.30,  -0.40,  0.50, -0.60,   0.70, -0.80,  0.90,
    -0.15,  0.25, -0.35,   0.45, -0.55,  0.65,  -0.75,  0.85, -0.95,
     0.05,  0.15,  0.25,   0.35,  0.45,  0.55,   0.65,  0.75,  0.85,
    -0.05, -0.10, -0.15,  -0.20, -0.25, -0.30,  -0.35, -0.40, -0.45
  },
  float[2] B = {0.5, -0.25},
  float[2] B2 = {0.5, -0.25},
  float[2] bn_scale = {1.5, 0.75},
  float[2] bn_bias = {0.1, -0.2},
  float[2] bn_mean = {0.3, -0.4},
  float[2] bn_var = {2.0, 0.5}
>
{
  I1 = Identity (X)
  C = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (I1, W, B)
  N = BatchNormalization <epsilon = 0.001> (C, bn_scale, bn_bias, bn_mean, bn_var)
  R = Relu (N)
  Y = Identity (R)
  Z = Identity (X)
  C2 = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (X, W, B2)
  S = Sigmoid (C2)
}
)";

const std::string kCleanup = "--passes 'fixpoint(eliminate-identity,dedup-initializers,"
                             "eliminate-dead-code)'";

nlohmann::json loadJson(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

nlohmann::json reportSchema() {
  return nlohmann::json::parse(slurp(std::string(FUSECTL_SOURCE_DIR) +
                                     "/docs/schemas/report.schema.json"));
}

// The report without what legitimately varies between runs (wall-clock seconds).
nlohmann::json withoutTimings(nlohmann::json j) {
  for (auto& p : j["passes"]) p.erase("seconds");
  return j;
}

}  // namespace

TEST_CASE("optimize writes a loadable model and a complete report", "[cli][optimize]") {
  Scratch tmp;
  spit(tmp / "m.onnxtxt", kFixture);
  Run r = runFusectl("optimize " + shellQuote(tmp / "m.onnxtxt") + " -o " + shellQuote(tmp / "out.onnx") +
                  " " + kCleanup + " --report " + shellQuote(tmp / "r.json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.empty());  // no table unless stdout is a terminal or --table
  CHECK(r.err.empty());

  std::unique_ptr<fusectl::Model> out = fusectl::loadModel(tmp / "out.onnx");
  CHECK(out->graph->numNodes() == 6);  // I1 and Y removed, Z kept
  CHECK(out->graph->initializers().size() == 6);  // B2 merged into B
  CHECK(out->graph->outputs()[0]->name() == "Y");

  nlohmann::json j = loadJson(tmp / "r.json");
  nlohmann::json schema = reportSchema();
  CHECK(fusectl::testing::checkJsonSchema(j, schema, schema) == "");
  nlohmann::json extra = j;
  extra["summary"]["unlisted"] = 1;  // the check has teeth: additionalProperties is false
  CHECK(fusectl::testing::checkJsonSchema(extra, schema, schema) ==
        "$.summary.unlisted: not allowed by the schema");
  CHECK(j["tool"]["version"] == FUSECTL_VERSION);
  CHECK(j["input"]["file"] == tmp / "m.onnxtxt");
  CHECK(j["input"]["sha256"] == sha256sum(tmp / "m.onnxtxt"));
  CHECK(j["input"]["bytes"] == fs::file_size(tmp / "m.onnxtxt"));
  CHECK(j["output"]["file"] == tmp / "out.onnx");
  CHECK(j["output"]["sha256"] == sha256sum(tmp / "out.onnx"));
  CHECK(j["output"]["bytes"] == fs::file_size(tmp / "out.onnx"));
  CHECK(j["pipeline"] == "fixpoint(eliminate-identity,dedup-initializers,eliminate-dead-code)");
  CHECK(j["summary"]["nodes_before"] == 8);
  CHECK(j["summary"]["nodes_after"] == 6);
  CHECK(j["summary"]["intermediate_tensors_before"] == 5);
  CHECK(j["summary"]["intermediate_tensors_after"] == 3);
  CHECK(j["before"]["op_histogram"]["Identity"] == 3);
  CHECK(j["after"]["op_histogram"]["Identity"] == 1);
  CHECK(j["summary"]["parameter_bytes_before"].get<int>() -
            j["summary"]["parameter_bytes_after"].get<int>() == 8);
  CHECK(j["passes"].size() >= 3);
  CHECK(j["passes"][0]["pass"] == "eliminate-identity");
  CHECK(j["passes"][0]["counters"]["removed_identity"] == 2);
  CHECK(j["fixpoints"][0]["converged"] == true);
  CHECK(j["verification"].is_null());
  CHECK(j["expectations"].empty());
  // --report turns on explanations: the Identity that must stay says why.
  bool saw = false;
  for (const auto& rej : j["rejections"])
    saw = saw || rej["reason"].get<std::string>().find("'X' is a graph input") != std::string::npos;
  CHECK(saw);

  // Text output by extension.
  Run text = runFusectl("optimize " + shellQuote(tmp / "m.onnxtxt") + " -o " + shellQuote(tmp / "o.onnxtxt") +
                     " " + kCleanup);
  CHECK(text.code == 0);
  CHECK(slurp(tmp / "o.onnxtxt").find("opt_fixture") != std::string::npos);
  CHECK(runFusectl("dump " + shellQuote(tmp / "o.onnxtxt")).code == 0);
}

TEST_CASE("optimize refuses to overwrite its input", "[cli][optimize]") {
  Scratch tmp;
  spit(tmp / "m.onnxtxt", kFixture);
  const std::string model = shellQuote(tmp / "m.onnxtxt");
  for (const std::string& args :
       {"optimize " + model + " -o " + model,
        "optimize " + model + " -o " + shellQuote(tmp.path.string() + "/./m.onnxtxt"),
        "optimize " + model + " -o " + shellQuote(tmp / "o.onnx") + " --report " + model,
        "optimize " + model + " -o " + shellQuote(tmp / "o.onnx") + " --report " +
            shellQuote(tmp / "o.onnx")}) {
    Run r = runFusectl(args);
    INFO(args);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind("fusectl: error: ", 0) == 0);
    CHECK(r.out.empty());
  }
  CHECK(slurp(tmp / "m.onnxtxt") == kFixture);
  CHECK_FALSE(fs::exists(tmp / "o.onnx"));

  Run missing = runFusectl("optimize " + shellQuote(tmp / "nosuch.onnx") + " -o " + shellQuote(tmp / "x.onnx"));
  CHECK(missing.code == 4);
  CHECK(lines(missing.err) == 1);
  CHECK(missing.err.find("nosuch.onnx: cannot open") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "x.onnx"));

  Run nodir = runFusectl("optimize " + model + " -o " + shellQuote(tmp / "x.onnx") + " --report " +
                         shellQuote(tmp / "no/such/r.json"));
  CHECK(nodir.code == 4);
  CHECK(lines(nodir.err) == 1);
  CHECK_FALSE(fs::exists(tmp / "x.onnx"));  // nothing written when the report cannot be

  Run both = runFusectl("optimize " + model + " -o " + shellQuote(tmp / "x.onnx") + " -O1 " + kCleanup);
  CHECK(both.code == 2);
  Run level = runFusectl("optimize " + model + " -o " + shellQuote(tmp / "x.onnx") + " -O7");
  CHECK(level.code == 2);
  CHECK(level.err.find("-O7") != std::string::npos);
  Run no_output = runFusectl("optimize " + model);
  CHECK(no_output.code == 2);
}

TEST_CASE("optimize --pass-option sets a pass's option inside an -O level", "[cli][optimize]") {
  // Grouped-query projections: Q 8 wide, K and V 2. -O3 leaves them apart (the width rule);
  // with merge-parallel-matmuls{narrow=true} they become one MatMul read through Slices.
  Scratch tmp;
  const std::string gqa = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 3, 6] X) => (float[2, 3, 8] Q, float[2, 3, 2] K, float[2, 3, 2] V)
<float[6, 8] Wq = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8,
                   1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8},
 float[6, 2] Wk = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
 float[6, 2] Wv = {2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11}>
{
  Q = MatMul (X, Wq)
  K = MatMul (X, Wk)
  V = MatMul (X, Wv)
}
)";
  spit(tmp / "gqa.onnxtxt", gqa);
  const std::string model = shellQuote(tmp / "gqa.onnxtxt");
  const std::string out = shellQuote(tmp / "o.onnx");
  auto matmuls = [&] {
    const nlohmann::json d = nlohmann::json::parse(runFusectl("dump " + out + " --format json").out);
    size_t n = 0;
    for (const nlohmann::json& node : d["nodes"]) n += node["op_type"] == "MatMul";
    return n;
  };
  REQUIRE(runFusectl("optimize " + model + " -O3 -o " + out).code == 0);
  CHECK(matmuls() == 3);
  Run narrow = runFusectl("optimize " + model + " -O3 --pass-option " +
                          shellQuote("merge-parallel-matmuls{narrow=true}") + " -o " + out +
                          " --verify");
  INFO(narrow.err);
  REQUIRE(narrow.code == 0);
  CHECK(matmuls() == 1);

  // A pass the pipeline does not run, a pass without options, an option it does not declare:
  // one-line usage errors naming what is wrong.
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"-O1 --pass-option " + shellQuote("merge-parallel-matmuls{narrow=true}"),
            "pass 'merge-parallel-matmuls' is not in the pipeline"},
           {"-O3 --pass-option merge-parallel-matmuls", "give one pass with its options"},
           {"-O3 --pass-option " + shellQuote("merge-parallel-matmuls{wide=true}"),
            "has no option 'wide' (its options: narrow)"},
           {"-O3 --pass-option " + shellQuote("merge-parallel-matmuls{narrow=3}"), "narrow"}}) {
    Run r = runFusectl("optimize " + model + " " + args + " -o " + shellQuote(tmp / "x.onnx"));
    INFO(args << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "x.onnx"));
  }
}

TEST_CASE("optimize --expect and --fail-if-unfused gate the fusion sites", "[cli][optimize]") {
  Scratch tmp;
  spit(tmp / "m.onnxtxt", kFixture);
  const std::string base = "optimize " + shellQuote(tmp / "m.onnxtxt") + " -o " +
                           shellQuote(tmp / "o.onnx") + " " + kCleanup;
  // eliminate-identity bypasses nodes; it creates no fusion site.
  Run zero = runFusectl(base + " --expect eliminate-identity=0");
  CHECK(zero.code == 0);
  CHECK(zero.err.empty());

  fs::remove(tmp / "o.onnx");
  Run one = runFusectl(base + " --expect eliminate-identity=1 --report " + shellQuote(tmp / "r.json"));
  CHECK(one.code == 1);
  CHECK(one.err == "fusectl: check failed: --expect eliminate-identity=1: 0 fusion sites\n");
  CHECK(fs::exists(tmp / "o.onnx"));  // the model is right, only less fused than demanded
  nlohmann::json j = loadJson(tmp / "r.json");
  REQUIRE(j["expectations"].size() == 1);
  CHECK(j["expectations"][0]["passed"] == false);
  CHECK(j["expectations"][0]["expected"] == 1);
  CHECK(j["expectations"][0]["found"] == 0);

  // The Identity from graph input X to graph output Z is a candidate a legality condition kept.
  Run unfused = runFusectl(base + " --fail-if-unfused identity");
  CHECK(unfused.code == 1);
  CHECK(lines(unfused.err) == 1);
  CHECK(unfused.err.find("--fail-if-unfused identity: 1 candidate not fused; first: "
                         "Identity(Z) [keep") != std::string::npos);
  CHECK(runFusectl(base + " --fail-if-unfused dedup-initializers").code == 0);

  // A real fusion: Conv -> BatchNormalization folded into one Conv.
  const std::string cbr = std::string(FUSECTL_SOURCE_DIR) + "/testdata/fixtures/conv_bn_relu.onnxtxt";
  Run folded = runFusectl("optimize " + shellQuote(cbr) + " -o " + shellQuote(tmp / "cbr.onnx") +
                          " --passes fold-conv-bn --expect fold-conv-bn=1 --expect conv-bn=1 "
                          "--fail-if-unfused conv-bn --report " + shellQuote(tmp / "cbr.json"));
  INFO(folded.err);
  CHECK(folded.code == 0);
  nlohmann::json f = loadJson(tmp / "cbr.json");
  REQUIRE(f["fusions"].size() == 1);
  CHECK(f["fusions"][0]["pass"] == "fold-conv-bn");
  CHECK(f["fusions"][0]["pattern"] == "conv-bn");
  CHECK(f["fusions"][0]["replaced_nodes"] ==
        nlohmann::json::array({"Conv(C)", "BatchNormalization(N)"}));
  CHECK(f["fusions"][0]["new_op"] == "Conv");
  CHECK(f["fusions"][0]["portability"] == "standard");
  CHECK(f["fusions"][0]["activation_bytes_saved"] == 128);  // C: float[1,2,4,4]
  CHECK(f["expectations"].size() == 3);
  Run two = runFusectl("optimize " + shellQuote(cbr) + " -o " + shellQuote(tmp / "cbr.onnx") +
                       " --passes fold-conv-bn --expect conv-bn=2");
  CHECK(two.code == 1);
  CHECK(two.err == "fusectl: check failed: --expect conv-bn=2: 1 fusion site\n");
  Run d = runFusectl("diff " + shellQuote(cbr) + " " + shellQuote(tmp / "cbr.onnx"));
  CHECK(d.out.find("fusion sites: 1\n  Conv Conv(N) by fold-conv-bn: fused Conv(C), "
                   "BatchNormalization(N)\n") != std::string::npos);

  Run typo = runFusectl(base + " --expect fold-conv=1");
  CHECK(typo.code == 2);
  CHECK(typo.err.find("no pass or pattern of that name in the pipeline") != std::string::npos);

  // --emit standard skips fusectl-domain passes: a gate on one could never fail.
  const std::string o3 = "optimize " + shellQuote(tmp / "m.onnxtxt") + " -o " +
                         shellQuote(tmp / "std.onnx") + " -O3 --emit standard";
  for (const char* gate : {" --fail-if-unfused fuse-epilogue", " --expect conv-act=1",
                           " --fail-if-unfused fuse-gelu"}) {
    INFO(gate);
    Run skipped = runFusectl(o3 + gate);
    CHECK(skipped.code == 2);
    CHECK(skipped.err.find("does not run with --emit standard") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "std.onnx"));
  }
  CHECK(runFusectl(o3 + " --expect fold-conv-bn=0").code == 0);  // a standard pass is still a gate
  CHECK(runFusectl(base + " --expect eliminate-identity").code == 2);
  CHECK(runFusectl(base + " --expect eliminate-identity=-1").code == 2);
}

// The report hashes every file of the model: the .onnx and its external-data files.
TEST_CASE("optimize's report hashes the external-data files too", "[cli][optimize]") {
  Scratch tmp;
  const fs::path source = fs::path(FUSECTL_SOURCE_DIR) / "testdata/bad/external_ok";
  const fs::path in = tmp.path / "in";
  fs::create_directories(in);
  for (const char* f : {"model.onnx", "weights.bin"}) fs::copy_file(source / f, in / f);
  Run r = runFusectl("optimize " + shellQuote(tmp / "in/model.onnx") + " -o " +
                     shellQuote(tmp / "out.onnx") + " -O1 --report " + shellQuote(tmp / "r.json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  nlohmann::json j = loadJson(tmp / "r.json");
  nlohmann::json schema = reportSchema();
  CHECK(fusectl::testing::checkJsonSchema(j, schema, schema) == "");
  CHECK(j["input"]["sha256"] == sha256sum(tmp / "in/model.onnx"));
  REQUIRE(j["input"]["external_data"].size() == 1);
  CHECK(j["input"]["external_data"][0]["file"] == "weights.bin");
  CHECK(j["input"]["external_data"][0]["sha256"] == sha256sum(tmp / "in/weights.bin"));
  CHECK(j["input"]["external_data"][0]["bytes"] == fs::file_size(tmp / "in/weights.bin"));
  CHECK(j["output"]["sha256"] == sha256sum(tmp / "out.onnx"));
  CHECK(j["output"]["external_data"].empty());  // small weights are written inline

  // saveModel says where it put the weights: the named file, or none for a small binary or a
  // text model (which cannot have external data).
  auto model = fusectl::loadModel(tmp / "in/model.onnx");
  CHECK(model->external_data_files == std::vector<std::string>{"weights.bin"});
  fusectl::SaveOptions named;
  named.external_data_file = "w.data";
  CHECK(fusectl::saveModel(*model, tmp / "named.onnx", named) == "w.data");
  CHECK(fs::exists(tmp / "w.data"));
  CHECK(fusectl::saveModel(*model, tmp / "inline.onnx").empty());
  CHECK(fusectl::saveModel(*model, tmp / "text.onnxtxt").empty());
  CHECK_THROWS_AS(fusectl::saveModel(*model, tmp / "text.onnxtxt", named), fusectl::Error);
}

TEST_CASE("optimize is deterministic and a second run changes nothing", "[cli][optimize]") {
  Scratch tmp;
  const std::string models = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/";
  std::vector<std::pair<std::string, std::string>> runs = {{"resnet_mini", "-O1"},
                                                           {"resnet_mini", "-O2"}};
  for (const char* m : {"resnet_mini", "mobilenet_mini", "bert_layer", "llama_layer"})
    runs.push_back({m, "-O3"});
  for (const auto& run : runs) {
    // Named copies, not a structured binding: C++17 lambdas cannot capture those (clang refuses).
    const std::string name = run.first, level = run.second;
    INFO(name << " " << level);
    const std::string model = models + name + ".onnx";
    auto opt = [&](const std::string& in, const std::string& out, const std::string& report) {
      return runFusectl("optimize " + shellQuote(in) + " -o " + shellQuote(tmp / out) + " " + level +
                     " --report " + shellQuote(tmp / report));
    };
    Run a = opt(model, "a.onnx", "a.json");
    INFO(a.err);
    REQUIRE(a.code == 0);
    // The second run without the background prefault thread: it must change no byte.
    setenv("FUSECTL_NO_PREFAULT", "1", 1);
    const int b_code = opt(model, "b.onnx", "b.json").code;
    unsetenv("FUSECTL_NO_PREFAULT");
    REQUIRE(b_code == 0);
    CHECK(slurp(tmp / "a.onnx") == slurp(tmp / "b.onnx"));
    nlohmann::json ja = loadJson(tmp / "a.json"), jb = loadJson(tmp / "b.json");
    jb["output"]["file"] = ja["output"]["file"];
    CHECK(withoutTimings(ja) == withoutTimings(jb));

    // Optimizing the output again: no rewrite, no fusion, the same bytes.
    REQUIRE(opt(tmp / "a.onnx", "c.onnx", "c.json").code == 0);
    CHECK(slurp(tmp / "c.onnx") == slurp(tmp / "a.onnx"));
    nlohmann::json jc = loadJson(tmp / "c.json");
    CHECK(jc["summary"]["fusions"] == 0);
    CHECK(jc["summary"]["nodes_before"] == jc["summary"]["nodes_after"]);
    CHECK(jc["input"]["sha256"] == jc["output"]["sha256"]);
    for (const auto& p : jc["passes"]) {
      CHECK(p["changed"] == false);
      if (p["counters"].contains("rewrites")) CHECK(p["counters"]["rewrites"] == 0);
    }
  }
}

TEST_CASE("optimize --verify, --table and --quiet", "[cli][optimize]") {
  Scratch tmp;
  const std::string model = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/resnet_mini.onnx";
  Run r = runFusectl("optimize " + shellQuote(model) + " -o " + shellQuote(tmp / "o.onnx") +
                  " -O3 --verify --table --report " + shellQuote(tmp / "r.json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("| Nodes ") != std::string::npos);
  CHECK(r.out.find("| Intermediate tensors ") != std::string::npos);
  CHECK(r.out.find("| Parameters ") != std::string::npos);
  CHECK(r.out.find("| File size ") != std::string::npos);
  CHECK(r.out.find("| Conv ") != std::string::npos);
  CHECK(r.out.find("\nTime: ") != std::string::npos);
  nlohmann::json j = loadJson(tmp / "r.json");
  // resnet_mini: 8 Conv+BatchNormalization pairs fold (standard ONNX), then activations and
  // residual Adds join the Convs (fusectl domain).
  CHECK(j["fusions_by_pattern"]["conv-bn"] == 8);
  size_t fusectl_sites = 0;
  for (const auto& f : j["fusions"]) {
    if (f["pass"] != "fuse-epilogue") continue;
    ++fusectl_sites;
    CHECK(f["portability"] == "fusectl");
    CHECK(f["new_op"] == "fusectl::FusedConv");
  }
  CHECK(fusectl_sites > 0);
  CHECK(j["after"]["op_histogram"].count("BatchNormalization") == 0);
  REQUIRE(j["verification"].is_object());
  CHECK(j["verification"]["passed"] == true);
  CHECK(j["verification"]["outputs"].size() >= 1);
  nlohmann::json schema = reportSchema();
  CHECK(fusectl::testing::checkJsonSchema(j, schema, schema) == "");
  // The table is deterministic but for its Time line.
  Run again = runFusectl("optimize " + shellQuote(model) + " -o " + shellQuote(tmp / "o.onnx") +
                      " -O3 --table");
  auto untimed = [](const std::string& s) { return s.substr(0, s.find("\nTime: ")); };
  CHECK(untimed(again.out) == untimed(r.out));

  // Zero tolerance: folding BatchNormalization into the weights rounds differently in the last
  // bits, which is drift at atol = rtol = 0: exit 1, and the model is not written.
  Run drift = runFusectl("optimize " + shellQuote(model) + " -o " + shellQuote(tmp / "drift.onnx") +
                         " -O3 --verify --atol 0 --rtol 0 --report " + shellQuote(tmp / "d.json"));
  CHECK(drift.code == 1);
  CHECK(lines(drift.err) == 1);
  CHECK(drift.err.rfind("fusectl: check failed: --verify: output 'output' drifted: ", 0) == 0);
  CHECK_FALSE(fs::exists(tmp / "drift.onnx"));
  nlohmann::json d = loadJson(tmp / "d.json");
  CHECK(d["verification"]["passed"] == false);
  // Each output says how the optimized model differs (the wording of apps/verify_optimized.cpp).
  REQUIRE(d["verification"]["outputs"].size() == 1);
  CHECK(d["verification"]["outputs"][0]["passed"] == false);
  CHECK_THAT(d["verification"]["outputs"][0]["detail"].get<std::string>(),
             Catch::Matches("[0-9]+ of [0-9]+ elements differ \\(first at \\[.*"));
  CHECK(d["output"]["file"] == "");

  Run quiet = runFusectl("optimize " + shellQuote(model) + " -o " + shellQuote(tmp / "q.onnx") + " --quiet");
  CHECK(quiet.code == 0);
  CHECK(quiet.out.empty());
  CHECK(runFusectl("optimize " + shellQuote(model) + " -o " + shellQuote(tmp / "q.onnx") +
                " --quiet --table").code == 2);
  CHECK(runFusectl("optimize " + shellQuote(model) + " -o " + shellQuote(tmp / "q.onnx") + " --atol 1").code ==
        2);  // tolerances without --verify
}

TEST_CASE("diff: a model against itself and against its optimized version", "[cli][optimize]") {
  Scratch tmp;
  spit(tmp / "m.onnxtxt", kFixture);
  const std::string model = shellQuote(tmp / "m.onnxtxt");
  Run self = runFusectl("diff " + model + " " + model);
  CHECK(self.code == 0);
  CHECK(self.out.find("no differences") != std::string::npos);
  Run self_json = runFusectl("diff --json " + model + " " + model);
  REQUIRE(self_json.code == 0);
  CHECK(nlohmann::json::parse(self_json.out)["identical"] == true);

  REQUIRE(runFusectl("optimize " + model + " -o " + shellQuote(tmp / "o.onnx") + " " + kCleanup).code ==
          0);
  Run d = runFusectl("diff " + model + " " + shellQuote(tmp / "o.onnx"));
  CHECK(d.code == 0);
  // Nodes pair up by the values they write: removing Y = Identity(R) hands the name Y to the
  // Relu, so the Relu now matches the Identity that wrote Y, and the old Relu(R) is gone.
  CHECK(d.out.find("nodes: 2 removed, 0 added, 3 changed") != std::string::npos);
  CHECK(d.out.find("  - Identity Identity(I1) -> [I1]") != std::string::npos);
  CHECK(d.out.find("  - Relu Relu(R) -> [R]") != std::string::npos);
  CHECK(d.out.find("  ~ Identity(Y) -> Relu(Y): op Identity -> Relu; inputs [R] -> [N]") !=
        std::string::npos);
  CHECK(d.out.find("  ~ Conv(C): inputs [I1,W,B] -> [X,W,B]") != std::string::npos);
  CHECK(d.out.find("  ~ Conv(C2): inputs [X,W,B2] -> [X,W,B]") != std::string::npos);
  CHECK(d.out.find("  - B2 float[2] (8 B)") != std::string::npos);
  Run dj = runFusectl("diff --json " + model + " " + shellQuote(tmp / "o.onnx"));
  REQUIRE(dj.code == 0);
  nlohmann::json j = nlohmann::json::parse(dj.out);
  CHECK(j["schema"] == "fusectl.diff/1");
  CHECK(j["identical"] == false);
  REQUIRE(j["op_histogram"].size() == 1);
  CHECK(j["op_histogram"][0] == nlohmann::json{{"op", "Identity"}, {"a", 3}, {"b", 1},
                                               {"delta", -2}});
  CHECK(j["nodes"]["removed"].size() == 2);
  CHECK(j["nodes"]["added"].empty());
  CHECK(j["initializers"]["removed"][0]["name"] == "B2");
  CHECK(dj.out == runFusectl("diff --json " + model + " " + shellQuote(tmp / "o.onnx")).out);

  Run missing = runFusectl("diff " + model + " " + shellQuote(tmp / "nosuch.onnx"));
  CHECK(missing.code == 4);
  CHECK(lines(missing.err) == 1);
}

TEST_CASE("diffGraphs: fusion sites from stamps, changed attributes and initializers",
          "[optimize]") {
  using namespace fusectl;
  const std::string a_text = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X, float[2, 2, 1, 1] W) => (float[1, 2, 4, 4] Y)
<float[2] s = {1, 2}, float[2] t = {1, 2}>
{
  C = Conv <kernel_shape = [1, 1]> (X, W)
  N = Mul (C, s)
  Y = LeakyRelu <alpha = 0.1> (N)
}
)";
  const std::string b_text = R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[1, 2, 4, 4] X, float[2, 2, 1, 1] W) => (float[1, 2, 4, 4] Y)
<float[2] s = {1, 3}, float[4] t = {1, 2, 3, 4}>
{
  Y = fusectl.FusedConv <kernel_shape = [1, 1], activation = "LeakyRelu"> (X, W)
}
)";
  LoadOptions load;
  load.infer_shapes = false;
  auto a = parseModelText(a_text, "a", load);
  auto b = parseModelText(b_text, "b", load);
  b->graph->firstNode()->doc_string =
      "exported by hand\nfusectl fuse-epilogue: fused Conv(C), Mul(N), LeakyRelu(Y)";

  passes::GraphDiff d = passes::diffGraphs(*a->graph, *b->graph);
  CHECK_FALSE(d.identical());
  REQUIRE(d.fusions.size() == 1);
  CHECK(d.fusions[0].pass == "fuse-epilogue");
  CHECK(d.fusions[0].op == "fusectl::FusedConv");
  CHECK(d.fusions[0].replaced_nodes == std::vector<std::string>{"Conv(C)", "Mul(N)",
                                                                "LeakyRelu(Y)"});
  // FusedConv writes Y, as LeakyRelu did: a changed node, not an added one.
  REQUIRE(d.nodes_changed.size() == 1);
  CHECK(d.nodes_changed[0].kinds == std::vector<std::string>{"op", "attributes", "inputs"});
  CHECK(d.nodes_changed[0].detail ==
        "op LeakyRelu -> fusectl::FusedConv; attributes: -alpha, +kernel_shape=[1,1], "
        "+activation=\"LeakyRelu\"; inputs [N] -> [X,W]");
  CHECK(d.nodes_removed.size() == 2);
  CHECK(d.nodes_added.empty());
  REQUIRE(d.initializers_changed.size() == 2);
  CHECK(d.initializers_changed[0].kinds == std::vector<std::string>{"data"});
  CHECK(d.initializers_changed[1].kinds == std::vector<std::string>{"shape"});
  // A stamp the node already carried in A is not a new site.
  passes::GraphDiff same = passes::diffGraphs(*b->graph, *b->graph);
  CHECK(same.identical());
  CHECK(same.fusions.empty());
  CHECK(same.toText("b", "b") == "--- b (1 nodes, 2 initializers)\n"
                                 "+++ b (1 nodes, 2 initializers)\nno differences\n");

  std::string pass;
  std::vector<std::string> replaced;
  CHECK(passes::parseFusionStamp("fusectl fold-conv-bn: fused BatchNormalization(N)", pass,
                                 replaced));
  CHECK(pass == "fold-conv-bn");
  CHECK(replaced == std::vector<std::string>{"BatchNormalization(N)"});
  CHECK_FALSE(passes::parseFusionStamp("fused by hand: Conv", pass, replaced));
  CHECK_FALSE(passes::parseFusionStamp("fusectl two words: fused X", pass, replaced));
}

// ---- --bisect (bisect.h) ----

TEST_CASE("bisectRewrites finds the first rewrite a check rejects", "[optimize][bisect]") {
  using namespace fusectl::passes;
  const auto original = fusectl::loadModel(std::string(FUSECTL_SOURCE_DIR) +
                                           "/testdata/models/resnet_mini.onnx");
  auto fusedConvs = [](const fusectl::Model& m) {
    size_t n = 0;
    for (fusectl::Node* node : m.graph->nodes()) n += node->opType().rfind("FusedConv", 0) == 0;
    return n;
  };
  OptimizeRequest request;
  request.level = 3;
  // A check with a known answer: the model is "bad" from its third FusedConv on.
  BisectCheck check = [&](const fusectl::Model& m) {
    const size_t n = fusedConvs(m);
    return BisectProbe{n < 3, std::to_string(n) + " FusedConv"};
  };
  BisectResult r = bisectRewrites(*original, request, check);
  REQUIRE(r.total_rewrites > 10);
  REQUIRE(r.first_bad > 0);
  CHECK(r.first_bad <= r.total_rewrites);
  CHECK(fusedConvs(*r.last_good) == 2);
  CHECK(r.pass == "fuse-epilogue");
  REQUIRE(r.sites.size() == 1);
  CHECK(r.sites[0].new_op.find("FusedConv") != std::string::npos);
  CHECK(r.bad_probe.detail == "3 FusedConv");
  // Halving: the full run, the run without rewrites, then about log2(N) probes.
  CHECK(r.steps.size() <= 2 + static_cast<size_t>(std::ceil(std::log2(r.total_rewrites))) + 1);
  // The numbering is --max-rewrites': an independent run with that budget agrees.
  for (int64_t budget : {r.first_bad - 1, r.first_bad}) {
    auto m = original->clone();
    request.pass_manager.max_rewrites = budget;
    optimize(*m, request);
    CHECK(fusedConvs(*m) == (budget == r.first_bad ? 3u : 2u));
  }

  // A check every model passes, and one no model passes.
  request.pass_manager.max_rewrites = -1;
  BisectResult all_good = bisectRewrites(*original, request, [](const fusectl::Model&) {
    return BisectProbe{true, ""};
  });
  CHECK(all_good.first_bad == 0);
  CHECK(all_good.steps.size() == 1);
  CHECK(fusedConvs(*all_good.last_good) > 3);
  BisectResult none_good = bisectRewrites(*original, request, [](const fusectl::Model&) {
    return BisectProbe{false, "never"};
  });
  CHECK(none_good.first_bad == -1);
  CHECK(none_good.steps.size() == 2);
}

TEST_CASE("optimize --bisect names the first rewrite that changes the numbers", "[cli][optimize][bisect]") {
  Scratch dir;
  const std::string model = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/resnet_mini.onnx";
  // With zero tolerance the first rewrite that rounds differently is "bad": folding a
  // BatchNormalization into a Conv does (cleanup rewrites before it are exact).
  Run r = runFusectl("optimize " + shellQuote(model) + " --shape input=1x3x32x32 -O3 --bisect --atol 0 "
                     "--rtol 0 --min-cosine 0 -o " + dir / "good.onnx");
  INFO(r.out << r.err);
  REQUIRE(r.code == 1);
  CHECK(r.out.find("first bad rewrite: ") != std::string::npos);
  CHECK(r.out.find("check: output ") != std::string::npos);
  const size_t at = r.out.find("first bad rewrite: ") + 19;
  const long bad = std::stol(r.out.substr(at));
  REQUIRE(bad > 0);
  CHECK(r.out.find(fmt::format("wrote {} with the first {} rewrite(s)", dir / "good.onnx",
                               bad - 1)) != std::string::npos);
  // Independently: --max-rewrites bad-1 verifies exactly, bad does not.
  const std::string exact = " --shape input=1x3x32x32 -O3 --verify --atol 0 --rtol 0 "
                            "--min-cosine 0 -q --max-rewrites ";
  CHECK(runFusectl("optimize " + shellQuote(model) + " -o " + dir / "a.onnx" + exact + std::to_string(bad - 1))
            .code == 0);
  CHECK(runFusectl("optimize " + shellQuote(model) + " -o " + dir / "b.onnx" + exact + std::to_string(bad))
            .code == 1);
  // The written prefix model is what --max-rewrites bad-1 writes.
  CHECK(slurp(dir / "good.onnx") == slurp(dir / "a.onnx"));

  // Default tolerances: nothing to find; exit 0.
  Run ok = runFusectl("optimize " + shellQuote(model) + " --shape input=1x3x32x32 -O3 --bisect");
  INFO(ok.out << ok.err);
  CHECK(ok.code == 0);
  CHECK(ok.out.find("every rewrite keeps the outputs within tolerance") != std::string::npos);

  // Flags it does not combine with, and an input file that does not exist.
  CHECK(runFusectl("optimize " + shellQuote(model) + " -O3 --bisect --report " + dir / "r.json").code == 2);
  CHECK(runFusectl("optimize " + shellQuote(model) + " -O3 -o " + dir / "c.onnx" + " --input x.npy").code == 2);
  Run missing = runFusectl("optimize " + shellQuote(model) + " -O3 --bisect --input input=" + dir / "none.npy");
  CHECK(missing.code == 4);
  CHECK(missing.err.find("none.npy") != std::string::npos);
}
