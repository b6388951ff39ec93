// fusectl's own type and shape inference.
//
// libonnx 1.12 knows operator schemas only up to opset 17, while current exports use opsets
// 18-21. fusectl therefore infers types and shapes itself, with symbolic dims carried through
// arithmetic, for every op it optimizes or runs, at every opset version of that op; libonnx's
// inference is only a fallback for other ops and never a reason to fail loading.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl {

struct ShapeInferenceOptions {
  // Run libonnx's per-node inference for ops fusectl has no rule for.
  bool onnx_fallback = true;
  // Replace types already present (from value_info) instead of only filling gaps.
  bool overwrite = true;
};

struct ShapeInferenceStats {
  size_t nodes_inferred = 0;      // by fusectl's own rules
  size_t nodes_fallback = 0;      // by libonnx
  size_t nodes_unknown = 0;       // no rule, outputs left as they were
  std::vector<std::string> warnings;  // inconsistencies found (e.g. a broadcast that cannot work)
};

// Infers the dtype and shape of every node output in the model's main graph and subgraphs.
ShapeInferenceStats inferShapes(Model& model, const ShapeInferenceOptions& options = {});

// Sets the shapes of named graph inputs (throws fusectl::Error for an unknown name or a rank
// mismatch), then re-infers.
ShapeInferenceStats setInputShapesAndInfer(
    Model& model, const std::vector<std::pair<std::string, Shape>>& input_shapes,
    const ShapeInferenceOptions& options = {});

// True when fusectl has its own rule for this op at this opset.
bool hasShapeRule(std::string_view domain, std::string_view op_type, int64_t opset);

}  // namespace fusectl
