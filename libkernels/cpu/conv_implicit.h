// Convolution as a GEMM without an im2col matrix (implicit im2col).
//
// The im2col GEMM writes a [C*k x P] matrix (k taps: 9x the input for a 3x3 window), reads it
// back to pack the GEMM's B panels, and at stride 2 gathers every other input column to build
// it. Here the input is copied once into phase planes instead, and the GEMM packs its B panels
// straight from them (GemmBSource):
// - A stride-s window reads padded input row oh*s + kh*d for output row oh. Splitting the padded
//   input into s x s phases (rows and columns by their remainder mod s) makes that row
//   oh + (kh*d)/s of phase (kh*d) mod s: consecutive output pixels of a row read consecutive
//   floats of one phase plane, at any stride and dilation.
// - Each plane is zero-padded to Hp x Wp = (OH + (KH-1)*DH/SH) x (OW + (KW-1)*DW/SW), so a tap
//   never needs a bounds check: B(k, pixel oh*OW + ow) = plane(k)[oh*Wp + ow + offset(k)], with
//   one plane and offset per k (channel, tap) in a table.
// - A 3-D window splits depth the same way: a phase plane is Dp slabs of Hp x Wp, and output
//   pixel (od, oh, ow) reads plane(k)[(od*Hp + oh)*Wp + ow + offset(k)]. (A video model's 3x3x3
//   convolutions otherwise built a 27x im2col matrix chunk by chunk.)
// A panel's columns are a few runs of consecutive floats (one per output row it spans), copied
// per k; with AVX-512 each 16-column (or 8-row) group is one to a few masked loads and one store.
// The copy is about the size of the input, against im2col's k times the input.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "compute_common.h"
#include "gemm_micro.h"

namespace fusectl::kernels::cpu {

// Where output row `row` (the pixels of one (depth, height) pair, OW of them) starts in a phase
// plane of Hp x Wp slabs: consecutive pixels of one row read consecutive plane floats.
struct RowGeometry {
  int64_t OW = 1, OH = 1, Wp = 1, Hp = 1;
  int64_t rowStart(int64_t row) const { return (row / OH * Hp + row % OH) * Wp; }
};

class ImplicitIm2col {
 public:
  // Whether the layout computes this window: 1-D, 2-D or 3-D, more than one tap, planes no
  // bigger than a few times the input (a huge dilation over a tiny input would pad them out).
  static bool applies(const Window& w);

  ImplicitIm2col(const Window& w, int64_t channels);

  // Floats of one image's (and group's) planes.
  int64_t planeFloats() const { return channels_ * phases_ * plane_; }
  // Copies input channels [c0, c1) of the `channels` starting at x (H x W each) into their
  // zero-padded phase planes (planes: those of all `channels`).
  void buildPlanes(const float* x, float* planes, int64_t c0, int64_t c1) const;

  // The im2col matrix (K = channels * taps by output pixels) over planes built by buildPlanes,
  // as the GEMM's B operand (pixels as columns) or, transposed, its A (pixels as rows); GEMM
  // column (or row) j is output pixel first_pixel + j.
  class Source : public GemmPanelSource {
   public:
    Source(const ImplicitIm2col& layout, const float* planes, int64_t first_pixel)
        : layout_(layout), planes_(planes), first_pixel_(first_pixel) {}
    void packPanels(int64_t pc, int64_t kc, int64_t j0, int64_t n, int64_t width,
                    float* out) const override;

   private:
    const ImplicitIm2col& layout_;
    const float* planes_;
    int64_t first_pixel_;
  };

 private:
  int64_t channels_ = 0;
  // Per axis (0 depth, 1 height, 2 width; a 1-D or 2-D window's leading axes have size 1):
  int64_t in_[3] = {1, 1, 1}, out_[3] = {1, 1, 1}, stride_[3] = {1, 1, 1}, pad_[3] = {0, 0, 0};
  int64_t padded_[3] = {1, 1, 1};  // a phase plane's dims
  int64_t plane_ = 1;              // floats of one phase plane
  RowGeometry rows_;
  int64_t phases_ = 1;                             // phases kept (only those some tap reads)
  std::vector<std::array<int64_t, 3>> phase_;      // remainders of each kept phase, per axis
  std::vector<int64_t> k_offset_;  // per GEMM row k: where plane(k)[0] + offset(k) is
};

}  // namespace fusectl::kernels::cpu
