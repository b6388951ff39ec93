// `fusectl dump MODEL`: print a model as text, JSON or Graphviz DOT.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/render.h"

namespace fusectl::cli {
namespace {

struct DumpOptions {
  std::string model;
  std::string format = "text";
  bool summary = false;
  std::vector<std::string> shapes;
  std::string output;
};

// "NAME=1x3x224x224"; the name may itself contain '=', the dims never do.
std::pair<std::string, Shape> parseShapeFlag(const std::string& spec) {
  size_t eq = spec.rfind('=');
  std::optional<Shape> shape;
  if (eq != std::string::npos && eq > 0) shape = Shape::parse(std::string_view(spec).substr(eq + 1));
  if (!shape) {
    throw Error(ErrorKind::Usage,
                fmt::format("invalid --shape '{}': expected NAME=DIMS, e.g. input=1x3x224x224",
                            spec));
  }
  return {spec.substr(0, eq), std::move(*shape)};
}

int runDump(const DumpOptions& opts) {
  DumpFormat format = dumpFormatFromName(opts.format).value_or(DumpFormat::Text);
  if (opts.summary && format == DumpFormat::Dot) {
    throw Error(ErrorKind::Usage, "--summary applies to text and json output, not dot");
  }
  LoadOptions load = loadOptions();
  for (const std::string& spec : opts.shapes) {
    auto parsed = parseShapeFlag(spec);
    for (const auto& [name, shape] : load.input_shapes) {
      if (name == parsed.first) {
        throw Error(ErrorKind::Usage, fmt::format("--shape given twice for input '{}'", name));
      }
    }
    load.input_shapes.push_back(std::move(parsed));
  }
  if (!opts.output.empty() && isSameFile(opts.output, opts.model)) {
    throw Error(ErrorKind::Usage,
                fmt::format("{}: output file is the model being dumped", opts.output));
  }

  std::unique_ptr<Model> model = loadModel(opts.model, load);
  RenderOptions render;
  render.summary_only = opts.summary;
  if (!opts.output.empty()) {
    renderModelToFile(*model, format, opts.output, render);
    return 0;
  }
  renderModel(*model, format, std::cout, render);
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return 0;
}

}  // namespace

Command addDumpCommand(CLI::App& parent) {
  auto opts = std::make_shared<DumpOptions>();
  CLI::App* cmd = parent.add_subcommand("dump", "Print a model's structure and statistics");
  cmd->add_option("MODEL", opts->model, "Model file (.onnx, or .onnxtxt for ONNX text)")
      ->required();
  cmd->add_option("--format", opts->format, "Output format: text, json or dot")
      ->check(CLI::IsMember({"text", "json", "dot"}))
      ->capture_default_str();
  cmd->add_flag("--summary", opts->summary, "Header and statistics only, no node list");
  cmd->add_option("--shape", opts->shapes,
                  "Fix an input's shape before shape inference, e.g. input=1x3x224x224 "
                  "(repeatable)")
      ->type_name("NAME=DIMS")
      ->allow_extra_args(false);
  cmd->add_option("-o,--output", opts->output, "Write to FILE instead of stdout")
      ->type_name("FILE");
  return Command{cmd, [opts] { return runDump(*opts); }};
}

}  // namespace fusectl::cli
