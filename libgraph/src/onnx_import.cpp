// ONNX ModelProto -> fusectl::Model, validating everything a later stage would trip over.
//
// Weights are never copied. A binary model file is memory-mapped (model_file.cpp) and its main
// graph read field by field, so raw_data stays in the file's pages and Buffers point at it;
// external data is mapped the same way (one mapping per file, shared by its tensors); raw_data
// that protobuf did parse (subgraphs, text) is swapped out of the message into a Buffer.
// Nodes are imported in file order while that order is topological, which is the common case
// and costs one name lookup per input; the first reference to a value that a later node
// produces switches the rest of the graph to a stable topological sort, which also finds
// cycles. Subgraph values taken from enclosing graphs become outer references, level by level,
// and the owning node lists them as implicit inputs.
#include <sys/stat.h>

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/tensor_limit.h"
#include "onnx_convert.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fusectl stores tensors in ONNX's little-endian layout and assumes a little-endian host"
#endif

namespace fusectl {
namespace onnx_convert {
namespace {

// IR version 13 (onnx 1.20) is the newest the node-test suite uses; what IR 11-13 added
// (float4e2m1, float8e8m0, int2/uint2, device configurations) reads through the same paths.
constexpr int64_t kMaxIrVersion = 13;

template <typename Dims>
std::string dimsStr(const Dims& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

const char* attrTypeName(int t) {
  static const char* const kNames[] = {
      "UNDEFINED",      "FLOAT",      "INT",        "STRING",  "TENSOR", "GRAPH",
      "FLOATS",         "INTS",       "STRINGS",    "TENSORS", "GRAPHS", "SPARSE_TENSOR",
      "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS"};
  return t >= 0 && t < 15 ? kNames[t] : "UNKNOWN";
}

std::string nodeDesc(const onnx::NodeProto& n, size_t index) {
  if (!n.name().empty()) return fmt::format("node '{}' ({})", n.name(), n.op_type());
  if (n.output_size() > 0 && !n.output(0).empty())
    return fmt::format("node #{} ({} -> '{}')", index, n.op_type(), n.output(0));
  return fmt::format("node #{} ({})", index, n.op_type());
}

// External-data files, each mapped once for all the tensors that live in it.
class ExternalFiles {
 public:
  struct File {
    std::string path;
    Buffer whole;
  };
  const File* find(const std::string& resolved) const {
    auto it = files_.find(resolved);
    return it == files_.end() ? nullptr : &it->second;
  }
  const File& add(const std::string& resolved) {
    File f{resolved, {}};
    struct stat st {};
    if (::stat(resolved.c_str(), &st) != 0) throwIo(resolved + ": " + std::strerror(errno));
    f.whole = Buffer::mapFile(resolved, 0, static_cast<uint64_t>(st.st_size));
    return files_.emplace(resolved, std::move(f)).first->second;
  }

 private:
  std::unordered_map<std::string, File> files_;
};

// Names what is being imported ("initializer 'W'") for messages. Formatted only when something
// is wrong: a million nodes must not pay for a million strings nobody reads.
class Subject {
 public:
  template <typename Describe>
  Subject(const Describe& describe)  // NOLINT: implicit from any callable returning a string
      : object_(&describe),
        call_([](const void* o) { return std::string((*static_cast<const Describe*>(o))()); }) {}
  std::string str() const { return call_(object_); }

 private:
  const void* object_;
  std::string (*call_)(const void*);
};

struct Context {
  std::string display;
  std::string base_dir;
  int64_t ir_version = kMaxIrVersion;
  ExternalFiles external;
  std::vector<std::string> external_locations;  // one per file, as the model first names it
  std::string real_base;  // realpath(base_dir), on first use
  ImportLimits limits;
  int subgraph_depth = 0;  // of the graph being imported; the main graph is 0

  [[noreturn]] void fail(const std::string& message) const {
    throwInvalid(display + ": " + message);
  }
  [[noreturn]] void fail(const Subject& what, const std::string& message) const {
    throwInvalid(display + ": " + what.str() + ": " + message);
  }
};

// ---------------------------------------------------------------------------------------------
// Tensors

// Validated byte size for dims; fails on negative dims or overflow.
template <typename Dims>
size_t expectedBytes(const Context& ctx, const Dims& dims, const Subject& what, DType dtype,
                     int64_t* numel_out) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) ctx.fail(what, fmt::format("negative dimension {} in dims {}", d, dimsStr(dims)));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      ctx.fail(what, fmt::format("dims {} overflow int64", dimsStr(dims)));
    n *= d;
  }
  // 16 bytes is the widest element (complex128): keep byte counts far from overflow too.
  if (n > std::numeric_limits<int64_t>::max() / 16)
    ctx.fail(what, fmt::format("dims {} are too large", dimsStr(dims)));
  *numel_out = n;
  const size_t bytes = dtypeStorageBytes(dtype, n);
  // Checked on what the dims declare, before any data is read or allocated: the file may hold
  // fewer bytes than that (a truncated or hostile file), and a later stage would allocate them.
  if (bytes > ctx.limits.max_tensor_bytes)
    ctx.fail(what, tensorOverLimitMessage(dtype, std::vector<int64_t>(dims.begin(), dims.end()),
                                          bytes, ctx.limits.max_tensor_bytes));
  return bytes;
}

Buffer externalBytes(Context& ctx, onnx::TensorProto& tp, const Subject& what,
                     size_t expected) {
  std::string location;
  uint64_t offset = 0;
  bool has_length = false;
  uint64_t length = 0;
  auto parseNumber = [&](const std::string& key, const std::string& text) {
    if (text.empty() || text.size() > 19 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      ctx.fail(what, fmt::format("external data {} '{}' is not a number", key, text));
    return static_cast<uint64_t>(std::stoull(text));
  };
  for (const auto& entry : tp.external_data()) {
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset")
      offset = parseNumber("offset", entry.value());
    else if (entry.key() == "length") {
      has_length = true;
      length = parseNumber("length", entry.value());
    }
  }
  if (location.empty()) ctx.fail(what, "external data has no location");
  if (location[0] == '/')
    ctx.fail(what, fmt::format("external data location '{}' is an absolute path; it must be "
                               "inside the model's folder",
                               location));
  // Checked by the text first, so "../x" is refused even when it happens to exist.
  if (escapesFolder(location))
    ctx.fail(what, fmt::format("external data location '{}' points outside the model's folder",
                               location));
  std::string base = ctx.base_dir.empty() ? "." : ctx.base_dir;
  if (ctx.real_base.empty()) {
    char* real = ::realpath(base.c_str(), nullptr);
    if (!real)
      ctx.fail(what,
               fmt::format("model folder '{}' cannot be resolved: {}", base, std::strerror(errno)));
    ctx.real_base = real;
    std::free(real);
  }
  std::string joined = base + "/" + location;
  char* real = ::realpath(joined.c_str(), nullptr);
  if (!real)
    ctx.fail(what,
             fmt::format("external data file '{}' not found ({})", location, std::strerror(errno)));
  std::string resolved = real;
  std::free(real);
  const std::string& root = ctx.real_base;
  bool inside = resolved.size() > root.size() && resolved.compare(0, root.size(), root) == 0 &&
                (root == "/" || resolved[root.size()] == '/');
  if (!inside)
    ctx.fail(what, fmt::format("external data location '{}' resolves outside the model's folder "
                               "(to '{}')",
                               location, resolved));
  const ExternalFiles::File* file = ctx.external.find(resolved);
  if (!file) {
    struct stat st {};
    if (::stat(resolved.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      ctx.fail(what, fmt::format("external data location '{}' is not a regular file", location));
    file = &ctx.external.add(resolved);
    ctx.external_locations.push_back(location);
  }
  if (!has_length) length = expected;
  if (length != expected)
    ctx.fail(what, fmt::format("external data length {} does not match dims {} ({} bytes)", length,
                               dimsStr(tp.dims()), expected));
  uint64_t file_size = file->whole.size();
  if (offset > file_size || length > file_size - offset)
    ctx.fail(what, fmt::format("external data bytes {}..{} are beyond the end of '{}' ({} bytes)",
                               offset, offset + length, location, file_size));
  return file->whole.slice(static_cast<size_t>(offset), static_cast<size_t>(length));
}

template <typename From, typename To>
Buffer narrowed(const google::protobuf::RepeatedField<From>& values) {
  std::vector<uint8_t> raw(static_cast<size_t>(values.size()) * sizeof(To));
  auto* out = reinterpret_cast<To*>(raw.data());
  for (int i = 0; i < values.size(); ++i) out[i] = static_cast<To>(values.Get(i));
  return Buffer::fromVector(std::move(raw));
}

Tensor importTensorIn(Context& ctx, onnx::TensorProto& tp, const Subject& what) {
  int32_t type = tp.data_type();
  if (type == 0) ctx.fail(what, "tensor has no data type");
  if (!dtypeIsKnown(type)) ctx.fail(what, fmt::format("unknown tensor data type {}", type));
  auto dtype = static_cast<DType>(type);
  int64_t numel = 0;
  size_t expected = expectedBytes(ctx, tp.dims(), what, dtype, &numel);
  std::vector<int64_t> dims(tp.dims().begin(), tp.dims().end());
  if (tp.has_segment()) ctx.fail(what, "segmented tensors are not supported");

  Tensor result;
  if (tp.has_data_location() && tp.data_location() == onnx::TensorProto::EXTERNAL) {
    if (dtype == DType::String) ctx.fail(what, "string tensors cannot use external data");
    result = Tensor(dtype, std::move(dims), externalBytes(ctx, tp, what, expected));
  } else if (dtype == DType::String) {
    if (tp.has_raw_data()) ctx.fail(what, "a string tensor cannot use raw_data");
    if (tp.string_data_size() != numel)
      ctx.fail(what, fmt::format("has {} strings but dims {} need {}", tp.string_data_size(),
                                 dimsStr(tp.dims()), numel));
    std::vector<std::string> strings(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i)
      strings[static_cast<size_t>(i)].swap(*tp.mutable_string_data(static_cast<int>(i)));
    result = Tensor::ofStrings(std::move(dims), std::move(strings));
  } else {
    // Which typed field ONNX stores each dtype in, and how many entries per element.
    int typed_count = 0;
    const char* field = "";
    int64_t per_element = 1;
    switch (dtype) {
      case DType::Float:
        field = "float_data";
        typed_count = tp.float_data_size();
        break;
      case DType::Complex64:
        field = "float_data";
        typed_count = tp.float_data_size();
        per_element = 2;
        break;
      case DType::Int64:
        field = "int64_data";
        typed_count = tp.int64_data_size();
        break;
      case DType::Double:
        field = "double_data";
        typed_count = tp.double_data_size();
        break;
      case DType::Complex128:
        field = "double_data";
        typed_count = tp.double_data_size();
        per_element = 2;
        break;
      case DType::UInt32:
      case DType::UInt64:
        field = "uint64_data";
        typed_count = tp.uint64_data_size();
        break;
      default:
        field = "int32_data";
        typed_count = tp.int32_data_size();
        break;
    }
    int other = tp.float_data_size() + tp.int32_data_size() + tp.int64_data_size() +
                tp.double_data_size() + tp.uint64_data_size() + tp.string_data_size() - typed_count;
    if (tp.has_raw_data()) {
      if (typed_count + other > 0) ctx.fail(what, "has both raw_data and typed data fields");
      if (tp.raw_data().size() != expected)
        ctx.fail(what,
                 fmt::format("raw_data has {} bytes but {} dims {} need {}", tp.raw_data().size(),
                             dtypeName(dtype), dimsStr(tp.dims()), expected));
      std::string raw;
      raw.swap(*tp.mutable_raw_data());  // the parsed bytes move into the Buffer, no copy
      result = Tensor(dtype, std::move(dims), Buffer::fromString(std::move(raw)));
    } else {
      if (other > 0)
        ctx.fail(what, fmt::format("{} data is stored in the wrong field (expected {})",
                                   dtypeName(dtype), field));
      int64_t needed = numel * per_element;
      // Packed types keep their packed bytes, one per int32_data entry.
      if (dtypeIsSubByte(dtype)) needed = static_cast<int64_t>(dtypeStorageBytes(dtype, numel));
      if (typed_count != needed)
        ctx.fail(what, fmt::format("has {} values in {} but {} dims {} need {}", typed_count, field,
                                   dtypeName(dtype), dimsStr(tp.dims()), needed));
      Buffer bytes;
      switch (dtype) {
        case DType::Float:
        case DType::Complex64: bytes = narrowed<float, float>(tp.float_data()); break;
        case DType::Int64: bytes = narrowed<int64_t, int64_t>(tp.int64_data()); break;
        case DType::Double:
        case DType::Complex128: bytes = narrowed<double, double>(tp.double_data()); break;
        case DType::UInt64: bytes = narrowed<uint64_t, uint64_t>(tp.uint64_data()); break;
        case DType::UInt32: bytes = narrowed<uint64_t, uint32_t>(tp.uint64_data()); break;
        case DType::Int32: bytes = narrowed<int32_t, int32_t>(tp.int32_data()); break;
        case DType::Int16:
        case DType::UInt16:
        case DType::Float16:
        case DType::BFloat16: bytes = narrowed<int32_t, uint16_t>(tp.int32_data()); break;
        default:
          bytes = narrowed<int32_t, uint8_t>(tp.int32_data());
          break;  // 1-byte types, int4 pairs
      }
      result = Tensor(dtype, std::move(dims), std::move(bytes));
    }
  }
  result.doc_string = tp.doc_string();
  return result;
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire format, for the main graph of a binary model

// One field of a serialized message; `begin`/`end` span the whole field, tag included.
struct WireField {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t value = 0;             // varint and fixed-width fields
  const uint8_t* data = nullptr;  // length-delimited fields
  size_t size = 0;
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
};

class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ == end_; }

  // False on malformed input (truncated, groups, bad wire type).
  bool next(WireField* f) {
    f->begin = p_;
    uint64_t tag = 0;
    if (!varint(&tag) || tag >> 3 == 0 || tag >> 3 > 0x1fffffff) return false;
    f->number = static_cast<uint32_t>(tag >> 3);
    f->wire_type = static_cast<int>(tag & 7);
    switch (f->wire_type) {
      case 0:
        if (!varint(&f->value)) return false;
        break;
      case 1:
      case 5: {
        size_t n = f->wire_type == 1 ? 8 : 4;
        if (static_cast<size_t>(end_ - p_) < n) return false;
        f->value = 0;
        std::memcpy(&f->value, p_, n);
        p_ += n;
        break;
      }
      case 2: {
        uint64_t n = 0;
        if (!varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
        f->data = p_;
        f->size = static_cast<size_t>(n);
        p_ += n;
        break;
      }
      default: return false;  // groups are not used by ONNX
    }
    f->end = p_;
    return true;
  }

  bool varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return false;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Merges serialized fields into `m`, as protobuf does for a message spread over its input.
bool mergeFrom(google::protobuf::MessageLite& m, const uint8_t* begin, const uint8_t* end) {
  google::protobuf::io::CodedInputStream input(begin, static_cast<int>(end - begin));
  return m.MergeFromCodedStream(&input) && input.ConsumedEntireMessage();
}

// A TensorProto in its common binary form: dims, data_type, name, raw_data, doc_string.
struct RawTensor {
  std::vector<int64_t> dims;
  int32_t data_type = 0;
  std::string_view name;
  std::string_view doc_string;
  const uint8_t* raw = nullptr;
  size_t raw_size = 0;
};

// False for anything else (typed data, external data, unknown fields): protobuf parses those.
bool decodeRawTensor(const uint8_t* data, size_t size, RawTensor* t) {
  WireReader reader(data, size);
  WireField f;
  bool has_raw = false;
  while (!reader.done()) {
    if (!reader.next(&f)) return false;
    switch (f.number) {
      case 1:  // dims, packed or not
        if (f.wire_type == 0) {
          t->dims.push_back(static_cast<int64_t>(f.value));
        } else if (f.wire_type == 2) {
          WireReader packed(f.data, f.size);
          while (!packed.done()) {
            uint64_t d = 0;
            if (!packed.varint(&d)) return false;
            t->dims.push_back(static_cast<int64_t>(d));
          }
        } else {
          return false;
        }
        break;
      case 2:
        if (f.wire_type != 0) return false;
        t->data_type = static_cast<int32_t>(f.value);
        break;
      case 8:
        if (f.wire_type != 2) return false;
        t->name = std::string_view(reinterpret_cast<const char*>(f.data), f.size);
        break;
      case 9:
        if (f.wire_type != 2) return false;
        t->raw = f.data;
        t->raw_size = f.size;
        has_raw = true;
        break;
      case 12:
        if (f.wire_type != 2) return false;
        t->doc_string = std::string_view(reinterpret_cast<const char*>(f.data), f.size);
        break;
      default: return false;
    }
  }
  return has_raw;
}

// Read-ahead hints for the import loops below: name lookups in a million-entry table wait for
// memory, so the loops announce the names a few messages ahead (Graph::prefetch*Name). Only a
// hint: a message in another field order is merely not prefetched.
constexpr size_t kReadAhead = 8;

void prefetchInitializerName(Graph& g, const uint8_t* data, size_t size) {
  WireReader reader(data, size);
  WireField f;
  while (!reader.done() && reader.next(&f)) {
    if (f.number == 8 && f.wire_type == 2) {
      g.prefetchValueName(std::string_view(reinterpret_cast<const char*>(f.data), f.size));
      return;
    }
    if (f.number > 8) return;
  }
}

// NodeProto: input (1) and output (2) are value names, name (3) the node's.
void prefetchNodeNames(Graph& g, const uint8_t* data, size_t size) {
  WireReader reader(data, size);
  WireField f;
  while (!reader.done() && reader.next(&f)) {
    if (f.number > 3 || f.wire_type != 2) return;
    std::string_view name(reinterpret_cast<const char*>(f.data), f.size);
    if (name.empty()) continue;
    if (f.number == 3) g.prefetchNodeName(name);
    else g.prefetchValueName(name);
  }
}

// ---------------------------------------------------------------------------------------------
// Types

ValueType importType(const Context& ctx, const onnx::TypeProto& tp, const Subject& what) {
  ValueType type;
  if (tp.has_tensor_type()) {
    const auto& tt = tp.tensor_type();
    int32_t elem = tt.elem_type();
    if (elem != 0 && !dtypeIsKnown(elem))
      ctx.fail(what, fmt::format("unknown tensor element type {}", elem));
    type.dtype = static_cast<DType>(elem);
    if (tt.has_shape()) {
      std::vector<Dim> dims;
      dims.reserve(static_cast<size_t>(tt.shape().dim_size()));
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value() && d.dim_value() >= 0)
          dims.push_back(Dim::known(d.dim_value()));
        else if (d.has_dim_param())
          dims.push_back(Dim::symbolic(d.dim_param()));
        else
          dims.push_back(Dim::unknown());
      }
      type.shape = Shape(std::move(dims));
    }
  } else if (tp.value_case() != onnx::TypeProto::VALUE_NOT_SET) {
    type.opaque_type_proto = serializeDeterministic(tp);
  }
  return type;
}

// ---------------------------------------------------------------------------------------------
// Graphs

// Names a subgraph reads without defining them: values it takes from enclosing graphs.
std::vector<std::string> freeNames(const onnx::GraphProto& g) {
  std::unordered_set<std::string_view> defined;
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& v : g.input()) defined.insert(v.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) defined.insert(o);
  std::vector<std::string> free;
  std::unordered_set<std::string> seen;
  auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) free.push_back(name);
  };
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) use(i);
    for (const auto& a : n.attribute()) {
      if (a.has_g())
        for (const auto& f : freeNames(a.g())) use(f);
      for (const auto& sub : a.graphs())
        for (const auto& f : freeNames(sub)) use(f);
    }
  }
  for (const auto& o : g.output()) use(o.name());
  return free;
}

bool hasSubgraphs(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.has_g() || a.graphs_size() > 0) return true;
  return false;
}

std::vector<std::string> nodeFreeNames(const onnx::NodeProto& n) {
  std::vector<std::string> names;
  for (const auto& a : n.attribute()) {
    if (a.has_g())
      for (auto& f : freeNames(a.g())) names.push_back(std::move(f));
    for (const auto& sub : a.graphs())
      for (auto& f : freeNames(sub)) names.push_back(std::move(f));
  }
  return names;
}

class GraphImporter {
 public:
  explicit GraphImporter(Context& ctx) : ctx_(ctx) {}

  void importGraph(onnx::GraphProto& gp, Graph& g, const std::string& where);
  // The main graph of a binary model, read field by field from its serialized bytes, which
  // `owner` keeps alive: nodes go one at a time through a reused NodeProto (a million parsed
  // NodeProtos would cost more than the graph itself), and raw initializer data stays where it
  // is. False when the bytes are not well-formed protobuf.
  bool importGraphWire(const uint8_t* data, size_t size, Graph& g,
                       const std::shared_ptr<const void>& owner);

 private:
  struct ForwardReference {};  // a node reads a value that a later node produces
  using ProducedLater = std::function<bool(const std::string&)>;

  Value* resolve(Graph& g, const std::string& name);
  void importInitializer(onnx::TensorProto& tp, int index, Graph& g, const std::string& where);
  void addInitializer(Graph& g, const std::string& name, Tensor t, const std::string& where);
  void importInputs(onnx::GraphProto& gp, Graph& g, const std::string& where);
  void applyValueInfo(const onnx::ValueInfoProto& vi, Graph& g, const std::string& where);
  void checkSeedableSize(const Value& input, const Subject& what);
  void importOutputs(const onnx::GraphProto& gp, Graph& g, const std::string& where);
  void importNodes(onnx::GraphProto& gp, Graph& g, const std::string& where, size_t index_base);
  std::vector<int> sortSuffix(const onnx::GraphProto& gp, int from, const Graph& g,
                              const std::string& where, size_t index_base);
  void importNode(onnx::NodeProto& np, size_t index, Graph& g, const std::string& where,
                  const ProducedLater& producedLater);
  Attribute importAttribute(onnx::AttributeProto& ap, Graph& g, const Subject& owner);
  void diagnoseOutputs(const onnx::NodeProto& np, size_t index, const Graph& g,
                       const std::string& where);

  Context& ctx_;
};

// A local value, or one of an enclosing graph captured through an outer reference in every
// graph in between.
Value* GraphImporter::resolve(Graph& g, const std::string& name) {
  if (Value* v = g.findValue(name)) return v;
  if (!g.parent()) return nullptr;
  Value* outer = resolve(*g.parent(), name);
  return outer ? g.addOuterRef(name, outer) : nullptr;
}

void GraphImporter::importInitializer(onnx::TensorProto& tp, int index, Graph& g,
                                      const std::string& where) {
  if (tp.name().empty()) ctx_.fail(fmt::format("{}initializer #{} has no name", where, index));
  auto what = [&] { return fmt::format("{}initializer '{}'", where, tp.name()); };
  addInitializer(g, tp.name(), importTensorIn(ctx_, tp, what), where);
}

// Graph refuses a second value of the same name; the message should say what happened.
void GraphImporter::addInitializer(Graph& g, const std::string& name, Tensor t,
                                   const std::string& where) {
  try {
    g.addInitializer(name, std::move(t));
  } catch (const Error&) {
    if (g.findValue(name))
      ctx_.fail(fmt::format("{}initializer '{}' is defined twice", where, name));
    throw;
  }
}

void GraphImporter::importInputs(onnx::GraphProto& gp, Graph& g, const std::string& where) {
  for (int i = 0; i < gp.input_size(); ++i) {
    onnx::ValueInfoProto& vi = *gp.mutable_input(i);
    if (vi.name().empty()) ctx_.fail(fmt::format("{}graph input #{} has no name", where, i));
    auto what = [&] { return fmt::format("{}graph input '{}'", where, vi.name()); };
    Value* v = g.findValue(vi.name());
    if (v && v->isInitializer() && !v->isGraphInput()) {
      // IR < 4 style: the initializer is the input's default value.
      g.markInitializerAsInput(v);
      if (vi.has_type()) v->type = importType(ctx_, vi.type(), what);
    } else if (v) {
      ctx_.fail(fmt::format("{}graph input '{}' is listed twice", where, vi.name()));
    } else {
      v = g.addInput(vi.name(), importType(ctx_, vi.type(), what));
      if (!g.parent()) checkSeedableSize(*v, what);
    }
    v->doc_string = vi.doc_string();
  }
}

// A main-graph input of known rank is what `run` and `verify` would allocate and seed, with 1
// for each dim not known: those dims must not overflow and the bytes must stay within the
// tensor limit (a mutated [2^62, seq] input crashed `run`).
void GraphImporter::checkSeedableSize(const Value& input, const Subject& what) {
  const Shape& shape = input.type.shape;
  if (!shape.hasRank() || !dtypeIsKnown(static_cast<int32_t>(input.type.dtype)) ||
      input.type.dtype == DType::Undefined)
    return;
  std::vector<int64_t> dims;
  for (const Dim& d : shape.dims()) dims.push_back(d.isStatic() ? d.value() : 1);
  int64_t numel = 0;
  expectedBytes(ctx_, dims, what, input.type.dtype, &numel);
}

void GraphImporter::applyValueInfo(const onnx::ValueInfoProto& vi, Graph& g,
                                   const std::string& where) {
  Value* v = g.findValue(vi.name());
  if (!v || v->kind() != Value::Kind::NodeOutput) return;  // stale entries are dropped
  auto what = [&] { return fmt::format("{}value_info '{}'", where, vi.name()); };
  if (vi.has_type()) v->type = importType(ctx_, vi.type(), what);
  if (!vi.doc_string().empty()) v->doc_string = vi.doc_string();
}

// Outputs, then what is kept as serialized bytes.
void GraphImporter::importOutputs(const onnx::GraphProto& gp, Graph& g, const std::string& where) {
  for (int i = 0; i < gp.output_size(); ++i) {
    const onnx::ValueInfoProto& vo = gp.output(i);
    if (vo.name().empty()) ctx_.fail(fmt::format("{}graph output #{} has no name", where, i));
    Value* v = resolve(g, vo.name());
    if (!v)
      ctx_.fail(
          fmt::format("{}graph output '{}' is not produced by any node, graph input or "
                      "initializer",
                      where, vo.name()));
    g.addOutput(v);
    auto what = [&] { return fmt::format("{}graph output '{}'", where, vo.name()); };
    if (v->kind() == Value::Kind::NodeOutput && vo.has_type()) {
      v->type = importType(ctx_, vo.type(), what);
      if (v->type.isTensor() && v->type.shape.hasRank())
        g.declared_output_shapes[vo.name()] = v->type.shape;
    }
    if (!vo.doc_string().empty()) v->doc_string = vo.doc_string();
  }
  g.sparse_initializers.reserve(static_cast<size_t>(gp.sparse_initializer_size()));
  for (const auto& s : gp.sparse_initializer())
    g.sparse_initializers.push_back(serializeDeterministic(s));
  for (const auto& q : gp.quantization_annotation())
    g.quantization_annotations.push_back(serializeDeterministic(q));
}

void GraphImporter::importGraph(onnx::GraphProto& gp, Graph& g, const std::string& where) {
  g.name = gp.name();
  g.doc_string = gp.doc_string();
  for (int i = 0; i < gp.initializer_size(); ++i)
    importInitializer(*gp.mutable_initializer(i), i, g, where);
  importInputs(gp, g, where);
  importNodes(gp, g, where, 0);
  for (const auto& vi : gp.value_info()) applyValueInfo(vi, g, where);
  importOutputs(gp, g, where);
}

bool GraphImporter::importGraphWire(const uint8_t* data, size_t size, Graph& g,
                                    const std::shared_ptr<const void>& owner) {
  struct Slice {
    const uint8_t* data;
    size_t size;
  };
  std::vector<Slice> nodes, initializers, value_infos;
  onnx::GraphProto rest;  // name, doc_string, inputs, outputs, annotations
  WireReader reader(data, size);
  WireField f;
  while (!reader.done()) {
    if (!reader.next(&f)) return false;
    if (f.wire_type == 2 && (f.number == 1 || f.number == 5 || f.number == 13)) {
      auto& list = f.number == 1 ? nodes : f.number == 5 ? initializers : value_infos;
      list.push_back({f.data, f.size});
    } else if (!mergeFrom(rest, f.begin, f.end)) {
      return false;
    }
  }
  const std::string where;
  g.name = rest.name();
  g.doc_string = rest.doc_string();
  // Most nodes have one output; a little slack covers the rest without a rehash.
  g.reserve(initializers.size() + static_cast<size_t>(rest.input_size()) + nodes.size() +
                nodes.size() / 4,
            nodes.size());

  onnx::TensorProto tp;
  for (size_t i = 0; i < initializers.size(); ++i) {
    const Slice& slice = initializers[i];
    // Two stages: the header kReadAhead further on starts loading now (headers lie between
    // weights, a cache and TLB miss each), so that reading the name one stage on hits the
    // cache and only the name table's miss is left, which that read starts in turn.
    if (i + 2 * kReadAhead < initializers.size())
      __builtin_prefetch(initializers[i + 2 * kReadAhead].data);
    if (i + kReadAhead < initializers.size())
      prefetchInitializerName(g, initializers[i + kReadAhead].data,
                              initializers[i + kReadAhead].size);
    RawTensor raw;
    if (!decodeRawTensor(slice.data, slice.size, &raw)) {
      if (!tp.ParseFromArray(slice.data, static_cast<int>(slice.size))) return false;
      importInitializer(tp, static_cast<int>(i), g, where);
      continue;
    }
    // The common case, checked as importTensorIn does, with the bytes left in place.
    std::string name(raw.name);
    if (name.empty()) ctx_.fail(fmt::format("initializer #{} has no name", i));
    auto what = [&] { return fmt::format("initializer '{}'", name); };
    if (raw.data_type == 0) ctx_.fail(what, "tensor has no data type");
    if (!dtypeIsKnown(raw.data_type))
      ctx_.fail(what, fmt::format("unknown tensor data type {}", raw.data_type));
    auto dtype = static_cast<DType>(raw.data_type);
    if (dtype == DType::String) ctx_.fail(what, "a string tensor cannot use raw_data");
    int64_t numel = 0;
    size_t expected = expectedBytes(ctx_, raw.dims, what, dtype, &numel);
    if (raw.raw_size != expected)
      ctx_.fail(what, fmt::format("raw_data has {} bytes but {} dims {} need {}", raw.raw_size,
                                  dtypeName(dtype), dimsStr(raw.dims), expected));
    Tensor t(dtype, std::move(raw.dims), Buffer(owner, raw.raw, raw.raw_size));
    t.doc_string = std::string(raw.doc_string);
    addInitializer(g, name, std::move(t), where);
  }

  importInputs(rest, g, where);

  // Nodes in file order while it is topological; the first forward reference hands the rest
  // to the sorting importer.
  onnx::NodeProto np;
  size_t pos = 0;
  std::unordered_set<std::string> later_outputs;
  bool later_built = false;
  bool corrupt = false;
  ProducedLater producedLater = [&](const std::string& name) {
    if (!later_built) {
      later_built = true;
      onnx::NodeProto later;
      for (size_t k = pos; k < nodes.size(); ++k) {
        if (!later.ParseFromArray(nodes[k].data, static_cast<int>(nodes[k].size))) {
          corrupt = true;
          return false;
        }
        for (const auto& o : later.output())
          if (!o.empty()) later_outputs.insert(o);
      }
    }
    return later_outputs.count(name) != 0;
  };
  for (; pos < nodes.size(); ++pos) {
    if (pos + kReadAhead < nodes.size())
      prefetchNodeNames(g, nodes[pos + kReadAhead].data, nodes[pos + kReadAhead].size);
    if (!np.ParseFromArray(nodes[pos].data, static_cast<int>(nodes[pos].size))) return false;
    try {
      importNode(np, pos, g, where, producedLater);
    } catch (const ForwardReference&) {
      onnx::GraphProto remaining;
      for (size_t k = pos; k < nodes.size(); ++k)
        if (!remaining.add_node()->ParseFromArray(nodes[k].data, static_cast<int>(nodes[k].size)))
          return false;
      importNodes(remaining, g, where, pos);
      break;
    }
    if (corrupt) return false;
  }

  onnx::ValueInfoProto vi;
  for (const Slice& slice : value_infos) {
    if (!vi.ParseFromArray(slice.data, static_cast<int>(slice.size))) return false;
    applyValueInfo(vi, g, where);
  }
  importOutputs(rest, g, where);
  return true;
}

void GraphImporter::importNodes(onnx::GraphProto& gp, Graph& g, const std::string& where,
                                size_t index_base) {
  const int count = gp.node_size();
  std::vector<int> order;  // empty while the file order is topological
  // Outputs of the nodes not yet imported when the first unknown name turned up.
  std::unordered_set<std::string_view> later_outputs;
  bool later_built = false;
  int pos = 0;
  ProducedLater producedLater = [&](const std::string& name) {
    if (!order.empty()) return false;  // already sorted: nothing is produced later
    if (!later_built) {
      later_built = true;
      for (int k = pos; k < count; ++k)
        for (const auto& o : gp.node(k).output())
          if (!o.empty()) later_outputs.insert(o);
    }
    return later_outputs.count(name) != 0;
  };
  while (pos < count) {
    int index = order.empty() ? pos : order[static_cast<size_t>(pos)];
    try {
      importNode(*gp.mutable_node(index), index_base + static_cast<size_t>(index), g, where,
                 producedLater);
      ++pos;
    } catch (const ForwardReference&) {
      order = sortSuffix(gp, pos, g, where, index_base);
    }
  }
}

// Stable topological order of nodes [from, end), given that everything before is imported.
std::vector<int> GraphImporter::sortSuffix(const onnx::GraphProto& gp, int from, const Graph& g,
                                           const std::string& where, size_t index_base) {
  const int count = gp.node_size();
  std::unordered_map<std::string_view, int> producer;
  for (int k = from; k < count; ++k)
    for (const auto& o : gp.node(k).output())
      if (!o.empty()) producer.emplace(o, k);  // duplicates fail when the second one is imported
  std::vector<std::vector<int>> consumers(static_cast<size_t>(count));
  std::vector<std::vector<int>> producers(static_cast<size_t>(count));
  std::vector<int> pending(static_cast<size_t>(count), 0);
  for (int k = from; k < count; ++k) {
    const auto& n = gp.node(k);
    std::vector<std::string> names(n.input().begin(), n.input().end());
    if (hasSubgraphs(n))
      for (auto& f : nodeFreeNames(n)) names.push_back(std::move(f));
    auto& deps = producers[static_cast<size_t>(k)];
    for (const auto& name : names) {
      if (name.empty() || g.findValue(name)) continue;
      auto it = producer.find(name);
      if (it == producer.end() || std::find(deps.begin(), deps.end(), it->second) != deps.end())
        continue;
      deps.push_back(it->second);
      consumers[static_cast<size_t>(it->second)].push_back(k);
      ++pending[static_cast<size_t>(k)];
    }
  }
  std::vector<int> order;
  order.reserve(static_cast<size_t>(count));
  for (int k = 0; k < from; ++k) order.push_back(k);
  std::vector<bool> emitted(static_cast<size_t>(count), false);
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int k = from; k < count; ++k)
    if (pending[static_cast<size_t>(k)] == 0) ready.push(k);
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    order.push_back(k);
    emitted[static_cast<size_t>(k)] = true;
    for (int c : consumers[static_cast<size_t>(k)])
      if (--pending[static_cast<size_t>(c)] == 0) ready.push(c);
  }
  if (static_cast<int>(order.size()) != count) {
    // Walk back along producers that never ran until a node repeats: it is on a cycle.
    int k = from;
    while (emitted[static_cast<size_t>(k)]) ++k;
    std::vector<bool> visited(static_cast<size_t>(count), false);
    while (!visited[static_cast<size_t>(k)]) {
      visited[static_cast<size_t>(k)] = true;
      for (int p : producers[static_cast<size_t>(k)]) {
        if (!emitted[static_cast<size_t>(p)]) {
          k = p;
          break;
        }
      }
    }
    ctx_.fail(fmt::format("{}the graph has a cycle through {}, which depends on its own output",
                          where, nodeDesc(gp.node(k), index_base + static_cast<size_t>(k))));
  }
  return order;
}

void GraphImporter::importNode(onnx::NodeProto& np, size_t index, Graph& g,
                               const std::string& where, const ProducedLater& producedLater) {
  if (np.op_type().empty())
    ctx_.fail(fmt::format("{}{} has no op_type", where, nodeDesc(np, index)));
  Graph::NodeSpec spec;
  spec.inputs.reserve(static_cast<size_t>(np.input_size()));
  for (const std::string& name : np.input()) {
    if (name.empty()) {
      spec.inputs.push_back(nullptr);  // an omitted optional input
      continue;
    }
    Value* v = g.findValue(name);
    if (!v) {
      if (producedLater(name)) throw ForwardReference{};
      v = resolve(g, name);
    }
    if (!v)
      ctx_.fail(
          fmt::format("{}{} reads '{}', which no node, graph input, initializer or "
                      "enclosing graph defines",
                      where, nodeDesc(np, index), name));
    spec.inputs.push_back(v);
  }
  const bool with_subgraphs = hasSubgraphs(np);
  if (with_subgraphs) {
    // Values the subgraphs take from this graph must exist before the subgraphs are imported.
    for (const auto& name : nodeFreeNames(np))
      if (!g.findValue(name) && producedLater(name)) throw ForwardReference{};
  }
  auto owner = [&] { return where + nodeDesc(np, index); };
  spec.attributes.reserve(static_cast<size_t>(np.attribute_size()));
  for (auto& ap : *np.mutable_attribute()) {
    for (const Attribute& before : spec.attributes)
      if (before.name == ap.name())
        ctx_.fail(fmt::format("{} has two attributes named '{}'", owner(), ap.name()));
    spec.attributes.push_back(importAttribute(ap, g, owner));
  }
  spec.output_names.assign(np.output().begin(), np.output().end());
  // ONNX's SSA rule across scopes (the checker's and ONNX Runtime's): a subgraph node may not
  // write a name that an enclosing graph already defines. Subgraph inputs and initializers
  // may shadow; node outputs may not.
  for (const std::string& name : spec.output_names) {
    if (name.empty()) continue;
    for (const Graph* outer = g.parent(); outer; outer = outer->parent()) {
      if (outer->findValue(name)) {
        ctx_.fail(fmt::format("{}{} writes '{}', which shadows a value of an enclosing graph",
                              where, nodeDesc(np, index), name));
      }
    }
  }
  spec.op_type = np.op_type();
  spec.domain = np.domain();
  spec.name = np.name();
  Node* node = nullptr;
  try {
    node = g.createNode(std::move(spec));
  } catch (const Error&) {
    diagnoseOutputs(np, index, g, where);
    throw;
  }
  node->doc_string.swap(*np.mutable_doc_string());
  if (with_subgraphs) {
    std::vector<Value*> implicit;
    node->forEachSubgraph([&](const Graph& sub) {
      for (Value* ref : sub.outerRefs())
        if (std::find(implicit.begin(), implicit.end(), ref->outerValue()) == implicit.end())
          implicit.push_back(ref->outerValue());
    });
    if (!implicit.empty()) g.setNodeImplicitInputs(node, std::move(implicit));
  }
}

// createNode refused an output name: say which one and why.
void GraphImporter::diagnoseOutputs(const onnx::NodeProto& np, size_t index, const Graph& g,
                                    const std::string& where) {
  for (int i = 0; i < np.output_size(); ++i) {
    const std::string& name = np.output(i);
    if (name.empty()) continue;
    for (int k = 0; k < i; ++k)
      if (np.output(k) == name)
        ctx_.fail(fmt::format("{}{} writes '{}' twice", where, nodeDesc(np, index), name));
    const Value* existing = g.findValue(name);
    if (!existing) continue;
    std::string other;
    switch (existing->kind()) {
      case Value::Kind::NodeOutput:
        other = "is also written by node '" + existing->producer()->label() + "'";
        break;
      case Value::Kind::GraphInput: other = "shadows a graph input"; break;
      case Value::Kind::Initializer: other = "shadows an initializer"; break;
      case Value::Kind::OuterRef: other = "shadows a value of an enclosing graph"; break;
    }
    ctx_.fail(fmt::format("{}{} writes '{}', which {}", where, nodeDesc(np, index), name, other));
  }
}

Attribute GraphImporter::importAttribute(onnx::AttributeProto& ap, Graph& g, const Subject& owner) {
  using AP = onnx::AttributeProto;
  auto what = [&] { return fmt::format("attribute '{}' of {}", ap.name(), owner.str()); };
  if (ap.name().empty()) ctx_.fail(fmt::format("{} has an attribute without a name", owner.str()));
  std::vector<int> filled;
  if (ap.has_f()) filled.push_back(AP::FLOAT);
  if (ap.has_i()) filled.push_back(AP::INT);
  if (ap.has_s()) filled.push_back(AP::STRING);
  if (ap.has_t()) filled.push_back(AP::TENSOR);
  if (ap.has_g()) filled.push_back(AP::GRAPH);
  if (ap.has_sparse_tensor()) filled.push_back(AP::SPARSE_TENSOR);
  if (ap.has_tp()) filled.push_back(AP::TYPE_PROTO);
  if (ap.floats_size()) filled.push_back(AP::FLOATS);
  if (ap.ints_size()) filled.push_back(AP::INTS);
  if (ap.strings_size()) filled.push_back(AP::STRINGS);
  if (ap.tensors_size()) filled.push_back(AP::TENSORS);
  if (ap.graphs_size()) filled.push_back(AP::GRAPHS);
  if (ap.sparse_tensors_size()) filled.push_back(AP::SPARSE_TENSORS);
  if (ap.type_protos_size()) filled.push_back(AP::TYPE_PROTOS);

  int type = ap.has_type() ? static_cast<int>(ap.type()) : AP::UNDEFINED;
  if (filled.size() > 1)
    ctx_.fail(fmt::format("{} carries several values ({} and {})", what(), attrTypeName(filled[0]),
                          attrTypeName(filled[1])));
  if (type != AP::UNDEFINED && !filled.empty() && filled[0] != type)
    ctx_.fail(fmt::format("{} has type {} but carries a {} value", what(), attrTypeName(type),
                          attrTypeName(filled[0])));
  if (type == AP::UNDEFINED && ap.ref_attr_name().empty()) {
    // IR < 3 files predate AttributeProto.type: the filled field says what it is.
    if (ctx_.ir_version >= 3 && !filled.empty())
      ctx_.fail(fmt::format("{} has type UNDEFINED but carries a {} value", what(),
                            attrTypeName(filled[0])));
    if (ctx_.ir_version >= 3) ctx_.fail(fmt::format("{} has type UNDEFINED and no value", what()));
    if (!filled.empty()) type = filled[0];
  }

  Attribute a;
  a.name = ap.name();
  a.kind = static_cast<AttrKind>(type);
  a.doc_string = ap.doc_string();
  a.ref_attr_name = ap.ref_attr_name();
  auto subgraph = [&](onnx::GraphProto& gp) {
    // Import, shape inference, the passes and the executor all recurse once per level.
    if (ctx_.subgraph_depth + 1 > ctx_.limits.max_subgraph_depth)
      ctx_.fail(fmt::format("{}: subgraphs nest deeper than {} levels", what(),
                            ctx_.limits.max_subgraph_depth));
    auto sub = std::make_unique<Graph>();
    sub->setParent(&g);
    ++ctx_.subgraph_depth;
    importGraph(gp, *sub, fmt::format("subgraph '{}' ({}): ", gp.name(), what()));
    --ctx_.subgraph_depth;
    return sub;
  };
  switch (type) {
    case AP::FLOAT: a.f = ap.f(); break;
    case AP::INT: a.i = ap.i(); break;
    case AP::STRING: a.s.swap(*ap.mutable_s()); break;
    case AP::TENSOR:
      if (!ap.has_t()) ctx_.fail(what() + " has type TENSOR but no tensor");
      a.t = importTensorIn(ctx_, *ap.mutable_t(), what);
      break;
    case AP::GRAPH:
      if (!ap.has_g()) ctx_.fail(what() + " has type GRAPH but no graph");
      a.g = subgraph(*ap.mutable_g());
      break;
    case AP::FLOATS: a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case AP::INTS: a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case AP::STRINGS:
      a.strings.reserve(static_cast<size_t>(ap.strings_size()));
      for (auto& s : *ap.mutable_strings()) a.strings.push_back(std::move(s));
      break;
    case AP::TENSORS:
      for (int k = 0; k < ap.tensors_size(); ++k)
        a.tensors.push_back(importTensorIn(
            ctx_, *ap.mutable_tensors(k), [&] { return fmt::format("{} tensor #{}", what(), k); }));
      break;
    case AP::GRAPHS:
      for (auto& gp : *ap.mutable_graphs()) a.graphs.push_back(subgraph(gp));
      break;
    case AP::SPARSE_TENSOR:
      if (ap.has_sparse_tensor()) a.s = serializeDeterministic(ap.sparse_tensor());
      break;
    case AP::SPARSE_TENSORS:
      for (const auto& s : ap.sparse_tensors()) a.strings.push_back(serializeDeterministic(s));
      break;
    case AP::TYPE_PROTO:
      if (ap.has_tp()) a.s = serializeDeterministic(ap.tp());
      break;
    case AP::TYPE_PROTOS:
      for (const auto& t : ap.type_protos()) a.strings.push_back(serializeDeterministic(t));
      break;
    default: break;
  }
  return a;
}

bool looksLikeText(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t n = std::min<size_t>(size, 512);
  for (size_t i = 0; i < n; ++i)
    if (p[i] < 0x20 && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') return false;
  return n > 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points

Tensor importTensor(onnx::TensorProto& proto, const std::string& what,
                    const std::string& base_dir, const ImportLimits& limits) {
  Context ctx;
  ctx.display = what;
  ctx.base_dir = base_dir;
  ctx.limits = limits;
  return importTensorIn(ctx, proto, [&] {
    return proto.name().empty() ? std::string("tensor") : "tensor '" + proto.name() + "'";
  });
}

Tensor importBinaryTensor(std::string bytes, const std::string& display_name,
                          const std::string& base_dir, std::string* name) {
  if (bytes.empty()) throwInvalid(display_name + ": empty file");
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    throwInvalid(display_name + ": larger than 2 GB, the protobuf limit");
  onnx::TensorProto proto;
  google::protobuf::io::ArrayInputStream array(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream input(&array);
  input.SetTotalBytesLimit(INT_MAX);
  if (!proto.ParseFromCodedStream(&input) || !input.ConsumedEntireMessage())
    throwInvalid(display_name + ": not a TensorProto file (truncated or corrupt protobuf)");
  bytes = std::string();  // the parsed proto holds its own copy
  if (name) *name = proto.name();
  return importTensor(proto, display_name, base_dir);
}

namespace {

// Everything but the graph; fails on an IR version fusectl does not read.
std::unique_ptr<Model> importModelFields(const onnx::ModelProto& proto, Context& ctx) {
  ctx.ir_version = proto.ir_version();
  if (proto.ir_version() <= 0 || proto.ir_version() > kMaxIrVersion)
    ctx.fail(fmt::format("unsupported IR version {} (fusectl reads IR versions 1 to {})",
                         proto.ir_version(), kMaxIrVersion));
  auto model = std::make_unique<Model>();
  model->ir_version = proto.ir_version();
  model->opset_imports.reserve(static_cast<size_t>(proto.opset_import_size()));
  for (const auto& o : proto.opset_import())
    model->opset_imports.push_back({o.domain(), o.version()});
  model->producer_name = proto.producer_name();
  model->producer_version = proto.producer_version();
  model->domain = proto.domain();
  model->model_version = proto.model_version();
  model->doc_string = proto.doc_string();
  for (const auto& p : proto.metadata_props())
    model->metadata_props.emplace_back(p.key(), p.value());
  for (const auto& f : proto.functions()) model->functions.push_back(serializeDeterministic(f));
  for (const auto& t : proto.training_info())
    model->training_info.push_back(serializeDeterministic(t));
  return model;
}

// Graph's own checks do not know the file name.
template <typename Fn>
void withFileName(const std::string& display_name, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::string message = e.what();
    if (message.compare(0, display_name.size() + 2, display_name + ": ") == 0) throw;
    throw Error(e.kind(), display_name + ": " + message);
  }
}

void recordExternalFiles(Context& ctx, Model& model) {
  std::sort(ctx.external_locations.begin(), ctx.external_locations.end());
  model.external_data_files = std::move(ctx.external_locations);
}

}  // namespace

std::unique_ptr<Model> importModel(onnx::ModelProto& proto, const std::string& display_name,
                                   const std::string& base_dir, const ImportLimits& limits) {
  Context ctx;
  ctx.display = display_name;
  ctx.base_dir = base_dir;
  ctx.limits = limits;
  std::unique_ptr<Model> model = importModelFields(proto, ctx);
  if (!proto.has_graph()) ctx.fail("not an ONNX model (no graph)");
  withFileName(display_name,
               [&] { GraphImporter(ctx).importGraph(*proto.mutable_graph(), *model->graph, ""); });
  recordExternalFiles(ctx, *model);
  return model;
}

namespace {

[[noreturn]] void refuseUnparsed(const void* data, size_t size, const std::string& display,
                                 bool parsed) {
  if (looksLikeText(data, size))
    throwInvalid(display +
                 ": not a binary ONNX model (the file is text; ONNX textual syntax "
                 "needs the .onnxtxt extension)");
  throwInvalid(display + (parsed ? ": not an ONNX model (no graph)"
                                 : ": not an ONNX model (truncated or corrupt protobuf)"));
}

}  // namespace

// Raw initializer data of the main graph is referenced in place instead of copied, so the
// weights exist once, in the file's pages. Anything unusual (or malformed) goes through
// protobuf's own parser instead.
std::unique_ptr<Model> importBinaryModel(const uint8_t* data, size_t size,
                                         const std::shared_ptr<const void>& owner,
                                         const std::string& display, const std::string& base_dir,
                                         const ImportLimits& limits) {
  if (size == 0) throwInvalid(display + ": empty file");
  if (size > static_cast<size_t>(INT_MAX))
    throwInvalid(display +
                 ": larger than 2 GB, the protobuf limit (large models keep their "
                 "weights in an external data file)");
  Context ctx;
  ctx.display = display;
  ctx.base_dir = base_dir;
  ctx.limits = limits;
  {
    onnx::ModelProto head;  // every field but the graph
    const uint8_t* graph = nullptr;
    size_t graph_size = 0;
    int graphs = 0;
    bool ok = true;
    WireReader reader(data, size);
    WireField f;
    while (ok && !reader.done()) {
      ok = reader.next(&f);
      if (!ok) break;
      if (f.number == 7 && f.wire_type == 2) {
        graph = f.data;
        graph_size = f.size;
        ++graphs;
      } else {
        ok = mergeFrom(head, f.begin, f.end);
      }
    }
    if (ok && graphs == 1) {
      std::unique_ptr<Model> model = importModelFields(head, ctx);
      bool imported = false;
      withFileName(display, [&] {
        imported = GraphImporter(ctx).importGraphWire(graph, graph_size, *model->graph, owner);
      });
      if (imported) {
        recordExternalFiles(ctx, *model);
        return model;
      }
      // A malformed graph: protobuf's parser below says how.
    }
  }
  // An arena makes the many small messages cheap to create and free; raw_data buffers still
  // come from the heap and move into Buffers.
  google::protobuf::Arena arena;
  onnx::ModelProto& proto = *google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
  google::protobuf::io::ArrayInputStream array(data, static_cast<int>(size));
  google::protobuf::io::CodedInputStream input(&array);
  // The default limit would refuse files near 2 GB that are still valid protobuf.
  input.SetTotalBytesLimit(INT_MAX);
  // Each subgraph level is three messages deep (NodeProto, AttributeProto, GraphProto), and
  // protobuf's default of 100 would refuse nesting far below our own depth limit as corrupt,
  // where the importer names the node. Capped: protobuf recurses on the stack.
  input.SetRecursionLimit(std::min(3 * (limits.max_subgraph_depth + 2) + 16, 3000));
  bool parsed = proto.ParseFromCodedStream(&input) && input.ConsumedEntireMessage();
  if (!parsed || !proto.has_graph()) {
    if (parsed && proto.ir_version() > 0) importModelFields(proto, ctx);  // IR version first
    refuseUnparsed(data, size, display, parsed);
  }
  return importModel(proto, display, base_dir, limits);
}

}  // namespace onnx_convert
}  // namespace fusectl
