// `fusectl match MODEL`: find a pattern's matches in a model and, with --explain, say why every
// other candidate did not match, and name the catalog's rejected and opt-in rules that would
// have matched, with the evidence for leaving them out.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/fusion_catalog.h"
#include "fusectl/passes/pattern.h"
#include "fusectl/passes/registry.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::passes;

struct MatchCliOptions {
  std::string model;
  std::string pattern;
  std::string catalog;
  bool explain = false;
  bool json = false;
  std::vector<std::string> shapes;
};

struct Source {
  std::string pass;  // "" for --pattern
  Pattern pattern;
};

// The catalog rules not applied by default that --explain tries: those of pass NAME for
// `--catalog NAME`, every one otherwise.
std::vector<FusionRule> heldBackRulesFor(const MatchCliOptions& opts) {
  std::vector<FusionRule> out;
  if (!opts.explain) return out;
  const bool one_pass = !opts.catalog.empty() && opts.catalog != "all" && findPass(opts.catalog);
  for (FusionRule& r : fusionCatalog()) {
    if (r.status == RuleStatus::Active || (one_pass && r.pass != opts.catalog)) continue;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Source> patternsFor(const MatchCliOptions& opts, size_t held_back_rules) {
  if (opts.pattern.empty() == opts.catalog.empty()) {
    throw Error(ErrorKind::Usage, "give exactly one of --pattern EXPR and --catalog NAME");
  }
  std::vector<Source> out;
  if (!opts.pattern.empty()) {
    Pattern p = Pattern::parse(opts.pattern);
    p.name = p.str();
    out.push_back({"", std::move(p)});
    return out;
  }
  // A path (a '/' in it, or the .patterns suffix) is a catalog file; anything else a pass.
  const std::string& c = opts.catalog;
  if (c.find('/') != std::string::npos ||
      (c.size() > 9 && c.compare(c.size() - 9, 9, ".patterns") == 0)) {
    for (Pattern& p : loadCatalog(c)) out.push_back({"", std::move(p)});
    return out;
  }
  for (const PassInfo& info : allPasses()) {
    if (opts.catalog != "all" && info.name != opts.catalog) continue;
    for (Pattern& p : createPass(info.name)->patterns()) {
      out.push_back({std::string(info.name), std::move(p)});
    }
  }
  if (opts.catalog != "all" && !findPass(opts.catalog)) createPass(opts.catalog);  // names close ones
  if (out.empty() && opts.catalog != "all" && held_back_rules == 0) {
    throw Error(ErrorKind::Usage, fmt::format("pass '{}' is not pattern based: it has no patterns",
                                              opts.catalog));
  }
  return out;
}

std::string opOf(const Node& n) {
  return n.domain().empty() ? n.opType() : n.domain() + "::" + n.opType();
}

std::string boundText(const Pattern& p, const Match& m) {
  std::string s;
  for (size_t i = 0; i < m.nodes().size(); ++i) {
    Node* n = m[i];
    if (!n) continue;
    std::string label = n->label();
    std::string item = p.nodes[i].capture.empty() ? label : p.nodes[i].capture + "=" + label;
    if (label.rfind(n->opType(), 0) != 0) item += " (" + opOf(*n) + ")";
    s += (s.empty() ? "" : ", ") + item;
  }
  for (size_t i = 0; i < m.values().size(); ++i) {
    if (p.leaves[i].capture.empty() || !m.values()[i]) continue;
    s += fmt::format(", ${}='{}'", p.leaves[i].capture, m.values()[i]->name());
  }
  return s;
}

// " [benefit 2, produces fusectl::FusedConv]" for what the pass declared; "" when nothing.
std::string declaredText(const Pattern& p) {
  std::vector<std::string> parts;
  if (p.benefit != 1) parts.push_back(fmt::format("benefit {}", p.benefit));
  if (!p.produces.empty()) parts.push_back(fmt::format("produces {}", fmt::join(p.produces, ", ")));
  return parts.empty() ? "" : fmt::format(" [{}]", fmt::join(parts, ", "));
}

nlohmann::ordered_json matchJson(const Pattern& p, const Match& m) {
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  for (size_t i = 0; i < m.nodes().size(); ++i)
    nodes.push_back({{"capture", p.nodes[i].capture}, {"node", m[i]->label()}, {"op", opOf(*m[i])}});
  nlohmann::ordered_json j = {{"root", m.root()->label()}, {"nodes", nodes}};
  if (!m.values().empty()) {
    nlohmann::ordered_json values = nlohmann::ordered_json::array();
    for (size_t i = 0; i < m.values().size(); ++i) {
      if (p.leaves[i].capture.empty()) continue;
      values.push_back({{"capture", p.leaves[i].capture}, {"value", m.values()[i]->name()}});
    }
    j["values"] = values;
  }
  return j;
}

// The held-back rules' matches, apart from the patterns' own: a site a pass leaves alone on
// purpose. Only matches are reported; a rule that does not match says nothing.
void reportHeldBackRules(const Graph& g, const std::vector<FusionRule>& rules, bool json,
                         nlohmann::ordered_json& rejected, nlohmann::ordered_json& opt_in) {
  MatchOptions quiet;
  quiet.explain = false;
  for (const FusionRule& rule : rules) {
    for (const Pattern& p : rule.variants) {
      MatchResult r = matchPattern(g, p, quiet);
      if (r.matches.empty()) continue;
      const RuleEvidence& e = rule.evidence;
      if (json) {
        for (const Match& m : r.matches) {
          nlohmann::ordered_json jm = {{"rule", rule.name},
                                       {"pass", rule.pass},
                                       {"status", std::string(ruleStatusName(rule.status))},
                                       {"variant", p.name},
                                       {"pattern", p.str()}};
          jm.update(matchJson(p, m));
          jm["evidence"] = {{"measured", e.measured},
                            {"command", e.command},
                            {"figures", e.figures},
                            {"source", e.source}};
          (rule.status == RuleStatus::Rejected ? rejected : opt_in).push_back(std::move(jm));
        }
        continue;
      }
      std::cout << fmt::format("{} rule {} ({}): {}{}\n", ruleStatusName(rule.status), rule.name,
                               rule.pass, p.str(), declaredText(p));
      const char* note = rule.status == RuleStatus::Rejected ? "never applied"
                                                              : "not applied unless asked for";
      for (const Match& m : r.matches)
        std::cout << fmt::format("  would match: {} ({})\n", boundText(p, m), note);
      std::cout << fmt::format("  measured: {}\n", e.measured);
      std::cout << fmt::format("  command: {}\n", e.command);
      std::cout << fmt::format("  figures: {}\n", e.figures);
      std::cout << fmt::format("  source: {}\n", e.source);
    }
  }
}

int runMatch(const MatchCliOptions& opts) {
  const std::vector<FusionRule> held_back = heldBackRulesFor(opts);
  std::vector<Source> sources = patternsFor(opts, held_back.size());
  LoadOptions load = loadOptions();
  load.input_shapes = parseShapeSpecs(opts.shapes);
  std::unique_ptr<Model> model = loadModel(opts.model, load);
  unspellFusectlNodes(*model);  // as the passes see a saved model: FusedConv_Relu is a FusedConv
  const Graph& g = *model->graph;

  MatchOptions mo;
  mo.explain = opts.explain;
  nlohmann::ordered_json jm = nlohmann::ordered_json::array();
  nlohmann::ordered_json jn = nlohmann::ordered_json::array();
  nlohmann::ordered_json jp = nlohmann::ordered_json::array();
  for (const Source& src : sources) {
    MatchResult r = matchPattern(g, src.pattern, mo);
    if (opts.json) {
      for (const Match& m : r.matches) {
        nlohmann::ordered_json jmatch = {{"pass", src.pass}, {"pattern", src.pattern.name}};
        jmatch.update(matchJson(src.pattern, m));
        jm.push_back(std::move(jmatch));
      }
      for (const NearMiss& miss : r.near_misses) {
        jn.push_back({{"pass", src.pass},
                      {"pattern", miss.pattern},
                      {"anchor", miss.anchor},
                      {"constraint", miss.constraint},
                      {"node", miss.node},
                      {"reason", miss.reason}});
      }
      nlohmann::ordered_json jpattern = {{"pass", src.pass},
                                         {"name", src.pattern.name},
                                         {"pattern", src.pattern.str()},
                                         {"candidates", r.candidates},
                                         {"matches", r.matches.size()}};
      if (src.pattern.benefit != 1) jpattern["benefit"] = src.pattern.benefit;
      if (!src.pattern.produces.empty()) jpattern["produces"] = src.pattern.produces;
      jp.push_back(std::move(jpattern));
      continue;
    }
    const std::string text = src.pattern.str() + declaredText(src.pattern);
    std::string title = fmt::format("pattern {}: {}", src.pattern.name, text);  // a catalog's
    if (!src.pass.empty()) {
      title = fmt::format("pattern {} ({}): {}", src.pattern.name, src.pass, text);
    } else if (src.pattern.name == text) {  // --pattern
      title = "pattern " + text;
    }
    std::cout << title << "\n";
    for (const Match& m : r.matches) std::cout << "  match: " << boundText(src.pattern, m) << "\n";
    for (const NearMiss& miss : r.near_misses) {
      std::cout << fmt::format("  no match at {} [{}]: {}\n", miss.anchor, miss.constraint,
                               miss.reason);
    }
    std::cout << fmt::format("  {} candidate{}, {} match{}", r.candidates,
                             r.candidates == 1 ? "" : "s", r.matches.size(),
                             r.matches.size() == 1 ? "" : "es");
    if (opts.explain) {
      std::cout << fmt::format(", {} near miss{}", r.near_misses.size(),
                               r.near_misses.size() == 1 ? "" : "es");
    }
    std::cout << "\n";
  }
  nlohmann::ordered_json rejected = nlohmann::ordered_json::array();
  nlohmann::ordered_json opt_in = nlohmann::ordered_json::array();
  reportHeldBackRules(g, held_back, opts.json, rejected, opt_in);
  if (opts.json) {
    nlohmann::ordered_json j;
    j["matches"] = jm;
    j["near_misses"] = jn;
    j["patterns"] = jp;
    j["rejected_rules"] = rejected;
    j["opt_in_rules"] = opt_in;
    std::cout << j.dump(2) << "\n";
  }
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return 0;
}

}  // namespace

Command addMatchCommand(CLI::App& parent) {
  auto opts = std::make_shared<MatchCliOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "match", "Find a pattern's matches in a model; --explain says why other candidates failed");
  cmd->add_option("MODEL", opts->model, "Model file (.onnx, or .onnxtxt for ONNX text)")
      ->required();
  cmd->add_option("--pattern", opts->pattern,
                  "Pattern text, e.g. 'c:Conv -> bn:BatchNormalization' (docs/patterns.md)")
      ->type_name("EXPR");
  cmd->add_option("--catalog", opts->catalog,
                  "Use the patterns of pass NAME (see 'fusectl passes'), 'all', or a catalog "
                  "file (a path with '/' or ending in .patterns; docs/patterns.md)")
      ->type_name("NAME|FILE");
  cmd->add_flag("--explain", opts->explain,
                "Also list every candidate that did not match, with the first reason, and the "
                "catalog's rejected and opt-in rules that would match, with their evidence");
  cmd->add_flag("--json", opts->json,
                "JSON: {\"matches\": [...], \"near_misses\": [...], \"patterns\": [...], "
                "\"rejected_rules\": [...], \"opt_in_rules\": [...]}");
  cmd->add_option("--shape", opts->shapes, "Fix an input's shape, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS")
      ->allow_extra_args(false);
  return Command{cmd, [opts] { return runMatch(*opts); }};
}

}  // namespace fusectl::cli
