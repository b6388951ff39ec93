// Internal bridge between fusectl's IR and ONNX protobuf messages; ONNX types stay out of the
// public headers, so everything that touches onnx::*Proto meets here.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <memory>
#include <string>

#include "fusectl/graph/onnx_io.h"

namespace fusectl::onnx_convert {

// ---- import (onnx_import.cpp) ----

// Converts a parsed ModelProto, validating it; raw_data strings are moved out of `proto`, not
// copied. Messages read "<display_name>: <reason>". `base_dir` resolves external data.
std::unique_ptr<Model> importModel(onnx::ModelProto& proto, const std::string& display_name,
                                   const std::string& base_dir);
// Runs what LoadOptions asks for after import (shape inference).
void finishLoad(Model& model, const LoadOptions& options, const std::string& display_name);
// A standalone tensor (a .pb file); `what` names it in messages.
Tensor importTensor(onnx::TensorProto& proto, const std::string& what, const std::string& base_dir);

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

// ---- files (file_io.cpp) ----

// ".onnxtxt" or ".txt": ONNX textual syntax.
bool hasTextExtension(const std::string& path);
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
  void commit();

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
};

}  // namespace fusectl::onnx_convert
