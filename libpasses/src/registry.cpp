// The pass registry: passes.def expanded once into a table, plus passes registered at run time
// (tests register deliberately broken passes to exercise --verify-each).
#include "fusectl/passes/registry.h"

#include <fmt/format.h>

#include <algorithm>
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
};

struct Registry {
  std::vector<Entry> entries;
  std::vector<PassInfo> infos;
  std::vector<std::unique_ptr<PassInfo>> owned;      // infos of run-time registrations
  std::vector<std::unique_ptr<std::string>> strings;  // their names and descriptions
};

Registry& registry() {
  static Registry r = [] {
    Registry r;
#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION) \
  r.entries.push_back({&CLASS##Info, &create##CLASS});
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS
    for (const Entry& e : r.entries) r.infos.push_back(*e.info);
    return r;
  }();
  return r;
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

const std::vector<PassInfo>& allPasses() { return registry().infos; }

const PassInfo* findPass(std::string_view name) {
  for (const Entry& e : registry().entries)
    if (e.info->name == name) return e.info;
  return nullptr;
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

void registerPass(const PassInfo& info, std::function<std::unique_ptr<Pass>()> factory) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& r = registry();
  if (findPass(info.name)) {
    throw Error(ErrorKind::Usage, fmt::format("pass '{}' is already registered", info.name));
  }
  auto name = std::make_unique<std::string>(info.name);
  auto description = std::make_unique<std::string>(info.description);
  auto owned = std::make_unique<PassInfo>(info);
  owned->name = *name;
  owned->description = *description;
  r.strings.push_back(std::move(name));
  r.strings.push_back(std::move(description));
  r.entries.push_back({owned.get(), std::move(factory)});
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
      "| pass | level | output | description |\n"
      "|---|---|---|---|\n";
  for (const PassInfo& info : allPasses()) {
    if (!isBuiltinPass(info.name)) continue;
    out += fmt::format("| `{}` | -O{} | {} | {} |\n", info.name, info.level,
                       portabilityName(info.portability), info.description);
  }
  return out;
}

}  // namespace fusectl::passes
