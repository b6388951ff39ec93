// libpasses' strided views of layout-op chains (src/layout_views.h), against a brute-force
// reference: the chain applied to a tensor of source offsets, element by element.
#include <catch2/catch.hpp>
#include <numeric>
#include <random>

#include "layout_views.h"

using fusectl::passes::LayoutStep;
using fusectl::passes::StridedLayout;

namespace {

// A tensor holding, for each of its elements, that element's offset in the source buffer.
struct OffsetTensor {
  std::vector<int64_t> sizes;
  std::vector<int64_t> offsets;

  static OffsetTensor iota(const std::vector<int64_t>& sizes) {
    OffsetTensor t{sizes, {}};
    t.offsets.resize(static_cast<size_t>(
        std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>())));
    std::iota(t.offsets.begin(), t.offsets.end(), 0);
    return t;
  }

  OffsetTensor transposed(const std::vector<int64_t>& perm) const {
    OffsetTensor out;
    for (int64_t p : perm) out.sizes.push_back(sizes[static_cast<size_t>(p)]);
    out.offsets.resize(offsets.size());
    const auto in_strides = StridedLayout::rowMajor(sizes).strides;
    std::vector<int64_t> index(out.sizes.size(), 0);
    for (size_t flat = 0; flat < offsets.size(); ++flat) {
      int64_t in_flat = 0;
      for (size_t d = 0; d < perm.size(); ++d)
        in_flat += index[d] * in_strides[static_cast<size_t>(perm[d])];
      out.offsets[flat] = offsets[static_cast<size_t>(in_flat)];
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < out.sizes[d]) break;
        index[d] = 0;
      }
    }
    return out;
  }
};

// Whether `layout` addresses every element of `t` at the offset `t` holds for it.
bool sameElements(const StridedLayout& layout, const OffsetTensor& t) {
  if (layout.sizes != t.sizes) return false;
  std::vector<int64_t> index(t.sizes.size(), 0);
  for (size_t flat = 0; flat < t.offsets.size(); ++flat) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * layout.strides[d];
    if (at != t.offsets[flat]) return false;
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t.sizes[d]) break;
      index[d] = 0;
    }
  }
  return true;
}

bool inOrder(const OffsetTensor& t) {
  for (size_t i = 0; i < t.offsets.size(); ++i)
    if (t.offsets[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

TEST_CASE("layout views: torch's sequence-first head split is a reshape", "[passes][layout]") {
  // [S, B, E] = [5, 2, 24]'s q third as [S, B*H, D], heads to the front, the batch of the
  // views, then MultiHeadAttention's [B, S, H*D] rows (B = 1, H = 4 folded heads).
  StridedLayout l = StridedLayout::rowMajor({5, 2, 8});
  const std::vector<LayoutStep> split = {{{}, {5, 4, 4}}, {{1, 0, 2}, {}}, {{}, {1, 4, 5, 4}},
                                         {{0, 2, 1, 3}, {}}, {{}, {1, 5, 16}}};
  auto out = fusectl::passes::applyLayoutSteps(l, split);
  REQUIRE(out);
  CHECK(out->isRowMajor());
  // Without the transpose back the rows are out of order, and [1, 4, 5, 4] as [1, 80] is no
  // view at all.
  auto half = fusectl::passes::applyLayoutSteps(l, {split[0], split[1], split[2]});
  REQUIRE(half);
  CHECK_FALSE(half->isRowMajor());
  CHECK_FALSE(half->reshaped({1, 80}));
  // A reshape within one chunk of a transposed layout is a view: [4, 6] of a [6, 4] buffer.
  auto split_dim = StridedLayout::rowMajor({6, 4}).transposed({1, 0}).reshaped({4, 2, 3});
  REQUIRE(split_dim);
  CHECK(split_dim->strides == std::vector<int64_t>{1, 12, 4});
  CHECK_FALSE(StridedLayout::rowMajor({2, 3}).reshaped({7}));  // another element count
}

TEST_CASE("layout views: random chains agree with moving the elements", "[passes][layout]") {
  std::mt19937 rng(20261205);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int views = 0, lost = 0, in_order = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int64_t> sizes(static_cast<size_t>(pick(1, 4)));
    for (int64_t& s : sizes) s = pick(1, 4);
    OffsetTensor t = OffsetTensor::iota(sizes);
    std::optional<StridedLayout> l = StridedLayout::rowMajor(sizes);
    for (int step = 0; step < 6 && l; ++step) {
      if (pick(0, 1) == 0) {
        std::vector<int64_t> perm(t.sizes.size());
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        t = t.transposed(perm);
        l = l->transposed(perm);
      } else {
        // A random factoring of the element count into 1 to 4 dims.
        int64_t left = static_cast<int64_t>(t.offsets.size());
        std::vector<int64_t> to;
        const int64_t rank = pick(1, 4);
        for (int64_t d = 0; d + 1 < rank; ++d) {
          std::vector<int64_t> divisors;
          for (int64_t k = 1; k <= left; ++k)
            if (left % k == 0) divisors.push_back(k);
          const int64_t k = divisors[static_cast<size_t>(pick(0, static_cast<int64_t>(divisors.size()) - 1))];
          to.push_back(k);
          left /= k;
        }
        to.push_back(left);
        t.sizes = to;
        l = l->reshaped(to);
        if (!l) ++lost;
      }
      if (l) {
        INFO("trial " << trial << " step " << step);
        REQUIRE(sameElements(*l, t));
        CHECK(l->isRowMajor() == inOrder(t));
        ++views;
        if (inOrder(t)) ++in_order;
      }
    }
  }
  // The walk reached both outcomes, and the views it kept were checked element by element.
  CHECK(views > 500);
  CHECK(lost > 20);
  CHECK(in_order > 50);
}
