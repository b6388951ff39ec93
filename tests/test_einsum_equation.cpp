// parseEinsumEquation: the one parser the Einsum shape rule, the CPU kernel and canonicalize's
// einsum-matmul share (einsum_equation.h).
#include <catch2/catch.hpp>

#include <string>

#include "fusectl/graph/einsum_equation.h"
#include "fusectl/graph/error.h"

using namespace fusectl;

TEST_CASE("Einsum equations: terms, ellipses and the implicit output", "[einsum]") {
  const EinsumEquation mm = parseEinsumEquation(" bhid , bhjd -> bhij ");
  REQUIRE(mm.inputs.size() == 2);
  CHECK(mm.inputs[0].letters == "bhid");
  CHECK(mm.inputs[1].letters == "bhjd");
  REQUIRE(mm.output);
  CHECK(mm.output->letters == "bhij");
  CHECK_FALSE(mm.output->hasEllipsis());

  const EinsumEquation ell = parseEinsumEquation("...ij,j...->i...");
  CHECK(ell.inputs[0].ellipsis_at == 0);
  CHECK(ell.inputs[1].ellipsis_at == 1);
  CHECK(ell.inputs[1].str() == "j...");
  CHECK(ell.output->ellipsis_at == 1);

  // Implicit: the ellipsis, then the letters used once, alphabetically (numpy's rule).
  const EinsumTerm implicit = parseEinsumEquation("kj,ji...").outputOrImplicit();
  CHECK(implicit.str() == "...ik");
  CHECK(parseEinsumEquation("ii").outputOrImplicit().str() == "");
  CHECK(parseEinsumEquation("ij,jk->").output->letters.empty());
  CHECK(parseEinsumEquation("").inputs.size() == 1);
}

TEST_CASE("Einsum equations: malformed ones are one error with the reason", "[einsum]") {
  const auto reason = [](const std::string& eq) {
    try {
      parseEinsumEquation(eq);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidInput);
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(reason("ij,jk->ik->i") == "Einsum equation 'ij,jk->ik->i': more than one '->'");
  CHECK(reason("i.j") == "Einsum equation 'i.j': '.' outside an ellipsis '...'");
  CHECK(reason("...i...") == "Einsum equation '...i...': term '...i...' has two ellipses");
  CHECK(reason("i1,1j") == "Einsum equation 'i1,1j': unexpected character '1'");
  CHECK(reason("ij->...i") == "Einsum equation 'ij->...i': the output has '...' and no input has");
  CHECK(reason("ij,jk->iz") == "Einsum equation 'ij,jk->iz': output letter 'z' is in no input");
}
