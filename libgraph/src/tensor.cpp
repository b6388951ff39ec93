// Buffer and Tensor: shared immutable weight bytes, memory-mapped or heap-owned, copy on write.
#include "fusectl/graph/tensor.h"
#include "fusectl/graph/buffer_residency.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <functional>
#include <string_view>
#include <vector>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/narrow_types.h"

namespace fusectl {
namespace {

int64_t checkedNumel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throwInvalid(fmt::format("negative tensor dimension {}", d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throwInvalid("tensor element count overflows int64");
    n *= d;
  }
  return n;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double halfToDouble(uint16_t h) {
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31)
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

double bfloat16ToDouble(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Buffer

Buffer Buffer::fromString(std::string bytes) {
  auto owner = std::make_shared<std::string>(std::move(bytes));
  const auto* data = reinterpret_cast<const uint8_t*>(owner->data());
  const size_t size = owner->size();
  Buffer buffer(std::move(owner), data, size);
  buffer.writable_ = true;
  return buffer;
}

Buffer Buffer::fromVector(std::vector<uint8_t> bytes) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* data = owner->data();
  const size_t size = owner->size();
  Buffer buffer(std::move(owner), data, size);
  buffer.writable_ = true;
  return buffer;
}

Buffer Buffer::slice(size_t offset, size_t length) const {
  if (offset > size_ || length > size_ - offset)
    throwInternal(fmt::format("Buffer::slice: bytes {}..{} of {}", offset, offset + length, size_));
  if (length == 0) return Buffer();
  if (!data_) throwInternal("Buffer::slice of deferred bytes");
  return Buffer(owner_, data_ + offset, length);
}

// A named type, so that releaseResidentPages can tell a file mapping from other owners.
struct MappedFileDeleter {
  size_t length;
  void operator()(const void* p) const { ::munmap(const_cast<void*>(p), length); }
};

Buffer Buffer::mapFile(const std::string& path, uint64_t offset,
                                              uint64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throwIo(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throwIo(fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
  }
  auto file_size = static_cast<uint64_t>(st.st_size);
  if (offset > file_size || length > file_size - offset) {
    ::close(fd);
    throwInvalid(fmt::format("{}: bytes {}..{} are beyond the end of the file ({} bytes)", path,
                             offset, offset + length, file_size));
  }
  if (length == 0) {
    ::close(fd);
    return Buffer();
  }
  // mmap wants a page-aligned offset; map from the page start and point into it.
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t aligned = offset - offset % page;
  size_t map_length = static_cast<size_t>(length + (offset - aligned));
  void* base = ::mmap(nullptr, map_length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(aligned));
  int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (base == MAP_FAILED) throwIo(fmt::format("{}: cannot map: {}", path, std::strerror(err)));
  std::shared_ptr<const void> owner(base, MappedFileDeleter{map_length});
  return Buffer(std::move(owner), static_cast<const uint8_t*>(base) + (offset - aligned),
                static_cast<size_t>(length));
}

// A deferred buffer keeps data_ null (with a non-zero size) and its owner_ is this state.
struct Buffer::Deferred {
  std::shared_ptr<const ByteRecipe> recipe;
  mutable std::once_flag once;
  mutable std::unique_ptr<uint8_t[]> bytes;
  mutable std::atomic<bool> done{false};
};

Buffer Buffer::deferred(size_t size, std::shared_ptr<const ByteRecipe> recipe) {
  if (size == 0) return Buffer();
  if (!recipe) throwInternal("Buffer::deferred needs a recipe");
  auto state = std::make_shared<Deferred>();
  state->recipe = std::move(recipe);
  return Buffer(std::move(state), nullptr, size);
}

const uint8_t* Buffer::deferredData() const {
  const auto* state = static_cast<const Deferred*>(owner_.get());
  std::call_once(state->once, [state, size = size_] {
    auto bytes = std::make_unique<uint8_t[]>(size);
    state->recipe->produce(bytes.get(), size);
    state->bytes = std::move(bytes);
    state->done.store(true, std::memory_order_release);
  });
  return state->bytes.get();
}

bool Buffer::isPending() const {
  if (data_ || size_ == 0) return false;
  return !static_cast<const Deferred*>(owner_.get())->done.load(std::memory_order_acquire);
}

void Buffer::copyTo(uint8_t* dst) const {
  if (size_ == 0) return;
  if (isPending()) {
    static_cast<const Deferred*>(owner_.get())->recipe->produce(dst, size_);
    return;
  }
  std::memcpy(dst, data(), size_);
}

// ---------------------------------------------------------------------------------------------
// Tensor

Tensor::Tensor(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  int64_t n = checkedNumel(dims_);
  if (dtype_ == DType::String) {
    strings_.resize(static_cast<size_t>(n));
    return;
  }
  bytes_ = Buffer::fromVector(std::vector<uint8_t>(dtypeStorageBytes(dtype_, n), 0));
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims, Buffer bytes)
    : dtype_(dtype), dims_(std::move(dims)), bytes_(std::move(bytes)) {
  size_t expected = dtypeStorageBytes(dtype_, checkedNumel(dims_));
  if (dtype_ == DType::String) throwInternal("string tensors hold strings, not bytes");
  if (byteSize() != expected)
    throwInternal(fmt::format("{} tensor of {} elements needs {} bytes, got {}", dtypeName(dtype_),
                              checkedNumel(dims_), expected, byteSize()));
  // Kernels read a bool element as C++ bool, for which a byte other than 0 or 1 is undefined
  // behaviour; a file may hold others (an int32_data entry of 255, raw bytes), which mean true.
  // Bool tensors are masks and flags, small enough to scan on every construction.
  if (dtype_ == DType::Bool) {
    const uint8_t* b = bytes_.data();
    size_t n = bytes_.size();
    if (std::any_of(b, b + n, [](uint8_t v) { return v > 1; })) {
      std::vector<uint8_t> normalized(n);
      for (size_t i = 0; i < n; ++i) normalized[i] = b[i] != 0;
      bytes_ = Buffer::fromVector(std::move(normalized));
    }
  }
}

Tensor Tensor::ofStrings(std::vector<int64_t> dims, std::vector<std::string> values) {
  Tensor t;
  t.dtype_ = DType::String;
  t.dims_ = std::move(dims);
  if (static_cast<size_t>(checkedNumel(t.dims_)) != values.size())
    throwInternal(
        fmt::format("string tensor needs {} values, got {}", checkedNumel(t.dims_), values.size()));
  t.strings_ = std::move(values);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

void Tensor::copyBytesTo(uint8_t* dst) const { bytes_.copyTo(dst); }

uint8_t* Tensor::mutableBytes() {
  if (bytes_.size() == 0) return nullptr;
  if (bytes_.writable_ && bytes_.owner_.use_count() == 1)
    return const_cast<uint8_t*>(bytes_.data());
  std::vector<uint8_t> copy(bytes_.size());
  bytes_.copyTo(copy.data());
  bytes_ = Buffer::fromVector(std::move(copy));
  return const_cast<uint8_t*>(bytes_.data());
}

namespace {

// The bytes of `b` for one look: deferred bytes not computed yet are produced into `scratch`
// and not kept, so that comparing or hashing weights (dedupe-initializers reads every one) does
// not make a model hold the bytes a pass deferred (fold-conv-bn's: the whole of ResNet-50's
// convolution weights) for the rest of the run.
const uint8_t* bytesForLook(const Buffer& b, std::vector<uint8_t>& scratch) {
  if (!b.isPending()) return b.data();
  scratch.resize(b.size());
  b.copyTo(scratch.data());
  return scratch.data();
}

void mixHash(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

// What contentHash and sampleHash start from: the dtype and the dims.
size_t typeHash(DType dtype, const std::vector<int64_t>& dims) {
  size_t h = static_cast<size_t>(dtype);
  for (int64_t d : dims) mixHash(h, std::hash<int64_t>()(d));
  return h;
}

}  // namespace

bool Tensor::identical(const Tensor& o) const {
  if (dtype_ != o.dtype_ || dims_ != o.dims_) return false;
  if (dtype_ == DType::String) return strings_ == o.strings_;
  if (byteSize() != o.byteSize()) return false;
  if (byteSize() == 0) return true;
  std::vector<uint8_t> mine, theirs;
  return std::memcmp(bytesForLook(bytes_, mine), bytesForLook(o.bytes_, theirs), byteSize()) == 0;
}

size_t Tensor::contentHash() const {
  size_t h = typeHash(dtype_, dims_);
  if (dtype_ == DType::String) {
    for (const std::string& s : strings_) mixHash(h, std::hash<std::string>()(s));
  } else {
    std::vector<uint8_t> scratch;
    const uint8_t* p = bytesForLook(bytes_, scratch);
    if (p) mixHash(h, std::hash<std::string_view>()(
                          std::string_view(reinterpret_cast<const char*>(p), byteSize())));
  }
  return h;
}

size_t Tensor::sampleHash() const {
  if (dtype_ == DType::String) return contentHash();
  size_t h = typeHash(dtype_, dims_);
  std::vector<uint8_t> scratch;
  const uint8_t* p = bytesForLook(bytes_, scratch);
  if (!p) return h;
  constexpr size_t kWindow = 64;
  const size_t n = byteSize();
  const size_t starts[3] = {0, n > kWindow ? (n - kWindow) / 2 : 0, n > kWindow ? n - kWindow : 0};
  for (size_t start : starts) {
    mixHash(h, std::hash<std::string_view>()(std::string_view(
                   reinterpret_cast<const char*>(p) + start, std::min(kWindow, n))));
  }
  return h;
}

double Tensor::valueAsDouble(int64_t index) const {
  if (index < 0 || index >= numel())
    throwInternal(fmt::format("tensor index {} out of range ({} elements)", index, numel()));
  auto i = static_cast<size_t>(index);
  const uint8_t* p = bytes();
  switch (dtype_) {
    case DType::Float: return load<float>(p + 4 * i);
    case DType::Double: return load<double>(p + 8 * i);
    case DType::Float16: return halfToDouble(load<uint16_t>(p + 2 * i));
    case DType::BFloat16: return bfloat16ToDouble(load<uint16_t>(p + 2 * i));
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0: return narrowFloatToDouble(p[i], dtype_);
    case DType::Float4E2M1:
      return narrowFloatToDouble(static_cast<uint8_t>(loadPacked(p, index, dtype_)), dtype_);
    case DType::Bool: return p[i] != 0 ? 1.0 : 0.0;
    default: return static_cast<double>(valueAsInt64(index));
  }
}

int64_t Tensor::valueAsInt64(int64_t index) const {
  if (index < 0 || index >= numel())
    throwInternal(fmt::format("tensor index {} out of range ({} elements)", index, numel()));
  auto i = static_cast<size_t>(index);
  const uint8_t* p = bytes();
  switch (dtype_) {
    case DType::UInt8: return p[i];
    case DType::Int8: return static_cast<int8_t>(p[i]);
    case DType::UInt16: return load<uint16_t>(p + 2 * i);
    case DType::Int16: return load<int16_t>(p + 2 * i);
    case DType::Int32: return load<int32_t>(p + 4 * i);
    case DType::Int64: return load<int64_t>(p + 8 * i);
    case DType::UInt32: return load<uint32_t>(p + 4 * i);
    case DType::UInt64: return static_cast<int64_t>(load<uint64_t>(p + 8 * i));
    case DType::Bool: return p[i] != 0 ? 1 : 0;
    case DType::UInt4:
    case DType::Int4:
    case DType::UInt2:
    case DType::Int2: return loadPacked(p, index, dtype_);
    case DType::Float:
    case DType::Double:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
    case DType::Float4E2M1: {
      double d = valueAsDouble(index);
      if (std::isnan(d)) return 0;
      if (d >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
      if (d <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(d);
    }
    default:
      throwUnsupported(
          fmt::format("{} tensor values cannot be read as numbers", dtypeName(dtype_)));
  }
}

bool releaseResidentPages(const Buffer& buffer) {
  if (buffer.isPending()) {
    bool dropped = false;
    const auto* deferred = static_cast<const Buffer::Deferred*>(buffer.owner().get());
    for (const Buffer* source : deferred->recipe->sources()) {
      dropped = releaseResidentPages(*source) || dropped;
    }
    return dropped;
  }
  if (buffer.size() == 0 || !std::get_deleter<MappedFileDeleter>(buffer.owner())) return false;
  // Whole pages around the bytes: neighbours' pages are file pages too, so dropping them costs
  // at most a re-read.
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(buffer.data()) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(buffer.data()) + buffer.size() + page - 1) / page * page;
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0;
}

}  // namespace fusectl
