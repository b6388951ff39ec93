// The fusion stamp: the doc-string line the Rewriter writes on a fused node, naming the pass and
// the nodes it replaced, and that `fusectl diff` reads back to list fusion sites.
//
//   fusectl <pass>: fused <label>, <label>, ...
//
// A node's doc string may hold several stamps (a node fused again by a later pass, or keeping
// the history of the node it stands for), one per line, after any text the model came with.
// Labels are Node::label() strings; a label that itself contains ", " does not read back as
// one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fusectl::passes {

// "fusectl <pass>: fused <l1>, <l2>".
std::string formatFusionStamp(std::string_view pass, const std::vector<std::string>& replaced);

// `doc` with `stamp` added as its last line.
std::string appendFusionStamp(std::string_view doc, std::string_view stamp);

// Parses one stamp line; false when `line` is not one (then `pass` and `replaced` are left as
// they were, or partly set).
bool parseFusionStamp(std::string_view line, std::string& pass,
                      std::vector<std::string>& replaced);

// The lines of `doc` that are stamps, in order.
std::vector<std::string> fusionStampLines(std::string_view doc);

}  // namespace fusectl::passes
