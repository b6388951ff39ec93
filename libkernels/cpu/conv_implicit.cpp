// Convolution as a GEMM without an im2col matrix (see conv_implicit.h).
#include "conv_implicit.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "gemm_vector_epilogue.h"
#include "vec_kernels.h"

namespace fusectl::kernels::cpu {
namespace {

// The most runs (output rows) one 16-column group of a panel spans that the AVX-512 packer takes
// (an output row of 4 or more pixels); narrower rows go the scalar way.
constexpr int kMaxRunsPerGroup = 5;

// Columns [j0, j0 + n) of the GEMM as runs of one output row each: run r covers panel lanes
// [begin[r], end[r]) and reads plane floats lane + delta[r].
struct PanelRuns {
  int count = 0;
  int64_t begin[64], end[64], delta[64];
};

void panelRuns(int64_t pixel, int64_t n, const RowGeometry& g, PanelRuns& runs) {
  runs.count = 0;
  for (int64_t lane = 0; lane < n;) {
    const int64_t p = pixel + lane, row = p / g.OW, ow = p % g.OW;
    const int64_t len = std::min(g.OW - ow, n - lane);
    runs.begin[runs.count] = lane;
    runs.end[runs.count] = lane + len;
    runs.delta[runs.count] = g.rowStart(row) + ow - lane;
    ++runs.count;
    lane += len;
  }
}

void packPanelScalar(const float* planes, const int64_t* k_offset, int64_t kc,
                     const PanelRuns& runs, int64_t nr, int64_t NR, float* out) {
  for (int64_t k = 0; k < kc; ++k, out += NR) {
    const float* src = planes + k_offset[k];
    for (int r = 0; r < runs.count; ++r) {
      std::memcpy(out + runs.begin[r], src + runs.delta[r] + runs.begin[r],
                  (runs.end[r] - runs.begin[r]) * sizeof(float));
    }
    std::fill(out + nr, out + NR, 0.f);
  }
}

#ifdef FUSECTL_AVX512
// The masks and load offsets of one panel's lane groups (16 lanes, or 8 for an 8-wide panel), one
// per run a group overlaps; false when a group overlaps more runs than kMaxRunsPerGroup.
template <int kLanes>
struct GroupLoads {
  static constexpr int kMaxGroups = 64 / kLanes;
  int groups = 0;
  int count[kMaxGroups] = {};
  uint32_t mask[kMaxGroups][kMaxRunsPerGroup];
  int64_t shift[kMaxGroups][kMaxRunsPerGroup];  // plane offset of the load for the group's lane 0

  bool plan(const PanelRuns& runs, int64_t width) {
    groups = static_cast<int>(width / kLanes);
    const auto lanes = [](int64_t n) {
      return n <= 0 ? 0u : n >= kLanes ? (1u << kLanes) - 1 : (1u << n) - 1;
    };
    for (int r = 0; r < runs.count; ++r) {
      for (int64_t g = runs.begin[r] / kLanes; g < groups && g * kLanes < runs.end[r]; ++g) {
        if (count[g] == kMaxRunsPerGroup) return false;
        mask[g][count[g]] = lanes(runs.end[r] - g * kLanes) & ~lanes(runs.begin[r] - g * kLanes);
        shift[g][count[g]] = runs.delta[r] + g * kLanes;
        ++count[g];
      }
    }
    return true;
  }
};

// Addresses as integers: a masked-off lane may fall before or past the planes, and is never read.
inline const float* planeAt(const float* planes, int64_t offset) {
  return reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(planes) +
                                        static_cast<uintptr_t>(offset) * sizeof(float));
}

// Each lane group of the panel is merged from masked loads, one per run it overlaps (the lanes
// outside a run are masked off: nothing is read or faulted on there), then stored whole. Lanes no
// run covers (past the last column) stay zero. kLanes is 16 (zmm) or 8 (ymm, 8-wide panels).
// Returns false, packing nothing, where a group spans more than kMaxRunsPerGroup output rows.
template <int kLanes>
FUSECTL_AVX512 bool packGroupsAvx512(const float* planes, const int64_t* k_offset, int64_t kc,
                                     const PanelRuns& runs, int64_t width, float* out) {
  GroupLoads<kLanes> l;
  if (!l.plan(runs, width)) return false;
  for (int64_t k = 0; k < kc; ++k, out += width) {
    const int64_t base = k_offset[k];
    for (int g = 0; g < l.groups; ++g) {
      if constexpr (kLanes == 16) {
        __m512 v = _mm512_setzero_ps();
        for (int r = 0; r < l.count[g]; ++r) {
          v = _mm512_mask_loadu_ps(v, static_cast<__mmask16>(l.mask[g][r]),
                                   planeAt(planes, base + l.shift[g][r]));
        }
        _mm512_storeu_ps(out + g * 16, v);
      } else {
        __m256 v = _mm256_setzero_ps();
        for (int r = 0; r < l.count[g]; ++r) {
          v = _mm256_mask_loadu_ps(v, static_cast<__mmask8>(l.mask[g][r]),
                                   planeAt(planes, base + l.shift[g][r]));
        }
        _mm256_storeu_ps(out + g * 8, v);
      }
    }
  }
  return true;
}

// The widest lane groups a panel of `width` (up to 64) divides into; false where it is no
// multiple of 8.
FUSECTL_AVX512 bool packPanelAvx512(const float* planes, const int64_t* k_offset, int64_t kc,
                                    const PanelRuns& runs, int64_t width, float* out) {
  if (width > 64) return false;
  if (width % 16 == 0) return packGroupsAvx512<16>(planes, k_offset, kc, runs, width, out);
  if (width % 8 == 0) return packGroupsAvx512<8>(planes, k_offset, kc, runs, width, out);
  return false;
}
#endif

}  // namespace

bool ImplicitIm2col::applies(const Window& w) {
  const size_t r = w.rank();
  if (r < 1 || r > 3 || product(w.kernel) <= 1) return false;
  // A 3-D window with one tap in the plane (R(2+1)D's temporal k x 1 x 1) reads whole input
  // planes per tap, which the im2col matrix copies row by row as fast: R(2+1)D-18's four
  // 144 -> 64 ones at 8x28x28 took 3.1-3.7 ms that way against 3.4-5.4 ms from phase planes
  // (bench/README.md, "3-D convolutions from phase planes").
  if (r == 3 && w.kernel[1] * w.kernel[2] == 1) return false;
  double in = 1, planes = 1;  // in double: no overflow for however large a window
  for (size_t i = 0; i < r; ++i) {
    if (w.out[i] <= 0) return false;
    in *= static_cast<double>(w.in[i]);
    const int64_t phases = std::min(w.strides[i], w.kernel[i]);
    planes *= static_cast<double>(phases) *
              (static_cast<double>(w.out[i]) +
               static_cast<double>(w.kernel[i] - 1) * static_cast<double>(w.dilations[i]) /
                   static_cast<double>(w.strides[i]));
  }
  return planes <= 4 * in + 4096;
}

ImplicitIm2col::ImplicitIm2col(const Window& w, int64_t channels) : channels_(channels) {
  // Axis 0 is depth, 1 height, 2 width; a 1-D or 2-D window has the leading ones of size 1.
  const size_t lead = 3 - w.rank();
  const auto dim = [lead](const std::vector<int64_t>& v, size_t axis, int64_t one) {
    return axis < lead ? one : v[axis - lead];
  };
  int64_t K[3], Dil[3];
  for (size_t a = 0; a < 3; ++a) {
    in_[a] = dim(w.in, a, 1);
    out_[a] = dim(w.out, a, 1);
    stride_[a] = dim(w.strides, a, 1);
    pad_[a] = dim(w.pad_begin, a, 0);
    K[a] = dim(w.kernel, a, 1);
    Dil[a] = dim(w.dilations, a, 1);
    padded_[a] = out_[a] + (K[a] - 1) * Dil[a] / stride_[a];
  }
  rows_ = {out_[2], out_[1], padded_[2], padded_[1]};
  plane_ = padded_[0] * padded_[1] * padded_[2];
  // Per tap: its phase (the phases some tap reads, in order of first use) and where in that
  // phase's plane it starts.
  const int64_t taps = K[0] * K[1] * K[2];
  std::vector<int64_t> phase_of_tap(static_cast<size_t>(taps)), tap_offset(phase_of_tap.size());
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t kk[3] = {t / (K[1] * K[2]), t / K[2] % K[1], t % K[2]};
    std::array<int64_t, 3> phase;
    for (size_t a = 0; a < 3; ++a) phase[a] = kk[a] * Dil[a] % stride_[a];
    const auto known = std::find(phase_.begin(), phase_.end(), phase);
    phase_of_tap[t] = known - phase_.begin();
    if (known == phase_.end()) phase_.push_back(phase);
    tap_offset[t] =
        (kk[0] * Dil[0] / stride_[0] * padded_[1] + kk[1] * Dil[1] / stride_[1]) * padded_[2] +
        kk[2] * Dil[2] / stride_[2];
  }
  phases_ = static_cast<int64_t>(phase_.size());
  k_offset_.resize(static_cast<size_t>(channels_ * taps));
  for (int64_t c = 0; c < channels_; ++c)
    for (int64_t t = 0; t < taps; ++t)
      k_offset_[c * taps + t] = (c * phases_ + phase_of_tap[t]) * plane_ + tap_offset[t];
}

void ImplicitIm2col::buildPlanes(const float* x, float* planes, int64_t c0, int64_t c1) const {
  const int64_t D = in_[0], H = in_[1], W = in_[2];
  const int64_t Dp = padded_[0], Hp = padded_[1], Wp = padded_[2];
  const int64_t SD = stride_[0], SH = stride_[1], SW = stride_[2];
  for (int64_t c = c0; c < c1; ++c) {
    const float* in = x + c * D * H * W;
    for (int64_t u = 0; u < phases_; ++u) {
      float* plane = planes + (c * phases_ + u) * plane_;
      const auto [a, b, e] = phase_[static_cast<size_t>(u)];
      // Plane column j reads input column j*SW + e - PW: inside the input for j in [lo, hi).
      const int64_t first = e - pad_[2];
      int64_t lo = first >= 0 ? 0 : (-first + SW - 1) / SW;
      int64_t hi = W - first > 0 ? (W - first + SW - 1) / SW : 0;
      lo = std::min(lo, Wp);
      hi = std::max(std::min(hi, Wp), lo);
      for (int64_t s = 0; s < Dp; ++s) {
        float* slab = plane + s * Hp * Wp;
        const int64_t id = s * SD + a - pad_[0];
        if (id < 0 || id >= D) {
          std::fill(slab, slab + Hp * Wp, 0.f);
          continue;
        }
        for (int64_t i = 0; i < Hp; ++i) {
          float* row = slab + i * Wp;
          const int64_t ih = i * SH + b - pad_[1];
          if (ih < 0 || ih >= H) {
            std::fill(row, row + Wp, 0.f);
            continue;
          }
          const float* src = in + (id * H + ih) * W + first;
          std::fill(row, row + lo, 0.f);
          if (SW == 1) {
            std::memcpy(row + lo, src + lo, (hi - lo) * sizeof(float));
          } else {
            vec::gatherStrided(src + lo * SW, SW, row + lo, hi - lo);
          }
          std::fill(row + hi, row + Wp, 0.f);
        }
      }
    }
  }
}

void ImplicitIm2col::Source::packPanels(int64_t pc, int64_t kc, int64_t j0, int64_t n,
                                        int64_t width, float* out) const {
  const ImplicitIm2col& l = layout_;
  const int64_t* k_offset = l.k_offset_.data() + pc;
#ifdef FUSECTL_AVX512
  // With the AVX-512 GEMM kernel (only chosen or forced on a CPU that has it), so that tests
  // forcing another kernel run the scalar packer.
  const bool vector = std::string_view(gemmKernelName()) == "avx512";
#endif
  PanelRuns runs;
  for (int64_t p0 = 0; p0 < n; p0 += width, out += width * kc) {
    const int64_t lanes = std::min(width, n - p0);
    if (width <= 64) {
      panelRuns(first_pixel_ + j0 + p0, lanes, l.rows_, runs);
#ifdef FUSECTL_AVX512
      if (vector && packPanelAvx512(planes_, k_offset, kc, runs, width, out)) continue;
#endif
      packPanelScalar(planes_, k_offset, kc, runs, lanes, width, out);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {  // panels wider than 64 (no kernel has them)
      const float* src = planes_ + k_offset[k];
      for (int64_t j = 0; j < lanes; ++j) {
        const int64_t p = first_pixel_ + j0 + p0 + j;
        out[k * width + j] = src[l.rows_.rowStart(p / l.rows_.OW) + p % l.rows_.OW];
      }
      std::fill(out + k * width + lanes, out + (k + 1) * width, 0.f);
    }
  }
}

}  // namespace fusectl::kernels::cpu
