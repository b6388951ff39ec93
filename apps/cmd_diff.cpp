// `fusectl diff A B`: what changed between two models (typically a model and its optimized
// version): op counts, nodes, initializers and fusion sites. The logic is libpasses'
// diffGraphs (graph_diff.h); this file only loads and prints.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/graph_diff.h"

namespace fusectl::cli {
namespace {

struct DiffOptions {
  std::string model_a;
  std::string model_b;
  bool json = false;
  std::string html;
};

int runDiff(const DiffOptions& opts) {
  if (!opts.html.empty()) checkHtmlPath(opts.html, {opts.model_a, opts.model_b});
  // Declared types are enough: the diff compares structure, not inferred shapes.
  LoadOptions load = loadOptions();
  load.infer_shapes = false;
  std::unique_ptr<Model> a = loadModel(opts.model_a, load);
  std::unique_ptr<Model> b = loadModel(opts.model_b, load);
  passes::GraphDiff d = passes::diffGraphs(*a->graph, *b->graph);
  std::cout << (opts.json ? d.toJson(opts.model_a, opts.model_b)
                          : d.toText(opts.model_a, opts.model_b));
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  if (!opts.html.empty()) {
    HtmlPageSides sides;
    sides.title = fmt::format("fusectl diff: {} vs {}", opts.model_a, opts.model_b);
    sides.before_name = opts.model_a;
    sides.after_name = opts.model_b;
    sides.before = a.get();
    sides.after = b.get();
    sides.files = {fileBytes(opts.model_a), fileBytes(opts.model_b), true};
    writeHtmlPage(opts.html, sides, nullptr, nullptr);
  }
  return 0;  // differences are the answer, not a failure
}

}  // namespace

Command addDiffCommand(CLI::App& parent) {
  auto opts = std::make_shared<DiffOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "diff", "Show what changed between two models: ops, nodes, initializers, fusion sites");
  cmd->add_option("A", opts->model_a, "The model before (e.g. the original)")->required();
  cmd->add_option("B", opts->model_b, "The model after (e.g. the optimized one)")->required();
  cmd->add_flag("--json", opts->json, "Print one JSON object (\"schema\": \"fusectl.diff/1\")");
  cmd->add_option("--html", opts->html,
                  "Also write one self-contained HTML page of both graphs (fusectl report)")
      ->type_name("FILE.html");
  cmd->footer(
      "Nodes are matched by the names of the values they write; a matched node changed when its "
      "op type, attributes or input names differ. Initializers are matched by name. Fusion "
      "sites come from the doc strings fusectl stamps on fused nodes.\nExit codes: 0 whether or "
      "not the models differ; 3/4 when a model cannot be loaded.");
  return Command{cmd, [opts] { return runDiff(*opts); }};
}

}  // namespace fusectl::cli
