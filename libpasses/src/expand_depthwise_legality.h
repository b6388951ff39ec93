// Internal to libpasses: fuse-expand-depthwise's conditions (libpasses/transforms/
// fuse_expand_depthwise.cpp), shared with the fusion catalog's rule for the pairs the pass
// declines by size (fusion_catalog.cpp, expand-depthwise-within-l2).
#pragma once

#include <cstdint>
#include <string>

#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

// The pass's conditions 1-6 on a match of `e:<Conv> -> 0:^d:<Conv>`, with one image's expanded
// tensor at least min_bytes and under below_bytes (the pass: its option and no bound above).
Constraint expandDepthwisePair(uint64_t min_bytes, uint64_t below_bytes);

// min-expanded-bytes as passes.def declares its default.
uint64_t defaultMinExpandedBytes();

}  // namespace fusectl::passes
