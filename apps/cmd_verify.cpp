// `fusectl verify A B`: run two models on the same inputs (seeded, or files given by --input)
// and compare their outputs.
//
// Outputs are matched by name; every output of either model must exist in the other, and both
// models must take the same inputs (names and dtypes), else it is an error (exit 3). An output
// passes when, in every run, each element satisfies |b - a| <= atol + rtol * max |a| (the
// output's largest magnitude; with --rtol-scale element, |a| of that element) (NaN only where
// A has NaN, infinities equal) and cosine(a, b) >= min-cosine; integer and bool outputs must be
// equal. Exit 0 when every output passes, 1 otherwise.
//
// --json prints one object:
//   {"model_a": str, "model_b": str, "runs": int, "seed": int,
//    "inputs": [{"name": str, "source": str}]  (first run: a file, or "random, seed N"),
//    "atol": num, "rtol": num, "rtol_scale": "tensor"|"element", "min_cosine": num,
//    "passed": bool,
//    "outputs": [{"name": str, "dtype": str, "shape": [int...], "max_abs_error": num,
//                 "max_rel_error": num, "cosine": num, "mismatches": int, "passed": bool,
//                 "detail": str}]}
// Each output's figures are the worst over all runs (largest errors, smallest cosine, summed
// mismatches); "shape" is from A's first run; a non-finite error is written as null.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "input_binding.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::kernels;

struct VerifyOptions {
  std::string model_a;
  std::string model_b;
  Tolerance tolerance = cliTolerance();
  int runs = 1;
  uint64_t seed = 0;
  bool json = false;
  std::vector<std::string> shapes;
  std::vector<std::string> inputs;  // --input NAME=FILE or FILE
  int threads = 1;
  std::string device = "cpu";
};

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

int runVerify(const VerifyOptions& opts) {
  if (opts.runs < 1) throw Error(ErrorKind::Usage, "--runs must be at least 1");
  checkTolerance(opts.tolerance);
  const auto shapes = parseShapeSpecs(opts.shapes);

  LoadOptions load = loadOptions();
  load.prefault_weights = false;  // the executor packs each weight and lets its pages go
  load.infer_shapes = false;
  std::unique_ptr<Model> a = loadModel(opts.model_a, load);
  std::unique_ptr<Model> b = loadModel(opts.model_b, load);
  checkSameInterface(*a->graph, *b->graph, opts.model_a, opts.model_b);

  ComparisonInputs inputs;
  inputs.seed = opts.seed;
  inputs.runs = opts.runs;
  inputs.shapes = shapes;
  // With --input, every run reads those files (bound to A's inputs, which B shares) and seeds
  // the inputs they do not name with seed + run, as `run` and `profile` do.
  std::vector<std::pair<std::string, std::string>> sources;
  if (!opts.inputs.empty()) {
    std::vector<BoundInputs> runs = bindInputRuns(*a->graph, opts.inputs, opts.seed, opts.runs,
                                                  shapes);
    for (size_t i = 0; i < runs[0].tensors.size(); ++i)
      sources.emplace_back(runs[0].tensors[i].name, runs[0].sources[i]);
    for (BoundInputs& run : runs) inputs.given.push_back(std::move(run.tensors));
  }
  inputs.execution.num_threads = opts.threads;
  inputs.backend_b = deviceBackend(opts.device);
  const Tolerance& tol = opts.tolerance;
  const Comparison comparison = compareModels(*a, *b, inputs, tol);
  const bool all_passed = comparison.passed;

  if (opts.json) {
    nlohmann::json j;
    j["model_a"] = opts.model_a;
    j["model_b"] = opts.model_b;
    j["runs"] = opts.runs;
    j["seed"] = opts.seed;
    j["inputs"] = nlohmann::json::array();
    for (const auto& [name, source] : sources)
      j["inputs"].push_back({{"name", name}, {"source", source}});
    j["atol"] = tol.atol;
    j["rtol"] = tol.rtol;
    j["rtol_scale"] = rtolScaleName(tol.rtol_scale);
    j["min_cosine"] = tol.min_cosine;
    j["passed"] = all_passed;
    j["outputs"] = nlohmann::json::array();
    for (const OutputComparison& v : comparison.outputs) {
      j["outputs"].push_back({{"name", v.name},
                              {"dtype", std::string(dtypeName(v.dtype))},
                              {"shape", v.dims},
                              {"max_abs_error", number(v.max_abs_error)},
                              {"max_rel_error", number(v.max_rel_error)},
                              {"cosine", number(v.cosine)},
                              {"mismatches", v.mismatches},
                              {"passed", v.passed},
                              {"detail", v.passed ? std::string() : v.detail}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("verify {} vs {}: {} run{}, seed {}, atol {:g}, {}, min cosine {:g}\n",
               opts.model_a, opts.model_b, opts.runs, opts.runs == 1 ? "" : "s", opts.seed,
               tol.atol, rtolText(tol.rtol, tol.rtol_scale), tol.min_cosine);
    for (const auto& [name, source] : sources) fmt::print("  input {}: {}\n", name, source);
    for (const OutputComparison& v : comparison.outputs) {
      // A half output's tolerance is raised to its type's resolution (Tolerance::forDType).
      const Tolerance used = tol.forDType(v.dtype);
      const std::string raised =
          used.atol != tol.atol || used.rtol != tol.rtol
              ? fmt::format(" ({}: atol {:g}, rtol {:g})", dtypeName(v.dtype), used.atol, used.rtol)
              : "";
      fmt::print("  {} {}{}: max abs {:.3g}, max rel {:.3g}, cosine {:.8f}: {}{}\n",
                 v.passed ? "ok  " : "FAIL", v.name, formatDims(v.dims), v.max_abs_error,
                 v.max_rel_error, v.cosine, v.passed ? "within tolerance" : v.detail, raised);
    }
    size_t failed = 0;
    for (const OutputComparison& v : comparison.outputs) failed += v.passed ? 0 : 1;
    fmt::print("{}: {} of {} outputs within tolerance\n", all_passed ? "PASS" : "FAIL",
               comparison.outputs.size() - failed, comparison.outputs.size());
  }
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return all_passed ? 0 : 1;
}

}  // namespace

Command addVerifyCommand(CLI::App& parent) {
  auto opts = std::make_shared<VerifyOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "verify",
      "Run two models on the same inputs (seeded or --input files) and compare their outputs");
  cmd->add_option("A", opts->model_a, "Reference model")->required();
  cmd->add_option("B", opts->model_b, "Model to check against A (e.g. the optimized one)")
      ->required();
  addToleranceOptions(*cmd, opts->tolerance, "", "A");
  cmd->add_option("--runs", opts->runs, "Input sets to try (seeds SEED, SEED+1, ...)")
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Seed of the first input set")->capture_default_str();
  cmd->add_option("--input", opts->inputs,
                  "Input data for every run: NAME=FILE or FILE (bound to the next input in "
                  "order); .npy or TensorProto .pb. Inputs not given get seeded random data")
      ->type_name("NAME=FILE");
  cmd->add_option("--shape", opts->shapes, "Dims for an input, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS");
  cmd->add_option("--threads", opts->threads, "Threads per kernel (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print one JSON object (see below)");
  cmd->add_option("--device", opts->device,
                  "Where B runs: cpu, or cuda (A, the reference, always runs on the CPU; "
                  "`verify M M --device cuda` checks the CUDA backend on M)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->footer(
      "An output passes when |b - a| <= atol + rtol * max |a| element-wise (--rtol-scale "
      "element: rtol * |a|; NaN only where A has NaN, equal infinities; integers and bools "
      "exactly) and cosine(a, b) >= min-cosine, in every run.\n--json: {model_a, model_b, runs, "
      "seed, inputs: [{name, source}], atol, rtol, rtol_scale, min_cosine, passed, outputs: "
      "[{name, dtype, shape, max_abs_error, max_rel_error, cosine, mismatches, passed, detail}]}; "
      "figures are the worst over all runs, a non-finite error is null.\nExit codes: 0 all "
      "outputs within tolerance, 1 some output is not, 3 the models' inputs or outputs differ.");
  return Command{cmd, [opts] { return runVerify(*opts); }};
}

}  // namespace fusectl::cli
