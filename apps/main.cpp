// fusectl: command-line entry point. Parses flags, runs one subcommand, maps errors to exit codes.
//
// Exit codes (docs/cli.md): 0 ok, 1 check failed, 2 usage, 3 invalid input, 4 I/O error,
// 5 unsupported, 70 internal error. Every error is one line on stderr: "fusectl: error: ...".
#include <fmt/format.h>
#include <google/protobuf/stubs/common.h>  // GOOGLE_PROTOBUF_VERSION

// The app does not link libonnx; it only reads the release string of the headers libgraph uses.
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include <onnx/common/version.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <vector>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/support/background_prefault.h"
#include "fusectl/support/huge_page_malloc.h"
#include "fusectl/support/temp_file_registry.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitInternal = 70;

int exitCodeFor(fusectl::ErrorKind kind) {
  switch (kind) {
    case fusectl::ErrorKind::Usage: return 2;
    case fusectl::ErrorKind::InvalidInput: return 3;
    case fusectl::ErrorKind::Io: return 4;
    case fusectl::ErrorKind::Unsupported: return 5;
    case fusectl::ErrorKind::Internal: return kExitInternal;
  }
  return kExitInternal;
}

void printError(const std::string& message) {
  std::fflush(stdout);
  std::fputs(fmt::format("fusectl: error: {}\n", message).c_str(), stderr);
}

std::string versionText() {
  constexpr int pb = GOOGLE_PROTOBUF_VERSION;  // 3021012 is 3.21.12
  return fmt::format("fusectl {} (onnx {}, protobuf {}.{}.{})", FUSECTL_VERSION,
                     ONNX_NAMESPACE::LAST_RELEASE_VERSION, pb / 1000000, pb / 1000 % 1000,
                     pb % 1000);
}

// CLI11's message, pointed at the right --help; "unknown subcommand" when the first word is one.
std::string usageMessage(const CLI::App& app, const std::vector<fusectl::cli::Command>& commands,
                         int argc, char** argv, const CLI::ParseError& e) {
  if (argc > 1 && argv[1][0] != '-') {
    std::string word = argv[1];
    std::vector<std::string> names;
    bool known = false;
    for (const auto& cmd : commands) {
      names.push_back(cmd.app->get_name());
      known = known || cmd.app->get_name() == word;
    }
    if (!known) {
      return fmt::format("unknown subcommand '{}' (subcommands: {})", word,
                         fmt::join(names, ", "));
    }
  }
  std::vector<CLI::App*> parsed = app.get_subcommands();
  std::string help = parsed.empty() ? "fusectl --help"
                                    : fmt::format("fusectl {} --help", parsed.back()->get_name());
  return fmt::format("{} (run '{}')", e.what(), help);
}

}  // namespace

int main(int argc, char** argv) {
  fusectl::restartWithHugePageMalloc(argv);
  // An interrupted write leaves neither a partial output nor its temporary file.
  fusectl::installTempFileCleanup();
  try {
    CLI::App app{"fusectl: analyse and optimize ONNX graphs", "fusectl"};
    app.set_version_flag("--version", versionText());
    app.require_subcommand(1);
    app.fallthrough(false);
    app.footer("Exit codes: 0 ok, 1 check failed, 2 usage, 3 invalid input, 4 I/O error, "
               "5 unsupported, 70 internal error. See docs/cli.md.");

    std::vector<fusectl::cli::Command> commands = {
        fusectl::cli::addDumpCommand(app),
        fusectl::cli::addConvertCommand(app),
        fusectl::cli::addRunCommand(app),
        fusectl::cli::addVerifyCommand(app),
        fusectl::cli::addConformanceCommand(app),
        // libpasses (cmd_optimize.cpp, cmd_diff.cpp, cmd_passes.cpp, cmd_match.cpp)
        fusectl::cli::addOptimizeCommand(app),
        fusectl::cli::addDiffCommand(app),
        fusectl::cli::addPassesCommand(app),
        fusectl::cli::addMatchCommand(app),
        fusectl::cli::addOpsCommand(app),  // libgraph's fused-op table (cmd_ops.cpp)
        fusectl::cli::addProfileCommand(app),  // fused vs unfused, timed (cmd_profile.cpp)
        fusectl::cli::addReportCommand(app),   // one HTML page of it all (cmd_report.cpp)
    };

    for (const auto& cmd : commands) {
      const std::string& name = cmd.app->get_name();
      if (name != "passes" && name != "ops" && name != "conformance") fusectl::cli::addLoadLimitOptions(*cmd.app);
    }

    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      printError(usageMessage(app, commands, argc, argv, e));
      return kExitUsage;
    }

    for (const auto& cmd : commands) {
      if (!cmd.app->parsed()) continue;
      // The second core faults in fresh memory ahead of the graph builder
      // (background_prefault.h). Not for the commands that execute a model: they build small
      // graphs and pack weights into memory they fill at once, and the heap's 64 MiB steps
      // faulted in whole would count in their peak memory (ResNet-50's `run`: 206 -> 229-241
      // MiB, `profile`: 357 -> 380-388 MiB, no faster).
      const std::string& name = cmd.app->get_name();
      const bool executes = name == "run" || name == "verify" || name == "profile";
      if (!executes && !std::getenv("FUSECTL_NO_PREFAULT")) fusectl::startBackgroundPrefault();
      return cmd.run();
    }
    printError("no subcommand given (run 'fusectl --help')");
    return kExitUsage;
  } catch (const fusectl::Error& e) {
    printError(e.what());
    return exitCodeFor(e.kind());
  } catch (const std::bad_alloc&) {
    printError("out of memory");
    return kExitInternal;
  } catch (const std::exception& e) {
    printError(fmt::format("internal error: {}", e.what()));
    return kExitInternal;
  }
}
