// What every fuzz target shares: fusectl's documented failure (fusectl::Error, one line) is an
// accepted outcome; anything else (another exception, a message over several lines, a crash,
// a sanitizer report) is a finding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fusectl/graph/error.h"

namespace fusectl::fuzz {

// A finding that is not a crash: say what broke, then abort so libFuzzer keeps the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Runs fn(); a fusectl::Error with a one-line message is the refusal the CLI would print.
template <typename Fn>
void expectCleanOutcome(Fn&& fn) {
  try {
    fn();
  } catch (const fusectl::Error& e) {
    const std::string message = e.what();
    if (message.find('\n') != std::string::npos) fail("error over several lines: " + message);
    if (e.kind() == ErrorKind::Internal) fail("internal error: " + message);
  }
}

inline std::string bytesOf(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace fusectl::fuzz
