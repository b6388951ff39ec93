// fusectl::Model -> ONNX ModelProto bytes, deterministic and without copying weights.
//
// The main graph is encoded by hand from the IR, field by field in field-number order (exactly
// what protobuf's serializer emits for the same message), and streamed through one small buffer:
// initializer bytes are read from their Buffers as the file is written, and neither a ModelProto
// holding copies of every weight nor the graph's serialized bytes are ever held in memory. The
// graph's length prefix comes first, so the graph is measured in one pass and written in a
// second. Hand encoding covers the messages a million-node graph has millions of: nodes,
// attributes holding numbers, strings and lists of them, tensor value infos and initializer
// headers. Everything rarer (tensor, graph, sparse and type attributes, non-tensor types, string
// tensors, external data, subgraphs, model fields) goes through protobuf with deterministic
// serialization.
//
// External data: tensors of at least SaveOptions::size_threshold bytes go to one data file
// beside the model, each at an offset aligned to 64 bytes (4096 for tensors of a page or more,
// so that they can be mapped directly). When no external file is named and the inline model
// would pass ~1.9 GB, saveModel (model_file.cpp) uses "<output file name>.data" by itself, since
// protobuf cannot hold more than 2 GB.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/support/temp_file_registry.h"
#include "onnx_convert.h"

namespace fusectl {
namespace onnx_convert {

namespace {
// The tensor's bytes; bytes still pending (Buffer::deferred) are produced into `scratch`, and
// the buffer does not keep them: a folded weight costs memory only while it is written.
const uint8_t* streamedBytes(const Tensor& t, std::vector<uint8_t>& scratch) {
  if (!t.buffer().isPending()) return t.bytes();
  scratch.resize(t.byteSize());
  t.copyBytesTo(scratch.data());
  return scratch.data();
}
}  // namespace

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
    file_.write(streamedBytes(t, scratch_), t.byteSize());
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

  void finish() { file_.finish(); }
  void publish() { file_.publish(); }

 private:
  std::string location_;
  AtomicFile file_;
  uint64_t threshold_;
  std::vector<uint8_t> scratch_;  // deferred bytes on their way to the file, one tensor at a time
};

namespace {

using google::protobuf::MessageLite;

// ---------------------------------------------------------------------------------------------
// Protobuf's wire format

enum WireType : uint32_t { kVarint = 0, kLengthDelimited = 2, kFixed32 = 5 };

constexpr uint64_t tagOf(int field, WireType type) {
  return static_cast<uint64_t>(field) << 3 | type;
}

size_t varintSize(uint64_t v) {
  // 7 payload bits per byte; `| 1` gives 0 its one byte.
  return static_cast<size_t>((63 - __builtin_clzll(v | 1)) / 7 + 1);
}

// Protobuf sign-extends int32 and enum values to 64 bits: a negative one takes ten bytes.
uint64_t int32OnWire(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }

size_t varintFieldSize(int field, uint64_t v) {
  return varintSize(tagOf(field, kVarint)) + varintSize(v);
}

size_t fixed32FieldSize(int field) { return varintSize(tagOf(field, kFixed32)) + 4; }

size_t lengthDelimitedFieldSize(int field, uint64_t payload) {
  return varintSize(tagOf(field, kLengthDelimited)) + varintSize(payload) + payload;
}

void appendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void appendTag(std::string& out, int field) { appendVarint(out, tagOf(field, kLengthDelimited)); }

// Appends the message's bytes, without tag or length.
void appendMessage(std::string& out, const MessageLite& m) {
  size_t size = m.ByteSizeLong();  // also caches nested sizes for the serializer
  size_t at = out.size();
  out.resize(at + size);
  google::protobuf::io::ArrayOutputStream array(out.data() + at, static_cast<int>(size));
  google::protobuf::io::CodedOutputStream coded(&array);
  coded.SetSerializationDeterministic(true);
  m.SerializeWithCachedSizes(&coded);
}

std::string serializedBytes(const MessageLite& m) {
  std::string out;
  appendMessage(out, m);
  return out;
}

// Where the model's bytes go, by offset: the graph is written by two threads at once, each
// into its own range (MainGraphEncoder::write).
struct Sink {
  virtual ~Sink() = default;
  // Called once, before the first write, with the number of bytes that will follow.
  virtual void expect(uint64_t total) {}
  // Thread-safe for disjoint ranges.
  virtual void writeAt(uint64_t offset, const void* data, size_t size) = 0;
  // [offset, offset + size) is final: a file may start writing it to disk.
  virtual void finished(uint64_t offset, uint64_t size) {}
};

struct StringSink : Sink {
  std::string& out;
  const size_t base;
  explicit StringSink(std::string& o) : out(o), base(o.size()) {}
  void expect(uint64_t total) override { out.resize(base + total); }
  void writeAt(uint64_t offset, const void* data, size_t size) override {
    std::memcpy(out.data() + base + offset, data, size);
  }
};

struct FileSink : Sink {
  AtomicFile& file;
  explicit FileSink(AtomicFile& f) : file(f) {}
  void writeAt(uint64_t offset, const void* data, size_t size) override {
    file.writeAt(offset, data, size);
  }
  void finished(uint64_t offset, uint64_t size) override { file.startWriteback(offset, size); }
};

// Bytes to a Sink, from `start` on, through one reused buffer: a big graph is millions of small
// fields, too many for a sink call each, and a whole serialized graph held in memory would be
// hundreds of megabytes of fresh pages.
class Writer {
 public:
  Writer(Sink& sink, uint64_t start)
      : sink_(sink),
        buffer_(new char[kBufferSize]),
        pos_(buffer_.get()),
        end_(buffer_.get() + kBufferSize),
        flushed_to_(start),
        finished_to_(start) {}

  void varint(uint64_t v) {
    if (end_ - pos_ < kMaxVarintSize) flush();
    while (v >= 0x80) {
      *pos_++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *pos_++ = static_cast<char>(v);
  }

  void tag(int field, WireType type) { varint(tagOf(field, type)); }

  // Bit for bit (NaN payloads too), little-endian whatever the host.
  void fixed32(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (end_ - pos_ < 4) flush();
    for (int shift = 0; shift < 32; shift += 8) *pos_++ = static_cast<char>(bits >> shift);
  }

  void bytes(const void* data, size_t size) {
    if (size == 0) return;
    if (size > static_cast<size_t>(end_ - pos_)) {
      flush();
      if (size >= kBufferSize) {  // a big weight goes straight from its tensor
        put(data, size);
        return;
      }
    }
    std::memcpy(pos_, data, size);
    pos_ += size;
  }

  // Pending bytes that fit are produced straight into the buffer; the rest as streamedBytes().
  void tensorBytes(const Tensor& t) {
    const size_t size = t.byteSize();
    if (t.buffer().isPending()) {
      if (size > static_cast<size_t>(end_ - pos_)) flush();
      if (size <= static_cast<size_t>(end_ - pos_)) {
        t.copyBytesTo(reinterpret_cast<uint8_t*>(pos_));
        pos_ += size;
        return;
      }
    }
    std::vector<uint8_t> scratch;
    bytes(streamedBytes(t, scratch), size);
  }

  void lengthDelimited(int field, uint64_t size) {
    tag(field, kLengthDelimited);
    varint(size);
  }

  void stringField(int field, const std::string& s) {
    lengthDelimited(field, s.size());
    bytes(s.data(), s.size());
  }

  void flush() {
    size_t pending = static_cast<size_t>(pos_ - buffer_.get());
    if (pending == 0) return;
    put(buffer_.get(), pending);
    pos_ = buffer_.get();
  }

  // Flushes and tells the sink that everything this writer wrote is final.
  void finish() {
    flush();
    markFinished();
  }

  // The offset of the next byte.
  uint64_t position() const { return flushed_to_ + static_cast<uint64_t>(pos_ - buffer_.get()); }

 private:
  static constexpr size_t kBufferSize = 1 << 20;
  static constexpr ptrdiff_t kMaxVarintSize = 10;
  // Finished bytes are handed on in steps this big, so that a file writes them to disk while
  // the rest is still being encoded.
  static constexpr uint64_t kFinishStep = 32u << 20;

  void put(const void* data, size_t size) {
    sink_.writeAt(flushed_to_, data, size);
    flushed_to_ += size;
    if (flushed_to_ - finished_to_ >= kFinishStep) markFinished();
  }

  void markFinished() {
    if (flushed_to_ > finished_to_) sink_.finished(finished_to_, flushed_to_ - finished_to_);
    finished_to_ = flushed_to_;
  }

  Sink& sink_;
  std::unique_ptr<char[]> buffer_;
  char* pos_;
  char* end_;
  uint64_t flushed_to_;
  uint64_t finished_to_;
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
  for (const Value* v : g.outputs()) {
    onnx::ValueInfoProto* info = out->add_output();
    exportValueInfo(*v, info);
    // Graph::declared_output_shapes: a dim still symbolic gets the name the file declared.
    auto declared = g.declared_output_shapes.find(v->name());
    if (declared == g.declared_output_shapes.end() || !v->type.isTensor()) continue;
    const Shape& now = v->type.shape;
    if (!now.hasRank() || now.rank() != declared->second.rank()) continue;
    auto* dims = info->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (size_t i = 0; i < now.rank(); ++i) {
      const Dim& d = declared->second[i];
      if (now[i].isSymbolic() && d.isSymbolic())
        dims->mutable_dim(static_cast<int>(i))->set_dim_param(d.symbol());
    }
  }
}

// A node output worth a value_info entry: an intermediate value with a known type or a doc
// string.
bool wantsValueInfo(const Value* v) {
  if (!v || v->isGraphOutput()) return false;
  bool typed = v->type.dtype != DType::Undefined || !v->type.isTensor();
  return typed || !v->doc_string.empty();
}

template <typename Fn>
void forEachValueInfo(const Graph& g, Fn&& fn) {
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs())
      if (wantsValueInfo(v)) fn(*v);
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

// ---------------------------------------------------------------------------------------------
// The main graph, encoded by hand
//
// Every message below is written exactly as protobuf's serializer writes the message the
// export* functions above fill: fields in field-number order; an optional field present
// whenever its setter is called, zero and empty values included (onnx.proto is proto2);
// repeated scalars unpacked (proto2 packs only fields marked [packed = true]).

// Kinds whose AttributeProto is encoded by hand; the rest (tensors, graphs, sparse tensors,
// type protos) go through exportAttribute().
bool isHandEncodedAttribute(const Attribute& a) {
  if (!a.ref_attr_name.empty()) return true;  // a reference carries no value
  switch (a.kind) {
    case AttrKind::Undefined:
    case AttrKind::Float:
    case AttrKind::Int:
    case AttrKind::String:
    case AttrKind::Floats:
    case AttrKind::Ints:
    case AttrKind::Strings: return true;
    default: return false;
  }
}

// AttributeProto: name(1) f(2) i(3) s(4) floats(7) ints(8) strings(9) doc_string(13) type(20)
// ref_attr_name(21).
size_t attributeSize(const Attribute& a) {
  size_t size = lengthDelimitedFieldSize(1, a.name.size());
  if (a.ref_attr_name.empty()) {
    switch (a.kind) {
      case AttrKind::Float: size += fixed32FieldSize(2); break;
      case AttrKind::Int: size += varintFieldSize(3, static_cast<uint64_t>(a.i)); break;
      case AttrKind::String: size += lengthDelimitedFieldSize(4, a.s.size()); break;
      case AttrKind::Floats: size += a.floats.size() * fixed32FieldSize(7); break;
      case AttrKind::Ints:
        size += a.ints.size() * varintSize(tagOf(8, kVarint));
        for (int64_t v : a.ints) size += varintSize(static_cast<uint64_t>(v));
        break;
      case AttrKind::Strings:
        for (const std::string& s : a.strings) size += lengthDelimitedFieldSize(9, s.size());
        break;
      default: break;
    }
  }
  if (!a.doc_string.empty()) size += lengthDelimitedFieldSize(13, a.doc_string.size());
  if (a.kind != AttrKind::Undefined)
    size += varintFieldSize(20, int32OnWire(static_cast<int32_t>(a.kind)));
  if (!a.ref_attr_name.empty()) size += lengthDelimitedFieldSize(21, a.ref_attr_name.size());
  return size;
}

void writeAttribute(Writer& out, const Attribute& a) {
  out.stringField(1, a.name);
  if (a.ref_attr_name.empty()) {
    switch (a.kind) {
      case AttrKind::Float:
        out.tag(2, kFixed32);
        out.fixed32(a.f);
        break;
      case AttrKind::Int:
        out.tag(3, kVarint);
        out.varint(static_cast<uint64_t>(a.i));
        break;
      case AttrKind::String: out.stringField(4, a.s); break;
      case AttrKind::Floats:
        for (float f : a.floats) {
          out.tag(7, kFixed32);
          out.fixed32(f);
        }
        break;
      case AttrKind::Ints:
        for (int64_t v : a.ints) {
          out.tag(8, kVarint);
          out.varint(static_cast<uint64_t>(v));
        }
        break;
      case AttrKind::Strings:
        for (const std::string& s : a.strings) out.stringField(9, s);
        break;
      default: break;
    }
  }
  if (!a.doc_string.empty()) out.stringField(13, a.doc_string);
  if (a.kind != AttrKind::Undefined) {
    out.tag(20, kVarint);
    out.varint(int32OnWire(static_cast<int32_t>(a.kind)));
  }
  if (!a.ref_attr_name.empty()) out.stringField(21, a.ref_attr_name);
}

// TypeProto{tensor_type(1): TypeProto.Tensor{elem_type(1) shape(2)}}, TensorShapeProto{dim(1)},
// Dimension{dim_value(1) | dim_param(2)}: an unknown dim is an empty Dimension. The type is
// left out exactly when exportType() returns false.
bool hasTensorType(const ValueType& type) {
  return type.dtype != DType::Undefined || type.shape.hasRank();
}

size_t dimSize(const Dim& d) {
  if (d.isStatic()) return varintFieldSize(1, static_cast<uint64_t>(d.value()));
  if (d.isSymbolic()) return lengthDelimitedFieldSize(2, d.symbol().size());
  return 0;
}

// Payload sizes of the nested messages of a tensor type, innermost first.
struct TensorTypeSizes {
  size_t shape = 0;
  size_t tensor = 0;
  size_t type = 0;
};

TensorTypeSizes tensorTypeSizes(const ValueType& type) {
  TensorTypeSizes sizes;
  sizes.tensor = varintFieldSize(1, int32OnWire(static_cast<int32_t>(type.dtype)));
  if (type.shape.hasRank()) {
    for (const Dim& d : type.shape.dims()) sizes.shape += lengthDelimitedFieldSize(1, dimSize(d));
    sizes.tensor += lengthDelimitedFieldSize(2, sizes.shape);
  }
  sizes.type = lengthDelimitedFieldSize(1, sizes.tensor);
  return sizes;
}

void writeTensorType(Writer& out, const ValueType& type, const TensorTypeSizes& sizes) {
  out.lengthDelimited(1, sizes.tensor);
  out.tag(1, kVarint);
  out.varint(int32OnWire(static_cast<int32_t>(type.dtype)));
  if (!type.shape.hasRank()) return;
  out.lengthDelimited(2, sizes.shape);
  for (const Dim& d : type.shape.dims()) {
    out.lengthDelimited(1, dimSize(d));
    if (d.isStatic()) {
      out.tag(1, kVarint);
      out.varint(static_cast<uint64_t>(d.value()));
    } else if (d.isSymbolic()) {
      out.stringField(2, d.symbol());
    }
  }
}

// ValueInfoProto: name(1) type(2) doc_string(3). Tensor types only; the others are opaque
// TypeProto bytes that exportValueInfo() re-serializes.
size_t valueInfoSize(const Value& v) {
  size_t size = lengthDelimitedFieldSize(1, v.name().size());
  if (hasTensorType(v.type)) size += lengthDelimitedFieldSize(2, tensorTypeSizes(v.type).type);
  if (!v.doc_string.empty()) size += lengthDelimitedFieldSize(3, v.doc_string.size());
  return size;
}

void writeValueInfo(Writer& out, const Value& v) {
  out.stringField(1, v.name());
  if (hasTensorType(v.type)) {
    TensorTypeSizes sizes = tensorTypeSizes(v.type);
    out.lengthDelimited(2, sizes.type);
    writeTensorType(out, v.type, sizes);
  }
  if (!v.doc_string.empty()) out.stringField(3, v.doc_string);
}

// TensorProto: dims(1) data_type(2) name(8) raw_data(9) doc_string(12), raw_data written from
// the tensor's own bytes. The main graph has always written the name, even an empty one.
size_t initializerSize(const Tensor& t, const std::string& name) {
  size_t size = t.dims().size() * varintSize(tagOf(1, kVarint));
  for (int64_t d : t.dims()) size += varintSize(static_cast<uint64_t>(d));
  size += varintFieldSize(2, int32OnWire(static_cast<int32_t>(t.dtype())));
  size += lengthDelimitedFieldSize(8, name.size());
  size += lengthDelimitedFieldSize(9, t.byteSize());
  if (!t.doc_string.empty()) size += lengthDelimitedFieldSize(12, t.doc_string.size());
  return size;
}

void writeInitializer(Writer& out, const Tensor& t, const std::string& name) {
  for (int64_t d : t.dims()) {
    out.tag(1, kVarint);
    out.varint(static_cast<uint64_t>(d));
  }
  out.tag(2, kVarint);
  out.varint(int32OnWire(static_cast<int32_t>(t.dtype())));
  out.stringField(8, name);
  out.lengthDelimited(9, t.byteSize());
  out.tensorBytes(t);
  if (!t.doc_string.empty()) out.stringField(12, t.doc_string);
}

// The main graph's GraphProto in two passes over the IR: measure() adds up its size, which the
// length prefix in front of it needs, and write() streams it. write() recomputes each message's
// size instead of keeping millions of them from measure(): arithmetic costs less than memory.
class MainGraphEncoder {
 public:
  MainGraphEncoder(const Graph& g, const ExportOptions& options) : g_(g), options_(options) {}

  uint64_t measure() {
    uint64_t size = 0;
    uint64_t value_infos_size = 0;
    for (const Node* n : g_.nodes()) {
      size_t first_part = parts_.size();
      for (const Attribute& a : n->attributes()) {
        if (isHandEncodedAttribute(a)) continue;
        onnx::AttributeProto proto;
        exportAttribute(a, &proto, options_);
        parts_.push_back(serializedBytes(proto));
      }
      size += lengthDelimitedFieldSize(1, nodeSize(*n, first_part));
      // value_info entries are listed and measured here, while the node's outputs are in the
      // cache: another walk over millions of nodes would miss it at every node.
      if (!options_.write_value_info) continue;
      for (const Value* v : n->outputs()) {
        if (!wantsValueInfo(v)) continue;
        value_infos_.push_back(v);
        if (v->type.isTensor()) {
          value_infos_size += lengthDelimitedFieldSize(13, valueInfoSize(*v));
          continue;
        }
        onnx::ValueInfoProto proto;
        exportValueInfo(*v, &proto);
        value_info_parts_.push_back(serializedBytes(proto));
        value_infos_size += lengthDelimitedFieldSize(13, value_info_parts_.back().size());
      }
    }
    if (!g_.name.empty()) size += lengthDelimitedFieldSize(2, g_.name.size());
    nodes_size_ = size;
    first_initializer_part_ = parts_.size();
    size = 0;
    for (const Value* v : g_.initializers()) {
      const Tensor& t = *v->initializer();
      if (isHandEncodedInitializer(t)) {
        size += lengthDelimitedFieldSize(5, initializerSize(t, v->name()));
        continue;
      }
      onnx::TensorProto proto;
      exportTensorWith(t, v->name(), &proto, options_);
      parts_.push_back(serializedBytes(proto));
      size += lengthDelimitedFieldSize(5, parts_.back().size());
    }
    initializers_size_ = size;
    onnx::GraphProto signature;
    exportGraphSignature(g_, &signature);
    signature_ = serializedBytes(signature);
    onnx::GraphProto annotations;
    exportGraphAnnotations(g_, &annotations);
    annotations_ = serializedBytes(annotations);
    rest_size_ = signature_.size() + value_infos_size + annotations_.size();
    return nodes_size_ + initializers_size_ + rest_size_;
  }

  // After measure(), the graph's bytes from `offset` on, in the order of measure(): node(1)
  // name(2) initializer(5) doc_string, input, output (10-12) value_info(13)
  // quantization_annotation, sparse_initializer (14, 15). Each of the three parts starts at an
  // offset measure() knows, so a big graph's initializers (most of the bytes, with folded
  // weights computed on the way) are written by a second thread while this one encodes the
  // nodes and value infos.
  void write(Sink& sink, uint64_t offset) {
    const uint64_t initializers_at = offset + nodes_size_;
    const uint64_t rest_at = initializers_at + initializers_size_;
    auto initializers = [&] {
      Writer out(sink, initializers_at);
      writeInitializers(out);
      out.finish();
      checkEnd(out, rest_at, "initializers");
    };
    auto rest = [&] {
      Writer out(sink, offset);
      writeNodes(out);
      out.finish();
      checkEnd(out, initializers_at, "nodes");
      Writer tail(sink, rest_at);
      writeRest(tail);
      tail.finish();
      checkEnd(tail, rest_at + rest_size_, "value infos");
    };
    // A second thread pays for itself on big weights only.
    constexpr uint64_t kParallelBytes = 32u << 20;
    if (initializers_size_ < kParallelBytes) {
      rest();
      initializers();
      return;
    }
    std::exception_ptr failure;
    std::thread second = threadWithoutCleanupSignals([&] {
      try {
        initializers();
      } catch (...) {
        failure = std::current_exception();
      }
    });
    try {
      rest();
    } catch (...) {
      second.join();
      throw;
    }
    second.join();
    if (failure) std::rethrow_exception(failure);
  }

 private:
  static void checkEnd(const Writer& out, uint64_t expected, const char* part) {
    if (out.position() != expected)
      throwInternal(fmt::format("saving the graph's {} ended at byte {} where {} was measured",
                                part, out.position(), expected));
  }

  void writeNodes(Writer& out) const {
    size_t next_part = 0;
    auto writePart = [&](int field) { out.stringField(field, parts_[next_part++]); };
    for (const Node* n : g_.nodes()) {
      out.lengthDelimited(1, nodeSize(*n, next_part));
      for (const Value* v : n->inputs()) out.stringField(1, v ? v->name() : kNoName);
      for (const Value* v : n->outputs()) out.stringField(2, v ? v->name() : kNoName);
      if (!n->name().empty()) out.stringField(3, n->name());
      out.stringField(4, n->opType());
      for (const Attribute& a : n->attributes()) {
        if (!isHandEncodedAttribute(a)) {
          writePart(5);
          continue;
        }
        out.lengthDelimited(5, attributeSize(a));
        writeAttribute(out, a);
      }
      if (!n->doc_string.empty()) out.stringField(6, n->doc_string);
      if (!n->domain().empty()) out.stringField(7, n->domain());
    }
    if (!g_.name.empty()) out.stringField(2, g_.name);
  }

  // Reads the graph only: it runs beside writeNodes().
  void writeInitializers(Writer& out) const {
    size_t next_part = first_initializer_part_;
    for (const Value* v : g_.initializers()) {
      const Tensor& t = *v->initializer();
      if (!isHandEncodedInitializer(t)) {
        out.stringField(5, parts_[next_part++]);
        continue;
      }
      out.lengthDelimited(5, initializerSize(t, v->name()));
      writeInitializer(out, t, v->name());
    }
  }

  void writeRest(Writer& out) const {
    out.bytes(signature_.data(), signature_.size());
    size_t next_value_info_part = 0;
    for (const Value* v : value_infos_) {
      if (!v->type.isTensor()) {
        out.stringField(13, value_info_parts_[next_value_info_part++]);
        continue;
      }
      out.lengthDelimited(13, valueInfoSize(*v));
      writeValueInfo(out, *v);
    }
    out.bytes(annotations_.data(), annotations_.size());
  }

  inline static const std::string kNoName;  // an omitted optional input or output

  // String tensors and tensors bound for external data go through exportTensorWith().
  bool isHandEncodedInitializer(const Tensor& t) const {
    return t.dtype() != DType::String && !(options_.external && options_.external->wants(t));
  }

  // NodeProto: input(1) output(2) name(3) op_type(4) attribute(5) doc_string(6) domain(7). The
  // node's attributes left to protobuf are parts_[first_part...], in order.
  size_t nodeSize(const Node& n, size_t first_part) const {
    size_t size = 0;
    for (const Value* v : n.inputs()) size += lengthDelimitedFieldSize(1, v ? v->name().size() : 0);
    for (const Value* v : n.outputs())
      size += lengthDelimitedFieldSize(2, v ? v->name().size() : 0);
    if (!n.name().empty()) size += lengthDelimitedFieldSize(3, n.name().size());
    size += lengthDelimitedFieldSize(4, n.opType().size());
    size_t part = first_part;
    for (const Attribute& a : n.attributes()) {
      size_t attribute = isHandEncodedAttribute(a) ? attributeSize(a) : parts_[part++].size();
      size += lengthDelimitedFieldSize(5, attribute);
    }
    if (!n.doc_string.empty()) size += lengthDelimitedFieldSize(6, n.doc_string.size());
    if (!n.domain().empty()) size += lengthDelimitedFieldSize(7, n.domain().size());
    return size;
  }

  const Graph& g_;
  const ExportOptions& options_;
  // Attributes and initializers protobuf serializes, in the order write() needs them. They are
  // made once, in measure(): making one can write a tensor to the external data file.
  std::vector<std::string> parts_;
  // The value_info entries, and protobuf's bytes for those of non-tensor types.
  std::vector<const Value*> value_infos_;
  std::vector<std::string> value_info_parts_;
  std::string signature_;    // GraphProto fields 10-12
  std::string annotations_;  // GraphProto fields 14, 15
  // The three parts write() puts at their own offsets, and where the initializers' parts start.
  uint64_t nodes_size_ = 0;  // with the graph's name
  uint64_t initializers_size_ = 0;
  uint64_t rest_size_ = 0;
  size_t first_initializer_part_ = 0;
};

constexpr uint64_t kProtobufLimit = INT_MAX;

// Writes the whole ModelProto; a model over protobuf's limit fails before any byte is written.
void writeModel(const Model& m, Sink& sink, const ExportOptions& options) {
  onnx::ModelProto head;
  exportModelHead(m, &head);
  onnx::ModelProto tail;
  exportModelTail(m, &tail);
  MainGraphEncoder graph(*m.graph, options);
  uint64_t graph_size = graph.measure();
  std::string before;
  appendMessage(before, head);
  appendTag(before, 7);
  appendVarint(before, graph_size);
  std::string after;
  appendMessage(after, tail);
  uint64_t total = before.size() + graph_size + after.size();
  if (total > kProtobufLimit)
    throwUnsupported(
        fmt::format("the model is {} bytes, over protobuf's 2 GB limit; save it with "
                    "external data",
                    total));
  sink.expect(total);
  sink.writeAt(0, before.data(), before.size());
  graph.write(sink, before.size());
  sink.writeAt(before.size() + graph_size, after.data(), after.size());
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
    std::string raw(t.byteSize(), '\0');
    t.copyBytesTo(reinterpret_cast<uint8_t*>(raw.data()));
    out->set_raw_data(std::move(raw));
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

std::string exportBinaryModel(const Model& model) {
  std::string out;
  StringSink sink(out);
  writeModel(model, sink, {});
  return out;
}

void saveBinaryModel(const Model& model, const std::string& path,
                     const std::string& external_location, const SaveOptions& options) {
  std::unique_ptr<ExternalDataWriter> external;
  if (!external_location.empty())
    external = std::make_unique<ExternalDataWriter>(
        external_location, parentDir(path) + "/" + external_location, options.size_threshold);
  ExportOptions export_options;
  export_options.write_value_info = options.write_value_info;
  export_options.external = external.get();

  AtomicFile file(path);
  FileSink sink(file);
  writeModel(model, sink, export_options);
  // Both files complete on disk before either is renamed, and no SIGINT/SIGTERM between the two
  // renames: a model never meets data written for another (only SIGKILL or a power cut in
  // the microseconds between the renames could split them).
  if (external) external->finish();
  file.finish();
  CleanupSignalsBlocked not_between_renames;
  if (external) external->publish();
  file.publish();
}

std::string exportBinaryTensor(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  exportTensor(tensor, name, &proto);
  return serializeDeterministic(proto);
}

}  // namespace onnx_convert
}  // namespace fusectl
