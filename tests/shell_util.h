// Helpers for tests that run fusectl or node through the shell.
#pragma once

#include <cctype>
#include <cstdlib>
#include <filesystem>
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

// Where the ONNX Runtime tests find node (FUSECTL_NODE, default "node") and the folder
// scripts/install-ort.sh installed onnxruntime-node into (FUSECTL_ORT_DIR). When that package
// is not there, `found` is false and `skip_reason` says what is missing.
struct OrtSetup {
  std::string node;
  std::string dir;
  bool found = false;
  std::string skip_reason;
};

inline OrtSetup findOrtSetup() {
  OrtSetup s;
  const char* node_env = std::getenv("FUSECTL_NODE");
  const char* ort_env = std::getenv("FUSECTL_ORT_DIR");
  s.node = node_env && *node_env ? node_env : "node";
  s.dir = ort_env ? ort_env : "";
  s.found = !s.dir.empty() &&
            std::filesystem::exists(std::filesystem::path(s.dir) / "node_modules" /
                                    "onnxruntime-node");
  if (!s.found) {
    s.skip_reason = "skipped: onnxruntime-node not found in FUSECTL_ORT_DIR='" + s.dir +
                    "' (scripts/install-ort.sh)";
  }
  return s;
}

}  // namespace fusectl::test
