// `fusectl report MODEL -o report.html`: optimize MODEL in memory and write one self-contained
// HTML page of what changed (summary, both graphs, fusion sites, rejections, optionally
// timings). Also the page writer of `optimize --html` and `diff --html` (writeHtmlPage).
//
// The page is libpasses' renderHtmlReport (fusectl/passes/html_report.h); the numeric check is
// verify_optimized.h's and the timings libkernels' profileModels(), both handed to the page as
// data. Order of work: flags and paths (exit 2 before anything is read), load, optimize a
// copy, check numerics (unless --no-verify), profile (with --profile), render (runs Graphviz's
// dot), write atomically.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "commands.h"
#include "input_binding.h"
#include "profile_output.h"
#include "verify_optimized.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/profile.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/optimize.h"

namespace fusectl::cli {

namespace fs = std::filesystem;

void checkHtmlPath(const std::string& html, const std::vector<std::string>& inputs) {
  for (const std::string& in : inputs) {
    if (isSameFile(html, in)) {
      throw Error(ErrorKind::Usage, fmt::format("{}: the HTML report would overwrite an input",
                                                html));
    }
  }
  fs::path parent = fs::path(html).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throwIo(fmt::format("{}: cannot write: folder '{}' does not exist", html, parent.string()));
  }
}

uint64_t fileBytes(const std::string& path) {
  std::error_code ec;
  uint64_t n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

void writeHtmlPage(const std::string& path, const HtmlPageSides& sides,
                   const passes::Report* report, const passes::HtmlTimings* timings) {
  const passes::GraphDiff diff = passes::diffGraphs(*sides.before->graph, *sides.after->graph);
  passes::HtmlReportInput in;
  in.title = sides.title;
  in.before_name = sides.before_name;
  in.after_name = sides.after_name;
  in.before = sides.before;
  in.after = sides.after;
  in.report = report;
  in.diff = &diff;
  in.files = sides.files;
  in.timings = timings;
  writeFileAtomically(path, passes::renderHtmlReport(in));
}

namespace {

using namespace fusectl::passes;

struct ReportOptions {
  std::string model;
  std::string output;
  int level = 2;
  std::string passes;
  std::vector<std::string> disable;
  std::vector<std::string> pass_options;
  std::string emit = "fusectl";
  std::vector<std::string> shapes;
  bool no_verify = false;
  uint64_t seed = 0;
  bool profile = false;
  int runs = 20;
  int warmup = 3;
  int threads = 1;
};

[[noreturn]] void usage(const std::string& message) { throw Error(ErrorKind::Usage, message); }

HtmlTimings measure(const ReportOptions& opts, const Model& before, const Model& after,
                    const Report& report,
                    const std::vector<std::pair<std::string, Shape>>& shapes) {
  BoundInputs bound = bindInputs(*before.graph, {}, opts.seed, shapes);
  kernels::ProfileOptions options;
  options.runs = opts.runs;
  options.warmup = opts.warmup;
  options.execution.num_threads = opts.threads;
  const kernels::ProfileResult result = kernels::profileModels(
      &before, &after, bound.tensors, profileFusionSites(report, after), options);
  HtmlTimings t;
  for (const kernels::NodeProfile& n : result.unfused->nodes) {
    t.before.push_back({n.node, n.median_seconds, n.share});
  }
  for (const kernels::NodeProfile& n : result.fused->nodes) {
    t.after.push_back({n.node, n.median_seconds, n.share});
  }
  for (const kernels::FusionSiteProfile& s : result.fusion_sites) {
    t.sites.push_back({s.status, s.fused_seconds, s.replaced_seconds});
  }
  t.note = fmt::format("median per node of {} runs after {} warmup, {} thread{}; whole model "
                       "{:.3f} ms before, {:.3f} ms after (median); they differ run to run",
                       opts.runs, opts.warmup, opts.threads, opts.threads == 1 ? "" : "s",
                       result.unfused->latency.median * 1e3,
                       result.fused->latency.median * 1e3);
  return t;
}

int runReport(const ReportOptions& opts, bool level_given) {
  if (opts.runs < 1) usage("--runs must be at least 1");
  if (opts.warmup < 0) usage("--warmup must be >= 0");
  if (opts.threads < 0) usage("--threads must be >= 0");
  checkHtmlPath(opts.output, {opts.model});
  const auto shapes = parseShapeSpecs(opts.shapes);
  OptimizeRequest request;
  if (level_given) request.level = opts.level;
  request.passes = opts.passes;
  request.disable = opts.disable;
  request.pass_options = opts.pass_options;
  request.pass_manager.standard_only = opts.emit == "standard";
  request.pass_manager.emit_ort = opts.emit == "ort";
  request.pass_manager.explain = true;  // the page lists every rejection
  (void)planOptimization(request);      // a bad pipeline is a usage error before any load

  LoadOptions load = loadOptions();
  load.input_shapes = shapes;
  std::unique_ptr<Model> before = loadModel(opts.model, load);
  std::unique_ptr<Model> after = before->clone();
  Report report = optimize(*after, request);
  if (!opts.no_verify) {
    kernels::ComparisonInputs inputs;
    inputs.seed = opts.seed;
    inputs.shapes = shapes;
    report.verification = verifyOptimized(*before, *after, inputs, cliTolerance());
  }
  std::optional<HtmlTimings> timings;
  if (opts.profile) timings = measure(opts, *before, *after, report, shapes);

  HtmlPageSides sides;
  sides.title = fmt::format("fusectl report: {}", fs::path(opts.model).filename().string());
  sides.before_name = opts.model;
  // The pipeline itself is on the page under the title.
  sides.after_name = !opts.passes.empty() ? "optimized (--passes)"
                     : level_given        ? fmt::format("optimized (-O{})", opts.level)
                                          : "optimized (-O2)";
  sides.before = before.get();
  sides.after = after.get();
  sides.files.input_bytes = fileBytes(opts.model);
  sides.files.output_written = false;  // the optimized model stays in memory
  writeHtmlPage(opts.output, sides, &report, timings ? &*timings : nullptr);
  std::cout << fmt::format("{}: {} fusion sites, {} rejected candidates{}\n", opts.output,
                           report.fusions.size(), report.rejections.size(),
                           report.verification.ran
                               ? (report.verification.passed ? ", numeric check passed"
                                                             : ", numeric check FAILED")
                               : "");
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  if (report.verification.ran && !report.verification.passed) {
    std::fputs("fusectl: check failed: the optimized model drifted from the original (see the "
               "report's summary)\n",
               stderr);
    return 1;
  }
  return 0;
}

}  // namespace

Command addReportCommand(CLI::App& parent) {
  auto opts = std::make_shared<ReportOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "report", "Optimize a model in memory and write one self-contained HTML page of what "
                "changed");
  cmd->add_option("MODEL", opts->model, "Model file (.onnx, or .onnxtxt for ONNX text)")
      ->required();
  cmd->add_option("-o,--output", opts->output, "The HTML file to write")
      ->type_name("OUT.html")
      ->required();
  CLI::Option* level = cmd->add_option("-O", opts->level,
                                       "Optimization level 0-3 (docs/passes.md), default -O2")
                           ->type_name("LEVEL")
                           ->check(CLI::Range(0, 3));
  cmd->add_option("--passes", opts->passes, "Pipeline text instead of a level")
      ->type_name("PIPELINE")
      ->excludes(level);
  cmd->add_option("--disable", opts->disable, "Leave out pass NAME (repeatable)")
      ->type_name("NAME")
      ->allow_extra_args(false);
  cmd->add_option("--pass-option", opts->pass_options,
                  "Options for a pass of the pipeline, e.g. 'merge-parallel-matmuls{narrow=true}' "
                  "(repeatable)")
      ->type_name("PASS{KEY=VALUE}")
      ->allow_extra_args(false);
  cmd->add_option("--emit", opts->emit,
                  "fusectl: fusectl-domain ops allowed; standard: only standard ONNX ops")
      ->check(CLI::IsMember({"fusectl", "standard", "ort"}))
      ->capture_default_str();
  cmd->add_option("--shape", opts->shapes, "Fix an input's dims, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS")
      ->allow_extra_args(false);
  cmd->add_flag("--no-verify", opts->no_verify,
                "Skip the numeric check (original against optimized on seeded inputs)");
  cmd->add_option("--seed", opts->seed, "Seed of the inputs of the check and --profile")
      ->capture_default_str();
  CLI::Option* profile = cmd->add_flag(
      "--profile", opts->profile,
      "Time both models (as `fusectl profile`): colour nodes by share of time, paid column");
  cmd->add_option("--runs", opts->runs, "With --profile: timed runs per side")
      ->capture_default_str()
      ->needs(profile);
  cmd->add_option("--warmup", opts->warmup, "With --profile: untimed runs per side first")
      ->capture_default_str()
      ->needs(profile);
  cmd->add_option("--threads", opts->threads, "With --profile: threads per kernel (0 = all)")
      ->capture_default_str()
      ->needs(profile);
  cmd->footer(
      "The page is deterministic for the same model and flags, except --profile's timings. "
      "Graphviz's `dot` lays out the graphs.\nExit codes: 0 written; 1 the numeric check "
      "failed (page still written); 2 usage; 3 invalid model; 4 I/O error; 5 unsupported "
      "(no `dot` program, an op without a kernel: use --no-verify).");
  return Command{cmd, [opts, level] { return runReport(*opts, level->count() > 0); }};
}

}  // namespace fusectl::cli
