// Files for tests: TempDir, a fresh folder under the system's temporary directory removed with
// everything in it when the test ends, and slurp(), a whole file's bytes.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace fusectl::testing {

// A path of this test process's own under the system's temporary directory (<name>-<pid>), for
// tests that remove and refill a fixed folder: two test runs at once on one machine (parallel
// checkouts, a developer beside CI) then never clobber each other's files. Whatever the tests
// leave there is removed when the process exits normally (a crashed run keeps it to look at):
// each ctest run used to leave about ten such folders behind in /tmp.
inline std::filesystem::path processTempPath(const std::string& name) {
  struct RemovedAtExit {
    std::vector<std::filesystem::path> paths;
    ~RemovedAtExit() {
      for (const std::filesystem::path& p : paths) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    }
  };
  static RemovedAtExit handed_out;  // one for the whole program: the function is inline
  std::filesystem::path p =
      std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  if (std::find(handed_out.paths.begin(), handed_out.paths.end(), p) == handed_out.paths.end()) {
    handed_out.paths.push_back(p);
  }
  return p;
}

struct TempDir {
  std::filesystem::path path;

  // `prefix` names the folder (fusectl-<prefix>-XXXXXX), so a leftover says which test made it.
  explicit TempDir(const std::string& prefix = "test") {
    std::string templ =
        (std::filesystem::temp_directory_path() / ("fusectl-" + prefix + "-XXXXXX")).string();
    path = mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // File names in the folder, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  size_t numFiles() const { return files().size(); }
};

// Writes `bytes` to `p` (replacing it); the test fails when the file cannot be written.
inline void writeFile(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

// The file's bytes; "" when it cannot be read.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace fusectl::testing
