// The subcommands of `fusectl`: each adds itself to the CLI11 app and returns how to run it.
//
// A command's run() returns the exit code for a normal outcome (0, or 1 when a check failed)
// and throws fusectl::Error for everything else; main.cpp maps ErrorKind to the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/shape.h"
#include "fusectl/kernels/backend.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/passes/html_report.h"

namespace fusectl::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// `--max-tensor-bytes N` on a command that loads models (load_limits.cpp); every command
// starts its LoadOptions from loadOptions(), which carries it.
void addLoadLimitOptions(CLI::App& command);
LoadOptions loadOptions();
uint64_t maxTensorBytes();

Command addDumpCommand(CLI::App& parent);
Command addConvertCommand(CLI::App& parent);

// True when both paths exist and name the same file (same device and inode: catches
// "./m.onnx" vs "m.onnx", symlinks and hard links).
bool isSameFile(const std::string& a, const std::string& b);

// ---- Executor commands (cmd_run.cpp, cmd_verify.cpp, cmd_conformance.cpp) ----
Command addRunCommand(CLI::App& parent);
Command addVerifyCommand(CLI::App& parent);
Command addConformanceCommand(CLI::App& parent);
// Shared by run and verify (defined in cmd_run.cpp): "--shape NAME=DIMS" flags (Usage error
// when malformed or not numeric), byte counts as "1.5 MiB" (dims: kernels::formatDims).
std::vector<std::pair<std::string, Shape>> parseShapeSpecs(const std::vector<std::string>& specs);
std::string formatBytes(uint64_t bytes);
// `--device cpu|cuda` (device_option.cpp): the option on `command`, and the backend it names:
// nullptr for the CPU (the executor's default), the CUDA backend for "cuda", which throws
// Error(Unsupported) with the reason when fusectl was built without CUDA or has no GPU.
void addDeviceOption(CLI::App& command, std::string& device);

// The output comparison of verify, optimize (--verify, --bisect), profile and report
// (tolerance_option.cpp). cliTolerance() is their default: atol 1e-5, rtol 1e-4 of each
// output's largest magnitude, min cosine 0.9999 (the library's Tolerance{} is numpy's
// element-wise allclose with no cosine limit). addToleranceOptions binds --atol, --rtol,
// --rtol-scale and --min-cosine to `tolerance`; `what` starts each help text ("With --verify: "),
// `reference` names the side rtol multiplies ("A", "original"). checkTolerance throws
// Error(Usage) for a negative atol or rtol. rtolText states the relative tolerance as the text
// outputs print it: "rtol 0.0001" or "rtol 0.0001 of each output's largest magnitude".
struct ToleranceOptions {
  CLI::Option* atol = nullptr;
  CLI::Option* rtol = nullptr;
  CLI::Option* rtol_scale = nullptr;
  CLI::Option* min_cosine = nullptr;
  size_t given() const;  // how many of them the command line set
};
kernels::Tolerance cliTolerance();
ToleranceOptions addToleranceOptions(CLI::App& command, kernels::Tolerance& tolerance,
                                     const std::string& what, const std::string& reference);
void checkTolerance(const kernels::Tolerance& tolerance);
std::string rtolText(double rtol, kernels::RtolScale scale);
const kernels::Backend* deviceBackend(const std::string& device);

// ---- Pass commands (cmd_passes.cpp, cmd_match.cpp, cmd_optimize.cpp, cmd_diff.cpp) ----
Command addPassesCommand(CLI::App& parent);
Command addMatchCommand(CLI::App& parent);
Command addOptimizeCommand(CLI::App& parent);  // cmd_optimize.cpp
Command addDiffCommand(CLI::App& parent);      // cmd_diff.cpp
Command addOpsCommand(CLI::App& parent);       // cmd_ops.cpp: the fusectl operators
// The model as given against its optimized form, timed (cmd_profile.cpp; libkernels' profile.h
// measures, libpasses' optimize() optimizes).
Command addProfileCommand(CLI::App& parent);

// ---- The HTML report (cmd_report.cpp): `fusectl report`, `optimize --html`, `diff --html` ----
Command addReportCommand(CLI::App& parent);
// The two models a page compares and how it names them.
struct HtmlPageSides {
  std::string title, before_name, after_name;
  const Model* before = nullptr;
  const Model* after = nullptr;
  passes::SummaryFiles files;
};
// Usage error when `html` is one of `inputs`, I/O error when its folder does not exist: both
// checked before any work.
void checkHtmlPath(const std::string& html, const std::vector<std::string>& inputs);
// Renders the page (passes::renderHtmlReport, which runs Graphviz's dot) and writes it
// atomically. `report` null: two arbitrary models (diff --html).
void writeHtmlPage(const std::string& path, const HtmlPageSides& sides,
                   const passes::Report* report, const passes::HtmlTimings* timings);
uint64_t fileBytes(const std::string& path);  // 0 when it cannot be read

}  // namespace fusectl::cli
