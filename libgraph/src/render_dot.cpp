// `fusectl dump --format dot`: the main graph for Graphviz.
//
// Nodes are boxes whose HTML label reads: op type (bold), node name, then the initializers the
// node reads ("W: float[64,3,7,7]") and its subgraphs, so weights do not clutter the drawing.
// Graph inputs and outputs are ellipses; edges carry the value's type; values captured by a
// subgraph are dashed edges into the node that owns it.
#include <fmt/format.h>

#include <ostream>
#include <unordered_map>

#include "fusectl/graph/render.h"
#include "fusectl/graph/summary.h"

namespace fusectl {
namespace {

std::string htmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n': out += "<br/>"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string quotedEscape(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  out += '"';
  return out;
}

std::string nodeLabel(const Node& n) {
  std::string label = "<b>" + htmlEscape(qualifiedOpType(n.domain(), n.opType())) + "</b>";
  if (!n.name().empty()) label += "<br/>" + htmlEscape(n.name());
  std::string details;
  auto add_detail = [&](const std::string& text) {
    details += "<br/>";
    details += text;
  };
  for (const Value* v : n.inputs()) {
    if (v && v->isInitializer()) add_detail(htmlEscape(v->name() + ": " + v->type.str()));
  }
  for (const Attribute& a : n.attributes()) {
    if (a.kind == AttrKind::Graph && a.g) {
      add_detail("<i>" + htmlEscape(fmt::format("{}: {} ({} nodes)", a.name,
                                                formatAttributeValue(a), a.g->numNodes())) +
                 "</i>");
    } else if (a.kind == AttrKind::Graphs) {
      add_detail("<i>" + htmlEscape(a.name + ": " + formatAttributeValue(a)) + "</i>");
    }
  }
  if (!details.empty()) label += "<font point-size=\"9\">" + details + "</font>";
  return "<" + label + ">";
}

}  // namespace

void renderDot(const Model& model, std::ostream& out, const RenderOptions&) {
  const Graph& g = *model.graph;
  out << "digraph " << quotedEscape(g.name.empty() ? "graph" : g.name) << " {\n";
  out << "  graph [rankdir=TB, fontname=\"Helvetica\", labelloc=t, label="
      << quotedEscape(g.name) << "];\n";
  out << "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", "
         "fontname=\"Helvetica\", fontsize=11];\n";
  out << "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\"];\n";

  // Where each value comes from, as a DOT node id. Initializers have no id: they are folded.
  std::unordered_map<const Value*, std::string> source;
  size_t k = 0;
  for (const Value* v : g.inputs()) {
    std::string id = fmt::format("i{}", k++);
    if (v->isInitializer()) continue;
    source[v] = id;
    out << "  " << id << " [shape=ellipse, fillcolor=\"#d9ead3\", label=<<b>"
        << htmlEscape(v->name()) << "</b><br/>" << htmlEscape(v->type.str()) << ">];\n";
  }
  size_t index = 0;
  std::string buf;
  for (const Node* n : g.nodes()) {
    std::string id = fmt::format("n{}", index++);
    for (const Value* v : n->outputs()) {
      if (v) source[v] = id;
    }
    buf = "  " + id + " [label=" + nodeLabel(*n) + "];\n";
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  k = 0;
  for (const Value* v : g.outputs()) {
    out << "  o" << k++ << " [shape=ellipse, fillcolor=\"#fce5cd\", label=<<b>"
        << htmlEscape(v->name()) << "</b><br/>" << htmlEscape(v->type.str()) << ">];\n";
  }

  // An output that is an initializer has no producer box: give it a note of its own.
  auto source_of = [&](const Value* v) -> std::string {
    auto it = source.find(v);
    if (it != source.end()) return it->second;
    std::string id = fmt::format("c{}", source.size());
    source[v] = id;
    out << "  " << id << " [shape=note, fillcolor=\"#fff2cc\", label="
        << quotedEscape(v->name() + ": " + v->type.str()) << "];\n";
    return id;
  };

  index = 0;
  for (const Node* n : g.nodes()) {
    std::string id = fmt::format("n{}", index++);
    for (const Value* v : n->inputs()) {
      if (!v || v->isInitializer()) continue;
      buf = "  " + source_of(v) + " -> " + id + " [label=" + quotedEscape(v->type.str()) +
            ", tooltip=" + quotedEscape(v->name()) + "];\n";
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    }
    for (const Value* v : n->implicitInputs()) {
      if (!v || v->isInitializer()) continue;
      out << "  " << source_of(v) << " -> " << id << " [style=dashed, label="
          << quotedEscape(v->type.str()) << ", tooltip=" << quotedEscape(v->name() + " (captured)")
          << "];\n";
    }
  }
  k = 0;
  for (const Value* v : g.outputs()) {
    out << "  " << source_of(v) << " -> o" << k++ << " [label=" << quotedEscape(v->type.str())
        << "];\n";
  }
  out << "}\n";
}

}  // namespace fusectl
