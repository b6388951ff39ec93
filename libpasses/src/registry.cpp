// The pass registry: passes.def expanded once into a table (passes and their options), plus
// passes registered at run time (tests register deliberately broken passes to exercise
// --verify-each).
#include "fusectl/passes/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "fusectl/graph/error.h"
#include "pass_factories.h"

namespace fusectl::passes {

#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION) \
  const PassInfo CLASS##Info = {NAME, DESCRIPTION, Portability::PORTABILITY, LEVEL};
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS

namespace {

struct Entry {
  const PassInfo* info;
  std::function<std::unique_ptr<Pass>()> create;
  std::vector<PassOption> options;
};

struct Registry {
  std::vector<Entry> entries;
  std::vector<PassInfo> infos;
  std::vector<std::unique_ptr<PassInfo>> owned;      // infos of run-time registrations
  std::vector<std::unique_ptr<std::string>> strings;  // their names, descriptions, options
};

Registry& registry() {
  static Registry r = [] {
    Registry r;
#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION) \
  r.entries.push_back({&CLASS##Info, &create##CLASS, {}});
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS
    const PassOption options[] = {
#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION)
#define FUSECTL_PASS_OPTION(PASS, NAME, TYPE, DEFAULT, DESCRIPTION) \
  {PASS, NAME, OptionType::TYPE, DEFAULT, DESCRIPTION},
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS_OPTION
#undef FUSECTL_PASS
        {}};
    for (const PassOption& o : options) {
      if (o.pass.empty()) continue;  // the end marker
      auto e = std::find_if(r.entries.begin(), r.entries.end(),
                            [&](const Entry& x) { return x.info->name == o.pass; });
      if (e == r.entries.end()) {
        throwInternal(fmt::format("passes.def: option '{}' of unknown pass '{}'", o.name, o.pass));
      }
      e->options.push_back(o);
    }
    for (const Entry& e : r.entries) r.infos.push_back(*e.info);
    return r;
  }();
  return r;
}

const Entry* findEntry(std::string_view name) {
  for (const Entry& e : registry().entries)
    if (e.info->name == name) return &e;
  return nullptr;
}

// Whether `value` is written as the type wants.
bool valueHasType(std::string_view value, OptionType type) {
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  switch (type) {
    case OptionType::Count:
      if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
      std::strtoull(text.c_str(), &end, 10);
      break;
    case OptionType::Int:
      std::strtoll(text.c_str(), &end, 10);
      break;
    case OptionType::Float:
      std::strtod(text.c_str(), &end);
      break;
    case OptionType::Bool: return text == "true" || text == "false";
    case OptionType::String: return !text.empty();
  }
  return !text.empty() && errno == 0 && end == text.c_str() + text.size();
}

std::string_view typeWanted(OptionType type) {
  switch (type) {
    case OptionType::Count: return "a count (a whole number >= 0)";
    case OptionType::Int: return "a whole number";
    case OptionType::Float: return "a number";
    case OptionType::Bool: return "true or false";
    case OptionType::String: return "a word";
  }
  return "";
}

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string_view> dashWords(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    size_t dash = s.find('-', start);
    out.push_back(s.substr(start, dash == std::string_view::npos ? dash : dash - start));
    if (dash == std::string_view::npos) return out;
    start = dash + 1;
  }
}

// "elim-ident" abbreviates "eliminate-identity", "elim-dead" "eliminate-dead-code": each word a
// prefix of the word in the same place.
bool abbreviates(std::string_view name, std::string_view full) {
  std::vector<std::string_view> a = dashWords(name), b = dashWords(full);
  if (a.size() > b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].empty() || b[i].substr(0, a[i].size()) != a[i]) return false;
  return true;
}

}  // namespace

std::string_view optionTypeName(OptionType t) {
  switch (t) {
    case OptionType::Count: return "count";
    case OptionType::Int: return "int";
    case OptionType::Float: return "float";
    case OptionType::Bool: return "bool";
    case OptionType::String: return "string";
  }
  return "?";
}

const std::vector<PassInfo>& allPasses() { return registry().infos; }

const PassInfo* findPass(std::string_view name) {
  const Entry* e = findEntry(name);
  return e ? e->info : nullptr;
}

std::vector<PassOption> passOptions(std::string_view pass) {
  const Entry* e = findEntry(pass);
  return e ? e->options : std::vector<PassOption>{};
}

void checkPassOption(std::string_view pass, std::string_view key, std::string_view value) {
  checkPassName(pass);
  const std::vector<PassOption> options = passOptions(pass);
  for (const PassOption& o : options) {
    if (o.name != key) continue;
    if (valueHasType(value, o.type)) return;
    throw Error(ErrorKind::Usage, fmt::format("option '{}' of pass '{}' takes {}, not '{}'", key,
                                              pass, typeWanted(o.type), value));
  }
  std::vector<std::string_view> known;
  for (const PassOption& o : options) known.push_back(o.name);
  throw Error(ErrorKind::Usage,
              fmt::format("pass '{}' has no option '{}' ({})", pass, key,
                          known.empty() ? std::string("it takes none")
                                        : fmt::format("its options: {}", fmt::join(known, ", "))));
}

std::string optionOrDefault(const PassContext& ctx, std::string_view pass, std::string_view key) {
  auto given = ctx.options().find(std::string(key));
  if (given != ctx.options().end()) return given->second;
  for (const PassOption& o : passOptions(pass))
    if (o.name == key) return std::string(o.default_value);
  return "";
}

std::vector<std::string> closePassNames(std::string_view name, size_t max) {
  std::vector<std::pair<size_t, std::string>> scored;
  size_t limit = std::max<size_t>(2, name.size() / 3);
  for (const PassInfo& info : allPasses()) {
    size_t d = editDistance(name, info.name);
    bool related = (name.size() >= 3 && info.name.find(name) != std::string_view::npos) ||
                   abbreviates(name, info.name);
    if (d <= limit || related) scored.push_back({related ? std::min(d, limit) : d,
                                                 std::string(info.name)});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max; ++i) out.push_back(scored[i].second);
  return out;
}

void checkPassName(std::string_view name) {
  if (findPass(name)) return;
  std::vector<std::string> close = closePassNames(name);
  std::string hint = close.empty() ? ""
                                   : fmt::format(" (did you mean {}?)", fmt::join(close, ", "));
  throw Error(ErrorKind::Usage, fmt::format("unknown pass '{}'{}; run 'fusectl passes' for the "
                                            "list",
                                            name, hint));
}

std::unique_ptr<Pass> createPass(std::string_view name) {
  checkPassName(name);
  for (const Entry& e : registry().entries)
    if (e.info->name == name) return e.create();
  throwInternal(fmt::format("pass '{}' is registered without a factory", name));
}

void registerPass(const PassInfo& info, std::function<std::unique_ptr<Pass>()> factory,
                  const std::vector<PassOption>& options) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& r = registry();
  if (findPass(info.name)) {
    throw Error(ErrorKind::Usage, fmt::format("pass '{}' is already registered", info.name));
  }
  auto keep = [&r](std::string_view s) -> std::string_view {
    r.strings.push_back(std::make_unique<std::string>(s));
    return *r.strings.back();
  };
  auto owned = std::make_unique<PassInfo>(info);
  owned->name = keep(info.name);
  owned->description = keep(info.description);
  std::vector<PassOption> kept;
  for (const PassOption& o : options) {
    kept.push_back({owned->name, keep(o.name), o.type, keep(o.default_value),
                    keep(o.description)});
  }
  r.entries.push_back({owned.get(), std::move(factory), std::move(kept)});
  r.infos.push_back(*owned);
  r.owned.push_back(std::move(owned));
}

bool isBuiltinPass(std::string_view name) {
#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION) \
  if (name == NAME) return true;
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS
  return false;
}

std::string passesMarkdownTable() {
  std::string out =
      "| pass | level | output | options | description |\n"
      "|---|---|---|---|---|\n";
  std::string options =
      "\n| option | type | default | description |\n"
      "|---|---|---|---|\n";
  for (const PassInfo& info : allPasses()) {
    if (!isBuiltinPass(info.name)) continue;
    std::vector<std::string> names;
    for (const PassOption& o : passOptions(info.name)) {
      names.push_back(fmt::format("`{}`", o.name));
      options += fmt::format("| `{}{{{}=...}}` | {} | `{}` | {} |\n", info.name, o.name,
                             optionTypeName(o.type), o.default_value, o.description);
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", info.name,
                       info.level == 0 ? std::string("--emit ort") : fmt::format("-O{}", info.level),
                       portabilityName(info.portability), fmt::join(names, ", "),
                       info.description);
  }
  return out + options;
}

}  // namespace fusectl::passes
