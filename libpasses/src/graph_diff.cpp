// Structural difference of two graphs (graph_diff.h): node matching by output names,
// initializers by name, fusion sites from the Rewriter's doc-string stamps.
#include "fusectl/passes/graph_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "fusectl/graph/summary.h"
#include "fusectl/passes/fusion_stamp.h"

namespace fusectl::passes {

namespace {

std::string opText(const Node& n) {
  return n.domain().empty() ? n.opType() : n.domain() + "::" + n.opType();
}

DiffNode describeNode(const Node& n) {
  DiffNode d;
  d.label = n.label();
  d.op = opText(n);
  for (const Value* v : n.outputs()) d.outputs.push_back(v ? v->name() : "");
  return d;
}

DiffInitializer describeInitializer(const Value& v) {
  DiffInitializer d;
  d.name = v.name();
  const Tensor& t = *v.initializer();
  d.dtype = std::string(dtypeName(t.dtype()));
  d.dims = t.dims();
  d.bytes = tensorStoredBytes(t);
  return d;
}

std::vector<std::string> inputNames(const Node& n) {
  std::vector<std::string> out;
  for (const Value* v : n.inputs()) out.push_back(v ? v->name() : "");
  return out;
}

bool sameGraph(const Graph& a, const Graph& b);

bool sameAttribute(const Attribute& a, const Attribute& b) {
  return sameAttributeValue(a, b, sameGraph);
}

// Attributes as a set: order in the file does not matter.
bool sameAttributes(const Node& a, const Node& b) {
  if (a.attributes().size() != b.attributes().size()) return false;
  for (const Attribute& x : a.attributes()) {
    const Attribute* y = b.attr(x.name);
    if (!y || !sameAttribute(x, *y)) return false;
  }
  return true;
}

std::vector<std::string> valueNames(const std::vector<Value*>& values) {
  std::vector<std::string> out;
  for (const Value* v : values) out.push_back(v ? v->name() : "");
  return out;
}

// Subgraphs (If/Loop bodies) compare node by node in order: enough to see that a body changed.
bool sameGraph(const Graph& a, const Graph& b) {
  if (a.numNodes() != b.numNodes() || valueNames(a.inputs()) != valueNames(b.inputs()) ||
      valueNames(a.outputs()) != valueNames(b.outputs()) ||
      a.initializers().size() != b.initializers().size()) {
    return false;
  }
  for (size_t i = 0; i < a.initializers().size(); ++i) {
    const Value* x = a.initializers()[i];
    const Value* y = b.initializers()[i];
    if (x->name() != y->name() || !x->initializer()->identical(*y->initializer())) return false;
  }
  Node* y = b.firstNode();
  for (Node* x : a.nodes()) {
    if (x->opType() != y->opType() || x->domain() != y->domain() ||
        inputNames(*x) != inputNames(*y) || valueNames(x->outputs()) != valueNames(y->outputs()) ||
        !sameAttributes(*x, *y)) {
      return false;
    }
    y = y->next();
  }
  return true;
}

std::string attributeDetail(const Node& a, const Node& b) {
  std::vector<std::string> parts;
  for (const Attribute& x : a.attributes()) {
    const Attribute* y = b.attr(x.name);
    if (!y) {
      parts.push_back("-" + x.name);
    } else if (!sameAttribute(x, *y)) {
      std::string va = formatAttributeValue(x, 8), vb = formatAttributeValue(*y, 8);
      parts.push_back(va == vb ? fmt::format("{} (contents)", x.name)
                               : fmt::format("{} {} -> {}", x.name, va, vb));
    }
  }
  for (const Attribute& y : b.attributes())
    if (!a.attr(y.name)) parts.push_back(fmt::format("+{}={}", y.name, formatAttributeValue(y, 8)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string dimsText(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

std::string namesText(const std::vector<std::string>& names) {
  return fmt::format("[{}]", fmt::join(names, ","));
}

}  // namespace

namespace {

// The graph-valued attributes of a node, as (path element, graph): "body", "then_branch",
// "branches[0]".
std::vector<std::pair<std::string, const Graph*>> bodiesOf(const Node& n) {
  std::vector<std::pair<std::string, const Graph*>> out;
  for (const Attribute& a : n.attributes()) {
    if (a.g) out.emplace_back(a.name, a.g.get());
    for (size_t i = 0; i < a.graphs.size(); ++i)
      if (a.graphs[i]) out.emplace_back(fmt::format("{}[{}]", a.name, i), a.graphs[i].get());
  }
  return out;
}

// Whether a and b differ only inside graphs both hold under the same attribute names.
bool sameButBodies(const Node& a, const Node& b) {
  if (a.attributes().size() != b.attributes().size()) return false;
  for (const Attribute& x : a.attributes()) {
    const Attribute* y = b.attr(x.name);
    if (!y) return false;
    const bool graphs = x.g || !x.graphs.empty();
    if (graphs ? (!y->g) != (!x.g) || y->graphs.size() != x.graphs.size()
               : !sameAttribute(x, *y)) {
      return false;
    }
  }
  return true;
}

GraphDiff diffScope(const Graph& a, const Graph& b, const std::string& path,
                    std::vector<BodyDiff>& bodies);

}  // namespace

GraphDiff diffGraphs(const Graph& a, const Graph& b) {
  std::vector<BodyDiff> bodies;
  GraphDiff d = diffScope(a, b, "", bodies);
  d.bodies = std::move(bodies);
  return d;
}

namespace {

GraphDiff diffScope(const Graph& a, const Graph& b, const std::string& path,
                    std::vector<BodyDiff>& bodies) {
  GraphDiff d;
  d.nodes_a = a.numNodes();
  d.nodes_b = b.numNodes();
  d.initializers_a = a.initializers().size();
  d.initializers_b = b.initializers().size();

  std::map<std::string, std::pair<size_t, size_t>> hist;
  for (const auto& [key, n] : a.opHistogram())
    hist[key.first.empty() ? key.second : key.first + "::" + key.second].first = n;
  for (const auto& [key, n] : b.opHistogram())
    hist[key.first.empty() ? key.second : key.first + "::" + key.second].second = n;
  for (const auto& [op, counts] : hist)
    if (counts.first != counts.second) d.op_histogram.push_back({op, counts.first, counts.second});

  // The node of A writing each value name; a node of B matches the first of its outputs' writers
  // in A that no earlier node of B took.
  std::unordered_map<std::string_view, const Node*> writer;
  for (const Node* n : a.nodes())
    for (const Value* v : n->outputs())
      if (v && !v->name().empty()) writer.emplace(v->name(), n);
  std::unordered_map<const Node*, const Node*> partner;  // A node -> B node
  for (const Node* nb : b.nodes()) {
    const Node* na = nullptr;
    for (const Value* v : nb->outputs()) {
      if (!v || v->name().empty()) continue;
      auto it = writer.find(v->name());
      if (it != writer.end() && !partner.count(it->second)) {
        na = it->second;
        break;
      }
    }
    std::vector<std::string> old_stamps;
    if (!na) {
      d.nodes_added.push_back(describeNode(*nb));
    } else {
      partner.emplace(na, nb);
      old_stamps = fusionStampLines(na->doc_string);
      DiffNodeChange c;
      std::vector<std::string> details;
      if (na->opType() != nb->opType() || na->domain() != nb->domain()) {
        c.kinds.push_back("op");
        details.push_back(fmt::format("op {} -> {}", opText(*na), opText(*nb)));
      }
      if (!sameAttributes(*na, *nb)) {
        const size_t bodies_before = bodies.size();
        if (sameButBodies(*na, *nb)) {
          // The bodies differ: each is compared on its own, under its scope path.
          std::vector<std::pair<std::string, const Graph*>> ga = bodiesOf(*na), gb = bodiesOf(*nb);
          for (size_t i = 0; i < ga.size() && i < gb.size(); ++i) {
            std::string scope =
                fmt::format("{}{}/{}", path.empty() ? "" : path + "/", nb->label(), gb[i].first);
            std::vector<BodyDiff> nested;
            GraphDiff body = diffScope(*ga[i].second, *gb[i].second, scope, nested);
            if (!body.identical()) bodies.push_back({scope, std::move(body)});
            for (BodyDiff& n : nested) bodies.push_back(std::move(n));
          }
        }
        // Attributes other than bodies differ, or the bodies differ in what a scope's diff
        // does not list (a renamed formal input or output, the order of nodes).
        if (bodies.size() == bodies_before) {
          c.kinds.push_back("attributes");
          details.push_back("attributes: " + attributeDetail(*na, *nb));
        }
      }
      if (inputNames(*na) != inputNames(*nb)) {
        c.kinds.push_back("inputs");
        details.push_back(fmt::format("inputs {} -> {}", namesText(inputNames(*na)),
                                      namesText(inputNames(*nb))));
      }
      if (!c.kinds.empty()) {
        c.a = describeNode(*na);
        c.b = describeNode(*nb);
        c.detail = fmt::format("{}", fmt::join(details, "; "));
        d.nodes_changed.push_back(std::move(c));
      }
    }

    std::vector<std::string> stamps = fusionStampLines(nb->doc_string);
    for (const std::string& line : stamps) {
      if (std::find(old_stamps.begin(), old_stamps.end(), line) != old_stamps.end()) continue;
      DiffFusion f;
      f.node = nb->label();
      f.op = opText(*nb);
      parseFusionStamp(line, f.pass, f.replaced_nodes);
      d.fusions.push_back(std::move(f));
    }
    if (stamps.empty() && nb->domain() == "fusectl" && (!na || na->domain() != "fusectl")) {
      d.fusions.push_back({nb->label(), opText(*nb), "", {}});
    }
  }
  for (const Node* na : a.nodes())
    if (!partner.count(na)) d.nodes_removed.push_back(describeNode(*na));

  std::unordered_map<std::string_view, const Value*> inits_a, inits_b;
  for (const Value* v : a.initializers()) inits_a.emplace(v->name(), v);
  for (const Value* v : b.initializers()) inits_b.emplace(v->name(), v);
  for (const Value* v : a.initializers())
    if (!inits_b.count(v->name())) d.initializers_removed.push_back(describeInitializer(*v));
  for (const Value* vb : b.initializers()) {
    auto it = inits_a.find(vb->name());
    if (it == inits_a.end()) {
      d.initializers_added.push_back(describeInitializer(*vb));
      continue;
    }
    const Tensor& ta = *it->second->initializer();
    const Tensor& tb = *vb->initializer();
    DiffInitializerChange c;
    if (ta.dtype() != tb.dtype()) c.kinds.push_back("dtype");
    if (ta.dims() != tb.dims()) c.kinds.push_back("shape");
    if (!ta.identical(tb) && c.kinds.empty()) c.kinds.push_back("data");
    if (!c.kinds.empty()) {
      c.a = describeInitializer(*it->second);
      c.b = describeInitializer(*vb);
      d.initializers_changed.push_back(std::move(c));
    }
  }
  return d;
}

}  // namespace

bool GraphDiff::identical() const {
  return op_histogram.empty() && nodes_removed.empty() && nodes_added.empty() &&
         nodes_changed.empty() && initializers_removed.empty() && initializers_added.empty() &&
         initializers_changed.empty() && fusions.empty() && bodies.empty();
}

namespace {

using Json = nlohmann::ordered_json;

Json nodeJson(const DiffNode& n) {
  return Json{{"node", n.label}, {"op", n.op}, {"outputs", n.outputs}};
}

Json initializerJson(const DiffInitializer& i) {
  return Json{{"name", i.name}, {"dtype", i.dtype}, {"shape", i.dims}, {"bytes", i.bytes}};
}

std::string initializerText(const DiffInitializer& i) {
  return fmt::format("{} {}{} ({})", i.name, i.dtype, dimsText(i.dims), formatByteSize(i.bytes));
}

// The differences of one scope (everything but the file names and the bodies).
void differencesJson(const GraphDiff& g, Json& j);

}  // namespace

std::string GraphDiff::toJson(const std::string& a_name, const std::string& b_name) const {
  Json j;
  j["schema"] = "fusectl.diff/1";
  j["a"] = Json{{"file", a_name}, {"nodes", nodes_a}, {"initializers", initializers_a}};
  j["b"] = Json{{"file", b_name}, {"nodes", nodes_b}, {"initializers", initializers_b}};
  j["identical"] = identical();
  differencesJson(*this, j);
  Json scopes = Json::array();
  for (const BodyDiff& body : bodies) {
    Json bj;
    bj["scope"] = body.scope;
    bj["a"] = Json{{"nodes", body.diff.nodes_a}, {"initializers", body.diff.initializers_a}};
    bj["b"] = Json{{"nodes", body.diff.nodes_b}, {"initializers", body.diff.initializers_b}};
    differencesJson(body.diff, bj);
    scopes.push_back(std::move(bj));
  }
  j["bodies"] = scopes;
  return j.dump(2) + "\n";
}

namespace {

void differencesJson(const GraphDiff& g, Json& j) {
  const auto& [op_histogram, nodes_removed, nodes_added, nodes_changed, initializers_removed,
               initializers_added, initializers_changed, fusions] =
      std::tie(g.op_histogram, g.nodes_removed, g.nodes_added, g.nodes_changed,
               g.initializers_removed, g.initializers_added, g.initializers_changed, g.fusions);
  Json hist = Json::array();
  for (const OpCountDelta& o : op_histogram) {
    hist.push_back(Json{{"op", o.op}, {"a", o.a}, {"b", o.b},
                        {"delta", static_cast<int64_t>(o.b) - static_cast<int64_t>(o.a)}});
  }
  j["op_histogram"] = hist;
  Json removed = Json::array(), added = Json::array(), changed = Json::array();
  for (const DiffNode& n : nodes_removed) removed.push_back(nodeJson(n));
  for (const DiffNode& n : nodes_added) added.push_back(nodeJson(n));
  for (const DiffNodeChange& c : nodes_changed) {
    changed.push_back(Json{{"a", nodeJson(c.a)}, {"b", nodeJson(c.b)}, {"changes", c.kinds},
                           {"detail", c.detail}});
  }
  j["nodes"] = Json{{"removed", removed}, {"added", added}, {"changed", changed}};
  Json iremoved = Json::array(), iadded = Json::array(), ichanged = Json::array();
  for (const DiffInitializer& i : initializers_removed) iremoved.push_back(initializerJson(i));
  for (const DiffInitializer& i : initializers_added) iadded.push_back(initializerJson(i));
  for (const DiffInitializerChange& c : initializers_changed) {
    ichanged.push_back(Json{{"name", c.b.name}, {"a", initializerJson(c.a)},
                            {"b", initializerJson(c.b)}, {"changes", c.kinds}});
  }
  j["initializers"] = Json{{"removed", iremoved}, {"added", iadded}, {"changed", ichanged}};
  Json fus = Json::array();
  for (const DiffFusion& f : fusions) {
    fus.push_back(Json{{"node", f.node}, {"op", f.op}, {"pass", f.pass},
                       {"replaced_nodes", f.replaced_nodes}});
  }
  j["fusions"] = fus;
}

}  // namespace

namespace {
void differencesText(const GraphDiff& g, const std::string& indent, std::string& out);
}  // namespace

std::string GraphDiff::toText(const std::string& a_name, const std::string& b_name) const {
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };
  line(fmt::format("--- {} ({} nodes, {} initializers)", a_name, nodes_a, initializers_a));
  line(fmt::format("+++ {} ({} nodes, {} initializers)", b_name, nodes_b, initializers_b));
  if (identical()) {
    line("no differences");
    return out;
  }
  differencesText(*this, "", out);
  for (const BodyDiff& body : bodies) {
    line(fmt::format("body {} ({} -> {} nodes, {} -> {} initializers):", body.scope,
                     body.diff.nodes_a, body.diff.nodes_b, body.diff.initializers_a,
                     body.diff.initializers_b));
    differencesText(body.diff, "  ", out);
  }
  return out;
}

namespace {

void differencesText(const GraphDiff& g, const std::string& indent, std::string& out) {
  const auto& [op_histogram, nodes_removed, nodes_added, nodes_changed, initializers_removed,
               initializers_added, initializers_changed, fusions] =
      std::tie(g.op_histogram, g.nodes_removed, g.nodes_added, g.nodes_changed,
               g.initializers_removed, g.initializers_added, g.initializers_changed, g.fusions);
  auto line = [&out, &indent](const std::string& s) { out += indent + s + "\n"; };
  if (!op_histogram.empty()) {
    size_t width = 0;
    for (const OpCountDelta& o : op_histogram) width = std::max(width, o.op.size());
    line("op histogram:");
    for (const OpCountDelta& o : op_histogram) {
      line(fmt::format("  {:<{}}  {:>6} -> {:<6} ({:+d})", o.op, width, o.a, o.b,
                       static_cast<int64_t>(o.b) - static_cast<int64_t>(o.a)));
    }
  }
  line(fmt::format("nodes: {} removed, {} added, {} changed", nodes_removed.size(),
                   nodes_added.size(), nodes_changed.size()));
  for (const DiffNode& n : nodes_removed)
    line(fmt::format("  - {} {} -> {}", n.op, n.label, namesText(n.outputs)));
  for (const DiffNode& n : nodes_added)
    line(fmt::format("  + {} {} -> {}", n.op, n.label, namesText(n.outputs)));
  for (const DiffNodeChange& c : nodes_changed) {
    std::string who = c.a.label == c.b.label ? c.b.label : c.a.label + " -> " + c.b.label;
    line(fmt::format("  ~ {}: {}", who, c.detail));
  }
  line(fmt::format("initializers: {} removed, {} added, {} changed", initializers_removed.size(),
                   initializers_added.size(), initializers_changed.size()));
  for (const DiffInitializer& i : initializers_removed) line("  - " + initializerText(i));
  for (const DiffInitializer& i : initializers_added) line("  + " + initializerText(i));
  for (const DiffInitializerChange& c : initializers_changed) {
    std::vector<std::string> what;
    for (const std::string& k : c.kinds) {
      if (k == "dtype") what.push_back(fmt::format("dtype {} -> {}", c.a.dtype, c.b.dtype));
      if (k == "shape") what.push_back(fmt::format("shape {} -> {}", dimsText(c.a.dims),
                                                   dimsText(c.b.dims)));
      if (k == "data") what.push_back("data");
    }
    line(fmt::format("  ~ {}: {}", c.b.name, fmt::join(what, "; ")));
  }
  line(fmt::format("fusion sites: {}", fusions.size()));
  for (const DiffFusion& f : fusions) {
    if (f.pass.empty()) {
      line(fmt::format("  {} {} (no fusectl stamp)", f.op, f.node));
    } else {
      line(fmt::format("  {} {} by {}: fused {}", f.op, f.node, f.pass,
                       fmt::join(f.replaced_nodes, ", ")));
    }
  }
}

}  // namespace

}  // namespace fusectl::passes
