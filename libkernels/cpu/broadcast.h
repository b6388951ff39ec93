// Multidirectional broadcasting and strided copies for the elementwise and data-movement kernels.
//
// Broadcasting: the operands' dims are aligned to the output's rank, size-1 output dims are
// dropped and neighbouring dims are merged when every operand either broadcasts both or reads
// both contiguously. What is left is walked one innermost row at a time; inside a row each
// operand's stride is 0 (broadcast) or 1, so the row loops below are plain vectorizable loops.
// Same-shape operands collapse to a single row, a scalar operand to a stride-0 row.
//
// Strided copies (Expand, Tile, Slice, Transpose, DepthToSpace...) describe the source as a view
// (dims + element strides) and copy it into contiguous storage: merged dims, memcpy rows when
// the innermost source stride is 1, a fill when it is 0, and cache-blocked tiles when the source
// is contiguous along some other dim (a transposition).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels::kutil {

// Output dims of ONNX multidirectional broadcasting of `shapes`; fails naming the node (and
// every shape) when they are incompatible.
std::vector<int64_t> broadcastDims(const KernelContext& ctx,
                                   const std::vector<const std::vector<int64_t>*>& shapes);

template <size_t N>
struct BroadcastPlan {
  std::vector<int64_t> dims;                  // merged output dims, never empty
  std::array<std::vector<int64_t>, N> strides;  // per operand, element stride per merged dim
  int64_t numel = 0;
};

template <size_t N>
BroadcastPlan<N> planBroadcast(const std::vector<int64_t>& out,
                               const std::array<const std::vector<int64_t>*, N>& ins) {
  BroadcastPlan<N> plan;
  plan.numel = 1;
  for (int64_t d : out) plan.numel *= d;
  const size_t rank = out.size();
  // Merged dims with, per operand, whether it broadcasts along them.
  std::vector<std::array<bool, N>> flags;
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    std::array<bool, N> f{};
    for (size_t k = 0; k < N; ++k) {
      const std::vector<int64_t>& in = *ins[k];
      const size_t lead = rank - in.size();
      f[k] = i < lead || in[i - lead] == 1;
    }
    if (!flags.empty() && flags.back() == f) {
      plan.dims.back() *= out[i];
    } else {
      flags.push_back(f);
      plan.dims.push_back(out[i]);
    }
  }
  if (plan.dims.empty()) {
    plan.dims.push_back(1);
    flags.push_back(std::array<bool, N>{});
    for (size_t k = 0; k < N; ++k) flags[0][k] = true;
  }
  const size_t nd = plan.dims.size();
  for (size_t k = 0; k < N; ++k) {
    plan.strides[k].assign(nd, 0);
    int64_t s = 1;
    for (size_t d = nd; d-- > 0;) {
      if (!flags[d][k]) {
        plan.strides[k][d] = s;
        s *= plan.dims[d];
      }
    }
  }
  return plan;
}

// Calls row(out_offset, in_offsets, length, inner_strides) for each innermost row in
// [row_begin, row_end) (all rows by default).
template <size_t N, typename Row>
void forEachRow(const BroadcastPlan<N>& p, Row&& row, int64_t row_begin = 0,
                int64_t row_end = -1) {
  if (p.numel == 0) return;
  const size_t nd = p.dims.size();
  const int64_t inner = p.dims[nd - 1];
  if (row_end < 0) row_end = p.numel / inner;
  std::array<int64_t, N> st{};
  for (size_t k = 0; k < N; ++k) st[k] = p.strides[k][nd - 1];
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> off{};
  for (int64_t r = row_begin, d = static_cast<int64_t>(nd) - 1; d-- > 0;) {
    idx[static_cast<size_t>(d)] = r % p.dims[static_cast<size_t>(d)];
    r /= p.dims[static_cast<size_t>(d)];
    for (size_t k = 0; k < N; ++k)
      off[k] += idx[static_cast<size_t>(d)] * p.strides[k][static_cast<size_t>(d)];
  }
  int64_t out_off = row_begin * inner;
  for (int64_t r = row_begin; r < row_end; ++r, out_off += inner) {
    row(out_off, off, inner, st);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < p.dims[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += p.strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= p.strides[k][d] * (p.dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// Elements per thread below which a kernel stays single-threaded.
constexpr int64_t kParallelGrain = 1 << 16;

// Like forEachRow, split across up to `threads` threads; a single long row is cut into pieces.
template <size_t N, typename Row>
void parallelRows(const BroadcastPlan<N>& p, int threads, Row&& row) {
  if (p.numel == 0) return;
  const int64_t inner = p.dims.back();
  const int64_t rows = p.numel / inner;
  if (rows == 1) {
    std::array<int64_t, N> st{};
    for (size_t k = 0; k < N; ++k) st[k] = p.strides[k].back();
    cpu::parallelFor(inner, threads, kParallelGrain, [&](int64_t b, int64_t e) {
      std::array<int64_t, N> off{};
      for (size_t k = 0; k < N; ++k) off[k] = b * st[k];
      row(b, off, e - b, st);
    });
    return;
  }
  cpu::parallelFor(rows, threads, std::max<int64_t>(1, kParallelGrain / inner),
                   [&](int64_t b, int64_t e) { forEachRow<N>(p, row, b, e); });
}

// out[i] = f(a[i], b[i]) over a broadcast plan.
template <typename A, typename B, typename O, typename F>
void applyBinary(const BroadcastPlan<2>& p, const A* a, const B* b, O* o, F&& f,
                 int threads = 1) {
  parallelRows<2>(p, threads, [&](int64_t oo, const std::array<int64_t, 2>& off, int64_t n,
                                  const std::array<int64_t, 2>& st) {
    const A* pa = a + off[0];
    const B* pb = b + off[1];
    O* po = o + oo;
    if (st[0] && st[1]) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (st[0]) {
      const B bv = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], bv);
    } else if (st[1]) {
      const A av = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(av, pb[i]);
    } else {
      std::fill(po, po + n, static_cast<O>(f(*pa, *pb)));
    }
  });
}

// Walks every index of `dims` except those in `skip`, calling fn(src_offset, dst_offset) with
// offsets advanced by the given strides.
template <typename Fn>
void forEachOuter(const std::vector<int64_t>& dims, const std::vector<int64_t>& sstr,
                  const std::vector<int64_t>& dstr, const std::vector<bool>& skip, Fn&& fn) {
  std::vector<size_t> ds;
  for (size_t d = 0; d < dims.size(); ++d)
    if (!skip[d]) ds.push_back(d);
  std::vector<int64_t> idx(ds.size(), 0);
  int64_t so = 0, dof = 0;
  for (;;) {
    fn(so, dof);
    size_t k = ds.size();
    for (; k-- > 0;) {
      const size_t d = ds[k];
      if (++idx[k] < dims[d]) {
        so += sstr[d];
        dof += dstr[d];
        break;
      }
      so -= sstr[d] * (dims[d] - 1);
      dof -= dstr[d] * (dims[d] - 1);
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

// dst[j * dj + l] = src[j + l * sl] for j < m, l < n, elements of 4 bytes, in 16 x 16 register
// tiles (transpose_x86.cpp); false, having done nothing, without AVX-512 or below 16 x 16.
bool transpose4ByteTiles(const void* src, int64_t m, int64_t n, int64_t sl, void* dst, int64_t dj);

// Copies the view (dims, element strides) starting at `src` into contiguous `dst`.
template <typename U>
void stridedCopy(std::vector<int64_t> dims, std::vector<int64_t> strides, const U* src, U* dst) {
  // Drop size-1 dims, merge dims that are contiguous with each other in the source.
  std::vector<int64_t> md, ms;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) return;
    if (dims[i] == 1) continue;
    if (!md.empty() && ms.back() == strides[i] * dims[i]) {
      md.back() *= dims[i];
      ms.back() = strides[i];
    } else {
      md.push_back(dims[i]);
      ms.push_back(strides[i]);
    }
  }
  if (md.empty()) {
    dst[0] = src[0];
    return;
  }
  const size_t nd = md.size();
  std::vector<int64_t> ds(nd);  // contiguous destination strides
  for (size_t d = nd, s = 1; d-- > 0;) {
    ds[d] = static_cast<int64_t>(s);
    s *= static_cast<size_t>(md[d]);
  }
  const int64_t n = md[nd - 1];
  const int64_t sl = ms[nd - 1];
  // A transposition: the source is contiguous along dim j, the destination along the last dim.
  size_t j = nd;
  for (size_t d = 0; d + 1 < nd; ++d)
    if (ms[d] == 1) j = d;
  if (sl != 1 && sl != 0 && j < nd) {
    std::vector<bool> skip(nd, false);
    skip[j] = skip[nd - 1] = true;
    const int64_t m = md[j];
    const int64_t dj = ds[j];
    constexpr int64_t kBlock = 32;
    forEachOuter(md, ms, ds, skip, [&](int64_t so, int64_t dof) {
      const U* s = src + so;
      U* o = dst + dof;
      if constexpr (sizeof(U) == 4) {
        if (transpose4ByteTiles(s, m, n, sl, o, dj)) return;
      }
      for (int64_t jb = 0; jb < m; jb += kBlock) {
        const int64_t je = std::min(m, jb + kBlock);
        for (int64_t lb = 0; lb < n; lb += kBlock) {
          const int64_t le = std::min(n, lb + kBlock);
          for (int64_t jj = jb; jj < je; ++jj) {
            const U* sr = s + jj;
            U* orow = o + jj * dj;
            for (int64_t l = lb; l < le; ++l) orow[l] = sr[l * sl];
          }
        }
      }
    });
    return;
  }
  std::vector<bool> skip(nd, false);
  skip[nd - 1] = true;
  forEachOuter(md, ms, ds, skip, [&](int64_t so, int64_t dof) {
    const U* s = src + so;
    U* o = dst + dof;
    if (sl == 1)
      std::memcpy(o, s, static_cast<size_t>(n) * sizeof(U));
    else if (sl == 0)
      std::fill(o, o + n, *s);
    else
      for (int64_t l = 0; l < n; ++l) o[l] = s[l * sl];
  });
}

// Row-major element strides of `dims`.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& dims);

// stridedCopy on raw bytes of any fixed-size dtype.
void stridedCopyBytes(const KernelContext& ctx, DType dtype, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& strides, const void* src, void* dst);

}  // namespace fusectl::kernels::kutil
