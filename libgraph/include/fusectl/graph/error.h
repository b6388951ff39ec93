// Errors raised by libgraph and the libraries above it.
//
// fusectl reports bad input as one line naming the file and the reason, and the CLI maps each
// ErrorKind to a documented exit code (docs/cli.md). Library code throws fusectl::Error; it never
// aborts on user input.
#pragma once

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

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
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
