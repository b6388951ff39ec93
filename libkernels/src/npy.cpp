// .npy reading and writing: the header is a Python dict literal, parsed here by hand.
#include "fusectl/kernels/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"

namespace fusectl::kernels {

namespace {

struct NpyType {
  const char* descr;  // as written; '|' for one-byte types
  DType dtype;
};

constexpr NpyType kTypes[] = {
    {"<f4", DType::Float},  {"<f2", DType::Float16}, {"<f8", DType::Double},
    {"|i1", DType::Int8},   {"|u1", DType::UInt8},   {"<i2", DType::Int16},
    {"<u2", DType::UInt16}, {"<i4", DType::Int32},   {"<u4", DType::UInt32},
    {"<i8", DType::Int64},  {"<u8", DType::UInt64},  {"|b1", DType::Bool},
};

[[noreturn]] void bad(const std::string& where, const std::string& why) {
  throwInvalid(where + ": " + why);
}

// A cursor over the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  void skipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool consume(char c) {
    skipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  std::string string() {
    skipSpace();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a string");
    const char quote = s_[i_++];
    const size_t end = s_.find(quote, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skipSpace();
    if (s_.substr(i_, 4) == "True") { i_ += 4; return true; }
    if (s_.substr(i_, 5) == "False") { i_ += 5; return false; }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (!consume(')')) {
      skipSpace();
      size_t start = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (start == i_) fail("expected a dimension");
      // Python ints may carry an 'L' suffix in files written by Python 2.
      const std::string digits(s_.substr(start, i_ - start));
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;
      if (digits.size() > 18) fail("dimension " + digits + " is too large");
      dims.push_back(std::stoll(digits));
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }
  [[noreturn]] void fail(const std::string& why) const {
    bad(where_, "malformed .npy header (" + why + " at offset " + std::to_string(i_) + ")");
  }

 private:
  std::string_view s_;
  const std::string& where_;
  size_t i_ = 0;
};

uint32_t readLE(const unsigned char* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string readWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throwIo(path + ": read error");
  return ss.str();
}

}  // namespace

HostTensor parseNpy(std::string_view bytes, const std::string& where) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    bad(where, "not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = u[6];
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = readLE(u + 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad(where, "truncated .npy header");
    header_len = readLE(u + 8, 4);
    header_start = 12;
  } else {
    bad(where, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(u[7]));
  }
  if (header_start + header_len > bytes.size()) bad(where, "truncated .npy header");
  HeaderParser p(bytes.substr(header_start, header_len), where);

  std::string descr;
  bool fortran = false, have_descr = false, have_order = false, have_shape = false;
  std::vector<int64_t> dims;
  p.expect('{');
  while (!p.consume('}')) {
    const std::string key = p.string();
    p.expect(':');
    if (key == "descr") {
      p.skipSpace();
      descr = p.string();  // a list here would be a structured dtype: string() rejects it
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean();
      have_order = true;
    } else if (key == "shape") {
      dims = p.tuple();
      have_shape = true;
    } else {
      p.fail("unexpected key '" + key + "'");
    }
    if (!p.consume(',')) {
      p.expect('}');
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape) {
    p.fail("missing one of 'descr', 'fortran_order', 'shape'");
  }
  if (fortran) {
    bad(where, "Fortran-order (column-major) arrays are not supported; save it in C order "
               "(numpy.ascontiguousarray)");
  }
  // '=' (native) and '<' are both little-endian on every platform fusectl runs on; one-byte
  // types may use any byte-order mark.
  DType dtype = DType::Undefined;
  if (descr.size() >= 2) {
    const char order = descr[0];
    const std::string kind = descr.substr(1);
    for (const NpyType& t : kTypes) {
      if (kind != t.descr + 1) continue;
      const bool one_byte = t.descr[0] == '|';
      if (order == '>' && !one_byte) {
        bad(where, "big-endian dtype '" + descr + "' is not supported; convert with "
                   "arr.astype(arr.dtype.newbyteorder('<'))");
      }
      if (order == '<' || order == '=' || (one_byte && (order == '|' || order == '>'))) {
        dtype = t.dtype;
      }
    }
  }
  if (dtype == DType::Undefined) bad(where, "unsupported .npy dtype '" + descr + "'");

  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) bad(where, "shape overflows");
    numel *= d;
  }
  const size_t data_start = header_start + header_len;
  const size_t need = dtypeStorageBytes(dtype, numel);
  if (bytes.size() - data_start < need) {
    bad(where, "truncated .npy data: " + std::to_string(bytes.size() - data_start) +
                   " bytes for " + std::to_string(need) + " expected");
  }
  HostTensor t(dtype, dims);
  if (need) std::memcpy(t.mutableRaw(), bytes.data() + data_start, need);
  // numpy writes bools as 0 and 1; any other byte means true, and kernels read bools as C++
  // bool, for which it would be undefined behaviour.
  if (dtype == DType::Bool) {
    auto* b = static_cast<uint8_t*>(t.mutableRaw());
    for (size_t i = 0; i < need; ++i) b[i] = b[i] != 0;
  }
  return t;
}

HostTensor readNpy(const std::string& path) {
  const std::string bytes = readWholeFile(path);
  return parseNpy(bytes, path);
}

std::string npyBytes(const HostTensor& t) {
  const char* descr = nullptr;
  for (const NpyType& n : kTypes) {
    if (n.dtype == t.dtype()) descr = n.descr;
  }
  if (!descr) {
    throwUnsupported(std::string(dtypeName(t.dtype())) +
                     " tensors have no .npy dtype; write them as .pb (TensorProto)");
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i) shape += std::to_string(t.dim(i)) + ", ";
  if (t.rank() > 1) shape.erase(shape.size() - 2);  // (2, 3); a 1-d shape keeps "(5,"
  else if (t.rank() == 1) shape.erase(shape.size() - 1);
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  // Pad with spaces so that the data starts on a 64-byte boundary; end with '\n'.
  size_t prefix = 10;
  size_t total = prefix + header.size() + 1;
  if ((total + 63) / 64 * 64 - prefix > 65535) prefix = 12;
  total = prefix + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  const size_t len = header.size();
  if (prefix == 10) {
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>((len >> 8) & 0xff);
  } else {
    out += '\x02';
    out += '\x00';
    for (int i = 0; i < 4; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  }
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.byteSize());
  return out;
}

void writeNpy(const HostTensor& t, const std::string& path) {
  writeFileAtomically(path, npyBytes(t));
}

namespace {
bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

HostTensor readTensorFile(const std::string& path, std::string* name) {
  if (endsWith(path, ".npy")) {
    if (name) name->clear();
    return readNpy(path);
  }
  Tensor t = loadTensorFile(path, name);
  // The Tensor owns its bytes; the HostTensor borrows them and keeps the buffer alive.
  return HostTensor::fromTensor(t);
}

void writeTensorFile(const HostTensor& t, const std::string& name, const std::string& path,
                     TensorFileFormat format) {
  if (format == TensorFileFormat::Npy) {
    writeNpy(t, path);
  } else {
    saveTensorFile(t.toTensor(), name, path);
  }
}

}  // namespace fusectl::kernels
