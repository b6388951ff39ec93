// The HTML report page (html_report.h): sections, tables and the highlight script; the graphs
// come from html_report_graph.cpp.
//
// Fusion sites on the page are the optimizer's (Report::fusions) or, for two arbitrary models,
// the stamps in the after model (GraphDiff::fusions). A site's nodes in the before graph are
// its replaced nodes, where one that an earlier site had made is replaced by what that site
// replaced (recursively, as kernels::profileModels follows chains); its node in the after
// graph is found by its fusion stamp, which stays on the node when a later pass relabels it.
// A site whose node a later site replaced again is "superseded": highlighted, but boxed only
// as part of the later site.
#include "fusectl/passes/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "fusectl/graph/error.h"
#include "fusectl/passes/fusion_stamp.h"
#include "html_report_graph.h"

namespace fusectl::passes {

std::string formatByteSize(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < 1024ull * 1024 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
}

namespace {

std::string opSortKey(const std::string& op) {
  // Default-domain ops first, then "domain::Op", as GraphFigures sorts them.
  return (op.find("::") == std::string::npos ? "0" : "1") + op;
}

std::string signedCount(int64_t d) { return d == 0 ? "" : fmt::format("{:+d}", d); }

std::string countChange(uint64_t a, uint64_t b) {
  return signedCount(static_cast<int64_t>(b) - static_cast<int64_t>(a));
}

std::string byteChange(uint64_t before, uint64_t after) {
  if (before == after) return "";
  return after < before ? "-" + formatByteSize(before - after)
                        : "+" + formatByteSize(after - before);
}

}  // namespace

SummaryTable summaryTable(const GraphFigures& before, const GraphFigures& after,
                          size_t fusion_sites, uint64_t activation_bytes_saved,
                          const SummaryFiles& files) {
  SummaryTable t;
  std::map<std::string, std::pair<size_t, size_t>> ops;  // sort key -> counts
  std::map<std::string, std::string> names;
  for (const auto& [op, n] : before.op_histogram) {
    ops[opSortKey(op)].first = n;
    names[opSortKey(op)] = op;
  }
  for (const auto& [op, n] : after.op_histogram) {
    ops[opSortKey(op)].second = n;
    names[opSortKey(op)] = op;
  }
  for (const auto& [key, n] : ops) {
    t.ops.push_back({names[key], std::to_string(n.first), std::to_string(n.second),
                     countChange(n.first, n.second)});
  }
  t.totals.push_back({"Nodes", std::to_string(before.nodes), std::to_string(after.nodes),
                      countChange(before.nodes, after.nodes)});
  t.totals.push_back({"Intermediate tensors", std::to_string(before.intermediate_tensors),
                      std::to_string(after.intermediate_tensors),
                      countChange(before.intermediate_tensors, after.intermediate_tensors)});
  t.totals.push_back({"Parameters", formatByteSize(before.parameter_bytes),
                      formatByteSize(after.parameter_bytes),
                      byteChange(before.parameter_bytes, after.parameter_bytes)});
  t.totals.push_back({"File size", formatByteSize(files.input_bytes),
                      files.output_written ? formatByteSize(files.output_bytes) : "not written",
                      files.output_written ? byteChange(files.input_bytes, files.output_bytes)
                                           : ""});
  t.totals.push_back({"Fusion sites", "", std::to_string(fusion_sites), ""});
  t.totals.push_back({"Activation bytes saved", "", formatByteSize(activation_bytes_saved), ""});
  return t;
}

namespace {

using html::escapeHtml;

// One fusion site as the page shows it.
struct PageSite {
  std::string pass, pattern, op;
  std::string scope;       // "" the main graph, else the If/Loop/Scan body's path
  std::string made_as;     // the fused node's label when made: what later sites call it
  std::string final_node;  // its label in the after model; "" when it is not there
  std::vector<std::string> replaced;
  std::vector<std::string> before_nodes;  // replaced, followed back to the before model
  uint64_t bytes_saved = 0;
  bool bytes_known = false;
  bool superseded = false;
  std::vector<std::string> before_ids, after_ids;  // SVG ids to highlight
};

std::vector<PageSite> pageSites(const HtmlReportInput& in) {
  std::vector<PageSite> sites;
  if (in.report) {
    std::map<std::string, std::string> label_of_stamp;
    for (const Node* n : in.after->graph->nodes()) {
      for (const std::string& line : fusionStampLines(n->doc_string)) {
        label_of_stamp.emplace(line, n->label());
      }
    }
    std::set<std::string> after_labels;
    for (const Node* n : in.after->graph->nodes()) after_labels.insert(n->label());
    for (const FusionSite& f : in.report->fusions) {
      PageSite s;
      s.pass = f.pass;
      s.pattern = f.pattern;
      s.op = f.new_op;
      s.scope = f.scope;
      s.made_as = f.new_node;
      s.replaced = f.replaced_nodes;
      s.bytes_saved = f.activation_bytes_saved;
      s.bytes_known = true;
      auto it = label_of_stamp.find(formatFusionStamp(f.pass, f.replaced_nodes));
      if (it != label_of_stamp.end()) {
        s.final_node = it->second;
      } else if (after_labels.count(f.new_node)) {
        s.final_node = f.new_node;
      }
      sites.push_back(std::move(s));
    }
  } else {
    for (const DiffFusion& f : in.diff->fusions) {
      PageSite s;
      s.pass = f.pass.empty() ? "(unstamped)" : f.pass;
      s.op = f.op;
      s.made_as = f.node;
      s.final_node = f.node;
      s.replaced = f.replaced_nodes;
      sites.push_back(std::move(s));
    }
  }
  // Follow chains back to the before model.
  std::set<std::string> before_labels;
  for (const Node* n : in.before->graph->nodes()) before_labels.insert(n->label());
  std::map<std::string, size_t> site_made;  // made_as -> latest site that made it
  for (size_t i = 0; i < sites.size(); ++i) {
    PageSite& s = sites[i];
    std::set<std::string> added;
    for (const std::string& r : s.replaced) {
      auto made = site_made.find(r);
      // A label an earlier site made names that site's node, even when the before model has
      // a node of the same label (a fold keeps the Conv's name).
      if (made != site_made.end()) {
        PageSite& earlier = sites[made->second];
        earlier.superseded = true;
        for (const std::string& b : earlier.before_nodes)
          if (added.insert(b).second) s.before_nodes.push_back(b);
      } else if (before_labels.count(r) && added.insert(r).second) {
        s.before_nodes.push_back(r);
      }
    }
    if (!s.made_as.empty()) site_made[s.made_as] = i;
  }
  for (PageSite& s : sites) {
    if (s.superseded) s.final_node.clear();
  }
  return sites;
}

std::string joinShort(const std::vector<std::string>& items, size_t max_items) {
  std::string text;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) {
    text += (i ? ", " : "") + items[i];
  }
  if (items.size() > max_items) text += fmt::format(", … (+{})", items.size() - max_items);
  return text;
}

std::string tableRow(const std::vector<std::string>& cells, const char* cell = "td") {
  std::string row = "<tr>";
  for (const std::string& c : cells) row += fmt::format("<{0}>{1}</{0}>", cell, c);
  return row + "</tr>\n";
}

constexpr const char* kStyle = R"(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:1.2em;color:#222;font-size:14px}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin:1em 0 .3em}
.meta{color:#555;margin:.2em 0}nav a{margin-right:1em}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right}tr.total td{font-weight:bold}
.pair{display:flex;gap:1em;align-items:flex-start}
.pair figure{flex:1 1 0;margin:0;min-width:0;border:1px solid #ccc}
.pair figcaption{background:#f0f0f0;padding:4px 8px;font-weight:bold}
.pair .scroll{max-height:85vh;overflow:auto}
.pair svg{width:100%;height:auto;display:block}
.note{color:#555;font-size:.9em;margin:.2em 8px}
tr.site{cursor:pointer}tr.site:hover{background:#fff8dc}tr.site.on{background:#ffe599}
.paid{color:#38761d;font-weight:bold}.did-not-pay{color:#cc0000;font-weight:bold}.level{color:#7f6000}
.pass-ok{color:#38761d}.pass-fail{color:#cc0000;font-weight:bold}
svg .hl>polygon,svg .hl>path,svg .hl>ellipse{stroke:#e69138;stroke-width:5px}
)";

// Clicking a site's row toggles the `hl` class on its boxes in both graphs and scrolls them in;
// "#site-N" in the address does the same on load (and lets the browser test check the script).
constexpr const char* kScript = R"(
function show(row,scroll){
  var on=!row.classList.contains('on');
  document.querySelectorAll('tr.site.on').forEach(function(r){r.classList.remove('on');});
  document.querySelectorAll('svg .hl').forEach(function(e){e.classList.remove('hl');});
  if(!on)return;
  row.classList.add('on');
  (row.dataset.ids||'').split(' ').forEach(function(id){
    var e=id&&document.getElementById(id);
    if(!e)return;
    e.classList.add('hl');
    if(scroll)e.scrollIntoView({block:'nearest',inline:'nearest'});
  });
}
document.querySelectorAll('tr.site').forEach(function(row){
  row.addEventListener('click',function(){show(row,true);});
});
// A link to "#site-3" opens the page with that site highlighted (the browser shows its row).
var linked=location.hash&&document.getElementById(location.hash.slice(1));
if(linked&&linked.classList.contains('site'))show(linked,false);
)";

std::string summarySection(const HtmlReportInput& in, const std::vector<PageSite>& sites) {
  SummaryTable t;
  if (in.report) {
    t = summaryTable(*in.report, in.files);
  } else {
    t = summaryTable(GraphFigures::of(*in.before->graph), GraphFigures::of(*in.after->graph),
                     sites.size(), 0, in.files);
  }
  std::string out = "<section id=\"summary\"><h2>Summary</h2>\n<table>\n";
  out += tableRow({"", "before", "after", "change"}, "th");
  for (const SummaryRow& r : t.ops) {
    out += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                       "<td class=\"num\">{}</td></tr>\n",
                       escapeHtml(r.name), r.before, r.after, r.change);
  }
  for (const SummaryRow& r : t.totals) {
    out += fmt::format("<tr class=\"total\"><td>{}</td><td class=\"num\">{}</td>"
                       "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
                       escapeHtml(r.name), escapeHtml(r.before), escapeHtml(r.after),
                       escapeHtml(r.change));
  }
  out += "</table>\n";
  if (in.report) {
    const Verification& v = in.report->verification;
    if (v.ran) {
      out += fmt::format(
          "<p>Numeric check: <span class=\"{}\">{}</span> ({} run{}, seed {}, atol {:g}, rtol "
          "{:g}{}, min cosine {:g}).</p>\n",
          v.passed ? "pass-ok" : "pass-fail", v.passed ? "passed" : "FAILED", v.runs,
          v.runs == 1 ? "" : "s", v.seed, v.atol, v.rtol,
          v.rtol_scale == "tensor" ? " of each output's largest magnitude" : "", v.min_cosine);
    } else {
      out += "<p>Numeric check: not run.</p>\n";
    }
  }
  return out + "</section>\n";
}

std::string graphFigure(const char* side_name, const std::string& model_name,
                        const html::DrawnGraph& g) {
  std::string out = fmt::format("<figure><figcaption>{}: {} ({} nodes", side_name,
                                escapeHtml(model_name), g.nodes);
  if (g.boxes != g.nodes) out += fmt::format(", drawn as {} boxes", g.boxes);
  out += ")</figcaption>\n";
  for (const std::string& note : g.collapse_notes) {
    out += "<p class=\"note\">Collapsed: " + escapeHtml(note) + ".</p>\n";
  }
  return out + "<div class=\"scroll\">\n" + g.svg + "\n</div></figure>\n";
}

std::string verdictCell(const HtmlReportInput& in, size_t site) {
  if (!in.timings || site >= in.timings->sites.size()) return "";
  const HtmlSiteVerdict& v = in.timings->sites[site];
  std::string text = v.status == "paid" ? "paid" : v.status == "did-not-pay" ? "did not pay"
                                                                             : v.status;
  std::string cell = fmt::format("<span class=\"{}\">{}</span>", escapeHtml(v.status),
                                 escapeHtml(text));
  if (v.status == "paid" || v.status == "did-not-pay" || v.status == "level") {
    cell += fmt::format(" ({:.3f} vs {:.3f} ms)", v.fused_seconds * 1e3,
                        v.replaced_seconds * 1e3);
  }
  return cell;
}

std::string fusionSection(const HtmlReportInput& in, const std::vector<PageSite>& sites) {
  std::string out = fmt::format("<section id=\"fusions\"><h2>Fusion sites ({})</h2>\n",
                                sites.size());
  if (sites.empty()) return out + "<p>No fusion sites.</p></section>\n";
  out += "<p class=\"note\">Click a row to highlight the site in both graphs.</p>\n<table>\n";
  std::string check = "not run";
  if (in.report && in.report->verification.ran) {
    check = in.report->verification.passed ? "<span class=\"pass-ok\">passed</span> (model)"
                                           : "<span class=\"pass-fail\">FAILED</span> (model)";
  }
  const bool timed = in.timings && !in.timings->sites.empty();
  std::vector<std::string> head = {"#", "pass", "pattern", "fused node", "nodes replaced",
                                   "activation bytes saved", "numeric check"};
  if (timed) head.push_back("paid? (fused vs replaced)");
  out += tableRow(head, "th");
  for (size_t i = 0; i < sites.size(); ++i) {
    const PageSite& s = sites[i];
    std::vector<std::string> ids = s.before_ids;
    ids.insert(ids.end(), s.after_ids.begin(), s.after_ids.end());
    std::string node = s.final_node.empty()
                           ? (s.superseded ? "<i>superseded by a later site</i>" : "<i>removed</i>")
                           : escapeHtml(s.final_node);
    if (!s.op.empty()) node += " <small>(" + escapeHtml(s.op) + ")</small>";
    // The graphs drawn are the main graph's: a site inside a body says where it is instead.
    if (!s.scope.empty()) node += " <small>in " + escapeHtml(s.scope) + "</small>";
    out += fmt::format("<tr class=\"site\" id=\"site-{}\" data-ids=\"{}\">", i + 1,
                       fmt::join(ids, " "));
    std::vector<std::string> cells = {
        std::to_string(i + 1),
        escapeHtml(s.pass),
        escapeHtml(s.pattern),
        node,
        escapeHtml(joinShort(s.replaced, 12)),
        s.bytes_known ? formatByteSize(s.bytes_saved) : "",
        in.report ? check : "n/a"};
    if (timed) cells.push_back(verdictCell(in, i));
    for (const std::string& c : cells) out += "<td>" + c + "</td>";
    out += "</tr>\n";
  }
  return out + "</table></section>\n";
}

std::string rejectionSection(const HtmlReportInput& in) {
  std::string out = "<section id=\"rejections\"><h2>Rejected candidates";
  if (!in.report) {
    return out + "</h2>\n<p>Not known: these two models were compared without an optimizer "
                 "report (use <code>fusectl report</code> or <code>optimize --html</code>).</p>"
                 "</section>\n";
  }
  // Grouped by the legality condition that failed, within its pass and pattern.
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<const Report::Rejection*>>
      groups;
  for (const Report::Rejection& r : in.report->rejections) {
    groups[{r.miss.constraint, r.pass, r.miss.pattern}].push_back(&r);
  }
  std::vector<const decltype(groups)::value_type*> order;
  for (const auto& g : groups) order.push_back(&g);
  std::stable_sort(order.begin(), order.end(),
                   [](auto* a, auto* b) { return a->second.size() > b->second.size(); });
  out += fmt::format(" ({}, {} reasons)</h2>\n", in.report->rejections.size(), groups.size());
  if (groups.empty()) return out + "<p>No candidate was rejected.</p></section>\n";
  for (const auto* g : order) {
    const auto& [constraint, pass, pattern] = g->first;
    out += fmt::format("<h3>{} <small>({} / {}): {}</small></h3>\n<table>\n",
                       escapeHtml(constraint), escapeHtml(pass), escapeHtml(pattern),
                       g->second.size());
    out += tableRow({"anchor", "node", "reason"}, "th");
    for (const Report::Rejection* r : g->second) {
      out += tableRow({escapeHtml(r->miss.anchor), escapeHtml(r->miss.node),
                       escapeHtml(r->miss.reason)});
    }
    out += "</table>\n";
  }
  return out + "</section>\n";
}

std::string changesSection(const GraphDiff& d) {
  std::string out = fmt::format(
      "<section id=\"changes\"><h2>Changes</h2>\n<p>{} nodes removed, {} added, {} changed; {} "
      "initializers removed, {} added, {} changed.</p>\n",
      d.nodes_removed.size(), d.nodes_added.size(), d.nodes_changed.size(),
      d.initializers_removed.size(), d.initializers_added.size(),
      d.initializers_changed.size());
  if (!d.nodes_changed.empty()) {
    out += "<table>\n" + tableRow({"node", "what changed"}, "th");
    for (const DiffNodeChange& c : d.nodes_changed) {
      out += tableRow({escapeHtml(c.b.label), escapeHtml(c.detail)});
    }
    out += "</table>\n";
  }
  return out + "</section>\n";
}

}  // namespace

std::string renderHtmlReport(const HtmlReportInput& in, const HtmlReportOptions& options) {
  if (!in.before || !in.after || !in.diff) {
    throw Error(ErrorKind::Usage, "renderHtmlReport: before, after and diff are required");
  }
  std::vector<PageSite> sites = pageSites(in);

  html::GraphStyle before_style, after_style;
  before_style.side = 'a';
  after_style.side = 'b';
  before_style.fill_touched = "#fde9d9";
  after_style.fill_touched = "#d9ead3";
  for (size_t i = 0; i < sites.size(); ++i) {
    const PageSite& s = sites[i];
    for (const std::string& b : s.before_nodes) before_style.touched.insert(b);
    if (!s.final_node.empty()) after_style.touched.insert(s.final_node);
    if (s.superseded) continue;
    const std::string what = escapeHtml(s.pass) + (s.op.empty() ? ": removed"
                                                                 : " → " + escapeHtml(s.op));
    before_style.clusters.push_back({fmt::format("a_f{}", i + 1),
                                     fmt::format("#{} {}", i + 1, what), s.before_nodes});
    if (!s.final_node.empty()) {
      after_style.clusters.push_back(
          {fmt::format("b_f{}", i + 1),
           fmt::format("#{} {}<br/><font point-size=\"9\">fused {}</font>", i + 1,
                       escapeHtml(s.pass), escapeHtml(joinShort(s.before_nodes, 4))),
           {s.final_node}});
    }
  }
  for (const DiffNode& n : in.diff->nodes_removed) before_style.touched.insert(n.label);
  for (const DiffNode& n : in.diff->nodes_added) after_style.touched.insert(n.label);
  for (const DiffNodeChange& c : in.diff->nodes_changed) {
    before_style.touched.insert(c.a.label);
    after_style.touched.insert(c.b.label);
  }
  if (in.timings) {
    for (const HtmlNodeTime& t : in.timings->before) before_style.share[t.node] = t.share;
    for (const HtmlNodeTime& t : in.timings->after) after_style.share[t.node] = t.share;
  }

  const html::DrawnGraph before = html::drawGraph(*in.before->graph, before_style, options);
  const html::DrawnGraph after = html::drawGraph(*in.after->graph, after_style, options);
  for (PageSite& s : sites) {
    std::set<std::string> seen;
    for (const std::string& b : s.before_nodes) {
      auto it = before.id_of.find(b);
      if (it != before.id_of.end() && seen.insert(it->second).second)
        s.before_ids.push_back(it->second);
    }
    if (!s.final_node.empty()) {
      auto it = after.id_of.find(s.final_node);
      if (it != after.id_of.end()) s.after_ids.push_back(it->second);
    }
  }

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<title>" + escapeHtml(in.title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n";
  out += "<body>\n<h1>" + escapeHtml(in.title) + "</h1>\n";
  out += fmt::format("<p class=\"meta\">Before: <b>{}</b> · after: <b>{}</b></p>\n",
                     escapeHtml(in.before_name), escapeHtml(in.after_name));
  if (in.report) {
    out += fmt::format("<p class=\"meta\">Pipeline: <code>{}</code></p>\n",
                       escapeHtml(in.report->pipeline.empty() ? "(empty)" : in.report->pipeline));
  }
  if (in.timings) {
    out += "<p class=\"meta\">Timings: " + escapeHtml(in.timings->note) +
           ". Boxes are coloured by their share of their side's time (white 0, red the "
           "largest).</p>\n";
  }
  out += "<nav><a href=\"#summary\">Summary</a><a href=\"#graphs\">Graphs</a>"
         "<a href=\"#fusions\">Fusion sites</a><a href=\"#rejections\">Rejected candidates</a>"
         "<a href=\"#changes\">Changes</a></nav>\n";
  out += summarySection(in, sites);
  out += "<section id=\"graphs\"><h2>Graphs</h2>\n<p class=\"note\">Blue boxes: fusion sites, "
         "numbered as in the table below; shaded nodes are what the optimizer replaced (before) "
         "and made (after).</p>\n<div class=\"pair\">\n";
  out += graphFigure("Before", in.before_name, before);
  out += graphFigure("After", in.after_name, after);
  out += "</div></section>\n";
  out += fusionSection(in, sites);
  out += rejectionSection(in);
  out += changesSection(*in.diff);
  out += fmt::format("<footer class=\"note\">Written by {}.</footer>\n",
                     escapeHtml(in.report && !in.report->tool_version.empty()
                                    ? "fusectl " + in.report->tool_version
                                    : "fusectl"));
  out += "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace fusectl::passes
