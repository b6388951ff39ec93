// `fusectl profile MODEL`: the model as given ("unfused") against the optimizer's output
// ("fused"), run alternately on the same inputs, with per-op, per-node and per-fusion-site
// figures; optionally as JSON (docs/schemas/profile.schema.json), a Chrome trace and an
// annotated model, and gated against a saved report.
//
// The measuring is the library's (kernels::profileModels, fusectl/kernels/profile.h); the
// optimizing is libpasses' optimize(). This file parses flags, feeds one to the other, prints
// and writes. Order of work: every flag and the baseline checked (exit 2 / 3 / 4 before any
// model is read), load the model twice, optimize one copy in memory, make the inputs, profile,
// print, write the files, then the gates (outputs agree, --baseline).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "input_binding.h"
#include "profile_output.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/npy.h"
#include "fusectl/kernels/profile.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/optimize.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::kernels;
using Json = nlohmann::ordered_json;

struct ProfileCliOptions {
  std::string model;
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  std::vector<std::string> shapes;
  int level = 3;
  std::string passes;
  std::vector<std::string> disable;
  std::vector<std::string> pass_options;
  std::string emit = "fusectl";
  int warmup = 3;
  int runs = 20;
  int threads = 1;
  int top = 10;
  std::string json;
  std::string trace;
  std::string annotate;
  std::string device = "cpu";
  bool cuda_graph = true;
  std::string only;
  std::string baseline;
  double max_regression = 5;
  kernels::Tolerance tolerance = cliTolerance();
};

[[noreturn]] void usage(const std::string& message) { throw Error(ErrorKind::Usage, message); }

std::string readTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throwIo(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  return ss.str();
}

// The side a gate compares: the fused one, unless only the unfused side runs.
std::string gatedSide(const ProfileCliOptions& opts) {
  return opts.only == "unfused" ? "unfused" : "fused";
}

// The saved report's median for the gated side, in ms; read before any work so that a bad
// baseline fails fast.
double baselineMedianMs(const ProfileCliOptions& opts) {
  const std::string text = readTextFile(opts.baseline);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception&) {
    throwInvalid(fmt::format("{}: --baseline: not JSON (expected a `fusectl profile --json` "
                             "report)",
                             opts.baseline));
  }
  if (!j.is_object() || (j.contains("schema") && j["schema"] != kProfileSchema)) {
    throwInvalid(fmt::format("{}: --baseline: not a `fusectl profile --json` report ({})",
                             opts.baseline, kProfileSchema));
  }
  const std::string side = gatedSide(opts);
  const Json* sides = j.contains("sides") && j["sides"].is_object() ? &j["sides"] : nullptr;
  if (!sides || !sides->contains(side) || !(*sides)[side].is_object() ||
      !(*sides)[side].contains("median_ms") || !(*sides)[side]["median_ms"].is_number() ||
      (*sides)[side]["median_ms"].get<double>() <= 0) {
    throwInvalid(fmt::format("{}: --baseline: no positive sides.{}.median_ms to compare with",
                             opts.baseline, side));
  }
  return (*sides)[side]["median_ms"].get<double>();
}

void checkOutputPath(const std::string& flag, const std::string& path,
                     const ProfileCliOptions& opts) {
  if (path.empty()) return;
  if (isSameFile(path, opts.model)) {
    usage(fmt::format("{}: {} would overwrite the input model", path, flag));
  }
}

// "\rprofile: fused 7/20" on a terminal, overwritten and cleared at the end. At most ten
// updates a second: a write between two timed runs is a pause the machine did not need.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  ~ProgressLine() { clear(); }
  void show(const ProfileProgress& p) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (width_ > 0 && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    std::string line = fmt::format("profile: {} {}{}{}/{}", p.side,
                                   p.node_times ? "per-node " : "", p.warmup ? "warmup " : "",
                                   p.done + 1, p.total);
    width_ = std::max(width_, line.size());
    std::fprintf(stderr, "\r%-*s", static_cast<int>(width_), line.c_str());
    std::fflush(stderr);
  }
  void clear() {
    if (!enabled_ || width_ == 0) return;
    std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
    std::fflush(stderr);
    width_ = 0;
  }

 private:
  bool enabled_;
  size_t width_ = 0;
  std::chrono::steady_clock::time_point last_;
};

int runProfile(const ProfileCliOptions& opts, bool level_given, bool cuda_graph_given) {
  if (opts.runs < 1) usage("--runs must be at least 1");
  if (opts.warmup < 0) usage("--warmup must be >= 0");
  if (opts.threads < 0) usage("--threads must be >= 0");
  if (opts.top < 0) usage("--top must be >= 0");
  checkTolerance(opts.tolerance);
  if (opts.max_regression < 0) usage("--max-regression must be >= 0");
  if (cuda_graph_given && opts.cuda_graph && opts.device != "cuda") {
    usage("--cuda-graph needs --device cuda");
  }
  const kernels::Backend* backend = deviceBackend(opts.device);
  checkOutputPath("--json", opts.json, opts);
  checkOutputPath("--trace", opts.trace, opts);
  checkOutputPath("--annotate", opts.annotate, opts);
  const auto shapes = parseShapeSpecs(opts.shapes);

  passes::OptimizeRequest request;
  if (level_given || opts.passes.empty()) request.level = opts.level;
  request.passes = opts.passes;
  request.disable = opts.disable;
  request.pass_options = opts.pass_options;
  request.pass_manager.standard_only = opts.emit == "standard";
  const std::string pipeline = passes::planOptimization(request).pipeline.str();
  const std::string pipeline_name =
      opts.passes.empty() ? fmt::format("-O{}", opts.level) : "--passes " + opts.passes;
  const double baseline_ms = opts.baseline.empty() ? 0 : baselineMedianMs(opts);

  LoadOptions load = loadOptions();
  load.prefault_weights = false;  // the executor packs each weight and lets its pages go
  load.input_shapes = shapes;
  std::unique_ptr<Model> unfused = loadModel(opts.model, load);
  std::unique_ptr<Model> fused;
  std::vector<FusionSiteInput> sites;
  if (opts.only != "unfused") {
    fused = unfused->clone();  // one set of weights in memory; the passes copy what they change
    const passes::Report report = passes::optimize(*fused, request);
    sites = profileFusionSites(report, *fused);
  }

  BoundInputs bound = bindInputs(*unfused->graph, opts.inputs, opts.seed, shapes);
  const std::vector<NamedTensor>& inputs = bound.tensors;
  std::vector<std::string>& sources = bound.sources;

  ProfileOptions options;
  options.warmup = opts.warmup;
  options.runs = opts.runs;
  options.sides = opts.only == "fused"     ? ProfiledSides::FusedOnly
                  : opts.only == "unfused" ? ProfiledSides::UnfusedOnly
                                           : ProfiledSides::Both;
  options.execution.num_threads = opts.threads;
  options.execution.backend = backend;
  options.execution.capture_graph = opts.device == "cuda" && opts.cuda_graph;
  options.tolerance = opts.tolerance;
  ProgressLine progress(isatty(STDERR_FILENO) != 0);
  options.progress = [&progress](const ProfileProgress& p) { progress.show(p); };
  ProfileResult result;
  try {
    result = profileModels(unfused.get(), fused.get(), inputs, sites, options);
  } catch (const Error& e) {
    progress.clear();
    throw Error(e.kind(), opts.model + ": " + e.what() + seededInputsNote(bound));
  }
  progress.clear();

  ProfileRequestInfo info;
  info.model = opts.model;
  info.pipeline = pipeline;
  info.pipeline_name = pipeline_name;
  info.device = opts.device;
  info.only = opts.only;
  info.top = opts.top;
  info.inputs = &inputs;
  info.sources = sources;
  info.tolerance = options.tolerance;
  printProfile(info, result);
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");

  if (!opts.json.empty()) writeFileAtomically(opts.json, profileReportJson(info, result));
  if (!opts.trace.empty()) writeFileAtomically(opts.trace, profileTraceJson(result));
  if (!opts.annotate.empty()) {
    Model& model = opts.only == "unfused" ? *unfused : *fused;
    const SideProfile& side = opts.only == "unfused" ? *result.unfused : *result.fused;
    annotateModel(model, side, profileAnnotation(result, side, pipeline_name));
    saveModel(model, opts.annotate);
  }

  std::vector<std::string> failures;
  if (result.agreement && !result.agreement->passed) {
    for (const OutputComparison& o : result.agreement->outputs) {
      if (o.passed) continue;
      failures.push_back(fmt::format("outputs differ: output '{}': {}", o.name, o.detail));
      break;
    }
  }
  if (!opts.baseline.empty()) {
    const SideProfile& side = opts.only == "unfused" ? *result.unfused : *result.fused;
    const RegressionCheck check =
        checkRegression(side.latency.median * 1e3, baseline_ms, opts.max_regression);
    fmt::print("baseline: {} median {:.4f} ms now vs {:.4f} ms in {}: {:+.1f}% (limit +{:g}%): "
               "{}\n",
               side.name, check.current, check.baseline, opts.baseline, check.change_percent,
               opts.max_regression, check.regressed ? "REGRESSION" : "ok");
    if (check.regressed) {
      failures.push_back(fmt::format("{} median {:.4f} ms is {:+.1f}% against {:.4f} ms in {} "
                                     "(--max-regression {:g})",
                                     side.name, check.current, check.change_percent,
                                     check.baseline, opts.baseline, opts.max_regression));
    }
  }
  std::cout.flush();
  if (failures.empty()) return 0;
  std::fputs(fmt::format("fusectl: check failed: {}\n", fmt::join(failures, "; ")).c_str(),
             stderr);
  return 1;
}

}  // namespace

Command addProfileCommand(CLI::App& parent) {
  auto opts = std::make_shared<ProfileCliOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "profile", "Time a model as given against its optimized form, run alternately");
  cmd->add_option("MODEL", opts->model, "Model file (.onnx, or .onnxtxt for ONNX text)")
      ->required();
  CLI::Option* level = cmd->add_option("-O", opts->level,
                                       "Optimization level 0-3 of the fused side (default -O3)")
                           ->type_name("LEVEL")
                           ->check(CLI::Range(0, 3));
  cmd->add_option("--passes", opts->passes, "Pipeline text for the fused side instead of -O")
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
      ->check(CLI::IsMember({"fusectl", "standard"}))
      ->capture_default_str();
  cmd->add_option("--input", opts->inputs,
                  "Input data: NAME=FILE or FILE (the next input in order); .npy or TensorProto "
                  ".pb. Inputs not given get seeded random data")
      ->type_name("NAME=FILE")
      ->allow_extra_args(false);
  cmd->add_option("--seed", opts->seed, "Seed for random inputs")->capture_default_str();
  cmd->add_option("--shape", opts->shapes, "Fix an input's dims, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS")
      ->allow_extra_args(false);
  cmd->add_option("--warmup", opts->warmup, "Untimed runs per side first")->capture_default_str();
  cmd->add_option("--runs", opts->runs, "Timed runs per side")->capture_default_str();
  cmd->add_option("--threads", opts->threads, "Threads per kernel (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--top", opts->top, "Slowest nodes listed per side")->capture_default_str();
  addDeviceOption(*cmd, opts->device);
  CLI::Option* cuda_graph = cmd->add_flag(
      "--cuda-graph,!--no-cuda-graph", opts->cuda_graph,
      "--device cuda: each side's timed runs replay a CUDA Graph recorded in its warmup (on by "
      "default; needs --warmup 2 or more, no node on the CPU and no host reads of computed "
      "values, else the runs are queued node by node and the output says why)");
  cmd->add_option("--only", opts->only, "Profile one side only: fused or unfused")
      ->check(CLI::IsMember({"fused", "unfused"}));
  cmd->add_option("--json", opts->json,
                  "Write the report (docs/schemas/profile.schema.json) to FILE")
      ->type_name("FILE");
  cmd->add_option("--trace", opts->trace,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of each side's median run")
      ->type_name("FILE");
  cmd->add_option("--annotate", opts->annotate,
                  "Write the fused model with each node's median time in its doc_string")
      ->type_name("OUT.onnx");
  cmd->add_option("--baseline", opts->baseline,
                  "A saved --json report: exit 1 when the fused median is slower than its by "
                  "more than --max-regression")
      ->type_name("REPORT.json");
  cmd->add_option("--max-regression", opts->max_regression, "Percent slower --baseline allows")
      ->type_name("PCT")
      ->capture_default_str();
  addToleranceOptions(*cmd, opts->tolerance, "Outputs agree: ", "unfused");
  cmd->footer(
      "Exit codes: 0 done; 1 the outputs differ or --baseline found a regression (files still "
      "written); 2 usage; 3 invalid model or baseline; 4 I/O error; 5 unsupported (an op "
      "without a kernel; --device cuda without a usable GPU). See docs/cli.md.");
  return Command{cmd, [opts, level, cuda_graph] {
    return runProfile(*opts, level->count() > 0, cuda_graph->count() > 0);
  }};
}

}  // namespace fusectl::cli
