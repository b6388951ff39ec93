// Loading and saving models: binary .onnx (with external data) and ONNX textual syntax.
//
// Loading validates everything a later stage would trip over (dangling inputs, cycles, values
// written twice, attribute kinds, tensor sizes, external-data paths) and reports it as one
// fusectl::Error naming the file and the reason. It never requires the ONNX checker to accept
// the model: newer opsets than libonnx knows load fine.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl {

enum class ModelFormat { Auto, Binary, Text };

struct LoadOptions {
  ModelFormat format = ModelFormat::Auto;  // Auto: by extension (.onnxtxt/.txt = Text), else sniffed
  bool infer_shapes = true;
  // Maps a model file's pages on the background prefault thread (background_prefault.h), for
  // readers that go through every weight soon (optimize, convert). An executor reads each weight
  // once, packs it and lets its pages go: mapping them all up front would hold the whole file
  // next to the packed copies (ResNet-50's `run` peak: 262 MiB with, 200 MiB without).
  bool prefault_weights = true;
  // Fixes dynamic input shapes before inference (`--shape NAME=1x3x224x224`).
  std::vector<std::pair<std::string, Shape>> input_shapes;
  // Resource limits, so that a hostile or corrupt file is refused with one line instead of
  // exhausting memory or the stack. A tensor here is an initializer, a tensor attribute
  // (Constant's value among them) or a graph input whose declared shape is fully known (what
  // `run` would seed); its byte size counts dims x element size, whatever the file holds.
  uint64_t max_tensor_bytes = kDefaultMaxTensorBytes;
  int max_subgraph_depth = kDefaultMaxSubgraphDepth;  // the main graph is depth 0

  static constexpr uint64_t kDefaultMaxTensorBytes = uint64_t{16} << 30;  // 16 GiB
  static constexpr int kDefaultMaxSubgraphDepth = 64;
};

struct SaveOptions {
  ModelFormat format = ModelFormat::Auto;  // Auto: by the output file's extension
  // When set, tensors of at least size_threshold bytes go to this file, named relative to the
  // output model's folder. Binary format only. When unset and the weights would push the file
  // past ~1.9 GB (protobuf cannot exceed 2 GB), "<output file name>.data" is used.
  std::string external_data_file;
  uint64_t size_threshold = 1024;
  // Write inferred types of intermediate values as value_info (helps Netron and other tools).
  bool write_value_info = true;
};

std::unique_ptr<Model> loadModel(const std::string& path, const LoadOptions& options = {});
// Parses ONNX textual syntax; `display_name` names the source in error messages.
std::unique_ptr<Model> parseModelText(const std::string& text, const std::string& display_name,
                                      const LoadOptions& options = {});
// Serialized ModelProto bytes; `base_dir` resolves external data.
std::unique_ptr<Model> parseModelBinary(std::string bytes, const std::string& display_name,
                                        const std::string& base_dir,
                                        const LoadOptions& options = {});

// Writes atomically (temporary file + rename); never leaves a partial file behind. Returns the
// external-data file it wrote, relative to path's folder (options.external_data_file, or
// "<file name>.data" when the weights need it), or "" for none.
std::string saveModel(const Model& model, const std::string& path, const SaveOptions& options = {});
std::string modelToText(const Model& model);    // ONNX textual syntax
std::string modelToBinary(const Model& model);  // serialized ModelProto, data inline

// Single onnx.TensorProto files (the conformance suite's input_*.pb / output_*.pb).
Tensor loadTensorFile(const std::string& path, std::string* name = nullptr);
void saveTensorFile(const Tensor& t, const std::string& name, const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same folder, then rename.
void writeFileAtomically(const std::string& path, const std::string& bytes);

}  // namespace fusectl
