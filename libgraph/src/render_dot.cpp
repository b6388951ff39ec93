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
      size_t count = a.g->numNodes();
      add_detail("<i>" + htmlEscape(fmt::format("{}: {} ({} node{})", a.name,
                                                formatAttributeValue(a), count,
                                                count == 1 ? "" : "s")) +
                 "</i>");
    } else if (a.kind == AttrKind::Graphs) {
      add_detail("<i>" + htmlEscape(a.name + ": " + formatAttributeValue(a)) + "</i>");
    }
  }
  if (!details.empty()) label += "<font point-size=\"9\">" + details + "</font>";
  return "<" + label + ">";
}

}  // namespace

// Formats into a buffer that reaches the stream in large writes.
class DotWriter {
 public:
  explicit DotWriter(std::ostream& out) : out_(out) {}
  ~DotWriter() { flush(); }
  template <typename... Args>
  void operator()(fmt::format_string<Args...> f, Args&&... args) {
    fmt::format_to(std::back_inserter(buf_), f, std::forward<Args>(args)...);
    if (buf_.size() > (1u << 20)) flush();
  }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  std::ostream& out_;
  fmt::memory_buffer buf_;
};

// A DOT node id: 'i' graph input, 'n' node, 'o' graph output, 'c' a constant shown on its own.
struct DotId {
  char kind;
  size_t index;
};

void renderDot(const Model& model, std::ostream& out, const RenderOptions&) {
  const Graph& g = *model.graph;
  DotWriter emit(out);
  emit("digraph {} {{\n", quotedEscape(g.name.empty() ? "graph" : g.name));
  emit("  graph [rankdir=TB, fontname=\"Helvetica\", labelloc=t, label={}];\n",
       quotedEscape(g.name));
  emit("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", "
       "fontname=\"Helvetica\", fontsize=11];\n");
  emit("  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\"];\n");

  // Where each value comes from. Initializers have no entry: they are folded into labels.
  std::unordered_map<const Value*, DotId> source;
  source.reserve(g.numNodes() + g.inputs().size());
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const Value* v = g.inputs()[k];
    if (v->isInitializer()) continue;
    source[v] = DotId{'i', k};
    emit("  i{} [shape=ellipse, fillcolor=\"#d9ead3\", label=<<b>{}</b><br/>{}>];\n", k,
         htmlEscape(v->name()), htmlEscape(v->type.str()));
  }
  size_t index = 0;
  for (const Node* n : g.nodes()) {
    for (const Value* v : n->outputs()) {
      if (v) source[v] = DotId{'n', index};
    }
    emit("  n{} [label={}];\n", index++, nodeLabel(*n));
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const Value* v = g.outputs()[k];
    emit("  o{} [shape=ellipse, fillcolor=\"#fce5cd\", label=<<b>{}</b><br/>{}>];\n", k,
         htmlEscape(v->name()), htmlEscape(v->type.str()));
  }

  // An output that is an initializer has no producer box: give it a note of its own.
  size_t constants = 0;
  auto source_of = [&](const Value* v) -> DotId {
    auto it = source.find(v);
    if (it != source.end()) return it->second;
    DotId id{'c', constants++};
    source[v] = id;
    emit("  c{} [shape=note, fillcolor=\"#fff2cc\", label={}];\n", id.index,
         quotedEscape(v->name() + ": " + v->type.str()));
    return id;
  };

  index = 0;
  for (const Node* n : g.nodes()) {
    for (const Value* v : n->inputs()) {
      if (!v || v->isInitializer()) continue;
      DotId from = source_of(v);
      emit("  {}{} -> n{} [label={}, tooltip={}];\n", from.kind, from.index, index,
           quotedEscape(v->type.str()), quotedEscape(v->name()));
    }
    for (const Value* v : n->implicitInputs()) {
      if (!v || v->isInitializer()) continue;
      DotId from = source_of(v);
      emit("  {}{} -> n{} [style=dashed, label={}, tooltip={}];\n", from.kind, from.index, index,
           quotedEscape(v->type.str()), quotedEscape(v->name() + " (captured)"));
    }
    ++index;
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const Value* v = g.outputs()[k];
    DotId from = source_of(v);
    emit("  {}{} -> o{} [label={}];\n", from.kind, from.index, k, quotedEscape(v->type.str()));
  }
  emit("}}\n");
}

}  // namespace fusectl
