// `fusectl optimize MODEL -o OUT`: run a pass pipeline (an -O level or --passes text) and write
// the optimized model, optionally with a JSON report, a numeric check against the original
// and gates on the fusion sites.
//
// The work is the library's (optimize(), libpasses/include/fusectl/passes/optimize.h); this file
// turns flags into its request and prints. Order of work: check paths and flags
// (planOptimization: exit 2 before anything is read), load, optimize() (pipeline, function
// attachment, gates), --verify in memory (verify_optimized.h), save (atomically; not at all when
// --verify found drift, since that model is wrong), hash the files and write the report, print
// the before/after table. A failed check exits 1 with one line on stderr; the report is still
// written and says why.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "commands.h"
#include "file_digest.h"
#include "input_binding.h"
#include "optimize_bisect.h"
#include "verify_optimized.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/node_numbers.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/numeric_gate.h"
#include "fusectl/passes/optimize.h"

namespace fusectl::cli {
namespace {

// See the end of runOptimize.
Model* g_model_kept_until_exit = nullptr;

using namespace fusectl::passes;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct OptimizeOptions {
  std::string model;
  std::string output;
  int level = 2;
  std::string passes;
  std::vector<std::string> disable;
  std::vector<std::string> pass_options;
  std::string report;
  std::string emit = "fusectl";
  bool verify = false;
  // The same defaults as `fusectl verify`.
  kernels::Tolerance tolerance = cliTolerance();
  uint64_t seed = 0;
  std::vector<std::string> expect;
  std::vector<std::string> fail_if_unfused;
  bool verify_each = false;
  std::vector<std::string> print_after;
  std::string dump_dir;
  int64_t max_rewrites = -1;
  bool verbose = false;
  std::vector<std::string> shapes;
  bool quiet = false;
  bool table = false;
  bool bisect = false;
  std::vector<std::string> inputs;  // --input specs for --verify, --bisect and --gate
  std::string html;
  std::string gate;  // --gate SPEC; "" when not given
};

[[noreturn]] void usage(const std::string& message) { throw Error(ErrorKind::Usage, message); }

// Same file, or (when neither exists yet) the same path once normalized.
bool samePath(const std::string& a, const std::string& b) {
  if (isSameFile(a, b)) return true;
  std::error_code ea, eb;
  fs::path pa = fs::weakly_canonical(a, ea), pb = fs::weakly_canonical(b, eb);
  return !ea && !eb && pa == pb;
}

// Output files are written at the end, the model before the report; a report that cannot be
// written must not leave a model behind, so both folders are checked before any work.
void checkFolderExists(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throwIo(fmt::format("{}: cannot write: folder '{}' does not exist", path, parent.string()));
  }
}

uint64_t fileSize(const std::string& path) {
  std::error_code ec;
  uint64_t n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

// The library's request: the pipeline, the gates and how the passes run.
OptimizeRequest requestOf(const OptimizeOptions& opts, bool level_given) {
  OptimizeRequest r;
  if (level_given) r.level = opts.level;
  r.passes = opts.passes;
  r.disable = opts.disable;
  r.pass_options = opts.pass_options;
  r.expect = opts.expect;
  r.fail_if_unfused = opts.fail_if_unfused;
  PassManagerOptions& pm = r.pass_manager;
  pm.verify_each = opts.verify_each;
  pm.print_after = opts.print_after;
  pm.dump_dir = opts.dump_dir;
  pm.max_rewrites = opts.max_rewrites;
  pm.standard_only = opts.emit == "standard";
  pm.emit_ort = opts.emit == "ort";
  // Rejection reasons are only read in the report (and by --fail-if-unfused, which optimize()
  // turns on itself).
  pm.explain = !opts.report.empty() || !opts.html.empty();
  if (opts.verbose) pm.log = [](const std::string& line) { std::cerr << line << "\n"; };
  return r;
}

// Runs the original (reloaded from its file) and the optimized model on the same seeded inputs.
Verification verifyAgainstOriginal(const OptimizeOptions& opts, const Model& optimized,
                                   const std::vector<std::pair<std::string, Shape>>& shapes) {
  LoadOptions load = loadOptions();
  load.infer_shapes = false;
  std::unique_ptr<Model> original = loadModel(opts.model, load);
  kernels::ComparisonInputs inputs;
  inputs.seed = opts.seed;
  inputs.shapes = shapes;
  // The inputs as bound (from --input files, the rest seeded): to say which were seeded when a
  // run on them fails.
  BoundInputs bound = bindInputs(*original->graph, opts.inputs, opts.seed, shapes);
  if (!opts.inputs.empty()) inputs.given.push_back(bound.tensors);
  try {
    return verifyOptimized(*original, optimized, inputs, opts.tolerance);
  } catch (const Error& e) {
    throw Error(e.kind(), opts.model + ": --verify: " + e.what() + seededInputsNote(bound));
  }
}

// --gate: optimize() on a copy of `model`, undoing the rewrites whose replacement node, run on
// its own, differs from the original beyond the thresholds (numeric_gate.h). The inputs are
// --input files or seeded (--seed), as --verify takes them.
Report optimizeGated(const OptimizeOptions& opts, std::unique_ptr<Model>& model,
                     const OptimizeRequest& request,
                     const std::vector<std::pair<std::string, Shape>>& shapes) {
  const GateThresholds thresholds = parseGateSpec(opts.gate);
  std::unique_ptr<Model> original = std::move(model);
  // As --verify binds them (files, the rest seeded), to say which were seeded on a failure.
  const BoundInputs bound = bindInputs(*original->graph, opts.inputs, opts.seed, shapes);
  const std::vector<kernels::NamedTensor>& inputs = bound.tensors;
  SiteMeasure measure = [&](const Model& optimized, const std::vector<std::string>& nodes,
                           const std::set<std::string>& redefined) {
    std::vector<SiteMeasurement> out;
    for (const kernels::NodeNumbers& n :
         kernels::measureReplacementNodes(*original, optimized, nodes, inputs, redefined)) {
      SiteMeasurement m;
      m.measured = n.measured;
      m.cosine = n.cosine;
      m.max_abs_error = n.max_abs_error;
      m.p99_abs_error = n.p99_abs_error;
      m.scale = n.scale;
      m.dtype = n.dtype;
      m.detail = n.detail;
      out.push_back(std::move(m));
    }
    return out;
  };
  GatedOptimization gated;
  try {
    gated = optimizeWithGate(*original, request, thresholds, measure);
  } catch (const Error& e) {
    throw Error(e.kind(), opts.model + ": --gate: " + e.what() + seededInputsNote(bound));
  }
  gated.report.gate.seed = opts.seed;
  model = std::move(gated.model);
  return std::move(gated.report);
}

// onnxsim-style before/after table (the rows are libpasses' summaryTable, which the HTML report
// shows too); everything but the Time line is deterministic.
std::string beforeAfterTable(const Report& r, uint64_t in_bytes, uint64_t out_bytes,
                             bool written, const std::string& timing) {
  using Row = SummaryRow;
  const SummaryTable table = summaryTable(r, SummaryFiles{in_bytes, out_bytes, written});
  const std::vector<Row>& op_rows = table.ops;
  const std::vector<Row>& total_rows = table.totals;
  size_t w0 = 4, w1 = 6, w2 = 5, w3 = 6;
  for (const std::vector<Row>* rows : {&op_rows, &total_rows}) {
    for (const Row& row : *rows) {
      w0 = std::max(w0, row.name.size());
      w1 = std::max(w1, row.before.size());
      w2 = std::max(w2, row.after.size());
      w3 = std::max(w3, row.change.size());
    }
  }
  std::string rule = fmt::format("+{}+{}+{}+{}+\n", std::string(w0 + 2, '-'),
                                 std::string(w1 + 2, '-'), std::string(w2 + 2, '-'),
                                 std::string(w3 + 2, '-'));
  auto line = [&](const Row& row) {
    return fmt::format("| {:<{}} | {:>{}} | {:>{}} | {:>{}} |\n", row.name, w0, row.before, w1,
                       row.after, w2, row.change, w3);
  };
  std::string out = rule + line({"", "before", "after", "change"}) + rule;
  for (const Row& row : op_rows) out += line(row);
  out += rule;
  for (const Row& row : total_rows) out += line(row);
  out += rule;
  // The op rows count the main graph; passes also fuse inside If/Loop/Scan bodies.
  const std::map<std::string, size_t> by_scope = r.fusionsByScope();
  if (by_scope.size() > 1 || (by_scope.size() == 1 && !by_scope.begin()->first.empty())) {
    out += "Fusion sites by scope:\n";
    for (const auto& [scope, count] : by_scope) {
      std::map<std::string, size_t> by_pass;
      for (const FusionSite& f : r.fusions)
        if (f.scope == scope) ++by_pass[f.pass];
      std::vector<std::string> passes;
      for (const auto& [pass, n] : by_pass) passes.push_back(fmt::format("{} {}", pass, n));
      out += fmt::format("  {}: {} ({})\n", scope.empty() ? "main graph" : scope, count,
                         fmt::join(passes, ", "));
    }
  }
  out += timing + "\n";
  return out;
}

// --gate's lines under the table: the counts, then one line per undone or failed site.
std::string gateSummary(const NumericGate& g) {
  std::map<std::string, size_t> by_verdict;
  for (const GatedSite& s : g.sites) ++by_verdict[s.verdict];
  std::vector<std::string> counts;
  for (const auto& [verdict, n] : by_verdict) counts.push_back(fmt::format("{} {}", n, verdict));
  std::string limits = fmt::format("cosine >= {}", g.min_cosine);
  if (std::isfinite(g.max_rel_error)) limits += fmt::format(", max rel <= {}", g.max_rel_error);
  if (std::isfinite(g.max_abs_error)) limits += fmt::format(", max abs <= {}", g.max_abs_error);
  if (std::isfinite(g.max_p99_abs_error)) limits += fmt::format(", p99 abs <= {}", g.max_p99_abs_error);
  std::string out = fmt::format(
      "Gate ({}): {} sites: {}; {} optimization run{}\n", limits,
      g.sites.size(), counts.empty() ? "none" : fmt::format("{}", fmt::join(counts, ", ")),
      g.rounds, g.rounds == 1 ? "" : "s");
  for (const GatedSite& s : g.sites) {
    if (s.verdict != "undone" && s.verdict != "failed") continue;
    out += fmt::format("  {} {} ({} at {}): {}\n", s.verdict, s.new_node, s.pass, s.anchor,
                       s.detail);
  }
  return out;
}

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// --bisect: the flags it cannot combine with are refused; -o is optional.
int runBisect(const OptimizeOptions& opts, bool level_given) {
  if (!opts.report.empty() || !opts.html.empty() || opts.verify || !opts.expect.empty() ||
      !opts.fail_if_unfused.empty() || opts.max_rewrites >= 0 || opts.table ||
      !opts.gate.empty()) {
    usage("--bisect does not combine with --report, --html, --verify, --expect, "
          "--fail-if-unfused, --max-rewrites, --gate or --table");
  }
  if (!opts.output.empty()) {
    if (isSameFile(opts.model, opts.output)) {
      usage(fmt::format("{}: output is the input file; write to another path", opts.output));
    }
    checkFolderExists(opts.output);
  }
  checkTolerance(opts.tolerance);
  BisectOptions b;
  b.model = opts.model;
  b.output = opts.output;
  b.request = requestOf(opts, level_given);
  planOptimization(b.request);  // a bad pipeline is a usage error before anything is read
  b.inputs = opts.inputs;
  b.seed = opts.seed;
  b.shapes = parseShapeSpecs(opts.shapes);
  b.tolerance = opts.tolerance;
  b.quiet = opts.quiet;
  return runOptimizeBisect(b);
}

int runOptimize(const OptimizeOptions& opts, bool level_given, bool tolerance_given) {
  if (opts.emit == "ort" && (opts.verify || !opts.gate.empty() || opts.bisect)) {
    usage("--verify, --gate and --bisect run fusectl's executor, which does not run ONNX "
          "Runtime's contrib ops that --emit ort writes; check that output in ONNX Runtime");
  }
  if (opts.bisect) return runBisect(opts, level_given);
  if (opts.output.empty()) usage("-o OUT is required: optimize never overwrites its input");
  if (isSameFile(opts.model, opts.output)) {
    usage(fmt::format("{}: output is the input file; write to another path", opts.output));
  }
  if (!opts.report.empty()) {
    if (isSameFile(opts.report, opts.model)) {
      usage(fmt::format("{}: --report would overwrite the input model", opts.report));
    }
    if (samePath(opts.report, opts.output)) {
      usage(fmt::format("{}: --report and -o name the same file", opts.report));
    }
  }
  if (!opts.html.empty()) {
    checkHtmlPath(opts.html, {opts.model});
    if (samePath(opts.html, opts.output) || (!opts.report.empty() && samePath(opts.html, opts.report))) {
      usage(fmt::format("{}: --html names the same file as -o or --report", opts.html));
    }
  }
  if ((tolerance_given || !opts.inputs.empty()) && !opts.verify && opts.gate.empty()) {
    usage("--atol, --rtol, --rtol-scale, --min-cosine, --seed and --input need --verify, --gate "
          "or --bisect");
  }
  if (!opts.gate.empty()) {
    if (opts.max_rewrites >= 0) usage("--gate does not combine with --max-rewrites");
    parseGateSpec(opts.gate);  // a bad spec is a usage error before anything is read
  }
  checkTolerance(opts.tolerance);
  checkPrintAfterNames(opts.print_after);
  const auto shapes = parseShapeSpecs(opts.shapes);
  const OptimizeRequest request = requestOf(opts, level_given);
  const Pipeline pipeline = planOptimization(request).pipeline;
  checkFolderExists(opts.output);
  if (!opts.report.empty()) checkFolderExists(opts.report);

  const auto start = Clock::now();
  LoadOptions load = loadOptions();
  load.input_shapes = shapes;
  std::unique_ptr<Model> model = loadModel(opts.model, load);
  const double load_ms = msSince(start);

  const auto passes_start = Clock::now();
  Report report = opts.gate.empty() ? optimize(*model, request)
                                     : optimizeGated(opts, model, request, shapes);
  const double passes_ms = msSince(passes_start);

  double verify_ms = 0;
  if (opts.verify) {
    const auto t = Clock::now();
    report.verification = verifyAgainstOriginal(opts, *model, shapes);
    verify_ms = msSince(t);
  }
  const bool drift = report.verification.ran && !report.verification.passed;

  double save_ms = 0;
  std::string output_external_file;  // relative to the output's folder; "" for none
  if (!drift) {
    const auto t = Clock::now();
    output_external_file = saveModel(*model, opts.output);
    save_ms = msSince(t);
  }

  const uint64_t in_bytes = fileSize(opts.model);
  const uint64_t out_bytes = drift ? 0 : fileSize(opts.output);
  if (!opts.report.empty()) {
    // A model is its file and its external-data files: all of them are hashed.
    report.input = digestFile(opts.model, opts.model);
    report.input_external_data = digestExternalFiles(opts.model, model->external_data_files);
    if (!drift) {
      report.output = digestFile(opts.output, opts.output);
      if (!output_external_file.empty())
        report.output_external_data = digestExternalFiles(opts.output, {output_external_file});
    }
    writeFileAtomically(opts.report, report.toJson());
  }
  if (!opts.html.empty()) {
    LoadOptions original_load = loadOptions();
    original_load.input_shapes = shapes;
    std::unique_ptr<Model> original = loadModel(opts.model, original_load);
    HtmlPageSides sides;
    sides.title = fmt::format("fusectl optimize: {}", fs::path(opts.model).filename().string());
    sides.before_name = opts.model;
    sides.after_name = drift ? "optimized (not written: --verify found drift)" : opts.output;
    sides.before = original.get();
    sides.after = model.get();
    sides.files = {in_bytes, out_bytes, !drift};
    writeHtmlPage(opts.html, sides, &report, nullptr);
  }

  const bool show_table = !opts.quiet && (opts.table || isatty(fileno(stdout)));
  if (show_table) {
    std::string timing = fmt::format(
        "Time: {:.1f} ms (load {:.1f}, passes {:.1f}{}, save {:.1f})", msSince(start), load_ms,
        passes_ms, opts.verify ? fmt::format(", verify {:.1f}", verify_ms) : "", save_ms);
    std::cout << fmt::format("fusectl optimize {} -> {}: {}\n", opts.model,
                             drift ? std::string("(not written)") : opts.output,
                             pipeline.empty() ? "(empty pipeline)" : pipeline.str());
    std::cout << beforeAfterTable(report, in_bytes, out_bytes, !drift, timing);
    if (report.gate.ran) std::cout << gateSummary(report.gate);
    std::cout.flush();
    if (!std::cout) throwIo("<stdout>: write failed");
  }

  // The process ends right after this command: freeing a million-node graph object by object
  // took over a second, for memory the kernel reclaims at exit anyway (compilers skip it too,
  // e.g. clang's -disable-free). Everything was written and flushed above. The pointer stays
  // in a global, so that the memory is still reachable (as it is, until exit) and a leak
  // checker (the sanitizer build's LeakSanitizer) does not report it.
  g_model_kept_until_exit = model.release();

  std::vector<std::string> failures;
  if (drift) {
    for (const VerificationOutput& o : report.verification.outputs) {
      if (o.passed) continue;
      failures.push_back(fmt::format("--verify: output '{}' drifted: {}; {} not written",
                                     o.name, o.detail, opts.output));
      break;
    }
  }
  for (const Expectation& e : report.expectations)
    if (!e.passed) failures.push_back(e.detail);
  for (const GatedSite& g : report.gate.sites) {
    if (g.verdict != "failed") continue;
    failures.push_back(fmt::format("--gate: {} ({} at {}) is outside the thresholds: {}",
                                   g.new_node, g.pass, g.anchor, g.detail));
    break;
  }
  if (failures.empty()) return 0;
  std::fflush(stdout);
  std::fputs(fmt::format("fusectl: check failed: {}\n", fmt::join(failures, "; ")).c_str(),
             stderr);
  return 1;
}

}  // namespace

Command addOptimizeCommand(CLI::App& parent) {
  auto opts = std::make_shared<OptimizeOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "optimize", "Run an optimization pipeline on a model and write the result");
  cmd->add_option("MODEL", opts->model, "Model file (.onnx, or .onnxtxt for ONNX text)")
      ->required();
  cmd->add_option("-o,--output", opts->output,
                  "Output model; .onnxtxt or .txt writes ONNX text, anything else binary. "
                  "Never the input itself; required except with --bisect")
      ->type_name("OUT");
  CLI::Option* level = cmd->add_option("-O", opts->level,
                                       "Optimization level 0-3 (docs/passes.md), e.g. -O3")
                           ->type_name("LEVEL")
                           ->capture_default_str();
  cmd->add_option("--passes", opts->passes,
                  "Pipeline text instead of a level, e.g. 'eliminate-identity,fold-conv-bn'")
      ->type_name("PIPELINE");
  cmd->add_option("--disable", opts->disable, "Leave out pass NAME (repeatable)")
      ->type_name("NAME")
      ->allow_extra_args(false);
  cmd->add_option("--pass-option", opts->pass_options,
                  "Options for a pass of the pipeline, e.g. 'merge-parallel-matmuls{narrow=true}' "
                  "(repeatable)")
      ->type_name("PASS{KEY=VALUE}")
      ->allow_extra_args(false);
  cmd->add_option("--report", opts->report,
                  "Write the JSON report (docs/schemas/report.schema.json) to FILE")
      ->type_name("FILE.json");
  cmd->add_option("--html", opts->html,
                  "Also write one self-contained HTML page of what changed (fusectl report)")
      ->type_name("FILE.html");
  cmd->add_option("--emit", opts->emit,
                  "fusectl: fusectl-domain ops allowed; standard: only standard ONNX ops; ort: ONNX "
                  "Runtime contrib ops (com.microsoft) where one runs a fusion")
      ->check(CLI::IsMember({"fusectl", "standard", "ort"}))
      ->capture_default_str();
  cmd->add_flag("--verify", opts->verify,
                "Run the original and the optimized model on seeded inputs; exit 1 on drift");
  const ToleranceOptions tolerance =
      addToleranceOptions(*cmd, opts->tolerance, "With --verify: ", "original");
  CLI::Option* seed = cmd->add_option("--seed", opts->seed, "With --verify: input seed")
                          ->capture_default_str();
  cmd->add_option("--expect", opts->expect,
                  "Exit 1 unless exactly COUNT fusion sites of PATTERN (a pass or pattern name)")
      ->type_name("PATTERN=COUNT")
      ->allow_extra_args(false);
  cmd->add_option("--fail-if-unfused", opts->fail_if_unfused,
                  "Exit 1 when a legality condition kept a candidate of PATTERN from fusing")
      ->type_name("PATTERN")
      ->allow_extra_args(false);
  cmd->add_flag("--verify-each", opts->verify_each,
                "Check graph invariants after every pass, naming the pass that broke them");
  cmd->add_option("--print-after", opts->print_after,
                  "Print the model (ONNX text, on stderr) after each run of pass NAME, or all")
      ->type_name("NAME")
      ->allow_extra_args(false);
  cmd->add_option("--dump-dir", opts->dump_dir,
                  "Write DIR/00-input.onnx and DIR/NN-<pass>.onnx(.onnxtxt) after each pass")
      ->type_name("DIR");
  cmd->add_option("--max-rewrites", opts->max_rewrites,
                  "Stop after N rewrites in total (to bisect a bad rewrite)")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--bisect", opts->bisect,
                "Find the first rewrite after which the model differs from the original beyond "
                "--atol/--rtol/--min-cosine (halving --max-rewrites); -o then gets the model "
                "with the rewrites before it");
  cmd->add_option("--gate", opts->gate,
                  "Check every fusion numerically and undo those outside the thresholds: "
                  "'default' (cosine=0.99999,max-rel=1e-4: the largest error over the largest "
                  "|original| of the site's output) or cosine=C,max-rel=R,max-abs=A,p99-abs=P; "
                  "each site's replacement runs on the original's values of its inputs "
                  "(--input files or --seed data); the report's 'gate' lists every site")
      ->type_name("SPEC");
  cmd->add_option("--input", opts->inputs,
                  "With --verify, --gate or --bisect: NAME=FILE (.npy or .pb) for a graph input "
                  "instead of seeded data (repeatable)")
      ->type_name("NAME=FILE")
      ->allow_extra_args(false);
  cmd->add_flag("-v,--verbose", opts->verbose, "One line per pass run on stderr");
  cmd->add_option("--shape", opts->shapes,
                  "Fix an input's shape before optimizing, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS")
      ->allow_extra_args(false);
  CLI::Option* table = cmd->add_flag(
      "--table", opts->table, "Print the before/after table even when stdout is not a terminal");
  cmd->add_flag("-q,--quiet", opts->quiet, "Print nothing on success")->excludes(table);
  cmd->footer(
      "Without --passes the pipeline is the -O level's (default -O2); 'fusectl passes' lists "
      "both.\nExit codes: 0 done; 1 --verify found drift (OUT not written) or an --expect / "
      "--fail-if-unfused gate failed (OUT and the report written), or --bisect found a rewrite "
      "that breaks the outputs; 2 usage, including OUT or "
      "the report naming the input; 3 invalid model; 4 I/O error; 5 unsupported op (--verify), "
      "or --html without Graphviz's dot.");
  return Command{cmd, [opts, level, tolerance, seed] {
                   const bool tolerance_given = tolerance.given() + seed->count() > 0;
                   return runOptimize(*opts, level->count() > 0, tolerance_given);
                 }};
}

}  // namespace fusectl::cli
