#include "fusectl/graph/einsum_equation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "fusectl/graph/error.h"

namespace fusectl {
namespace {

bool isLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

EinsumTerm parseTerm(std::string_view text, std::string_view equation) {
  EinsumTerm t;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (isLetter(c)) {
      t.letters += c;
      continue;
    }
    if (c == '.') {
      if (text.substr(i, 3) != "...")
        throwInvalid(fmt::format("Einsum equation '{}': '.' outside an ellipsis '...'", equation));
      if (t.hasEllipsis())
        throwInvalid(fmt::format("Einsum equation '{}': term '{}' has two ellipses", equation,
                                 text));
      t.ellipsis_at = static_cast<int>(t.letters.size());
      i += 2;
      continue;
    }
    throwInvalid(fmt::format("Einsum equation '{}': unexpected character '{}'", equation,
                             std::string(1, c)));
  }
  return t;
}

}  // namespace

std::string EinsumTerm::str() const {
  if (!hasEllipsis()) return letters;
  const size_t at = static_cast<size_t>(ellipsis_at);
  return letters.substr(0, at) + "..." + letters.substr(at);
}

EinsumTerm EinsumEquation::outputOrImplicit() const {
  if (output) return *output;
  EinsumTerm out;
  std::map<char, int> count;
  bool ellipsis = false;
  for (const EinsumTerm& t : inputs) {
    ellipsis = ellipsis || t.hasEllipsis();
    for (char c : t.letters) ++count[c];
  }
  if (ellipsis) out.ellipsis_at = 0;
  for (const auto& [c, n] : count)
    if (n == 1) out.letters += c;
  return out;
}

EinsumEquation parseEinsumEquation(std::string_view equation) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos && eq.find("->", arrow + 2) != std::string::npos)
    throwInvalid(fmt::format("Einsum equation '{}': more than one '->'", equation));
  const std::string_view lhs = std::string_view(eq).substr(0, arrow);
  EinsumEquation out;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    out.inputs.push_back(parseTerm(lhs.substr(start, comma == std::string_view::npos
                                                          ? std::string_view::npos
                                                          : comma - start),
                                   equation));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (arrow == std::string::npos) return out;
  out.output = parseTerm(std::string_view(eq).substr(arrow + 2), equation);
  const bool input_ellipsis =
      std::any_of(out.inputs.begin(), out.inputs.end(),
                  [](const EinsumTerm& t) { return t.hasEllipsis(); });
  if (out.output->hasEllipsis() && !input_ellipsis)
    throwInvalid(fmt::format("Einsum equation '{}': the output has '...' and no input has",
                             equation));
  for (char c : out.output->letters) {
    const bool found = std::any_of(out.inputs.begin(), out.inputs.end(), [c](const EinsumTerm& t) {
      return t.letters.find(c) != std::string::npos;
    });
    if (!found)
      throwInvalid(fmt::format("Einsum equation '{}': output letter '{}' is in no input",
                               equation, std::string(1, c)));
  }
  return out;
}

}  // namespace fusectl
