// Internal: what each pass file provides, generated from passes.def.
//
// A pass in libpasses/transforms/<name>.cpp defines `create<Class>()` and takes its PassInfo
// from `<Class>Info` (defined by registry.cpp from the same passes.def line), so a pass's
// name, level, portability and description are written in exactly one place.
#pragma once

#include <memory>

#include "fusectl/passes/pass.h"

namespace fusectl::passes {

#define FUSECTL_PASS(NAME, CLASS, LEVEL, PORTABILITY, DESCRIPTION) \
  extern const PassInfo CLASS##Info;                              \
  std::unique_ptr<Pass> create##CLASS();
#include "fusectl/passes/passes.def"
#undef FUSECTL_PASS

}  // namespace fusectl::passes
