// `fusectl dump --format text`: a model header, its statistics and every node, one block each.
//
//   [3] Conv conv1 <kernel_shape=[3,3], pads=[1,1,1,1]>
//       in:  X float[1,2,4,4], W float[2,2,3,3] (init), B float[2] (init)
//       out: C float[1,2,4,4]
//
// Text is built in a memory buffer that is flushed to the stream in large pieces.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "fusectl/graph/render.h"
#include "fusectl/graph/summary.h"

namespace fusectl {
namespace {

class TextWriter {
 public:
  explicit TextWriter(std::ostream& out) : out_(out) {}
  ~TextWriter() { flush(); }

  template <typename... Args>
  void line(int indent, fmt::format_string<Args...> f, Args&&... args) {
    buf_.append(std::string(static_cast<size_t>(indent), ' '));
    fmt::format_to(std::back_inserter(buf_), f, std::forward<Args>(args)...);
    buf_.push_back('\n');
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

std::string valueText(const Value* v) {
  if (!v) return "-";
  std::string s = v->name() + " " + v->type.str();
  if (v->isInitializer()) s += " (init)";
  return s;
}

std::string valueListText(const std::vector<Value*>& values) {
  if (values.empty()) return "(none)";
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ", ";
    s += valueText(values[i]);
  }
  return s;
}

std::string attributesText(const Node& n) {
  if (n.attributes().empty()) return "";
  std::string s = " <";
  bool first = true;
  for (const Attribute& a : n.attributes()) {
    if (!first) s += ", ";
    first = false;
    s += a.name;
    s += '=';
    s += formatAttributeValue(a);
  }
  s += '>';
  return s;
}

void renderGraphBody(TextWriter& w, const Graph& g, int indent);

void renderSubgraph(TextWriter& w, const std::string& attr_name, const Graph& g, int indent) {
  w.line(indent, "{}: graph {} ({} node{})", attr_name, g.name.empty() ? "<unnamed>" : g.name,
         g.numNodes(), g.numNodes() == 1 ? "" : "s");
  w.line(indent + 2, "inputs:  {}", valueListText(g.inputs()));
  w.line(indent + 2, "outputs: {}", valueListText(g.outputs()));
  if (!g.initializers().empty()) w.line(indent + 2, "initializers: {}", g.initializers().size());
  renderGraphBody(w, g, indent + 2);
}

void renderGraphBody(TextWriter& w, const Graph& g, int indent) {
  size_t index = 0;
  for (const Node* n : g.nodes()) {
    std::string head = qualifiedOpType(n->domain(), n->opType());
    if (!n->name().empty()) head += " " + n->name();
    w.line(indent, "[{}] {}{}", index++, head, attributesText(*n));
    w.line(indent + 4, "in:  {}", valueListText(n->inputs()));
    w.line(indent + 4, "out: {}", valueListText(n->outputs()));
    if (!n->implicitInputs().empty()) {
      w.line(indent + 4, "captures: {}", valueListText(n->implicitInputs()));
    }
    for (const Attribute& a : n->attributes()) {
      if (a.kind == AttrKind::Graph && a.g) {
        renderSubgraph(w, a.name, *a.g, indent + 4);
      } else if (a.kind == AttrKind::Graphs) {
        for (size_t i = 0; i < a.graphs.size(); ++i) {
          if (a.graphs[i]) renderSubgraph(w, fmt::format("{}[{}]", a.name, i), *a.graphs[i],
                                          indent + 4);
        }
      }
    }
  }
}

std::string opsetText(const std::vector<OpsetImport>& opsets) {
  if (opsets.empty()) return "(none)";
  std::string s;
  for (size_t i = 0; i < opsets.size(); ++i) {
    if (i) s += ", ";
    s += fmt::format("{} {}", displayDomain(opsets[i].domain), opsets[i].version);
  }
  return s;
}

void renderInterface(TextWriter& w, const char* title, const std::vector<ValueSummary>& values) {
  w.line(0, "{} ({}):", title, values.size());
  size_t width = 0;
  for (const ValueSummary& v : values) width = std::max(width, v.name.size());
  for (const ValueSummary& v : values) {
    w.line(2, "{:<{}}  {}{}", v.name, width, v.type.str(), v.is_initializer ? " (init)" : "");
  }
}

}  // namespace

void renderText(const Model& model, std::ostream& out, const RenderOptions& options) {
  ModelSummary s = summarizeModel(model);
  TextWriter w(out);

  std::string producer = s.producer_name.empty() ? "(unknown)" : s.producer_name;
  if (!s.producer_version.empty()) producer += " " + s.producer_version;
  w.line(0, "ir_version: {}", s.ir_version);
  w.line(0, "producer: {}", producer);
  if (!s.domain.empty() || s.model_version != 0) {
    w.line(0, "domain: {}, model_version: {}", s.domain, s.model_version);
  }
  w.line(0, "opsets: {}", opsetText(s.opset_imports));
  if (s.function_count) w.line(0, "functions: {}", s.function_count);
  w.line(0, "graph: {}", s.graph_name.empty() ? "<unnamed>" : s.graph_name);
  renderInterface(w, "inputs", s.inputs);
  renderInterface(w, "outputs", s.outputs);
  w.line(0, "initializers: {} ({}, {} bytes)", s.initializer_count,
         formatByteSize(s.initializer_bytes), s.initializer_bytes);
  w.line(0, "parameters: {}", s.parameter_count);
  if (s.subgraph_count) {
    w.line(0, "nodes: {} ({} including {} subgraphs)", s.node_count, s.total_node_count,
           s.subgraph_count);
  } else {
    w.line(0, "nodes: {}", s.node_count);
  }
  w.line(0, "op histogram:");
  size_t width = 1;
  if (!s.op_histogram.empty()) width = std::to_string(s.op_histogram.front().count).size();
  for (const OpCount& c : s.op_histogram) {
    w.line(2, "{:>{}}  {}", c.count, width, qualifiedOpType(c.domain, c.op_type));
  }
  if (options.summary_only || !model.graph) return;
  w.line(0, "nodes in topological order:");
  renderGraphBody(w, *model.graph, 2);
}

}  // namespace fusectl
