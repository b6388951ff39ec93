// The pass registry, generated from passes.def: names, descriptions, levels, portability.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/passes/pass.h"

namespace fusectl::passes {

// Every registered pass: passes.def order, then passes registered at run time.
const std::vector<PassInfo>& allPasses();
// nullptr for an unknown name.
const PassInfo* findPass(std::string_view name);
// Throws fusectl::Error(Usage) for an unknown name, listing the closest known names.
std::unique_ptr<Pass> createPass(std::string_view name);
// The same check without creating anything (pipeline parsing, --disable).
void checkPassName(std::string_view name);
// Known names close to `name` (edit distance, or containing it), closest first.
std::vector<std::string> closePassNames(std::string_view name, size_t max = 3);

// Registers a pass that is not in passes.def (tests, experiments). Throws fusectl::Error(Usage)
// when the name is taken. Not thread-safe against concurrent lookups.
void registerPass(const PassInfo& info, std::function<std::unique_ptr<Pass>()> factory);
// True for passes listed in passes.def.
bool isBuiltinPass(std::string_view name);

// The Markdown table of passes.def passes that docs/passes.md embeds (and a test compares).
std::string passesMarkdownTable();

}  // namespace fusectl::passes
