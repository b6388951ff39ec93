// The HTML report (`fusectl report`, `optimize --html`, `diff --html`; libpasses'
// html_report.h): structure against the JSON report, no external URLs, determinism, errors,
// collapsing of large graphs, and a real browser (Debian's chromium, headless) rendering it.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/html_report.h"
#include "shell_util.h"
#include "test_files.h"

namespace fs = std::filesystem;

namespace {

using fusectl::test::shellQuote;
using fusectl::testing::slurp;
using fusectl::testing::TempDir;

const std::string kSource = FUSECTL_SOURCE_DIR;
const std::string kBert = kSource + "/testdata/models/bert_layer.onnx";
const std::string kResnet = kSource + "/testdata/models/resnet_mini.onnx";

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs `fusectl ARGS` (ARGS shell-quoted by the caller) with the environment variables `env`
// ("NAME=VALUE ...") added.
Result runFusectl(const std::string& args, const std::string& env = "") {
  static TempDir io("html-io");
  const std::string out = io / "stdout", err = io / "stderr";
  // `env` sets the variables for fusectl alone (not for the lookup of timeout).
  const std::string cmd = "timeout 300 " + (env.empty() ? "" : "env " + env + " ") +
                          shellQuote(FUSECTL_BINARY) + " " + args +
                          " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string q(const std::string& s) { return shellQuote(s); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// How the page writes text (html_report_graph.cpp's escapeHtml), written again here.
std::string escaped(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    switch (s[i]) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case ':': out += s.compare(i, 3, "://") == 0 ? "&#58;" : ":"; break;
      default: out += s[i];
    }
  }
  return out;
}

// Every "http://" and "https://" on the page, except those of the one namespace declaration
// each inline <svg> keeps (html_report.h, kSvgNamespace), which no browser fetches.
std::vector<std::string> externalUrls(const std::string& page) {
  std::vector<std::string> found;
  const std::string ns = fusectl::passes::kSvgNamespace;
  const size_t url_in_ns = ns.find("http");
  for (const char* scheme : {"http://", "https://"}) {
    for (size_t at = page.find(scheme); at != std::string::npos; at = page.find(scheme, at + 1)) {
      const bool is_ns = at >= url_in_ns && page.compare(at - url_in_ns, ns.size(), ns) == 0 &&
                         page.compare(at - url_in_ns - 5, 5, "<svg ") == 0;
      if (!is_ns) found.push_back(page.substr(at, 60));
    }
  }
  return found;
}

void checkSelfContained(const std::string& page) {
  INFO("external URLs: " << externalUrls(page).size());
  CHECK(externalUrls(page).empty());
  CHECK(count(page, std::string("<svg ") + fusectl::passes::kSvgNamespace) == 2);
  CHECK_FALSE(contains(page, "xlink"));
  CHECK_FALSE(contains(page, "<link"));
  CHECK_FALSE(contains(page, " src="));
  CHECK_FALSE(contains(page, "@import"));
  CHECK_FALSE(contains(page, "url("));
  CHECK_FALSE(contains(page, "<!--"));
}

// Every id a fusion site's row highlights is an element of one of the two graphs.
void checkHighlightIds(const std::string& page) {
  const std::regex row("data-ids=\"([^\"]*)\"");
  size_t ids = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), row);
       it != std::sregex_iterator(); ++it) {
    std::string list = (*it)[1];
    size_t start = 0;
    while (start < list.size()) {
      size_t end = std::min(list.find(' ', start), list.size());
      const std::string id = list.substr(start, end - start);
      INFO("highlighted id " << id);
      CHECK(contains(page, "<g id=\"" + id + "\""));
      ++ids;
      start = end + 1;
    }
  }
  CHECK((ids > 0 || !contains(page, "class=\"site\"")));
}

bool haveDot() { return std::system("command -v dot >/dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("optimize --html: every fusion site and rejection of the JSON report is on the page",
          "[report]") {
  if (!haveDot()) {
    WARN("skipped: Graphviz's dot not found (scripts/install-deps.sh installs graphviz)");
    return;
  }
  struct Case {
    std::string model, shape;
  };
  for (const Case& c : {Case{kResnet, "input=1x3x32x32"}, Case{kBert, ""}}) {
    TempDir dir("html-report");
    const Result r = runFusectl(
        "optimize " + q(c.model) + " -o " + q(dir / "m.onnx") + " -O3 --verify --report " +
        q(dir / "r.json") + " --html " + q(dir / "r.html") +
        (c.shape.empty() ? "" : " --shape " + c.shape));
    INFO(c.model << ": " << r.err);
    REQUIRE(r.code == 0);
    const std::string page = slurp(dir / "r.html");
    const nlohmann::json report = nlohmann::json::parse(slurp(dir / "r.json"));

    for (const char* section : {"id=\"summary\"", "id=\"graphs\"", "id=\"fusions\"",
                                "id=\"rejections\"", "id=\"changes\"", "<script>"}) {
      CHECK(contains(page, section));
    }
    CHECK(contains(page, "Numeric check: <span class=\"pass-ok\">passed</span>"));
    // The summary is optimize --table's: its totals rows and figures.
    for (const char* row : {"Nodes", "Intermediate tensors", "Parameters", "File size",
                            "Fusion sites", "Activation bytes saved"}) {
      CHECK(contains(page, std::string("<tr class=\"total\"><td>") + row + "</td>"));
    }
    const size_t nodes_before = report["before"]["nodes"].get<size_t>();
    const size_t nodes_after = report["after"]["nodes"].get<size_t>();
    CHECK(contains(page, "<td>Nodes</td><td class=\"num\">" + std::to_string(nodes_before) +
                             "</td><td class=\"num\">" + std::to_string(nodes_after) + "</td>"));

    const auto& fusions = report["fusions"];
    REQUIRE(fusions.size() > 0);
    CHECK(count(page, "<tr class=\"site\"") == fusions.size());
    for (const auto& f : fusions) {
      CHECK(contains(page, "<td>" + escaped(f["pass"].get<std::string>()) + "</td>"));
      for (const auto& n : f["replaced_nodes"]) CHECK(contains(page, escaped(n.get<std::string>())));
    }
    const auto& rejections = report["rejections"];
    for (const auto& rej : rejections) {
      CHECK(contains(page, "<td>" + escaped(rej["reason"].get<std::string>()) + "</td>"));
    }
    // One table row per rejection, under its group.
    CHECK(count(page, "<tr><td>") >= rejections.size());
    checkSelfContained(page);
    checkHighlightIds(page);
  }
}

TEST_CASE("report: the same model and flags give the same bytes", "[report]") {
  if (!haveDot()) {
    WARN("skipped: Graphviz's dot not found (scripts/install-deps.sh installs graphviz)");
    return;
  }
  TempDir dir("html-report");
  for (const char* name : {"a.html", "b.html"}) {
    const Result r = runFusectl("report " + q(kBert) + " -O3 -o " + q(dir / name));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(contains(r.out, "fusion sites"));
  }
  const std::string a = slurp(dir / "a.html");
  CHECK(a.size() > 10000);
  CHECK(a == slurp(dir / "b.html"));
  CHECK(contains(a, "<title>fusectl report: bert_layer.onnx</title>"));
  checkSelfContained(a);
  checkHighlightIds(a);
  // Written atomically: no temporary file left beside it.
  CHECK(dir.numFiles() == 2);
}

TEST_CASE("report --profile: nodes coloured by share of time, a paid column", "[report]") {
  if (!haveDot()) {
    WARN("skipped: Graphviz's dot not found (scripts/install-deps.sh installs graphviz)");
    return;
  }
  TempDir dir("html-report");
  const Result r = runFusectl("report " + q(kResnet) + " -O3 --shape input=1x3x32x32 "
                              "--profile --runs 3 --warmup 1 -o " + q(dir / "p.html"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string page = slurp(dir / "p.html");
  CHECK(contains(page, "paid? (fused vs replaced)"));
  CHECK(contains(page, "% of time"));
  CHECK(contains(page, "median per node of 3 runs after 1 warmup"));
  // Each site has a verdict of profileModels' five.
  const std::regex verdict("<span class=\"(paid|did-not-pay|level|superseded|unmatched)\">");
  const auto verdicts = std::distance(std::sregex_iterator(page.begin(), page.end(), verdict),
                                      std::sregex_iterator());
  CHECK(static_cast<size_t>(verdicts) == count(page, "<tr class=\"site\""));
  checkSelfContained(page);
}

TEST_CASE("diff --html: any two models, even unrelated ones", "[report]") {
  if (!haveDot()) {
    WARN("skipped: Graphviz's dot not found (scripts/install-deps.sh installs graphviz)");
    return;
  }
  TempDir dir("html-report");
  const Result r = runFusectl("diff " + q(kResnet) + " " + q(kBert) + " --html " +
                              q(dir / "d.html"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string page = slurp(dir / "d.html");
  CHECK(contains(page, "<title>fusectl diff: "));
  CHECK(contains(page, "Fusion sites (0)"));
  CHECK(contains(page, "without an optimizer report"));
  CHECK(contains(page, "id=\"changes\""));
  checkSelfContained(page);
}

TEST_CASE("report: bad input is one line on stderr and its exit code", "[report]") {
  TempDir dir("html-report");
  struct Case {
    std::string args, env;
    int code;
    std::string message;
  };
  const std::string bad = kSource + "/testdata/bad/cycle.onnx";
  const std::vector<Case> cases = {
      {"report " + q(bad) + " -o " + q(dir / "x.html"), "", 3, "cycle.onnx"},
      {"report " + q(kBert) + " -o " + q(dir / "no/such/folder/x.html"), "", 4, "does not exist"},
      {"report " + q(kBert) + " -o " + q(kBert), "", 2, "would overwrite an input"},
      {"report " + q(kBert) + " --passes no-such-pass -o " + q(dir / "x.html"), "", 2,
       "no-such-pass"},
      {"report " + q(kBert) + " --runs 3 -o " + q(dir / "x.html"), "", 2, "--profile"},
      // No Graphviz on PATH: fusectl itself is called by its full path.
      {"report " + q(kBert) + " -o " + q(dir / "x.html"), "PATH=/nonexistent", 5, "dot"},
      {"diff " + q(kBert) + " " + q(kResnet) + " --html " + q(dir / "x.html"),
       "PATH=/nonexistent", 5, "graphviz"},
  };
  for (const Case& c : cases) {
    const Result r = runFusectl(c.args, c.env);
    INFO(c.env << " fusectl " << c.args << "\nstderr: " << r.err);
    CHECK(r.code == c.code);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.rfind("fusectl: error: ", 0) == 0);
    CHECK(contains(r.err, c.message));
  }
  CHECK(dir.numFiles() == 0);  // nothing written, not even a temporary file
}

TEST_CASE("report: a graph over collapse_above draws a repeated layer once, ×N", "[report]") {
  if (!haveDot()) {
    WARN("skipped: Graphviz's dot not found (scripts/install-deps.sh installs graphviz)");
    return;
  }
  // 80 layers of 5 elementwise ops: 400 nodes, over the default threshold of 300.
  std::string text = "<ir_version: 8, opset_import: [\"\" : 13]>\ng (float[4] X) => (float[4] Y)\n{\n";
  std::string prev = "X";
  const int layers = 80;
  for (int l = 0; l < layers; ++l) {
    const std::vector<std::string> ops = {"Relu", "Neg", "Abs", "Exp", "Sqrt"};
    for (size_t k = 0; k < ops.size(); ++k) {
      const bool last = l == layers - 1 && k + 1 == ops.size();
      const std::string out = last ? "Y" : "v" + std::to_string(l) + "_" + std::to_string(k);
      text += "  " + out + " = " + ops[k] + " (" + prev + ")\n";
      prev = out;
    }
  }
  text += "}\n";
  auto before = fusectl::parseModelText(text, "layers.onnxtxt");
  auto after = fusectl::parseModelText(text, "layers.onnxtxt");
  const fusectl::passes::GraphDiff diff =
      fusectl::passes::diffGraphs(*before->graph, *after->graph);
  fusectl::passes::HtmlReportInput in;
  in.title = "layers";
  in.before = before.get();
  in.after = after.get();
  in.diff = &diff;
  const std::string page = fusectl::passes::renderHtmlReport(in);
  CHECK(contains(page, "(×80)"));
  CHECK(contains(page, "80 repetitions of the same 5 ops"));
  CHECK(contains(page, "(400 nodes, drawn as 1 boxes)"));
  CHECK(contains(page, "5 unchanged nodes"));
  checkSelfContained(page);

  // At or under the threshold every node is drawn.
  fusectl::passes::HtmlReportOptions options;
  options.collapse_above = 400;
  const std::string full = fusectl::passes::renderHtmlReport(in, options);
  CHECK_FALSE(contains(full, "×80"));
  CHECK(contains(full, "(400 nodes)"));
  CHECK(contains(full, "<g id=\"a_n399\""));
}

TEST_CASE("report renders in a real browser (chromium headless)", "[report][browser]") {
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    WARN("skipped: chromium not found (scripts/install-browser.sh installs it; best effort)");
    return;
  }
  if (!haveDot()) {
    WARN("skipped: Graphviz's dot not found (scripts/install-deps.sh installs graphviz)");
    return;
  }
  // Kept as test artifacts beside the binary, in the build folder.
  const fs::path artifacts = fs::path(FUSECTL_BINARY).parent_path().parent_path() / "test-artifacts";
  fs::create_directories(artifacts);
  const std::string page = (artifacts / "report_bert_layer.html").string();
  const Result made = runFusectl("report " + q(kBert) + " -O3 -o " + q(page));
  INFO(made.err);
  REQUIRE(made.code == 0);
  const std::string blank_page = (artifacts / "blank.html").string();
  {
    std::ofstream(blank_page) << "<!DOCTYPE html><html><body></body></html>\n";
  }

  TempDir profile("chromium");
  const std::string chromium =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      "--no-first-run --user-data-dir=" + q(profile.path.string()) + " --window-size=1400,1000 ";
  auto screenshot = [&](const std::string& html, const fs::path& png) {
    fs::remove(png);
    const std::string cmd = chromium + "--screenshot=" + q(png.string()) + " " +
                            q("file://" + html) + " >/dev/null 2>&1";
    INFO(cmd);
    CHECK(std::system(cmd.c_str()) == 0);
    return slurp(png);
  };
  const fs::path png = artifacts / "report_bert_layer.png";
  const std::string shot = screenshot(page, png);
  const std::string blank = screenshot(blank_page, artifacts / "blank.png");
  REQUIRE(shot.size() > 8);
  REQUIRE(blank.size() > 8);
  CHECK(shot.compare(1, 3, "PNG") == 0);
  // A white window compresses to almost nothing; the page's tables, text and graphs do not.
  // Against a blank page taken the same way, so that the check holds whatever the PNG encoder.
  INFO("report " << shot.size() << " bytes, blank page " << blank.size() << " bytes");
  CHECK(shot.size() > 8 * blank.size());
  std::set<unsigned char> distinct(shot.begin() + shot.size() / 4, shot.end());
  CHECK(distinct.size() > 200);

  // The DOM after the script ran, opened on a fusion site: the title, both graphs, and the
  // site's boxes highlighted by the script.
  const fs::path dom_file = artifacts / "report_bert_layer.dom.html";
  const std::string dump = chromium + "--dump-dom " + q("file://" + page + "#site-1") + " >" +
                           q(dom_file.string()) + " 2>/dev/null";
  CHECK(std::system(dump.c_str()) == 0);
  const std::string dom = slurp(dom_file);
  CHECK(contains(dom, "<title>fusectl report: bert_layer.onnx</title>"));
  CHECK(count(dom, "<svg ") == 2);
  CHECK(contains(dom, "class=\"site on\""));
  CHECK(contains(dom, " hl\""));
}
