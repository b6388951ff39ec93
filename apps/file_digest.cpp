// SHA-256 of a model's files, from OpenSSL's libcrypto (file_digest.h).
#include "file_digest.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fusectl/graph/error.h"

namespace fusectl::cli {

namespace {
std::string hex(const unsigned char* digest, unsigned int size) {
  std::string out;
  out.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

struct DigestContext {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
  DigestContext() {
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1)
      throwInternal("OpenSSL: cannot start a SHA-256 digest");
  }
  void update(const void* data, size_t size) {
    if (EVP_DigestUpdate(ctx, data, size) != 1) throwInternal("OpenSSL: SHA-256 update failed");
  }
  std::string finish() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (EVP_DigestFinal_ex(ctx, digest, &size) != 1)
      throwInternal("OpenSSL: SHA-256 finish failed");
    return hex(digest, size);
  }
};

}  // namespace

passes::FileDigest digestFile(const std::string& path, std::string file) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  DigestContext d;
  passes::FileDigest out;
  out.file = std::move(file);
  std::vector<char> chunk(size_t{4} << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<size_t>(in.gcount());
    d.update(chunk.data(), got);
    out.bytes += got;
  }
  if (in.bad()) throwIo(fmt::format("{}: read failed", path));
  out.sha256 = d.finish();
  return out;
}

std::vector<passes::FileDigest> digestExternalFiles(const std::string& model_path,
                                                    const std::vector<std::string>& locations) {
  const std::filesystem::path folder = std::filesystem::path(model_path).parent_path();
  std::vector<passes::FileDigest> out;
  for (const std::string& location : locations)
    out.push_back(digestFile((folder / location).string(), location));
  return out;
}

}  // namespace fusectl::cli
