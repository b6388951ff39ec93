// Resource limits at load: a tensor that declares more bytes than --max-tensor-bytes, subgraphs
// nested too deeply, dims whose product overflows, external data longer than its file. Each is
// one line naming the file and the tensor, input or node, exit 3, through the library and the
// CLI, before anything is allocated (the inputs are a few hundred bytes that declare terabytes;
// testdata/gen/make_limit_inputs.py writes them).
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "shell_util.h"
#include "test_files.h"

namespace {

using fusectl::test::shellQuote;

std::string badPath(const std::string& name) {
  return std::string(FUSECTL_SOURCE_DIR) + "/testdata/bad/" + name;
}

struct CliResult {
  int code = -1;
  std::string err;
};

CliResult runFusectl(const std::string& args) {
  fusectl::testing::TempDir io("limits-cli");
  const std::string err = io / "stderr";
  const std::string cmd = "timeout 120 " + shellQuote(FUSECTL_BINARY) + " " + args +
                          " >/dev/null 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = fusectl::testing::slurp(err);
  return r;
}

std::string loadError(const std::string& path, const fusectl::LoadOptions& options = {}) {
  try {
    fusectl::loadModel(path, options);
  } catch (const fusectl::Error& e) {
    CHECK(e.kind() == fusectl::ErrorKind::InvalidInput);
    return e.what();
  }
  return "(loaded)";
}

struct LimitCase {
  const char* file;
  const char* reason;  // what the one line must say, after "<path>: "
};

const LimitCase kLimitCases[] = {
    {"limit_huge_initializer.onnx",
     "initializer 'W': float dims [1048576,1048576,32] take 140737488355328 bytes, more than "
     "the limit of 17179869184 (--max-tensor-bytes)"},
    {"limit_huge_constant.onnx",
     "attribute 'value' of node 'huge_constant' (Constant): float dims [1048576,1048576,32] "
     "take 140737488355328 bytes, more than the limit of 17179869184 (--max-tensor-bytes)"},
    {"limit_huge_input.onnx",
     "graph input 'X': float dims [100000,100000,100000] take 4000000000000000 bytes, more than "
     "the limit of 17179869184 (--max-tensor-bytes)"},
    {"limit_seeded_input_overflow.onnx",
     "graph input 'X': dims [4611686018427387904,1] are too large"},
    {"limit_input_dims_overflow.onnx",
     "graph input 'X': dims [1099511627776,1099511627776] overflow int64"},
    {"limit_external_short/model.onnx",
     "initializer 'W': external data bytes 0..1073741824 are beyond the end of "
     "'limit_external_short.bin' (16 bytes)"},
};

}  // namespace

TEST_CASE("resource limits: tensors, inputs and dims beyond the limits are refused at load",
          "[onnx_io][limits]") {
  for (const LimitCase& c : kLimitCases) {
    INFO(c.file);
    CHECK(loadError(badPath(c.file)) == badPath(c.file) + ": " + c.reason);
  }
}

TEST_CASE("resource limits: --max-tensor-bytes and LoadOptions set the tensor limit",
          "[onnx_io][limits][cli]") {
  const std::string model = badPath("limit_64kib_initializer.onnx");
  CHECK(loadError(model) == "(loaded)");  // 64 KiB, far below the default
  fusectl::LoadOptions small;
  small.max_tensor_bytes = 32 << 10;
  CHECK(loadError(model, small) ==
        model + ": initializer 'W': float dims [128,128] take 65536 bytes, more than the limit "
                "of 32768 (--max-tensor-bytes)");
  CHECK(runFusectl("dump " + shellQuote(model)).code == 0);
  for (const char* limit : {"32768", "32KiB"}) {
    const CliResult r =
        runFusectl("dump --max-tensor-bytes " + std::string(limit) + " " + shellQuote(model));
    CHECK(r.code == 3);
    CHECK(r.err == "fusectl: error: " + model + ": initializer 'W': float dims [128,128] take "
                   "65536 bytes, more than the limit of 32768 (--max-tensor-bytes)\n");
  }
  CHECK(runFusectl("dump --max-tensor-bytes 64KiB " + shellQuote(model)).code == 0);
  // A bad value is a usage error.
  CHECK(runFusectl("dump --max-tensor-bytes lots " + shellQuote(model)).code == 2);
  CHECK(runFusectl("dump --max-tensor-bytes 0 " + shellQuote(model)).code == 2);
}

TEST_CASE("resource limits: subgraphs nested beyond the depth limit are refused",
          "[onnx_io][limits]") {
  CHECK(loadError(badPath("limit_nested_16.onnx")) == "(loaded)");
  const std::string deep = badPath("limit_deep_subgraphs.onnx");
  const std::string message = loadError(deep);
  CHECK(message.rfind(deep + ": ", 0) == 0);
  CHECK_THAT(message, Catch::Matches(".*node 'if_level_65' \\(If\\): subgraphs nest deeper "
                                     "than 64 levels"));
  fusectl::LoadOptions shallow;
  shallow.max_subgraph_depth = 8;
  CHECK_THAT(loadError(badPath("limit_nested_16.onnx"), shallow),
             Catch::Matches(".*node 'if_level_9' \\(If\\): subgraphs nest deeper than 8 levels"));
}

TEST_CASE("resource limits: every command that loads refuses with one line and exit 3",
          "[cli][limits]") {
  fusectl::testing::TempDir out("limits-out");
  std::vector<std::string> files;
  for (const LimitCase& c : kLimitCases) files.push_back(c.file);
  files.push_back("limit_deep_subgraphs.onnx");
  for (const std::string& file : files) {
    const std::string model = shellQuote(badPath(file));
    for (const std::string& args :
         {"dump " + model, "convert " + model + " " + (out / "o.onnx"),
          "optimize -O3 " + model + " -o " + (out / "o.onnx"), "run " + model}) {
      INFO(args);
      const CliResult r = runFusectl(args);
      CHECK(r.code == 3);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(r.err.rfind("fusectl: error: " + badPath(file) + ": ", 0) == 0);
    }
  }
  CHECK(out.numFiles() == 0);  // nothing written
}

TEST_CASE("resource limits: a real model under a small --max-tensor-bytes is refused by run",
          "[cli][limits]") {
  const std::string model = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/resnet_mini.onnx";
  const CliResult r = runFusectl("run " + shellQuote(model) +
                                 " --max-tensor-bytes 1KiB");
  CHECK(r.code == 3);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("resource limits: text nested a hundred thousand levels deep is refused, no overflow",
          "[onnx_io][limits][cli]") {
  // libonnx's text parser recursed once per level and overflowed the stack (a segfault).
  fusectl::testing::TempDir dir("deep-text");
  const std::string path = dir / "deep.onnxtxt";
  {
    std::string text = "<\n ir_version: 8,\n opset_import: [\"\" : 13]\n>\n"
                       "deep (float[2] X, bool C) => (float[2] Y)\n{\n";
    std::string out = "Y";
    const int levels = 100000;
    for (int k = 1; k <= levels; ++k) {
      const std::string n = std::to_string(k);
      text += out + " = If (C) < else_branch = leaf" + n + " () => (float[2] e" + n + ") { e" +
              n + " = Identity (X) }, then_branch = level" + n + " () => (float[2] y" + n +
              ") {\n";
      out = "y" + n;
    }
    text += out + " = Identity (X)\n";
    for (int k = 0; k < levels; ++k) text += "} >\n";
    text += "}\n";
    std::ofstream(path) << text;
  }
  CHECK(loadError(path) == path + ": line 72: subgraphs nest deeper than 64 levels");
  const CliResult r = runFusectl("dump " + shellQuote(path));
  CHECK(r.code == 3);
  CHECK(r.err == "fusectl: error: " + path + ": line 72: subgraphs nest deeper than 64 levels\n");
}
