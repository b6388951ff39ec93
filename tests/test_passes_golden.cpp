// Golden tests for passes: lit/FileCheck-style cases in ONNX textual syntax, with the executor as
// the second oracle. Shared infrastructure: a pass writer adds files, never code.
//
// Layout: testdata/passes/<pass-name>/<topic>.onnxtxt, one folder per registered pass (a test
// below fails when a pass has none). A file holds one or more cases separated by a line
// `# -----`. Each case is a complete model in ONNX textual syntax; directives are `#` comments,
// so the parser skips them and they can sit right beside the lines they are about:
//
//   # RUN: <pipeline>          Pipeline text (`eliminate-identity`, `fixpoint(a,b)`, `-O2`).
//                              Applies to this case and the following ones in the file.
//   # CASE: <name>             Names the case. Name negative cases for why they must not
//                              fire: `no_fold_when_conv_output_has_two_consumers`.
//   # CHECK: <text>            <text> occurs in the output, after the previous match.
//   # CHECK-NEXT: <text>       <text> occurs on the line right after the previous match.
//   # CHECK-NOT: <text>        <text> does not occur between the previous match (or the
//                              start) and the next CHECK/CHECK-NEXT match (or the end).
//   # CHECK-UNCHANGED          The pipeline reports no change, and the output text equals the
//                              input's. Use it for every negative case.
//   # CHECK-STAT: <name>=<n>   Counter <name> summed over all pass runs equals n (absent = 0).
//   # CHECK-REJECT: <text>     Some rejected candidate in the report has a reason containing
//                              <text> (why the pass did not fire).
//   # NUMERIC: off <reason>    Skip the executor comparison, saying why (e.g. no kernel).
//   # SEED: <n>                Seed for the random inputs (default 1).
//   # SHAPE: <input>=<dims>    Concrete dims for a symbolic input (`X=2x3x8x8`).
//
// Matching is by substring on lines, with runs of spaces and tabs treated as one space. The
// output is `modelToText()` of the optimized model: the same syntax as the input, so CHECK
// lines read like the model they check (`# CHECK: Y = Relu (X)`).
//
// For every case the runner:
//  1. parses the case, runs the pipeline with verify_each (a broken invariant or a pass that
//     says "unchanged" but changed the model fails the case, naming the pass);
//  2. requires "unchanged" to mean the output text equals the input text;
//  3. reparses the output text (what we print must load);
//  4. checks the directives;
//  5. runs the model before and after through the CPU executor on seeded random inputs
//     (compareModels) and requires every output equal within atol = rtol = 1e-5.
//
// Run one file or case: FUSECTL_GOLDEN=<substring of "path:case"> fusectl_tests '[golden]'.
// Failures print file:line of the directive, the case name and the optimized model.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/registry.h"
#include "golden_cases.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::passes;
namespace fs = std::filesystem;

namespace golden {

// Checks CHECK / CHECK-NEXT / CHECK-NOT against `output`; returns "" or the first failure.
std::string checkText(const std::vector<Directive>& directives, const std::string& output,
                      const std::string& file) {
  std::vector<std::string> lines = splitLines(output);
  for (std::string& l : lines) l = squeeze(l);
  size_t pos = 0;  // first line the next CHECK may match
  bool matched_any = false;
  std::vector<const Directive*> pending_not;
  auto checkNots = [&](size_t end) -> std::string {
    for (const Directive* d : pending_not) {
      std::string want = squeeze(d->arg);
      for (size_t l = pos; l < end && l < lines.size(); ++l) {
        if (lines[l].find(want) != std::string::npos) {
          return fmt::format("{}:{}: CHECK-NOT: '{}' found at output line {}: {}", file, d->line,
                             d->arg, l + 1, lines[l]);
        }
      }
    }
    pending_not.clear();
    return "";
  };
  for (const Directive& d : directives) {
    std::string want = squeeze(d.arg);
    if (d.kind == "CHECK-NOT") {
      pending_not.push_back(&d);
    } else if (d.kind == "CHECK") {
      size_t found = lines.size();
      for (size_t l = pos; l < lines.size(); ++l) {
        if (lines[l].find(want) != std::string::npos) {
          found = l;
          break;
        }
      }
      if (found == lines.size()) {
        return fmt::format("{}:{}: CHECK: '{}' not found{}", file, d.line, d.arg,
                           matched_any ? fmt::format(" after output line {}", pos) : "");
      }
      if (std::string e = checkNots(found); !e.empty()) return e;
      pos = found + 1;
      matched_any = true;
    } else if (d.kind == "CHECK-NEXT") {
      if (!matched_any) {
        return fmt::format("{}:{}: CHECK-NEXT without a CHECK before it", file, d.line);
      }
      if (pos >= lines.size() || lines[pos].find(want) == std::string::npos) {
        return fmt::format("{}:{}: CHECK-NEXT: '{}' is not on output line {} ({})", file, d.line,
                           d.arg, pos + 1, pos < lines.size() ? lines[pos] : "end of output");
      }
      if (std::string e = checkNots(pos); !e.empty()) return e;
      ++pos;
    }
  }
  return checkNots(lines.size());
}

std::string numberLines(const std::string& text) {
  std::string out;
  int n = 0;
  for (const std::string& l : splitLines(text)) out += fmt::format("{:4} | {}\n", ++n, l);
  return out;
}

// Runs the model before and after on the same seeded inputs; "" or what differs.
std::string compareNumerics(const Model& before, const Model& after, const Case& c) {
  using namespace fusectl::kernels;
  const size_t outputs_before = before.graph->outputs().size();
  const size_t outputs_after = after.graph->outputs().size();
  if (outputs_before != outputs_after) {
    return fmt::format("the optimized model has {} outputs, the original {}", outputs_after,
                       outputs_before);
  }
  ComparisonInputs inputs;
  inputs.seed = c.seed;
  inputs.shapes = c.shapes;
  Tolerance tol;
  tol.atol = 1e-5;
  tol.rtol = 1e-5;
  const Comparison comparison = compareModels(before, after, inputs, tol);
  for (size_t i = 0; i < comparison.outputs.size(); ++i) {
    const OutputComparison& o = comparison.outputs[i];
    if (!o.passed) {
      return fmt::format("output {} '{}' differs after the pipeline: {}", i, o.name, o.detail);
    }
  }
  return "";
}

int64_t counterTotal(const Report& report, const std::string& name) {
  int64_t total = 0;
  for (const PassStatistics& s : report.passes) {
    auto it = s.counters.find(name);
    if (it != s.counters.end()) total += it->second;
  }
  return total;
}

Pipeline pipelineFor(const std::string& text) {
  if (text.size() == 3 && text[0] == '-' && text[1] == 'O') return Pipeline::forLevel(text[2] - '0');
  return Pipeline::parse(text);
}

// Runs one case; returns "" or a failure message (with the optimized model when useful).
std::string runCase(const Case& c) {
  std::string where = fmt::format("{}:{}: case '{}'", c.file, c.first_line, c.name);
  if (c.pipeline.empty()) return where + ": no '# RUN:' line in this case or before it";
  std::unique_ptr<Model> before, after;
  try {
    before = parseModelText(c.text, c.file);
    after = parseModelText(c.text, c.file);
  } catch (const Error& e) {
    return fmt::format("{}: the input does not load: {}", where, e.what());
  }
  std::string input_text = modelToText(*before);

  Report report;
  bool changed = false;
  PassManagerOptions options;
  options.verify_each = true;
  options.attach_functions = false;  // the CHECK lines read fused nodes as the passes wrote them
  try {
    changed = PassManager(options).run(*after, pipelineFor(c.pipeline), report);
  } catch (const Error& e) {
    return fmt::format("{}: RUN '{}' failed: {}", where, c.pipeline, e.what());
  }
  std::string output = modelToText(*after);
  auto withOutput = [&](const std::string& msg) {
    return fmt::format("{}\n{}\n--- optimized model ({}) ---\n{}", where, msg, c.pipeline,
                       numberLines(output));
  };
  if (!changed && output != input_text) {
    return withOutput("the pipeline reported no change, but the printed model differs");
  }
  try {
    parseModelText(output, c.file + " (optimized)");
  } catch (const Error& e) {
    return withOutput(fmt::format("the optimized model's text does not load back: {}",
                                  e.what()));
  }
  if (std::string e = checkText(c.directives, output, c.file); !e.empty()) return withOutput(e);
  for (const Directive& d : c.directives) {
    if (d.kind == "CHECK-UNCHANGED" && (changed || output != input_text)) {
      return withOutput(fmt::format("{}:{}: CHECK-UNCHANGED: the pipeline changed the model",
                                    c.file, d.line));
    }
    if (d.kind == "CHECK-STAT") {
      size_t eq = d.arg.rfind('=');
      if (eq == std::string::npos) {
        return fmt::format("{}:{}: write 'CHECK-STAT: counter=N'", c.file, d.line);
      }
      std::string name = trim(d.arg.substr(0, eq));
      int64_t want = std::stoll(d.arg.substr(eq + 1));
      int64_t got = counterTotal(report, name);
      if (got != want) {
        return withOutput(fmt::format("{}:{}: CHECK-STAT: {} is {}, expected {}", c.file, d.line,
                                      name, got, want));
      }
    }
    if (d.kind == "CHECK-REJECT") {
      bool found = false;
      std::string all;
      for (const Report::Rejection& r : report.rejections) {
        found |= r.miss.reason.find(d.arg) != std::string::npos;
        all += fmt::format("\n  [{}] {}: {}", r.pass, r.miss.anchor, r.miss.reason);
      }
      if (!found) {
        return fmt::format("{}\n{}:{}: CHECK-REJECT: no rejection reason contains '{}'; "
                           "rejections:{}",
                           where, c.file, d.line, d.arg, all.empty() ? " none" : all);
      }
    }
  }
  if (c.numeric) {
    try {
      if (std::string e = compareNumerics(*before, *after, c); !e.empty()) return withOutput(e);
    } catch (const Error& e) {
      return withOutput(fmt::format("executor failed ({}); if the model cannot run, add "
                                    "'# NUMERIC: off <reason>'",
                                    e.what()));
    }
  }
  return "";
}

}  // namespace golden

TEST_CASE("golden pass tests", "[golden][passes]") {
  const char* filter = std::getenv("FUSECTL_GOLDEN");
  size_t ran = 0;
  for (const fs::path& path : golden::goldenFiles()) {
    std::string rel = fs::relative(path, FUSECTL_SOURCE_DIR).string();
    std::vector<golden::Case> cases;
    try {
      cases = golden::parseFile(rel, fusectl::testing::slurp(path));
    } catch (const std::exception& e) {
      FAIL_CHECK(e.what());
      continue;
    }
    if (cases.empty()) FAIL_CHECK(rel << ": no cases");
    for (const golden::Case& c : cases) {
      if (filter && (rel + ":" + c.name).find(filter) == std::string::npos) continue;
      ++ran;
      std::string failure = golden::runCase(c);
      if (failure.empty()) {
        SUCCEED(rel << ": " << c.name);
      } else {
        FAIL_CHECK(failure);
      }
    }
  }
  if (!filter) CHECK(ran > 0);
}

TEST_CASE("golden: every registered pass has golden tests", "[golden][passes]") {
  for (const PassInfo& info : allPasses()) {
    if (!isBuiltinPass(info.name)) continue;
    fs::path dir = golden::goldenRoot() / std::string(info.name);
    INFO("pass " << info.name << ": add " << dir.string() << "/<topic>.onnxtxt");
    REQUIRE(fs::is_directory(dir));
    bool any = false;
    for (const auto& e : fs::directory_iterator(dir)) any |= e.path().extension() == ".onnxtxt";
    CHECK(any);
  }
  // And every folder names a registered pass (a renamed pass leaves no orphan tests).
  for (const auto& e : fs::directory_iterator(golden::goldenRoot())) {
    if (!e.is_directory()) continue;
    INFO("testdata/passes/" << e.path().filename().string());
    CHECK(isBuiltinPass(e.path().filename().string()));
  }
}

TEST_CASE("golden: directive parsing and CHECK semantics", "[golden]") {
  const std::string file = R"(# RUN: eliminate-identity
# CASE: first
<ir_version: 8, opset_import: ["" : 13]>
g (float[2] X) => (float[2] Y) {
  Y = Relu (X)
}
# CHECK: Y = Relu (X)
# CHECK-NOT: Identity
# -----
# CASE: second
# RUN: eliminate-dead-code
# NUMERIC: off no kernel for it
# SEED: 7
# SHAPE: X=2x3
# CHECK-UNCHANGED
# CHECK-STAT: removed=0
<ir_version: 8, opset_import: ["" : 13]>
g (float[2] X) => (float[2] Y) {
  Y = Relu (X)
}
)";
  std::vector<golden::Case> cases = golden::parseFile("f.onnxtxt", file);
  REQUIRE(cases.size() == 2);
  CHECK(cases[0].name == "first");
  CHECK(cases[0].pipeline == "eliminate-identity");
  REQUIRE(cases[0].directives.size() == 2);
  CHECK(cases[0].directives[0].kind == "CHECK");
  CHECK(cases[0].directives[0].line == 7);
  CHECK(cases[0].directives[1].kind == "CHECK-NOT");
  CHECK(cases[1].pipeline == "eliminate-dead-code");
  CHECK_FALSE(cases[1].numeric);
  CHECK(cases[1].seed == 7);
  REQUIRE(cases[1].shapes.size() == 1);
  CHECK(cases[1].shapes[0].first == "X");
  CHECK(cases[1].directives.size() == 2);
  CHECK(golden::runCase(cases[0]) == "");
  CHECK(golden::runCase(cases[1]) == "");
  // The numeric oracle has teeth: Relu and Sigmoid differ on random inputs.
  auto relu = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 3] X) => (float[2, 3] Y) { Y = Relu (X) })", "relu");
  auto sigmoid = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 3] X) => (float[2, 3] Y) { Y = Sigmoid (X) })", "sigmoid");
  CHECK(golden::compareNumerics(*relu, *relu, cases[0]) == "");
  CHECK_THAT(golden::compareNumerics(*relu, *sigmoid, cases[0]),
             Catch::StartsWith("output 0 'Y' differs after the pipeline"));
  CHECK_THROWS_WITH(golden::parseFile("f", "# NUMERIC: off\n"),
                    Catch::Contains("f:1: write 'NUMERIC: off <reason>'"));

  using golden::Directive;
  const std::string out = "a = Relu (x)\nb = Add (a,  a)\nc = Mul (b, b)\n";
  auto check = [&](std::vector<Directive> d) { return golden::checkText(d, out, "f"); };
  CHECK(check({{"CHECK", "Relu"}, {"CHECK", "Mul"}}) == "");
  CHECK(check({{"CHECK", "b = Add (a, a)"}}) == "");  // blanks squeezed
  CHECK_THAT(check({{"CHECK", "Mul", 3}, {"CHECK", "Relu", 4}}),
             Catch::Contains("f:4: CHECK: 'Relu' not found after output line 3"));
  CHECK(check({{"CHECK", "Relu"}, {"CHECK-NEXT", "Add"}}) == "");
  CHECK_THAT(check({{"CHECK", "Relu"}, {"CHECK-NEXT", "Mul", 9}}),
             Catch::Contains("f:9: CHECK-NEXT: 'Mul' is not on output line 2"));
  CHECK(check({{"CHECK", "Relu"}, {"CHECK-NOT", "Relu"}, {"CHECK", "Mul"}}) == "");
  CHECK_THAT(check({{"CHECK", "Relu"}, {"CHECK-NOT", "Add", 5}, {"CHECK", "Mul"}}),
             Catch::Contains("f:5: CHECK-NOT: 'Add' found at output line 2"));
  CHECK_THAT(check({{"CHECK-NOT", "Mul", 2}}), Catch::Contains("f:2: CHECK-NOT"));
  CHECK(check({{"CHECK", "Add"}, {"CHECK-NOT", "Relu"}}) == "");
}
