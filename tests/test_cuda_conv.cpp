// The cuDNN kernels (libkernels/cuda/conv_cudnn.cpp) against the CPU kernels: Conv, FusedConv,
// MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool, one node per model, on the paths
// the kernels choose between (cuDNN's fused bias + residual + Relu call, a convolution followed
// by the epilogue kernel, the zero-padded copy of X for asymmetric pads, pools whose output cuDNN
// would size differently). float32 to a normalised MSE of 1e-7 (the convolutions run without
// TF32), float16 to 1e-5, bfloat16 to 1e-4. Without a GPU every case says so and passes.
#include <catch2/catch.hpp>

#include <string>

#include "cuda_case.h"

namespace {

using fusectl::testing::checkCudaAgainstCpu;
using fusectl::testing::cudaDeviceOrSkip;

constexpr double kFloatNmse = 1e-7;
constexpr double kHalfNmse = 1e-5;
// Both backends convolve the same bfloat16 values with float32 sums and round Y once (8
// significant bits: up to 2^-8 relative, an nmse up to about 5e-6); the epilogue-kernel path
// rounds the convolution before its epilogue, twice in all. 1e-4 keeps a 10x margin over that
// and still catches a wrong weight, pad or window (an nmse near 1).
constexpr double kBFloat16Nmse = 1e-4;

// A one-graph model in ONNX textual syntax with the fusectl domain imported.
std::string model(const std::string& inputs, const std::string& outputs, const std::string& body) {
  return "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\ng (" + inputs + ") => (" +
         outputs + ")\n{\n" + body + "\n}\n";
}

}  // namespace

TEST_CASE("cuda conv: 3x3 with bias, stride 1 and 2", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkCudaAgainstCpu(model("float[2, 8, 16, 16] X, float[16, 8, 3, 3] W, float[16] B",
                            "float[2, 16, 16, 16] Y",
                            "Y = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (X, W, B)"),
                      kFloatNmse);
  checkCudaAgainstCpu(
      model("float[2, 8, 16, 16] X, float[16, 8, 3, 3] W, float[16] B", "float[2, 16, 8, 8] Y",
            "Y = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (X, W, B)"),
      kFloatNmse);
}

TEST_CASE("cuda conv: 1x1, grouped, depthwise and dilated", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkCudaAgainstCpu(model("float[2, 8, 16, 16] X, float[16, 8, 1, 1] W", "float[2, 16, 16, 16] Y",
                            "Y = Conv (X, W)"),
                      kFloatNmse);
  checkCudaAgainstCpu(model("float[1, 8, 10, 10] X, float[12, 4, 3, 3] W, float[12] B",
                            "float[1, 12, 10, 10] Y",
                            "Y = Conv <group = 2, pads = [1, 1, 1, 1]> (X, W, B)"),
                      kFloatNmse);
  checkCudaAgainstCpu(model("float[1, 8, 10, 10] X, float[8, 1, 3, 3] W, float[8] B",
                            "float[1, 8, 5, 5] Y",
                            "Y = Conv <group = 8, pads = [1, 1, 1, 1], "
                            "strides = [2, 2]> (X, W, B)"),
                      kFloatNmse);
  checkCudaAgainstCpu(model("float[1, 4, 12, 12] X, float[6, 4, 3, 3] W", "float[1, 6, 12, 12] Y",
                            "Y = Conv <dilations = [2, 2], pads = [2, 2, 2, 2]> (X, W)"),
                      kFloatNmse);
}

TEST_CASE("cuda conv: asymmetric pads go through a zero-padded copy of X", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // SAME_UPPER, stride 2, even input: one pad at the end only.
  checkCudaAgainstCpu(model("float[1, 4, 8, 8] X, float[6, 4, 3, 3] W, float[6] B",
                            "float[1, 6, 4, 4] Y",
                            "Y = Conv <auto_pad = \"SAME_UPPER\", strides = [2, 2]> (X, W, B)"),
                      kFloatNmse);
  // More padding before than after in one dim, after than before in the other.
  checkCudaAgainstCpu(model("float[1, 4, 8, 8] X, float[6, 4, 3, 3] W", "float[1, 6, 7, 8] Y",
                            "Y = Conv <pads = [1, 0, 0, 2]> (X, W)"),
                      kFloatNmse);
}

TEST_CASE("cuda conv: 1-D and 3-D", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkCudaAgainstCpu(model("float[2, 4, 20] X, float[6, 4, 5] W, float[6] B", "float[2, 6, 10] Y",
                            "Y = Conv <pads = [2, 2], strides = [2]> (X, W, B)"),
                      kFloatNmse);
  checkCudaAgainstCpu(
      model("float[1, 3, 6, 6, 6] X, float[4, 3, 3, 3, 3] W, float[4] B",
            "float[1, 4, 6, 6, 6] Y", "Y = Conv <pads = [1, 1, 1, 1, 1, 1]> (X, W, B)"),
      kFloatNmse);
}

TEST_CASE("cuda conv: FusedConv through cuDNN's fused call", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  const std::string inputs =
      "float[2, 8, 12, 12] X, float[16, 8, 3, 3] W, float[16] B, float[2, 16, 12, 12] Z";
  // Bias + residual + Relu, and bias + residual (identity: IMPLICIT_PRECOMP_GEMM): one cuDNN
  // call each. Two launches would mean cuDNN refused the fused call and the kernel fell back
  // to a convolution and the epilogue kernel (still correct, but the fused path is untested).
  {
    auto r = checkCudaAgainstCpu(
        model(inputs, "float[2, 16, 12, 12] Y",
              "Y = fusectl.FusedConv <activation = \"Relu\", pads = [1, 1, 1, 1]> (X, W, B, Z)"),
        kFloatNmse);
    CHECK(r.stats.device_launches == 1);
  }
  {
    auto r = checkCudaAgainstCpu(
        model(inputs, "float[2, 16, 12, 12] Y",
              "Y = fusectl.FusedConv <pads = [1, 1, 1, 1]> (X, W, B, Z)"),
        kFloatNmse);
    CHECK(r.stats.device_launches == 1);
  }
  // Bias + Relu without a residual (alpha2 = 0).
  {
    auto r = checkCudaAgainstCpu(
        model("float[2, 8, 12, 12] X, float[16, 8, 3, 3] W, float[16] B", "float[2, 16, 12, 12] Y",
              "Y = fusectl.FusedConv <activation = \"Relu\", pads = [1, 1, 1, 1]> (X, W, B)"),
        kFloatNmse);
    CHECK(r.stats.device_launches == 1);
  }
  // Asymmetric pads: the zero-padded copy (a memset and a copy) feeds the fused call.
  {
    auto r = checkCudaAgainstCpu(
        model("float[1, 4, 8, 8] X, float[6, 4, 3, 3] W, float[6] B, float[1, 6, 4, 4] Z",
              "float[1, 6, 4, 4] Y",
              "Y = fusectl.FusedConv <activation = \"Relu\", auto_pad = \"SAME_UPPER\", "
              "strides = [2, 2]> (X, W, B, Z)"),
        kFloatNmse);
    CHECK(r.stats.device_launches == 3);
  }
}

TEST_CASE("cuda conv: FusedConv with the epilogue kernel", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  const std::string inputs =
      "float[2, 8, 12, 12] X, float[16, 8, 3, 3] W, float[16] B, float[2, 16, 12, 12] Z";
  for (const char* act : {"HardSwish", "Sigmoid", "Tanh", "Silu", "Gelu"}) {
    INFO(act);
    checkCudaAgainstCpu(model(inputs, "float[2, 16, 12, 12] Y",
                              std::string("Y = fusectl.FusedConv <activation = \"") + act +
                                  "\", pads = [1, 1, 1, 1]> (X, W, B, Z)"),
                        kFloatNmse);
  }
  // Parameters, an omitted bias, and a portable spelling without one.
  checkCudaAgainstCpu(
      model("float[2, 8, 12, 12] X, float[16, 8, 3, 3] W, float[16] B", "float[2, 16, 10, 10] Y",
            "Y = fusectl.FusedConv <activation = \"Clip\", activation_params = [-0.5, 0.5]> "
            "(X, W, B)"),
      kFloatNmse);
  checkCudaAgainstCpu(
      model(inputs, "float[2, 16, 12, 12] Y",
            "Y = fusectl.FusedConv <activation = \"LeakyRelu\", activation_params = [0.2], "
            "pads = [1, 1, 1, 1]> (X, W, , Z)"),
      kFloatNmse);
  checkCudaAgainstCpu(
      model("float[2, 8, 12, 12] X, float[16, 8, 3, 3] W, float[2, 16, 12, 12] Z",
            "float[2, 16, 12, 12] Y",
            "Y = fusectl.FusedConv_NoBias_Add_Relu <pads = [1, 1, 1, 1], activation = \"Relu\"> "
            "(X, W, Z)"),
      kFloatNmse);
  // Depthwise with an epilogue and SAME_LOWER's asymmetric pads (one before): the padded copy
  // and the epilogue together.
  checkCudaAgainstCpu(
      model("float[1, 8, 8, 8] X, float[8, 1, 3, 3] W, float[8] B", "float[1, 8, 4, 4] Y",
            "Y = fusectl.FusedConv <activation = \"HardSigmoid\", auto_pad = \"SAME_LOWER\", "
            "group = 8, strides = [2, 2]> (X, W, B)"),
      kFloatNmse);
}

TEST_CASE("cuda conv: MaxPool", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkCudaAgainstCpu(model("float[2, 8, 15, 15] X", "float[2, 8, 8, 8] Y",
                            "Y = MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], "
                            "strides = [2, 2]> (X)"),
                      kFloatNmse);
  // ceil_mode: a last window that overhangs the input (cuDNN would size Y one smaller).
  checkCudaAgainstCpu(model("float[1, 4, 16, 16] X", "float[1, 4, 8, 8] Y",
                            "Y = MaxPool <kernel_shape = [3, 3], strides = [2, 2], "
                            "ceil_mode = 1> (X)"),
                      kFloatNmse);
  // Asymmetric pads: more before (Y smaller than cuDNN's size), and SAME_UPPER (one after).
  checkCudaAgainstCpu(model("float[1, 4, 9, 9] X", "float[1, 4, 4, 4] Y",
                            "Y = MaxPool <kernel_shape = [3, 3], pads = [1, 1, 0, 0], "
                            "strides = [2, 2]> (X)"),
                      kFloatNmse);
  checkCudaAgainstCpu(model("float[1, 4, 8, 8] X", "float[1, 4, 4, 4] Y",
                            "Y = MaxPool <kernel_shape = [3, 3], auto_pad = \"SAME_UPPER\", "
                            "strides = [2, 2]> (X)"),
                      kFloatNmse);
  checkCudaAgainstCpu(model("float[2, 4, 20] X", "float[2, 4, 10] Y",
                            "Y = MaxPool <kernel_shape = [3], pads = [1, 1], strides = [2]> (X)"),
                      kFloatNmse);
  checkCudaAgainstCpu(model("float[1, 2, 6, 6, 6] X", "float[1, 2, 6, 6, 6] Y",
                            "Y = MaxPool <kernel_shape = [3, 3, 3], "
                            "pads = [1, 1, 1, 1, 1, 1]> (X)"),
                      kFloatNmse);
}

TEST_CASE("cuda conv: AveragePool with and without the padding counted", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (int include : {0, 1}) {
    INFO("count_include_pad " << include);
    const std::string cip = ", count_include_pad = " + std::to_string(include);
    checkCudaAgainstCpu(model("float[2, 4, 15, 15] X", "float[2, 4, 8, 8] Y",
                              "Y = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], "
                              "strides = [2, 2]" + cip + "> (X)"),
                        kFloatNmse);
    // ceil_mode with a window past the end padding, which never counts.
    checkCudaAgainstCpu(model("float[1, 4, 16, 16] X", "float[1, 4, 9, 9] Y",
                              "Y = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], "
                              "strides = [2, 2], ceil_mode = 1" + cip + "> (X)"),
                        kFloatNmse);
    // Asymmetric pads.
    checkCudaAgainstCpu(model("float[1, 4, 7, 7] X", "float[1, 4, 4, 4] Y",
                              "Y = AveragePool <kernel_shape = [2, 2], pads = [0, 0, 1, 1], "
                              "strides = [2, 2]" + cip + "> (X)"),
                        kFloatNmse);
    checkCudaAgainstCpu(model("float[2, 4, 20] X", "float[2, 4, 10] Y",
                              "Y = AveragePool <kernel_shape = [3], pads = [1, 1], strides = [2]" +
                                  cip + "> (X)"),
                        kFloatNmse);
    checkCudaAgainstCpu(model("float[1, 2, 7, 7, 7] X", "float[1, 2, 4, 4, 4] Y",
                              "Y = AveragePool <kernel_shape = [2, 2, 2], strides = [2, 2, 2], "
                              "pads = [1, 1, 1, 1, 1, 1]" + cip + "> (X)"),
                        kFloatNmse);
  }
}

TEST_CASE("cuda conv: GlobalAveragePool and GlobalMaxPool", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    INFO(op);
    checkCudaAgainstCpu(
        model("float[2, 16, 7, 7] X", "float[2, 16, 1, 1] Y", std::string("Y = ") + op + " (X)"),
        kFloatNmse);
    checkCudaAgainstCpu(model("float[1, 4, 3, 4, 5] X", "float[1, 4, 1, 1, 1] Y",
                              std::string("Y = ") + op + " (X)"),
                        kFloatNmse);
    checkCudaAgainstCpu(
        model("float[2, 3, 10] X", "float[2, 3, 1] Y", std::string("Y = ") + op + " (X)"),
        kFloatNmse);
  }
}

TEST_CASE("cuda conv: what cuDNN cannot pool runs on the CPU", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  // MaxPool's Indices output, and dilations.
  auto r = checkCudaAgainstCpu(
      model("float[1, 4, 8, 8] X", "float[1, 4, 4, 4] Y, int64[1, 4, 4, 4] I",
            "Y, I = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (X)"),
      kFloatNmse, true);
  CHECK(r.stats.fallback_nodes == 1);
  r = checkCudaAgainstCpu(model("float[1, 4, 9, 9] X", "float[1, 4, 5, 5] Y",
                                "Y = MaxPool <kernel_shape = [3, 3], dilations = [2, 2]> (X)"),
                          kFloatNmse, true);
  CHECK(r.stats.fallback_nodes == 1);
}

namespace {

// Each 16-bit type `t` ("float16" or "bfloat16") on every path: a direct, a grouped and a
// padded-copy convolution, cuDNN's fused call (Relu) and the epilogue kernel (HardSwish), the
// pools.
void checkSixteenBit(const std::string& t, double nmse) {
  const auto T = [&t](const std::string& dims_and_name) { return t + dims_and_name; };
  checkCudaAgainstCpu(model(T("[2, 8, 16, 16] X, ") + T("[16, 8, 3, 3] W, ") + T("[16] B"),
                            T("[2, 16, 16, 16] Y"), "Y = Conv <pads = [1, 1, 1, 1]> (X, W, B)"),
                      nmse);
  checkCudaAgainstCpu(model(T("[1, 8, 10, 10] X, ") + T("[8, 1, 3, 3] W, ") + T("[8] B"),
                            T("[1, 8, 5, 5] Y"),
                            "Y = Conv <group = 8, pads = [1, 1, 1, 1], "
                            "strides = [2, 2]> (X, W, B)"),
                      nmse);
  checkCudaAgainstCpu(model(T("[1, 4, 8, 8] X, ") + T("[6, 4, 3, 3] W"), T("[1, 6, 4, 4] Y"),
                            "Y = Conv <auto_pad = \"SAME_UPPER\", strides = [2, 2]> (X, W)"),
                      nmse);
  const std::string inputs = T("[2, 8, 12, 12] X, ") + T("[16, 8, 3, 3] W, ") + T("[16] B, ") +
                             T("[2, 16, 12, 12] Z");
  for (const char* act : {"Relu", "HardSwish"}) {
    INFO(act);
    checkCudaAgainstCpu(model(inputs, T("[2, 16, 12, 12] Y"),
                              std::string("Y = fusectl.FusedConv <activation = \"") + act +
                                  "\", pads = [1, 1, 1, 1]> (X, W, B, Z)"),
                        nmse);
  }
  checkCudaAgainstCpu(model(T("[2, 8, 15, 15] X"), T("[2, 8, 8, 8] Y"),
                            "Y = MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], "
                            "strides = [2, 2]> (X)"),
                      nmse);
  for (int include : {0, 1}) {
    INFO("count_include_pad " << include);
    checkCudaAgainstCpu(model(T("[1, 4, 16, 16] X"), T("[1, 4, 9, 9] Y"),
                              "Y = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], "
                              "strides = [2, 2], ceil_mode = 1, count_include_pad = " +
                                  std::to_string(include) + "> (X)"),
                        nmse);
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    INFO(op);
    checkCudaAgainstCpu(model(T("[2, 16, 7, 7] X"), T("[2, 16, 1, 1] Y"),
                              std::string("Y = ") + op + " (X)"),
                        nmse);
  }
}

}  // namespace

TEST_CASE("cuda conv: float16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkSixteenBit("float16", kHalfNmse);
}

TEST_CASE("cuda conv: bfloat16", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  checkSixteenBit("bfloat16", kBFloat16Nmse);
}

// Placement only (no GPU needed): the bfloat16 nodes resolve to the cuDNN kernels.
TEST_CASE("cuda conv: bfloat16 nodes are placed on the GPU", "[cuda]") {
  if (!fusectl::cuda::builtWithCuda()) return;
  const std::string nodes[] = {
      "Y = Conv <pads = [1, 1, 1, 1]> (X, W, B)",
      "Y = fusectl.FusedConv <activation = \"Relu\", pads = [1, 1, 1, 1]> (X, W, B)",
      "Y = MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (X)",
      "Y = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (X)",
  };
  for (const std::string& node : nodes) {
    const std::string text = model(
        "bfloat16[1, 8, 6, 6] X, bfloat16[8, 8, 3, 3] W, bfloat16[8] B", "bfloat16[1, 8, 6, 6] Y",
        node);
    INFO(text);
    CHECK(fusectl::testing::cudaFallbackNodes(*fusectl::parseModelText(text, "<conv test>"))
              .empty());
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    const std::string text = model("bfloat16[1, 8, 6, 6] X", "bfloat16[1, 8, 1, 1] Y",
                                   std::string("Y = ") + op + " (X)");
    INFO(text);
    CHECK(fusectl::testing::cudaFallbackNodes(*fusectl::parseModelText(text, "<conv test>"))
              .empty());
  }
}
