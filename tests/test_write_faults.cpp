// Faults while fusectl writes: killed at random points (SIGINT, SIGTERM, SIGKILL), a file-size
// limit and a full disk, an unwritable folder, 16 processes at once, and a model replaced while
// it is read. What must hold: the target is the old file byte for byte or the complete new one,
// never partial; after SIGINT/SIGTERM no temporary file remains; every failure is one line.
//
// The children are fusectl itself (FUSECTL_BINARY), spawned with fork/exec so that a test can
// set a resource limit in the child or send it a signal at a chosen moment.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "test_files.h"

namespace fs = std::filesystem;
using fusectl::testing::slurp;
using fusectl::testing::TempDir;

namespace {

struct Child {
  pid_t pid = -1;
  std::string err_path;
};

struct Outcome {
  bool exited = false;
  int code = -1;    // when exited
  int signal = 0;   // when killed
  std::string err;  // stderr
};

// fusectl ARGS with stdout to /dev/null and stderr to `err_path`; `file_size_limit` > 0 sets
// RLIMIT_FSIZE in the child before exec (no privileges needed).
Child spawnFusectl(const std::vector<std::string>& args, const std::string& err_path,
                   rlim_t file_size_limit = 0) {
  std::vector<std::string> argv_strings = {FUSECTL_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  Child c;
  c.err_path = err_path;
  c.pid = ::fork();
  if (c.pid == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(err_fd, 2);
    // A shell that started the tests in the background may have left SIGINT ignored, and an
    // ignored signal stays ignored across exec (fusectl keeps it so, as nohup wants).
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    if (file_size_limit > 0) {
      struct rlimit limit {file_size_limit, file_size_limit};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return c;
}

Outcome wait(const Child& c) {
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  Outcome o;
  o.exited = WIFEXITED(status);
  o.code = o.exited ? WEXITSTATUS(status) : -1;
  o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  o.err = slurp(c.err_path);
  return o;
}

Outcome runFusectl(const std::vector<std::string>& args, const TempDir& io,
                   rlim_t file_size_limit = 0) {
  return wait(spawnFusectl(args, io / "stderr", file_size_limit));
}

size_t lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// Names in `folder` that a writer left behind: fusectl's hidden temporaries.
std::vector<std::string> temporaries(const fs::path& folder) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    if (name.find(".fusectl-") != std::string::npos || name.find(".tmp.") != std::string::npos)
      found.push_back(name);
  }
  return found;
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A chain x -> Add(W_i) -> Relu -> ... with `blocks` weights of `floats` each: large enough that
// writing it takes a while, built through the library so that the test needs no generator.
void saveChainModel(const std::string& path, int blocks, int64_t floats, float salt,
                    const fusectl::SaveOptions& options = {}) {
  using namespace fusectl;
  Model model;
  model.opset_imports.push_back({"", 13});
  Graph& g = *model.graph;
  ValueType type;
  type.dtype = DType::Float;
  type.shape = Shape::ofStatic({floats});
  Value* x = g.addInput("x", type);
  for (int b = 0; b < blocks; ++b) {
    std::vector<float> w(static_cast<size_t>(floats));
    for (size_t i = 0; i < w.size(); ++i) w[i] = salt + static_cast<float>((i * 7 + b) % 101);
    Value* wv = g.addInitializer("w" + std::to_string(b), Tensor::fromValues(DType::Float, {floats}, w));
    Node* add = g.createNode({"Add", "", {x, wv}, {"sum" + std::to_string(b)}, "add" + std::to_string(b), {}});
    Node* relu = g.createNode({"Relu", "", {add->output(0)}, {"act" + std::to_string(b)}, "relu" + std::to_string(b), {}});
    x = relu->output(0);
  }
  g.addOutput(x);
  saveModel(model, path, options);
}

std::string modelPath(const std::string& name) {
  return std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name;
}

}  // namespace

TEST_CASE("write faults: a killed optimize leaves the old output or the complete new one",
          "[cli][write_faults]") {
  TempDir dir("kill");
  const std::string input = dir / "big.onnx", target = dir / "out.onnx";
  saveChainModel(input, 24, 1 << 20, 0.5f);  // 96 MiB of weights
  const std::string input_bytes = slurp(input);

  // The complete new output, and how long producing it takes.
  const auto start = std::chrono::steady_clock::now();
  Outcome full = runFusectl({"optimize", "-O3", input, "-o", target}, dir);
  const double full_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(full.code == 0);
  const std::string new_bytes = slurp(target);
  REQUIRE(new_bytes.size() > (64u << 20));
  const std::string old_bytes = slurp(modelPath("resnet_mini.onnx"));

  int finished = 0, killed = 0;
  for (int sig : {SIGINT, SIGTERM, SIGKILL}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      INFO("signal " << sig << ", seed " << seed);
      writeBytes(target, old_bytes);
      // Anywhere from start-up to just past the typical end.
      std::mt19937 rng(seed * 1000 + static_cast<uint32_t>(sig));
      const int delay_ms =
          std::uniform_int_distribution<int>(0, static_cast<int>(full_ms * 1.1))(rng);
      Child c = spawnFusectl({"optimize", "-O3", input, "-o", target}, dir / "stderr");
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ::kill(c.pid, sig);
      Outcome o = wait(c);
      if (o.exited) {
        CHECK(o.code == 0);  // finished before the signal
        ++finished;
      } else {
        CHECK(o.signal == sig);  // died of the signal it was sent, not of a fault
        ++killed;
      }
      const std::string now = slurp(target);
      CHECK((now == old_bytes || now == new_bytes));
      CHECK(slurp(input) == input_bytes);
      if (sig != SIGKILL) CHECK(temporaries(dir.path).empty());
      for (const std::string& t : temporaries(dir.path)) fs::remove(dir.path / t);  // SIGKILL's
    }
  }
  WARN("killed " << killed << " runs, " << finished << " finished first; a full run took "
                 << full_ms << " ms");
  CHECK(killed > 0);
}

TEST_CASE("write faults: a file-size limit is an I/O error, nothing partial left",
          "[cli][write_faults]") {
  TempDir dir("fsize");
  const std::string input = dir / "big.onnx";
  saveChainModel(input, 4, 1 << 20, 0.5f);  // 16 MiB
  const std::string input_bytes = slurp(input);
  const std::string old_bytes = "the previous output";
  for (const char* name : {"out.onnx", "fresh.onnx"}) {
    const std::string target = dir / name;
    if (std::string(name) == "out.onnx") writeBytes(target, old_bytes);
    Outcome o = runFusectl({"optimize", "-O3", input, "-o", target}, dir, 4 << 20);
    INFO(o.err);
    CHECK(o.exited);
    CHECK(o.code == 4);
    CHECK(lines(o.err) == 1);
    CHECK(o.err.find(target + ": cannot write: File too large") != std::string::npos);
    if (std::string(name) == "out.onnx") CHECK(slurp(target) == old_bytes);
    else CHECK(!fs::exists(target));
  }
  // The other writers: a dump to a file, a report.
  Outcome dump = runFusectl({"dump", input, "--format", "json", "-o", dir / "d.json"}, dir, 512);
  CHECK(dump.code == 4);
  CHECK(lines(dump.err) == 1);
  CHECK(!fs::exists(dir / "d.json"));
  CHECK(slurp(input) == input_bytes);
  CHECK(temporaries(dir.path).empty());
}

TEST_CASE("write faults: a full disk (a small tmpfs) is an I/O error, nothing partial left",
          "[cli][write_faults]") {
  TempDir dir("tmpfs");
  const std::string input = dir / "big.onnx";
  saveChainModel(input, 4, 1 << 20, 0.5f);  // 16 MiB
  const std::string mount_point = dir / "small";
  fs::create_directory(mount_point);
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=4m") != 0) {
    WARN("skipped: cannot mount a tmpfs here (" << std::strerror(errno) << "); needs root");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{mount_point};
  const std::string target = mount_point + "/out.onnx";
  writeBytes(target, "old");
  Outcome o = runFusectl({"optimize", "-O3", input, "-o", target}, dir);
  INFO(o.err);
  CHECK(o.code == 4);
  CHECK(lines(o.err) == 1);
  CHECK(o.err.find("No space left on device") != std::string::npos);
  CHECK(slurp(target) == "old");
  CHECK(temporaries(mount_point).empty());
  // Read-only: the same refusal, before any byte is written.
  REQUIRE(::mount("tmpfs", mount_point.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=4m") == 0);
  Outcome ro = runFusectl({"optimize", "-O3", input, "-o", target}, dir);
  CHECK(ro.code == 4);
  CHECK(lines(ro.err) == 1);
  CHECK(ro.err.find("Read-only file system") != std::string::npos);
  CHECK(slurp(target) == "old");
}

TEST_CASE("write faults: an unwritable output folder is an I/O error", "[cli][write_faults]") {
  TempDir dir("unwritable");
  const std::string input = modelPath("resnet_mini.onnx");
  // A folder that does not exist, and a "folder" that is a file: for every user, root included.
  for (const std::string& target : {dir / "missing/out.onnx", dir / "file/out.onnx"}) {
    if (target.find("file/") != std::string::npos) writeBytes(dir / "file", "x");
    Outcome o = runFusectl({"optimize", "-O3", input, "-o", target}, dir);
    INFO(o.err);
    CHECK(o.code == 4);
    CHECK(lines(o.err) == 1);
    CHECK(o.err.find(target) != std::string::npos);
  }
  if (::geteuid() == 0) {
    WARN("skipped the read-only permission case: root writes anywhere");
    return;
  }
  fs::create_directory(dir / "locked");
  fs::permissions(dir / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  Outcome o = runFusectl({"optimize", "-O3", input, "-o", dir / "locked/out.onnx"}, dir);
  fs::permissions(dir / "locked", fs::perms::owner_all);
  CHECK(o.code == 4);
  CHECK(lines(o.err) == 1);
  CHECK(o.err.find("Permission denied") != std::string::npos);
  CHECK(fs::is_empty(dir / "locked"));
}

TEST_CASE("write faults: 16 optimize processes on one input give byte-identical outputs",
          "[cli][write_faults]") {
  TempDir dir("parallel");
  const std::string input = modelPath("bert_layer.onnx");
  const std::string input_bytes = slurp(input);
  std::vector<Child> children;
  for (int i = 0; i < 16; ++i)
    children.push_back(spawnFusectl(
        {"optimize", "-O3", input, "-o", dir / ("out" + std::to_string(i) + ".onnx")},
        dir / ("err" + std::to_string(i))));
  std::vector<std::string> outputs;
  for (int i = 0; i < 16; ++i) {
    Outcome o = wait(children[static_cast<size_t>(i)]);
    INFO(o.err);
    CHECK(o.code == 0);
    outputs.push_back(slurp(dir / ("out" + std::to_string(i) + ".onnx")));
  }
  REQUIRE(!outputs[0].empty());
  for (const std::string& o : outputs) CHECK(o == outputs[0]);
  CHECK(slurp(input) == input_bytes);
  CHECK(temporaries(dir.path).empty());
}

TEST_CASE("write faults: a model replaced while it is read loads or fails cleanly",
          "[cli][write_faults]") {
  TempDir dir("replace");
  const std::string path = dir / "m.onnx";
  fusectl::SaveOptions external;
  external.external_data_file = "m.onnx.data";
  saveChainModel(path, 8, 1 << 16, 0.5f, external);
  std::atomic<bool> stop{false};
  std::atomic<int> replacements{0};
  // Another writer replaces model and data, alternating two versions of different sizes.
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      saveChainModel(path, i % 2 ? 12 : 8, i % 2 ? (1 << 15) : (1 << 16), 0.5f + i % 2, external);
      ++replacements;
    }
  });
  int loaded = 0, refused = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    for (const char* cmd : {"dump", "run"}) {
      Outcome o = runFusectl({cmd, path}, dir);
      INFO(cmd << ": " << o.err);
      REQUIRE(o.exited);  // never a signal
      CHECK((o.code == 0 || o.code == 3 || o.code == 4));
      CHECK(lines(o.err) == (o.code == 0 ? 0u : 1u));
      (o.code == 0 ? loaded : refused)++;
    }
  }
  stop = true;
  writer.join();
  WARN(loaded << " reads loaded, " << refused << " refused cleanly, during " << replacements
              << " replacements");
  CHECK(loaded > 0);
}
