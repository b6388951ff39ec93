// The one list of built-in CPU kernel groups; KernelRegistry::global() calls it once.
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

// Compute-heavy kernels (conv.cpp, gemm.cpp, pool.cpp, norm.cpp, resize.cpp, quantize.cpp).
void registerConvKernels(KernelRegistry& r);
void registerGemmKernels(KernelRegistry& r);
void registerPoolKernels(KernelRegistry& r);
void registerNormKernels(KernelRegistry& r);
void registerResizeKernels(KernelRegistry& r);
void registerQuantizeKernels(KernelRegistry& r);
// Elementwise, reductions and data movement (elementwise.cpp, reduce.cpp, tensor_ops.cpp).
void registerElementwiseKernels(KernelRegistry& r);
void registerReduceKernels(KernelRegistry& r);
void registerTensorKernels(KernelRegistry& r);
// Ops of the wider ONNX node-test suite, one family per file (losses.cpp, ...).
void registerLossKernels(KernelRegistry& r);
void registerScatterGatherKernels(KernelRegistry& r);
void registerGridSampleKernels(KernelRegistry& r);
void registerNmsKernels(KernelRegistry& r);
void registerSignalKernels(KernelRegistry& r);
void registerLpKernels(KernelRegistry& r);
void registerUniqueKernels(KernelRegistry& r);
void registerCenterCropPadKernels(KernelRegistry& r);
void registerCol2ImKernels(KernelRegistry& r);
void registerRecurrentKernels(KernelRegistry& r);
void registerChannelNormKernels(KernelRegistry& r);
void registerIndexKernels(KernelRegistry& r);
void registerDetKernels(KernelRegistry& r);
void registerDynamicQuantizeKernels(KernelRegistry& r);
void registerTrainingOptimizerKernels(KernelRegistry& r);
void registerStringKernels(KernelRegistry& r);
void registerBoolReductionKernels(KernelRegistry& r);
void registerLabelEncoderKernels(KernelRegistry& r);
void registerRoiAlignKernels(KernelRegistry& r);
void registerControlFlowKernels(KernelRegistry& r);  // control_flow.cpp: If, Loop, Scan
void registerSequenceKernels(KernelRegistry& r);     // sequence_ops.cpp: sequences, optionals
// Composite fusectl ops of the transformer fusions (attention.cpp).
void registerAttentionKernels(KernelRegistry& r);
// Issue 12's transformer ops, one file each.
void registerSwiGLUKernels(KernelRegistry& r);             // swiglu.cpp
void registerElementwiseProgramKernels(KernelRegistry& r);  // elementwise_program.cpp
void registerFusedRotaryKernels(KernelRegistry& r);       // rotary_fused.cpp
void registerGeluApproximationKernels(KernelRegistry& r);  // gelu_approximations.cpp
// The fused norms of domain fusectl (norms_fused.cpp).
void registerFusedNormKernels(KernelRegistry& r);
// Issue 15's standard opset-23+ transformer ops (std_attention.cpp, std_norms.cpp, std_rotary.cpp,
// std_activations.cpp, tensor_scatter.cpp).
void registerStdAttentionKernels(KernelRegistry& r);
void registerStdNormKernels(KernelRegistry& r);
void registerStdRotaryKernels(KernelRegistry& r);
void registerStdActivationKernels(KernelRegistry& r);
void registerTensorScatterKernels(KernelRegistry& r);
void registerBitCastKernels(KernelRegistry& r);           // bitcast.cpp
void registerCausalConvKernels(KernelRegistry& r);        // causal_conv.cpp
void registerLinearAttentionKernels(KernelRegistry& r);   // linear_attention.cpp
void registerDeformConvKernels(KernelRegistry& r);        // deform_conv.cpp
void registerExpandDepthwiseConvKernels(KernelRegistry& r);  // conv_expand_depthwise.cpp
void registerTreeEnsembleKernels(KernelRegistry& r);      // tree_ensemble.cpp
void registerFlexAttentionKernels(KernelRegistry& r);     // flex_attention.cpp
void registerMlFeatureKernels(KernelRegistry& r);         // ml_feature_ops.cpp

void registerAllKernels(KernelRegistry& r) {
  registerConvKernels(r);
  registerGemmKernels(r);
  registerPoolKernels(r);
  registerNormKernels(r);
  registerResizeKernels(r);
  registerQuantizeKernels(r);
  registerElementwiseKernels(r);
  registerReduceKernels(r);
  registerTensorKernels(r);
  registerLossKernels(r);
  registerScatterGatherKernels(r);
  registerGridSampleKernels(r);
  registerNmsKernels(r);
  registerSignalKernels(r);
  registerLpKernels(r);
  registerUniqueKernels(r);
  registerCenterCropPadKernels(r);
  registerCol2ImKernels(r);
  registerRecurrentKernels(r);
  registerChannelNormKernels(r);
  registerIndexKernels(r);
  registerDetKernels(r);
  registerDynamicQuantizeKernels(r);
  registerTrainingOptimizerKernels(r);
  registerStringKernels(r);
  registerBoolReductionKernels(r);
  registerLabelEncoderKernels(r);
  registerRoiAlignKernels(r);
  registerAttentionKernels(r);
  registerSwiGLUKernels(r);
  registerElementwiseProgramKernels(r);
  registerFusedRotaryKernels(r);
  registerGeluApproximationKernels(r);
  registerFusedNormKernels(r);
  registerStdAttentionKernels(r);
  registerStdNormKernels(r);
  registerStdRotaryKernels(r);
  registerStdActivationKernels(r);
  registerTensorScatterKernels(r);
  registerBitCastKernels(r);
  registerCausalConvKernels(r);
  registerLinearAttentionKernels(r);
  registerDeformConvKernels(r);
  registerExpandDepthwiseConvKernels(r);
  registerTreeEnsembleKernels(r);
  registerFlexAttentionKernels(r);
  registerMlFeatureKernels(r);
  registerControlFlowKernels(r);
  registerSequenceKernels(r);
}

}  // namespace fusectl::kernels
