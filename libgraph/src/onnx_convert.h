// Internal bridge between fusectl's IR and ONNX protobuf messages; ONNX types stay out of the
// public headers, so everything that touches onnx::*Proto meets here.
//
// The format readers and writers below never call one another: model_file.cpp (onnx_io.h's
// entry points) decides which format a file or path holds and composes them, and all of them
// use the file helpers at the end, which call none of them.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <memory>
#include <string>

#include "fusectl/graph/onnx_io.h"

namespace fusectl::onnx_convert {

// ---- import (onnx_import.cpp) ----

// LoadOptions' resource limits, which every importer enforces.
struct ImportLimits {
  uint64_t max_tensor_bytes = LoadOptions::kDefaultMaxTensorBytes;
  int max_subgraph_depth = LoadOptions::kDefaultMaxSubgraphDepth;
};

// Converts a parsed ModelProto, validating it; raw_data strings are moved out of `proto`, not
// copied. Messages read "<display_name>: <reason>". `base_dir` resolves external data.
std::unique_ptr<Model> importModel(onnx::ModelProto& proto, const std::string& display_name,
                                   const std::string& base_dir, const ImportLimits& limits = {});
// Serialized ModelProto bytes -> Model. `owner` keeps `data` alive: the main graph's raw
// initializer data is referenced in place. Bytes that are no binary model (text among them)
// fail with the reason.
std::unique_ptr<Model> importBinaryModel(const uint8_t* data, size_t size,
                                         const std::shared_ptr<const void>& owner,
                                         const std::string& display_name,
                                         const std::string& base_dir,
                                         const ImportLimits& limits = {});
// A standalone tensor (a .pb file); `what` names it in messages.
Tensor importTensor(onnx::TensorProto& proto, const std::string& what, const std::string& base_dir,
                    const ImportLimits& limits = {});
// Serialized TensorProto bytes -> Tensor; `name`, when given, receives the tensor's name.
Tensor importBinaryTensor(std::string bytes, const std::string& display_name,
                          const std::string& base_dir, std::string* name);

// ---- ONNX textual syntax (onnx_text.cpp) ----

// Text -> ModelProto, with fusectl's "#@" directives applied; `out` starts empty. Messages read
// "<display_name>: <reason>".
void parseText(const std::string& text, const std::string& display_name, onnx::ModelProto* out);
std::string printText(const onnx::ModelProto& model);

// ---- export (onnx_export.cpp) ----

// Writes tensors of at least `threshold` bytes into one data file beside the model.
class ExternalDataWriter;

struct ExportOptions {
  bool write_value_info = true;
  ExternalDataWriter* external = nullptr;
};

void exportModel(const Model& model, onnx::ModelProto* out, const ExportOptions& options = {});
void exportGraph(const Graph& graph, onnx::GraphProto* out, const ExportOptions& options = {});
void exportAttribute(const Attribute& attr, onnx::AttributeProto* out,
                     const ExportOptions& options = {});
// Data as raw_data (strings as string_data).
void exportTensor(const Tensor& tensor, const std::string& name, onnx::TensorProto* out);
// False when the type is entirely unknown and ValueInfoProto.type should stay unset.
bool exportType(const ValueType& type, onnx::TypeProto* out);

// Serialized bytes with deterministic serialization (file_io.cpp).
std::string serializeDeterministic(const google::protobuf::MessageLite& message);

// Serialized ModelProto, data inline, streamed from the IR without a ModelProto of the graph.
std::string exportBinaryModel(const Model& model);
// Writes the binary model to `path` atomically. Tensors of at least options.size_threshold bytes
// go to `external_location` (relative to path's folder, already checked to stay inside it)
// unless it is empty.
void saveBinaryModel(const Model& model, const std::string& path,
                     const std::string& external_location, const SaveOptions& options);
// Serialized TensorProto (a .pb file).
std::string exportBinaryTensor(const Tensor& tensor, const std::string& name);

// ---- files (file_io.cpp) ----

// True when a relative location would leave its folder: absolute, or ".." below the start.
bool escapesFolder(const std::string& location);

// Whole file into memory; fusectl::Error (Io) naming the path when it cannot be read.
std::string readFile(const std::string& path);
std::string parentDir(const std::string& path);  // "." for a bare file name

// A file written under a temporary name in its final folder, fsync'ed and renamed into place by
// commit(); destroyed uncommitted, it removes the temporary file.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  uint64_t bytesWritten() const { return written_; }
  // Writes at `offset`, apart from write()'s position: threads may write disjoint ranges at
  // once. A file is written in one of the two ways, not both.
  void writeAt(uint64_t offset, const void* data, size_t size);
  // Starts writing the range to disk (best effort), so that commit()'s fsync waits for less.
  void startWriteback(uint64_t offset, uint64_t size);
  void commit();  // finish(), then publish()
  // The two halves of commit(), for files that are published together: finish() writes the
  // rest, syncs and closes; publish() renames the file into place.
  void finish();
  void publish();

 private:
  void flush();
  void writeAll(const char* data, size_t size);
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::string pending_;  // small writes are batched
  uint64_t written_ = 0;
  uint64_t handed_to_kernel_ = 0;   // bytes write() has taken
  uint64_t writeback_started_ = 0;  // of those, bytes whose writeback has been started
  bool committed_ = false;
  int cleanup_slot_ = -1;  // temp_file_registry.h: removed on SIGINT/SIGTERM while unfinished
};

}  // namespace fusectl::onnx_convert
