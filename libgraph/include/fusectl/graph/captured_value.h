// Following a subgraph's outer references to what they capture.
#pragma once

#include "fusectl/graph/graph.h"

namespace fusectl {

// The value an outer reference captures, followed through every graph in between (a body's
// capture of its parent's capture); `v` itself when it is no outer reference, or the last one
// when that one dangles.
inline const Value* capturedValue(const Value* v) {
  while (v->kind() == Value::Kind::OuterRef && v->outerValue()) v = v->outerValue();
  return v;
}

}  // namespace fusectl
