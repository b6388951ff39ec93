// Moved: attachFusectlFunctions and fusedOpSpelling are libgraph's (fusectl/graph/fused_ops.h),
// and PassManager::run attaches the functions itself. This forwarding header only keeps
// apps/cmd_optimize.cpp building until it drops its call (issue 11, part 3); delete it then.
#pragma once

#include "fusectl/graph/fused_ops.h"
