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
};

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
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  if (report.results.empty()) {
    throw Error(ErrorKind::Usage,
                fmt::format("no test under {} matches{}", opts.dir,
                            opts.filter.empty() ? "" : " --filter '" + opts.filter + "'"));
  }
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
  cmd->footer("Exit codes: 0 every test passed, 1 some test failed or is unsupported.");
  return Command{cmd, [opts] { return runConformanceCli(*opts); }};
}

}  // namespace fusectl::cli
