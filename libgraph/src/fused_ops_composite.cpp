// The list of composite-op function-body builders (fused_ops_composite.h). One line per op;
// the builders live in fused_bodies/<family>.cpp.
#include "fused_ops_composite.h"

namespace fusectl {

// Declared here rather than in a header per family: this list is their only caller.
std::string buildAttentionFunction(const FusedOpInfo& op, int64_t opset);  // fused_bodies/attention.cpp
std::string buildAttentionPackedFunction(const FusedOpInfo& op, int64_t opset);  // attention.cpp
std::string buildAttentionPackedRotaryFunction(const FusedOpInfo& op, int64_t opset);  // attention.cpp
std::string buildSwiGLUFunction(const FusedOpInfo& op, int64_t opset);     // fused_bodies/swiglu.cpp
std::string buildSwiGLUPackedFunction(const FusedOpInfo& op, int64_t opset);  // fused_bodies/swiglu.cpp
std::string buildQuickGeluFunction(const FusedOpInfo& op, int64_t opset);  // fused_bodies/gelu.cpp
std::string buildLayerNormFunction(const FusedOpInfo& op, int64_t opset);      // norms.cpp
std::string buildRMSNormFunction(const FusedOpInfo& op, int64_t opset);        // norms.cpp
std::string buildSkipLayerNormFunction(const FusedOpInfo& op, int64_t opset);  // norms.cpp
std::string buildSkipRMSNormFunction(const FusedOpInfo& op, int64_t opset);    // norms.cpp
std::string buildGroupNormFunction(const FusedOpInfo& op, int64_t opset);      // norms.cpp
std::string buildChannelLayerNormFunction(const FusedOpInfo& op, int64_t opset);  // norms.cpp
std::string buildRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset);        // rotary.cpp
std::string buildQKNormRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset);  // rotary.cpp
std::string buildInterleavedRotaryEmbeddingFunction(const FusedOpInfo& op, int64_t opset);  // rotary.cpp
std::string buildQKNormInterleavedRotaryEmbeddingFunction(const FusedOpInfo& op,
                                                          int64_t opset);  // rotary.cpp

const std::vector<CompositeBody>& compositeBodyBuilders() {
  static const std::vector<CompositeBody> table = {
      {"LayerNorm", buildLayerNormFunction},
      {"RMSNorm", buildRMSNormFunction},
      {"SkipLayerNorm", buildSkipLayerNormFunction},
      {"SkipRMSNorm", buildSkipRMSNormFunction},
      {"GroupNorm", buildGroupNormFunction},
      {"ChannelLayerNorm", buildChannelLayerNormFunction},
      {"Attention", buildAttentionFunction},
      {"AttentionPacked", buildAttentionPackedFunction},
      {"AttentionPackedRotary", buildAttentionPackedRotaryFunction},
      {"SwiGLU", buildSwiGLUFunction},
      {"SwiGLUPacked", buildSwiGLUPackedFunction},
      {"QuickGelu", buildQuickGeluFunction},
      {"RotaryEmbedding", buildRotaryEmbeddingFunction},
      {"QKNormRotaryEmbedding", buildQKNormRotaryEmbeddingFunction},
      {"InterleavedRotaryEmbedding", buildInterleavedRotaryEmbeddingFunction},
      {"QKNormInterleavedRotaryEmbedding", buildQKNormInterleavedRotaryEmbeddingFunction},
  };
  return table;
}

CompositeBodyBuilder findCompositeBodyBuilder(std::string_view op) {
  for (const CompositeBody& b : compositeBodyBuilders())
    if (b.op == op) return b.build;
  return nullptr;
}

bool hasCompositeFunctionBody(std::string_view op_type) {
  // Elementwise's bodies are built per program (buildElementwiseFunction), ExpandDepthwiseConv's
  // per activation pair (buildExpandDepthwiseFunction).
  return findCompositeBodyBuilder(op_type) != nullptr || op_type == "Elementwise" ||
         op_type == "ExpandDepthwiseConv";
}

}  // namespace fusectl
