// `fusectl verify A B`: run two models on the same seeded inputs and compare their outputs.
//
// Outputs are matched by name; every output of either model must exist in the other, and both
// models must take the same inputs (names and dtypes), else it is an error (exit 3). An output
// passes when, in every run, each element satisfies |b - a| <= atol + rtol * |a| (NaN only where
// A has NaN, infinities equal) and cosine(a, b) >= min-cosine; integer and bool outputs must be
// equal. Exit 0 when every output passes, 1 otherwise.
//
// --json prints one object:
//   {"model_a": str, "model_b": str, "runs": int, "seed": int,
//    "atol": num, "rtol": num, "min_cosine": num, "passed": bool,
//    "outputs": [{"name": str, "dtype": str, "shape": [int...], "max_abs_error": num,
//                 "max_rel_error": num, "cosine": num, "mismatches": int, "passed": bool,
//                 "detail": str}]}
// Each output's figures are the worst over all runs (largest errors, smallest cosine, summed
// mismatches); "shape" is from A's first run; a non-finite error is written as null.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::kernels;

struct VerifyOptions {
  std::string model_a;
  std::string model_b;
  double atol = 1e-5;
  double rtol = 1e-4;
  double min_cosine = 0.9999;
  int runs = 1;
  uint64_t seed = 0;
  bool json = false;
  std::vector<std::string> shapes;
  int threads = 1;
};

struct OutputVerdict {
  std::string name;
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  double max_abs = 0;
  double max_rel = 0;
  double cosine = 1;
  int64_t mismatches = 0;
  bool passed = true;
  std::string detail;  // the first failing run's description
};

// Both graphs must take the same non-initializer inputs with the same dtypes.
void checkSameInputs(const Graph& a, const Graph& b, const VerifyOptions& opts) {
  std::map<std::string, const Value*> ins_b;
  for (const Value* v : b.inputs()) {
    if (!v->isInitializer()) ins_b[v->name()] = v;
  }
  for (const Value* v : a.inputs()) {
    if (v->isInitializer()) continue;
    auto it = ins_b.find(v->name());
    if (it == ins_b.end()) {
      throwInvalid(fmt::format("input mismatch: '{}' is an input of {} but not of {}", v->name(),
                               opts.model_a, opts.model_b));
    }
    if (it->second->dtype() != v->dtype()) {
      throwInvalid(fmt::format("input mismatch: '{}' is {} in {} but {} in {}", v->name(),
                               v->type.str(), opts.model_a, it->second->type.str(), opts.model_b));
    }
    ins_b.erase(it);
  }
  if (!ins_b.empty()) {
    throwInvalid(fmt::format("input mismatch: '{}' is an input of {} but not of {}",
                             ins_b.begin()->first, opts.model_b, opts.model_a));
  }
}

void checkSameOutputs(const Graph& a, const Graph& b, const VerifyOptions& opts) {
  std::map<std::string, int> seen;
  for (const Value* v : a.outputs()) seen[v->name()] |= 1;
  for (const Value* v : b.outputs()) seen[v->name()] |= 2;
  for (const auto& [name, mask] : seen) {
    if (mask != 3) {
      throwInvalid(fmt::format("output '{}' of {} is missing from {}", name,
                               mask == 1 ? opts.model_a : opts.model_b,
                               mask == 1 ? opts.model_b : opts.model_a));
    }
  }
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

int runVerify(const VerifyOptions& opts) {
  if (opts.runs < 1) throw Error(ErrorKind::Usage, "--runs must be at least 1");
  if (opts.atol < 0 || opts.rtol < 0) throw Error(ErrorKind::Usage, "tolerances must be >= 0");
  const auto shapes = parseShapeSpecs(opts.shapes);

  LoadOptions load;
  load.infer_shapes = false;
  std::unique_ptr<Model> a = loadModel(opts.model_a, load);
  std::unique_ptr<Model> b = loadModel(opts.model_b, load);
  checkSameInputs(*a->graph, *b->graph, opts);
  checkSameOutputs(*a->graph, *b->graph, opts);

  ExecutorOptions exec;
  exec.num_threads = opts.threads;
  Executor run_a(*a, exec);
  Executor run_b(*b, exec);

  Tolerance tol;
  tol.atol = opts.atol;
  tol.rtol = opts.rtol;
  tol.min_cosine = opts.min_cosine;
  std::vector<OutputVerdict> verdicts;
  for (const Value* v : a->graph->outputs()) {
    OutputVerdict verdict;
    verdict.name = v->name();
    verdicts.push_back(std::move(verdict));
  }

  for (int r = 0; r < opts.runs; ++r) {
    const uint64_t seed = opts.seed + static_cast<uint64_t>(r);
    const std::vector<NamedTensor> inputs = makeRandomInputs(*a->graph, seed, shapes);
    const std::vector<NamedTensor> out_a = run_a.run(inputs);
    const std::vector<NamedTensor> out_b = run_b.run(inputs);
    std::map<std::string, const HostTensor*> by_name;
    for (const NamedTensor& o : out_b) by_name[o.name] = &o.tensor;
    for (size_t i = 0; i < out_a.size(); ++i) {
      OutputVerdict& v = verdicts[i];
      const HostTensor& ta = out_a[i].tensor;
      const HostTensor& tb = *by_name.at(out_a[i].name);
      if (r == 0) {
        v.dtype = ta.dtype();
        v.dims = ta.dims();
      }
      const CompareResult c = compareTensors(tb, ta, tol);
      v.max_abs = std::max(v.max_abs, c.max_abs_error);
      v.max_rel = std::max(v.max_rel, c.max_rel_error);
      v.cosine = std::min(v.cosine, c.cosine);
      v.mismatches += c.mismatches;
      if (!c.passed && v.passed) {
        v.passed = false;
        v.detail = c.shape_match ? c.describe(ta.dims())
                                 : fmt::format("shape {} in B vs {} in A", formatDims(tb.dims()),
                                               formatDims(ta.dims()));
        if (!c.dtype_match && c.shape_match) {
          v.detail = fmt::format("dtype {} in B vs {} in A; {}", dtypeName(tb.dtype()),
                                 dtypeName(ta.dtype()), v.detail);
        }
        if (opts.runs > 1) v.detail = fmt::format("run {} (seed {}): {}", r, seed, v.detail);
      }
    }
  }

  bool all_passed = true;
  for (const OutputVerdict& v : verdicts) all_passed = all_passed && v.passed;

  if (opts.json) {
    nlohmann::json j;
    j["model_a"] = opts.model_a;
    j["model_b"] = opts.model_b;
    j["runs"] = opts.runs;
    j["seed"] = opts.seed;
    j["atol"] = opts.atol;
    j["rtol"] = opts.rtol;
    j["min_cosine"] = opts.min_cosine;
    j["passed"] = all_passed;
    j["outputs"] = nlohmann::json::array();
    for (const OutputVerdict& v : verdicts) {
      j["outputs"].push_back({{"name", v.name},
                              {"dtype", std::string(dtypeName(v.dtype))},
                              {"shape", v.dims},
                              {"max_abs_error", number(v.max_abs)},
                              {"max_rel_error", number(v.max_rel)},
                              {"cosine", number(v.cosine)},
                              {"mismatches", v.mismatches},
                              {"passed", v.passed},
                              {"detail", v.passed ? std::string() : v.detail}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("verify {} vs {}: {} run{}, seed {}, atol {:g}, rtol {:g}, min cosine {:g}\n",
               opts.model_a, opts.model_b, opts.runs, opts.runs == 1 ? "" : "s", opts.seed,
               opts.atol, opts.rtol, opts.min_cosine);
    for (const OutputVerdict& v : verdicts) {
      fmt::print("  {} {}{}: max abs {:.3g}, max rel {:.3g}, cosine {:.8f}: {}\n",
                 v.passed ? "ok  " : "FAIL", v.name, formatDims(v.dims), v.max_abs, v.max_rel,
                 v.cosine, v.passed ? "within tolerance" : v.detail);
    }
    size_t failed = 0;
    for (const OutputVerdict& v : verdicts) failed += v.passed ? 0 : 1;
    fmt::print("{}: {} of {} outputs within tolerance\n", all_passed ? "PASS" : "FAIL",
               verdicts.size() - failed, verdicts.size());
  }
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return all_passed ? 0 : 1;
}

}  // namespace

Command addVerifyCommand(CLI::App& parent) {
  auto opts = std::make_shared<VerifyOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "verify", "Run two models on the same seeded inputs and compare their outputs");
  cmd->add_option("A", opts->model_a, "Reference model")->required();
  cmd->add_option("B", opts->model_b, "Model to check against A (e.g. the optimized one)")
      ->required();
  cmd->add_option("--atol", opts->atol, "Absolute tolerance")->capture_default_str();
  cmd->add_option("--rtol", opts->rtol, "Relative tolerance, times |A|")->capture_default_str();
  cmd->add_option("--min-cosine", opts->min_cosine, "Smallest accepted cosine similarity")
      ->capture_default_str();
  cmd->add_option("--runs", opts->runs, "Input sets to try (seeds SEED, SEED+1, ...)")
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Seed of the first input set")->capture_default_str();
  cmd->add_option("--shape", opts->shapes, "Dims for an input, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS");
  cmd->add_option("--threads", opts->threads, "Threads per kernel (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print one JSON object (see below)");
  cmd->footer(
      "An output passes when |b - a| <= atol + rtol * |a| element-wise (NaN only where A has NaN, "
      "equal infinities; integers and bools exactly) and cosine(a, b) >= min-cosine, in every "
      "run.\n--json: {model_a, model_b, runs, seed, atol, rtol, min_cosine, passed, outputs: "
      "[{name, dtype, shape, max_abs_error, max_rel_error, cosine, mismatches, passed, detail}]}; "
      "figures are the worst over all runs, a non-finite error is null.\nExit codes: 0 all "
      "outputs within tolerance, 1 some output is not, 3 the models' inputs or outputs differ.");
  return Command{cmd, [opts] { return runVerify(*opts); }};
}

}  // namespace fusectl::cli
