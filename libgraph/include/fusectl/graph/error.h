// Errors raised by libgraph and the libraries above it.
//
// fusectl reports bad input as one line naming the file and the reason, and the CLI maps each
// ErrorKind to a documented exit code (docs/cli.md). Library code throws fusectl::Error; it never
// aborts on user input.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

namespace fusectl {

enum class ErrorKind {
  Usage,         // bad flags or arguments (exit 2)
  InvalidInput,  // the model or a data file is malformed (exit 3)
  Io,            // a file cannot be read or written (exit 4)
  Unsupported,   // valid input that fusectl does not handle (exit 5)
  Internal,      // a broken invariant inside fusectl (exit 70)
};

// Messages quote names taken from the file (values, nodes, tensors); a name that holds a newline
// or another control character would split the one-line refusal the CLI promises, or move the
// terminal's cursor, so each such byte is spelled as an escape (\n, \r, \t, \xNN).
inline std::string escapeControlCharacters(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(escapeControlCharacters(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void throwInvalid(const std::string& message) {
  throw Error(ErrorKind::InvalidInput, message);
}
[[noreturn]] inline void throwIo(const std::string& message) { throw Error(ErrorKind::Io, message); }
[[noreturn]] inline void throwUnsupported(const std::string& message) {
  throw Error(ErrorKind::Unsupported, message);
}
[[noreturn]] inline void throwInternal(const std::string& message) {
  throw Error(ErrorKind::Internal, message);
}

}  // namespace fusectl
