// Helpers for tests that run fusectl or node through the shell.
#pragma once

#include <cctype>
#include <string>

namespace fusectl::test {

// `s` as one single-quoted shell word.
inline std::string shellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The file stem `fusectl run --output-dir` (and tests/ort_reference.js) give an output name:
// [A-Za-z0-9._-] kept, everything else '_' (names in these tests never collide).
inline std::string outputFileStem(const std::string& name) {
  std::string s;
  for (char c : name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return s;
}

}  // namespace fusectl::test
