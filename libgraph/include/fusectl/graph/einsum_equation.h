// An Einsum equation ("bhid,bhjd->bhij", "...ij,...jk", "ii->i"), parsed in one place for the
// shape rule (libgraph), the CPU kernel (libkernels) and canonicalize's einsum-matmul
// (libpasses), which read it the same way: spaces ignored, letters a-z and A-Z, at most one
// "..." per term, the output after "->" or, without one, implicit (the ellipsis, then every
// letter that occurs once, in alphabetical order).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fusectl {

struct EinsumTerm {
  std::string letters;  // in order, without the ellipsis
  int ellipsis_at = -1;  // the "..." stands before letters[ellipsis_at]; -1: no ellipsis
  bool hasEllipsis() const { return ellipsis_at >= 0; }
  // The term as written, with its ellipsis ("b...ij").
  std::string str() const;
};

struct EinsumEquation {
  std::vector<EinsumTerm> inputs;
  std::optional<EinsumTerm> output;  // absent for the implicit form (no "->")
  // The implicit form's output: the ellipsis when any input has one, then every letter that
  // occurs exactly once over the inputs, in alphabetical order.
  EinsumTerm outputOrImplicit() const;
};

// Throws Error (InvalidInput) with the reason: a character other than a letter, ',', "...",
// "->"; a '.' that is not part of "..."; a second "..." in a term; a second "->"; an ellipsis in
// the output when no input has one; an output letter that no input has.
EinsumEquation parseEinsumEquation(std::string_view equation);

}  // namespace fusectl
