// The fusion catalog (fusion_catalog.h): every pass's rules in it, rejected rules carrying
// evidence that is really written where they say, docs/catalog.md current, `fusectl passes
// --catalog` and `fusectl match --explain` showing them, and a rejected rule never applied.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/fusion_catalog.h"
#include "fusectl/passes/optimize.h"
#include "fusectl/passes/registry.h"
#include "shell_util.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::passes;
namespace fs = std::filesystem;

namespace {

const std::string kSource = FUSECTL_SOURCE_DIR;

// Text as a reader sees it: comment leaders (`#`, `//`) at line starts dropped, every run of
// blanks and newlines one space. A quote that a file wraps over lines is still found in it.
std::string readerText(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos) b = line.size();
    if (line.compare(b, 2, "//") == 0) b += 2;
    else if (line.compare(b, 1, "#") == 0) b += 1;
    out += ' ';
    out.append(line, b, std::string::npos);
  }
  std::string collapsed;
  for (char c : out) {
    const bool blank = std::isspace(static_cast<unsigned char>(c));
    if (blank && (collapsed.empty() || collapsed.back() == ' ')) continue;
    collapsed += blank ? ' ' : c;
  }
  while (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
  return collapsed;
}

struct CliRun {
  int code = -1;
  std::string out, err;
};

CliRun runFusectl(const std::string& args) {
  static fusectl::testing::TempDir io("catalog-cli");
  const std::string out = io / "stdout", err = io / "stderr";
  const std::string cmd = fmt::format("timeout 120 {} {} >{} 2>{} </dev/null",
                                      fusectl::test::shellQuote(FUSECTL_BINARY), args,
                                      fusectl::test::shellQuote(out),
                                      fusectl::test::shellQuote(err));
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = fusectl::testing::slurp(out);
  r.err = fusectl::testing::slurp(err);
  return r;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// `n` small numbers, comma-separated: an initializer's elements.
std::string numbers(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", int(i % 7) - 3);
  return s;
}

// Three projections of X (a [1, 4, 8] activation), as attention's q/k/v: Q `q_width` wide, K and
// V `kv_width` wide. Grouped-query K/V a quarter of Q's width is merge-narrow-projections' case.
std::string projections(int q_width, int kv_width) {
  return fmt::format(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 4, 8] X) => (float[1, 4, {0}] Q, float[1, 4, {1}] K, float[1, 4, {1}] V)
<float[8, {0}] Wq = {{{2}}}, float[8, {1}] Wk = {{{3}}}, float[8, {1}] Wv = {{{3}}}>
{{
  Q = MatMul (X, Wq)
  K = MatMul (X, Wk)
  V = MatMul (X, Wv)
}}
)",
                     q_width, kv_width, numbers(8 * q_width), numbers(8 * kv_width));
}

// For each rule the catalog holds back, a small model where it would apply. A new rejected or
// opt-in rule without one fails the test below: it must show where it matches.
const std::map<std::string, std::string>& heldBackExamples() {
  static const std::map<std::string, std::string> examples = {
      {"merge-narrow-projections", projections(8, 2)},
      {"expand-depthwise-within-l2", R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[1, 2, 6, 6] X) => (float[1, 3, 6, 6] Y)
<
  float[3, 2, 1, 1] W = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6},
  float[3] B = {0.1, 0.2, -0.3},
  float[3, 1, 3, 3] DW = {0.1, 0.2, 0.3, -0.4, 0.5, 0.6, 0.7, -0.8, 0.9, 0.1, -0.2, 0.3, 0.4,
                          0.5, -0.6, 0.7, 0.8, 0.9, -0.1, 0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8, -0.9},
  float[3] DB = {0.0, 0.1, 0.2}
>
{
  E = fusectl.FusedConv <activation = "Clip", activation_params = [0.0, 6.0]> (X, W, B)
  Y = fusectl.FusedConv <group = 3, kernel_shape = [3, 3], pads = [1, 1, 1, 1], activation = "Clip", activation_params = [0.0, 6.0]> (E, DW, DB)
}
)"},
      {"div-by-inexact-constant", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 8] X) => (float[2, 8] Y)
<float three = {3.0}>
{
  Y = Div (X, three)
}
)"},
      {"div-by-sqrt-to-reciprocal", R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 8] X, float[2, 8] V) => (float[2, 8] Y)
{
  R = Sqrt (V)
  Y = Div (X, R)
}
)"},
  };
  return examples;
}

// A rule of the given status (merge-narrow-projections is opt-in: `narrow=true`).
FusionRule heldBackRule(const std::string& name, RuleStatus status) {
  for (FusionRule& r : fusionRules(status))
    if (r.name == name) return std::move(r);
  FAIL("the catalog has no " << ruleStatusName(status) << " rule " << name);
  return {};
}

size_t matchCount(const Model& m, const Pattern& p) {
  MatchOptions quiet;
  quiet.explain = false;
  return matchPattern(*m.graph, p, quiet).matches.size();
}

size_t countOp(const Model& m, const std::string& op) {
  size_t n = 0;
  for (const Node* node : m.graph->nodes()) n += node->opType() == op;
  return n;
}

}  // namespace

TEST_CASE("catalog: every registered pass's patterns are its active rule's variants", "[catalog]") {
  const std::vector<FusionRule> catalog = fusionCatalog();
  for (const PassInfo& info : allPasses()) {
    INFO("pass " << info.name);
    auto it = std::find_if(catalog.begin(), catalog.end(), [&](const FusionRule& r) {
      return r.status == RuleStatus::Active && r.pass == info.name;
    });
    REQUIRE(it != catalog.end());
    CHECK(it->name == info.name);
    const std::vector<Pattern> patterns = createPass(info.name)->patterns();
    REQUIRE(it->variants.size() == patterns.size());
    for (size_t i = 0; i < patterns.size(); ++i) {
      CHECK(it->variants[i].name == patterns[i].name);
      CHECK(it->variants[i].str() == patterns[i].str());
      CHECK(it->variants[i].produces == patterns[i].produces);
      REQUIRE(it->variants[i].constraints.size() == patterns[i].constraints.size());
      for (size_t c = 0; c < patterns[i].constraints.size(); ++c)
        CHECK(it->variants[i].constraints[c].name == patterns[i].constraints[c].name);
    }
  }
  // Names are unique, and every rule belongs to a registered pass.
  std::vector<std::string> names;
  for (const FusionRule& r : catalog) {
    CHECK(findPass(r.pass) != nullptr);
    names.push_back(r.name);
  }
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
}

TEST_CASE("catalog: statuses are valid and each held-back rule quotes its evidence", "[catalog]") {
  size_t held_back = 0;
  for (const FusionRule& r : fusionCatalog()) {
    INFO("rule " << r.name);
    const std::string status(ruleStatusName(r.status));
    CHECK((status == "active" || status == "opt-in" || status == "rejected"));
    CHECK(!r.summary.empty());
    if (r.status == RuleStatus::Active) {
      CHECK(r.evidence.empty());
      continue;
    }
    ++held_back;
    REQUIRE(!r.variants.empty());
    for (const Pattern& p : r.variants) CHECK(Pattern::parse(p.str()).str() == p.str());
    CHECK(!r.evidence.measured.empty());
    CHECK(!r.evidence.command.empty());
    REQUIRE(!r.evidence.figures.empty());
    REQUIRE(!r.evidence.source.empty());
    const fs::path source = fs::path(kSource) / r.evidence.source;
    REQUIRE(fs::is_regular_file(source));
    INFO("the figures must be quoted verbatim from " << r.evidence.source);
    CHECK(contains(readerText(fusectl::testing::slurp(source)), readerText(r.evidence.figures)));
  }
  CHECK(held_back == fusionRules(RuleStatus::Rejected).size() + fusionRules(RuleStatus::OptIn).size());
  CHECK(held_back > 0);
}

TEST_CASE("catalog: a rejected rule is never applied", "[catalog]") {
  for (const FusionRule& r : fusionCatalog()) {
    if (r.status == RuleStatus::Active) continue;
    INFO("rule " << r.name);
    // Not a pass: no pipeline can name it.
    CHECK_THROWS_AS(checkPassName(r.name), Error);
    OptimizeRequest by_name;
    by_name.passes = r.name;
    CHECK_THROWS_AS(planOptimization(by_name), Error);

    auto example = heldBackExamples().find(r.name);
    REQUIRE(example != heldBackExamples().end());
    std::unique_ptr<Model> model = parseModelText(example->second, r.name);
    size_t before = 0;
    for (const Pattern& p : r.variants) before += matchCount(*model, p);
    REQUIRE(before > 0);
    // Where the rule matches, its pass's own patterns do not: the rule is what the pass declines.
    for (const Pattern& p : createPass(r.pass)->patterns()) {
      INFO("active variant " << p.name);
      CHECK(matchCount(*model, p) == 0);
    }
    if (r.status != RuleStatus::Rejected) continue;
    OptimizeRequest o3;
    o3.level = 3;
    // fuse-elementwise takes whatever arithmetic is left into a program that computes it as
    // written (a Div stays a Div instruction), which would hide the match this counts.
    o3.disable = {"fuse-elementwise"};
    optimize(*model, o3);
    unspellFusectlNodes(*model);  // as `match` reads the saved model: FusedConv_Clip is a FusedConv
    size_t after = 0;
    for (const Pattern& p : r.variants) after += matchCount(*model, p);
    CHECK(after == before);
  }
}

TEST_CASE("catalog: merge-narrow-projections matches grouped-query widths only", "[catalog]") {
  const FusionRule rule = heldBackRule("merge-narrow-projections", RuleStatus::OptIn);
  REQUIRE(rule.variants.size() == 1);
  OptimizeRequest o3;
  o3.level = 3;

  // K/V a quarter of Q: one match (at the group's first member), and -O3 leaves three MatMuls.
  std::unique_ptr<Model> gqa = parseModelText(projections(8, 2), "gqa");
  MatchResult r = matchPattern(*gqa->graph, rule.variants[0]);
  REQUIRE(r.matches.size() == 1);
  CHECK(r.matches[0].root()->label() == "MatMul(Q)");
  optimize(*gqa, o3);
  CHECK(countOp(*gqa, "MatMul") == 3);
  CHECK(countOp(*gqa, "Slice") == 0);

  // Equal widths: the rule does not match, and the pass merges them into one MatMul.
  std::unique_ptr<Model> mha = parseModelText(projections(8, 8), "mha");
  MatchResult none = matchPattern(*mha->graph, rule.variants[0]);
  CHECK(none.matches.empty());
  REQUIRE(!none.near_misses.empty());
  CHECK(none.near_misses[0].constraint == "narrow-member:mm");
  optimize(*mha, o3);
  CHECK(countOp(*mha, "MatMul") == 1);
}

TEST_CASE("docs/catalog.md is generated from the catalog", "[catalog]") {
  const std::string doc = fusectl::testing::slurp(fs::path(kSource) / "docs" / "catalog.md");
  const std::string begin =
      "<!-- BEGIN fusion catalog: generated by `fusectl passes --catalog --markdown` -->\n";
  const std::string end = "<!-- END fusion catalog -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  INFO("regenerate the section with: fusectl passes --catalog --markdown");
  const std::string section = doc.substr(b + begin.size(), e - b - begin.size());
  CHECK(section == fusionCatalogMarkdown());
  for (const FusionRule& r : fusionCatalog())
    if (isBuiltinPass(r.pass)) CHECK(contains(section, fmt::format("`{}`", r.name)));
}

TEST_CASE("fusectl passes --catalog: table, JSON and Markdown", "[catalog][cli]") {
  // The binary knows the passes.def passes only; other tests may register more in this process.
  std::vector<FusionRule> catalog;
  for (FusionRule& r : fusionCatalog())
    if (isBuiltinPass(r.pass)) catalog.push_back(std::move(r));

  CliRun table = runFusectl("passes --catalog");
  REQUIRE(table.code == 0);
  for (const FusionRule& r : catalog) {
    CHECK(contains(table.out, r.name));
    if (r.status == RuleStatus::Active) continue;
    CHECK(contains(table.out, fmt::format("{} ({}, {})", r.name, ruleStatusName(r.status), r.pass)));
    CHECK(contains(table.out, r.evidence.figures));
    CHECK(contains(table.out, r.evidence.source));
  }

  CliRun json = runFusectl("passes --catalog --json");
  REQUIRE(json.code == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j["rules"].is_array());
  REQUIRE(j["rules"].size() == catalog.size());
  for (size_t i = 0; i < catalog.size(); ++i) {
    const FusionRule& r = catalog[i];
    const nlohmann::json& jr = j["rules"][i];
    INFO("rule " << r.name);
    CHECK(jr["name"] == r.name);
    CHECK(jr["pass"] == r.pass);
    CHECK(jr["status"] == std::string(ruleStatusName(r.status)));
    CHECK(jr["summary"] == r.summary);
    CHECK(jr["constraints"] == r.constraints());
    CHECK(jr["produces"] == r.produces());
    REQUIRE(jr["variants"].size() == r.variants.size());
    for (size_t v = 0; v < r.variants.size(); ++v) {
      CHECK(jr["variants"][v]["name"] == r.variants[v].name);
      CHECK(jr["variants"][v]["pattern"] == r.variants[v].str());
      CHECK(jr["variants"][v]["constraints"].size() == r.variants[v].constraints.size());
      CHECK(jr["variants"][v]["produces"] == r.variants[v].produces);
    }
    if (r.status == RuleStatus::Active) {
      CHECK(!jr.contains("evidence"));
      continue;
    }
    CHECK(jr["evidence"]["measured"] == r.evidence.measured);
    CHECK(jr["evidence"]["command"] == r.evidence.command);
    CHECK(jr["evidence"]["figures"] == r.evidence.figures);
    CHECK(jr["evidence"]["source"] == r.evidence.source);
  }

  CliRun markdown = runFusectl("passes --catalog --markdown");
  REQUIRE(markdown.code == 0);
  CHECK(markdown.out == fusionCatalogMarkdown());
  // Without --catalog the pass listing is unchanged.
  CHECK(runFusectl("passes --markdown").out == passesMarkdownTable());
}

TEST_CASE("fusectl match --explain names an opt-in rule that would match, with its evidence",
          "[catalog][cli]") {
  const FusionRule rule = heldBackRule("merge-narrow-projections", RuleStatus::OptIn);

  fusectl::testing::TempDir dir("catalog-match");
  const std::string gqa = dir / "gqa.onnxtxt", mha = dir / "mha.onnxtxt", opt = dir / "gqa.opt.onnx";
  {
    std::ofstream(gqa) << projections(8, 2);
    std::ofstream(mha) << projections(8, 8);
  }
  using fusectl::test::shellQuote;

  CliRun text = runFusectl("match " + shellQuote(gqa) + " --catalog merge-parallel-matmuls --explain");
  INFO(text.out << text.err);
  REQUIRE(text.code == 0);
  CHECK(contains(text.out, "opt-in rule merge-narrow-projections (merge-parallel-matmuls): " +
                               rule.variants[0].str()));
  CHECK(contains(text.out,
                 "would match: mm=MatMul(Q), $x='X', $w='Wq' (not applied unless asked for)"));
  CHECK(contains(text.out, "figures: " + rule.evidence.figures));
  CHECK(contains(text.out, "source: bench/README.md"));

  CliRun json = runFusectl("match " + shellQuote(gqa) + " --catalog all --explain --json");
  REQUIRE(json.code == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j["rejected_rules"].is_array());
  REQUIRE(j["opt_in_rules"].is_array());
  size_t named = 0;
  for (const nlohmann::json& m : j["rejected_rules"]) CHECK(m["rule"] != "merge-narrow-projections");
  for (const nlohmann::json& m : j["opt_in_rules"]) {
    if (m["rule"] != "merge-narrow-projections") continue;
    ++named;
    CHECK(m["pass"] == "merge-parallel-matmuls");
    CHECK(m["status"] == "opt-in");
    CHECK(m["pattern"] == rule.variants[0].str());
    CHECK(m["root"] == "MatMul(Q)");
    CHECK(m["evidence"]["figures"] == rule.evidence.figures);
    CHECK(m["evidence"]["command"] == rule.evidence.command);
    CHECK(m["evidence"]["source"] == "bench/README.md");
  }
  CHECK(named == 1);
  // Distinct from ordinary matches: no pattern match names the rule.
  for (const nlohmann::json& m : j["matches"]) CHECK(m["pattern"] != "merge-narrow-projections");

  // Not at equal widths, which the pass does merge.
  CliRun equal = runFusectl("match " + shellQuote(mha) + " --catalog all --explain --json");
  REQUIRE(equal.code == 0);
  // Parsed into a variable: a range-for over a temporary's element outlives the temporary.
  const nlohmann::json equal_json = nlohmann::json::parse(equal.out);
  for (const nlohmann::json& m : equal_json["opt_in_rules"])
    CHECK(m["rule"] != "merge-narrow-projections");

  // Held-back rules are tried with --explain only; a pass with no patterns still needs it.
  CliRun plain = runFusectl("match " + shellQuote(gqa) + " --catalog merge-parallel-matmuls");
  CHECK(plain.code == 2);
  CHECK(contains(plain.err, "not pattern based"));

  // -O3 leaves the rule's nodes as they were: the optimized model still shows the match.
  REQUIRE(runFusectl("optimize " + shellQuote(gqa) + " -O3 -o " + shellQuote(opt)).code == 0);
  CliRun after = runFusectl("match " + shellQuote(opt) + " --catalog merge-parallel-matmuls --explain");
  REQUIRE(after.code == 0);
  CHECK(contains(after.out,
                 "would match: mm=MatMul(Q), $x='X', $w='Wq' (not applied unless asked for)"));

  // Asked for: the pass's option takes the narrow members, and the rule no longer matches.
  const std::string merged = dir / "gqa.merged.onnx";
  REQUIRE(runFusectl("optimize " + shellQuote(gqa) +
                     " --passes 'merge-parallel-matmuls{narrow=true}' -o " + shellQuote(merged))
              .code == 0);
  CliRun asked = runFusectl("match " + shellQuote(merged) + " --catalog merge-parallel-matmuls --explain");
  REQUIRE(asked.code == 0);
  CHECK(!contains(asked.out, "would match"));
  CHECK(runFusectl("dump " + shellQuote(merged)).out.find("1  MatMul") != std::string::npos);
}

TEST_CASE("fusectl match reads a model saved after -O3 as the passes do", "[catalog][cli]") {
  // The saved model spells its FusedConvs by their functions (FusedConv_Clip...); match, like
  // the passes, reads them as FusedConv, so the size rule still names the pair -O3 declined.
  fusectl::testing::TempDir dir("catalog-match-saved");
  const std::string model = dir / "pair.onnxtxt", saved = dir / "pair.opt.onnx";
  std::ofstream(model) << heldBackExamples().at("expand-depthwise-within-l2");
  using fusectl::test::shellQuote;
  REQUIRE(runFusectl("optimize " + shellQuote(model) + " -O3 -o " + shellQuote(saved)).code == 0);
  CliRun dump = runFusectl("dump " + shellQuote(saved));
  INFO(dump.out);
  REQUIRE(contains(dump.out, "fusectl.FusedConv_"));

  CliRun explain = runFusectl("match " + shellQuote(saved) + " --catalog fuse-expand-depthwise --explain");
  INFO(explain.out << explain.err);
  REQUIRE(explain.code == 0);
  CHECK(contains(explain.out, "rejected rule expand-depthwise-within-l2"));
  CHECK(contains(explain.out, "would match: "));

  CliRun plain = runFusectl("match " + shellQuote(saved) + " --pattern 'c:fusectl::FusedConv'");
  INFO(plain.out);
  CHECK(contains(plain.out, "2 candidates, 2 matches"));
}
