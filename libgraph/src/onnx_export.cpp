// fusectl::Model -> ONNX ModelProto bytes, deterministic and without copying weights.
//
// The main graph is serialized by hand, field by field in field-number order (exactly what
// protobuf itself emits), so that initializer bytes go from their Buffers straight into the
// output file: a ModelProto holding copies of every weight would double peak memory. Nodes
// are serialized one at a time through a reused NodeProto. Everything else (subgraphs, value
// infos, small messages) goes through protobuf with deterministic serialization.
//
// External data: tensors of at least SaveOptions::size_threshold bytes go to one data file
// beside the model, each at an offset aligned to 64 bytes (4096 for tensors of a page or more,
// so that they can be mapped directly). When no external file is named and the inline model
// would pass ~1.9 GB, saveModel uses "<output file name>.data" by itself, since protobuf
// cannot hold more than 2 GB.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "onnx_convert.h"

namespace fusectl {
namespace onnx_convert {

class ExternalDataWriter {
 public:
  ExternalDataWriter(std::string location, const std::string& path, uint64_t threshold)
      : location_(std::move(location)), file_(path), threshold_(threshold) {}

  bool wants(const Tensor& t) const {
    return t.dtype() != DType::String && t.byteSize() > 0 && t.byteSize() >= threshold_;
  }

  // Writes the tensor's bytes and points `out` (which has dims, type and name) at them.
  void place(const Tensor& t, onnx::TensorProto* out) {
    static const char zeros[4096] = {};
    uint64_t align = t.byteSize() >= 4096 ? 4096 : 64;
    uint64_t offset = (file_.bytesWritten() + align - 1) / align * align;
    file_.write(zeros, static_cast<size_t>(offset - file_.bytesWritten()));
    file_.write(t.bytes(), t.byteSize());
    auto add = [&](const char* key, std::string value) {
      auto* entry = out->add_external_data();
      entry->set_key(key);
      entry->set_value(std::move(value));
    };
    add("location", location_);
    add("offset", std::to_string(offset));
    add("length", std::to_string(t.byteSize()));
    out->set_data_location(onnx::TensorProto::EXTERNAL);
  }

  void commit() { file_.commit(); }

 private:
  std::string location_;
  AtomicFile file_;
  uint64_t threshold_;
};

namespace {

using google::protobuf::MessageLite;

constexpr int kLengthDelimited = 2;

void appendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void appendTag(std::string& out, int field) {
  appendVarint(out, static_cast<uint64_t>(field) << 3 | kLengthDelimited);
}

// Appends the message's bytes, without tag or length; `size` is its ByteSizeLong(), which
// also caches the sizes of nested messages for the serializer.
void appendSerialized(std::string& out, const MessageLite& m, size_t size) {
  size_t at = out.size();
  out.resize(at + size);
  google::protobuf::io::ArrayOutputStream array(out.data() + at, static_cast<int>(size));
  google::protobuf::io::CodedOutputStream coded(&array);
  coded.SetSerializationDeterministic(true);
  m.SerializeWithCachedSizes(&coded);
}

void appendMessage(std::string& out, const MessageLite& m) {
  appendSerialized(out, m, m.ByteSizeLong());
}

// Appends `m` as embedded-message field `field`.
void appendField(std::string& out, int field, const MessageLite& m) {
  size_t size = m.ByteSizeLong();
  appendTag(out, field);
  appendVarint(out, size);
  appendSerialized(out, m, size);
}

struct Sink {
  virtual ~Sink() = default;
  virtual void write(const void* data, size_t size) = 0;
};

struct StringSink : Sink {
  std::string& out;
  explicit StringSink(std::string& o) : out(o) {}
  void write(const void* data, size_t size) override {
    out.append(static_cast<const char*>(data), size);
  }
};

struct FileSink : Sink {
  AtomicFile& file;
  explicit FileSink(AtomicFile& f) : file(f) {}
  void write(const void* data, size_t size) override { file.write(data, size); }
};

// Serialized bytes interleaved with weight bytes that stay where they are.
struct Chunks {
  struct Borrowed {
    size_t at;  // position in `bytes` the borrowed bytes come before
    const uint8_t* data;
    size_t size;
  };
  std::string bytes;
  std::vector<Borrowed> borrowed;
  uint64_t borrowed_total = 0;

  uint64_t size() const { return bytes.size() + borrowed_total; }
  void borrow(const uint8_t* data, size_t size) {
    borrowed.push_back({bytes.size(), data, size});
    borrowed_total += size;
  }
  void writeTo(Sink& sink) const {
    size_t done = 0;
    for (const Borrowed& b : borrowed) {
      sink.write(bytes.data() + done, b.at - done);
      sink.write(b.data, b.size);
      done = b.at;
    }
    sink.write(bytes.data() + done, bytes.size() - done);
  }
};

void setTensorHeader(const Tensor& t, const std::string& name, onnx::TensorProto* out) {
  for (int64_t d : t.dims()) out->add_dims(d);
  out->set_data_type(static_cast<int32_t>(t.dtype()));
  if (!name.empty()) out->set_name(name);
  if (!t.doc_string.empty()) out->set_doc_string(t.doc_string);
}

void exportTensorWith(const Tensor& t, const std::string& name, onnx::TensorProto* out,
                      const ExportOptions& options) {
  if (options.external && options.external->wants(t)) {
    setTensorHeader(t, name, out);
    options.external->place(t, out);
    return;
  }
  exportTensor(t, name, out);
}

void exportValueInfo(const Value& v, onnx::ValueInfoProto* out) {
  out->set_name(v.name());
  if (!exportType(v.type, out->mutable_type())) out->clear_type();
  if (!v.doc_string.empty()) out->set_doc_string(v.doc_string);
}

void exportNode(const Node& n, onnx::NodeProto* out, const ExportOptions& options) {
  for (const Value* v : n.inputs()) out->add_input(v ? v->name() : std::string());
  for (const Value* v : n.outputs()) out->add_output(v ? v->name() : std::string());
  if (!n.name().empty()) out->set_name(n.name());
  out->set_op_type(n.opType());
  if (!n.domain().empty()) out->set_domain(n.domain());
  for (const Attribute& a : n.attributes()) exportAttribute(a, out->add_attribute(), options);
  if (!n.doc_string.empty()) out->set_doc_string(n.doc_string);
}

// GraphProto fields after initializer (5): doc_string, input, output (10-12), value_info (13),
// quantization_annotation and sparse_initializer (14, 15).
void exportGraphSignature(const Graph& g, onnx::GraphProto* out) {
  if (!g.doc_string.empty()) out->set_doc_string(g.doc_string);
  for (const Value* v : g.inputs()) exportValueInfo(*v, out->add_input());
  for (const Value* v : g.outputs()) exportValueInfo(*v, out->add_output());
}

// Intermediate values worth a value_info entry: a known type or a doc string.
template <typename Fn>
void forEachValueInfo(const Graph& g, Fn&& fn) {
  for (const Node* n : g.nodes()) {
    for (const Value* v : n->outputs()) {
      if (!v || v->isGraphOutput()) continue;
      bool typed = v->type.dtype != DType::Undefined || !v->type.isTensor();
      if (typed || !v->doc_string.empty()) fn(*v);
    }
  }
}

void exportGraphAnnotations(const Graph& g, onnx::GraphProto* out) {
  for (const std::string& q : g.quantization_annotations)
    out->add_quantization_annotation()->ParseFromString(q);
  for (const std::string& s : g.sparse_initializers)
    out->add_sparse_initializer()->ParseFromString(s);
}

// ModelProto fields before graph (7) and after it.
void exportModelHead(const Model& m, onnx::ModelProto* out) {
  out->set_ir_version(m.ir_version);
  if (!m.producer_name.empty()) out->set_producer_name(m.producer_name);
  if (!m.producer_version.empty()) out->set_producer_version(m.producer_version);
  if (!m.domain.empty()) out->set_domain(m.domain);
  if (m.model_version != 0) out->set_model_version(m.model_version);
  if (!m.doc_string.empty()) out->set_doc_string(m.doc_string);
}

void exportModelTail(const Model& m, onnx::ModelProto* out) {
  for (const OpsetImport& o : m.opset_imports) {
    auto* op = out->add_opset_import();
    op->set_domain(o.domain);
    op->set_version(o.version);
  }
  for (const auto& [key, value] : m.metadata_props) {
    auto* p = out->add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }
  for (const std::string& t : m.training_info) out->add_training_info()->ParseFromString(t);
  for (const std::string& f : m.functions) out->add_functions()->ParseFromString(f);
}

// The main graph's GraphProto bytes, initializer data borrowed from the tensors.
Chunks serializeMainGraph(const Graph& g, const ExportOptions& options) {
  Chunks c;
  // Rough serialized sizes of a node and an initializer header: growing a string of hundreds
  // of megabytes by doubling would copy it several times.
  c.bytes.reserve(g.numNodes() * 96 + g.initializers().size() * 48 + 4096);
  onnx::NodeProto node;
  for (const Node* n : g.nodes()) {
    node.Clear();
    exportNode(*n, &node, options);
    appendField(c.bytes, 1, node);
  }
  if (!g.name.empty()) {
    appendTag(c.bytes, 2);
    appendVarint(c.bytes, g.name.size());
    c.bytes.append(g.name);
  }
  onnx::TensorProto head;
  onnx::TensorProto tail;
  for (const Value* v : g.initializers()) {
    const Tensor& t = *v->initializer();
    if (t.dtype() == DType::String || (options.external && options.external->wants(t))) {
      onnx::TensorProto full;
      exportTensorWith(t, v->name(), &full, options);
      appendField(c.bytes, 5, full);
      continue;
    }
    // TensorProto fields: dims(1) data_type(2) name(8) | raw_data(9) | doc_string(12).
    head.Clear();
    tail.Clear();
    for (int64_t d : t.dims()) head.add_dims(d);
    head.set_data_type(static_cast<int32_t>(t.dtype()));
    head.set_name(v->name());
    if (!t.doc_string.empty()) tail.set_doc_string(t.doc_string);
    size_t raw = t.byteSize();
    size_t head_size = head.ByteSizeLong();
    size_t tail_size = tail.ByteSizeLong();
    appendTag(c.bytes, 5);
    appendVarint(c.bytes, head_size + 1 + varintSize(raw) + raw + tail_size);
    appendSerialized(c.bytes, head, head_size);
    appendTag(c.bytes, 9);
    appendVarint(c.bytes, raw);
    if (raw > 0) c.borrow(t.bytes(), raw);
    appendSerialized(c.bytes, tail, tail_size);
  }
  // doc_string(10) input(11) output(12) | value_info(13), one at a time | the rest (14, 15).
  onnx::GraphProto signature;
  exportGraphSignature(g, &signature);
  appendMessage(c.bytes, signature);
  if (options.write_value_info) {
    onnx::ValueInfoProto info;
    forEachValueInfo(g, [&](const Value& v) {
      info.Clear();
      exportValueInfo(v, &info);
      appendField(c.bytes, 13, info);
    });
  }
  onnx::GraphProto annotations;
  exportGraphAnnotations(g, &annotations);
  appendMessage(c.bytes, annotations);
  return c;
}

constexpr uint64_t kProtobufLimit = INT_MAX;

// Writes the whole ModelProto; a model over protobuf's limit fails before any byte is written.
void writeModel(const Model& m, Sink& sink, const ExportOptions& options) {
  onnx::ModelProto head;
  exportModelHead(m, &head);
  onnx::ModelProto tail;
  exportModelTail(m, &tail);
  Chunks graph = serializeMainGraph(*m.graph, options);
  std::string before;
  appendMessage(before, head);
  appendTag(before, 7);
  appendVarint(before, graph.size());
  std::string after;
  appendMessage(after, tail);
  uint64_t total = before.size() + graph.size() + after.size();
  if (total > kProtobufLimit)
    throwUnsupported(
        fmt::format("the model is {} bytes, over protobuf's 2 GB limit; save it with "
                    "external data",
                    total));
  sink.write(before.data(), before.size());
  graph.writeTo(sink);
  sink.write(after.data(), after.size());
}

void addTensorBytes(const Graph& g, uint64_t& total) {
  for (const Value* v : g.initializers()) total += v->initializer()->byteSize();
  for (const Node* n : g.nodes()) {
    total += 64;  // rough per-node overhead: names, op type, attributes
    for (const Attribute& a : n->attributes()) {
      total += a.t.byteSize();
      for (const Tensor& t : a.tensors) total += t.byteSize();
      if (a.g) addTensorBytes(*a.g, total);
      for (const auto& sub : a.graphs) addTensorBytes(*sub, total);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Protobuf conversion

bool exportType(const ValueType& type, onnx::TypeProto* out) {
  if (!type.isTensor()) return out->ParseFromString(type.opaque_type_proto);
  if (type.dtype == DType::Undefined && !type.shape.hasRank()) return false;
  auto* tt = out->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(type.dtype));
  if (type.shape.hasRank()) {
    auto* shape = tt->mutable_shape();
    for (const Dim& d : type.shape.dims()) {
      auto* dim = shape->add_dim();
      if (d.isStatic())
        dim->set_dim_value(d.value());
      else if (d.isSymbolic())
        dim->set_dim_param(d.symbol());
    }
  }
  return true;
}

void exportTensor(const Tensor& t, const std::string& name, onnx::TensorProto* out) {
  // Field order does not matter to protobuf's serializer; names follow TensorProto.
  for (int64_t d : t.dims()) out->add_dims(d);
  out->set_data_type(static_cast<int32_t>(t.dtype()));
  if (t.dtype() == DType::String) {
    for (const std::string& s : t.strings()) out->add_string_data(s);
  } else {
    out->set_raw_data(t.bytes()
                          ? std::string(reinterpret_cast<const char*>(t.bytes()), t.byteSize())
                          : std::string());
  }
  if (!name.empty()) out->set_name(name);
  if (!t.doc_string.empty()) out->set_doc_string(t.doc_string);
}

void exportAttribute(const Attribute& a, onnx::AttributeProto* out, const ExportOptions& options) {
  out->set_name(a.name);
  if (a.kind != AttrKind::Undefined)
    out->set_type(static_cast<onnx::AttributeProto::AttributeType>(a.kind));
  if (!a.doc_string.empty()) out->set_doc_string(a.doc_string);
  if (!a.ref_attr_name.empty()) {
    out->set_ref_attr_name(a.ref_attr_name);
    return;  // a reference carries no value of its own
  }
  switch (a.kind) {
    case AttrKind::Undefined: break;
    case AttrKind::Float: out->set_f(a.f); break;
    case AttrKind::Int: out->set_i(a.i); break;
    case AttrKind::String: out->set_s(a.s); break;
    case AttrKind::Tensor: exportTensorWith(a.t, "", out->mutable_t(), options); break;
    case AttrKind::Graph:
      if (a.g) exportGraph(*a.g, out->mutable_g(), options);
      break;
    case AttrKind::Floats: out->mutable_floats()->Add(a.floats.begin(), a.floats.end()); break;
    case AttrKind::Ints: out->mutable_ints()->Add(a.ints.begin(), a.ints.end()); break;
    case AttrKind::Strings:
      for (const std::string& s : a.strings) out->add_strings(s);
      break;
    case AttrKind::Tensors:
      for (const Tensor& t : a.tensors) exportTensorWith(t, "", out->add_tensors(), options);
      break;
    case AttrKind::Graphs:
      for (const auto& g : a.graphs)
        if (g) exportGraph(*g, out->add_graphs(), options);
      break;
    case AttrKind::SparseTensor: out->mutable_sparse_tensor()->ParseFromString(a.s); break;
    case AttrKind::SparseTensors:
      for (const std::string& s : a.strings) out->add_sparse_tensors()->ParseFromString(s);
      break;
    case AttrKind::TypeProto: out->mutable_tp()->ParseFromString(a.s); break;
    case AttrKind::TypeProtos:
      for (const std::string& s : a.strings) out->add_type_protos()->ParseFromString(s);
      break;
  }
}

void exportGraph(const Graph& g, onnx::GraphProto* out, const ExportOptions& options) {
  for (const Node* n : g.nodes()) exportNode(*n, out->add_node(), options);
  if (!g.name.empty()) out->set_name(g.name);
  for (const Value* v : g.initializers())
    exportTensorWith(*v->initializer(), v->name(), out->add_initializer(), options);
  exportGraphSignature(g, out);
  if (options.write_value_info)
    forEachValueInfo(g, [&](const Value& v) { exportValueInfo(v, out->add_value_info()); });
  exportGraphAnnotations(g, out);
}

void exportModel(const Model& model, onnx::ModelProto* out, const ExportOptions& options) {
  exportModelHead(model, out);
  exportGraph(*model.graph, out->mutable_graph(), options);
  exportModelTail(model, out);
}

}  // namespace onnx_convert

// ---------------------------------------------------------------------------------------------
// Entry points

std::string modelToBinary(const Model& model) {
  std::string out;
  onnx_convert::StringSink sink(out);
  onnx_convert::writeModel(model, sink, {});
  return out;
}

void saveModel(const Model& model, const std::string& path, const SaveOptions& options) {
  ModelFormat format = options.format;
  if (format == ModelFormat::Auto)
    format = onnx_convert::hasTextExtension(path) ? ModelFormat::Text : ModelFormat::Binary;
  if (format == ModelFormat::Text) {
    if (!options.external_data_file.empty())
      throw Error(ErrorKind::Usage, path + ": external data needs the binary .onnx format");
    writeFileAtomically(path, modelToText(model));
    return;
  }

  std::string location = options.external_data_file;
  if (location.empty()) {
    uint64_t inline_bytes = 0;
    onnx_convert::addTensorBytes(*model.graph, inline_bytes);
    if (inline_bytes > 1900ull * 1000 * 1000) {
      size_t slash = path.find_last_of('/');
      location = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".data";
    }
  }
  std::unique_ptr<onnx_convert::ExternalDataWriter> external;
  if (!location.empty()) {
    if (onnx_convert::escapesFolder(location))
      throw Error(ErrorKind::Usage, fmt::format("{}: external data file '{}' must be a relative "
                                                "path inside the model's folder",
                                                path, location));
    external = std::make_unique<onnx_convert::ExternalDataWriter>(
        location, onnx_convert::parentDir(path) + "/" + location, options.size_threshold);
  }
  onnx_convert::ExportOptions export_options;
  export_options.write_value_info = options.write_value_info;
  export_options.external = external.get();

  onnx_convert::AtomicFile file(path);
  onnx_convert::FileSink sink(file);
  onnx_convert::writeModel(model, sink, export_options);
  if (external) external->commit();
  file.commit();
}

}  // namespace fusectl
