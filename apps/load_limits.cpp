// `--max-tensor-bytes`: one value for every subcommand that loads a model, read back as the
// LoadOptions each command starts from.
#include <CLI/CLI.hpp>

#include "commands.h"

namespace fusectl::cli {
namespace {

uint64_t g_max_tensor_bytes = LoadOptions::kDefaultMaxTensorBytes;

}  // namespace

void addLoadLimitOptions(CLI::App& command) {
  command
      .add_option("--max-tensor-bytes", g_max_tensor_bytes,
                  "refuse a model with a tensor (initializer, constant, input to seed) larger "
                  "than this many bytes; accepts KiB/MiB/GiB suffixes (default 16GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Validator(
          [](std::string& bytes) {
            return bytes == "0" ? std::string("must be at least 1 byte") : std::string();
          },
          "BYTES"));
}

LoadOptions loadOptions() {
  LoadOptions options;
  options.max_tensor_bytes = g_max_tensor_bytes;
  return options;
}

uint64_t maxTensorBytes() { return g_max_tensor_bytes; }

}  // namespace fusectl::cli
