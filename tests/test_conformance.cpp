// The ONNX backend conformance suite (../shared/onnx-node-tests) through the CPU executor.
//
// Every in-scope test must pass unless tests/conformance_expected_failures.txt lists it
// ("test_name<TAB>reason" per line, '#' comments); a listed test that passes, or a listed name
// the suite does not have, also fails this test, so that the list stays honest.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/conformance.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/report.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

const std::string kSuiteDir = std::string(FUSECTL_SOURCE_DIR) + "/../shared/onnx-node-tests";
const std::string kExpectedFailures =
    std::string(FUSECTL_SOURCE_DIR) + "/tests/conformance_expected_failures.txt";

std::map<std::string, std::string> readExpectedFailures(const std::string& path) {
  std::map<std::string, std::string> listed;
  std::ifstream in(path);
  if (!in) FAIL("cannot read " << path);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 >= line.size()) {
      FAIL(path << ":" << line_no << ": expected 'test_name<TAB>reason'");
    }
    if (!listed.emplace(line.substr(0, tab), line.substr(tab + 1)).second) {
      FAIL(path << ":" << line_no << ": " << line.substr(0, tab) << " listed twice");
    }
  }
  return listed;
}

}  // namespace

TEST_CASE("conformance: ONNX backend tests pass except the listed expected failures") {
  if (!std::filesystem::is_directory(kSuiteDir)) {
    WARN("skipped: conformance suite not found at " << kSuiteDir);
    return;
  }
  const auto expected = readExpectedFailures(kExpectedFailures);
  const ConformanceReport report = runConformance(kSuiteDir);
  std::set<std::string> names;
  std::vector<std::string> unexpected_failures, unexpected_passes;
  for (const ConformanceResult& r : report.results) {
    names.insert(r.test.name);
    const bool listed = expected.count(r.test.name) > 0;
    if (r.status != ConformanceStatus::Pass && !listed) {
      unexpected_failures.push_back(r.test.name + " (" +
                                    std::string(conformanceStatusName(r.status)) + "): " +
                                    r.detail);
    } else if (r.status == ConformanceStatus::Pass && listed) {
      unexpected_passes.push_back(r.test.name);
    }
  }
  std::vector<std::string> stale;
  for (const auto& [name, reason] : expected) {
    if (!names.count(name)) stale.push_back(name);
  }
  std::cout << "conformance: " << report.passed << " passed, " << report.failed << " failed, "
            << report.unsupported << " unsupported of " << report.results.size() << " in scope ("
            << report.passRate() * 100 << "%), " << report.seconds << " s\n";
  for (const std::string& s : unexpected_failures) FAIL_CHECK("unexpected failure: " << s);
  for (const std::string& s : unexpected_passes) {
    FAIL_CHECK("now passes, remove it from conformance_expected_failures.txt: " << s);
  }
  for (const std::string& s : stale) {
    FAIL_CHECK("listed in conformance_expected_failures.txt but not an in-scope test: " << s);
  }
  CHECK(report.results.size() >= 600);
}

// The passes on every conformance model: -O3 (every pass, verify-each) must keep every test's
// outputs. Most tests feed every tensor as a graph input, so this mostly proves that passes
// leave what they cannot prove alone; the constant-folding paths are covered by the golden tests.
TEST_CASE("conformance: every test still passes after -O3") {
  if (!std::filesystem::is_directory(kSuiteDir)) {
    WARN("skipped: conformance suite not found at " << kSuiteDir);
    return;
  }
  const auto expected = readExpectedFailures(kExpectedFailures);
  ConformanceOptions options;
  const fusectl::passes::Pipeline pipeline = fusectl::passes::Pipeline::forLevel(3);
  size_t changed = 0;
  options.transform = [&](fusectl::Model& model) {
    fusectl::passes::PassManagerOptions pm;
    pm.verify_each = true;
    fusectl::passes::Report report;
    if (fusectl::passes::PassManager(pm).run(model, pipeline, report)) ++changed;
  };
  const ConformanceReport report = runConformance(kSuiteDir, options);
  for (const ConformanceResult& r : report.results) {
    if (r.status == ConformanceStatus::Pass || expected.count(r.test.name)) continue;
    FAIL_CHECK(r.test.name << " (" << conformanceStatusName(r.status) << " after -O3): " << r.detail);
  }
  std::cout << "conformance after -O3: " << report.passed << " passed of " << report.results.size()
            << ", " << changed << " models changed by the passes\n";
  CHECK(report.results.size() >= 600);
  CHECK(changed > 0);
}

TEST_CASE("conformance: binds inputs by name, else by position, and reports mismatches") {
  namespace fs = std::filesystem;
  const fs::path root = fusectl::testing::processTempPath("fusectl_test_conformance");
  fs::remove_all(root);
  const fs::path test = root / "node" / "test_identity_pair";
  fs::create_directories(test / "test_data_set_0");

  auto model = std::make_unique<Model>();
  model->setOpsetVersion("", 17);
  Graph& g = *model->graph;
  ValueType t;
  t.dtype = DType::Float;
  t.shape = Shape::ofStatic({2});
  Value* a = g.addInput("a", t);
  Value* b = g.addInput("b", t);
  g.addOutput(g.createNode({"Identity", "", {a}, {"ya"}, "ida", {}})->output(0));
  g.addOutput(g.createNode({"Identity", "", {b}, {"yb"}, "idb", {}})->output(0));
  saveModel(*model, (test / "model.onnx").string());

  const Tensor va = Tensor::fromValues<float>(DType::Float, {2}, {1, 2});
  const Tensor vb = Tensor::fromValues<float>(DType::Float, {2}, {3, 4});
  const fs::path data = test / "test_data_set_0";
  // input_0.pb is named "b": it must bind to b, and the unnamed input_1.pb to position 1 (b)...
  // so name both to check name binding, then drop a name to check positional binding.
  saveTensorFile(vb, "b", (data / "input_0.pb").string());
  saveTensorFile(va, "a", (data / "input_1.pb").string());
  saveTensorFile(va, "ya", (data / "output_0.pb").string());
  saveTensorFile(vb, "yb", (data / "output_1.pb").string());

  const auto tests = listConformanceTests(root.string());
  REQUIRE(tests.size() == 1);
  CHECK(tests[0].suite == "node");
  CHECK(tests[0].name == "test_identity_pair");
  ConformanceResult r = runConformanceTest(tests[0]);
  CHECK(r.detail == "");
  CHECK(r.status == ConformanceStatus::Pass);

  saveTensorFile(va, "", (data / "input_0.pb").string());
  saveTensorFile(vb, "", (data / "input_1.pb").string());
  r = runConformanceTest(tests[0]);
  CHECK(r.status == ConformanceStatus::Pass);

  saveTensorFile(Tensor::fromValues<float>(DType::Float, {2}, {3, 4.01f}), "yb",
                 (data / "output_1.pb").string());
  r = runConformanceTest(tests[0]);
  CHECK(r.status == ConformanceStatus::Fail);
  CHECK_THAT(r.detail, Catch::Contains("output 'yb'") && Catch::Contains("1 of 2 elements"));

  saveTensorFile(Tensor::fromValues<int64_t>(DType::Int64, {2}, {3, 4}), "yb",
                 (data / "output_1.pb").string());
  r = runConformanceTest(tests[0]);
  CHECK(r.status == ConformanceStatus::Fail);
  CHECK_THAT(r.detail, Catch::Contains("output 'yb' is float, expected int64"));
  fs::remove_all(root);
}
