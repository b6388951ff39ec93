// annotateModel (profile.h): a profile written into the model itself, where Netron shows it
// (a node's doc_string as its description, the model's metadata_props as its properties).
#include <cstdio>
#include <map>
#include <utility>

#include "fusectl/kernels/profile.h"

namespace fusectl::kernels {

namespace {

constexpr const char* kMetadataKey = "fusectl.profile";
constexpr const char* kNodeLinePrefix = "fusectl profile: ";

std::string nodeLine(const NodeProfile& p) {
  char text[128];
  std::snprintf(text, sizeof text, "%s%.4f ms median, %.1f%% of the run", kNodeLinePrefix,
                p.median_seconds * 1e3, p.share * 100);
  return text;
}

// The doc string without a line an earlier annotation wrote, so that annotating twice leaves
// one line.
std::string withoutEarlierLine(const std::string& doc) {
  const size_t at = doc.find(kNodeLinePrefix);
  if (at == std::string::npos) return doc;
  const size_t end = doc.find('\n', at);
  std::string kept = doc.substr(0, at) + (end == std::string::npos ? "" : doc.substr(end + 1));
  while (!kept.empty() && kept.back() == '\n') kept.pop_back();
  return kept;
}

std::string bodyNodeLine(const BodyNodeProfile& p) {
  char text[160];
  std::snprintf(text, sizeof text, "%s%.4f ms median per run (%zu call%s), %.1f%% of the run",
                kNodeLinePrefix, p.median_seconds * 1e3, p.calls, p.calls == 1 ? "" : "s",
                p.share * 100);
  return text;
}

void appendLine(Node& node, const std::string& line) {
  std::string doc = withoutEarlierLine(node.doc_string);
  if (!doc.empty()) doc += "\n";
  node.doc_string = doc + line;
}

using BodyIndex = std::map<std::pair<std::string, std::string>, const BodyNodeProfile*>;

// The nodes of `graph`'s subgraphs, by the parent path ExecutionStats::body_node_times gives
// them (`parent`: the path of `graph` itself, "" for the main graph).
void annotateBodies(const Graph& graph, const std::string& parent, const BodyIndex& index) {
  for (Node* node : graph.nodes()) {
    for (const Attribute& a : node->attributes()) {
      auto visit = [&](Graph& body) {
        const std::string path =
            (parent.empty() ? std::string() : parent + " > ") + node->label() + "/" + a.name;
        for (Node* inner : body.nodes()) {
          auto it = index.find({path, inner->label()});
          if (it != index.end()) appendLine(*inner, bodyNodeLine(*it->second));
        }
        annotateBodies(body, path, index);
      };
      if (a.g) visit(*a.g);
      for (const auto& g : a.graphs)
        if (g) visit(*g);
    }
  }
}

}  // namespace

void annotateModel(Model& model, const SideProfile& side, const std::string& summary) {
  // The k-th node of a label in the graph's order is the k-th of that label the side ran.
  std::map<std::string, std::vector<const NodeProfile*>> by_label;
  for (const NodeProfile& p : side.nodes) by_label[p.node].push_back(&p);
  std::map<std::string, size_t> seen;
  for (Node* node : model.graph->nodes()) {
    const std::string label = node->label();
    auto it = by_label.find(label);
    if (it == by_label.end()) continue;
    const size_t k = seen[label]++;
    if (k >= it->second.size()) continue;
    appendLine(*node, nodeLine(*it->second[k]));
  }
  if (!side.body_nodes.empty()) {
    BodyIndex index;
    for (const BodyNodeProfile& p : side.body_nodes)
      index.emplace(std::make_pair(p.parent, p.node), &p);
    annotateBodies(*model.graph, "", index);
  }
  for (auto& [key, value] : model.metadata_props) {
    if (key == kMetadataKey) {
      value = summary;
      return;
    }
  }
  model.metadata_props.emplace_back(kMetadataKey, summary);
}

}  // namespace fusectl::kernels
