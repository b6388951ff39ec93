// Pipelines and the PassManager: text round trip, errors, -O levels, fixpoint caps, verify-each
// naming the pass that broke the graph, debugging output, statistics, the rewriter and the
// report (checked against docs/schemas/report.schema.json).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "dump_schema_check.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/pipeline.h"
#include "fusectl/passes/registry.h"
#include "fusectl/passes/rewriter.h"

using namespace fusectl;
using namespace fusectl::passes;

namespace {

std::string usageError(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Usage);
    return e.what();
  }
  FAIL("no error");
  return "";
}

// ---- Passes registered by these tests ----

// Claims a change every time (and makes one: it renames the first node), so a fixpoint never
// ends.
class AlwaysChangesPass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-always-changes", "test: never converges",
                                  Portability::Standard, 9};
  const PassInfo& info() const override { return kInfo; }
  bool run(const Graph& g, PassContext& ctx) override {
    Rewriter(ctx).renameNode(g.firstNode(), g.firstNode()->name() + "x");
    ctx.count("ticks");
    return true;
  }
};

// Changes the graph on its first two runs in a process-wide count, then converges.
int g_changes_left = 0;
class ChangesTwicePass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-changes-twice", "test: converges after two changes",
                                  Portability::Standard, 9};
  const PassInfo& info() const override { return kInfo; }
  bool run(const Graph& g, PassContext& ctx) override {
    if (g_changes_left == 0) return false;
    --g_changes_left;
    Rewriter(ctx).renameNode(g.firstNode(), g.firstNode()->name() + "y");
    return true;
  }
};

// Breaks topological order: moves the last node before the first. No Rewriter action can do
// that, so it casts the const view away, as a buggy pass (or Rewriter) might.
class BreaksGraphPass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-breaks-graph", "test: breaks an invariant",
                                  Portability::Standard, 9};
  const PassInfo& info() const override { return kInfo; }
  bool run(const Graph& view, PassContext&) override {
    Graph& g = const_cast<Graph&>(view);
    if (g.numNodes() >= 2) g.moveBefore(g.lastNode(), g.firstNode());
    return true;
  }
};

// Changes the model but says it did not.
class LiesPass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-lies", "test: unreported change", Portability::Standard,
                                  9};
  const PassInfo& info() const override { return kInfo; }
  bool run(const Graph& g, PassContext& ctx) override {
    Rewriter(ctx).renameNode(g.firstNode(), "renamed");
    return false;
  }
};

class ThrowsPass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-throws", "test: fails", Portability::Standard, 9};
  const PassInfo& info() const override { return kInfo; }
  bool run(const Graph&, PassContext&) override { throwInvalid("boom"); }
};

class FusectlOnlyPass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-fusectl-only", "test: needs the fusectl domain",
                                  Portability::Fusectl, 9};
  const PassInfo& info() const override { return kInfo; }
  bool run(const Graph& g, PassContext& ctx) override {
    Rewriter(ctx).renameNode(g.firstNode(), g.firstNode()->name() + "f");
    return true;
  }
};

// Relu(Relu(x)) -> Relu(x) through applyPattern + Rewriter::replaceMatch; records the options it
// saw.
std::map<std::string, std::string> g_seen_options;
class FuseDoubleReluPass : public Pass {
 public:
  static constexpr PassInfo kInfo{"test-fuse-double-relu", "test: Relu(Relu(x)) -> Relu(x)",
                                  Portability::Standard, 9};
  const PassInfo& info() const override { return kInfo; }
  std::vector<Pattern> patterns() const override {
    Pattern p = Pattern::parse("inner:Relu -> outer:Relu", "double-relu");
    p.require(constraints::uniqueConsumer("inner"));
    return {p};
  }
  bool run(const Graph& g, PassContext& ctx) override {
    g_seen_options = ctx.options();
    return applyPattern(g, ctx, patterns()[0], [&](Rewriter& rw, const Match& m) {
             NewNode relu;
             relu.op_type = "Relu";
             relu.inputs = {m.get("inner")->input(0)};
             rw.replaceMatch("double-relu", m, m.get("outer")->output(0), std::move(relu));
             return true;
           }) > 0;
  }
};

template <typename P>
void registerOnce(const std::vector<PassOption>& options = {}) {
  if (!findPass(P::kInfo.name)) {
    registerPass(P::kInfo, [] { return std::make_unique<P>(); }, options);
  }
}

// The options test-fuse-double-relu declares, one of each kind, for the pipeline grammar tests.
const std::vector<PassOption> kDoubleReluOptions = {
    {"", "a", OptionType::Int, "0", "test: an int"},
    {"", "b", OptionType::String, "x", "test: a word"},
    {"", "k", OptionType::String, "v", "test: a word the pass records"},
    {"", "n", OptionType::Count, "1", "test: a count"},
    {"", "on", OptionType::Bool, "false", "test: a flag"},
    {"", "x", OptionType::Float, "0.5", "test: a number"},
};

void registerTestPasses() {
  registerOnce<AlwaysChangesPass>();
  registerOnce<ChangesTwicePass>();
  registerOnce<BreaksGraphPass>();
  registerOnce<LiesPass>();
  registerOnce<ThrowsPass>();
  registerOnce<FusectlOnlyPass>();
  registerOnce<FuseDoubleReluPass>(kDoubleReluOptions);
}

const char* kIdentities = R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[2, 3] X) => (float[2, 3] Y)
<float[3] B1 = {1, 2, 3}, float[3] B2 = {1, 2, 3}>
{
  A = Identity (X)
  C = Add (A, B1)
  D = Identity (C)
  E = Add (D, B2)
  F = Identity (E)
  Y = Relu (F)
}
)";

const char* kReluChains = R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 4, 4] X) => (float[1, 2, 4, 4] Y, float[1, 2, 4, 4] Z, float[1, 2, 4, 4] W)
{
  A = Relu (X)
  Y = Relu (A)
  B = Sigmoid (X)
  C = Relu (B)
  Z = Relu (C)
  W = Add (C, X)
}
)";

std::unique_ptr<Model> load(const char* text) { return parseModelText(text, "test"); }

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("pipeline: parse and print round trip", "[pipeline]") {
  registerTestPasses();
  const char* texts[] = {
      "eliminate-identity",
      "eliminate-identity,fixpoint(dedup-initializers,eliminate-dead-code),eliminate-identity",
      "test-fuse-double-relu{a=1,b=relu}",
      "fixpoint(eliminate-identity,fixpoint(test-fuse-double-relu{x=-1.5}))",
      "fold-constants{max-bytes=16}",
  };
  for (const char* t : texts) {
    INFO(t);
    Pipeline p = Pipeline::parse(t);
    CHECK(p.str() == t);
    CHECK(Pipeline::parse(p.str()).str() == t);
  }
  CHECK(Pipeline::parse("").empty());
  CHECK(Pipeline::parse("  eliminate-identity , fixpoint( eliminate-dead-code ) ").str() ==
        "eliminate-identity,fixpoint(eliminate-dead-code)");
  // Options print sorted by key, as given (defaults are not filled in).
  CHECK(Pipeline::parse("test-fuse-double-relu{b=2, a=1}").str() ==
        "test-fuse-double-relu{a=1,b=2}");
  Pipeline p = Pipeline::parse("test-fuse-double-relu{b=relu},fixpoint(eliminate-dead-code)");
  REQUIRE(p.elements.size() == 2);
  CHECK(p.elements[0].options.at("b") == "relu");
  CHECK(p.elements[0].options.size() == 1);
  CHECK(p.elements[1].isGroup());
  CHECK(p.elements[1].group.at(0).pass == "eliminate-dead-code");
}

TEST_CASE("pipeline: errors", "[pipeline]") {
  auto parseErr = [](const char* t) { return usageError([&] { Pipeline::parse(t); }); };
  CHECK_THAT(parseErr("eliminate-identty"),
             Catch::Contains("unknown pass 'eliminate-identty' (did you mean "
                             "eliminate-identity?)"));
  CHECK_THAT(parseErr("eliminate-identity,dead-code"),
             Catch::Contains("column 20: unknown pass 'dead-code' (did you mean "
                             "eliminate-dead-code?)"));
  CHECK_THAT(parseErr("eliminate-identity,"), Catch::Contains("column 20: expected a pass name"));
  CHECK_THAT(parseErr("fixpoint(eliminate-identity"), Catch::Contains("expected ',' or ')'"));
  CHECK_THAT(parseErr("fixpoint()"), Catch::Contains("empty fixpoint group"));
  CHECK_THAT(parseErr("fixpoint"), Catch::Contains("expected '(' after 'fixpoint'"));
  CHECK_THAT(parseErr("eliminate-identity{a}"), Catch::Contains("expected '=' after option 'a'"));
  registerTestPasses();
  CHECK_THAT(parseErr("test-fuse-double-relu{a=1,a=2}"),
             Catch::Contains("option 'a' given twice"));
  CHECK_THAT(parseErr("eliminate-identity{}"), Catch::Contains("empty option list"));
  CHECK_THAT(parseErr("eliminate-identity)"), Catch::Contains("')' without a matching"));
  CHECK_THAT(parseErr("eliminate-identity eliminate-dead-code"),
             Catch::Contains("column 20: expected ',' or the end"));

  CHECK_THAT(usageError([] { createPass("fold-everything"); }),
             Catch::Contains("unknown pass 'fold-everything'"));
  CHECK_THAT(usageError([] { createPass("zzzzzzzzzzzzzzzzzzzz"); }),
             Catch::Contains("run 'fusectl passes' for the list"));
  CHECK(closePassNames("dedup").at(0) == "dedup-initializers");
  CHECK(closePassNames("elim-identity").at(0) == "eliminate-identity");
  CHECK(closePassNames("elim-dead").at(0) == "eliminate-dead-code");
}

TEST_CASE("pipeline: options are declared with the pass and checked when parsed", "[pipeline]") {
  registerTestPasses();
  auto parseErr = [](const char* t) { return usageError([&] { Pipeline::parse(t); }); };
  // A pass that reads no option refuses one, naming the pass, the key and what it takes.
  CHECK(parseErr("eliminate-identity,fuse-epilogue{act=relu}") ==
        "invalid pipeline \"eliminate-identity,fuse-epilogue{act=relu}\" at column 34: pass "
        "'fuse-epilogue' has no option 'act' (it takes none)");
  CHECK_THAT(parseErr("fold-constants{max=16}"),
             Catch::Contains("column 16: pass 'fold-constants' has no option 'max' (its "
                             "options: max-bytes)"));
  CHECK_THAT(parseErr("test-fuse-double-relu{a=1,zz=2}"),
             Catch::Contains("has no option 'zz' (its options: a, b, k, n, on, x)"));
  // Values are checked against the declared type.
  const std::pair<const char*, const char*> bad_values[] = {
      {"fold-constants{max-bytes=lots}",
       "option 'max-bytes' of pass 'fold-constants' takes a count (a whole number >= 0), not "
       "'lots'"},
      {"fold-constants{max-bytes=-1}", "not '-1'"},
      {"fold-constants{max-bytes=99999999999999999999999}", "takes a count"},
      {"test-fuse-double-relu{a=1.5}", "takes a whole number"},
      {"test-fuse-double-relu{x=1.5x}", "takes a number"},
      {"test-fuse-double-relu{on=yes}", "takes true or false"},
      {"test-fuse-double-relu{n=+3}", "takes a count"},
  };
  for (const auto& [text, message] : bad_values) {
    INFO(text);
    CHECK_THAT(parseErr(text), Catch::Contains(message));
  }
  CHECK(Pipeline::parse("test-fuse-double-relu{a=-3,n=0,on=true,x=1e-3,b=w}").str() ==
        "test-fuse-double-relu{a=-3,b=w,n=0,on=true,x=1e-3}");

  // The declarations, and the value a running pass sees: given, else the declared default.
  std::vector<PassOption> fold = passOptions("fold-constants");
  REQUIRE(fold.size() == 1);
  CHECK(fold[0].name == "max-bytes");
  CHECK(fold[0].type == OptionType::Count);
  CHECK(fold[0].default_value == "1048576");
  CHECK(passOptions("fuse-epilogue").empty());
  CHECK(passOptions("test-fuse-double-relu").size() == kDoubleReluOptions.size());
  CHECK(passOptions("test-fuse-double-relu")[0].pass == "test-fuse-double-relu");
  auto m = parseModelText("<ir_version: 8, opset_import: [\"\" : 13]>\ng (float[1] X) => (float[1] Y)\n"
                          "{\n  Y = Relu (X)\n}\n",
                          "t");
  Report report;
  PassContext ctx(*m, report);
  CHECK(optionOrDefault(ctx, "fold-constants", "max-bytes") == "1048576");
  // A pass run directly, with no PassManager to set the current pass, gets its defaults too.
  CHECK_NOTHROW(createPass("fold-constants")->run(ctx.graph(), ctx));
  ctx.setOptions({{"max-bytes", "16"}});
  CHECK(optionOrDefault(ctx, "fold-constants", "max-bytes") == "16");
  CHECK(optionOrDefault(ctx, "fold-constants", "nope") == "");
}

TEST_CASE("pipeline: registry from passes.def", "[pipeline]") {
  REQUIRE(findPass("eliminate-identity"));
  CHECK(findPass("eliminate-identity")->level == 1);
  CHECK(findPass("eliminate-identity")->portability == Portability::Standard);
  CHECK(findPass("nope") == nullptr);
  CHECK(isBuiltinPass("eliminate-dead-code"));
  CHECK_FALSE(isBuiltinPass("test-lies"));
  for (const PassInfo& info : allPasses()) {
    if (!isBuiltinPass(info.name)) continue;
    INFO(info.name);
    std::unique_ptr<Pass> p = createPass(info.name);
    CHECK(p->info().name == info.name);  // each pass reports the passes.def line
    CHECK(p->info().description == info.description);
    CHECK(!info.description.empty());
    // 0: in no -O level, run by name or by its flag (both by --emit ort) only.
    CHECK((info.level >= 0 && info.level <= 3));
    if (info.level == 0)
      CHECK((info.name == "emit-ort" || info.name == "unpack-packed-attention" ||
             info.name == "unmerge-parallel-matmuls"));
  }
  registerTestPasses();
  CHECK_THAT(usageError([] {
               registerPass(AlwaysChangesPass::kInfo,
                            [] { return std::make_unique<AlwaysChangesPass>(); });
             }),
             Catch::Contains("already registered"));
}

TEST_CASE("pipeline: -O levels come from passes.def", "[pipeline]") {
  CHECK(Pipeline::forLevel(0).empty());
  for (int level = 1; level <= 3; ++level) {
    INFO("-O" << level);
    Pipeline p = Pipeline::forLevel(level);
    std::string text = p.str();
    CHECK(Pipeline::parse(text).str() == text);
    for (const PassInfo& info : allPasses()) {
      if (!isBuiltinPass(info.name)) continue;
      bool listed = text.find(std::string(info.name)) != std::string::npos;
      // Level 0 is no level: such a pass (emit-ort) runs by name or by its flag only.
      CHECK(listed == (info.level >= 1 && info.level <= level));
    }
  }
  // Level-1 passes run as one capped fixpoint group, in passes.def order.
  Pipeline o1 = Pipeline::forLevel(1);
  REQUIRE(o1.elements.size() == 1);
  REQUIRE(o1.elements[0].isGroup());
  std::vector<std::string> order;
  for (const PassInfo& info : allPasses())
    if (isBuiltinPass(info.name) && info.level == 1) order.push_back(std::string(info.name));
  std::vector<std::string> got;
  for (const PipelineElement& e : o1.elements[0].group) got.push_back(e.pass);
  CHECK(got == order);

  std::string without = Pipeline::forLevel(1, {"dedup-initializers"}).str();
  CHECK(without.find("dedup-initializers") == std::string::npos);
  CHECK(without.find("eliminate-identity") != std::string::npos);
  CHECK_THAT(usageError([] { Pipeline::forLevel(1, {"dedup"}); }),
             Catch::Contains("unknown pass 'dedup'"));
  CHECK_THAT(usageError([] { Pipeline::forLevel(4); }), Catch::Contains("-O4"));
}

TEST_CASE("pipeline: fixpoint groups are capped", "[pipeline]") {
  registerTestPasses();
  auto m = load(kIdentities);
  Report report;
  PassManagerOptions o;
  o.max_fixpoint_iterations = 3;
  std::vector<std::string> log;
  o.log = [&](const std::string& line) { log.push_back(line); };
  CHECK(PassManager(o).run(*m, Pipeline::parse("fixpoint(test-always-changes)"), report));
  REQUIRE(report.fixpoints.size() == 1);
  CHECK(report.fixpoints[0].group == "fixpoint(test-always-changes)");
  CHECK(report.fixpoints[0].iterations == 3);
  CHECK_FALSE(report.fixpoints[0].converged);
  REQUIRE(report.passes.size() == 3);
  CHECK(report.passes[2].iteration == 3);
  CHECK(report.passes[2].counters.at("ticks") == 1);
  CHECK_THAT(log.back(), Catch::Contains("still changing after 3 iterations"));

  // A group that converges stops at the first round without change.
  g_changes_left = 2;
  Report r2;
  CHECK(PassManager(o).run(*m, Pipeline::parse("fixpoint(test-changes-twice)"), r2));
  REQUIRE(r2.fixpoints.size() == 1);
  CHECK(r2.fixpoints[0].iterations == 3);
  CHECK(r2.fixpoints[0].converged);
  CHECK_FALSE(r2.passes.back().changed);
}

TEST_CASE("pipeline: verify-each names the pass that broke the graph", "[pipeline]") {
  registerTestPasses();
  {
    auto m = load(kIdentities);
    Report report;
    PassManagerOptions o;
    o.verify_each = true;
    try {
      PassManager(o).run(*m, Pipeline::parse("eliminate-dead-code,test-breaks-graph"), report);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Internal);
      CHECK_THAT(e.what(), Catch::StartsWith("pass 'test-breaks-graph' broke the graph: "));
    }
  }
  {
    // Without verify-each nothing notices.
    auto m = load(kIdentities);
    Report report;
    CHECK_NOTHROW(PassManager().run(*m, Pipeline::parse("test-breaks-graph"), report));
  }
  {
    auto m = load(kIdentities);
    Report report;
    PassManagerOptions o;
    o.verify_each = true;
    try {
      PassManager(o).run(*m, Pipeline::parse("test-lies"), report);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == "pass 'test-lies' reported no change but changed the model");
    }
  }
  {
    auto m = load(kIdentities);
    Report report;
    try {
      PassManager().run(*m, Pipeline::parse("test-throws"), report);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidInput);
      CHECK(std::string(e.what()) == "pass 'test-throws': boom");
    }
  }
}

TEST_CASE("pipeline: statistics and logging and print and dump folder", "[pipeline]") {
  auto m = load(kIdentities);
  Report report;
  PassManagerOptions o;
  std::vector<std::string> log, printed;
  o.log = [&](const std::string& line) { log.push_back(line); };
  o.print = [&](const std::string& text) { printed.push_back(text); };
  o.print_after = {"eliminate-identity"};
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("fusectl-dump-{}", ::getpid());
  std::filesystem::remove_all(dir);
  o.dump_dir = dir.string();
  CHECK(PassManager(o).run(*m, Pipeline::parse("eliminate-identity,dedup-initializers"), report));

  CHECK(report.pipeline == "eliminate-identity,dedup-initializers");
  CHECK(report.before.nodes == 6);
  CHECK(report.after.nodes == 3);
  CHECK(report.before.parameter_bytes == 24);
  CHECK(report.after.parameter_bytes == 12);
  REQUIRE(report.passes.size() == 2);
  const PassStatistics& s = report.passes[0];
  CHECK(s.pass == "eliminate-identity");
  CHECK(s.changed);
  CHECK(s.nodes_before == 6);
  CHECK(s.nodes_after == 3);
  CHECK(s.intermediates_before == 5);
  CHECK(s.intermediates_after == 2);
  CHECK(s.counters.at("removed_identity") == 3);
  CHECK(s.counters.at("rewrites") == 3);
  CHECK(report.passes[1].counters.at("merged") == 1);
  REQUIRE(log.size() == 2);
  CHECK_THAT(log[0], Catch::StartsWith("eliminate-identity: "));
  CHECK_THAT(log[0], Catch::Contains("changed, nodes 6 -> 3, intermediates 5 -> 2"));
  CHECK_THAT(log[0], Catch::Contains("removed_identity=3"));
  REQUIRE(printed.size() == 1);
  CHECK_THAT(printed[0], Catch::StartsWith("# *** after eliminate-identity ***\n"));
  CHECK_THAT(printed[0], Catch::Contains("Relu ("));

  // --print-before and --print-changed.
  auto again = load(kIdentities);
  Report r2;
  PassManagerOptions o2;
  std::vector<std::string> shown;
  o2.print = [&](const std::string& text) { shown.push_back(text.substr(0, text.find('\n'))); };
  o2.print_before = {"all"};
  o2.print_changed = true;
  PassManager(o2).run(*again, Pipeline::parse("eliminate-identity,eliminate-dead-code"), r2);
  CHECK(shown == std::vector<std::string>{"# *** before eliminate-identity ***",
                                          "# *** after eliminate-identity ***",
                                          "# *** before eliminate-dead-code ***"});
  for (const char* f : {"00-input.onnx", "00-input.onnxtxt", "01-eliminate-identity.onnx",
                        "01-eliminate-identity.onnxtxt", "02-dedup-initializers.onnxtxt"}) {
    INFO(f);
    CHECK(std::filesystem::exists(dir / f));
  }
  auto reloaded = loadModel((dir / "01-eliminate-identity.onnx").string());
  CHECK(reloaded->graph->numNodes() == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("pipeline: --max-rewrites and --emit standard", "[pipeline]") {
  registerTestPasses();
  auto m = load(kIdentities);
  Report report;
  PassManagerOptions o;
  o.max_rewrites = 1;
  CHECK(PassManager(o).run(*m, Pipeline::parse("eliminate-identity"), report));
  CHECK(m->graph->numNodes() == 5);
  CHECK(report.passes[0].counters.at("skipped_max_rewrites") == 1);

  auto m2 = load(kIdentities);
  Report r2;
  PassManagerOptions std_only;
  std_only.standard_only = true;
  std::string before = modelToText(*m2);
  CHECK_FALSE(PassManager(std_only).run(*m2, Pipeline::parse("test-fusectl-only"), r2));
  CHECK(modelToText(*m2) == before);
  CHECK(r2.passes.empty());
}

TEST_CASE("rewriter: replaceMatch reports sites and near misses become rejections", "[pipeline]") {
  registerTestPasses();
  auto m = load(kReluChains);
  Report report;
  PassManagerOptions o;
  o.verify_each = true;
  CHECK(PassManager(o).run(*m, Pipeline::parse("test-fuse-double-relu{k=v}"), report));
  CHECK(g_seen_options.at("k") == "v");
  // Relu(Relu(X)) fused; Relu(C) is not: C also feeds the Add.
  CHECK(m->graph->numNodes() == 5);
  REQUIRE(report.fusions.size() == 1);
  const FusionSite& f = report.fusions[0];
  CHECK(f.pass == "test-fuse-double-relu");
  CHECK(f.pattern == "double-relu");
  CHECK(f.replaced_nodes == std::vector<std::string>{"Relu(A)", "Relu(Y)"});
  CHECK(f.new_op == "Relu");
  CHECK(f.activation_bytes_saved == 32 * 4);  // A: 1x2x4x4 float
  CHECK(report.fusionsByPattern().at("double-relu") == 1);
  Node* y = m->graph->outputs()[0]->producer();
  CHECK(y->is("Relu"));
  CHECK(y->input(0) == m->graph->inputs()[0]);
  CHECK_THAT(y->doc_string, Catch::Contains("fused Relu(A), Relu(Y)"));

  bool saw = false;
  for (const Report::Rejection& r : report.rejections) {
    if (r.miss.reason == "Relu(C) output has 2 consumers: Relu(Z), Add(W)") {
      saw = true;
      CHECK(r.pass == "test-fuse-double-relu");
      CHECK(r.miss.constraint == "unique-consumer:inner");
    }
  }
  CHECK(saw);
  // The Relu that was the outer one of the fused pair is no longer reported as rejected.
  for (const Report::Rejection& r : report.rejections) CHECK(r.miss.anchor != "Relu(A)");
}

TEST_CASE("report: JSON follows docs/schemas/report.schema.json", "[pipeline]") {
  registerTestPasses();
  auto m = load(kReluChains);
  Report report;
  report.tool_version = "0.1.0";
  report.input.file = "in.onnx";
  report.input.sha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  PassManager().run(*m, Pipeline::parse("fixpoint(test-fuse-double-relu),eliminate-dead-code"),
                    report);
  nlohmann::json j = nlohmann::json::parse(report.toJson());
  std::ifstream in(std::string(FUSECTL_SOURCE_DIR) + "/docs/schemas/report.schema.json");
  nlohmann::json schema = nlohmann::json::parse(in);
  CHECK(fusectl::testing::checkJsonSchema(j, schema, schema) == "");
  CHECK(j["schema"] == "fusectl.report/1");
  CHECK(j["summary"]["fusions"] == 1);
  CHECK(j["summary"]["activation_bytes_saved"] == 128);
  CHECK(j["before"]["op_histogram"]["Relu"] == 4);
  CHECK(j["fixpoints"][0]["converged"] == true);
  CHECK(j["rejections"].size() >= 1);
  // A deliberately wrong document is caught (the check has teeth).
  nlohmann::json bad = j;
  bad["passes"][0].erase("seconds");
  CHECK(fusectl::testing::checkJsonSchema(bad, schema, schema) != "");
}

TEST_CASE("docs/passes.md lists every registered pass", "[pipeline]") {
  std::string doc = readFile(std::string(FUSECTL_SOURCE_DIR) + "/docs/passes.md");
  const std::string begin = "<!-- BEGIN passes.def: generated by `fusectl passes --markdown` -->\n";
  const std::string end = "<!-- END passes.def -->";
  size_t b = doc.find(begin), e = doc.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  std::string table = doc.substr(b + begin.size(), e - b - begin.size());
  INFO("regenerate the table with: fusectl passes --markdown");
  CHECK(table == passesMarkdownTable());
  for (const PassInfo& info : allPasses())
    if (isBuiltinPass(info.name)) CHECK(table.find(fmt::format("`{}`", info.name)) != std::string::npos);
}

namespace {

struct CliResult {
  int code = -1;
  std::string out, err;
};

CliResult runFusectl(const std::string& args) {
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::string out = (dir / fmt::format("fusectl-passes-test-{}.out", ::getpid())).string();
  std::string err = (dir / fmt::format("fusectl-passes-test-{}.err", ::getpid())).string();
  std::string cmd = fmt::format("'{}' {} >'{}' 2>'{}'", FUSECTL_BINARY, args, out, err);
  int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = readFile(out);
  r.err = readFile(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

}  // namespace

TEST_CASE("cli: fusectl passes and fusectl match", "[pipeline][cli]") {
  const std::string fixtures = std::string(FUSECTL_SOURCE_DIR) + "/testdata/fixtures/";
  CliResult list = runFusectl("passes");
  CHECK(list.code == 0);
  // The name column is as wide as the longest pass name.
  CHECK_THAT(list.out, Catch::Matches("[\\s\\S]*\neliminate-identity +-O1    standard  Remove "
                                      "Identity[\\s\\S]*"));
  CHECK_THAT(list.out, Catch::Contains("-O1  " + Pipeline::forLevel(1).str()));
  CHECK_THAT(list.out, Catch::Contains("{max-bytes=count}  default 1048576: Fold a node only"));
  CliResult md = runFusectl("passes --markdown");
  CHECK(md.out == passesMarkdownTable());
  CliResult js = runFusectl("passes --json");
  REQUIRE(js.code == 0);
  nlohmann::json j = nlohmann::json::parse(js.out);
  CHECK(j["passes"][0]["name"] == "eliminate-identity");
  CHECK(j["passes"][0]["patterns"][0]["pattern"] == "identity:Identity");
  CHECK(j["levels"]["O0"] == "");
  // The passes that take an option: its name, type and default as passes.def declares them.
  struct DeclaredOption {
    const char* name;
    const char* type;
    const char* default_value;
  };
  const std::map<std::string, DeclaredOption> options = {
      {"fold-constants", {"max-bytes", "count", "1048576"}},
      {"merge-parallel-matmuls", {"narrow", "bool", "false"}},
      {"fuse-expand-depthwise", {"min-expanded-bytes", "count", "2097152"}},
  };
  for (const auto& pass : j["passes"]) {
    INFO("pass " << pass["name"]);
    auto declared = options.find(pass["name"].get<std::string>());
    if (declared == options.end()) {
      CHECK(pass["options"].empty());
      continue;
    }
    REQUIRE(pass["options"].size() == 1);
    CHECK(pass["options"][0]["name"] == declared->second.name);
    CHECK(pass["options"][0]["type"] == declared->second.type);
    CHECK(pass["options"][0]["default"] == declared->second.default_value);
  }
  // An option the pass does not read is a usage error (exit 2), not ignored.
  CliResult act = runFusectl("optimize '" + fixtures + "conv_bn_relu.onnxtxt' -o /dev/null "
                             "--passes 'fuse-epilogue{act=relu}'");
  CHECK(act.code == 2);
  CHECK_THAT(act.err, Catch::Contains("pass 'fuse-epilogue' has no option 'act' (it takes none)"));

  CliResult m = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --pattern "
                           "'c:Conv -> bn:BatchNormalization -> Relu'");
  CHECK(m.code == 0);
  CHECK_THAT(m.out, Catch::Contains("match: c=Conv(C), bn=BatchNormalization(N), Relu(Y)"));
  CliResult ex = runFusectl("match '" + fixtures + "multi_consumer.onnxtxt' --pattern "
                            "'a:Relu -> m:Mul' --explain --json");
  REQUIRE(ex.code == 0);
  nlohmann::json e = nlohmann::json::parse(ex.out);
  CHECK(e["matches"].size() == 1);
  CHECK(e["matches"][0]["nodes"][1]["node"] == "Mul(SQ)");
  CliResult miss = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --pattern "
                              "'c:Conv -> Relu' --explain --json");
  nlohmann::json n = nlohmann::json::parse(miss.out);
  REQUIRE(n["near_misses"].size() == 1);
  CHECK(n["near_misses"][0]["reason"] ==
        "Conv(C) output 0 feeds BatchNormalization(N), not Relu");

  CliResult neither = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt'");
  CHECK(neither.code == 2);
  CHECK_THAT(neither.err, Catch::Contains("give exactly one of --pattern EXPR and --catalog"));
  CliResult unknown = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --catalog "
                                 "elim-identity");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("did you mean eliminate-identity?"));
  CliResult bad = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --pattern 'Conv ->'");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("at column 8"));

  // A catalog file: its named patterns, each titled with its name.
  const std::string catalog = std::string(FUSECTL_SOURCE_DIR) + "/testdata/catalogs/cnn.patterns";
  CliResult cat = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --catalog '" +
                             catalog + "' --json");
  REQUIRE(cat.code == 0);
  nlohmann::json c = nlohmann::json::parse(cat.out);
  REQUIRE(c["patterns"].size() == 4);
  CHECK(c["patterns"][0]["name"] == "conv-bn-relu");
  CHECK(c["patterns"][0]["matches"] == 1);
  CHECK(c["patterns"][2]["pattern"] ==
        "c:Conv[group=1, dtype=float] -> bn:BatchNormalization");
  CliResult text = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --catalog '" +
                              catalog + "'");
  CHECK_THAT(text.out, Catch::Contains("pattern conv-bn-relu: c:Conv -> bn:BatchNormalization"));
  CliResult missing = runFusectl("match '" + fixtures + "conv_bn_relu.onnxtxt' --catalog "
                                 "./no_such.patterns");
  CHECK(missing.code == 4);
  CHECK(missing.err == "fusectl: error: ./no_such.patterns: cannot open the catalog\n");

  // A `$c:const` leaf bound to a Constant node's output: a near miss with its reason (this
  // dereferenced a missing initializer before).
  CliResult node_constant = runFusectl("match '" + fixtures +
                                       "div_by_constant_node.onnxtxt' --catalog canonicalize "
                                       "--explain --json");
  REQUIRE(node_constant.code == 0);
  CHECK_THAT(node_constant.out, Catch::Contains("a Constant node's output"));
}

TEST_CASE("pattern catalogs: entries, continuation lines and errors by line", "[pattern]") {
  std::vector<Pattern> ps = parseCatalog(R"(# a comment
conv-bn = c:Conv -> bn:BatchNormalization

residual = c:Conv -> add:Add ;
    other:* -> add
depthwise = Conv[group=32]
)",
                                         "cat.patterns");
  REQUIRE(ps.size() == 3);
  CHECK(ps[0].name == "conv-bn");
  CHECK(ps[1].name == "residual");
  CHECK(ps[1].str() == "c:Conv -> add:Add ; other:* -> add");
  CHECK(ps[2].str() == "Conv[group=32]");
  auto error = [](const std::string& text) {
    try {
      parseCatalog(text, "cat.patterns");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidInput);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("") == "cat.patterns: the catalog defines no pattern");
  CHECK(error("a = Conv\nConv -> Relu") == "cat.patterns:2: expected 'name = pattern'");
  CHECK(error("  Conv") == "cat.patterns:1: an indented line continues an entry, but none came "
                           "before");
  CHECK(error("a = Conv\na = Relu") == "cat.patterns:2: pattern 'a' is already defined on line 1");
  CHECK(error("a b = Conv") ==
        "cat.patterns:1: pattern name 'a b' may hold letters, digits, '-', '_' and '.' only");
  CHECK(error("a =") == "cat.patterns:1: pattern 'a' is empty");
  CHECK_THAT(error("x = Conv\n\ny = Conv ->"),
             Catch::StartsWith("cat.patterns:3: pattern 'y': invalid pattern \"Conv ->\" at column 8"));
}
