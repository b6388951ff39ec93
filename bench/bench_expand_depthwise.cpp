// Whether fusing an inverted-residual block's 1x1 expansion into the depthwise convolution after
// it would pay on this CPU: the pair run as the executor runs it today (two nodes, whole planes,
// the expanded tensor written out and read back), against the pair interleaved band by band
// (the expansion computes the input rows one band of depthwise output rows needs, and the
// depthwise convolution consumes them while they are still in L2), which is what a fused op's
// kernel would do. The same library kernels run in every variant; only the schedule differs.
//
//   bench_expand_depthwise [--repeat R] [--bands 4,8,14] [--sets S] [--warm-input]
//
// Variants, per block shape of MobileNetV2 (Clip(0, 6)) and EfficientNet-B0 (Silu):
//   whole            channels-by-pixels GEMM over the whole plane, then depthwisePlaneAvx512 per
//                    channel plane (the executor's path today for planes over 28x28; at 28x28 it
//                    keeps the expanded tensor channels-last, like nhwc-whole)
//   bands            per band: the GEMM over the band's input rows (halo rows recomputed) into a
//                    band-sized buffer that stays in L2, then the depthwise rows of the band
//   bands-in-place   per band: the GEMM over the rows not computed yet, into the whole
//                    expanded tensor, then the band's depthwise rows (no recomputation, but every
//                    expanded line is still written back to memory eventually)
//   nhwc-whole       pixels-by-channels GEMM writing the expanded tensor channels-last, then
//                    depthwiseChannelsLast over all rows
//   nhwc-bands       the same per band, into the whole channels-last tensor
// S input/output sets (default 3) are used in turn so that a run does not find the previous
// run's tensors in cache, as a node in a model does not (24 sets: every buffer cold, as in
// alternated runs on a busy host). --warm-input reads the set's input before each run, as a
// node finds the input the node before it has just written. Buffers are backed by huge pages as
// the executor's pool is in the fusectl CLI, which restarts itself with glibc's
// malloc.hugetlb=1 (fusectl/support/huge_page_malloc.h; a program that uses the library without
// that gets 4 KiB pages): with 4 KiB pages the whole-plane pair of the 112x112 block measured
// 0.78 ms here against 0.44 with huge pages (TLB misses on the 4.8 MB expanded tensor).
//
// Every variant is checked against a double-precision reference first (exit 1 on a mismatch).
// One JSON line per block, variant and band height: the median of R runs (default 30) taken in
// rounds that run every variant once in turn, so that all see the same machine; no assertions
// on time.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "conv_depthwise.h"
#include "conv_window.h"
#include "gemm_micro.h"

namespace {

using fusectl::Activation;
using namespace fusectl::kernels;
using namespace fusectl::kernels::cpu;

// Floats in 2 MiB-aligned memory advised to huge pages, zeroed (so the pages exist before timing).
struct HugeFloats {
  float* data = nullptr;
  size_t count = 0;
  explicit HugeFloats(size_t n) : count(n) {
    const size_t huge = size_t{2} << 20;
    const size_t bytes = (n * sizeof(float) + huge - 1) / huge * huge;
    data = static_cast<float*>(std::aligned_alloc(huge, bytes));
    if (!data) std::abort();
    madvise(data, bytes, MADV_HUGEPAGE);
    std::memset(data, 0, bytes);
  }
  HugeFloats(const HugeFloats&) = delete;
  HugeFloats& operator=(const HugeFloats&) = delete;
  HugeFloats(HugeFloats&& o) noexcept : data(o.data), count(o.count) { o.data = nullptr; }
  ~HugeFloats() { std::free(data); }
};

struct Block {
  const char* model;
  int64_t in_channels, expanded, size, stride, kernel;
  Activation act;
};

// MobileNetV2's and EfficientNet-B0's expansion -> depthwise pairs on planes of 28x28 and up
// (the expanded tensor of a smaller plane fits in L2 whole, so bands have nothing to keep there;
// at 28x28 it is 0.6-0.75 MB, about the L2's size).
const Block kBlocks[] = {
    {"mobilenet_v2", 16, 96, 112, 2, 3, Activation::Clip},
    {"mobilenet_v2", 24, 144, 56, 1, 3, Activation::Clip},
    {"mobilenet_v2", 24, 144, 56, 2, 3, Activation::Clip},
    {"mobilenet_v2", 32, 192, 28, 1, 3, Activation::Clip},
    {"efficientnet_b0", 16, 96, 112, 2, 3, Activation::Silu},
    {"efficientnet_b0", 24, 144, 56, 1, 3, Activation::Silu},
    {"efficientnet_b0", 24, 144, 56, 2, 5, Activation::Silu},
    {"efficientnet_b0", 40, 240, 28, 1, 5, Activation::Silu},
};

double activate(Activation act, double v) {
  return act == Activation::Silu ? v / (1 + std::exp(-v)) : std::min(6.0, std::max(0.0, v));
}

class Pair {
 public:
  Pair(const Block& b, int sets) : b_(b) {
    H_ = W_ = b.size;
    P_ = H_ * W_;
    pad_ = b.kernel / 2;
    win_ = fusectl::bench::halfKernelPaddedWindow(H_, W_, b.kernel, b.stride);
    OH_ = win_.out[0];
    OW_ = win_.out[1];
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto fill = [&](std::vector<float>& v, size_t n) {
      v.resize(n);
      for (float& x : v) x = u(gen);
    };
    fill(w1_, b.expanded * b.in_channels);
    fill(b1_, b.expanded);
    fill(w2_, b.expanded * b.kernel * b.kernel);
    fill(b2_, b.expanded);
    for (int s = 0; s < sets; ++s) {
      xs_.emplace_back(b.in_channels * P_);
      for (size_t i = 0; i < xs_.back().count; ++i) xs_.back().data[i] = u(gen);
      ys_.emplace_back(b.expanded * OH_ * OW_);
      mids_.emplace_back(b.expanded * P_);
    }
    packed_rows_ = packGemmA(b.expanded, b.in_channels, w1_.data(), b.in_channels, 1);
    packed_cols_ = packGemmB(b.in_channels, b.expanded, w1_.data(), 1, b.in_channels);
    expand_.bias = b1_.data();
    expand_.activation = b.act;
    expand_.alpha = 0.f;
    expand_.beta = 6.f;
    expand_rows_ = expand_;
    expand_rows_.bias_per_row = true;
    depthwise_ = expand_;
    depthwise_.bias = b2_.data();
  }

  int64_t outRows() const { return OH_; }

  void whole(int s) {
    expandPlanar(s, 0, H_, mids_[s].data, P_);
    for (int64_t c = 0; c < b_.expanded; ++c) {
      const NextPlane next{c + 1 < b_.expanded ? mids_[s].data + (c + 1) * P_ : nullptr,
                           c + 1 < b_.expanded ? P_ * 4 : 0};
      depthwisePlaneAvx512(mids_[s].data + c * P_, w2_.data() + c * taps(), ys_[s].data + c * OH_ * OW_,
                           win_, depthwise_, c, nullptr, next);
    }
  }

  void bands(int s, int64_t band, float* buffer) {
    for (int64_t o0 = 0; o0 < OH_; o0 += band) {
      const int64_t o1 = std::min(OH_, o0 + band);
      const int64_t i0 = firstInputRow(o0), i1 = endInputRow(o1);
      const int64_t n = (i1 - i0) * W_;
      expandPlanar(s, i0, i1, buffer, n);
      depthwiseBand(buffer, n, o0, o1, i0, i1, s);
    }
  }

  void bandsInPlace(int s, int64_t band) {
    int64_t done = 0;
    for (int64_t o0 = 0; o0 < OH_; o0 += band) {
      const int64_t o1 = std::min(OH_, o0 + band);
      const int64_t i0 = firstInputRow(o0), i1 = endInputRow(o1);
      if (i1 > done) {
        expandPlanar(s, done, i1, mids_[s].data + done * W_, P_);
        done = i1;
      }
      depthwiseBand(mids_[s].data + i0 * W_, P_, o0, o1, i0, i1, s);
    }
  }

  void nhwc(int s, int64_t band) {
    int64_t done = 0;
    for (int64_t o0 = 0; o0 < OH_; o0 += band) {
      const int64_t o1 = std::min(OH_, o0 + band);
      const int64_t i1 = endInputRow(o1);
      if (i1 > done) {
        expandChannelsLast(s, done, i1);
        done = i1;
      }
      depthwiseChannelsLast(mids_[s].data, true, w2_.data(), ys_[s].data, false, win_, depthwise_,
                            b_.expanded, nullptr, o0, o1);
    }
  }

  // Largest error of output set `s` against a double-precision reference, relative to 1 + |ref|.
  double error(int s) const {
    std::vector<double> mid(b_.expanded * P_);
    for (int64_t c = 0; c < b_.expanded; ++c) {
      for (int64_t p = 0; p < P_; ++p) {
        double a = b1_[c];
        for (int64_t k = 0; k < b_.in_channels; ++k) {
          a += double(w1_[c * b_.in_channels + k]) * xs_[s].data[k * P_ + p];
        }
        mid[c * P_ + p] = activate(b_.act, a);
      }
    }
    double worst = 0;
    for (int64_t c = 0; c < b_.expanded; ++c) {
      for (int64_t oy = 0; oy < OH_; ++oy) {
        for (int64_t ox = 0; ox < OW_; ++ox) {
          double a = b2_[c];
          for (int64_t ky = 0; ky < b_.kernel; ++ky) {
            for (int64_t kx = 0; kx < b_.kernel; ++kx) {
              const int64_t iy = oy * b_.stride - pad_ + ky, ix = ox * b_.stride - pad_ + kx;
              if (iy < 0 || iy >= H_ || ix < 0 || ix >= W_) continue;
              a += double(w2_[c * taps() + ky * b_.kernel + kx]) * mid[c * P_ + iy * W_ + ix];
            }
          }
          const double ref = activate(b_.act, a);
          const double got = ys_[s].data[(c * OH_ + oy) * OW_ + ox];
          worst = std::max(worst, std::abs(got - ref) / (1 + std::abs(ref)));
        }
      }
    }
    return worst;
  }

  // Reads set s's input, so that it is in cache as a node's input just written by the node
  // before it is.
  void touchInput(int s) {
    volatile float sink = 0.f;
    float sum = 0.f;
    for (size_t i = 0; i < xs_[s].count; i += 16) sum += xs_[s].data[i];
    sink = sum;
    (void)sink;
  }

  void clearOutput(int s) { std::memset(ys_[s].data, 0, ys_[s].count * sizeof(float)); }

  size_t bandFloats(int64_t band) const {
    return b_.expanded * ((band - 1) * b_.stride + b_.kernel) * W_;
  }

 private:
  int64_t taps() const { return b_.kernel * b_.kernel; }
  int64_t firstInputRow(int64_t o0) const { return std::max<int64_t>(0, o0 * b_.stride - pad_); }
  int64_t endInputRow(int64_t o1) const {
    return std::min(H_, (o1 - 1) * b_.stride - pad_ + b_.kernel);
  }

  // Expanded rows [r0, r1) of set s into `out`, planes `ld` floats apart.
  void expandPlanar(int s, int64_t r0, int64_t r1, float* out, int64_t ld) {
    GemmParams p = gemmParams(b_.expanded, (r1 - r0) * W_, b_.in_channels, nullptr, b_.in_channels,
                              false, xs_[s].data + r0 * W_, P_, false, out, ld);
    p.packed_a = &packed_rows_;
    p.epilogue = &expand_rows_;
    gemm(p, 1);
  }

  void expandChannelsLast(int s, int64_t r0, int64_t r1) {
    GemmParams p = gemmParams((r1 - r0) * W_, b_.expanded, b_.in_channels, nullptr, 0, false,
                              w1_.data(), 0, false, mids_[s].data + r0 * W_ * b_.expanded,
                              b_.expanded);
    p.A = xs_[s].data + r0 * W_;
    p.a_rs = 1;
    p.a_cs = P_;
    p.b_rs = 1;
    p.b_cs = b_.in_channels;
    p.packed_b = &packed_cols_;
    p.epilogue = &expand_;
    gemm(p, 1);
  }

  // Depthwise output rows [o0, o1) from the expanded input rows [i0, i1), whose planes start at
  // `rows` and lie `ld` floats apart: each band is a plane of its own to depthwisePlaneAvx512,
  // with the image's padding only where the band touches the image's top or bottom.
  void depthwiseBand(const float* rows, int64_t ld, int64_t o0, int64_t o1, int64_t i0, int64_t i1,
                     int s) {
    Window band = win_;
    band.in = {i1 - i0, W_};
    band.pad_begin = {o0 * b_.stride - pad_ < 0 ? pad_ : 0, pad_};
    band.pad_end = {i1 == H_ ? std::max<int64_t>(0, (o1 - 1) * b_.stride - pad_ + b_.kernel - H_) : 0,
                    pad_};
    band.out = {o1 - o0, OW_};
    for (int64_t c = 0; c < b_.expanded; ++c) {
      depthwisePlaneAvx512(rows + c * ld, w2_.data() + c * taps(),
                           ys_[s].data + c * OH_ * OW_ + o0 * OW_, band, depthwise_, c, nullptr);
    }
  }

  Block b_;
  int64_t H_, W_, P_, pad_, OH_, OW_;
  std::vector<float> w1_, b1_, w2_, b2_;
  std::vector<HugeFloats> xs_, ys_, mids_;
  PackedMatrix packed_rows_, packed_cols_;
  Epilogue expand_, expand_rows_, depthwise_;
  Window win_;
};

std::vector<int64_t> parseList(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    out.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
    else if (*p) break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 30, sets = 3;
  bool warm_input = false;
  std::vector<int64_t> band_heights = {4, 8, 14};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sets" && i + 1 < argc) sets = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warm-input") warm_input = true;
    else if (a == "--bands" && i + 1 < argc) band_heights = parseList(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_expand_depthwise [--repeat R] [--bands 4,8,14] [--sets S] [--warm-input]\n");
      return 2;
    }
  }
  if (!__builtin_cpu_supports("avx512f") || std::string(gemmKernelName()) != "avx512") {
    std::fprintf(stderr, "bench_expand_depthwise: needs the AVX-512 kernels (this CPU has none)\n");
    return 0;
  }
  for (const Block& block : kBlocks) {
    Pair pair(block, sets);
    const int64_t widest = *std::max_element(band_heights.begin(), band_heights.end());
    HugeFloats band_buffer(pair.bandFloats(std::max<int64_t>(widest, 1)));
    struct Variant {
      std::string name;
      int64_t band;
      std::function<void(int)> run;
    };
    std::vector<Variant> variants;
    variants.push_back({"whole", 0, [&](int s) { pair.whole(s); }});
    variants.push_back({"nhwc-whole", 0, [&](int s) { pair.nhwc(s, pair.outRows()); }});
    for (int64_t h : band_heights) {
      if (h < 1) continue;
      variants.push_back({"bands", h, [&, h](int s) { pair.bands(s, h, band_buffer.data); }});
      variants.push_back({"bands-in-place", h, [&, h](int s) { pair.bandsInPlace(s, h); }});
      variants.push_back({"nhwc-bands", h, [&, h](int s) { pair.nhwc(s, h); }});
    }
    for (const Variant& v : variants) {
      pair.clearOutput(0);
      v.run(0);
      const double err = pair.error(0);
      if (!(err < 1e-4)) {
        std::fprintf(stderr, "bench_expand_depthwise: %s %lld->%lld@%lld: %s (band %lld) is off the "
                     "reference by %g\n", block.model, (long long)block.in_channels,
                     (long long)block.expanded, (long long)block.size, v.name.c_str(),
                     (long long)v.band, err);
        return 1;
      }
    }
    std::vector<std::vector<double>> seconds(variants.size());
    for (int r = 0; r < repeat + 2; ++r) {
      for (size_t v = 0; v < variants.size(); ++v) {
        const int s = static_cast<int>((r * variants.size() + v) % sets);
        if (warm_input) pair.touchInput(s);
        const double start = fusectl::bench::now();
        variants[v].run(s);
        const double t = fusectl::bench::now() - start;
        if (r >= 2) seconds[v].push_back(t);  // two rounds of warm-up
      }
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      std::printf("{\"bench\":\"expand_depthwise\",\"model\":\"%s\",\"in\":%lld,\"expanded\":%lld,"
                  "\"size\":%lld,\"stride\":%lld,\"kernel\":%lld,\"variant\":\"%s\",\"band\":%lld,"
                  "\"ms\":%.3f}\n",
                  block.model, (long long)block.in_channels, (long long)block.expanded,
                  (long long)block.size, (long long)block.stride, (long long)block.kernel,
                  variants[v].name.c_str(), (long long)variants[v].band,
                  fusectl::bench::median(seconds[v]) * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}
