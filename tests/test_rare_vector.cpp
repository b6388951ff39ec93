// RareVector and RareTensor stand in for std::vector and Tensor members of Attribute; they
// must read and copy exactly like what they replace.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/attribute.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/rare_tensor.h"
#include "fusectl/graph/rare_vector.h"

using namespace fusectl;

namespace {
// Binds only to a real std::vector, as the ~150 attribute sites that read one do.
size_t sizeOf(const std::vector<std::string>& v) { return v.size(); }
}  // namespace

TEST_CASE("rare vector: empty reads as an empty vector and takes one pointer") {
  STATIC_REQUIRE(sizeof(RareVector<std::string>) == sizeof(void*));
  RareVector<std::string> v;
  CHECK(v.empty());
  CHECK(v.size() == 0);
  CHECK(v.begin() == v.end());
  CHECK(v.data() == nullptr);
  const std::vector<std::string>& as_vector = v;
  CHECK(as_vector.empty());
  CHECK(sizeOf(v) == 0);
  int visited = 0;
  for (const std::string& s : v) visited += static_cast<int>(s.size()) + 1;
  CHECK(visited == 0);
  CHECK(v == std::vector<std::string>{});
  v.reserve(0);
  v.resize(0);
  CHECK(v.data() == nullptr);
}

TEST_CASE("rare vector: push_back, assignment and conversion to const std::vector&") {
  RareVector<std::string> v;
  v.push_back("a");
  std::string b = "b";
  v.push_back(b);
  v.emplace_back(2, 'c');
  REQUIRE(v.size() == 3);
  CHECK(v[0] == "a");
  CHECK(v.front() == "a");
  CHECK(v.back() == "cc");
  CHECK(sizeOf(v) == 3);
  const std::vector<std::string>& as_vector = v;
  CHECK(as_vector == std::vector<std::string>{"a", "b", "cc"});
  std::vector<std::string> collected(v.begin(), v.end());
  CHECK(collected == as_vector);
  for (std::string& s : v) s += "!";
  CHECK(v.vec() == std::vector<std::string>{"a!", "b!", "cc!"});

  v = std::vector<std::string>{"x"};
  CHECK(v == std::vector<std::string>{"x"});
  CHECK(std::vector<std::string>{"y"} != v);
  v = {};
  CHECK(v.empty());
  CHECK(v.data() == nullptr);  // assigning an empty vector frees the storage

  RareVector<float> f;
  const float raw[] = {1.5f, -2.f};
  f.assign(std::begin(raw), std::end(raw));
  CHECK(f == std::vector<float>{1.5f, -2.f});
  f.resize(3);
  CHECK(f[2] == 0.f);
  f.resize(4, 7.f);
  CHECK(f.back() == 7.f);
  f.clear();
  CHECK(f.empty());
  CHECK(f.data() == nullptr);
}

TEST_CASE("rare vector: copies are deep and compare by value") {
  RareVector<std::string> a;
  a = {"one", "two"};
  RareVector<std::string> b = a;
  CHECK(a == b);
  b[0] = "uno";
  CHECK(a[0] == "one");
  CHECK(a != b);
  b.push_back("three");
  CHECK(a.size() == 2);
  a = b;
  CHECK(a == b);
  CHECK(a.data() != b.data());
  RareVector<std::string> moved = std::move(b);
  CHECK(moved == a);
  RareVector<std::string> empty_copy = RareVector<std::string>();
  CHECK(empty_copy.data() == nullptr);
}

TEST_CASE("rare vector: holds move-only elements") {
  RareVector<std::unique_ptr<int>> v;
  v.push_back(std::make_unique<int>(1));
  v.emplace_back(new int(2));
  v.reserve(4);
  REQUIRE(v.size() == 2);
  CHECK(*v[0] == 1);
  CHECK(*v.back() == 2);
  int sum = 0;
  for (const auto& p : v) sum += *p;
  CHECK(sum == 3);
  RareVector<std::unique_ptr<int>> w = std::move(v);
  CHECK(w.size() == 2);
  const std::vector<std::unique_ptr<int>>& as_vector = w;
  CHECK(*as_vector[1] == 2);
}

TEST_CASE("rare tensor: unset reads as a default-constructed Tensor; writes allocate") {
  STATIC_REQUIRE(sizeof(RareTensor) == sizeof(void*));
  RareTensor t;
  const Tensor& empty = t;
  CHECK(empty.dtype() == DType::Undefined);
  CHECK(t.dtype() == DType::Undefined);
  CHECK(t.dims().empty());
  CHECK(t.byteSize() == 0);
  CHECK(t.bytes() == nullptr);
  CHECK(t.buffer().owner() == nullptr);
  CHECK(t.strings().empty());
  CHECK(t.identical(Tensor()));
  CHECK(t.contentHash() == Tensor().contentHash());
  CHECK(t.tensor().doc_string.empty());

  t = Tensor::fromValues<float>(DType::Float, {2}, {1.f, 2.f});
  CHECK(t.dtype() == DType::Float);
  CHECK(t.dims() == std::vector<int64_t>{2});
  CHECK(t.numel() == 2);
  CHECK(t.byteSize() == 8);
  CHECK(t.data<float>()[1] == 2.f);
  CHECK(t.valueAsDouble(0) == 1.0);
  CHECK(t.valueAsInt64(1) == 2);
  float out[2] = {};
  t.copyBytesTo(reinterpret_cast<uint8_t*>(out));
  CHECK(out[0] == 1.f);

  RareTensor copy = t;
  copy.mutableData<float>()[0] = 5.f;
  copy.mutableTensor().doc_string = "edited";
  CHECK(t.data<float>()[0] == 1.f);  // the copy does not write through to the original
  CHECK(t.tensor().doc_string.empty());
  CHECK(copy.valueAsDouble(0) == 5.0);
  CHECK_FALSE(copy.identical(t));
  copy = t;
  CHECK(copy.identical(t));

  RareTensor written;
  written.mutableBytes();  // the first write creates the tensor
  CHECK(written.dtype() == DType::Undefined);
  RareTensor strings;
  strings = Tensor::ofStrings({2}, {"a", "b"});
  CHECK(strings.strings()[1] == "b");
}

TEST_CASE("rare members: Attribute stays small and copies every kind deeply") {
  STATIC_REQUIRE(sizeof(Attribute) <= 160);
  Attribute a = Attribute::ofStrings("names", {"x", "y"});
  a.floats = {0.5f};
  a.t = Tensor::fromValues<int64_t>(DType::Int64, {}, {7});
  a.tensors.push_back(Tensor::fromValues<float>(DType::Float, {1}, {3.f}));
  a.graphs.push_back(std::make_unique<Graph>("body"));
  Attribute b = a;
  CHECK(sameAttributeValue(a, b));
  b.strings[0] = "z";
  b.floats.push_back(1.f);
  b.t.mutableData<int64_t>()[0] = 8;
  b.tensors[0].mutableData<float>()[0] = 4.f;
  CHECK(a.strings.vec() == std::vector<std::string>{"x", "y"});
  CHECK(a.floats == std::vector<float>{0.5f});
  CHECK(a.t.valueAsInt64(0) == 7);
  CHECK(a.tensors[0].valueAsDouble(0) == 3.0);
  REQUIRE(b.graphs.size() == 1);
  CHECK(b.graphs[0] != a.graphs[0]);  // subgraphs are cloned, not shared
  CHECK(b.graphs[0]->name == "body");
  CHECK_FALSE(sameAttributeValue(a, b));

  Attribute plain = Attribute::ofInt("axis", 1);
  CHECK(plain.s.empty());
  CHECK(plain.floats.empty());
  CHECK(plain.strings.empty());
  CHECK(plain.tensors.empty());
  CHECK(plain.graphs.empty());
  CHECK(plain.t.dtype() == DType::Undefined);
}
