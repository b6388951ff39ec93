// Tensor shapes with static, symbolic and unknown dimensions.
//
// A symbolic dimension is an expression over named dims ("batch", "seq") kept in a canonical
// text form so that equal expressions compare equal: products are written as sorted factors with
// an integer coefficient first ("2*batch*seq"), sums as sorted terms ("past+seq"). That is enough
// to carry dims through Reshape/Flatten/Concat/MatMul and to prove that two symbolic shapes agree
// for every value of their symbols, which fusion legality checks need.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fusectl {

class Dim {
 public:
  enum class Kind : uint8_t { Unknown, Static, Symbolic };

  Dim() = default;  // unknown
  static Dim known(int64_t v) {
    Dim d;
    d.symbol_ = nullptr;
    d.value_ = v;
    return d;
  }
  static Dim symbolic(std::string expr);  // canonicalises; "3" becomes a static dim
  static Dim unknown() { return Dim(); }

  Kind kind() const {
    return symbol_ == nullptr ? Kind::Static : symbol_ == &kUnknown ? Kind::Unknown : Kind::Symbolic;
  }
  bool isStatic() const { return symbol_ == nullptr; }
  bool isSymbolic() const { return symbol_ != nullptr && symbol_ != &kUnknown; }
  bool isUnknown() const { return symbol_ == &kUnknown; }
  int64_t value() const { return value_; }  // meaningful only when isStatic()
  // meaningful only when isSymbolic()
  const std::string& symbol() const { return isSymbolic() ? *symbol_ : kNoSymbol; }

  // Arithmetic that keeps symbols: unknown in, unknown out.
  friend Dim operator*(const Dim& a, const Dim& b);
  friend Dim operator+(const Dim& a, const Dim& b);
  friend Dim operator-(const Dim& a, const Dim& b);
  // Exact division; unknown when not provably exact (e.g. "batch*seq" / "seq" = "batch").
  friend Dim operator/(const Dim& a, const Dim& b);

  // Equal for every value of the symbols (same kind and same canonical form). Unknown dims
  // are never provably equal, not even to themselves.
  bool provablyEqual(const Dim& o) const;
  // Structural identity, for golden tests and maps: unknown == unknown.
  bool operator==(const Dim& o) const { return value_ == o.value_ && symbol_ == o.symbol_; }
  bool operator!=(const Dim& o) const { return !(*this == o); }

  std::string str() const;  // "3", "batch", "?"

 private:
  inline static const std::string kNoSymbol;
  // Marks an unknown dim in symbol_ (only its address is used).
  inline static const std::string kUnknown;
  // 0 unless static.
  int64_t value_ = 0;
  // The kind and, for a symbolic dim, its canonical text, interned for the life of the process:
  // equal symbols share one string, so a Dim copies and compares like an integer (a
  // million-node graph holds millions of dims, hence 16 bytes and no separate kind field).
  // nullptr: static; &kUnknown: unknown; else the symbol.
  const std::string* symbol_ = &kUnknown;
};

class Shape {
 public:
  Shape() = default;  // unknown rank
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)), has_rank_(true) {}
  static Shape ofStatic(const std::vector<int64_t>& dims);
  static Shape unknownRank() { return Shape(); }
  static Shape scalar() { return Shape(std::vector<Dim>{}); }

  bool hasRank() const { return has_rank_; }
  size_t rank() const { return dims_.size(); }
  const std::vector<Dim>& dims() const { return dims_; }
  std::vector<Dim>& dims() { return dims_; }
  const Dim& operator[](size_t i) const { return dims_[i]; }
  Dim& operator[](size_t i) { return dims_[i]; }

  bool isStatic() const;  // rank known and every dim static
  // Product of static dims; nullopt when not static or on int64 overflow.
  std::optional<int64_t> staticNumel() const;
  std::vector<int64_t> staticDims() const;  // requires isStatic()
  Dim numel() const;                        // product as a (possibly symbolic) dim

  bool operator==(const Shape& o) const { return has_rank_ == o.has_rank_ && dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[batch,3,224,224]", "[]" for a scalar, "?" for unknown rank
  // Parses a CLI shape spec: "1x3x224x224", "batchx3x224x224", "" or "scalar" for rank 0.
  // nullopt on a malformed spec or a negative dim.
  static std::optional<Shape> parse(std::string_view spec);

 private:
  std::vector<Dim> dims_;
  bool has_rank_ = false;
};

// floor(a / d) and ceil(a / d) for a divisor d > 0 (unknown otherwise), exact on symbols: the
// windows of a strided Conv or pool over a dynamic plane. Terms whose coefficients d divides
// leave the floor (symbols are integers), so the rest is the canonical remainder:
// floorDiv("2*h+3", 2) is "h+1", floorDiv("h-1", 2)+1 and ceilDiv("h", 2) are both "floor((h+1)/2)".
Dim floorDiv(const Dim& a, int64_t d);
Dim ceilDiv(const Dim& a, int64_t d);

// ONNX multidirectional (NumPy) broadcasting; nullopt when the shapes provably cannot broadcast.
std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b);

// Whether two shapes cannot both be true of one value: another rank, or a dim static in both
// with two values. An unknown rank or a symbolic dim differs from nothing.
bool provablyDiffer(const Shape& a, const Shape& b);

}  // namespace fusectl
