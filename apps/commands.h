// The subcommands of `fusectl`: each adds itself to the CLI11 app and returns how to run it.
//
// A command's run() returns the exit code for a normal outcome (0, or 1 when a check failed)
// and throws fusectl::Error for everything else; main.cpp maps ErrorKind to the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace fusectl::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command addDumpCommand(CLI::App& parent);
Command addConvertCommand(CLI::App& parent);

}  // namespace fusectl::cli
