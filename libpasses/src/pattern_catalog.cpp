// Pattern catalogs: named patterns in a text file, one entry per line (pattern.h).
#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "fusectl/graph/error.h"
#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

namespace {

bool isNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

std::string trimmed(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

struct Entry {
  std::string name;
  std::string text;
  int line = 0;
};

}  // namespace

std::vector<Pattern> parseCatalog(std::string_view text, const std::string& display_name) {
  auto fail = [&](int line, const std::string& why) {
    throwInvalid(fmt::format("{}:{}: {}", display_name, line, why));
  };
  std::vector<Entry> entries;
  std::istringstream in{std::string(text)};
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string content = trimmed(raw);
    if (content.empty() || content[0] == '#') continue;
    if (std::isspace(static_cast<unsigned char>(raw[0]))) {
      if (entries.empty()) fail(line, "an indented line continues an entry, but none came before");
      entries.back().text += "\n" + content;
      continue;
    }
    const size_t eq = content.find('=');
    if (eq == std::string::npos) fail(line, "expected 'name = pattern'");
    const std::string name = trimmed(std::string_view(content).substr(0, eq));
    if (name.empty()) fail(line, "the entry has no name before '='");
    for (char c : name) {
      if (!isNameChar(c)) {
        fail(line, fmt::format("pattern name '{}' may hold letters, digits, '-', '_' and '.' only",
                               name));
      }
    }
    for (const Entry& e : entries)
      if (e.name == name) fail(line, fmt::format("pattern '{}' is already defined on line {}", name, e.line));
    entries.push_back({name, trimmed(std::string_view(content).substr(eq + 1)), line});
  }
  if (entries.empty()) throwInvalid(display_name + ": the catalog defines no pattern");
  std::vector<Pattern> out;
  for (const Entry& e : entries) {
    if (e.text.empty()) fail(e.line, fmt::format("pattern '{}' is empty", e.name));
    try {
      out.push_back(Pattern::parse(e.text, e.name));
    } catch (const Error& err) {
      fail(e.line, fmt::format("pattern '{}': {}", e.name, err.what()));
    }
  }
  return out;
}

std::vector<Pattern> loadCatalog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(fmt::format("{}: cannot open the catalog", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throwIo(fmt::format("{}: read failed", path));
  return parseCatalog(text.str(), path);
}

}  // namespace fusectl::passes
