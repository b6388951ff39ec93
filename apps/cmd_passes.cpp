// `fusectl passes`: list the registered passes (from passes.def) with their options, and the
// -O pipelines; with --catalog, the fusion catalog (fusion_catalog.h) instead.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/passes/fusion_catalog.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/registry.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::passes;

struct PassesOptions {
  bool json = false;
  bool markdown = false;
  bool catalog = false;
};

nlohmann::ordered_json evidenceJson(const RuleEvidence& e) {
  return {{"measured", e.measured},
          {"command", e.command},
          {"figures", e.figures},
          {"source", e.source}};
}

void printCatalogJson(const std::vector<FusionRule>& rules) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const FusionRule& r : rules) {
    nlohmann::ordered_json variants = nlohmann::ordered_json::array();
    for (const Pattern& p : r.variants) {
      nlohmann::ordered_json constraints = nlohmann::ordered_json::array();
      for (const Constraint& c : p.constraints) constraints.push_back(c.name);
      nlohmann::ordered_json jv = {{"name", p.name},
                                   {"pattern", p.str()},
                                   {"constraints", constraints},
                                   {"produces", p.produces}};
      if (p.benefit != 1) jv["benefit"] = p.benefit;
      variants.push_back(std::move(jv));
    }
    nlohmann::ordered_json jr = {{"name", r.name},
                                 {"pass", r.pass},
                                 {"status", std::string(ruleStatusName(r.status))},
                                 {"summary", r.summary},
                                 {"variants", variants},
                                 {"constraints", r.constraints()},
                                 {"produces", r.produces()}};
    if (r.status != RuleStatus::Active) jr["evidence"] = evidenceJson(r.evidence);
    list.push_back(std::move(jr));
  }
  nlohmann::ordered_json j;
  j["rules"] = list;
  std::cout << j.dump(2) << "\n";
}

void printCatalogTable(const std::vector<FusionRule>& rules) {
  size_t name_width = 4, pass_width = 4;
  for (const FusionRule& r : rules) {
    name_width = std::max(name_width, r.name.size());
    pass_width = std::max(pass_width, r.pass.size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {:<8}  variants\n", "rule", name_width, "pass",
                           pass_width, "status");
  for (const FusionRule& r : rules) {
    std::vector<std::string> names;
    for (const Pattern& p : r.variants) names.push_back(p.name);
    std::cout << fmt::format("{:<{}}  {:<{}}  {:<8}  {}\n", r.name, name_width, r.pass,
                             pass_width, ruleStatusName(r.status),
                             names.empty() ? "(not pattern based)" : fmt::format("{}", fmt::join(names, ", ")));
  }
  // Only the rules that are not applied need their case made; the active ones are what runs.
  for (const FusionRule& r : rules) {
    if (r.status == RuleStatus::Active) continue;
    std::cout << fmt::format("\n{} ({}, {}): {}\n", r.name, ruleStatusName(r.status), r.pass,
                             r.summary);
    for (const Pattern& p : r.variants) std::cout << fmt::format("  pattern   {}\n", p.str());
    const std::vector<std::string> constraints = r.constraints();
    std::cout << fmt::format("  checks    {}\n", constraints.empty()
                                                  ? "the pattern text only"
                                                  : fmt::format("{}", fmt::join(constraints, ", ")));
    std::cout << fmt::format("  produces  {}\n", fmt::join(r.produces(), ", "));
    std::cout << fmt::format("  measured  {}\n", r.evidence.measured);
    std::cout << fmt::format("  command   {}\n", r.evidence.command);
    std::cout << fmt::format("  figures   {}\n", r.evidence.figures);
    std::cout << fmt::format("  source    {}\n", r.evidence.source);
  }
}

int runPasses(const PassesOptions& opts) {
  if (opts.json && opts.markdown) {
    throw Error(ErrorKind::Usage, "--json and --markdown exclude each other");
  }
  if (opts.catalog) {
    if (opts.markdown) {
      std::cout << fusionCatalogMarkdown();
    } else if (opts.json) {
      printCatalogJson(fusionCatalog());
    } else {
      printCatalogTable(fusionCatalog());
    }
  } else if (opts.markdown) {
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
      std::cout << fmt::format("{:<{}}  {:<5}  {:<8}  {}\n", info.name, width,
                               info.level == 0 ? std::string("name") : fmt::format("-O{}", info.level),
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
                "JSON, with each pass's options and patterns and the -O pipelines (with "
                "--catalog: the rules)");
  cmd->add_flag("--markdown", opts->markdown,
                "The Markdown table that docs/passes.md embeds (with --catalog: docs/catalog.md's)");
  cmd->add_flag("--catalog", opts->catalog,
                "The fusion catalog instead: every rule, its variants, status (active, opt-in, "
                "rejected) and, for rules not applied, the evidence");
  return Command{cmd, [opts] { return runPasses(*opts); }};
}

}  // namespace fusectl::cli
