// Data-movement, shape and creation CPU kernels against direct references and ONNX spec examples.
#include <cstring>
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <numeric>

#include "fusectl/graph/error.h"
#include "kernel_case.h"

using namespace fusectl;
using namespace fusectl::testing;

namespace {

HostTensor iota(std::vector<int64_t> dims, float start = 0) {
  HostTensor t(DType::Float, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutableData<float>()[i] = start + static_cast<float>(i);
  return t;
}

std::vector<float> range(float a, float b) {
  std::vector<float> v;
  for (float x = a; x < b; x += 1) v.push_back(x);
  return v;
}

}  // namespace

TEST_CASE("Reshape: 0 copies a dim, -1 is inferred, allowzero keeps 0; no copy",
          "[kernels][tensor]") {
  const HostTensor x = iota({2, 3, 4});
  auto out = KernelCase("Reshape", 13).input(x).input(int64s({3}, {0, -1, 2})).run();
  CHECK(out[0].dims() == std::vector<int64_t>{2, 6, 2});
  CHECK(out[0].raw() == x.raw());
  auto v1 = KernelCase("Reshape", 1).attrInts("shape", {4, -1}).input(x).run();
  CHECK(v1[0].dims() == std::vector<int64_t>{4, 6});
  const HostTensor empty = iota({0, 3});
  auto az = KernelCase("Reshape", 14)
                .attrInt("allowzero", 1)
                .input(empty)
                .input(int64s({2}, {3, 0}))
                .run();
  CHECK(az[0].dims() == std::vector<int64_t>{3, 0});
  CHECK_THROWS_AS(KernelCase("Reshape", 13).input(x).input(int64s({2}, {5, -1})).run(), Error);
}

TEST_CASE("Flatten, Squeeze, Unsqueeze across opsets alias the input", "[kernels][tensor]") {
  const HostTensor x = iota({2, 1, 3, 1});
  auto f = KernelCase("Flatten", 13).attrInt("axis", -2).input(x).run();
  CHECK(f[0].dims() == std::vector<int64_t>{2, 3});
  CHECK(f[0].raw() == x.raw());
  CHECK(KernelCase("Flatten", 13).input(x).run()[0].dims() == std::vector<int64_t>{2, 3});
  CHECK(KernelCase("Flatten", 13).attrInt("axis", 0).input(x).run()[0].dims() ==
        std::vector<int64_t>{1, 6});

  auto s11 = KernelCase("Squeeze", 11).attrInts("axes", {-1}).input(x).run();
  CHECK(s11[0].dims() == std::vector<int64_t>{2, 1, 3});
  auto s13 = KernelCase("Squeeze", 13).input(x).input(int64s({1}, {1})).run();
  CHECK(s13[0].dims() == std::vector<int64_t>{2, 3, 1});
  CHECK(s13[0].raw() == x.raw());
  CHECK(KernelCase("Squeeze", 13).input(x).run()[0].dims() == std::vector<int64_t>{2, 3});
  CHECK_THROWS_AS(KernelCase("Squeeze", 13).input(x).input(int64s({1}, {0})).run(), Error);

  auto u11 = KernelCase("Unsqueeze", 11).attrInts("axes", {0, -1}).input(iota({2, 3})).run();
  CHECK(u11[0].dims() == std::vector<int64_t>{1, 2, 3, 1});
  auto u13 = KernelCase("Unsqueeze", 13).input(iota({2, 3})).input(int64s({2}, {1, 3})).run();
  CHECK(u13[0].dims() == std::vector<int64_t>{2, 1, 3, 1});
}

TEST_CASE("Transpose matches a direct reference for every 4-D permutation", "[kernels][tensor]") {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  const HostTensor x = iota(dims);
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do {
    auto out = KernelCase("Transpose", 13).attrInts("perm", perm).input(x).run();
    std::vector<int64_t> od(4);
    for (size_t i = 0; i < 4; ++i) od[i] = dims[static_cast<size_t>(perm[i])];
    REQUIRE(out[0].dims() == od);
    std::vector<int64_t> idx(4);
    for (int64_t o = 0; o < out[0].numel(); ++o) {
      int64_t rem = o;
      for (size_t d = 4; d-- > 0;) {
        idx[static_cast<size_t>(perm[d])] = rem % od[d];
        rem /= od[d];
      }
      const int64_t src = ((idx[0] * 3 + idx[1]) * 4 + idx[2]) * 5 + idx[3];
      REQUIRE(out[0].data<float>()[o] == static_cast<float>(src));
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST_CASE("Transpose of a large 2-D matrix (blocked path) and default perm", "[kernels][tensor]") {
  const HostTensor x = iota({70, 45});
  auto out = KernelCase("Transpose", 13).input(x).run();  // default: reversed dims
  REQUIRE(out[0].dims() == std::vector<int64_t>{45, 70});
  for (int64_t i = 0; i < 45; ++i)
    for (int64_t j = 0; j < 70; ++j)
      REQUIRE(out[0].data<float>()[i * 70 + j] == x.data<float>()[j * 45 + i]);
  auto i64 = KernelCase("Transpose", 13).input(int64s({2, 2}, {1, 2, 3, 4})).run();
  CHECK(valuesOf<int64_t>(i64[0]) == std::vector<int64_t>{1, 3, 2, 4});
}

// stridedCopy's transpositions of 4-byte elements run in 16 x 16 register tiles where the CPU
// has AVX-512 (transpose_x86.cpp): partial tiles at both edges, outer dims walked around them,
// and the bits of an int32 tensor (and of float NaN payloads) moved unchanged.
TEST_CASE("Transpose in 16 x 16 tiles keeps every element, edges and outer dims included",
          "[kernels][tensor]") {
  const auto check = [](const HostTensor& x, const std::vector<int64_t>& perm) {
    const std::vector<int64_t>& dims = x.dims();
    const size_t rank = dims.size();
    auto out = KernelCase("Transpose", 13).attrInts("perm", perm).input(x).run();
    std::vector<int64_t> od(rank), in_strides(rank, 1), idx(rank);
    for (size_t i = 0; i < rank; ++i) od[i] = dims[static_cast<size_t>(perm[i])];
    for (size_t d = rank - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * dims[d + 1];
    REQUIRE(out[0].dims() == od);
    const auto* got = static_cast<const uint32_t*>(out[0].raw());
    const auto* want = static_cast<const uint32_t*>(x.raw());
    for (int64_t o = 0; o < out[0].numel(); ++o) {
      int64_t rem = o, src = 0;
      for (size_t d = rank; d-- > 0;) {
        src += (rem % od[d]) * in_strides[static_cast<size_t>(perm[d])];
        rem /= od[d];
      }
      REQUIRE(got[o] == want[src]);
    }
  };
  check(iota({1, 37, 50}), {0, 2, 1});
  check(iota({3, 16, 33}), {0, 2, 1});
  check(iota({2, 33, 5, 20}), {0, 2, 3, 1});
  check(iota({2, 20, 17, 3}), {0, 3, 1, 2});
  std::vector<int32_t> ints(48 * 35);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(i * 2654435761u);
  check(tensorOf<int32_t>(DType::Int32, {48, 35}, ints), {1, 0});
  HostTensor nans = iota({40, 24});
  uint32_t payload = 0x7fc00001u;
  std::memcpy(nans.mutableData<float>() + 17, &payload, sizeof payload);
  check(nans, {1, 0});
}

TEST_CASE("Concat along an axis", "[kernels][tensor]") {
  auto out = KernelCase("Concat", 13)
                 .attrInt("axis", 1)
                 .input(iota({2, 2}))
                 .input(iota({2, 1}, 10))
                 .input(iota({2, 0}))
                 .run();
  CHECK(out[0].dims() == std::vector<int64_t>{2, 3});
  CHECK(valuesOf<float>(out[0]) == std::vector<float>{0, 1, 10, 2, 3, 11});
  auto neg =
      KernelCase("Concat", 13).attrInt("axis", -2).input(iota({1, 2})).input(iota({1, 2}, 5)).run();
  CHECK(valuesOf<float>(neg[0]) == std::vector<float>{0, 1, 5, 6});
  CHECK_THROWS_AS(
      KernelCase("Concat", 13).attrInt("axis", 0).input(iota({1, 2})).input(iota({1, 3})).run(),
      Error);
}

TEST_CASE("Split: attribute (11), input (13), num_outputs with an uneven tail (18)",
          "[kernels][tensor]") {
  const HostTensor x = iota({2, 5});
  auto v11 = KernelCase("Split", 11, 2).attrInt("axis", 1).attrInts("split", {2, 3}).input(x).run();
  CHECK(valuesOf<float>(v11[0]) == std::vector<float>{0, 1, 5, 6});
  CHECK(valuesOf<float>(v11[1]) == std::vector<float>{2, 3, 4, 7, 8, 9});
  auto v13 =
      KernelCase("Split", 13, 2).attrInt("axis", 1).input(x).input(int64s({2}, {4, 1})).run();
  CHECK(valuesOf<float>(v13[1]) == std::vector<float>{4, 9});
  auto eq = KernelCase("Split", 13, 2).input(x).run();
  CHECK(valuesOf<float>(eq[1]) == range(5, 10));
  auto v18 =
      KernelCase("Split", 18, 3).attrInt("axis", -1).attrInt("num_outputs", 3).input(x).run();
  CHECK(v18[0].dims() == std::vector<int64_t>{2, 2});
  CHECK(v18[2].dims() == std::vector<int64_t>{2, 1});
  CHECK(valuesOf<float>(v18[2]) == std::vector<float>{4, 9});
  CHECK_THROWS_AS(KernelCase("Split", 13, 2).attrInt("axis", 1).input(x).run(), Error);  // 5 / 2
}

TEST_CASE("Slice: opset-1 attributes, steps, negative steps, clamping", "[kernels][tensor]") {
  const HostTensor x = iota({3, 4});
  auto v1 =
      KernelCase("Slice", 1).attrInts("starts", {1, 0}).attrInts("ends", {2, 3}).input(x).run();
  CHECK(valuesOf<float>(v1[0]) == std::vector<float>{4, 5, 6});
  const int64_t big = std::numeric_limits<int64_t>::max();
  auto all = KernelCase("Slice", 13)
                 .input(x)
                 .input(int64s({1}, {1}))
                 .input(int64s({1}, {big}))
                 .input(int64s({1}, {1}))
                 .run();
  CHECK(valuesOf<float>(all[0]) == std::vector<float>{1, 2, 3, 5, 6, 7, 9, 10, 11});
  auto rev = KernelCase("Slice", 13)
                 .input(x)
                 .input(int64s({2}, {-1, -1}))
                 .input(int64s({2}, {std::numeric_limits<int64_t>::min(), -big}))
                 .input(int64s({2}, {0, 1}))
                 .input(int64s({2}, {-2, -1}))
                 .run();
  CHECK(rev[0].dims() == std::vector<int64_t>{2, 4});
  CHECK(valuesOf<float>(rev[0]) == std::vector<float>{11, 10, 9, 8, 3, 2, 1, 0});
  auto step = KernelCase("Slice", 13)
                  .input(x)
                  .input(int64s({1}, {0}))
                  .input(int64s({1}, {100}))
                  .input(int64s({1}, {-1}))
                  .input(int64s({1}, {3}))
                  .run();
  CHECK(valuesOf<float>(step[0]) == std::vector<float>{0, 3, 4, 7, 8, 11});
  auto none =
      KernelCase("Slice", 13).input(x).input(int64s({1}, {3})).input(int64s({1}, {1})).run();
  CHECK(none[0].dims() == std::vector<int64_t>{0, 4});
  auto i32 = KernelCase("Slice", 13)
                 .input(x)
                 .input(tensorOf<int32_t>(DType::Int32, {1}, {1}))
                 .input(tensorOf<int32_t>(DType::Int32, {1}, {2}))
                 .run();
  CHECK(valuesOf<float>(i32[0]) == std::vector<float>{4, 5, 6, 7});
}

TEST_CASE("Gather with negative indices and GatherElements", "[kernels][tensor]") {
  const HostTensor x = iota({3, 4});
  auto g0 = KernelCase("Gather", 13).input(x).input(int64s({2}, {-1, 0})).run();
  CHECK(g0[0].dims() == std::vector<int64_t>{2, 4});
  CHECK(valuesOf<float>(g0[0]) == std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3});
  auto g1 =
      KernelCase("Gather", 13).attrInt("axis", 1).input(x).input(int64s({2, 1}, {3, 1})).run();
  CHECK(g1[0].dims() == std::vector<int64_t>{3, 2, 1});
  CHECK(valuesOf<float>(g1[0]) == std::vector<float>{3, 1, 7, 5, 11, 9});
  auto sc = KernelCase("Gather", 13).input(x).input(int64s({}, {1})).run();
  CHECK(sc[0].dims() == std::vector<int64_t>{4});
  CHECK_THROWS_AS(KernelCase("Gather", 13).input(x).input(int64s({1}, {3})).run(), Error);
  // ONNX spec examples.
  auto ge = KernelCase("GatherElements", 13)
                .attrInt("axis", 1)
                .input(floats({2, 2}, {1, 2, 3, 4}))
                .input(int64s({2, 2}, {0, 0, 1, 0}))
                .run();
  CHECK(valuesOf<float>(ge[0]) == std::vector<float>{1, 1, 4, 3});
  auto ge0 = KernelCase("GatherElements", 13)
                 .input(floats({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))
                 .input(int64s({2, 3}, {1, 2, 0, 2, 0, -3}))
                 .run();
  CHECK(valuesOf<float>(ge0[0]) == std::vector<float>{4, 8, 3, 7, 2, 3});
}

TEST_CASE("Expand and Tile", "[kernels][tensor]") {
  auto e =
      KernelCase("Expand", 13).input(floats({3, 1}, {1, 2, 3})).input(int64s({3}, {2, 1, 2})).run();
  CHECK(e[0].dims() == std::vector<int64_t>{2, 3, 2});
  CHECK(valuesOf<float>(e[0]) == std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  auto e2 = KernelCase("Expand", 13).input(floats({3, 1}, {1, 2, 3})).input(int64s({1}, {1})).run();
  CHECK(e2[0].dims() == std::vector<int64_t>{3, 1});
  auto t =
      KernelCase("Tile", 13).input(floats({2, 2}, {0, 1, 2, 3})).input(int64s({2}, {2, 3})).run();
  CHECK(t[0].dims() == std::vector<int64_t>{4, 6});
  CHECK(valuesOf<float>(t[0]) == std::vector<float>{0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3,
                                                    0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3});
  auto t1 = KernelCase("Tile", 1)
                .input(floats({2, 2}, {0, 1, 2, 3}))
                .input(int64s({}, {2}))
                .input(int64s({}, {1}))
                .run();
  CHECK(valuesOf<float>(t1[0]) == std::vector<float>{0, 1, 0, 1, 2, 3, 2, 3});
}

TEST_CASE("Pad: attributes at 2, inputs at 11, every mode", "[kernels][tensor]") {
  const HostTensor x = floats({3, 2}, {1, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  // ONNX spec constant example: pads [0, 2, 0, 0] with 0.
  auto v2 =
      KernelCase("Pad", 2).attrInts("pads", {0, 2, 0, 0}).attrFloat("value", 0).input(x).run();
  CHECK(v2[0].dims() == std::vector<int64_t>{3, 4});
  CHECK(valuesOf<float>(v2[0]) ==
        std::vector<float>{0, 0, 1, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f});
  auto v11 =
      KernelCase("Pad", 11).input(x).input(int64s({4}, {0, 2, 0, 0})).input(floats({}, {-1})).run();
  CHECK(valuesOf<float>(v11[0])[0] == -1);
  auto reflect = KernelCase("Pad", 11)
                     .attrString("mode", "reflect")
                     .input(x)
                     .input(int64s({4}, {0, 2, 0, 0}))
                     .run();
  CHECK(valuesOf<float>(reflect[0]) ==
        std::vector<float>{1, 1.2f, 1, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f});
  auto edge = KernelCase("Pad", 11)
                  .attrString("mode", "edge")
                  .input(x)
                  .input(int64s({4}, {0, 2, 0, 0}))
                  .run();
  CHECK(valuesOf<float>(edge[0]) ==
        std::vector<float>{1, 1, 1, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f});
  auto wrap = KernelCase("Pad", 19)
                  .attrString("mode", "wrap")
                  .input(iota({3}))
                  .input(int64s({2}, {2, 2}))
                  .run();
  CHECK(valuesOf<float>(wrap[0]) == std::vector<float>{1, 2, 0, 1, 2, 0, 1});
  auto refl1d = KernelCase("Pad", 11)
                    .attrString("mode", "reflect")
                    .input(iota({4}))
                    .input(int64s({2}, {2, 3}))
                    .run();
  CHECK(valuesOf<float>(refl1d[0]) == std::vector<float>{2, 1, 0, 1, 2, 3, 2, 1, 0});
  auto crop = KernelCase("Pad", 11).input(iota({2, 3})).input(int64s({4}, {1, -1, 0, 0})).run();
  CHECK(crop[0].dims() == std::vector<int64_t>{3, 2});
  CHECK(valuesOf<float>(crop[0]) == std::vector<float>{0, 0, 1, 2, 4, 5});
  auto axes = KernelCase("Pad", 18)
                  .input(iota({2, 2}))
                  .input(int64s({2}, {1, 0}))
                  .omitted()
                  .input(int64s({1}, {-1}))
                  .run();
  CHECK(valuesOf<float>(axes[0]) == std::vector<float>{0, 0, 1, 0, 2, 3});
  auto i64 = KernelCase("Pad", 13)
                 .input(int64s({2}, {5, 6}))
                 .input(int64s({2}, {1, 1}))
                 .input(int64s({}, {9}))
                 .run();
  CHECK(valuesOf<int64_t>(i64[0]) == std::vector<int64_t>{9, 5, 6, 9});
}

TEST_CASE("Shape (start/end), Size, ConstantOfShape, Constant, Range", "[kernels][tensor]") {
  const HostTensor x = iota({2, 3, 4});
  CHECK(valuesOf<int64_t>(KernelCase("Shape", 13).input(x).run()[0]) ==
        std::vector<int64_t>{2, 3, 4});
  CHECK(valuesOf<int64_t>(KernelCase("Shape", 15).attrInt("start", -2).input(x).run()[0]) ==
        std::vector<int64_t>{3, 4});
  CHECK(valuesOf<int64_t>(
            KernelCase("Shape", 15).attrInt("start", 1).attrInt("end", -1).input(x).run()[0]) ==
        std::vector<int64_t>{3});
  CHECK(KernelCase("Shape", 15).attrInt("start", 5).input(x).run()[0].numel() == 0);
  auto size = KernelCase("Size", 13).input(x).run();
  CHECK(size[0].rank() == 0);
  CHECK(valuesOf<int64_t>(size[0]) == std::vector<int64_t>{24});

  auto cos0 = KernelCase("ConstantOfShape", 9).input(int64s({2}, {2, 2})).run();
  CHECK(cos0[0].dtype() == DType::Float);
  CHECK(valuesOf<float>(cos0[0]) == std::vector<float>(4, 0));
  auto cosv =
      KernelCase("ConstantOfShape", 9)
          .attr(Attribute::ofTensor("value", Tensor::fromValues<int32_t>(DType::Int32, {1}, {7})))
          .input(int64s({1}, {3}))
          .run();
  CHECK(valuesOf<int32_t>(cosv[0]) == std::vector<int32_t>{7, 7, 7});

  auto c = KernelCase("Constant", 13).attrInts("value_ints", {4, 5}).run();
  CHECK(valuesOf<int64_t>(c[0]) == std::vector<int64_t>{4, 5});
  auto cf = KernelCase("Constant", 13).attrFloat("value_float", 2.5f).run();
  CHECK(cf[0].rank() == 0);
  CHECK(valuesOf<float>(cf[0]) == std::vector<float>{2.5f});
  auto ct =
      KernelCase("Constant", 13)
          .attr(Attribute::ofTensor("value", Tensor::fromValues<float>(DType::Float, {2}, {1, 2})))
          .run();
  CHECK(valuesOf<float>(ct[0]) == std::vector<float>{1, 2});

  auto r = KernelCase("Range", 11)
               .input(floats({}, {3}))
               .input(floats({}, {9}))
               .input(floats({}, {3}))
               .run();
  CHECK(valuesOf<float>(r[0]) == std::vector<float>{3, 6});
  auto ri = KernelCase("Range", 11)
                .input(int64s({}, {10}))
                .input(int64s({}, {4}))
                .input(int64s({}, {-3}))
                .run();
  CHECK(valuesOf<int64_t>(ri[0]) == std::vector<int64_t>{10, 7});
  auto re = KernelCase("Range", 11)
                .input(int64s({}, {1}))
                .input(int64s({}, {1}))
                .input(int64s({}, {1}))
                .run();
  CHECK(re[0].numel() == 0);
}

TEST_CASE("DepthToSpace (DCR, CRD) and SpaceToDepth follow the ONNX examples",
          "[kernels][tensor]") {
  // x[0, c, h, w] = c*9 + h*3 + w for an [1, 8, 2, 3] input, as in the ONNX operator docs.
  HostTensor x(DType::Float, {1, 8, 2, 3});
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t i = 0; i < 6; ++i)
      x.mutableData<float>()[c * 6 + i] = static_cast<float>(c * 9 + (i / 3) * 3 + i % 3);
  auto dcr = KernelCase("DepthToSpace", 13).attrInt("blocksize", 2).input(x).run();
  CHECK(dcr[0].dims() == std::vector<int64_t>{1, 2, 4, 6});
  CHECK(valuesOf<float>(dcr[0]) ==
        std::vector<float>{0, 18, 1, 19, 2, 20, 36, 54, 37, 55, 38, 56, 3, 21, 4, 22, 5, 23,
                           39, 57, 40, 58, 41, 59, 9, 27, 10, 28, 11, 29, 45, 63, 46, 64, 47, 65,
                           12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68});
  auto crd = KernelCase("DepthToSpace", 13)
                 .attrInt("blocksize", 2)
                 .attrString("mode", "CRD")
                 .input(x)
                 .run();
  CHECK(valuesOf<float>(crd[0]) ==
        std::vector<float>{0, 9, 1, 10, 2, 11, 18, 27, 19, 28, 20, 29, 3, 12, 4, 13, 5, 14,
                           21, 30, 22, 31, 23, 32, 36, 45, 37, 46, 38, 47, 54, 63, 55, 64, 56, 65,
                           39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68});
  // SpaceToDepth inverts DCR DepthToSpace.
  auto back = KernelCase("SpaceToDepth", 13).attrInt("blocksize", 2).input(dcr[0]).run();
  CHECK(back[0].dims() == x.dims());
  CHECK(valuesOf<float>(back[0]) == valuesOf<float>(x));
}

TEST_CASE("Trilu upper/lower with k", "[kernels][tensor]") {
  const HostTensor x = iota({2, 3, 3}, 1);
  auto up = KernelCase("Trilu", 14).input(x).run();
  CHECK(valuesOf<float>(up[0]) ==
        std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9, 10, 11, 12, 0, 14, 15, 0, 0, 18});
  auto lo = KernelCase("Trilu", 14)
                .attrInt("upper", 0)
                .input(iota({3, 3}, 1))
                .input(int64s({}, {-1}))
                .run();
  CHECK(valuesOf<float>(lo[0]) == std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0});
  auto upk = KernelCase("Trilu", 14).input(iota({2, 4}, 1)).input(int64s({}, {2})).run();
  CHECK(valuesOf<float>(upk[0]) == std::vector<float>{0, 0, 3, 4, 0, 0, 0, 8});
}

TEST_CASE("Einsum: matmul, transpose, trace, diagonal, batch ellipsis, implicit output",
          "[kernels][tensor]") {
  const HostTensor a = iota({2, 3}), b = iota({3, 4}, 1);
  auto mm = KernelCase("Einsum", 12).attrString("equation", "ij,jk->ik").input(a).input(b).run();
  REQUIRE(mm[0].dims() == std::vector<int64_t>{2, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 4; ++k) {
      float s = 0;
      for (int64_t j = 0; j < 3; ++j) s += a.data<float>()[i * 3 + j] * b.data<float>()[j * 4 + k];
      REQUIRE(mm[0].data<float>()[i * 4 + k] == s);
    }
  auto implicit = KernelCase("Einsum", 12).attrString("equation", "ij,jk").input(a).input(b).run();
  CHECK(valuesOf<float>(implicit[0]) == valuesOf<float>(mm[0]));
  auto tr = KernelCase("Einsum", 12).attrString("equation", "ij->ji").input(a).run();
  CHECK(valuesOf<float>(tr[0]) == std::vector<float>{0, 3, 1, 4, 2, 5});
  const HostTensor sq = iota({3, 3});
  CHECK(valuesOf<float>(KernelCase("Einsum", 12).attrString("equation", "ii").input(sq).run()[0]) ==
        std::vector<float>{12});
  CHECK(valuesOf<float>(
            KernelCase("Einsum", 12).attrString("equation", "ii->i").input(sq).run()[0]) ==
        std::vector<float>{0, 4, 8});
  auto sum = KernelCase("Einsum", 12).attrString("equation", "ij->").input(a).run();
  CHECK(sum[0].rank() == 0);
  CHECK(valuesOf<float>(sum[0]) == std::vector<float>{15});
  // Batched matmul with a broadcast ellipsis: [2,1,2,3] x [3,3,2] -> [2,3,2,2].
  const HostTensor x = iota({2, 1, 2, 3}), y = iota({3, 3, 2});
  auto bm =
      KernelCase("Einsum", 12).attrString("equation", "...ij,...jk->...ik").input(x).input(y).run();
  REQUIRE(bm[0].dims() == std::vector<int64_t>{2, 3, 2, 2});
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t k = 0; k < 2; ++k) {
          float s = 0;
          for (int64_t j = 0; j < 3; ++j)
            s += x.data<float>()[p * 6 + i * 3 + j] * y.data<float>()[q * 6 + j * 2 + k];
          REQUIRE(bm[0].data<float>()[((p * 3 + q) * 2 + i) * 2 + k] == s);
        }
  CHECK_THROWS_AS(
      KernelCase("Einsum", 12).attrString("equation", "ij,jk->ik").input(a).input(a).run(), Error);
  // A summed letter of size 1 in one operand broadcasts against the other's (numpy.einsum,
  // ONNX's reference, and ONNX Runtime): S[i, j] = q[i] * sum_d k[j, d]. Through the GEMM path
  // (float32) and the direct one (double).
  for (DType t : {DType::Float, DType::Double}) {
    INFO(dtypeName(t));
    const HostTensor q = iota({1, 1, 2, 1}, 1), k = iota({1, 1, 3, 4}, 2);
    auto qt = KernelCase("Cast", 13).attrInt("to", static_cast<int64_t>(t)).input(q).run();
    auto kt = KernelCase("Cast", 13).attrInt("to", static_cast<int64_t>(t)).input(k).run();
    auto s = KernelCase("Einsum", 12)
                 .attrString("equation", "bhid,bhjd->bhij")
                 .input(qt[0])
                 .input(kt[0])
                 .run();
    REQUIRE(s[0].dims() == std::vector<int64_t>{1, 1, 2, 3});
    auto back = KernelCase("Cast", 13).attrInt("to", 1).input(s[0]).run();
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        float sum = 0;
        for (int64_t d = 0; d < 4; ++d) sum += k.data<float>()[j * 4 + d];
        CHECK(back[0].data<float>()[i * 3 + j] == q.data<float>()[i] * sum);
      }
  }
  // Within one operand (a diagonal) the two sizes must still agree.
  CHECK_THROWS_AS(
      KernelCase("Einsum", 12).attrString("equation", "ii->i").input(iota({1, 3})).run(), Error);
}

// The GEMM path of Einsum (two float32 operands, one contracted label, the output's last two
// labels one from each operand) against sums in double over the operands' own indexing.
TEST_CASE("Einsum: batched matrix products run as GEMMs agree with double sums",
          "[kernels][tensor]") {
  uint32_t state = 7;
  auto random = [&](std::vector<int64_t> dims) {
    HostTensor t(DType::Float, std::move(dims));
    for (int64_t i = 0; i < t.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.mutableData<float>()[i] = static_cast<float>(state >> 8) / 16777216.f * 2.f - 1.f;
    }
    return t;
  };
  // MaxViT's q k^T: [B, G, H, I, D] x [B, G, H, J, D] -> [B, G, H, I, J].
  {
    const HostTensor q = random({1, 3, 2, 5, 7}), k = random({1, 3, 2, 6, 7});
    auto y = KernelCase("Einsum", 12)
                 .attrString("equation", "B G H I D, B G H J D -> B G H I J")
                 .input(q).input(k).run();
    REQUIRE(y[0].dims() == std::vector<int64_t>{1, 3, 2, 5, 6});
    for (int64_t g = 0; g < 6; ++g)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          double s = 0;
          for (int64_t d = 0; d < 7; ++d)
            s += double(q.data<float>()[(g * 5 + i) * 7 + d]) * k.data<float>()[(g * 6 + j) * 7 + d];
          REQUIRE(y[0].data<float>()[(g * 5 + i) * 6 + j] == Approx(s).margin(1e-5));
        }
  }
  // A transposed first operand, a batch label in a different place in each operand.
  {
    const HostTensor a = random({4, 3, 2}), b = random({3, 4, 5});  // a[j][b][i], b[b][j][k]
    auto y = KernelCase("Einsum", 12).attrString("equation", "jbi,bjk->bik").input(a).input(b).run();
    REQUIRE(y[0].dims() == std::vector<int64_t>{3, 2, 5});
    for (int64_t bb = 0; bb < 3; ++bb)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t kk = 0; kk < 5; ++kk) {
          double s = 0;
          for (int64_t j = 0; j < 4; ++j)
            s += double(a.data<float>()[(j * 3 + bb) * 2 + i]) * b.data<float>()[(bb * 4 + j) * 5 + kk];
          REQUIRE(y[0].data<float>()[(bb * 2 + i) * 5 + kk] == Approx(s).margin(1e-5));
        }
  }
  // A batch label that only the first operand has (the second is shared by every batch index).
  {
    const HostTensor a = random({3, 4, 6}), b = random({6, 2});
    auto y = KernelCase("Einsum", 12).attrString("equation", "bij,jk->bik").input(a).input(b).run();
    REQUIRE(y[0].dims() == std::vector<int64_t>{3, 4, 2});
    for (int64_t bb = 0; bb < 3; ++bb)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t kk = 0; kk < 2; ++kk) {
          double s = 0;
          for (int64_t j = 0; j < 6; ++j)
            s += double(a.data<float>()[(bb * 4 + i) * 6 + j]) * b.data<float>()[j * 2 + kk];
          REQUIRE(y[0].data<float>()[(bb * 4 + i) * 2 + kk] == Approx(s).margin(1e-5));
        }
  }
}
