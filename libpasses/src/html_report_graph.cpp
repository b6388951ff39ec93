// The report's graphs: DOT in the look of `fusectl dump --format dot` (libgraph's
// render_dot.cpp), plus what a comparison needs, then laid out by the `dot` program.
//
// What this adds to dump's drawing:
//  - clusters: a box around each fusion's nodes, labelled with the pass and what it made;
//  - colours: a node's fill by its share of the run when timed, else by whether a fusion
//    touched it;
//  - ids: every box has an SVG id ("a_n12": side a, node 12; no
//    hyphen, which dot writes as &#45;) the page's script highlights;
//  - collapsing, for graphs over HtmlReportOptions::collapse_above nodes:
//     1. repeated layers: the longest run of node positions whose op sequence repeats with some
//        period p (found per p in one linear scan: eq[i] = op[i] == op[i+p]) is drawn once,
//        its first repetition boxed "×N"; the other repetitions' nodes map to the node at the
//        same offset of the first, and edges between repetitions are dropped. Then the same
//        on the parts before and after it.
//     2. unchanged runs: consecutive nodes (graph order, same region) that no fusion or diff
//        touched become one box "k unchanged nodes", listing their ops.
//    Edges are redrawn between the boxes that stand for their ends, once each.
// Graph inputs and outputs are ellipses as in dump; initializers are not drawn.
#include <fmt/format.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "fusectl/graph/error.h"
#include "fusectl/graph/summary.h"
#include "fusectl/support/temp_file_registry.h"
#include "html_report_graph.h"

extern char** environ;

namespace fusectl::passes::html {
namespace {

namespace fs = std::filesystem;

// Fewer nodes than this in a repetition or an unchanged run is not worth a box of its own.
constexpr size_t kMinRepeatCover = 8;
constexpr size_t kMinUnchangedRun = 3;
// The repetition scan costs nodes x periods; beyond this budget long periods are not tried.
constexpr size_t kRepeatScanBudget = 40'000'000;

std::string dotQuoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out + "\"";
}

// White to red by share of the largest share on the side.
std::string heatColour(double fraction) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  auto mix = [&](int from, int to) {
    return static_cast<int>(from + (to - from) * fraction + 0.5);
  };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(0xff, 0xe0), mix(0xff, 0x43), mix(0xff, 0x43));
}

struct Block {
  size_t start = 0, period = 0, count = 0;
};

// The repetition covering the most nodes in [lo, hi) of `ops`; count 0 when none is worth it.
Block longestRepetition(const std::vector<int>& ops, size_t lo, size_t hi) {
  Block best;
  const size_t n = hi - lo;
  if (n < kMinRepeatCover) return best;
  size_t max_period = n / 2;
  max_period = std::min(max_period, std::max<size_t>(1, kRepeatScanBudget / n));
  std::vector<size_t> run(n + 1, 0);  // run[i]: positions from lo+i that equal the one p later
  for (size_t p = 1; p <= max_period; ++p) {
    run[n - p] = 0;
    for (size_t i = n - p; i-- > 0;) run[i] = ops[lo + i] == ops[lo + i + p] ? run[i + 1] + 1 : 0;
    for (size_t i = 0; i + p < n; ++i) {
      if (i > 0 && run[i - 1] > 0) continue;  // not the start of a run
      if (run[i] < p) continue;
      const size_t count = run[i] / p + 1;
      const size_t cover = count * p;
      if (cover >= kMinRepeatCover && cover > best.count * best.period) best = {lo + i, p, count};
    }
  }
  return best;
}

void findRepetitions(const std::vector<int>& ops, size_t lo, size_t hi, std::vector<Block>& out) {
  Block b = longestRepetition(ops, lo, hi);
  if (b.count < 2) return;
  findRepetitions(ops, lo, b.start, out);
  out.push_back(b);
  findRepetitions(ops, b.start + b.period * b.count, hi, out);
}

std::string opsSummary(const std::map<std::string, size_t>& ops) {
  std::vector<std::string> parts;
  for (const auto& [op, n] : ops) parts.push_back(n == 1 ? op : fmt::format("{} ×{}", op, n));
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    text += (i == 0 ? "" : i % 3 == 0 ? ",<br/>" : ", ") + escapeHtml(parts[i]);
  }
  return text;
}

std::string readWhole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file in the temporary folder, removed when this goes out of scope.
class TempFile {
 public:
  explicit TempFile(const char* suffix) {
    std::string pattern = (fs::temp_directory_path() / "fusectl-report-XXXXXX").string() + suffix;
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    int fd = mkstemps(buf.data(), static_cast<int>(std::strlen(suffix)));
    if (fd < 0) throwIo(fmt::format("{}: cannot create: {}", pattern, std::strerror(errno)));
    close(fd);
    path_ = buf.data();
    cleanup_slot_ = registerTempFile(path_.c_str());  // removed on SIGINT/SIGTERM too
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
    unregisterTempFile(cleanup_slot_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int cleanup_slot_ = -1;
};

std::string firstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? "no message" : line;
}

}  // namespace

std::string escapeHtml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case ':':
        // A model's text may hold a URL; the page must not (html_report.h).
        out += s.substr(i, 3) == "://" ? "&#58;" : ":";
        break;
      default: out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  return out;
}

std::string graphDot(const Graph& g, const GraphStyle& style, const HtmlReportOptions& options,
                     DrawnGraph& drawn) {
  const char side = style.side;
  std::vector<const Node*> nodes;
  nodes.reserve(g.numNodes());
  for (const Node* n : g.nodes()) nodes.push_back(n);
  const size_t n = nodes.size();
  drawn.nodes = n;
  std::vector<std::string> labels(n);
  std::unordered_map<const Node*, size_t> index_of;
  index_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    labels[i] = nodes[i]->label();
    index_of[nodes[i]] = i;
  }

  // What box stands for each node: itself unless collapsed.
  std::vector<size_t> shown(n);
  for (size_t i = 0; i < n; ++i) shown[i] = i;
  std::vector<int> region(n, -1);       // the repetition block a node's position lies in
  std::vector<int> repetition(n, 0);    // which repetition of it, 0 = the one drawn
  std::vector<Block> blocks;
  std::vector<size_t> run_of(n, SIZE_MAX);  // the first node of the unchanged run it is in
  std::map<size_t, std::pair<size_t, std::map<std::string, size_t>>> runs;  // first -> count, ops
  const bool collapse = n > options.collapse_above;
  if (collapse) {
    std::map<std::string, int> op_ids;
    std::vector<int> ops(n);
    for (size_t i = 0; i < n; ++i) {
      ops[i] = op_ids.emplace(qualifiedOpType(nodes[i]->domain(), nodes[i]->opType()),
                              static_cast<int>(op_ids.size()))
                   .first->second;
    }
    findRepetitions(ops, 0, n, blocks);
    for (size_t b = 0; b < blocks.size(); ++b) {
      const Block& bl = blocks[b];
      for (size_t k = 0; k < bl.count * bl.period; ++k) {
        const size_t i = bl.start + k;
        region[i] = static_cast<int>(b);
        repetition[i] = static_cast<int>(k / bl.period);
        shown[i] = bl.start + k % bl.period;
      }
      drawn.collapse_notes.push_back(fmt::format(
          "nodes {}-{}: {} repetitions of the same {} ops, drawn once (×{})", bl.start + 1,
          bl.start + bl.count * bl.period, bl.count, bl.period, bl.count));
    }
    size_t i = 0;
    size_t collapsed_runs = 0, collapsed_nodes = 0;
    while (i < n) {
      auto eligible = [&](size_t k) {
        return repetition[k] == 0 && !style.touched.count(labels[k]);
      };
      if (!eligible(i)) {
        ++i;
        continue;
      }
      size_t j = i + 1;
      while (j < n && eligible(j) && region[j] == region[i]) ++j;
      if (j - i >= kMinUnchangedRun) {
        auto& [count, ops_in_run] = runs[i];
        count = j - i;
        for (size_t k = i; k < j; ++k) {
          run_of[k] = i;
          ++ops_in_run[qualifiedOpType(nodes[k]->domain(), nodes[k]->opType())];
        }
        ++collapsed_runs;
        collapsed_nodes += j - i;
      }
      i = j;
    }
    // Hidden repetitions follow their first repetition's node into its run box.
    for (size_t k = 0; k < n; ++k) {
      if (run_of[shown[k]] != SIZE_MAX) shown[k] = run_of[shown[k]];
    }
    if (collapsed_runs > 0) {
      drawn.collapse_notes.push_back(fmt::format(
          "{} nodes no fusion touched, in {} runs of {} or more, drawn as one box per run",
          collapsed_nodes, collapsed_runs, kMinUnchangedRun));
    }
  }
  auto box_id = [&](size_t i) {
    const size_t s = shown[i];
    return run_of[s] == s && runs.count(s) ? fmt::format("{}_r{}", side, s)
                                            : fmt::format("{}_n{}", side, s);
  };
  for (size_t i = 0; i < n; ++i) drawn.id_of.emplace(labels[i], box_id(i));

  double max_share = 0;
  for (const auto& [label, share] : style.share) max_share = std::max(max_share, share);

  std::string out;
  out += fmt::format("digraph {} {{\n", dotQuoted(fmt::format("{}", side)));
  out += fmt::format("  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=11, nodesep=0.25, ranksep=0.3];\n");
  out += fmt::format("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", "
       "fontname=\"Helvetica\", fontsize=11];\n");
  out += fmt::format("  edge [color=\"#555555\", arrowsize=0.6];\n");

  // Graph inputs and outputs.
  std::unordered_map<const Value*, std::string> input_id;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const Value* v = g.inputs()[k];
    if (v->isInitializer()) continue;
    input_id[v] = fmt::format("{}_i{}", side, k);
    out += fmt::format("  {} [id={}, shape=ellipse, fillcolor=\"#d9ead3\", label=<<b>{}</b><br/>{}>];\n",
         dotQuoted(input_id[v]), dotQuoted(input_id[v]), escapeHtml(v->name()),
         escapeHtml(v->type.str()));
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const Value* v = g.outputs()[k];
    const std::string id = fmt::format("{}_o{}", side, k);
    out += fmt::format("  {} [id={}, shape=ellipse, fillcolor=\"#fce5cd\", label=<<b>{}</b><br/>{}>];\n",
         dotQuoted(id), dotQuoted(id), escapeHtml(v->name()), escapeHtml(v->type.str()));
  }

  // The boxes, each defined once, in graph order.
  std::vector<bool> defined(n, false);
  std::vector<std::string> box_def(n);  // index of the box's first node -> its definition line
  size_t boxes = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t s = shown[i];
    if (defined[s]) continue;
    defined[s] = true;
    ++boxes;
    const std::string id = box_id(i);
    if (runs.count(s) && run_of[s] == s) {
      const auto& [count, ops] = runs.at(s);
      box_def[s] = fmt::format(
          "  {} [id={}, style=\"rounded,filled,dashed\", fillcolor=\"#f3f3f3\", "
          "label=<<i>{} unchanged nodes</i><br/><font point-size=\"9\">{}</font>>];\n",
          dotQuoted(id), dotQuoted(id), count, opsSummary(ops));
      continue;
    }
    const Node& node = *nodes[s];
    std::string label = "<b>" + escapeHtml(qualifiedOpType(node.domain(), node.opType())) + "</b>";
    label += "<br/><font point-size=\"9\">" + escapeHtml(labels[s]) + "</font>";
    std::string fill;
    auto share = style.share.find(labels[s]);
    if (share != style.share.end()) {
      label += fmt::format("<br/><font point-size=\"9\">{:.1f}% of time</font>",
                           share->second * 100);
      fill = heatColour(max_share > 0 ? share->second / max_share : 0);
    } else if (style.touched.count(labels[s]) && !style.fill_touched.empty()) {
      fill = style.fill_touched;
    }
    box_def[s] = fmt::format("  {} [id={}{}, label=<{}>];\n", dotQuoted(id), dotQuoted(id),
                             fill.empty() ? "" : fmt::format(", fillcolor=\"{}\"", fill), label);
  }
  drawn.boxes = boxes;

  // Clusters: the repetition blocks at the top, fusion boxes inside the block holding all
  // their drawn nodes (a node belongs to at most one fusion box).
  std::vector<int> cluster_of(n, -1);
  std::vector<int> cluster_block(style.clusters.size(), -1);
  std::vector<std::vector<size_t>> cluster_boxes(style.clusters.size());
  std::unordered_map<std::string, size_t> index_of_label;
  for (size_t i = 0; i < n; ++i) index_of_label.emplace(labels[i], i);
  for (size_t c = 0; c < style.clusters.size(); ++c) {
    std::set<int> block_set;
    for (const std::string& label : style.clusters[c].nodes) {
      auto it = index_of_label.find(label);
      if (it == index_of_label.end()) continue;
      const size_t s = shown[it->second];
      if (cluster_of[s] != -1 || (runs.count(s) && run_of[s] == s)) continue;
      cluster_of[s] = static_cast<int>(c);
      cluster_boxes[c].push_back(s);
      block_set.insert(region[s]);
    }
    cluster_block[c] = block_set.size() == 1 ? *block_set.begin() : -1;
  }
  auto emit_cluster = [&](size_t c) {
    if (cluster_boxes[c].empty()) return;
    const Cluster& cl = style.clusters[c];
    out += fmt::format("  subgraph {} {{\n    id={}; label=<{}>; style=\"rounded\"; color=\"#3c78d8\"; "
         "fontcolor=\"#1c4587\"; fontsize=10; penwidth=1.5;\n",
         dotQuoted("cluster_" + cl.id), dotQuoted(cl.id), cl.label);
    for (size_t s : cluster_boxes[c]) out += "  " + box_def[s];
    out += fmt::format("  }}\n");
  };
  for (size_t b = 0; b < blocks.size(); ++b) {
    out += fmt::format("  subgraph {} {{\n    id={}; label=<<b>×{}</b> <font point-size=\"9\">(nodes {}-{}, "
         "drawn once)</font>>; style=\"dashed,rounded\"; color=\"#999999\";\n",
         dotQuoted(fmt::format("cluster_{}_x{}", side, b)), dotQuoted(fmt::format("{}_x{}", side, b)),
         blocks[b].count, blocks[b].start + 1,
         blocks[b].start + blocks[b].count * blocks[b].period);
    for (size_t c = 0; c < style.clusters.size(); ++c) {
      if (cluster_block[c] == static_cast<int>(b)) emit_cluster(c);
    }
    const size_t block_end = blocks[b].start + blocks[b].count * blocks[b].period;
    for (size_t s = blocks[b].start; s < block_end; ++s) {
      if (shown[s] == s && cluster_of[s] == -1) out += "  " + box_def[s];
    }
    out += fmt::format("  }}\n");
  }
  for (size_t c = 0; c < style.clusters.size(); ++c) {
    if (cluster_block[c] < 0) emit_cluster(c);
  }
  for (size_t s = 0; s < n; ++s) {
    if (shown[s] == s && cluster_of[s] == -1 && region[s] < 0) out += box_def[s];
  }

  // Edges between boxes, once each, in graph order.
  std::set<std::pair<std::string, std::string>> seen;
  auto edge = [&](const std::string& from, const std::string& to) {
    if (from == to || !seen.emplace(from, to).second) return;
    out += fmt::format("  {} -> {};\n", dotQuoted(from), dotQuoted(to));
  };
  for (size_t i = 0; i < n; ++i) {
    const std::string to = box_id(i);
    for (const Value* v : nodes[i]->inputs()) {
      if (!v || v->isInitializer()) continue;
      if (const Node* p = v->producer()) {
        auto it = index_of.find(p);
        if (it == index_of.end()) continue;
        const size_t j = it->second;
        if (region[i] >= 0 && region[i] == region[j] && repetition[i] != repetition[j]) continue;
        edge(box_id(j), to);
      } else if (auto in = input_id.find(v); in != input_id.end()) {
        edge(in->second, to);
      }
    }
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const Value* v = g.outputs()[k];
    const std::string to = fmt::format("{}_o{}", side, k);
    if (const Node* p = v->producer()) {
      auto it = index_of.find(p);
      if (it != index_of.end()) edge(box_id(it->second), to);
    } else if (auto in = input_id.find(v); in != input_id.end()) {
      edge(in->second, to);
    }
  }
  out += fmt::format("}}\n");
  return out;
}

std::string runDot(const std::string& dot_text, const std::string& dot_program) {
  TempFile in(".dot"), svg(".svg"), err(".txt");
  {
    std::ofstream f(in.path(), std::ios::binary);
    f << dot_text;
    if (!f.flush()) throwIo(fmt::format("{}: cannot write", in.path()));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.path().c_str(),
                                   O_WRONLY | O_TRUNC, 0);
  std::vector<std::string> args = {dot_program, "-Tsvg", "-o" + svg.path(), in.path()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, dot_program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throwUnsupported(fmt::format(
        "{}: cannot run Graphviz's dot program ({}); install graphviz (scripts/install-deps.sh)",
        dot_program, std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(ErrorKind::Internal, "waitpid on dot failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      throwUnsupported(fmt::format("{}: Graphviz's dot program not found; install graphviz "
                                   "(scripts/install-deps.sh)",
                                   dot_program));
    }
    throw Error(ErrorKind::Internal,
                fmt::format("{} failed on the report's graph: {}", dot_program,
                            firstLine(readWhole(err.path()))));
  }
  return readWhole(svg.path());
}

std::string sanitizeSvg(const std::string& svg) {
  std::string s = svg.substr(std::min(svg.find("<svg"), svg.size()));
  auto erase_between = [&](const std::string& open, const std::string& close) {
    for (size_t at = s.find(open); at != std::string::npos; at = s.find(open, at)) {
      size_t end = s.find(close, at);
      end = end == std::string::npos ? s.size() : end + close.size();
      if (end < s.size() && s[end] == '\n') ++end;
      s.erase(at, end - at);
    }
  };
  erase_between("<!--", "-->");
  erase_between("<title>", "</title>");
  // Namespace declarations: inline in HTML the parser puts <svg> in its namespace itself.
  for (const char* attr : {" xmlns=\"", " xmlns:xlink=\""}) {
    for (size_t at = s.find(attr); at != std::string::npos; at = s.find(attr, at)) {
      size_t end = s.find('"', at + std::strlen(attr));
      s.erase(at, end == std::string::npos ? std::string::npos : end + 1 - at);
    }
  }
  for (size_t at = s.find("://"); at != std::string::npos; at = s.find("://", at)) {
    s.replace(at, 1, "&#58;");
  }
  // A fixed size would crop the graph in a narrow column: the page's CSS scales it.
  const size_t tag_end = s.find('>');
  for (const char* attr : {" width=\"", " height=\""}) {
    size_t at = s.find(attr);
    if (at != std::string::npos && at < tag_end) {
      size_t end = s.find('"', at + std::strlen(attr));
      s.erase(at, end + 1 - at);
    }
  }
  s.insert(4, std::string(" ") + kSvgNamespace);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

DrawnGraph drawGraph(const Graph& g, const GraphStyle& style, const HtmlReportOptions& options) {
  DrawnGraph drawn;
  const std::string dot = graphDot(g, style, options, drawn);
  drawn.svg = sanitizeSvg(runDot(dot, options.dot_program));
  return drawn;
}

}  // namespace fusectl::passes::html
