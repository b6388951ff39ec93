// `fusectl conformance DIR`: run ONNX backend tests through the CPU executor (the work is in
// libkernels' conformance.h; this prints it).
//
// --json prints {"dir": str, "passed": int, "failed": int, "unsupported": int,
// "skipped_out_of_scope": int, "pass_rate": num, "seconds": num,
// "tests": [{"suite": str, "name": str, "status": "pass"|"fail"|"unsupported", "detail": str,
// "seconds": num}]}.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/conformance.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/report.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::kernels;

struct ConformanceCliOptions {
  std::string dir;
  std::string filter;
  bool json = false;
  bool all = false;
  bool failures_only = false;
  int threads = 1;
  int optimize = 0;  // -O level applied to every model before it runs; 0 = as written
  std::string expected_failures;        // compare the run with this list
  std::string write_expected_failures;  // write the run's non-passing tests here
};

// Prints how the run differs from the list; true when it does not.
bool reportAgainstList(const ConformanceReport& report, const std::string& path) {
  const ExpectedFailureCheck check = checkExpectedFailures(report, readExpectedFailures(path));
  for (const std::string& s : check.unexpected_failures) fmt::print("unexpected failure: {}\n", s);
  for (const std::string& s : check.unexpected_passes)
    fmt::print("passes now, remove it from {}: {}\n", path, s);
  for (const std::string& s : check.stale) fmt::print("listed in {} but not run: {}\n", path, s);
  fmt::print("against {}: {} unexpected failures, {} unexpected passes, {} stale entries\n", path,
             check.unexpected_failures.size(), check.unexpected_passes.size(), check.stale.size());
  return check.ok();
}

std::string testId(const ConformanceTest& t) {
  return t.suite.empty() ? t.name : t.suite + "/" + t.name;
}

int runConformanceCli(const ConformanceCliOptions& opts) {
  ConformanceOptions options;
  options.filter = opts.filter;
  options.num_threads = opts.threads;
  options.include_out_of_scope = opts.all;
  if (opts.optimize > 0) {
    const passes::Pipeline pipeline = passes::Pipeline::forLevel(opts.optimize);
    options.transform = [pipeline](Model& model) {
      passes::PassManagerOptions pm;
      pm.verify_each = true;  // a pass that breaks a model fails its test, naming the pass
      passes::Report report;
      passes::PassManager(pm).run(model, pipeline, report);
    };
  }
  auto print = [&](const ConformanceResult& r) {
    if (opts.json) return;
    if (opts.failures_only && r.status == ConformanceStatus::Pass) return;
    fmt::print("{:<11} {} ({:.1f} ms){}{}\n", conformanceStatusName(r.status), testId(r.test),
               r.seconds * 1e3, r.detail.empty() ? "" : ": ", r.detail);
    std::fflush(stdout);
  };
  const ConformanceReport report = runConformance(opts.dir, options, print);

  if (opts.json) {
    nlohmann::json j;
    j["dir"] = opts.dir;
    j["passed"] = report.passed;
    j["failed"] = report.failed;
    j["unsupported"] = report.unsupported;
    j["skipped_out_of_scope"] = report.skipped_out_of_scope;
    j["pass_rate"] = report.passRate();
    j["seconds"] = report.seconds;
    j["tests"] = nlohmann::json::array();
    for (const ConformanceResult& r : report.results) {
      j["tests"].push_back({{"suite", r.test.suite},
                            {"name", r.test.name},
                            {"status", std::string(conformanceStatusName(r.status))},
                            {"detail", r.detail},
                            {"seconds", r.seconds}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    const size_t run = report.passed + report.failed + report.unsupported;
    fmt::print("total: {} passed, {} failed, {} unsupported of {} run ({:.1f}% pass); {} out of "
               "scope skipped; {:.1f} s\n",
               report.passed, report.failed, report.unsupported, run, report.passRate() * 100,
               report.skipped_out_of_scope, report.seconds);
  }
  if (!opts.write_expected_failures.empty()) {
    writeFileAtomically(
        opts.write_expected_failures,
        expectedFailuresText(report,
                             fmt::format("# Tests under {} that do not pass: test_name<TAB>reason.\n"
                                         "# Written by `fusectl conformance {} --all "
                                         "--write-expected-failures FILE`.\n",
                                         opts.dir, opts.dir)));
  }
  const bool matches_list =
      !opts.expected_failures.empty() && !opts.json && reportAgainstList(report, opts.expected_failures);
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  if (report.results.empty()) {
    throw Error(ErrorKind::Usage,
                fmt::format("no test under {} matches{}", opts.dir,
                            opts.filter.empty() ? "" : " --filter '" + opts.filter + "'"));
  }
  if (!opts.expected_failures.empty() && opts.json)
    return checkExpectedFailures(report, readExpectedFailures(opts.expected_failures)).ok() ? 0 : 1;
  if (!opts.expected_failures.empty()) return matches_list ? 0 : 1;
  return report.failed + report.unsupported == 0 ? 0 : 1;
}

}  // namespace

Command addConformanceCommand(CLI::App& parent) {
  auto opts = std::make_shared<ConformanceCliOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "conformance", "Run ONNX backend tests (<suite>/<test>/model.onnx + test_data_set_*) on "
                     "the CPU executor");
  cmd->add_option("DIR", opts->dir, "Test folder (with MANIFEST.tsv, or suites of tests)")
      ->required();
  cmd->add_option("--filter", opts->filter, "Run only tests whose name contains SUBSTR")
      ->type_name("SUBSTR");
  cmd->add_flag("--json", opts->json, "Print a JSON report instead of one line per test");
  cmd->add_flag("--all", opts->all, "Also run tests the manifest marks out of scope");
  cmd->add_flag("--failures-only", opts->failures_only, "Print only tests that do not pass");
  cmd->add_option("--threads", opts->threads, "Threads per kernel (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("-O,--optimize", opts->optimize,
                  "Optimize every model at this -O level (1-3) before running it: checks that "
                  "the passes keep every test's outputs")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  cmd->add_option("--expected-failures", opts->expected_failures,
                  "Compare with this list (test_name<TAB>reason lines): exit 0 when exactly the "
                  "listed tests do not pass")
      ->type_name("FILE");
  cmd->add_option("--write-expected-failures", opts->write_expected_failures,
                  "Write the tests that do not pass, with their reasons, to FILE")
      ->type_name("FILE");
  cmd->footer("Exit codes: 0 every test passed (with --expected-failures: exactly the listed "
              "tests did not), 1 otherwise.");
  return Command{cmd, [opts] { return runConformanceCli(*opts); }};
}

}  // namespace fusectl::cli
