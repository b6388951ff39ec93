// Printing a model for people and tools: text, JSON (docs/schemas/dump.schema.json) and
// Graphviz DOT. Used by `fusectl dump`.
//
// Output is deterministic (same model, same bytes) and streamed node by node, so a graph of a
// million nodes prints in seconds without building the whole document in memory.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "fusectl/graph/graph.h"

namespace fusectl {

enum class DumpFormat { Text, Json, Dot };

// "text", "json", "dot"; nullopt for anything else.
std::optional<DumpFormat> dumpFormatFromName(std::string_view name);
std::string_view dumpFormatName(DumpFormat format);

// Identifies the JSON layout; bumped on any incompatible change.
inline constexpr std::string_view kDumpSchemaId = "fusectl.dump/1";
inline constexpr int kDumpSchemaVersion = 1;

struct RenderOptions {
  // Text and JSON: header, interface and statistics only, no node list. DOT ignores it.
  bool summary_only = false;
};

// Text: model header, inputs/outputs, statistics, then every node in topological order with
// its attributes, input/output names and types; subgraphs are printed indented under their node.
void renderText(const Model& model, std::ostream& out, const RenderOptions& options = {});
// JSON following docs/schemas/dump.schema.json; one line per node in the "nodes" array.
void renderJson(const Model& model, std::ostream& out, const RenderOptions& options = {});
// Graphviz: a box per node (op type in bold, then its name and folded initializers such as
// "W: float[64,3,7,7]"), ellipses for graph inputs and outputs, edges labelled with value types.
// Subgraphs are summarized in their node's label.
void renderDot(const Model& model, std::ostream& out, const RenderOptions& options = {});

void renderModel(const Model& model, DumpFormat format, std::ostream& out,
                 const RenderOptions& options = {});
// Streams into `path` through a temporary file in the same folder renamed into place, so a
// failure never leaves a partial file. Throws fusectl::Error(Io) naming the path.
void renderModelToFile(const Model& model, DumpFormat format, const std::string& path,
                       const RenderOptions& options = {});

}  // namespace fusectl
