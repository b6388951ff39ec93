// Letting go of the memory a weight occupies once a consumer holds its own copy of it.
#pragma once

#include "fusectl/graph/tensor.h"

namespace fusectl {

// Drops the pages of `buffer` from the process's resident memory when its bytes are a read-only
// mapping of the model's file (Buffer::mapFile): reading them again faults them back in from
// the file, so nothing changes but the resident size. Deferred bytes not computed yet have no
// pages, but the buffers their recipe reads (ByteRecipe::sources) may: those are dropped. Returns
// whether it dropped any; a no-op (false) for heap, computed deferred or empty buffers, whose
// bytes exist nowhere else. The executor calls it
// for weights that a kernel packed into its own layout and no longer reads: without it a packed
// model holds every weight twice.
bool releaseResidentPages(const Buffer& buffer);

}  // namespace fusectl
