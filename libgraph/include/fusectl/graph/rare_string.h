// RareString: a string member that is empty on almost every object that has it.
//
// Doc strings of nodes, values, tensors and attributes, attribute references and serialized
// non-tensor types are set on a handful of objects in a model, but a std::string member costs 32
// bytes on every one of them: 200 MB on a million-node graph, and on the machines we measure,
// fresh memory is the largest cost of loading a large model (bench/README.md). A RareString is
// one pointer, null when empty. It reads as a const std::string& wherever one is expected.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "fusectl/graph/deep_copy_ptr.h"

namespace fusectl {

class RareString {
 public:
  RareString() = default;
  RareString(std::string s) { assign(std::move(s)); }  // NOLINT: implicit, like std::string
  RareString(const char* s) : RareString(std::string(s)) {}  // NOLINT
  RareString& operator=(std::string s) {
    assign(std::move(s));
    return *this;
  }
  RareString& operator=(const char* s) { return *this = std::string(s); }

  const std::string& str() const { return text_ ? *text_ : emptyString(); }
  operator const std::string&() const { return str(); }  // NOLINT: reads as a string
  operator std::string_view() const { return str(); }    // NOLINT
  bool empty() const { return !text_; }
  size_t size() const { return str().size(); }
  const char* c_str() const { return str().c_str(); }
  std::string::const_iterator begin() const { return str().begin(); }
  std::string::const_iterator end() const { return str().end(); }
  void clear() { text_.reset(); }
  // Exchanges contents with a std::string (an importer moving a parsed string in).
  void swap(std::string& s) {
    std::string mine = text_ ? std::move(*text_) : std::string();
    assign(std::move(s));
    s = std::move(mine);
  }
  RareString& operator+=(std::string_view s) {
    if (!s.empty()) {
      if (!text_) text_ = std::make_unique<std::string>();
      text_->append(s);
    }
    return *this;
  }

  friend bool operator==(const RareString& a, const RareString& b) { return a.str() == b.str(); }
  friend bool operator!=(const RareString& a, const RareString& b) { return !(a == b); }
  // Exact overloads for strings and literals: through the implicit conversions both ways they
  // would be ambiguous.
  friend bool operator==(const RareString& a, const std::string& b) { return a.str() == b; }
  friend bool operator!=(const RareString& a, const std::string& b) { return a.str() != b; }
  friend bool operator==(const std::string& a, const RareString& b) { return a == b.str(); }
  friend bool operator!=(const std::string& a, const RareString& b) { return a != b.str(); }
  friend bool operator==(const RareString& a, const char* b) { return a.str() == b; }
  friend bool operator!=(const RareString& a, const char* b) { return a.str() != b; }
  friend bool operator==(const char* a, const RareString& b) { return a == b.str(); }
  friend bool operator!=(const char* a, const RareString& b) { return a != b.str(); }
  friend bool operator==(const RareString& a, std::string_view b) { return a.str() == b; }
  friend bool operator!=(const RareString& a, std::string_view b) { return a.str() != b; }
  friend bool operator==(std::string_view a, const RareString& b) { return a == b.str(); }
  friend bool operator!=(std::string_view a, const RareString& b) { return a != b.str(); }
  friend std::string operator+(const RareString& a, std::string_view b) {
    return a.str() + std::string(b);
  }
  friend std::string operator+(std::string_view a, const RareString& b) {
    return std::string(a) + b.str();
  }

 private:
  void assign(std::string s) {
    if (s.empty()) {
      text_.reset();
    } else {
      text_ = std::make_unique<std::string>(std::move(s));
    }
  }
  static const std::string& emptyString() {
    static const std::string empty;
    return empty;
  }
  DeepCopyPtr<std::string> text_;  // null when empty
};

}  // namespace fusectl
