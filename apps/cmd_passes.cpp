// `fusectl passes`: list the registered passes (from passes.def) with their options, and the
// -O pipelines.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/registry.h"

namespace fusectl::cli {
namespace {

struct PassesOptions {
  bool json = false;
  bool markdown = false;
};

int runPasses(const PassesOptions& opts) {
  using namespace fusectl::passes;
  if (opts.json && opts.markdown) {
    throw Error(ErrorKind::Usage, "--json and --markdown exclude each other");
  }
  if (opts.markdown) {
    std::cout << passesMarkdownTable();
  } else if (opts.json) {
    nlohmann::ordered_json j;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const PassInfo& info : allPasses()) {
      nlohmann::ordered_json patterns = nlohmann::ordered_json::array();
      for (const Pattern& p : createPass(info.name)->patterns()) {
        nlohmann::ordered_json jp = {{"name", p.name}, {"pattern", p.str()}};
        if (p.benefit != 1) jp["benefit"] = p.benefit;
        if (!p.produces.empty()) jp["produces"] = p.produces;
        patterns.push_back(std::move(jp));
      }
      nlohmann::ordered_json options = nlohmann::ordered_json::array();
      for (const PassOption& o : passOptions(info.name)) {
        options.push_back({{"name", std::string(o.name)},
                           {"type", std::string(optionTypeName(o.type))},
                           {"default", std::string(o.default_value)},
                           {"description", std::string(o.description)}});
      }
      list.push_back({{"name", std::string(info.name)},
                      {"level", info.level},
                      {"portability", std::string(portabilityName(info.portability))},
                      {"description", std::string(info.description)},
                      {"options", options},
                      {"patterns", patterns}});
    }
    j["passes"] = list;
    nlohmann::ordered_json levels;
    for (int level = 0; level <= 3; ++level)
      levels[fmt::format("O{}", level)] = Pipeline::forLevel(level).str();
    j["levels"] = levels;
    std::cout << j.dump(2) << "\n";
  } else {
    size_t width = 4;
    for (const PassInfo& info : allPasses()) width = std::max(width, info.name.size());
    std::cout << fmt::format("{:<{}}  level  output    description\n", "pass", width);
    for (const PassInfo& info : allPasses()) {
      std::cout << fmt::format("{:<{}}  -O{}    {:<8}  {}\n", info.name, width, info.level,
                               portabilityName(info.portability), info.description);
      for (const PassOption& o : passOptions(info.name)) {
        std::cout << fmt::format("{:<{}}    {{{}={}}}  default {}: {}\n", "", width, o.name,
                                 optionTypeName(o.type), o.default_value, o.description);
      }
    }
    std::cout << "\npipelines by -O level:\n";
    for (int level = 1; level <= 3; ++level)
      std::cout << fmt::format("  -O{}  {}\n", level, Pipeline::forLevel(level).str());
  }
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return 0;
}

}  // namespace

Command addPassesCommand(CLI::App& parent) {
  auto opts = std::make_shared<PassesOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "passes",
      "List the optimization passes: name, -O level, output portability, description, options");
  cmd->add_flag("--json", opts->json,
                "JSON, with each pass's options and patterns and the -O pipelines");
  cmd->add_flag("--markdown", opts->markdown, "The Markdown table that docs/passes.md embeds");
  return Command{cmd, [opts] { return runPasses(*opts); }};
}

}  // namespace fusectl::cli
