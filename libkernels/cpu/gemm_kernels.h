// The micro-kernel interface shared by the GEMM driver (gemm_micro.cpp) and the ISA-specific
// tile kernels (gemm_kernels_x86.cpp, and the portable one in gemm_micro.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "fusectl/kernels/epilogue.h"
#include "gemm_micro.h"

namespace fusectl::kernels::cpu {

// The epilogue of one tile, its pointers already at the tile's element (0,0).
struct TileEpilogue {
  const float* bias = nullptr;  // bias_per_row: bias[r]; else bias[j]
  bool bias_per_row = false;
  const float* residual = nullptr;  // residual[r * ld_residual + j]
  int64_t ld_residual = 0;
  const Epilogue* full = nullptr;  // the whole epilogue: activation kind and parameters
  bool vector_activation = false;  // the kernel applies the activation in registers
  int64_t row0 = 0, col0 = 0;      // global coordinates, for full->apply (portable kernel)
};

// One tile: C[0:rows, 0:cols] = A-panel * B-panel over kc (+ C when load_c), then the epilogue
// when ep is set. a: MR-tall packed panel (k-major, MR floats per k); b: NR floats per k, b_stride
// floats apart (NR for a packed panel, ldb for a row-major B read in place: only the first cols
// of each row are read then).
struct TileArgs {
  int64_t kc = 0;
  const float* a = nullptr;
  // 0: `a` is a packed panel. Otherwise A is read in place, row-major: row r's k at
  // a[r * a_stride + k] (GemmKernelSpec::a_rows_in_place).
  int64_t a_stride = 0;
  const float* b = nullptr;
  int64_t b_stride = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  int rows = 0, cols = 0;
  bool load_c = false;
  const TileEpilogue* ep = nullptr;
  // Cache lines to fetch into L2 while the tile runs, spread over its k loop (the driver hands
  // each tile a share of the next B panel of prepacked weights); kernels may ignore them.
  const char* prefetch = nullptr;
  int64_t prefetch_lines = 0;
  // 0: the lines are consecutive. Otherwise they are the 128-byte row segments of an in-place
  // B's next panel, this many bytes apart (one request per segment: its two or three lines).
  int64_t prefetch_stride = 0;
  // The tile may run its k loop in stretches between its prefetch requests (consecutive lines
  // only), with no per-step countdown. Set for prepacked B (MatMul's weights), where it measured
  // faster; a prepacked A's tiles (convolutions) measured slower with it (bench/README.md).
  bool prefetch_in_runs = false;
};

// Prepacked weights stream from memory once per product, so the tiles working on one block
// fetch the next into L2 while they run (the GEMM's tiles, and the direct convolution's): a run
// of cache lines split evenly among them, tile i taking lines [i * per_tile, (i + 1) *
// per_tile). The same split serves an in-place B's next panel, whose "lines" are row segments
// `stride` bytes apart (TileArgs::prefetch_stride).
struct PrefetchShare {
  const char* base = nullptr;
  int64_t lines = 0, per_tile = 0;
  int64_t stride = 0;  // 0: consecutive lines

  // The `floats` floats at `offset` in `m` (clipped at its end; none past it) over `tiles`.
  // Offsets, not pointers: a pointer past the operand's end is not to be formed.
  static PrefetchShare of(const PackedMatrix& m, int64_t offset, int64_t floats, int64_t tiles) {
    PrefetchShare share;
    const int64_t total = m.padded * m.depth;
    if (offset >= total || tiles <= 0) return share;
    share.base = reinterpret_cast<const char*>(m.data.get() + offset);
    share.lines = (std::min(floats, total - offset) * 4 + 63) / 64;
    share.per_tile = (share.lines + tiles - 1) / tiles;
    return share;
  }

  // The 128-byte segments of `rows` rows from `first_row`, `row_bytes` apart, over `tiles`.
  static PrefetchShare rowsOf(const float* first_row, int64_t rows, int64_t row_bytes,
                              int64_t tiles) {
    PrefetchShare share;
    if (rows <= 0 || tiles <= 0) return share;
    share.base = reinterpret_cast<const char*>(first_row);
    share.lines = rows;
    share.per_tile = (rows + tiles - 1) / tiles;
    share.stride = row_bytes;
    return share;
  }

  // Tile `tile`'s lines: the first one's address and how many (none when the share is empty
  // or the tile is past its end).
  std::pair<const char*, int64_t> forTile(int64_t tile) const {
    const int64_t first = tile * per_tile;
    if (!base || first >= lines) return {nullptr, 0};
    return {base + first * (stride ? stride : 64), std::min(per_tile, lines - first)};
  }

  // Hands a GEMM tile its lines.
  void assign(TileArgs& t, int64_t tile) const {
    std::tie(t.prefetch, t.prefetch_lines) = forTile(tile);
    t.prefetch_stride = stride;
  }
};

using TileKernel = void (*)(const TileArgs&);
// Packs k [0, kc) of one whole MR-tall panel of a row-major A (rows `rs` floats apart), scaled
// by alpha, into the panel's k-major order; returns how many k it packed, from 0 (the caller
// packs the rest).
using PanelPacker = int64_t (*)(const float* A, int64_t rs, int64_t kc, float alpha, float* out);

struct GemmKernelSpec {
  const char* name;
  int64_t mr, nr;      // register tile
  int64_t kc, mc, nc;  // cache blocking: A panel + B panel in L1, A block in L2, B block in L3
  TileKernel tile;
  bool vector_exp;  // Sigmoid, Silu, Tanh and Gelu in registers (hasVectorActivation)
  // A one-column tile reads only b[k * b_stride] (no NR-wide panel), so a product with N = 1
  // reads B in place instead of packing it into a zero-padded panel NR times its size.
  bool column_in_place = false;
  // The tile adds the epilogue's residual in registers before its one store of C, so each
  // residual element is read before the same element of C is written (gemmResidualMayAliasOutput).
  bool residual_in_registers = false;
  // A faster packing of whole A panels than the portable 4x4 transposes, or null.
  PanelPacker pack_a_panel = nullptr;
  // Packs k [0, kc) of one whole NR-wide panel of a transposed B (each column's k contiguous,
  // columns `rs` floats apart; alpha is 1) into the panel's k-major order, or null; returns
  // how many k it packed, like pack_a_panel. Per call for activations read channels-last by a
  // convolution (a column per pixel), where the portable loop stored one float at a time.
  PanelPacker pack_b_transposed_panel = nullptr;
  // The tile reads a row-major A in place (TileArgs::a_stride): each of its rows' k is one
  // broadcast from memory, as from a panel, so A needs no packing pass where few column panels
  // reuse it (a pointwise convolution's channels-last input times few output channels).
  bool a_rows_in_place = false;
  // Computes a strip of 2 to kNarrowStripCols columns over a whole block of packed A panels
  // at once (t.rows up to MC; panel i at t.a + i * mr * kc; t.c and the epilogue at the block's
  // first row), or null: a ragged last column panel, which the NR-wide tile would compute at
  // its full width. Each element is still one FMA chain in k order, as in the tile.
  TileKernel narrow_strip = nullptr;
};

// The widest strip GemmKernelSpec::narrow_strip takes.
constexpr int kNarrowStripCols = 4;

// Which activations a vector kernel computes in registers (the others run the scalar
// Epilogue::activate on the stored tile, still in L1). Kernels with a vector exp also take
// Sigmoid, Silu, Tanh and Gelu.
inline bool hasVectorActivation(Activation a, bool vector_exp) {
  switch (a) {
    case Activation::None:
    case Activation::Relu:
    case Activation::Clip:
    case Activation::LeakyRelu:
    case Activation::HardSigmoid:
    case Activation::HardSwish:
      return true;
    case Activation::Sigmoid:
    case Activation::Silu:
    case Activation::Tanh:
    case Activation::Gelu:
    case Activation::GeluTanh:
      return vector_exp;
  }
  return false;
}

// Null when the CPU (or the build) lacks the instructions.
const GemmKernelSpec* avx512KernelSpec();
const GemmKernelSpec* avx2KernelSpec();
const GemmKernelSpec* portableKernelSpec();

}  // namespace fusectl::kernels::cpu
