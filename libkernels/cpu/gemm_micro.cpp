// Packed, cache-blocked float GEMM driver (see gemm_micro.h); the ISA tile kernels are in
// gemm_kernels_x86.cpp, the portable one is here.
#include "gemm_micro.h"
#include "gemm_kernels.h"
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace fusectl::kernels::cpu {
namespace {

// ---- portable kernel: 6 x 16, GCC/Clang vector extensions ----

constexpr int64_t kMrPortable = 6;
constexpr int64_t kNrPortable = 16;

typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 16 columns as two 6x8 halves, so that 12 accumulators, 2 B vectors and 1 broadcast fit in
// 16 SSE registers; the tile goes through a small buffer and the scalar epilogue.
void tilePortable(const TileArgs& t) {
  alignas(64) float tile[kMrPortable * kNrPortable];
  for (int half = 0; half < 2; ++half) {
    const float* bp = t.b + half * 8;
    v4f c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {};
    v4f c30 = {}, c31 = {}, c40 = {}, c41 = {}, c50 = {}, c51 = {};
    const float* ap = t.a;
    for (int64_t k = 0; k < t.kc; ++k) {
      const v4f b0 = load4(bp);
      const v4f b1 = load4(bp + 4);
      v4f av;
      av = v4f{} + ap[0]; c00 += av * b0; c01 += av * b1;
      av = v4f{} + ap[1]; c10 += av * b0; c11 += av * b1;
      av = v4f{} + ap[2]; c20 += av * b0; c21 += av * b1;
      av = v4f{} + ap[3]; c30 += av * b0; c31 += av * b1;
      av = v4f{} + ap[4]; c40 += av * b0; c41 += av * b1;
      av = v4f{} + ap[5]; c50 += av * b0; c51 += av * b1;
      ap += kMrPortable;
      bp += t.b_stride;
    }
    const v4f acc[kMrPortable][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                     {c30, c31}, {c40, c41}, {c50, c51}};
    for (int64_t i = 0; i < kMrPortable; ++i) {
      std::memcpy(tile + i * kNrPortable + half * 8, &acc[i][0], sizeof(v4f));
      std::memcpy(tile + i * kNrPortable + half * 8 + 4, &acc[i][1], sizeof(v4f));
    }
  }
  for (int i = 0; i < t.rows; ++i) {
    float* dst = t.c + i * t.ldc;
    const float* src = tile + i * kNrPortable;
    if (t.load_c) {
      for (int j = 0; j < t.cols; ++j) dst[j] = dst[j] + src[j];
    } else {
      for (int j = 0; j < t.cols; ++j) dst[j] = src[j];
    }
  }
  if (t.ep) t.ep->full->apply(t.c, t.ldc, t.ep->row0, t.ep->col0, t.rows, t.cols);
}

const GemmKernelSpec kPortableSpec = {"portable", kMrPortable, kNrPortable, 256, 144, 4096,
                                      tilePortable, false};

// ---- kernel choice ----

std::atomic<const GemmKernelSpec*> g_forced{nullptr};

const GemmKernelSpec& bestKernel() {
  static const GemmKernelSpec* best = [] {
    if (const GemmKernelSpec* s = avx512KernelSpec()) return s;
    if (const GemmKernelSpec* s = avx2KernelSpec()) return s;
    return &kPortableSpec;
  }();
  return *best;
}

const GemmKernelSpec& currentKernel() {
  const GemmKernelSpec* forced = g_forced.load(std::memory_order_relaxed);
  return forced ? *forced : bestKernel();
}

// ---- packing ----

int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// c[j] = (r[0][j], r[1][j], r[2][j], r[3][j]): a 4x4 transpose by unpacks and moves.
inline void transpose4x4(const v4f* r, v4f* c) {
  const v4f t0 = __builtin_shufflevector(r[0], r[1], 0, 4, 1, 5);
  const v4f t1 = __builtin_shufflevector(r[2], r[3], 0, 4, 1, 5);
  const v4f t2 = __builtin_shufflevector(r[0], r[1], 2, 6, 3, 7);
  const v4f t3 = __builtin_shufflevector(r[2], r[3], 2, 6, 3, 7);
  c[0] = __builtin_shufflevector(t0, t1, 0, 1, 4, 5);
  c[1] = __builtin_shufflevector(t0, t1, 2, 3, 6, 7);
  c[2] = __builtin_shufflevector(t2, t3, 0, 1, 4, 5);
  c[3] = __builtin_shufflevector(t2, t3, 2, 3, 6, 7);
}

// One MR-tall panel (MR = 6 or 8) of a row-major A, k in whole groups of 4: each group is
// loaded as one 4-float vector per row and transposed in registers into the panel's k-major
// order. Returns how many k it packed (the caller packs the rest).
int64_t packPanelRowMajor(const float* A, int64_t rs, int64_t kc, int64_t MR, float alpha,
                          float* out) {
  const v4f a4 = v4f{} + alpha;
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    v4f r[8];
    for (int64_t i = 0; i < MR; ++i) r[i] = load4(A + i * rs + k) * a4;
    v4f c[4];
    transpose4x4(r, c);  // rows 0-3
    float* o = out + k * MR;
    if (MR == 8) {
      v4f d[4];
      transpose4x4(r + 4, d);  // rows 4-7
      for (int j = 0; j < 4; ++j) {
        std::memcpy(o + j * 8, &c[j], sizeof(v4f));
        std::memcpy(o + j * 8 + 4, &d[j], sizeof(v4f));
      }
    } else {  // MR == 6: rows 4 and 5 interleaved give two k per vector
      const v4f lo = __builtin_shufflevector(r[4], r[5], 0, 4, 1, 5);  // k, k+1
      const v4f hi = __builtin_shufflevector(r[4], r[5], 2, 6, 3, 7);  // k+2, k+3
      const float tail[4][2] = {{lo[0], lo[1]}, {lo[2], lo[3]}, {hi[0], hi[1]}, {hi[2], hi[3]}};
      for (int j = 0; j < 4; ++j) {
        std::memcpy(o + j * 6, &c[j], sizeof(v4f));
        o[j * 6 + 4] = tail[j][0];
        o[j * 6 + 5] = tail[j][1];
      }
    }
  }
  return k;
}

// Packs rows [0, mc) x depth [0, kc) of A (already offset) into MR-tall panels, k-major inside a
// panel, scaled by alpha; rows past mc are zero.
void packA(const GemmKernelSpec& s, int64_t mc, int64_t kc, const float* A, int64_t rs,
           int64_t cs, float alpha, float* out) {
  const int64_t MR = s.mr;
  for (int64_t i0 = 0; i0 < mc; i0 += MR, out += MR * kc) {
    const int64_t mr = std::min(MR, mc - i0);
    if (rs == 1) {  // transposed A: the MR values of one k are contiguous
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = A + i0 + k * cs;
        int64_t r = 0;
        for (; r < mr; ++r) out[k * MR + r] = alpha * src[r];
        for (; r < MR; ++r) out[k * MR + r] = 0.f;
      }
      continue;
    }
    // Whole panels of a row-major A (activations packed per call): 4x4 transposes in vector
    // registers, 4 k at a time, so each k's MR values go out as whole vectors.
    const bool vector_panel = cs == 1 && mr == MR && (MR == 8 || MR == 6);
    int64_t k0 = 0;
    if (cs == 1 && mr == MR && s.pack_a_panel) k0 = s.pack_a_panel(A + i0 * rs, rs, kc, alpha, out);
    if (vector_panel) k0 += packPanelRowMajor(A + i0 * rs + k0, rs, kc - k0, MR, alpha, out + k0 * MR);
    // The rest row by row: contiguous reads, strided writes that stay in L1.
    for (int64_t r = 0; r < mr; ++r) {
      const float* src = A + (i0 + r) * rs;
      for (int64_t k = k0; k < kc; ++k) out[k * MR + r] = alpha * src[k * cs];
    }
    for (int64_t r = mr; r < MR; ++r) {
      for (int64_t k = 0; k < kc; ++k) out[k * MR + r] = 0.f;
    }
  }
}

// Packs depth [0, kc) x columns [0, nc) of B into NR-wide panels, k-major inside a panel;
// columns past nc are zero.
void packB(const GemmKernelSpec& s, int64_t kc, int64_t nc, const float* B, int64_t rs,
           int64_t cs, float* out) {
  const int64_t NR = s.nr;
  for (int64_t j0 = 0; j0 < nc; j0 += NR, out += NR * kc) {
    const int64_t nr = std::min(NR, nc - j0);
    if (cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(out + k * NR, B + k * rs + j0, nr * sizeof(float));
        std::fill(out + k * NR + nr, out + (k + 1) * NR, 0.f);
      }
      continue;
    }
    // Transposed B (Linear weights, channels-last activations): one column at a time reads
    // contiguous memory; whole panels 16 k at a time in registers where the kernel can.
    int64_t k0 = 0;
    if (rs == 1 && nr == NR && s.pack_b_transposed_panel)
      k0 = s.pack_b_transposed_panel(B + j0 * cs, cs, kc, 1.f, out);
    for (int64_t j = 0; j < nr; ++j) {
      const float* src = B + (j0 + j) * cs;
      for (int64_t k = k0; k < kc; ++k) out[k * NR + j] = src[k * rs];
    }
    for (int64_t j = nr; j < NR; ++j) {
      for (int64_t k = 0; k < kc; ++k) out[k * NR + j] = 0.f;
    }
  }
}

void freeAligned(float* p) { std::free(p); }

std::unique_ptr<float[], void (*)(float*)> allocAligned(int64_t floats) {
  const size_t bytes = roundUp(std::max<int64_t>(floats, 16) * sizeof(float), 64);
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  return {p, freeAligned};
}

// A thread's pack buffers, 64-byte aligned, grown on demand and kept.
struct ScratchBuffer {
  std::unique_ptr<float[], void (*)(float*)> data{nullptr, freeAligned};
  int64_t size = 0;
  float* get(int64_t floats) {
    if (floats > size) {
      data = allocAligned(floats);
      size = floats;
    }
    return data.get();
  }
};

// ---- the blocked product over one region of C ----

// Rows of a prepacked A (Conv's filters) per block of a kc-deep slice: at most 128 KiB of them
// (64 rows of a 512-deep slice with AVX-512), not the MC that sizes a block of A packed per call.
// A prepacked A streams from memory, and the tiles of each block fetch the next block into L2
// while they run (next_a below), so two blocks of A and the block of B share L2: two 192-row
// blocks (393 KiB each) and a 14x14 convolution's block of B (512 x 196 floats, 400 KiB) did not
// fit its 1 MiB. Measured on whole models (bench/README.md, "Smaller blocks of prepacked
// filters"); a warm, isolated convolution does not show it, as its filters come from L3.
int64_t prepackedABlockRows(const GemmKernelSpec& s, int64_t kc) {
  const int64_t rows = (int64_t{128} << 10) / (std::max<int64_t>(kc, 1) * 4) / s.mr * s.mr;
  return std::clamp<int64_t>(rows, s.mr, s.mc);
}

// Computes C[i0:i1, j0:j1] of p; i0 and j0 are multiples of MR and NR (the packed operands'
// panels are addressed by global row and column).
void gemmRegion(const GemmParams& p, const GemmKernelSpec& s, int64_t i0, int64_t i1, int64_t j0,
                int64_t j1) {
  const int64_t K = p.K, MR = s.mr, NR = s.nr, KC = s.kc, MC = s.mc;
  const PackedMatrix* pa =
      p.packed_a && p.packed_a->kernel == &s && p.alpha == 1.f ? p.packed_a : nullptr;
  const PackedMatrix* pb = p.packed_b && p.packed_b->kernel == &s ? p.packed_b : nullptr;
  const float* A = p.A ? p.A : p.packed_a ? p.packed_a->source : nullptr;
  const float* B = p.B ? p.B : p.packed_b ? p.packed_b->source : nullptr;
  // A row-major B is read in place, not packed, when the region has at most 16 row tiles:
  // skinny products (the decode case) stream it once, and with few row tiles a panel is reused
  // too few times for a packing pass over all of B to pay (a 1x1 convolution's B is its input,
  // whose rows are already contiguous). Measured on ResNet-50's convolutions (bench_gemm --only
  // conv, one thread, best of three alternating runs): 64 output channels 8-20% less time,
  // 128 5-8%, 256 -1..+5%, 512-2048 2-8% more, so only up to 128 rows read in place. Up to
  // 256 rows when B is at most 64 deep, where packing weighs most against the product: in the
  // models (three alternating profiles, per-node minima) ResNet-50's 64 -> 256 convolutions at
  // 56x56 0.83-0.87 -> 0.76-0.79 ms (three of four; the fourth level), MobileNetV2's two
  // 24 -> 144 ones at 56x56 0.206-0.219 -> 0.183-0.206, EfficientNet-B0's 0.327-0.339 ->
  // 0.311-0.317.
  const GemmPanelSource* sourced_b = pb ? nullptr : p.b_source;
  // One column (a matrix-vector product) is read in place by a kernel whose one-column tile
  // needs no panel, whatever B's layout; before this was checked first, a product of few rows
  // read its one column as a zero-padded NR-wide edge panel (a squeeze-and-excitation block's
  // 1152 -> 48 convolution: 14 us a node, most of it zeroing and copying that panel).
  const bool column_b = !pb && !sourced_b && j1 - j0 == 1 && s.column_in_place;
  const bool direct_b = !pb && !sourced_b && !column_b && p.b_cs == 1 &&
                        (i1 - i0 <= 16 * MR || (K <= 64 && i1 - i0 <= 32 * MR));
  const bool prefetch_direct_b = direct_b && K * (j1 - j0) * 4 > (int64_t{512} << 10);
  // A block of B packed per call against prepacked filters (a convolution's input) is read
  // once per block of filter rows, so it is to stay in L2 with them: over 1 MiB it is packed in
  // column blocks of at most 512 KiB. ResNet-50's 512 -> 256 1x1 convolution at 28x28 (a
  // 512 x 784 block, 1.6 MB) went 1.80 -> 1.44 ms in the model (four alternating profiles);
  // splitting smaller blocks too made the stride-2 1x1 shortcut's (0.8 MB) slower, 1.77 ->
  // 1.88 ms. Only against prepacked filters: a product that packs A per call would pack it
  // again for every column block.
  const bool packs_b = !pb && !direct_b && !column_b;
  const int64_t block_k = std::min(K, KC);
  const int64_t NC = pa && packs_b && block_k * (j1 - j0) * 4 > (int64_t{1} << 20)
                         ? std::max(NR, ((int64_t{512} << 10) / (block_k * 4)) / NR * NR)
                         : s.nc;
  // A row-major A is read in place where the caller allows it (GemmParams::a_in_place), the
  // kernel can (a_rows_in_place) and the region has at most 4 column panels, each A panel
  // reused too few times for a packing pass to pay. Not for one column read in place: the
  // one-column tile reads A from packed panels, and the tile that reads A in place loads B 16
  // columns at a time, past the end of a lone column (found by AddressSanitizer).
  const bool direct_a = p.a_in_place && !pa && !p.a_source && s.a_rows_in_place &&
                        p.a_cs == 1 && p.a_rs > 0 && p.alpha == 1.f && j1 - j0 <= 4 * NR &&
                        !column_b;
  thread_local ScratchBuffer abuf, bbuf, edgebuf;
  float* apack =
      pa || direct_a ? nullptr : abuf.get(std::min(MC, roundUp(i1 - i0, MR)) * std::min(K, KC));
  float* bpack = pb || direct_b || column_b
                     ? nullptr
                     : bbuf.get(std::min(K, KC) * std::min(NC, roundUp(j1 - j0, NR)));
  float* edge = direct_b ? edgebuf.get(std::min(K, KC) * NR) : nullptr;
  const Epilogue* ep = p.epilogue && !p.epilogue->empty() ? p.epilogue : nullptr;
  TileEpilogue tep;
  if (ep) {
    tep.bias_per_row = ep->bias_per_row;
    tep.ld_residual = ep->ld_residual;
    tep.full = ep;
    tep.vector_activation = hasVectorActivation(ep->activation, s.vector_exp);
  }
  TileArgs t;
  t.ldc = p.ldc;
  t.prefetch_in_runs = pb != nullptr;  // its tiles' share is of the next prepacked B panel
  bool last_k = false;
  // The tile's C at (row, col) of the product, and on the last K slice its epilogue there.
  auto placeOutput = [&](int64_t row, int64_t col) {
    t.c = p.C + row * p.ldc + col;
    t.ep = nullptr;
    if (!last_k || !ep) return;
    const int64_t grow = p.epilogue_row0 + row, gcol = p.epilogue_col0 + col;
    tep.bias = ep->bias ? ep->bias + (ep->bias_per_row ? grow : gcol) : nullptr;
    tep.residual = ep->residual ? ep->residual + grow * ep->ld_residual + gcol : nullptr;
    tep.row0 = grow;
    tep.col0 = gcol;
    t.ep = &tep;
  };

  for (int64_t jc = j0; jc < j1; jc += NC) {
    const int64_t nc = std::min(NC, j1 - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      t.kc = kc;
      t.load_c = p.accumulate || pc > 0;
      last_k = pc + kc == K;
      const float* bblock = nullptr;
      if (pb) {
        bblock = pb->data.get() + pc * pb->padded + jc * kc;
      } else if (sourced_b) {
        sourced_b->packPanels(pc, kc, jc, nc, NR, bpack);
        bblock = bpack;
      } else if (!direct_b && !column_b) {
        packB(s, kc, nc, B + pc * p.b_rs + jc * p.b_cs, p.b_rs, p.b_cs, bpack);
        bblock = bpack;
      }
      const int64_t block_rows = pa && i1 - i0 > MC ? prepackedABlockRows(s, kc) : MC;
      for (int64_t ic = i0; ic < i1; ic += block_rows) {
        const int64_t mc = std::min(block_rows, i1 - ic);
        const float* ablock;
        if (pa) {
          ablock = pa->data.get() + pc * pa->padded + ic * kc;
        } else if (p.a_source) {
          p.a_source->packPanels(pc, kc, ic, mc, MR, apack);
          ablock = apack;
        } else if (direct_a) {
          ablock = A + ic * p.a_rs + pc;
        } else {
          packA(s, mc, kc, A + ic * p.a_rs + pc * p.a_cs, p.a_rs, p.a_cs, p.alpha, apack);
          ablock = apack;
        }
        // Prepacked A (Conv's filters): the block after this one in memory (the next row block,
        // or the next K slice's first), over all the block's tiles. With fewer than 4 tiles
        // (the decode case) the operand streams at memory speed anyway and the hardware
        // prefetcher keeps up; extra requests would only cost issue slots. The same holds below.
        const int64_t row_tiles = (mc + MR - 1) / MR;
        const int64_t block_tiles = (nc + NR - 1) / NR * row_tiles;
        PrefetchShare next_a;
        if (pa && !pb && block_tiles >= 4) {
          const int64_t block = roundUp(mc, MR) * kc;
          next_a = PrefetchShare::of(*pa, (ablock - pa->data.get()) + block, block, block_tiles);
          if (!next_a.base && p.next_packed_a && p.next_packed_a->kernel == &s)
            next_a = PrefetchShare::of(*p.next_packed_a, 0, block, block_tiles);
        }
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min(NR, nc - jr);
          const int64_t col = jc + jr;
          if (column_b) {
            t.b = B + pc * p.b_rs + col * p.b_cs;
            t.b_stride = p.b_rs;
          } else if (direct_b && nr == NR) {
            t.b = B + pc * p.b_rs + col;
            t.b_stride = p.b_rs;
          } else if (direct_b) {  // the ragged last panel, zero-padded
            packB(s, kc, nr, B + pc * p.b_rs + col, p.b_rs, 1, edge);
            t.b = edge;
            t.b_stride = NR;
          } else {
            t.b = bblock + jr * kc;
            t.b_stride = NR;
          }
          t.cols = static_cast<int>(nr);
          // An in-place B's next panel: kc rows, 128 bytes each, 4*N bytes apart, an even share
          // of them requested by each row tile of this panel over its k loop. The hardware
          // prefetcher follows a few streams, not kc of them, so without this each row of each
          // panel arrives at the latency of wherever B is (bench/README: 1x1 convolutions of
          // MobileNetV2 and EfficientNet, B from beyond L2). Only when B is over 512 KiB (half
          // of L2 here): below that, B measured as fast from memory as from cache, and the
          // requests cost up to 2%.
          PrefetchShare next_b_rows;
          if (prefetch_direct_b && ic == i0 && jr + NR < nc) {
            next_b_rows =
                PrefetchShare::rowsOf(B + pc * p.b_rs + col + NR, kc, p.b_rs * 4, row_tiles);
          }
          // Prepacked B (MatMul's weights): the next panel in line (the packed operand is one
          // contiguous run of panels) over this panel's row tiles.
          PrefetchShare next_b;
          if (pb && row_tiles >= 4) {
            next_b = PrefetchShare::of(*pb, (bblock - pb->data.get()) + (jr + NR) * kc, NR * kc,
                                       row_tiles);
          }
          // A ragged last panel of a few columns over packed A panels: one call for the whole
          // block's rows (GemmKernelSpec::narrow_strip), not one NR-wide tile per row tile. It
          // takes no share of the next block's prefetch (the last 1/panels of a prepacked A's
          // next block is left to the hardware prefetcher). In ResNet-50 (1x1 convolutions onto
          // 14x14, N = 196 = 6 x 32 + 4) the 13 such nodes went 9.05 / 9.18 -> 8.68 / 8.56 ms
          // a run (two alternating profiles), outputs bit-identical.
          if (s.narrow_strip && nr >= 2 && nr <= kNarrowStripCols && !direct_a) {
            t.rows = static_cast<int>(mc);
            t.a = ablock;
            t.a_stride = 0;
            t.prefetch = nullptr;
            t.prefetch_lines = 0;
            t.prefetch_stride = 0;
            placeOutput(ic, col);
            s.narrow_strip(t);
            continue;
          }
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t row = ic + ir;
            if (pb) next_b.assign(t, ir / MR);
            else next_a.assign(t, jr / NR * row_tiles + ir / MR);
            if (t.prefetch_lines == 0) next_b_rows.assign(t, ir / MR);
            t.rows = static_cast<int>(std::min(MR, mc - ir));
            t.a = direct_a ? ablock + ir * p.a_rs : ablock + ir * kc;
            t.a_stride = direct_a ? p.a_rs : 0;
            placeOutput(row, col);
            s.tile(t);
          }
        }
      }
    }
  }
}

void gemmEmptyK(const GemmParams& p) {  // empty sum: C = 0 (or unchanged), then the epilogue
  for (int64_t i = 0; i < p.M; ++i) {
    if (!p.accumulate) std::fill(p.C + i * p.ldc, p.C + i * p.ldc + p.N, 0.f);
  }
  if (p.epilogue && !p.epilogue->empty()) {
    p.epilogue->apply(p.C, p.ldc, p.epilogue_row0, p.epilogue_col0, p.M, p.N);
  }
}

}  // namespace

GemmParams gemmParams(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a,
                      const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc) {
  GemmParams p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.A = A;
  p.a_rs = trans_a ? 1 : lda;
  p.a_cs = trans_a ? lda : 1;
  p.B = B;
  p.b_rs = trans_b ? 1 : ldb;
  p.b_cs = trans_b ? ldb : 1;
  p.C = C;
  p.ldc = ldc;
  return p;
}

namespace {

// The storage of a packed operand with `outer` rows of A or columns of B, padded to whole
// panels of `panel`, for the kernel `s`; filled by the caller.
PackedMatrix packedStorage(const GemmKernelSpec& s, int64_t outer, int64_t depth, int64_t panel,
                           const float* source, int64_t rs, int64_t cs) {
  PackedMatrix m;
  m.kernel = &s;
  m.outer = outer;
  m.depth = depth;
  m.padded = roundUp(outer, panel);
  m.data = allocAligned(m.padded * depth);
  m.source = source;
  m.rs = rs;
  m.cs = cs;
  return m;
}

}  // namespace

PackedMatrix packGemmA(int64_t M, int64_t K, const float* A, int64_t rs, int64_t cs) {
  const GemmKernelSpec& s = currentKernel();
  PackedMatrix m = packedStorage(s, M, K, s.mr, A, rs, cs);
  for (int64_t pc = 0; pc < K; pc += s.kc) {
    packA(s, M, std::min(s.kc, K - pc), A + pc * cs, rs, cs, 1.f, m.data.get() + pc * m.padded);
  }
  return m;
}

PackedMatrix packGemmB(int64_t K, int64_t N, const float* B, int64_t rs, int64_t cs) {
  const GemmKernelSpec& s = currentKernel();
  PackedMatrix m = packedStorage(s, N, K, s.nr, B, rs, cs);
  for (int64_t pc = 0; pc < K; pc += s.kc) {
    packB(s, std::min(s.kc, K - pc), N, B + pc * rs, rs, cs, m.data.get() + pc * m.padded);
  }
  return m;
}

bool gemmResidualMayAliasOutput(int64_t K) {
  const GemmKernelSpec& s = currentKernel();
  return s.residual_in_registers && K <= s.kc;
}

bool packedForCurrentKernel(const PackedMatrix& packed) {
  return packed.kernel == &currentKernel();
}

bool gemmForceKernel(const char* name) {
  const std::string n = name ? name : "";
  const GemmKernelSpec* s = nullptr;
  if (n.empty() || n == "auto") {
    s = nullptr;
  } else if (n == "avx512") {
    if (!(s = avx512KernelSpec())) return false;
  } else if (n == "avx2" || n == "avx2-fma") {
    if (!(s = avx2KernelSpec())) return false;
  } else if (n == "portable") {
    s = &kPortableSpec;
  } else {
    return false;
  }
  g_forced.store(s);
  return true;
}

void gemmForcePortableKernel(bool force) { gemmForceKernel(force ? "portable" : "auto"); }

const char* gemmKernelName() { return currentKernel().name; }

void gemm(const GemmParams& p, int num_threads) {
  if (p.M <= 0 || p.N <= 0) return;
  if (p.K <= 0) {
    gemmEmptyK(p);
    return;
  }
  const GemmKernelSpec& s = currentKernel();
  // A thread costs microseconds to wake: give each at least ~4 MFLOP of work (about 40 us at
  // the FMA peak), or as much time in reading the operands where they outweigh the FLOPs: a
  // matrix-vector product streams its matrix from memory at a few FLOPs a byte (the classifier of
  // MobileNetV2 and EfficientNet-B0, 1280 -> 1000 at M = 1, is 2.6 MFLOP over 5.1 MB, 0.19 ms on
  // one core), and a second core reads it at nearly twice the bandwidth.
  const double flops = 2.0 * static_cast<double>(p.M) * p.N * p.K;
  const double operand_bytes =
      4.0 * (static_cast<double>(p.M) * p.K + static_cast<double>(p.K) * p.N);
  int threads = std::max(1, num_threads);
  threads = static_cast<int>(
      std::min<double>(threads, std::max({1.0, flops / 4e6, operand_bytes / 1e6})));
  // Each thread packs the operand it does not split. A prepacked operand is shared, so split the
  // other one: then no thread packs the same panels as another.
  const bool a_packed = p.packed_a && p.packed_a->kernel == &s && p.alpha == 1.f;
  const bool b_packed = p.packed_b && p.packed_b->kernel == &s;
  const int64_t enough = int64_t{4} * threads;  // panels per thread worth splitting along
  bool split_cols = p.N >= p.M;
  if (b_packed && !a_packed && p.M >= enough * s.mr) split_cols = false;
  if (a_packed && !b_packed && p.N >= enough * s.nr) split_cols = true;
  const int64_t extent = split_cols ? p.N : p.M;
  const int64_t unit = split_cols ? s.nr : s.mr;
  const int64_t units = (extent + unit - 1) / unit;
  threads = static_cast<int>(std::min<int64_t>(threads, units));
  if (threads <= 1) {
    gemmRegion(p, s, 0, p.M, 0, p.N);
    return;
  }
  // Static partition in whole panels: slice t covers units [t*units/T, (t+1)*units/T).
  runOnWorkers(threads, [&](int t) {
    const int64_t begin = units * t / threads * unit;
    const int64_t end = std::min(extent, units * (t + 1) / threads * unit);
    if (begin >= end) return;
    if (split_cols) {
      gemmRegion(p, s, 0, p.M, begin, end);
    } else {
      gemmRegion(p, s, begin, end, 0, p.N);
    }
  });
}

namespace {

// Rows [m0, m1) of the integer GEMM; 16-column strips keep the accumulators in registers and
// give the compiler fixed-trip inner loops it vectorizes at -O2.
void gemmS32Rows(int64_t m0, int64_t m1, int64_t N, int64_t K, const int32_t* A, int64_t lda,
                 const int32_t* B, int64_t ldb, int32_t* C, int64_t ldc, bool accumulate) {
  constexpr int64_t W = 16;
  for (int64_t i = m0; i < m1; ++i) {
    const int32_t* a = A + i * lda;
    int32_t* c = C + i * ldc;
    int64_t j0 = 0;
    for (; j0 + W <= N; j0 += W) {
      int32_t acc[W];
      for (int64_t j = 0; j < W; ++j) acc[j] = accumulate ? c[j0 + j] : 0;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t av = a[k];
        const int32_t* b = B + k * ldb + j0;
        for (int64_t j = 0; j < W; ++j) acc[j] += av * b[j];
      }
      for (int64_t j = 0; j < W; ++j) c[j0 + j] = acc[j];
    }
    for (int64_t j = j0; j < N; ++j) {
      int32_t acc = accumulate ? c[j] : 0;
      for (int64_t k = 0; k < K; ++k) acc += a[k] * B[k * ldb + j];
      c[j] = acc;
    }
  }
}

}  // namespace

void gemmS32(int64_t M, int64_t N, int64_t K, const int32_t* A, int64_t lda, const int32_t* B,
             int64_t ldb, int32_t* C, int64_t ldc, bool accumulate, int num_threads) {
  const double ops = 2.0 * static_cast<double>(M) * N * std::max<int64_t>(K, 1);
  int threads = static_cast<int>(std::min<double>(std::max(1, num_threads),
                                                  std::max(1.0, ops / 4e6)));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(M, 1)));
  if (threads <= 1) {
    gemmS32Rows(0, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    return;
  }
  runOnWorkers(threads, [&](int t) {
    gemmS32Rows(M * t / threads, M * (t + 1) / threads, N, K, A, lda, B, ldb, C, ldc, accumulate);
  });
}

}  // namespace fusectl::kernels::cpu
