// The golden pass cases of testdata/passes (the format: test_passes_golden.cpp's header),
// parsed for the tests that read them: the golden runner and the mutation sweep
// (test_pass_mutation_sweep.cpp).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusectl/graph/shape.h"

namespace golden {

namespace fs = std::filesystem;
using fusectl::Shape;

struct Directive {
  std::string kind;  // "CHECK", "CHECK-NEXT", "CHECK-NOT", "CHECK-UNCHANGED", ...
  std::string arg;
  int line = 0;  // 1-based, in the file
};

struct Case {
  std::string file;
  std::string name;
  int first_line = 0;
  std::string text;  // the model, directives included (they are comments)
  std::string pipeline;
  int pipeline_line = 0;
  std::vector<Directive> directives;
  bool numeric = true;
  uint64_t seed = 1;
  std::vector<std::pair<std::string, Shape>> shapes;
};

inline std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Runs of spaces/tabs become one space; leading and trailing blanks go.
inline std::string squeeze(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : trim(s)) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

inline std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Parses a golden file into cases; throws std::runtime_error naming file:line on a bad
// directive.
inline std::vector<Case> parseFile(const std::string& path, const std::string& content) {
  static const char* kKinds[] = {"RUN",       "CASE",      "CHECK-NEXT", "CHECK-NOT",
                                 "CHECK-UNCHANGED", "CHECK-STAT", "CHECK-REJECT", "CHECK",
                                 "NUMERIC",   "SEED",      "SHAPE"};
  std::vector<Case> cases;
  std::string pipeline;
  int pipeline_line = 0;
  Case cur;
  auto startCase = [&](int line) {
    cur = Case();
    cur.file = path;
    cur.first_line = line;
    cur.text.assign(static_cast<size_t>(line - 1), '\n');  // parse errors keep file line numbers
  };
  auto finish = [&] {
    if (trim(cur.text).empty() && cur.directives.empty()) return;
    if (cur.pipeline.empty()) {
      cur.pipeline = pipeline;
      cur.pipeline_line = pipeline_line;
    }
    if (cur.name.empty()) cur.name = fmt::format("case at line {}", cur.first_line);
    cases.push_back(std::move(cur));
  };
  std::vector<std::string> lines = splitLines(content);
  startCase(1);
  for (size_t i = 0; i < lines.size(); ++i) {
    int lineno = static_cast<int>(i) + 1;
    std::string t = trim(lines[i]);
    if (t.rfind("# -----", 0) == 0) {
      finish();
      startCase(lineno + 1);
      continue;
    }
    cur.text += lines[i] + "\n";
    if (t.rfind("#", 0) != 0 || t.rfind("#@", 0) == 0) continue;
    std::string body = trim(std::string_view(t).substr(1));
    for (const char* kind : kKinds) {
      std::string k = kind;
      if (body.rfind(k, 0) != 0) continue;
      std::string rest = body.substr(k.size());
      if (!rest.empty() && rest[0] != ':' && !std::isspace(static_cast<unsigned char>(rest[0])))
        continue;  // e.g. "CHECKS" is prose, not a directive
      if (!rest.empty() && rest[0] == ':') rest = rest.substr(1);
      rest = trim(rest);
      if (k == "RUN") {
        if (rest.empty()) throw std::runtime_error(fmt::format("{}:{}: empty RUN", path, lineno));
        cur.pipeline = rest;
        cur.pipeline_line = lineno;
        pipeline = rest;
        pipeline_line = lineno;
      } else if (k == "CASE") {
        cur.name = rest;
      } else if (k == "NUMERIC") {
        if (rest.rfind("off", 0) != 0 || trim(rest.substr(3)).empty()) {
          throw std::runtime_error(
              fmt::format("{}:{}: write 'NUMERIC: off <reason>'", path, lineno));
        }
        cur.numeric = false;
      } else if (k == "SEED") {
        cur.seed = std::stoull(rest);
      } else if (k == "SHAPE") {
        size_t eq = rest.rfind('=');
        std::optional<Shape> s =
            eq == std::string::npos ? std::nullopt : Shape::parse(rest.substr(eq + 1));
        if (!s) throw std::runtime_error(fmt::format("{}:{}: write 'SHAPE: X=1x3x8x8'", path,
                                                     lineno));
        cur.shapes.push_back({trim(rest.substr(0, eq)), *s});
      } else {
        if (rest.empty() && k != "CHECK-UNCHANGED") {
          throw std::runtime_error(fmt::format("{}:{}: {} needs text", path, lineno, k));
        }
        cur.directives.push_back({k, rest, lineno});
      }
      break;
    }
  }
  finish();
  return cases;
}

inline fs::path goldenRoot() { return fs::path(FUSECTL_SOURCE_DIR) / "testdata" / "passes"; }

inline std::vector<fs::path> goldenFiles() {
  std::vector<fs::path> files;
  if (!fs::exists(goldenRoot())) return files;
  for (const auto& e : fs::recursive_directory_iterator(goldenRoot()))
    if (e.is_regular_file() && e.path().extension() == ".onnxtxt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace golden
