// `fusectl convert IN OUT`: between binary .onnx and ONNX text (.onnxtxt), moving weights into
// or out of an external-data file.
#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"

namespace fusectl::cli {
namespace {

struct ConvertOptions {
  std::string input;
  std::string output;
  std::string external_data;
  uint64_t size_threshold = 1024;
};

bool isTextPath(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".onnxtxt" || ext == ".txt";
}

[[noreturn]] void usage(const std::string& message) { throw Error(ErrorKind::Usage, message); }

int runConvert(const ConvertOptions& opts, bool threshold_given) {
  if (isSameFile(opts.input, opts.output)) {
    usage(fmt::format("{}: output is the input file; write to another path", opts.output));
  }
  SaveOptions save;
  if (!opts.external_data.empty()) {
    if (isTextPath(opts.output)) {
      usage("--external-data needs a binary .onnx output, not ONNX text");
    }
    std::filesystem::path data(opts.external_data);
    bool escapes = data.is_absolute() || !data.has_filename();
    for (const auto& part : data) escapes = escapes || part == "..";
    if (escapes) {
      usage(fmt::format("--external-data '{}': must be a path inside the output's folder",
                        opts.external_data));
    }
    std::string data_path =
        (std::filesystem::path(opts.output).parent_path() / data).string();
    if (isSameFile(data_path, opts.input)) {
      usage(fmt::format("--external-data '{}' would overwrite the input model",
                        opts.external_data));
    }
    if (data.lexically_normal() ==
        std::filesystem::path(opts.output).filename().lexically_normal()) {
      usage(fmt::format("--external-data '{}' is the output model itself", opts.external_data));
    }
    save.external_data_file = opts.external_data;
    save.size_threshold = opts.size_threshold;
  } else if (threshold_given) {
    usage("--size-threshold needs --external-data");
  }

  // No shape inference: the output carries exactly the types the input declared.
  LoadOptions load = loadOptions();
  load.infer_shapes = false;
  std::unique_ptr<Model> model = loadModel(opts.input, load);
  saveModel(*model, opts.output, save);
  return 0;
}

}  // namespace

bool isSameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

Command addConvertCommand(CLI::App& parent) {
  auto opts = std::make_shared<ConvertOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "convert", "Convert between .onnx and .onnxtxt, moving weights into or out of external data");
  cmd->add_option("IN", opts->input, "Input model (.onnx or .onnxtxt)")->required();
  cmd->add_option("OUT", opts->output,
                  "Output model; .onnxtxt or .txt writes ONNX text, anything else binary")
      ->required();
  cmd->add_option("--external-data", opts->external_data,
                  "Store large tensors in FILE, relative to OUT's folder (binary output only); "
                  "without it, external data is inlined")
      ->type_name("FILE");
  CLI::Option* threshold =
      cmd->add_option("--size-threshold", opts->size_threshold,
                      "With --external-data: tensors of at least BYTES go to the file")
          ->type_name("BYTES")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
  return Command{cmd, [opts, threshold] { return runConvert(*opts, threshold->count() > 0); }};
}

}  // namespace fusectl::cli
