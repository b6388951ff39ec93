// Model and tensor files (onnx_io.h's entry points): which format a file or path holds, and the
// reader or writer that takes it. The readers and writers (onnx_convert.h) never call one
// another; only this file composes them.
//  - Format: ModelFormat when options name one; otherwise a path ending in .onnxtxt or .txt is
//    ONNX textual syntax and anything else a binary ModelProto, except that on load a file whose
//    first non-blank character is '<' or '#' is read as text whatever its name.
//  - Text is parsed into a ModelProto and imported; the IR is exported to a ModelProto and
//    printed. Binary files are memory-mapped and imported in place; binary saves are streamed
//    from the IR.
//  - External data: on load the importer resolves it against the model's folder; on save this
//    file names the data file (the one asked for, or "<file name>.data" when the weights would
//    pass ~1.9 GB) and refuses names that leave the model's folder.
//  - After every load, the schema check (schema_check.h), then the shape inference LoadOptions
//    asks for.
#include <sys/stat.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/shape_inference.h"
#include "fusectl/support/background_prefault.h"
#include "onnx_convert.h"
#include "fusectl/graph/schema_check.h"

namespace fusectl {
namespace {

// ".onnxtxt" or ".txt": ONNX textual syntax.
bool hasTextExtension(const std::string& path) {
  auto endsWith = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return endsWith(".onnxtxt") || endsWith(".txt");
}

bool sniffText(const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    char c = data[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '<' || c == '#';
  }
  return false;
}

onnx_convert::ImportLimits limitsOf(const LoadOptions& options) {
  return {options.max_tensor_bytes, options.max_subgraph_depth};
}

// libonnx's text parser recurses once per nested graph, unbounded: a file nested a hundred
// thousand levels deep overflows the stack before the importer could count levels. Braces open
// graph bodies (and tensor literals, one level more at most), so their depth, outside string
// literals and comments, bounds the subgraph depth.
void checkTextNesting(const std::string& text, const std::string& display_name, int max_depth) {
  int depth = 0;
  int line = 1;
  bool in_string = false, in_comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      in_comment = false;
    } else if (in_comment) {
    } else if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '#') {
      in_comment = true;
    } else if (c == '{') {
      if (++depth > max_depth + 2)
        throwInvalid(fmt::format("{}: line {}: subgraphs nest deeper than {} levels", display_name,
                                 line, max_depth));
    } else if (c == '}') {
      --depth;
    }
  }
}

// Checks each node against its op's schema, then runs what LoadOptions asks for after import
// (shape inference).
void finishLoad(Model& model, const LoadOptions& options, const std::string& display_name) {
  checkSchemasOrThrow(model, display_name);  // before anything reads the nodes' operands
  if (!options.infer_shapes) return;
  try {
    setInputShapesAndInfer(model, options.input_shapes);
  } catch (const Error& e) {
    std::string message = e.what();
    if (message.compare(0, display_name.size() + 2, display_name + ": ") == 0) throw;
    throw Error(e.kind(), display_name + ": " + message);
  }
}

// Bytes the weights would take inline, roughly (for the ~1.9 GB switch to external data).
void addTensorBytes(const Graph& g, uint64_t& total) {
  for (const Value* v : g.initializers()) total += v->initializer()->byteSize();
  for (const Node* n : g.nodes()) {
    total += 64;  // rough per-node overhead: names, op type, attributes
    for (const Attribute& a : n->attributes()) {
      total += a.t.byteSize();
      for (const Tensor& t : a.tensors) total += t.byteSize();
    }
    n->forEachSubgraph([&](const Graph& sub) { addTensorBytes(sub, total); });
  }
}

}  // namespace

std::unique_ptr<Model> parseModelText(const std::string& text, const std::string& display_name,
                                      const LoadOptions& options) {
  checkTextNesting(text, display_name, options.max_subgraph_depth);
  onnx::ModelProto proto;
  onnx_convert::parseText(text, display_name, &proto);
  std::unique_ptr<Model> model =
      onnx_convert::importModel(proto, display_name, onnx_convert::parentDir(display_name),
                                limitsOf(options));
  finishLoad(*model, options, display_name);
  return model;
}

std::unique_ptr<Model> parseModelBinary(std::string bytes, const std::string& display_name,
                                        const std::string& base_dir, const LoadOptions& options) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  std::unique_ptr<Model> model = onnx_convert::importBinaryModel(
      reinterpret_cast<const uint8_t*>(owner->data()), owner->size(), owner, display_name,
      base_dir, limitsOf(options));
  finishLoad(*model, options, display_name);
  return model;
}

std::unique_ptr<Model> loadModel(const std::string& path, const LoadOptions& options) {
  ModelFormat format = options.format;
  if (format == ModelFormat::Auto && hasTextExtension(path)) format = ModelFormat::Text;
  if (format == ModelFormat::Text)
    return parseModelText(onnx_convert::readFile(path), path, options);
  // A regular file is mapped, and the model's weights keep pointing into the mapping; anything
  // else (a pipe) is read into memory that the weights keep alive instead.
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    Buffer mapped = Buffer::mapFile(path, 0, static_cast<uint64_t>(st.st_size));
    if (options.prefault_weights) {
      prefaultMappingInBackground(mapped.data(), mapped.size());  // read front to back, soon
    }
    data = mapped.data();
    size = mapped.size();
    owner = mapped.owner();
  } else {
    auto bytes = std::make_shared<const std::string>(onnx_convert::readFile(path));
    data = reinterpret_cast<const uint8_t*>(bytes->data());
    size = bytes->size();
    owner = std::move(bytes);
  }
  if (format == ModelFormat::Auto && sniffText(reinterpret_cast<const char*>(data), size))
    return parseModelText(std::string(reinterpret_cast<const char*>(data), size), path, options);
  std::unique_ptr<Model> model =
      onnx_convert::importBinaryModel(data, size, owner, path, onnx_convert::parentDir(path),
                                      limitsOf(options));
  owner.reset();
  finishLoad(*model, options, path);
  return model;
}

std::string modelToText(const Model& model) {
  onnx::ModelProto proto;
  onnx_convert::ExportOptions options;
  onnx_convert::exportModel(model, &proto, options);
  return onnx_convert::printText(proto);
}

std::string modelToBinary(const Model& model) { return onnx_convert::exportBinaryModel(model); }

std::string saveModel(const Model& model, const std::string& path, const SaveOptions& options) {
  ModelFormat format = options.format;
  if (format == ModelFormat::Auto)
    format = hasTextExtension(path) ? ModelFormat::Text : ModelFormat::Binary;
  if (format == ModelFormat::Text) {
    if (!options.external_data_file.empty())
      throw Error(ErrorKind::Usage, path + ": external data needs the binary .onnx format");
    writeFileAtomically(path, modelToText(model));
    return "";
  }

  std::string location = options.external_data_file;
  if (location.empty()) {
    uint64_t inline_bytes = 0;
    addTensorBytes(*model.graph, inline_bytes);
    if (inline_bytes > 1900ull * 1000 * 1000) {
      size_t slash = path.find_last_of('/');
      location = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".data";
    }
  }
  if (!location.empty() && onnx_convert::escapesFolder(location))
    throw Error(ErrorKind::Usage, fmt::format("{}: external data file '{}' must be a relative "
                                              "path inside the model's folder",
                                              path, location));
  onnx_convert::saveBinaryModel(model, path, location, options);
  return location;
}

Tensor loadTensorFile(const std::string& path, std::string* name) {
  return onnx_convert::importBinaryTensor(onnx_convert::readFile(path), path,
                                          onnx_convert::parentDir(path), name);
}

void saveTensorFile(const Tensor& t, const std::string& name, const std::string& path) {
  writeFileAtomically(path, onnx_convert::exportBinaryTensor(t, name));
}

}  // namespace fusectl
