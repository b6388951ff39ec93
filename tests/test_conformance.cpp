// The ONNX backend conformance suites through the CPU executor: the curated one
// (../shared/onnx-node-tests) and upstream's full node-test suite (../shared/onnx-node-tests-full).
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
const std::string kFullSuiteDir =
    std::string(FUSECTL_SOURCE_DIR) + "/../shared/onnx-node-tests-full/node";
const std::string kFullExpectedFailures =
    std::string(FUSECTL_SOURCE_DIR) + "/tests/conformance_full_expected_failures.txt";
const std::string kConformanceDoc = std::string(FUSECTL_SOURCE_DIR) + "/docs/conformance.md";

}  // namespace

TEST_CASE("conformance: ONNX backend tests pass except the listed expected failures") {
  if (!std::filesystem::is_directory(kSuiteDir)) {
    WARN("skipped: conformance suite not found at " << kSuiteDir);
    return;
  }
  const auto expected = kernels::readExpectedFailures(kExpectedFailures);
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
  const auto expected = kernels::readExpectedFailures(kExpectedFailures);
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

// The whole upstream suite: exactly the tests listed in conformance_full_expected_failures.txt
// may fail (a newly failing test, or a listed one that now passes, fails this test), and
// docs/conformance.md lists each of them with the same reason.
TEST_CASE("conformance: the full node-test suite fails exactly its listed tests") {
  if (!std::filesystem::is_directory(kFullSuiteDir)) {
    WARN("skipped: full node-test suite not found at " << kFullSuiteDir);
    return;
  }
  const auto listed = kernels::readExpectedFailures(kFullExpectedFailures);
  ConformanceOptions options;
  options.include_out_of_scope = true;
  const ConformanceReport report = runConformance(kFullSuiteDir, options);
  const ExpectedFailureCheck check = checkExpectedFailures(report, listed);
  std::cout << "full suite: " << report.passed << " passed, " << report.failed << " failed, "
            << report.unsupported << " unsupported of " << report.results.size() << " ("
            << report.passRate() * 100 << "%), " << report.seconds << " s\n";
  for (const std::string& s : check.unexpected_failures) FAIL_CHECK("unexpected failure: " << s);
  for (const std::string& s : check.unexpected_passes)
    FAIL_CHECK("now passes, remove it from conformance_full_expected_failures.txt: " << s);
  for (const std::string& s : check.stale)
    FAIL_CHECK("listed in conformance_full_expected_failures.txt but not in the suite: " << s);
  CHECK(report.results.size() == 1802);
}

TEST_CASE("conformance: docs/conformance.md lists every expected failure with its reason") {
  const auto listed = kernels::readExpectedFailures(kFullExpectedFailures);
  std::ifstream in(kConformanceDoc);
  REQUIRE(in);
  std::map<std::string, std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    // Table rows: | `test_name` | reason |
    if (line.rfind("| `test_", 0) != 0) continue;
    const size_t name_end = line.find('`', 3);
    const size_t reason_end = line.rfind(" |");
    REQUIRE(name_end != std::string::npos);
    REQUIRE(reason_end > name_end + 4);
    documented[line.substr(3, name_end - 3)] = line.substr(name_end + 4, reason_end - name_end - 4);
  }
  for (const auto& [name, reason] : listed) {
    INFO(name);
    REQUIRE(documented.count(name));
    std::string escaped;
    for (char c : reason) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
    CHECK(documented[name] == escaped);
  }
  CHECK(documented.size() == listed.size());
}

TEST_CASE("conformance: expected-failure lists are read strictly and compared by name") {
  namespace fs = std::filesystem;
  const fs::path dir = fusectl::testing::processTempPath("fusectl_test_expected_failures");
  fs::create_directories(dir);
  const std::string path = (dir / "list.txt").string();
  std::ofstream(path) << "# comment\ntest_a\tfail: reason\ntest_a\tagain\n";
  CHECK_THROWS_WITH(kernels::readExpectedFailures(path), Catch::Contains("list.txt:3") &&
                                                             Catch::Contains("listed twice"));
  std::ofstream(path) << "test_a no tab\n";
  CHECK_THROWS_WITH(kernels::readExpectedFailures(path), Catch::Contains("list.txt:1"));
  std::ofstream(path) << "test_a\tfail: x\ntest_gone\tfail: y\n";
  const auto listed = kernels::readExpectedFailures(path);
  ConformanceReport report;
  auto add = [&](const std::string& name, ConformanceStatus status) {
    ConformanceResult r;
    r.test.name = name;
    r.test.dir = "/suite/" + name;
    r.status = status;
    r.detail = status == ConformanceStatus::Pass ? "" : "/suite/" + name + "/model.onnx:\tbad";
    report.results.push_back(r);
  };
  add("test_a", ConformanceStatus::Pass);
  add("test_b", ConformanceStatus::Unsupported);
  const ExpectedFailureCheck check = checkExpectedFailures(report, listed);
  CHECK(check.unexpected_passes == std::vector<std::string>{"test_a"});
  REQUIRE(check.unexpected_failures.size() == 1);
  CHECK_THAT(check.unexpected_failures[0], Catch::StartsWith("test_b (unsupported)"));
  CHECK(check.stale == std::vector<std::string>{"test_gone"});
  CHECK(expectedFailuresText(report, "# h") == "# h\ntest_b\tunsupported: model.onnx: bad\n");
  fs::remove_all(dir);
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
