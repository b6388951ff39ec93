// `fusectl dump --format json`: the layout of docs/schemas/dump.schema.json ("fusectl.dump/1").
//
// Written by a small streaming writer rather than through a JSON DOM: a dump of a million nodes
// must not build a million-node document first. The header sections are one line each, then
// every node is one line of the "nodes" array, so the output is both valid JSON and greppable.
#include <fmt/format.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "fusectl/graph/render.h"
#include "fusectl/graph/summary.h"

namespace fusectl {
namespace {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}
  ~JsonWriter() { flush(); }

  void beginObject() { open('{'); }
  void endObject() { close('}'); }
  void beginArray() { open('['); }
  void endArray() { close(']'); }
  void key(std::string_view k) {
    comma();
    string(k);
    buf_.push_back(':');
    after_key_ = true;
  }
  void value(std::string_view s) { comma(); string(s); }
  void value(const char* s) { value(std::string_view(s)); }
  void value(int64_t v) { comma(); fmt::format_to(std::back_inserter(buf_), "{}", v); }
  void value(uint64_t v) { comma(); fmt::format_to(std::back_inserter(buf_), "{}", v); }
  void value(int v) { value(static_cast<int64_t>(v)); }
  void value(bool v) { comma(); buf_.append(std::string_view(v ? "true" : "false")); }
  void null() { comma(); buf_.append(std::string_view("null")); }
  // Shortest text that reads back as the same float: 0.1f is written 0.1, not 0.100000001.
  void value(float v) {
    if (!std::isfinite(v)) return null();
    comma();
    fmt::format_to(std::back_inserter(buf_), "{}", v);
  }
  void value(double v) {
    if (!std::isfinite(v)) return null();
    comma();
    fmt::format_to(std::back_inserter(buf_), "{}", v);
  }
  template <typename T>
  void field(std::string_view k, const T& v) { key(k); value(v); }

  // Line break and indentation before the next element: its comma goes first, so that lines
  // start with the element.
  void newlineBefore(std::string_view indent) {
    comma();
    buf_.append(indent);
    after_key_ = true;  // the comma is written: the element must not write another
    if (buf_.size() > (1u << 20)) flush();
  }
  // Whitespace before a closing bracket.
  void raw(std::string_view text) {
    buf_.append(text);
    if (buf_.size() > (1u << 20)) flush();
  }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  void open(char c) {
    comma();
    buf_.push_back(c);
    first_.push_back(true);
  }
  void close(char c) {
    buf_.push_back(c);
    first_.pop_back();
  }
  void comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) buf_.push_back(',');
      first_.back() = false;
    }
  }
  // Escapes per RFC 8259; bytes that are not valid UTF-8 become U+FFFD, so a dump never fails
  // on a strange name.
  void string(std::string_view s) {
    buf_.push_back('"');
    size_t i = 0;
    while (i < s.size()) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '"' || c == '\\') {
        buf_.push_back('\\');
        buf_.push_back(static_cast<char>(c));
        ++i;
      } else if (c < 0x20) {
        switch (c) {
          case '\n': buf_.append(std::string_view("\\n")); break;
          case '\t': buf_.append(std::string_view("\\t")); break;
          case '\r': buf_.append(std::string_view("\\r")); break;
          default: fmt::format_to(std::back_inserter(buf_), "\\u{:04x}", c);
        }
        ++i;
      } else if (c < 0x80) {
        buf_.push_back(static_cast<char>(c));
        ++i;
      } else {
        size_t n = utf8Length(s, i);
        if (n == 0) {
          buf_.append(std::string_view("\xEF\xBF\xBD"));
          ++i;
        } else {
          buf_.append(s.substr(i, n));
          i += n;
        }
      }
    }
    buf_.push_back('"');
  }
  // Length of the valid UTF-8 sequence starting at s[i], or 0.
  static size_t utf8Length(std::string_view s, size_t i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; }
    else return 0;
    if (i + n > s.size()) return 0;
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
  }

  std::ostream& out_;
  fmt::memory_buffer buf_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

void writeTypeFields(JsonWriter& w, const ValueType& t) {
  w.field("type", t.str());
  w.key("dtype");
  if (!t.isTensor() || t.dtype == DType::Undefined) {
    w.null();
  } else {
    w.value(dtypeName(t.dtype));
  }
  w.key("shape");
  if (!t.isTensor() || !t.shape.hasRank()) {
    w.null();
    return;
  }
  w.beginArray();
  for (const Dim& d : t.shape.dims()) {
    if (d.isStatic()) {
      w.value(d.value());
    } else if (d.isSymbolic()) {
      w.value(d.symbol());
    } else {
      w.null();
    }
  }
  w.endArray();
}

void writeValue(JsonWriter& w, const std::string& name, const ValueType& type, bool initializer) {
  w.beginObject();
  w.field("name", name);
  writeTypeFields(w, type);
  if (initializer) w.field("initializer", true);
  w.endObject();
}

void writeValue(JsonWriter& w, const Value* v) {
  if (!v) return w.null();
  writeValue(w, v->name(), v->type, v->isInitializer());
}

void writeValueList(JsonWriter& w, const std::vector<Value*>& values) {
  w.beginArray();
  for (const Value* v : values) writeValue(w, v);
  w.endArray();
}

void writeTensor(JsonWriter& w, const Tensor& t) {
  w.beginObject();
  w.field("dtype", dtypeName(t.dtype()));
  w.key("dims");
  w.beginArray();
  for (int64_t d : t.dims()) w.value(d);
  w.endArray();
  // Small constants (Reshape targets, axes...) carry their values; the text form has them too.
  constexpr int64_t kMaxValues = 16;
  int64_t n = t.numel();
  bool is_float = dtypeIsFloat(t.dtype());
  bool is_int = dtypeIsInteger(t.dtype()) || t.dtype() == DType::Bool;
  if (n >= 0 && n <= kMaxValues) {
    if (t.dtype() == DType::String) {
      w.key("values");
      w.beginArray();
      for (const std::string& s : t.strings()) w.value(s);
      w.endArray();
    } else if ((is_float || is_int) &&
               tensorStoredBytes(t) >= dtypeStorageBytes(t.dtype(), n)) {
      w.key("values");
      w.beginArray();
      for (int64_t i = 0; i < n; ++i) {
        if (!is_float) {
          w.value(t.valueAsInt64(i));
        } else if (t.dtype() == DType::Double) {
          w.value(t.valueAsDouble(i));
        } else {
          w.value(static_cast<float>(t.valueAsDouble(i)));
        }
      }
      w.endArray();
    }
  }
  w.endObject();
}

void writeGraph(JsonWriter& w, const Graph& g);

void writeAttribute(JsonWriter& w, const Attribute& a) {
  w.beginObject();
  w.field("name", a.name);
  w.field("type", attrKindName(a.kind));
  w.key("value");
  switch (a.kind) {
    case AttrKind::Float: w.value(a.f); break;
    case AttrKind::Int: w.value(a.i); break;
    case AttrKind::String: w.value(a.s); break;
    case AttrKind::Tensor: writeTensor(w, a.t); break;
    case AttrKind::Graph:
      if (a.g) writeGraph(w, *a.g); else w.null();
      break;
    case AttrKind::Floats:
      w.beginArray();
      for (float f : a.floats) w.value(f);
      w.endArray();
      break;
    case AttrKind::Ints:
      w.beginArray();
      for (int64_t i : a.ints) w.value(i);
      w.endArray();
      break;
    case AttrKind::Strings:
      w.beginArray();
      for (const std::string& s : a.strings) w.value(s);
      w.endArray();
      break;
    case AttrKind::Tensors:
      w.beginArray();
      for (const Tensor& t : a.tensors) writeTensor(w, t);
      w.endArray();
      break;
    case AttrKind::Graphs:
      w.beginArray();
      for (const auto& g : a.graphs) {
        if (g) writeGraph(w, *g); else w.null();
      }
      w.endArray();
      break;
    default: w.null(); break;  // sparse tensors and type protos are kept opaque
  }
  w.endObject();
}

void writeNode(JsonWriter& w, const Node& n) {
  w.beginObject();
  w.field("name", n.name());
  w.field("op_type", n.opType());
  w.field("domain", n.domain());
  w.key("inputs");
  writeValueList(w, n.inputs());
  w.key("outputs");
  writeValueList(w, n.outputs());
  if (!n.implicitInputs().empty()) {
    w.key("implicit_inputs");
    writeValueList(w, n.implicitInputs());
  }
  w.key("attributes");
  w.beginArray();
  for (const Attribute& a : n.attributes()) writeAttribute(w, a);
  w.endArray();
  w.endObject();
}

// Subgraphs are nested whole inside their attribute.
void writeGraph(JsonWriter& w, const Graph& g) {
  w.beginObject();
  w.field("name", g.name);
  w.key("inputs");
  writeValueList(w, g.inputs());
  w.key("outputs");
  writeValueList(w, g.outputs());
  w.field("initializer_count", static_cast<uint64_t>(g.initializers().size()));
  w.key("nodes");
  w.beginArray();
  for (const Node* n : g.nodes()) writeNode(w, *n);
  w.endArray();
  w.endObject();
}

}  // namespace

void renderJson(const Model& model, std::ostream& out, const RenderOptions& options) {
  ModelSummary s = summarizeModel(model);
  JsonWriter w(out);
  w.beginObject();
  w.newlineBefore("\n  ");
  w.field("schema", kDumpSchemaId);
  w.newlineBefore("\n  ");
  w.field("schema_version", kDumpSchemaVersion);
  w.newlineBefore("\n  ");

  w.key("model");
  w.beginObject();
  w.field("ir_version", s.ir_version);
  w.field("producer_name", s.producer_name);
  w.field("producer_version", s.producer_version);
  w.field("domain", s.domain);
  w.field("model_version", s.model_version);
  w.key("opset_imports");
  w.beginArray();
  for (const OpsetImport& o : s.opset_imports) {
    w.beginObject();
    w.field("domain", o.domain);
    w.field("version", o.version);
    w.endObject();
  }
  w.endArray();
  w.key("metadata");
  w.beginObject();
  for (const auto& [key, value] : model.metadata_props) w.field(key, value);
  w.endObject();
  w.field("function_count", static_cast<uint64_t>(s.function_count));
  w.endObject();
  w.newlineBefore("\n  ");

  w.key("graph");
  w.beginObject();
  w.field("name", s.graph_name);
  w.key("inputs");
  w.beginArray();
  for (const ValueSummary& v : s.inputs) writeValue(w, v.name, v.type, v.is_initializer);
  w.endArray();
  w.key("outputs");
  w.beginArray();
  for (const ValueSummary& v : s.outputs) writeValue(w, v.name, v.type, v.is_initializer);
  w.endArray();
  w.endObject();
  w.newlineBefore("\n  ");

  w.key("stats");
  w.beginObject();
  w.field("node_count", static_cast<uint64_t>(s.node_count));
  w.field("total_node_count", static_cast<uint64_t>(s.total_node_count));
  w.field("subgraph_count", static_cast<uint64_t>(s.subgraph_count));
  w.field("initializer_count", static_cast<uint64_t>(s.initializer_count));
  w.field("initializer_bytes", s.initializer_bytes);
  w.field("parameter_count", s.parameter_count);
  w.key("op_histogram");
  w.beginArray();
  for (const OpCount& c : s.op_histogram) {
    w.beginObject();
    w.field("domain", c.domain);
    w.field("op_type", c.op_type);
    w.field("count", static_cast<uint64_t>(c.count));
    w.endObject();
  }
  w.endArray();
  w.endObject();

  if (!options.summary_only && model.graph) {
    w.newlineBefore("\n  ");
    w.key("nodes");
    w.beginArray();
    for (const Node* n : model.graph->nodes()) {
      w.newlineBefore("\n    ");
      writeNode(w, *n);
    }
    if (model.graph->numNodes()) w.raw("\n  ");
    w.endArray();
  }
  w.raw("\n");
  w.endObject();
  w.raw("\n");
}

}  // namespace fusectl
