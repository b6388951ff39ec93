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
// A panel's columns are a few runs of consecutive floats (one per output row it spans), copied
// per k; with AVX-512 each 16-column (or 8-row) group is one to a few masked loads and one store.
// The copy is about the size of the input, against im2col's k times the input.
#pragma once

#include <cstdint>
#include <vector>

#include "compute_common.h"
#include "gemm_micro.h"

namespace fusectl::kernels::cpu {

class ImplicitIm2col {
 public:
  // Whether the layout computes this window: 1-D or 2-D, more than one tap, planes no bigger
  // than a few times the input (a huge dilation over a tiny input would pad them out).
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
  int64_t H_ = 1, W_ = 1, OH_ = 1, OW_ = 1;
  int64_t SH_ = 1, SW_ = 1, PH_ = 0, PW_ = 0;
  int64_t Hp_ = 1, Wp_ = 1, plane_ = 1;  // padded phase plane
  int64_t phases_ = 1;                   // phases kept (only those some tap reads)
  std::vector<int64_t> phase_row_, phase_col_;  // remainders of each kept phase
  std::vector<int64_t> k_offset_;  // per GEMM row k: where plane(k)[0] + offset(k) is
};

}  // namespace fusectl::kernels::cpu
