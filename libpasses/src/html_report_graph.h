// The graphs of the HTML report (html_report.h): DOT text with fusion clusters, timing colours
// and collapsed regions, laid out by Graphviz's `dot` program into inline-ready SVG.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/html_report.h"

namespace fusectl::passes::html {

// A box around nodes (by label) naming what happened to them.
struct Cluster {
  std::string id;     // the SVG id of the box, e.g. "a_f3"
  std::string label;  // "fuse-epilogue → FusedConv"
  std::vector<std::string> nodes;
};

struct GraphStyle {
  char side = 'a';                       // 'a' before, 'b' after: prefixes every SVG id
  std::vector<Cluster> clusters;         // a node sits in the first cluster naming it
  std::unordered_set<std::string> touched;  // never collapsed into an "unchanged" box
  std::unordered_map<std::string, double> share;  // label -> share of the run, 0..1
  std::string fill_touched;              // fill of touched nodes when untimed
};

struct DrawnGraph {
  std::string svg;  // sanitized (sanitizeSvg), ready to inline
  // Node label -> the SVG id of what shows it: its own box, the first repetition's box of a
  // collapsed layer or the box of a collapsed unchanged run.
  std::unordered_map<std::string, std::string> id_of;
  size_t nodes = 0, boxes = 0;  // graph nodes, boxes drawn for them
  std::vector<std::string> collapse_notes;  // "nodes 12-251: 4 repetitions of 60 shown once"
};

// The DOT text (exposed for drawGraph and tests).
std::string graphDot(const Graph& g, const GraphStyle& style, const HtmlReportOptions& options,
                     DrawnGraph& drawn);
DrawnGraph drawGraph(const Graph& g, const GraphStyle& style, const HtmlReportOptions& options);

// Runs `dot -Tsvg` on `dot_text`. Error(Unsupported) when the program cannot be started.
std::string runDot(const std::string& dot_text, const std::string& dot_program);

// dot's SVG made fit to inline: XML prolog, DOCTYPE, comments, <title>s and namespace
// declarations dropped, any "://" written as "&#58;//", then kSvgNamespace put back on <svg>.
std::string sanitizeSvg(const std::string& svg);

// Text for HTML (and DOT HTML-like labels): &<>"' escaped, "://" as "&#58;//".
std::string escapeHtml(std::string_view s);

}  // namespace fusectl::passes::html
