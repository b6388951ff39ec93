// One self-contained HTML page that shows what an optimization (or any two models) changed:
// the engine of `fusectl report`, `optimize --html` and `diff --html`.
//
// The page holds the before/after summary table (the figures `optimize --table` prints, from
// summaryTable() below), both graphs side by side as inline SVG laid out by Graphviz's `dot`
// program, the fusion sites, every rejected candidate grouped by reason and, when timings are
// given, each node coloured by its share of the run and a paid / did-not-pay column per site.
// Clicking a fusion site highlights it in both graphs (a few lines of inline JavaScript); the
// page reads the same without it. Nothing on the page points outside it: the SVG is stripped
// of comments, DOCTYPE and the xlink namespace, and keeps only its own namespace declaration
// (kSvgNamespace), which browsers never fetch.
//
// This library runs no model: the numeric check comes in the Report (Report::verification) and
// the timings as plain data (HtmlTimings), measured by the caller (libkernels' profileModels()).
// The same input gives the same bytes (timings aside, which differ run to run).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/report.h"

namespace fusectl::passes {

// ---- The before/after table (`fusectl optimize --table` and the page's summary) ----

struct SummaryRow {
  std::string name, before, after, change;  // change: "" when equal, "+3", "-1.5 KiB"
};
struct SummaryTable {
  std::vector<SummaryRow> ops;     // one row per op type, default domain first, then by name
  std::vector<SummaryRow> totals;  // nodes, intermediates, parameters, file size, fusion figures
};
// File sizes are the caller's (this library reads no file); `output_written` false shows the
// output's size as "not written".
struct SummaryFiles {
  uint64_t input_bytes = 0, output_bytes = 0;
  bool output_written = true;
};
SummaryTable summaryTable(const GraphFigures& before, const GraphFigures& after,
                          size_t fusion_sites, uint64_t activation_bytes_saved,
                          const SummaryFiles& files);
inline SummaryTable summaryTable(const Report& r, const SummaryFiles& files) {
  return summaryTable(r.before, r.after, r.fusions.size(), r.activationBytesSaved(), files);
}
// "512 B", "1.5 KiB", "3.2 MiB", "1.25 GiB".
std::string formatByteSize(uint64_t bytes);

// ---- Timings (optional): what `fusectl report --profile` measured ----

struct HtmlNodeTime {
  std::string node;  // Node::label() in its model
  double median_seconds = 0;
  double share = 0;  // of its side's total, 0..1
};
struct HtmlSiteVerdict {
  // "paid", "did-not-pay", "level", "superseded" or "unmatched"
  // (kernels::FusionSiteProfile::status).
  std::string status;
  double fused_seconds = 0, replaced_seconds = 0;
};
struct HtmlTimings {
  std::vector<HtmlNodeTime> before, after;
  // One per Report::fusions entry, in the same order; empty when not measured.
  std::vector<HtmlSiteVerdict> sites;
  std::string note;  // how they were measured, "median of 20 runs after 3 warmup, 1 thread"
};

// ---- The page ----

struct HtmlReportInput {
  std::string title;                    // the page's <title> and heading
  std::string before_name, after_name;  // labels of the two sides, e.g. their file names
  const Model* before = nullptr;        // required
  const Model* after = nullptr;         // required
  // The optimizer's report: summary, fusion sites, rejections, numeric check. Null for two
  // arbitrary models (`diff --html`): the sites then come from the fusion stamps in `after`.
  const Report* report = nullptr;
  const GraphDiff* diff = nullptr;  // required: diffGraphs(*before->graph, *after->graph)
  SummaryFiles files;
  const HtmlTimings* timings = nullptr;
};

struct HtmlReportOptions {
  std::string dot_program = "dot";  // looked up on PATH when it has no '/'
  // A graph with more nodes than this is drawn collapsed: a run of layers with the same op
  // sequence is drawn once ("×N") and runs of nodes no fusion touched become one box each.
  size_t collapse_above = 300;
};

// The HTML text. Throws fusectl::Error(Unsupported) when the dot program cannot be run
// ("dot (Graphviz) not found..."), Error(Internal) when it fails on the generated graph, and
// Error(Usage) when a required input is missing.
std::string renderHtmlReport(const HtmlReportInput& input, const HtmlReportOptions& options = {});

// The namespace declaration the page's SVGs keep: the only "http://" text a page contains.
inline constexpr const char* kSvgNamespace = "xmlns=\"http://www.w3.org/2000/svg\"";

}  // namespace fusectl::passes
