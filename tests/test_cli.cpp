// End-to-end tests of the `fusectl` binary: exit codes, stdout/stderr, files written.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shell_util.h"
#include "test_files.h"
#include "dump_schema_check.h"

namespace fs = std::filesystem;

namespace {

using fusectl::test::shellQuote;

const std::string kSource = FUSECTL_SOURCE_DIR;

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch folder per test case, removed afterwards.
using TempDir = fusectl::testing::TempDir;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `fusectl ARGS` (ARGS already shell-quoted where needed), with a timeout against hangs.
Result runCli(const std::string& args) {
  static TempDir io;
  std::string out = io / "stdout", err = io / "stderr";
  std::string cmd = "timeout 120 " + shellQuote(FUSECTL_BINARY) + " " + args + " >" + out +
                    " 2>" + err + " </dev/null";
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = readFile(out);
  r.err = readFile(err);
  return r;
}

std::string q(const std::string& s) { return shellQuote(s); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

size_t lineCount(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

std::vector<std::string> modelsIn(const std::string& folder, const std::string& ext) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(kSource + "/" + folder)) {
    if (e.path().extension() == ext) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> allGoodModels() {
  std::vector<std::string> all = modelsIn("testdata/fixtures", ".onnxtxt");
  for (const std::string& m : modelsIn("testdata/models", ".onnx")) all.push_back(m);
  return all;
}

bool haveDot() { return std::system("command -v dot >/dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("fusectl --help and --version exit 0", "[cli]") {
  Result help = runCli("--help");
  CHECK(help.code == 0);
  CHECK(contains(help.out, "dump"));
  CHECK(contains(help.out, "convert"));
  CHECK(help.err.empty());

  Result version = runCli("--version");
  CHECK(version.code == 0);
  CHECK(version.out.rfind("fusectl 0.1.0", 0) == 0);
  CHECK(contains(version.out, "onnx 1."));
  CHECK(contains(version.out, "protobuf "));

  CHECK(runCli("dump --help").code == 0);
  CHECK(runCli("convert --help").code == 0);
}

TEST_CASE("usage errors exit 2 with one line on stderr", "[cli]") {
  std::string model = q(kSource + "/testdata/fixtures/matmul_add.onnxtxt");
  for (const std::string& args :
       {std::string("frobnicate"), std::string(""), std::string("dump"),
        "dump " + model + " --format yaml", "dump " + model + " --no-such-flag",
        "dump " + model + " --shape X", "dump " + model + " --shape X=2x-3", "dump " + model + " --shape X=2xx3",
        "dump " + model + " --shape X=2x4 --shape X=2x4",
        "dump " + model + " --shape =2x4", "dump " + model + " --format dot --summary",
        std::string("convert onlyone.onnx")}) {
    INFO(args);
    Result r = runCli(args);
    CHECK(r.code == 2);
    CHECK(r.err.rfind("fusectl: error: ", 0) == 0);
    CHECK(lineCount(r.err) == 1);
    CHECK(r.out.empty());
  }
  Result bad_shape = runCli("dump " + model + " --shape X=2x-3");
  CHECK(contains(bad_shape.err, "--shape 'X=2x-3'"));
  Result unknown = runCli("frobnicate");
  CHECK(contains(unknown.err, "unknown subcommand 'frobnicate'"));
}

TEST_CASE("dump text on every fixture and model", "[cli]") {
  for (const std::string& m : allGoodModels()) {
    INFO(m);
    Result r = runCli("dump " + q(m));
    CHECK(r.code == 0);
    CHECK(r.err.empty());
    CHECK(contains(r.out, "ir_version: "));
    CHECK(contains(r.out, "opsets: "));
    CHECK(contains(r.out, "op histogram:\n"));
    CHECK(contains(r.out, "nodes in topological order:\n"));
    CHECK(contains(r.out, "[0] "));
    CHECK(r.out == runCli("dump " + q(m)).out);  // deterministic

    Result s = runCli("dump --summary " + q(m));
    CHECK(s.code == 0);
    CHECK(contains(s.out, "parameters: "));
    CHECK_FALSE(contains(s.out, "nodes in topological order"));
  }
}

TEST_CASE("dump text content of resnet_mini", "[cli]") {
  Result r = runCli("dump " + q(kSource + "/testdata/models/resnet_mini.onnx"));
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "input  float[batch,3,32,32]"));
  CHECK(contains(r.out, "output  float[batch,10]"));
  CHECK(contains(r.out, "nodes: 30\n"));
  CHECK(contains(r.out, "  8  BatchNormalization\n"));
  CHECK(contains(r.out, "  8  Conv\n"));
  CHECK(contains(r.out, "[29] Gemm"));
}

TEST_CASE("dump json on every fixture and model follows the schema", "[cli]") {
  for (const std::string& m : allGoodModels()) {
    INFO(m);
    for (const char* extra : {"", " --summary"}) {
      Result r = runCli("dump --format json " + q(m) + extra);
      REQUIRE(r.code == 0);
      nlohmann::json j = nlohmann::json::parse(r.out);
      CHECK(fusectl::testing::checkDumpJson(j) == "");
      CHECK(j["schema"] == "fusectl.dump/1");
      CHECK(j["schema_version"] == 1);
      CHECK(j.contains("nodes") == (std::string(extra).empty()));
      if (j.contains("nodes")) CHECK(j["nodes"].size() == j["stats"]["node_count"]);
    }
  }
  Result r = runCli("dump --format json " + q(kSource + "/testdata/models/llama_layer.onnx"));
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["stats"]["node_count"] == 143);
  CHECK(j["graph"]["inputs"][0]["shape"] == nlohmann::json::parse(R"(["batch","seq",64])"));
}

TEST_CASE("dump dot on every fixture and model", "[cli]") {
  bool dot = haveDot();
  if (!dot) WARN("dot (Graphviz) not on PATH: checking DOT text only");
  TempDir tmp;
  for (const std::string& m : allGoodModels()) {
    INFO(m);
    std::string out = tmp / "graph.dot";
    Result r = runCli("dump --format dot -o " + q(out) + " " + q(m));
    REQUIRE(r.code == 0);
    CHECK(r.out.empty());
    std::string text = readFile(out);
    CHECK(text.rfind("digraph ", 0) == 0);
    CHECK(contains(text, "shape=ellipse"));
    if (dot) {
      CHECK(std::system(("dot -Tsvg " + q(out) + " -o " + q(tmp / "graph.svg")).c_str()) == 0);
      CHECK(fs::file_size(tmp / "graph.svg") > 0);
    }
  }
}

TEST_CASE("dump --shape fixes input shapes", "[cli]") {
  std::string model = q(kSource + "/testdata/fixtures/symbolic_dims.onnxtxt");
  Result r = runCli("dump " + model + " --shape X=2x5x64");
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "X  float[2,5,64]"));
  CHECK(contains(r.out, "W  float[64,16]"));

  Result two = runCli("dump " + model + " --shape X=2x5x64 --shape W=64x16 --format json");
  REQUIRE(two.code == 0);
  nlohmann::json j = nlohmann::json::parse(two.out);
  CHECK(j["graph"]["inputs"][0]["shape"] == nlohmann::json::parse("[2,5,64]"));

  Result unknown = runCli("dump " + model + " --shape nosuchinput=1x2");
  CHECK(unknown.code != 0);
  CHECK(contains(unknown.err, "nosuchinput"));
}

TEST_CASE("dump -o writes the file and refuses to overwrite the model", "[cli]") {
  TempDir tmp;
  std::string model = kSource + "/testdata/fixtures/matmul_add.onnxtxt";
  Result r = runCli("dump --format json -o " + q(tmp / "d.json") + " " + q(model));
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  CHECK(readFile(tmp / "d.json") == runCli("dump --format json " + q(model)).out);

  fs::copy_file(model, tmp / "m.onnxtxt");
  std::string before = readFile(tmp / "m.onnxtxt");
  Result same = runCli("dump -o " + q(tmp / "m.onnxtxt") + " " + q(tmp / "m.onnxtxt"));
  CHECK(same.code == 2);
  CHECK(readFile(tmp / "m.onnxtxt") == before);

  Result nodir = runCli("dump -o " + q(tmp / "no/such/dir/x.txt") + " " + q(model));
  CHECK(nodir.code == 4);
  CHECK(contains(nodir.err, "no/such/dir/x.txt"));
  CHECK(lineCount(nodir.err) == 1);
}

TEST_CASE("convert round trips keep the dump unchanged", "[cli]") {
  TempDir tmp;
  for (const std::string& m : allGoodModels()) {
    INFO(m);
    std::string text = tmp / "a.onnxtxt", binary = tmp / "b.onnx", text2 = tmp / "c.onnxtxt";
    Result to_text = runCli("convert " + q(m) + " " + q(text));
    REQUIRE(to_text.code == 0);
    CHECK(to_text.out.empty());
    CHECK(to_text.err.empty());
    Result to_binary = runCli("convert " + q(text) + " " + q(binary));
    REQUIRE(to_binary.code == 0);
    CHECK(runCli("convert " + q(binary) + " " + q(text2)).code == 0);

    std::string original = runCli("dump --format json " + q(m)).out;
    CHECK(runCli("dump --format json " + q(text)).out == original);
    CHECK(runCli("dump --format json " + q(binary)).out == original);
    CHECK(readFile(text2) == readFile(text));
  }
}

TEST_CASE("convert moves weights into and out of external data", "[cli]") {
  TempDir tmp;
  std::string model = kSource + "/testdata/models/resnet_mini.onnx";
  std::string original = runCli("dump --format json " + q(model)).out;

  fs::create_directories(tmp.path / "ext");
  Result out = runCli("convert " + q(model) + " " + q(tmp / "ext/m.onnx") +
                       " --external-data m.data --size-threshold 256");
  REQUIRE(out.code == 0);
  REQUIRE(fs::exists(tmp / "ext/m.data"));
  CHECK(fs::file_size(tmp / "ext/m.onnx") < fs::file_size(model) / 2);
  CHECK(runCli("dump --format json " + q(tmp / "ext/m.onnx")).out == original);

  // Back to a self-contained file: the weights are inlined and the data file is not needed.
  Result in = runCli("convert " + q(tmp / "ext/m.onnx") + " " + q(tmp / "inline.onnx"));
  REQUIRE(in.code == 0);
  fs::rename(tmp / "ext/m.data", tmp / "ext/moved.data");
  CHECK(runCli("dump --format json " + q(tmp / "inline.onnx")).out == original);
  CHECK(runCli("dump " + q(tmp / "ext/m.onnx")).code == 3);  // its data file is gone
  fs::rename(tmp / "ext/moved.data", tmp / "ext/m.data");

  // Text output keeps no external data.
  CHECK(runCli("convert " + q(tmp / "ext/m.onnx") + " " + q(tmp / "m.onnxtxt")).code == 0);
  CHECK(runCli("dump --format json " + q(tmp / "m.onnxtxt")).out == original);
}

TEST_CASE("convert refuses bad combinations with exit 2 and writes nothing", "[cli]") {
  TempDir tmp;
  std::string model = kSource + "/testdata/models/resnet_mini.onnx";
  fs::copy_file(model, tmp / "m.onnx");
  std::string before = readFile(tmp / "m.onnx");
  for (const std::string& args :
       {"convert " + q(tmp / "m.onnx") + " " + q(tmp / "m.onnx"),
        "convert " + q(tmp / "m.onnx") + " " + q(tmp.path.string() + "/./m.onnx"),
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") + " --external-data m.onnx",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") + " --external-data x.onnx",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") + " --external-data ../w.bin",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") + " --external-data /tmp/w.bin",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnxtxt") + " --external-data w.bin",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") + " --size-threshold 10",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") +
            " --external-data w.bin --size-threshold -5",
        "convert " + q(tmp / "m.onnx") + " " + q(tmp / "x.onnx") +
            " --external-data w.bin --size-threshold lots"}) {
    INFO(args);
    Result r = runCli(args);
    CHECK(r.code == 2);
    CHECK(r.err.rfind("fusectl: error: ", 0) == 0);
    CHECK(lineCount(r.err) == 1);
  }
  CHECK(readFile(tmp / "m.onnx") == before);
  CHECK_FALSE(fs::exists(tmp / "x.onnx"));
  CHECK_FALSE(fs::exists(tmp / "x.onnxtxt"));

  fs::create_symlink(tmp / "m.onnx", tmp / "link.onnx");
  CHECK(runCli("convert " + q(tmp / "link.onnx") + " " + q(tmp / "m.onnx")).code == 2);
  CHECK(readFile(tmp / "m.onnx") == before);
}

namespace {

struct BadInput {
  const char* path;  // relative to the source tree
  int code;
  const char* reason;  // a phrase the one-line message must contain
};

// testdata/bad is written by testdata/gen/make_bad_inputs.py.
const BadInput kBadInputs[] = {
    {"testdata/no_such_file.onnx", 4, "No such file"},
    {"testdata/bad", 4, "directory"},
    {"testdata/bad/empty.onnx", 3, "empty file"},
    {"testdata/bad/random_bytes.onnx", 3, "not an ONNX model"},
    {"testdata/bad/text.onnx", 3, "not a binary ONNX model"},
    {"testdata/bad/no_graph.onnx", 3, "no graph"},
    {"testdata/bad/truncated.onnx", 3, "truncated"},
    {"testdata/bad/syntax_error.onnxtxt", 3, "syntax error"},
    {"testdata/bad/cycle.onnx", 3, "cycle"},
    {"testdata/bad/undefined_input.onnx", 3, "'missing_value'"},
    {"testdata/bad/nested_undefined.onnx", 3, "'ghost'"},
    {"testdata/bad/two_writers.onnx", 3, "also written by"},
    {"testdata/bad/shadow_initializer.onnx", 3, "shadows an initializer"},
    {"testdata/bad/shadow_input.onnx", 3, "shadows a graph input"},
    {"testdata/bad/dangling_output.onnx", 3, "'nothing_makes_me' is not produced"},
    {"testdata/bad/ir_version_0.onnx", 3, "IR version 0"},
    {"testdata/bad/ir_version_14.onnx", 3, "IR version 14"},
    {"testdata/bad/attr_type_mismatch.onnx", 3, "attribute 'alpha'"},
    {"testdata/bad/attr_undefined_type.onnx", 3, "attribute 'alpha'"},
    {"testdata/bad/raw_data_short.onnx", 3, "raw_data has 8 bytes"},
    {"testdata/bad/raw_data_long.onnx", 3, "raw_data has 12 bytes"},
    {"testdata/bad/typed_data_short.onnx", 3, "float_data"},
    {"testdata/bad/unknown_dtype.onnx", 3, "data type 99"},
    {"testdata/bad/negative_dim.onnx", 3, "negative dimension"},
    {"testdata/bad/dims_overflow.onnx", 3, "overflow"},
    {"testdata/bad/external_missing/model.onnx", 3, "not found"},
    {"testdata/bad/external_absolute/model.onnx", 3, "absolute path"},
    {"testdata/bad/external_escape/model.onnx", 3, "outside the model's folder"},
    {"testdata/bad/external_beyond_end/model.onnx", 3, "beyond the end"},
};

void checkOneLineError(const Result& r, const BadInput& bad) {
  CHECK(r.code == bad.code);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("fusectl: error: ", 0) == 0);
  CHECK(lineCount(r.err) == 1);
  CHECK(contains(r.err, fs::path(bad.path).filename().string()));
  CHECK(contains(r.err, bad.reason));
}

}  // namespace

TEST_CASE("bad input: one line naming file and reason, right exit code, no output", "[cli]") {
  TempDir tmp;
  for (const BadInput& bad : kBadInputs) {
    INFO(bad.path);
    std::string model = q(kSource + "/" + bad.path);
    checkOneLineError(runCli("dump " + model), bad);
    checkOneLineError(runCli("dump --format json -o " + q(tmp / "out.json") + " " + model), bad);
    checkOneLineError(runCli("convert " + model + " " + q(tmp / "out.onnxtxt")), bad);
    checkOneLineError(runCli("convert " + model + " " + q(tmp / "out.onnx") +
                             " --external-data w.bin --size-threshold 0"),
                      bad);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmp.path)) left.push_back(e.path().string());
    CHECK(left.empty());
  }
}

TEST_CASE("unusual but valid inputs load: unknown op, IR 2 attributes, unsorted nodes, external data",
          "[cli]") {
  TempDir tmp;
  for (const char* path : {"testdata/bad/unknown_op.onnx", "testdata/bad/ir2_untyped_attribute.onnx",
                           "testdata/bad/unsorted_nodes.onnx",
                           "testdata/bad/external_ok/model.onnx"}) {
    INFO(path);
    std::string model = q(kSource + "/" + path);
    Result dump = runCli("dump --format json " + model);
    CHECK(dump.code == 0);
    CHECK(dump.err.empty());
    CHECK(runCli("convert " + model + " " + q(tmp / "out.onnx")).code == 0);
    CHECK(runCli("dump --format json " + q(tmp / "out.onnx")).out == dump.out);
  }
}

namespace {

// A .npy of float32 [2, 3] holding 0, 0.5, 1, 2, 3.5, 7: a version 1.0 header padded to a
// multiple of 64 bytes.
// A .npy file's bytes up to its data: magic, version 1.0, the header padded to 64 bytes.
std::string npyHeader(const std::string& descr, const std::string& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  npy += static_cast<char>(dict.size() & 0xff);
  npy += static_cast<char>(dict.size() >> 8);
  return npy + dict;
}

std::string nonNegativeNpy() {
  std::string npy = npyHeader("<f4", "(2, 3)");
  const float values[6] = {0.f, 0.5f, 1.f, 2.f, 3.5f, 7.f};
  npy.append(reinterpret_cast<const char*>(values), sizeof(values));
  return npy;
}

// A .npy of an int64 vector.
std::string int64Npy(const std::vector<int64_t>& values) {
  std::string npy = npyHeader("<i8", "(" + std::to_string(values.size()) + ",)");
  npy.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  return npy;
}

}  // namespace

TEST_CASE("a run that fails on seeded inputs says which inputs were seeded", "[cli][run]") {
  // A Reshape whose target is an input: seeded int64 values are no shape of six elements.
  TempDir tmp;
  std::ofstream(tmp / "reshape.onnxtxt")
      << "<ir_version: 8, opset_import: [\"\" : 13]>\n"
      << "g (float[6] X, int64[2] S) => (float[?, ?] Y) {\n  Y = Reshape (X, S)\n}\n";
  std::ofstream(tmp / "s.npy", std::ios::binary) << int64Npy({2, 3});
  const std::string model = q(tmp / "reshape.onnxtxt");
  const std::string hint = "; on seeded inputs (S): give ones the model accepts with --input";
  for (const std::string& command :
       {"run " + model, "profile " + model + " --runs 1 --warmup 0",
        "optimize " + model + " -o " + q(tmp / "out.onnx") + " --verify"}) {
    const Result r = runCli(command);
    INFO(command << "\n" << r.out << r.err);
    CHECK(r.code == 3);
    CHECK(lineCount(r.err) == 1);
    CHECK(contains(r.err, "reshape.onnxtxt: "));
    CHECK(contains(r.err, hint));
  }
  CHECK(!fs::exists(tmp / "out.onnx"));
  // Given a shape it accepts, it runs (X, a float, still seeded).
  const Result given = runCli("run " + model + " --input S=" + q(tmp / "s.npy"));
  INFO(given.out << given.err);
  CHECK(given.code == 0);
  CHECK(contains(given.out, "output Y: float[2,3]"));

  // A float input whose unknown dim was set to 1 is named too, with --shape as the remedy; the
  // numeric gate runs the original to measure its Relu -> Neg site and says the same.
  std::ofstream(tmp / "fixed.onnxtxt")
      << "<ir_version: 8, opset_import: [\"\" : 13]>\n"
      << "g (float[N] X) => (float[2, 3] Y) <int64[2] S = {2, 3}> {\n"
      << "  R = Reshape (X, S)\n  A = Relu (R)\n  Y = Neg (A)\n}\n";
  const std::string fixed = q(tmp / "fixed.onnxtxt");
  for (const std::string& command :
       {"run " + fixed, "optimize " + fixed + " -O3 -o " + q(tmp / "out.onnx") + " --gate default"}) {
    const Result one = runCli(command);
    INFO(command << "\n" << one.out << one.err);
    CHECK(one.code == 3);
    CHECK(lineCount(one.err) == 1);
    CHECK(contains(one.err, "; on seeded inputs (X with unknown dims at 1): give ones the model "
                            "accepts with --input NAME=FILE or dims with --shape NAME=DIMS"));
  }
  CHECK(!fs::exists(tmp / "out.onnx"));
  const Result six = runCli("run " + fixed + " --shape X=6");
  INFO(six.out << six.err);
  CHECK(six.code == 0);
}

TEST_CASE("verify --input: both models read the given file; inputs not given are seeded",
          "[cli][verify]") {
  TempDir tmp;
  // Relu and Abs agree exactly on non-negative inputs only: seeded inputs (with negatives)
  // tell them apart, the file of non-negative values does not.
  const std::string header = "<ir_version: 8, opset_import: [\"\" : 13]>\n";
  std::ofstream(tmp / "relu.onnxtxt")
      << header << "g (float[2, 3] X, float[2, 3] Z) => (float[2, 3] Y) {\n  R = Relu (X)\n"
      << "  Y = Add (R, Z)\n}\n";
  std::ofstream(tmp / "abs.onnxtxt")
      << header << "g (float[2, 3] X, float[2, 3] Z) => (float[2, 3] Y) {\n  R = Abs (X)\n"
      << "  Y = Add (R, Z)\n}\n";
  const std::string npy = nonNegativeNpy();
  std::ofstream(tmp / "x.npy", std::ios::binary) << npy;
  const std::string models = q(tmp / "relu.onnxtxt") + " " + q(tmp / "abs.onnxtxt");

  const Result seeded = runCli("verify " + models);
  INFO(seeded.out << seeded.err);
  CHECK(seeded.code == 1);
  CHECK(contains(seeded.out, "FAIL: 0 of 1 outputs within tolerance"));

  const Result given = runCli("verify " + models + " --input X=" + q(tmp / "x.npy") +
                              " --runs 2 --atol 0 --rtol 0");
  INFO(given.out << given.err);
  CHECK(given.code == 0);
  CHECK(contains(given.out, "input X: " + (tmp / "x.npy")));
  CHECK(contains(given.out, "input Z: random, seed 0"));
  CHECK(contains(given.out, "PASS: 1 of 1 outputs within tolerance"));

  const Result json = runCli("verify " + models + " --input " + q(tmp / "x.npy") + " --json");
  INFO(json.out << json.err);
  CHECK(json.code == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j["inputs"].size() == 2);
  CHECK(j["inputs"][0]["name"] == "X");
  CHECK(j["inputs"][0]["source"] == (tmp / "x.npy"));

  // A file whose dims are not the input's is an error of one line naming the file.
  std::string flat = npy;
  flat.replace(flat.find("(2, 3)"), 6, "(6,)  ");
  std::ofstream(tmp / "flat.npy", std::ios::binary) << flat;
  const Result bad = runCli("verify " + models + " --input X=" + q(tmp / "flat.npy"));
  INFO(bad.out << bad.err);
  CHECK(bad.code != 0);
  CHECK(bad.code != 1);
  CHECK(lineCount(bad.err) == 1);
  CHECK(contains(bad.err, "flat.npy"));

  // A misspelt NAME= is named as such, with the names there are, not taken for a file name.
  const Result misspelt = runCli("verify " + models + " --input x=" + q(tmp / "x.npy"));
  INFO(misspelt.out << misspelt.err);
  CHECK(misspelt.code != 0);
  CHECK(misspelt.code != 1);
  CHECK(lineCount(misspelt.err) == 1);
  CHECK(contains(misspelt.err, "no input named 'x' (its inputs: 'X', 'Z')"));
}

TEST_CASE("verify --rtol-scale: rtol of each output's largest magnitude by default, or of each "
          "element", "[cli][verify]") {
  TempDir tmp;
  const std::string header = "<ir_version: 8, opset_import: [\"\" : 13]>\n";
  std::ofstream(tmp / "relu.onnxtxt")
      << header << "g (float[2, 3] X) => (float[2, 3] Y) {\n  Y = Relu (X)\n}\n";
  // The same plus 5e-5 everywhere: a drift of 7e-6 of the largest output (7), but far beyond
  // atol + rtol * |y| where y is 0.
  std::ofstream(tmp / "shifted.onnxtxt")
      << header << "g (float[2, 3] X) => (float[2, 3] Y) {\n  R = Relu (X)\n"
      << "  C = Constant <value = float {0.00005}> ()\n  Y = Add (R, C)\n}\n";
  std::ofstream(tmp / "x.npy", std::ios::binary) << nonNegativeNpy();
  const std::string command = "verify " + q(tmp / "relu.onnxtxt") + " " +
                              q(tmp / "shifted.onnxtxt") + " --input " + q(tmp / "x.npy");

  const Result tensor = runCli(command + " --json");
  INFO(tensor.out << tensor.err);
  CHECK(tensor.code == 0);
  const nlohmann::json j = nlohmann::json::parse(tensor.out);
  CHECK(j["rtol_scale"] == "tensor");
  CHECK(j["passed"] == true);

  const Result element = runCli(command + " --rtol-scale element");
  INFO(element.out << element.err);
  CHECK(element.code == 1);
  CHECK(contains(element.out, "atol 1e-05, rtol 0.0001, min cosine"));
  CHECK(contains(element.out, "within rtol 7.15"));  // (7 + 5e-5 in float - 7) / 7, offered

  const Result bad = runCli(command + " --rtol-scale row");
  CHECK(bad.code == 2);
  CHECK(contains(bad.err, "row not in {element,tensor}"));
}
