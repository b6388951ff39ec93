// ONNX textual syntax: ModelProto <-> text, printed so that libonnx 1.12's OnnxParser reads it
// back. model_file.cpp converts between the ModelProto and the IR.
//
// The 1.12 grammar cannot say everything a model holds: value names must be identifiers,
// strings cannot contain '"', floats cannot be NaN, infinite or subnormal, float16 tensors
// have no literal form, nodes have no name or doc string, empty lists and non-tensor types
// do not parse. The printer writes everything it can as plain syntax and the rest as
// "#@" directive comments, which any ONNX parser skips and parseText() applies after
// OnnxParser has run:
//
//   #@ rename IDENT "original name"        a value name that is not an identifier
//   #@ node N name "conv1"                 node N in depth-first order (subgraphs after
//   #@ node N attribute POS BASE64            their node), N from 0; an AttributeProto
//   #@ graph G initializer POS BASE64      graph G in the same order, 0 is the main graph
//   #@ model doc_string "..."              ...
//
// Directive strings are C-escaped ("\"", "\\", "\n", "\xHH"); BASE64 holds a serialized
// protobuf message. So model -> text -> model keeps the graph exactly, while hand-written
// text (golden tests) needs no directives at all.
#include <onnx/defs/parser.h>

#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "onnx_convert.h"

namespace fusectl {
namespace {

// ---------------------------------------------------------------------------------------------
// Lexical helpers

bool isIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// Words that start a type where the 1.12 parser expects "[type] name".
bool isTypeWord(std::string_view s) {
  static const std::unordered_set<std::string_view> kWords = {
      "float",      "uint8",    "int8",    "uint16", "int16",    "int32",        "int64",
      "string",     "bool",     "float16", "double", "uint32",   "uint64",       "complex64",
      "complex128", "bfloat16", "seq",     "map",    "optional", "sparse_tensor"};
  return kWords.count(s) != 0;
}

bool isPrintableName(std::string_view s) { return isIdentifier(s) && !isTypeWord(s); }

// A string literal of the 1.12 grammar: no escapes, so no '"' inside.
bool isPrintableString(std::string_view s) { return s.find('"') == std::string_view::npos; }

std::string quoted(std::string_view s) { return fmt::format("\"{}\"", s); }

// Directive strings: C escapes, one line.
std::string escaped(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += fmt::format("\\x{:02x}", c);
        else
          out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
  return out;
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k])); };
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kBase64[(v >> s) & 63]);
  }
  if (i < bytes.size()) {
    uint32_t v = at(i) << 16 | (i + 1 < bytes.size() ? at(i + 1) << 8 : 0);
    out.push_back(kBase64[(v >> 18) & 63]);
    out.push_back(kBase64[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

bool unbase64(std::string_view text, std::string* out) {
  static const auto table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    for (int k = 0; k < 64; ++k) t[static_cast<unsigned char>(kBase64[k])] = k;
    return t;
  }();
  if (text.size() % 4 != 0) return false;
  out->clear();
  out->reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = text[i + k];
      int d = 0;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
      } else {
        if (pad) return false;
        d = table[static_cast<unsigned char>(c)];
        if (d < 0) return false;
      }
      v = v << 6 | static_cast<uint32_t>(d);
    }
    out->push_back(static_cast<char>(v >> 16));
    if (pad < 2) out->push_back(static_cast<char>(v >> 8 & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(v & 0xff));
  }
  return true;
}

// The shortest decimal that reads back to the same float (strtof rounds correctly), always
// with a '.' or an exponent so the parser takes it as a float literal. Subnormals, NaN and
// infinities have no form the 1.12 parser accepts (std::stof throws on them).
bool floatLiteral(float f, std::string& out) {
  if (!std::isfinite(f) || (f != 0.f && std::fabs(f) < FLT_MIN)) return false;
  char buf[48];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    float back = std::strtof(buf, nullptr);
    if (std::memcmp(&back, &f, sizeof(f)) == 0) break;
  }
  out += buf;
  if (!std::strpbrk(buf, ".e")) out += ".0";
  return true;
}

bool doubleLiteral(double d, std::string& out) {
  if (!std::isfinite(d) || (d != 0.0 && std::fabs(d) < DBL_MIN)) return false;
  char buf[48];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    double back = std::strtod(buf, nullptr);
    if (std::memcmp(&back, &d, sizeof(d)) == 0) break;
  }
  out += buf;
  if (!std::strpbrk(buf, ".e")) out += ".0";
  return true;
}

// Element types whose tensors the 1.12 parser reads from literals.
bool hasTensorLiteral(int32_t t) {
  switch (static_cast<DType>(t)) {
    case DType::Float:
    case DType::UInt8:
    case DType::Int8:
    case DType::UInt16:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::String:
    case DType::Bool:
    case DType::Double:
    case DType::UInt32:
    case DType::UInt64: return true;
    default: return false;
  }
}

template <typename T>
T loadAt(const std::string& raw, size_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Printer

class Printer {
 public:
  std::string print(const onnx::ModelProto& m);

 private:
  void collectNames(const onnx::GraphProto& g);
  const std::string& nameOf(const std::string& original);
  std::string graphName(const std::string& original, std::vector<std::string>& directives,
                        int graph_id);
  void printGraph(const onnx::GraphProto& g, int indent);
  void printNode(const onnx::NodeProto& n, int indent);
  std::string typeText(const onnx::ValueInfoProto& vi, int graph_id,
                       std::vector<std::string>& directives);
  bool tensorText(const onnx::TensorProto& t, std::string& out, int indent);
  bool attributeText(const onnx::AttributeProto& a, std::string& out, int indent);
  std::string valueList(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values,
                        int graph_id, std::vector<std::string>& directives);
  static std::string pad(int indent) { return std::string(static_cast<size_t>(indent), ' '); }

  std::string out_;
  std::unordered_set<std::string> taken_;
  std::unordered_map<std::string, std::string> renamed_;
  std::vector<std::string> rename_lines_;
  int next_graph_ = 0;
  int next_node_ = 0;
};

void Printer::collectNames(const onnx::GraphProto& g) {
  for (const auto& v : g.input()) taken_.insert(v.name());
  for (const auto& v : g.output()) taken_.insert(v.name());
  for (const auto& v : g.value_info()) taken_.insert(v.name());
  for (const auto& t : g.initializer()) taken_.insert(t.name());
  for (const auto& n : g.node()) {
    for (const auto& s : n.input()) taken_.insert(s);
    for (const auto& s : n.output()) taken_.insert(s);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectNames(a.g());
      for (const auto& sub : a.graphs()) collectNames(sub);
    }
  }
}

// The identifier printed for a value name: itself, or a fresh identifier plus a rename line.
const std::string& Printer::nameOf(const std::string& original) {
  if (isPrintableName(original)) return original;
  auto it = renamed_.find(original);
  if (it != renamed_.end()) return it->second;
  std::string base;
  for (char c : original) base.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) base.insert(0, "_");
  if (isTypeWord(base)) base += "_";
  std::string candidate = base;
  for (int k = 1; taken_.count(candidate); ++k) candidate = fmt::format("{}_{}", base, k);
  taken_.insert(candidate);
  rename_lines_.push_back(fmt::format("#@ rename {} {}", candidate, escaped(original)));
  return renamed_.emplace(original, candidate).first->second;
}

std::string Printer::graphName(const std::string& original, std::vector<std::string>& directives,
                               int graph_id) {
  if (isPrintableName(original)) return original;
  directives.push_back(fmt::format("#@ graph {} name {}", graph_id, escaped(original)));
  std::string name;
  for (char c : original) name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) name.insert(0, "g_");
  if (isTypeWord(name)) name += "_";
  return name;
}

std::string Printer::typeText(const onnx::ValueInfoProto& vi, int graph_id,
                              std::vector<std::string>& directives) {
  if (!vi.has_type()) return "";
  const onnx::TypeProto& tp = vi.type();
  bool plain = tp.has_tensor_type() && tp.tensor_type().elem_type() >= 1 &&
               tp.tensor_type().elem_type() <= 16 && tp.denotation().empty();
  if (!plain) {
    directives.push_back(fmt::format("#@ graph {} type {} {}", graph_id, escaped(vi.name()),
                                     base64(onnx_convert::serializeDeterministic(tp))));
    return "";
  }
  const auto& tt = tp.tensor_type();
  std::string text(dtypeName(static_cast<DType>(tt.elem_type())));
  if (!tt.has_shape()) return text + "[]";      // unknown rank
  if (tt.shape().dim_size() == 0) return text;  // scalar
  text += "[";
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    if (i) text += ", ";
    if (d.has_dim_value()) {
      text += std::to_string(d.dim_value());
    } else if (d.has_dim_param() && isIdentifier(d.dim_param())) {
      text += d.dim_param();
    } else {
      text += "?";
      if (d.has_dim_param())
        directives.push_back(fmt::format("#@ graph {} dim {} {} {}", graph_id, escaped(vi.name()),
                                         i, escaped(d.dim_param())));
    }
  }
  return text + "]";
}

std::string Printer::valueList(
    const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values, int graph_id,
    std::vector<std::string>& directives) {
  std::string text;
  for (int i = 0; i < values.size(); ++i) {
    const auto& vi = values.Get(i);
    if (i) text += ", ";
    std::string type = typeText(vi, graph_id, directives);
    if (!type.empty()) text += type + " ";
    text += nameOf(vi.name());
    if (!vi.doc_string().empty())
      directives.push_back(fmt::format("#@ graph {} value_doc {} {}", graph_id, escaped(vi.name()),
                                       escaped(vi.doc_string())));
  }
  return text;
}

bool Printer::tensorText(const onnx::TensorProto& t, std::string& out, int indent) {
  if (!hasTensorLiteral(t.data_type()) || !t.doc_string().empty() ||
      t.data_location() == onnx::TensorProto::EXTERNAL || t.external_data_size() > 0)
    return false;
  const bool is_string = t.data_type() == static_cast<int32_t>(DType::String);
  if (is_string ? t.has_raw_data() : !t.has_raw_data()) return false;
  int64_t numel = 1;
  for (int64_t d : t.dims()) numel *= d;
  auto dtype = static_cast<DType>(t.data_type());
  const std::string& raw = t.raw_data();
  if (!is_string && raw.size() != dtypeStorageBytes(dtype, numel)) return false;
  if (is_string && t.string_data_size() != numel) return false;

  std::string text(dtypeName(dtype));
  if (t.dims_size() > 0) text += fmt::format("[{}]", fmt::join(t.dims(), ", "));
  text += " ";
  if (!t.name().empty()) text += nameOf(t.name()) + " = ";
  text += "{";
  const bool wrap = numel > 16;
  for (int64_t k = 0; k < numel; ++k) {
    auto i = static_cast<size_t>(k);
    if (k) text += ",";
    if (wrap && k % 8 == 0)
      text += "\n" + pad(indent + 2);
    else if (k)
      text += " ";
    switch (dtype) {
      case DType::Float:
        if (!floatLiteral(loadAt<float>(raw, i), text)) return false;
        break;
      case DType::Double:
        if (!doubleLiteral(loadAt<double>(raw, i), text)) return false;
        break;
      case DType::UInt8:
      case DType::Bool: text += std::to_string(loadAt<uint8_t>(raw, i)); break;
      case DType::Int8: text += std::to_string(loadAt<int8_t>(raw, i)); break;
      case DType::UInt16: text += std::to_string(loadAt<uint16_t>(raw, i)); break;
      case DType::Int16: text += std::to_string(loadAt<int16_t>(raw, i)); break;
      case DType::Int32: text += std::to_string(loadAt<int32_t>(raw, i)); break;
      case DType::Int64: text += std::to_string(loadAt<int64_t>(raw, i)); break;
      case DType::UInt32: text += std::to_string(loadAt<uint32_t>(raw, i)); break;
      case DType::UInt64: text += std::to_string(loadAt<uint64_t>(raw, i)); break;
      case DType::String:
        if (!isPrintableString(t.string_data(static_cast<int>(k)))) return false;
        text += quoted(t.string_data(static_cast<int>(k)));
        break;
      default: return false;
    }
  }
  if (wrap) text += "\n" + pad(indent);
  text += "}";
  out += text;
  return true;
}

bool Printer::attributeText(const onnx::AttributeProto& a, std::string& out, int indent) {
  using AP = onnx::AttributeProto;
  if (!isIdentifier(a.name()) || !a.ref_attr_name().empty() || !a.has_type()) return false;
  std::string text = a.name() + " = ";
  switch (a.type()) {
    case AP::FLOAT:
      if (!floatLiteral(a.f(), text)) return false;
      break;
    case AP::INT: text += std::to_string(a.i()); break;
    case AP::STRING:
      if (!isPrintableString(a.s())) return false;
      text += quoted(a.s());
      break;
    case AP::TENSOR:
      if (!a.t().name().empty() || !tensorText(a.t(), text, indent)) return false;
      break;
    case AP::FLOATS:
      if (a.floats_size() == 0) return false;
      text += "[";
      for (int i = 0; i < a.floats_size(); ++i) {
        if (i) text += ", ";
        if (!floatLiteral(a.floats(i), text)) return false;
      }
      text += "]";
      break;
    case AP::INTS:
      if (a.ints_size() == 0) return false;
      text += fmt::format("[{}]", fmt::join(a.ints(), ", "));
      break;
    case AP::STRINGS:
      if (a.strings_size() == 0) return false;
      text += "[";
      for (int i = 0; i < a.strings_size(); ++i) {
        if (!isPrintableString(a.strings(i))) return false;
        text += (i ? ", " : "") + quoted(a.strings(i));
      }
      text += "]";
      break;
    case AP::GRAPH: {
      // Printed in place: its graph and nodes take the next numbers, as the reader counts.
      std::string saved;
      saved.swap(out_);
      printGraph(a.g(), indent);
      text += out_;
      out_.swap(saved);
      break;
    }
    default: return false;
  }
  out += text;
  return true;
}

void Printer::printNode(const onnx::NodeProto& n, int indent) {
  const int id = next_node_++;
  std::vector<std::string> directives;
  if (!n.name().empty())
    directives.push_back(fmt::format("#@ node {} name {}", id, escaped(n.name())));
  if (!n.doc_string().empty())
    directives.push_back(fmt::format("#@ node {} doc {}", id, escaped(n.doc_string())));

  std::string op = n.op_type();
  bool op_ok = isIdentifier(n.op_type());
  if (!n.domain().empty()) {
    size_t start = 0;
    while (op_ok && start <= n.domain().size()) {
      size_t end = n.domain().find('.', start);
      if (end == std::string::npos) end = n.domain().size();
      op_ok = isIdentifier(std::string_view(n.domain()).substr(start, end - start));
      start = end + 1;
    }
    op = n.domain() + "." + n.op_type();
  }
  if (!op_ok) {
    directives.push_back(
        fmt::format("#@ node {} op {} {}", id, escaped(n.domain()), escaped(n.op_type())));
    op = "Unprintable";
  }

  // The 1.12 grammar cannot start a name list with an omitted ("") entry.
  auto names = [&](const google::protobuf::RepeatedPtrField<std::string>& list, const char* what) {
    if (list.empty()) return std::string();
    if (list.Get(0).empty()) {
      std::string directive = fmt::format("#@ node {} {}", id, what);
      for (const auto& s : list) directive += " " + escaped(s);
      directives.push_back(std::move(directive));
      return std::string();
    }
    std::string text;
    for (int i = 0; i < list.size(); ++i) {
      if (i) text += list.Get(i).empty() ? "," : ", ";
      if (!list.Get(i).empty()) text += nameOf(list.Get(i));
    }
    if (list.Get(list.size() - 1).empty()) text += " ";
    return text;
  };
  std::string outputs = names(n.output(), "outputs");
  std::string inputs = names(n.input(), "inputs");

  std::vector<std::string> attrs;
  for (int i = 0; i < n.attribute_size(); ++i) {
    const auto& a = n.attribute(i);
    std::string text;
    if (attributeText(a, text, indent + 2)) {
      attrs.push_back(std::move(text));
      if (!a.doc_string().empty())
        directives.push_back(fmt::format("#@ node {} attribute_doc {} {}", id, escaped(a.name()),
                                         escaped(a.doc_string())));
    } else {
      directives.push_back(fmt::format("#@ node {} attribute {} {}", id, i,
                                       base64(onnx_convert::serializeDeterministic(a))));
    }
  }

  for (const auto& d : directives) out_ += pad(indent) + d + "\n";
  out_ += pad(indent) + outputs + (outputs.empty() ? "= " : " = ") + op;
  size_t attrs_length = 0;
  bool multiline = false;
  for (const auto& a : attrs) {
    attrs_length += a.size() + 2;
    multiline = multiline || a.find('\n') != std::string::npos;
  }
  if (multiline || attrs_length > 80) {
    // One attribute per line, after the inputs, as a subgraph reads best.
    out_ += " (" + inputs + ") <\n";
    for (size_t i = 0; i < attrs.size(); ++i)
      out_ += pad(indent + 2) + attrs[i] + (i + 1 < attrs.size() ? ",\n" : "\n");
    out_ += pad(indent) + ">\n";
    return;
  }
  if (!attrs.empty()) {
    out_ += " <";
    for (size_t i = 0; i < attrs.size(); ++i) out_ += (i ? ", " : "") + attrs[i];
    out_ += ">";
  }
  out_ += " (" + inputs + ")\n";
}

void Printer::printGraph(const onnx::GraphProto& g, int indent) {
  const int id = next_graph_++;
  std::vector<std::string> directives;
  std::string name = graphName(g.name(), directives, id);
  if (!g.doc_string().empty())
    directives.push_back(fmt::format("#@ graph {} doc {}", id, escaped(g.doc_string())));

  out_ += name + " (" + valueList(g.input(), id, directives) + ") => (" +
          valueList(g.output(), id, directives) + ")";

  std::vector<std::string> decls;
  for (int i = 0; i < g.initializer_size(); ++i) {
    std::string text;
    if (tensorText(g.initializer(i), text, indent + 2))
      decls.push_back(std::move(text));
    else
      directives.push_back(
          fmt::format("#@ graph {} initializer {} {}", id, i,
                      base64(onnx_convert::serializeDeterministic(g.initializer(i)))));
  }
  for (const auto& vi : g.value_info()) {
    std::string type = typeText(vi, id, directives);
    decls.push_back(type.empty() ? nameOf(vi.name()) : type + " " + nameOf(vi.name()));
    if (!vi.doc_string().empty())
      directives.push_back(fmt::format("#@ graph {} value_doc {} {}", id, escaped(vi.name()),
                                       escaped(vi.doc_string())));
  }
  for (const auto& s : g.sparse_initializer())
    directives.push_back(fmt::format("#@ graph {} sparse_initializer {}", id,
                                     base64(onnx_convert::serializeDeterministic(s))));
  for (const auto& q : g.quantization_annotation())
    directives.push_back(fmt::format("#@ graph {} quantization_annotation {}", id,
                                     base64(onnx_convert::serializeDeterministic(q))));

  // The main graph reads like the fixtures; a subgraph opens its body on its header line.
  if (!decls.empty()) {
    out_ += "\n" + pad(indent) + "<\n";
    for (size_t i = 0; i < decls.size(); ++i)
      out_ += pad(indent + 2) + decls[i] + (i + 1 < decls.size() ? ",\n" : "\n");
    out_ += pad(indent) + ">\n" + pad(indent) + "{\n";
  } else {
    out_ += indent == 0 ? "\n{\n" : " {\n";
  }
  for (const auto& d : directives) out_ += pad(indent + 2) + d + "\n";
  for (const auto& n : g.node()) printNode(n, indent + 2);
  out_ += pad(indent) + "}";
}

std::string Printer::print(const onnx::ModelProto& m) {
  collectNames(m.graph());
  std::vector<std::string> header;
  std::vector<std::string> directives;
  header.push_back(fmt::format("ir_version: {}", m.ir_version()));
  bool opsets_ok = true;
  for (const auto& o : m.opset_import()) opsets_ok = opsets_ok && isPrintableString(o.domain());
  if (opsets_ok) {
    std::vector<std::string> items;
    for (const auto& o : m.opset_import())
      items.push_back(fmt::format("{} : {}", quoted(o.domain()), o.version()));
    header.push_back(fmt::format("opset_import: [{}]", fmt::join(items, ", ")));
  } else {
    for (const auto& o : m.opset_import())
      directives.push_back(fmt::format("#@ model opset {} {}", escaped(o.domain()), o.version()));
  }
  auto field = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    if (isPrintableString(value))
      header.push_back(fmt::format("{}: {}", key, quoted(value)));
    else
      directives.push_back(fmt::format("#@ model {} {}", key, escaped(value)));
  };
  field("producer_name", m.producer_name());
  field("producer_version", m.producer_version());
  field("domain", m.domain());
  if (m.model_version() != 0) header.push_back(fmt::format("model_version: {}", m.model_version()));
  field("doc_string", m.doc_string());
  bool metadata_ok = true;
  for (const auto& p : m.metadata_props())
    metadata_ok = metadata_ok && isPrintableString(p.key()) && isPrintableString(p.value());
  if (metadata_ok && m.metadata_props_size() > 0) {
    std::vector<std::string> items;
    for (const auto& p : m.metadata_props())
      items.push_back(fmt::format("{}: {}", quoted(p.key()), quoted(p.value())));
    header.push_back(fmt::format("metadata_props: [{}]", fmt::join(items, ", ")));
  } else {
    for (const auto& p : m.metadata_props())
      directives.push_back(
          fmt::format("#@ model metadata {} {}", escaped(p.key()), escaped(p.value())));
  }
  for (const auto& f : m.functions())
    directives.push_back(
        fmt::format("#@ model function {}", base64(onnx_convert::serializeDeterministic(f))));
  for (const auto& t : m.training_info())
    directives.push_back(
        fmt::format("#@ model training_info {}", base64(onnx_convert::serializeDeterministic(t))));

  out_ = "<\n";
  for (size_t i = 0; i < header.size(); ++i)
    out_ += "  " + header[i] + (i + 1 < header.size() ? ",\n" : "\n");
  out_ += ">\n";
  printGraph(m.graph(), 0);
  out_ += "\n";
  if (!directives.empty() || !rename_lines_.empty()) {
    out_ += "# Model parts ONNX 1.12 textual syntax cannot express (fusectl reads them back):\n";
    for (const auto& d : directives) out_ += d + "\n";
    for (const auto& r : rename_lines_) out_ += r + "\n";
  }
  return std::move(out_);
}

// ---------------------------------------------------------------------------------------------
// Reader: directives

struct Directive {
  int line;
  std::vector<std::string> words;  // quoted strings already unescaped
  std::vector<bool> quoted;
};

class DirectiveError {
 public:
  explicit DirectiveError(std::string m) : message(std::move(m)) {}
  std::string message;
};

Directive tokenize(std::string_view text, int line) {
  Directive d{line, {}, {}};
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    std::string word;
    if (text[i] == '"') {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        char c = text[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          word.push_back(c);
          continue;
        }
        if (i >= text.size()) break;
        char e = text[i++];
        switch (e) {
          case 'n': word.push_back('\n'); break;
          case 't': word.push_back('\t'); break;
          case 'r': word.push_back('\r'); break;
          case 'x': {
            if (i + 2 > text.size()) throw DirectiveError("bad \\x escape");
            word.push_back(
                static_cast<char>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16)));
            i += 2;
            break;
          }
          default: word.push_back(e);
        }
      }
      if (!closed) throw DirectiveError("unterminated string");
      d.words.push_back(std::move(word));
      d.quoted.push_back(true);
    } else {
      while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i])))
        word.push_back(text[i++]);
      d.words.push_back(std::move(word));
      d.quoted.push_back(false);
    }
  }
  return d;
}

// "#@" comments, found with the 1.12 lexer's rules: '#' outside a string literal starts a
// comment to the end of the line; string literals have no escapes.
std::vector<Directive> scanDirectives(const std::string& text, const std::string& display) {
  std::vector<Directive> out;
  int line = 1;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '#') {
      size_t end = text.find('\n', i);
      if (end == std::string::npos) end = text.size();
      if (i + 1 < text.size() && text[i + 1] == '@') {
        try {
          out.push_back(tokenize(std::string_view(text).substr(i + 2, end - i - 2), line));
        } catch (const DirectiveError& e) {
          throwInvalid(fmt::format("{}: line {}: bad #@ directive: {}", display, line, e.message));
        } catch (const std::exception&) {
          throwInvalid(fmt::format("{}: line {}: bad #@ directive: bad \\x escape", display, line));
        }
      }
      i = end - 1;
    }
  }
  return out;
}

class DirectiveApplier {
 public:
  DirectiveApplier(onnx::ModelProto& m, const std::string& display) : m_(m), display_(display) {
    enumerate(*m.mutable_graph());
  }
  void apply(const std::vector<Directive>& directives);

 private:
  // Graphs and nodes in the order the printer numbered them.
  void enumerate(onnx::GraphProto& g) {
    graphs_.push_back(&g);
    for (auto& n : *g.mutable_node()) {
      nodes_.push_back(&n);
      for (auto& a : *n.mutable_attribute())
        if (a.has_g()) enumerate(*a.mutable_g());
    }
  }
  [[noreturn]] void fail(const Directive& d, const std::string& why) const {
    throwInvalid(fmt::format("{}: line {}: bad #@ directive: {}", display_, d.line, why));
  }
  const std::string& word(const Directive& d, size_t i, bool want_quoted) const {
    if (i >= d.words.size()) fail(d, "too few arguments");
    if (d.quoted[i] != want_quoted)
      fail(d, fmt::format("argument {} should {}be a quoted string", i + 1,
                          want_quoted ? "" : "not "));
    return d.words[i];
  }
  int64_t number(const Directive& d, size_t i) const {
    const std::string& w = word(d, i, false);
    if (w.empty() || w.size() > 18 || w.find_first_not_of("-0123456789") != std::string::npos)
      fail(d, fmt::format("'{}' is not a number", w));
    return std::stoll(w);
  }
  template <typename Message>
  void decode(const Directive& d, size_t i, Message* out) const {
    std::string bytes;
    if (!unbase64(word(d, i, false), &bytes) || !out->ParseFromString(bytes))
      fail(d, "argument is not a base64 protobuf message");
  }
  template <typename Field, typename Message>
  void insertAt(const Directive& d, Field* list, int64_t pos, Message&& value) const {
    if (pos < 0 || pos > list->size()) fail(d, fmt::format("position {} out of range", pos));
    list->Add()->Swap(&value);
    for (int k = list->size() - 1; k > pos; --k) list->SwapElements(k, k - 1);
  }
  void renameAll(onnx::GraphProto& g);
  void applyGraph(const Directive& d, onnx::GraphProto& g);
  void applyNode(const Directive& d, onnx::NodeProto& n);
  void applyModel(const Directive& d);

  onnx::ModelProto& m_;
  const std::string& display_;
  std::vector<onnx::GraphProto*> graphs_;
  std::vector<onnx::NodeProto*> nodes_;
  std::unordered_map<std::string, std::string> renames_;
};

void DirectiveApplier::renameAll(onnx::GraphProto& g) {
  auto fix = [&](std::string* s) {
    auto it = renames_.find(*s);
    if (it != renames_.end()) *s = it->second;
  };
  for (auto& v : *g.mutable_input()) fix(v.mutable_name());
  for (auto& v : *g.mutable_output()) fix(v.mutable_name());
  for (auto& v : *g.mutable_value_info()) fix(v.mutable_name());
  for (auto& t : *g.mutable_initializer()) fix(t.mutable_name());
  for (auto& n : *g.mutable_node()) {
    for (auto& s : *n.mutable_input()) fix(&s);
    for (auto& s : *n.mutable_output()) fix(&s);
    for (auto& a : *n.mutable_attribute())
      if (a.has_g()) renameAll(*a.mutable_g());
  }
}

void DirectiveApplier::apply(const std::vector<Directive>& directives) {
  for (const Directive& d : directives) {
    if (d.words.empty() || d.words[0] != "rename") continue;
    renames_[word(d, 1, false)] = word(d, 2, true);
  }
  if (!renames_.empty()) renameAll(*m_.mutable_graph());
  for (const Directive& d : directives) {
    if (d.words.empty()) fail(d, "empty");
    const std::string& verb = d.words[0];
    if (verb == "rename") continue;
    if (verb == "model") {
      applyModel(d);
    } else if (verb == "graph") {
      int64_t k = number(d, 1);
      if (k < 0 || k >= static_cast<int64_t>(graphs_.size()))
        fail(d, fmt::format("graph {} does not exist (the text has {})", k, graphs_.size()));
      applyGraph(d, *graphs_[static_cast<size_t>(k)]);
    } else if (verb == "node") {
      int64_t k = number(d, 1);
      if (k < 0 || k >= static_cast<int64_t>(nodes_.size()))
        fail(d, fmt::format("node {} does not exist (the text has {})", k, nodes_.size()));
      applyNode(d, *nodes_[static_cast<size_t>(k)]);
    } else {
      fail(d, fmt::format("unknown directive '{}'", verb));
    }
  }
}

void DirectiveApplier::applyModel(const Directive& d) {
  const std::string& what = word(d, 1, false);
  if (what == "producer_name")
    m_.set_producer_name(word(d, 2, true));
  else if (what == "producer_version")
    m_.set_producer_version(word(d, 2, true));
  else if (what == "domain")
    m_.set_domain(word(d, 2, true));
  else if (what == "doc_string")
    m_.set_doc_string(word(d, 2, true));
  else if (what == "metadata") {
    auto* p = m_.add_metadata_props();
    p->set_key(word(d, 2, true));
    p->set_value(word(d, 3, true));
  } else if (what == "opset") {
    auto* o = m_.add_opset_import();
    o->set_domain(word(d, 2, true));
    o->set_version(number(d, 3));
  } else if (what == "function") {
    decode(d, 2, m_.add_functions());
  } else if (what == "training_info") {
    decode(d, 2, m_.add_training_info());
  } else {
    fail(d, fmt::format("unknown model field '{}'", what));
  }
}

void DirectiveApplier::applyGraph(const Directive& d, onnx::GraphProto& g) {
  const std::string& what = word(d, 2, false);
  auto eachValueInfo = [&](const std::string& name, auto&& fn) {
    bool found = false;
    for (auto* list : {g.mutable_input(), g.mutable_output(), g.mutable_value_info()})
      for (auto& vi : *list)
        if (vi.name() == name) {
          fn(vi);
          found = true;
        }
    if (!found) fail(d, fmt::format("graph has no value '{}'", name));
  };
  if (what == "name") {
    g.set_name(word(d, 3, true));
  } else if (what == "doc") {
    g.set_doc_string(word(d, 3, true));
  } else if (what == "type") {
    onnx::TypeProto type;
    decode(d, 4, &type);
    eachValueInfo(word(d, 3, true), [&](onnx::ValueInfoProto& vi) { *vi.mutable_type() = type; });
  } else if (what == "dim") {
    int64_t index = number(d, 4);
    const std::string& param = word(d, 5, true);
    eachValueInfo(word(d, 3, true), [&](onnx::ValueInfoProto& vi) {
      auto* shape = vi.mutable_type()->mutable_tensor_type()->mutable_shape();
      if (index < 0 || index >= shape->dim_size()) fail(d, "dim index out of range");
      shape->mutable_dim(static_cast<int>(index))->set_dim_param(param);
    });
  } else if (what == "value_doc") {
    const std::string& doc = word(d, 4, true);
    eachValueInfo(word(d, 3, true), [&](onnx::ValueInfoProto& vi) { vi.set_doc_string(doc); });
  } else if (what == "initializer") {
    onnx::TensorProto t;
    decode(d, 4, &t);
    insertAt(d, g.mutable_initializer(), number(d, 3), std::move(t));
  } else if (what == "sparse_initializer") {
    decode(d, 3, g.add_sparse_initializer());
  } else if (what == "quantization_annotation") {
    decode(d, 3, g.add_quantization_annotation());
  } else {
    fail(d, fmt::format("unknown graph field '{}'", what));
  }
}

void DirectiveApplier::applyNode(const Directive& d, onnx::NodeProto& n) {
  const std::string& what = word(d, 2, false);
  if (what == "name") {
    n.set_name(word(d, 3, true));
  } else if (what == "doc") {
    n.set_doc_string(word(d, 3, true));
  } else if (what == "op") {
    n.set_domain(word(d, 3, true));
    n.set_op_type(word(d, 4, true));
  } else if (what == "inputs" || what == "outputs") {
    auto* list = what == "inputs" ? n.mutable_input() : n.mutable_output();
    list->Clear();
    for (size_t i = 3; i < d.words.size(); ++i) *list->Add() = word(d, i, true);
  } else if (what == "attribute") {
    onnx::AttributeProto a;
    decode(d, 4, &a);
    insertAt(d, n.mutable_attribute(), number(d, 3), std::move(a));
  } else if (what == "attribute_doc") {
    const std::string& name = word(d, 3, true);
    for (auto& a : *n.mutable_attribute())
      if (a.name() == name) a.set_doc_string(word(d, 4, true));
  } else {
    fail(d, fmt::format("unknown node field '{}'", what));
  }
}

// "[ParseError at position (line: 2 column: 44)]\nError context: ...\nExpected ..." -> one line.
std::string oneLineParseError(const std::string& message) {
  std::string position;
  int line = 0, column = 0;
  if (std::sscanf(message.c_str(), "[ParseError at position (line: %d column: %d)]", &line,
                  &column) == 2)
    position = fmt::format("line {}, column {}: ", line, column);
  std::string reason = message;
  size_t last = message.find_last_of('\n');
  if (last != std::string::npos) reason = message.substr(last + 1);
  std::string context;
  size_t ctx = message.find("Error context: ");
  if (ctx != std::string::npos) {
    size_t start = ctx + std::strlen("Error context: ");
    size_t end = message.find('\n', start);
    context = message.substr(start, end == std::string::npos ? std::string::npos : end - start);
    size_t first = context.find_first_not_of(" \t");
    context = first == std::string::npos ? "" : context.substr(first);
    if (context.size() > 80) context = context.substr(0, 77) + "...";
  }
  std::string out = "text syntax error at " + position + reason;
  if (!context.empty()) out += " (in: " + context + ")";
  return out;
}

}  // namespace

namespace onnx_convert {

std::string printText(const onnx::ModelProto& model) { return Printer().print(model); }

void parseText(const std::string& text, const std::string& display_name, onnx::ModelProto* out) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throwInvalid(display_name + ": empty file");
  if (text.find('\0') != std::string::npos)
    throwInvalid(display_name + ": not ONNX text (the file contains NUL bytes)");
  std::vector<Directive> directives = scanDirectives(text, display_name);
  try {
    onnx::OnnxParser parser(text.c_str());
    auto status = parser.Parse(*out);
    if (!status.IsOK())
      throwInvalid(display_name + ": " + oneLineParseError(status.ErrorMessage()));
    if (!parser.EndOfInput())
      throwInvalid(display_name + ": text syntax error: unexpected text after the main graph");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // std::stoll/stof throw on numbers out of range (and the 1.12 parser lets them escape).
    throwInvalid(
        fmt::format("{}: text syntax error: bad number literal ({})", display_name, e.what()));
  }
  DirectiveApplier(*out, display_name).apply(directives);
}

}  // namespace onnx_convert
}  // namespace fusectl
