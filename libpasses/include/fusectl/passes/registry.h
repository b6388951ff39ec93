// The pass registry, generated from passes.def: names, descriptions, levels, portability and
// the options each pass reads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/passes/pass.h"

namespace fusectl::passes {

// What an option's value must be.
enum class OptionType {
  Count,   // a whole number >= 0
  Int,     // a whole number
  Float,   // a number
  Bool,    // true or false
  String,  // any non-empty text without blanks or , { } ( ) =
};
std::string_view optionTypeName(OptionType t);  // "count", "int", "float", "bool", "string"

// An option a pass reads from the pipeline text (`fold-constants{max-bytes=N}`), declared with
// the pass (FUSECTL_PASS_OPTION in passes.def, or registerPass).
struct PassOption {
  std::string_view pass;
  std::string_view name;
  OptionType type;
  std::string_view default_value;  // as it would be written in the pipeline
  std::string_view description;
};

// The options of `pass` in declaration order; empty for a pass without options or unknown.
std::vector<PassOption> passOptions(std::string_view pass);
// Throws fusectl::Error(Usage) unless `key` is an option of `pass` and `value` is of its type:
// "pass 'fuse-epilogue' has no option 'act' (it takes none)".
void checkPassOption(std::string_view pass, std::string_view key, std::string_view value);
// The value of `pass`'s option `key`: as the pipeline gave it (ctx.options()), else the default
// declared with the pass ("" when it declares no such option). The pass names itself, so a pass
// run directly, outside a PassManager, gets its defaults too.
std::string optionOrDefault(const PassContext& ctx, std::string_view pass, std::string_view key);

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

// Registers a pass that is not in passes.def (tests, experiments), with the options it reads
// (their `pass` fields are ignored). Throws fusectl::Error(Usage) when the name is taken. Not
// thread-safe against concurrent lookups.
void registerPass(const PassInfo& info, std::function<std::unique_ptr<Pass>()> factory,
                  const std::vector<PassOption>& options = {});
// True for passes listed in passes.def.
bool isBuiltinPass(std::string_view name);

// The Markdown tables of passes.def passes and their options that docs/passes.md embeds (and a
// test compares).
std::string passesMarkdownTable();

}  // namespace fusectl::passes
