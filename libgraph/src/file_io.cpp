// Files: whole-file reads, atomic writes (temporary file, fsync, rename), deterministic
// protobuf bytes. What a file holds and which reader takes it is model_file.cpp's business.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/support/temp_file_registry.h"
#include "onnx_convert.h"

namespace fusectl {
namespace onnx_convert {

std::string readFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throwIo(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    throwIo(fmt::format("{}: cannot read: {}", path, std::strerror(err)));
  }
  std::string bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throwIo(fmt::format("{}: cannot read: {}", path, std::strerror(err)));
    }
    bytes.append(chunk, static_cast<size_t>(got));
  }
  ::close(fd);
  return bytes;
}

std::string serializeDeterministic(const google::protobuf::MessageLite& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

bool escapesFolder(const std::string& location) {
  if (!location.empty() && location[0] == '/') return true;
  int depth = 0;
  for (size_t start = 0; start <= location.size();) {
    size_t end = location.find('/', start);
    if (end == std::string::npos) end = location.size();
    std::string_view part(location.data() + start, end - start);
    if (part == "..") {
      if (--depth < 0) return true;
    } else if (!part.empty() && part != ".") {
      ++depth;
    }
    start = end + 1;
  }
  return false;
}

std::string parentDir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::string dir = parentDir(path_);
  size_t slash = path_.find_last_of('/');
  std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  if (base.empty()) throwIo(fmt::format("{}: not a file name", path_));
  // Hidden and in the same folder, so that rename() is atomic and a crash leaves no file that
  // looks like a finished model.
  temp_path_ = (slash == std::string::npos ? std::string() : path_.substr(0, slash + 1)) + "." +
               base + ".fusectl-XXXXXX";
  {
    // A SIGINT or SIGTERM between creating the file and registering it would leave it behind:
    // the signal waits until the handler knows the name.
    CleanupSignalsBlocked until_registered;
    fd_ = ::mkstemp(temp_path_.data());
    if (fd_ < 0)
      throwIo(
          fmt::format("{}: cannot create a file in '{}': {}", path_, dir, std::strerror(errno)));
    cleanup_slot_ = registerTempFile(temp_path_.c_str());
  }
  // mkstemp creates 0600; a saved model gets the permissions any new file would.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
  unregisterTempFile(cleanup_slot_);
}

void AtomicFile::writeAll(const char* data, size_t size) {
  while (size > 0) {
    ssize_t put = ::write(fd_, data, size);
    if (put < 0) {
      if (errno == EINTR) continue;
      throwIo(fmt::format("{}: cannot write: {}", path_, std::strerror(errno)));
    }
    data += put;
    size -= static_cast<size_t>(put);
    handed_to_kernel_ += static_cast<uint64_t>(put);
  }
  // Start writing finished parts to disk while the rest is still being serialized, so that
  // commit()'s fsync waits for the tail only (on the benchmark VM, fsync of a 750 MB model
  // written in one go took 0.8 s).
  const uint64_t done = handed_to_kernel_;
  constexpr uint64_t kWritebackStep = 32u << 20;
  if (done >= writeback_started_ + kWritebackStep) {
    startWriteback(writeback_started_, done - writeback_started_);
    writeback_started_ = done;
  }
}

void AtomicFile::writeAt(uint64_t offset, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t put = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (put < 0) {
      if (errno == EINTR) continue;
      throwIo(fmt::format("{}: cannot write: {}", path_, std::strerror(errno)));
    }
    p += put;
    offset += static_cast<uint64_t>(put);
    size -= static_cast<size_t>(put);
  }
}

void AtomicFile::startWriteback(uint64_t offset, uint64_t size) {
#if defined(__linux__)
  // Errors surface at fsync.
  ::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(size),
                    SYNC_FILE_RANGE_WRITE);
#else
  (void)offset;
  (void)size;
#endif
}

void AtomicFile::flush() {
  writeAll(pending_.data(), pending_.size());
  pending_.clear();
}

void AtomicFile::write(const void* data, size_t size) {
  constexpr size_t kBatch = 1 << 20;
  written_ += size;
  if (pending_.size() + size > kBatch) flush();
  if (size < kBatch) {
    pending_.append(static_cast<const char*>(data), size);
    return;
  }
  writeAll(static_cast<const char*>(data), size);  // large blocks straight from the caller
}

void AtomicFile::commit() {
  finish();
  publish();
}

void AtomicFile::finish() {
  flush();
  if (::fsync(fd_) != 0) throwIo(fmt::format("{}: cannot sync: {}", path_, std::strerror(errno)));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throwIo(fmt::format("{}: cannot close: {}", path_, std::strerror(errno)));
}

void AtomicFile::publish() {
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throwIo(fmt::format("{}: cannot rename the finished file into place: {}", path_,
                        std::strerror(errno)));
  committed_ = true;
  unregisterTempFile(cleanup_slot_);
  cleanup_slot_ = -1;
  // Best effort: persist the rename itself.
  int dir_fd = ::open(parentDir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace onnx_convert

void writeFileAtomically(const std::string& path, const std::string& bytes) {
  onnx_convert::AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace fusectl
