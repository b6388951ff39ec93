// Dims, shapes and broadcasting: canonical symbolic forms, exact arithmetic, parsing.
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include "fusectl/graph/shape.h"

using namespace fusectl;

namespace {
Dim sym(const char* s) { return Dim::symbolic(s); }
Shape parse(const char* s) { return *Shape::parse(s); }
std::string bcast(const char* a, const char* b) {
  auto s = broadcastShapes(parse(a), parse(b));
  return s ? s->str() : "none";
}
}  // namespace

TEST_CASE("dim: symbolic text is canonical") {
  CHECK(sym("seq*batch*2").str() == "2*batch*seq");
  CHECK(sym("batch * 2 * seq") == sym("2*batch*seq"));
  CHECK(sym("seq+past").str() == "past+seq");
  CHECK(sym("1+seq").str() == "seq+1");
  CHECK(sym("seq - 1").str() == "seq-1");
  CHECK(sym("batch*1").str() == "batch");
  CHECK(sym("(past+seq)*2").str() == "2*past+2*seq");
  CHECK(sym("3").isStatic());
  CHECK(sym("3").value() == 3);
  CHECK(sym("2*3").value() == 6);
  CHECK(sym("seq-seq").value() == 0);
  CHECK(sym("").isUnknown());
  CHECK(sym("unk__12").str() == "unk__12");
  CHECK(sym("batch_size").isSymbolic());
  // Text that is not a polynomial is one opaque name, stable under re-parsing.
  CHECK(sym("floor(seq/2)").str() == "floor(seq/2)");
  CHECK(sym("seq/2").str() == "seq/2");
  Dim half = sym("seq/2") * sym("batch");
  CHECK(half.str() == "batch*(seq/2)");
  CHECK(Dim::symbolic(half.str()) == half);
  CHECK((sym("floor(seq/2)") * Dim::known(2)).str() == "2*floor(seq/2)");
}

TEST_CASE("dim: arithmetic keeps symbols and is exact") {
  Dim batch = sym("batch"), seq = sym("seq"), past = sym("past");
  CHECK((batch * seq).str() == "batch*seq");
  CHECK((seq * batch) == (batch * seq));
  CHECK((Dim::known(2) * batch * seq * Dim::known(3)).str() == "6*batch*seq");
  CHECK((batch * batch).str() == "batch*batch");
  CHECK((past + seq).str() == "past+seq");
  CHECK((past + seq - past) == seq);
  CHECK((seq - Dim::known(1)).str() == "seq-1");
  CHECK(((past + seq) * Dim::known(2)).str() == "2*past+2*seq");
  CHECK((batch * seq / seq) == batch);
  CHECK((batch * seq * Dim::known(64) / Dim::known(64)) == batch * seq);
  CHECK((Dim::known(64) * batch / Dim::known(4)).str() == "16*batch");
  CHECK(((past + seq) * batch / (past + seq)) == batch);
  CHECK((sym("2*past+2*seq") / (past + seq)).value() == 2);
  CHECK((batch / seq).isUnknown());
  CHECK((Dim::known(2) * batch / Dim::known(4)).isUnknown());
  CHECK((Dim::known(12) / Dim::known(5)).isUnknown());
  CHECK((Dim::known(12) / Dim::known(0)).isUnknown());
  CHECK((batch * Dim::known(0)).value() == 0);
  CHECK((batch * Dim()).isUnknown());
  CHECK((Dim() + Dim::known(1)).isUnknown());
  int64_t big = std::numeric_limits<int64_t>::max();
  CHECK((Dim::known(big) * Dim::known(2)).isUnknown());
  CHECK((Dim::known(big) + Dim::known(1)).isUnknown());
  CHECK((sym("batch") * Dim::known(big) * Dim::known(2)).isUnknown());
}

TEST_CASE("dim: floor and ceil division keep symbols in one canonical form") {
  Dim h = sym("h");
  // Static operands: floor and ceil, negative numerators included.
  CHECK(floorDiv(Dim::known(7), 2).value() == 3);
  CHECK(floorDiv(Dim::known(-7), 2).value() == -4);
  CHECK(ceilDiv(Dim::known(7), 2).value() == 4);
  CHECK(ceilDiv(Dim::known(-7), 2).value() == -3);
  // Terms the divisor divides leave the floor exactly; a remainder below it floors to 0.
  CHECK(floorDiv(sym("2*h+3"), 2) == h + Dim::known(1));
  CHECK(floorDiv(sym("4*h*w"), 2).str() == "2*h*w");
  CHECK(floorDiv(h, 1) == h);
  CHECK(floorDiv(h, 2).str() == "floor(h/2)");
  CHECK(floorDiv(sym("3*h"), 2).str() == "floor(h/2)+h");
  // A stride-2 window of 3 with one pad each side, (h + 2 - 3) / 2 + 1, and SAME's ceil(h / 2)
  // are one dim, as are the same windows on equal planes.
  Dim padded = floorDiv(h + Dim::known(2 - 3), 2) + Dim::known(1);
  CHECK(padded.str() == "floor((h+1)/2)");
  CHECK(padded.provablyEqual(ceilDiv(h, 2)));
  CHECK(floorDiv(h - Dim::known(3), 2).str() == "floor((h+1)/2)-2");
  // Nested windows stay comparable; the result multiplies like a name.
  Dim quarter = ceilDiv(ceilDiv(h, 2), 2);
  CHECK(quarter.str() == "floor((floor((h+1)/2)+1)/2)");
  CHECK(quarter.provablyEqual(ceilDiv(padded, 2)));
  CHECK((quarter * Dim::known(2)).str() == "2*floor((floor((h+1)/2)+1)/2)");
  CHECK(!floorDiv(h, 2).provablyEqual(floorDiv(h + Dim::known(1), 2)));
  // Unknown in, unknown out; a divisor that is not positive is unknown too.
  CHECK(floorDiv(Dim(), 2).isUnknown());
  CHECK(floorDiv(h, 0).isUnknown());
  CHECK(ceilDiv(h, -2).isUnknown());
  // floor(c / d) * d below INT64_MIN: unknown, not a wrapped coefficient.
  CHECK(floorDiv(Dim::symbolic("-9223372036854775807*h"), 3).isUnknown());
}

TEST_CASE("dim: provable equality and structural identity") {
  CHECK(sym("batch").provablyEqual(sym("batch")));
  CHECK(sym("a*b").provablyEqual(sym("b*a")));
  CHECK_FALSE(sym("batch").provablyEqual(sym("seq")));
  CHECK_FALSE(Dim().provablyEqual(Dim()));
  CHECK(Dim() == Dim());
  CHECK_FALSE(Dim::known(3).provablyEqual(sym("batch")));
  CHECK(Dim::known(3).provablyEqual(Dim::known(3)));
  CHECK(Dim().str() == "?");
}

TEST_CASE("shape: parse, print, numel") {
  CHECK(parse("1x3x224x224").str() == "[1,3,224,224]");
  CHECK(parse("batchx3x224x224").str() == "[batch,3,224,224]");
  CHECK(parse("1,max_len,64").str() == "[1,max_len,64]");
  CHECK(parse("[batch, seq, 64]").str() == "[batch,seq,64]");
  CHECK(parse("").rank() == 0);
  CHECK(parse("").hasRank());
  CHECK(parse("scalar").str() == "[]");
  CHECK(parse("?x3").str() == "[?,3]");
  CHECK_FALSE(Shape::parse("-1x3"));
  CHECK_FALSE(Shape::parse("1xx3"));
  CHECK(Shape().str() == "?");

  CHECK(parse("2x3x4").staticNumel() == 24);
  CHECK(parse("").staticNumel() == 1);
  CHECK_FALSE(parse("batchx3").staticNumel());
  CHECK_FALSE(Shape().staticNumel());
  int64_t big = std::numeric_limits<int64_t>::max();
  CHECK_FALSE(Shape::ofStatic({big, 2}).staticNumel());
  CHECK(parse("batch,seq,64").numel().str() == "64*batch*seq");
  CHECK(parse("?,64").numel().isUnknown());
  CHECK(parse("2x3").isStatic());
  CHECK_FALSE(parse("2xn").isStatic());
  CHECK(parse("2x3").staticDims() == std::vector<int64_t>{2, 3});
}

TEST_CASE("shape: ONNX multidirectional broadcasting") {
  CHECK(bcast("2,3", "3") == "[2,3]");
  CHECK(bcast("2,1", "1,4") == "[2,4]");
  CHECK(bcast("", "2,3") == "[2,3]");
  CHECK(bcast("batch,1", "1,seq") == "[batch,seq]");
  CHECK(bcast("batch", "1") == "[batch]");
  CHECK(bcast("batch", "batch") == "[batch]");
  // The model claims the broadcast is valid, so a symbol against n != 1 must be n (or 1).
  CHECK(bcast("batch", "4") == "[4]");
  CHECK(bcast("4", "batch") == "[4]");
  CHECK(bcast("batch", "seq") == "[?]");
  CHECK(bcast("?", "1") == "[?]");
  CHECK(bcast("?", "5") == "[5]");
  CHECK(bcast("?", "batch") == "[?]");
  CHECK(bcast("2", "3") == "none");
  CHECK(bcast("4,2,3", "5,3") == "none");
  CHECK(broadcastShapes(Shape(), parse("2,3"))->str() == "?");
}
