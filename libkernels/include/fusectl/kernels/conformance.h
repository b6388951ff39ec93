// Runs ONNX backend tests (<suite>/<test>/model.onnx + test_data_set_N/{input,output}_K.pb)
// through the executor and compares the results, the way upstream's runner does, but stricter.
//
// The test list comes from DIR/MANIFEST.tsv when present (columns test_name, suite, in_scope,
// rtol, atol; only in_scope == "yes" tests run unless include_out_of_scope), else from a walk
// that finds every model.onnx one or two folders below DIR (or DIR/model.onnx itself).
// Per data set: input_K.pb binds by its TensorProto name when that names a graph input, else by
// position over the graph inputs that are not initializers; output_K.pb is graph output K.
// Each output must have the expected dtype and shape exactly; float values pass when
// |actual - expected| <= atol + rtol * |expected| with NaN at the same positions and equal
// infinities; integer and bool outputs must be equal. Defaults: rtol 1e-3, atol 1e-7.
// A model whose ops lack kernels (or a kernel that throws Unsupported) is "unsupported".
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fusectl {
class Model;
}

namespace fusectl::kernels {

struct ConformanceOptions {
  std::string filter;  // run only tests whose name contains this
  int num_threads = 1;
  bool include_out_of_scope = false;
  // Applied to each model after loading, before it runs: e.g. an optimization pipeline, so that
  // the suite checks that optimized models still compute the expected outputs.
  std::function<void(Model&)> transform;
};

struct ConformanceTest {
  std::string suite;  // "node", "simple"... ("" when found by a walk at depth 1)
  std::string name;   // "test_abs"
  std::string dir;    // folder holding model.onnx
  bool in_scope = true;
  std::string scope_note;  // MANIFEST's in_scope column when it is not "yes"
  double rtol = 1e-3;
  double atol = 1e-7;
};

enum class ConformanceStatus { Pass, Fail, Unsupported };
std::string_view conformanceStatusName(ConformanceStatus s);  // "pass", "fail", "unsupported"

struct ConformanceResult {
  ConformanceTest test;
  ConformanceStatus status = ConformanceStatus::Fail;
  std::string detail;  // why it failed or is unsupported; "" on pass
  double seconds = 0;
};

struct ConformanceReport {
  std::vector<ConformanceResult> results;  // in test-list order
  size_t passed = 0;
  size_t failed = 0;
  size_t unsupported = 0;
  size_t skipped_out_of_scope = 0;  // listed in the manifest, not run
  double seconds = 0;
  double passRate() const {  // passed / run, 0..1
    const size_t run = passed + failed + unsupported;
    return run ? static_cast<double>(passed) / static_cast<double>(run) : 0.0;
  }
};

// The tests under `dir`, sorted by suite then name; throws fusectl::Error (Io) when `dir` is
// missing. Out-of-scope tests are included with in_scope = false.
std::vector<ConformanceTest> listConformanceTests(const std::string& dir);

ConformanceResult runConformanceTest(const ConformanceTest& test,
                                     const ConformanceOptions& options = {});

// Runs every selected test; `on_result` (may be empty) sees each result as it completes.
ConformanceReport runConformance(const std::string& dir, const ConformanceOptions& options = {},
                                 const std::function<void(const ConformanceResult&)>& on_result = {});

// An expected-failures list: "test_name<TAB>reason" per line, '#' starts a comment line.
// Throws fusectl::Error naming the file and line on a malformed or duplicated entry.
std::map<std::string, std::string> readExpectedFailures(const std::string& path);

// A run held against an expected-failures list: what differs, as "name (status): detail" for
// failures and bare names otherwise. Only names are compared, not reasons.
struct ExpectedFailureCheck {
  std::vector<std::string> unexpected_failures;  // not passing, not listed
  std::vector<std::string> unexpected_passes;    // listed, but passing now
  std::vector<std::string> stale;                // listed, but no such test ran
  bool ok() const { return unexpected_failures.empty() && unexpected_passes.empty() && stale.empty(); }
};
ExpectedFailureCheck checkExpectedFailures(const ConformanceReport& report,
                                           const std::map<std::string, std::string>& listed);

// The list for `report`'s non-passing tests, one "name<TAB>status: detail" line each (the
// detail on one line, without the test folder's path), after `header` ('#' lines).
std::string expectedFailuresText(const ConformanceReport& report, const std::string& header);

}  // namespace fusectl::kernels
