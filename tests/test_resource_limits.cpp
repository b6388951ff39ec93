// Resource limits at load: a tensor that declares more bytes than --max-tensor-bytes, subgraphs
// nested too deeply, dims whose product overflows, external data longer than its file. Each is
// one line naming the file and the tensor, input or node, exit 3, through the library and the
// CLI, before anything is allocated (the inputs are a few hundred bytes that declare terabytes;
// testdata/gen/make_limit_inputs.py writes them), and the run-time limit on computed tensors with
// the inputs the mutation run found (testdata/bad/mutation_*.onnx).
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

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

// ---- Findings of the 10,000-run mutation (bench/mutate_models.py, seed 20261202) ----
// Each input is the mutated model that failed; the names say what was mutated.

TEST_CASE("mutation findings: a tensor computed during a run is held to --max-tensor-bytes",
          "[cli][limits][mutation]") {
  // resnet_mini with its input widened to [batch,3,32,1048576] (run 3016): every tensor is
  // legal, the first Conv's output takes 2 GiB. Before the run-time limit it computed for half a
  // minute in 6 GB; now the Conv's output is refused before it is allocated.
  const std::string wide = badPath("mutation_3016_wide_input.onnx");
  CliResult r = runFusectl("run " + shellQuote(wide) + " --max-tensor-bytes 1GiB");
  CHECK(r.code == 3);
  CHECK(r.err == "fusectl: error: " + wide +
                     ": node '/conv1/Conv' (Conv): output '/conv1/Conv_output_0': float dims "
                     "[1,16,32,1048576] take 2147483648 bytes, more than the limit of 1073741824 "
                     "(--max-tensor-bytes)"
                     // its batch dim is symbolic: the run says it was set to 1 (input_binding.h)
                     "; on seeded inputs (input with unknown dims at 1): give ones the model "
                     "accepts with --input NAME=FILE or dims with --shape NAME=DIMS\n");
  // mobilenet_mini with [batch,3,1048576,32] (run 6334): its input itself is over 256 MiB.
  const std::string tall = badPath("mutation_6334_tall_input.onnx");
  r = runFusectl("run " + shellQuote(tall) + " --max-tensor-bytes 256MiB");
  CHECK(r.code == 3);
  CHECK(r.err.find(tall + ": graph input 'input'") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("mutation findings: attention scores of a long sequence are refused, not out of memory",
          "[cli][limits][mutation]") {
  // llama_layer and bert_op17 with the sequence axis set to 1048576 (runs 4498, 6903): the
  // scores Q·Kᵀ take 16 TiB, which used to end in std::bad_alloc (exit 70). The inputs fix the
  // sequence length, so the nodes before the scores compute on 256 MiB tensors (seconds).
  for (const char* file : {"mutation_4498_long_sequence.onnx", "mutation_6903_long_sequence.onnx"}) {
    INFO(file);
    const std::string path = badPath(file);
    const CliResult r = runFusectl("run " + shellQuote(path));
    CHECK(r.code == 3);
    CHECK(r.err.rfind("fusectl: error: " + path + ": node '", 0) == 0);
    CHECK(r.err.find("(MatMul): output '") != std::string::npos);
    CHECK(r.err.find("float dims [1,4,1048576,1048576] take 17592186044416 bytes, more than "
                     "the limit of 17179869184 (--max-tensor-bytes); on seeded inputs (") !=
          std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("resource limits: a window function of an absurd size is refused, not out of memory",
          "[cli][limits]") {
  // HannWindow's size is data: 4e12 samples (16 TB) used to end in "fusectl: error: out of
  // memory" (exit 70) from the kernel's scratch, allocated before its output, whose allocation
  // is the one held to --max-tensor-bytes; 2^63 - 1 read through a double became -2^63.
  fusectl::testing::TempDir dir("limits-window");
  for (const char* size : {"4000000000000", "9223372036854775807"}) {
    INFO(size);
    const std::string model = dir / "window.onnxtxt";
    std::ofstream(model) << "<ir_version: 8, opset_import: [\"\" : 17]>\n"
                         << "g () => (float[N] Y)\n<int64 n = {" << size << "}>\n"
                         << "{\n  Y = HannWindow (n)\n}\n";
    const CliResult r = runFusectl("run " + shellQuote(model));
    CHECK(r.code == 3);
    CHECK(r.err.rfind("fusectl: error: " + model + ": node 'HannWindow(Y)' (HannWindow): output "
                      "'Y': float dims [" + std::string(size) + "] take ", 0) == 0);
    CHECK(r.err.find("(--max-tensor-bytes)\n") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("resource limits: an allocation that fails names its node", "[cli][limits]") {
  // 2^58 floats (2^60 bytes, beyond any address space) under a limit raised past them: the
  // allocation fails, which used to print "fusectl: error: out of memory" alone.
  fusectl::testing::TempDir dir("limits-oom");
  const std::string model = dir / "huge.onnxtxt";
  std::ofstream(model) << "<ir_version: 8, opset_import: [\"\" : 13]>\n"
                       << "g () => (float[N] Y)\n<int64[1] s = {288230376151711744}>\n"
                       << "{\n  Y = ConstantOfShape <value = float[1] {1.0}> (s)\n}\n";
  const CliResult r =
      runFusectl("run --max-tensor-bytes 4611686018427387904 " + shellQuote(model));
  CHECK(r.code == 70);
  // The whole of stderr but for AddressSanitizer's own warning in the sanitizer build.
  const std::string line = "fusectl: error: " + model +
                           ": node 'ConstantOfShape(Y)' (ConstantOfShape): out of memory (its "
                           "outputs or scratch)\n";
  const size_t at = r.err.find(line);
  REQUIRE(at != std::string::npos);
  CHECK(at + line.size() == r.err.size());
  CHECK((at == 0 || r.err.compare(0, 2, "==") == 0));
}

TEST_CASE("mutation findings: optimize survives a Transpose whose perm is not a permutation",
          "[cli][mutation]") {
  // vit_encoder_op13 with K's Transpose perm mutated (run 6145): fuse-attention indexed K's
  // shape with the bad perm entry and crashed. Now the candidate is declined with a reason.
  fusectl::testing::TempDir out("mutation-6145");
  const std::string model = badPath("mutation_6145_attention_perm.onnx");
  const std::string report = out / "report.json";
  const CliResult r = runFusectl("optimize " + shellQuote(model) + " -O3 -o " +
                                 shellQuote(out / "m.onnx") + " --report " + shellQuote(report));
  CHECK(r.code == 0);
  CHECK(fusectl::testing::slurp(report).find("is not a Transpose of a rank-4 (or rank-3) K") !=
        std::string::npos);
}

TEST_CASE("mutation findings: a Conv whose X is a scalar gets no shape, and no crash",
          "[cli][mutation]") {
  // mobilenet_mini with a Clip's inputs swapped (run 9144): the Clip's output is a scalar, so
  // the next Conv's X has rank 0, and shape inference read X's spatial dims past its rank.
  fusectl::testing::TempDir out("mutation-9144");
  const std::string model = badPath("mutation_9144_conv_scalar_x.onnx");
  CHECK(runFusectl("optimize " + shellQuote(model) + " -O3 -o " + shellQuote(out / "m.onnx")).code == 0);
  const CliResult r = runFusectl("run " + shellQuote(model));
  CHECK(r.code == 3);
  CHECK(r.err == "fusectl: error: " + model +
                     ": node '/features/features.5/conv/conv.0/conv.0.2/Clip' (Clip): min and max "
                     "must be scalars; on seeded inputs (input with unknown dims at 1): give ones "
                     "the model accepts with --input NAME=FILE or dims with --shape NAME=DIMS\n");
}
