// One head row's rotary rotation, shared by fusectl::RotaryEmbedding and its interleaved and
// QK-norm variants (rotary_fused.cpp) and AttentionPackedRotary (attention.cpp), so that the
// fused attention rotates its q and k rows to the same bits as the separate node.
//
// The arithmetic is the exported nodes' own, in float32 and in their order: x * cos + (-x2) *
// sin, which is x * cos - x2 * sin exactly.
#pragma once

#include <cstdint>

#include "vec_kernels.h"

namespace fusectl::kernels::cpu {

// rotate_half (LLaMA, Qwen, GPT-NeoX): the two halves of the row are the pairs. Vectorised
// (vec::rotateHalfRow, each product rounded as the graph's Mul rounds it); y must not overlap x.
inline void rotateRow(const float* x, float* y, int64_t half, const float* c, const float* s) {
  vec::rotateHalfRow(x, y, half, c, s);
}

// Neighbouring pairs (x[2k], x[2k + 1]): GPT-J's rotate_every_two.
inline void rotatePairs(const float* x, float* y, int64_t half, const float* c, const float* s) {
  for (int64_t k = 0; k < half; ++k) {
    const float x1 = x[2 * k], x2 = x[2 * k + 1];
    y[2 * k] = x1 * c[2 * k] + (-x2) * s[2 * k];
    y[2 * k + 1] = x2 * c[2 * k + 1] + x1 * s[2 * k + 1];
  }
}

}  // namespace fusectl::kernels::cpu
