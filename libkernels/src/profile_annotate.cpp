// annotateModel (profile.h): a profile written into the model itself, where Netron shows it
// (a node's doc_string as its description, the model's metadata_props as its properties).
#include <cstdio>
#include <map>

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
    std::string doc = withoutEarlierLine(node->doc_string);
    if (!doc.empty()) doc += "\n";
    node->doc_string = doc + nodeLine(*it->second[k]);
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
