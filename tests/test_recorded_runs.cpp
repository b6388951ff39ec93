// Recorded runs (ExecutorOptions::capture_graph, what CUDA Graphs give the CUDA backend),
// checked without a GPU: a device whose memory is the host's and whose kernels are the CPU's,
// but which records like a CUDA stream under capture. While it records, a kernel's work is
// kept for replay and its results are destroyed afterwards (a captured kernel does not run),
// synchronous copies and synchronize() fail, and replay() runs the kept work on the buffers it
// was recorded with. So a replay gives the right outputs only if the executor fed the new
// inputs into the recorded buffers, read the outputs from where the recording wrote them, and
// recorded nothing that a replay would leave stale.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/backend.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/profile.h"
#include "fusectl/kernels/seeded_inputs.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

class RecordingDevice;
RecordingDevice* g_device = nullptr;  // the wrapped kernels' way back to their device

class RecordingDevice final : public Backend {
 public:
  // Ops given device kernels (the CPU's, wrapped); anything else falls back to the CPU.
  explicit RecordingDevice(const std::vector<std::string>& ops) {
    g_device = this;
    // Reshape and its kin only relabel bytes, reading the shape on the host, as on CUDA.
    registerAliasKernels(registry_, Device::FirstCustom, {DType::Float});
    for (const std::string& op : ops) {
      for (DType t : {DType::Float}) {
        for (int64_t opset : {13, 17}) {
          const KernelInfo* cpu = KernelRegistry::global().find("", op, opset, t, Device::Cpu);
          if (!cpu) continue;
          KernelInfo info = *cpu;
          info.device = Device::FirstCustom;
          info.since_opset = opset;
          info.until_opset = opset;
          info.fn = [fn = cpu->fn](KernelContext& ctx) { g_device->launch(fn, ctx); };
          registry_.add(std::move(info));
        }
      }
    }
  }
  ~RecordingDevice() override { g_device = nullptr; }

  Device device() const override { return Device::FirstCustom; }
  std::shared_ptr<DeviceAllocator> allocator() const override { return hostAllocator(); }
  const KernelRegistry& kernels() const override { return registry_; }
  void synchronize() const override {
    if (recording_) throw Error(ErrorKind::Internal, "synchronize while recording");
  }
  void copyToHost(void* dst, const void* src, size_t bytes) const override {
    if (recording_) throw Error(ErrorKind::Internal, "synchronous copy while recording");
    std::memcpy(dst, src, bytes);
  }
  void copyFromHost(void* dst, const void* src, size_t bytes) const override {
    if (recording_) throw Error(ErrorKind::Internal, "synchronous copy while recording");
    std::memcpy(dst, src, bytes);
  }
  uint64_t launches() const override { return launches_; }

  bool canCapture() const override { return can_capture; }
  void beginCapture() const override {
    if (recording_) throw Error(ErrorKind::Internal, "already recording");
    recording_ = true;
    kept_.clear();
    ++captures;
  }
  std::unique_ptr<RecordedRun> endCapture() const override {
    if (!recording_) throw Error(ErrorKind::Internal, "not recording");
    recording_ = false;
    if (fail_end_capture) throw Error(ErrorKind::Internal, "the device refused the recording");
    destroyRecordedResults();
    auto run = std::make_unique<Recorded>();
    run->work = std::move(kept_);
    kept_.clear();
    return run;
  }
  void abortCapture() const noexcept override {
    recording_ = false;
    kept_.clear();
    ++aborts;
  }
  void replay(const RecordedRun& run) const override {
    ++replays;
    for (const Work& w : static_cast<const Recorded&>(run).work) {
      w.replay();
      if (!corrupt_replays) continue;
      for (const HostTensor& out : w.outputs) {
        if (out.dtype() == DType::Float && out.numel() > 0) {
          const_cast<float*>(out.data<float>())[0] += 1.0f;
        }
      }
    }
  }
  std::shared_ptr<void> allocatePinned(size_t bytes) const override {
    return std::shared_ptr<void>(::operator new(bytes), [](void* p) { ::operator delete(p); });
  }
  void copyFromPinnedAsync(void* dst, const void* src, size_t bytes) const override {
    queueCopy(dst, src, bytes);
  }
  void copyToPinnedAsync(void* dst, const void* src, size_t bytes) const override {
    queueCopy(dst, src, bytes);
  }

  // A kernel call: runs now (so the executor sees its outputs' buffers); while recording, it is
  // also kept to be run again by replay() on the same buffers.
  void launch(const KernelFn& fn, KernelContext& ctx) {
    ++launches_;
    if (!recording_) ++queued_kernels;
    fn(ctx);
    if (!recording_) return;
    Work w;
    w.fn = fn;
    w.node = &ctx.node();
    w.opset = ctx.opset();
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      w.inputs.push_back(ctx.input(i) ? *ctx.input(i) : HostTensor());
      w.present.push_back(ctx.input(i) != nullptr);
    }
    w.outputs = ctx.outputs();
    kept_.push_back(std::move(w));
  }

  // Knobs and counters of the tests.
  bool can_capture = true;
  bool fail_end_capture = false;
  bool corrupt_replays = false;
  mutable int captures = 0, aborts = 0, replays = 0;
  uint64_t queued_kernels = 0;  // kernels run one by one (not by replay)

 private:
  // Replays a kernel into the buffers it wrote when recorded.
  class RecordedOutputs final : public OutputAllocator {
   public:
    explicit RecordedOutputs(const std::vector<HostTensor>& outputs) : outputs_(outputs) {}
    HostTensor allocate(DType, const std::vector<int64_t>&) override {
      throw std::logic_error("a replayed kernel asked for an unnamed buffer");
    }
    HostTensor allocateFor(const Node&, size_t index, DType dtype,
                           const std::vector<int64_t>& dims) override {
      const HostTensor& t = outputs_.at(index);
      if (t.dtype() != dtype || t.dims() != dims) {
        throw std::logic_error("a replayed kernel asked for another output than it recorded");
      }
      return t;
    }

   private:
    const std::vector<HostTensor>& outputs_;
  };

  struct Work {
    std::function<void()> copy;  // a queued copy, or else a kernel:
    KernelFn fn;
    const Node* node = nullptr;
    int64_t opset = 0;
    std::vector<HostTensor> inputs;
    std::vector<bool> present;
    std::vector<HostTensor> outputs;

    void replay() const {
      if (copy) {
        copy();
        return;
      }
      std::vector<const HostTensor*> args;
      for (size_t i = 0; i < inputs.size(); ++i) args.push_back(present[i] ? &inputs[i] : nullptr);
      RecordedOutputs allocator(outputs);
      KernelContext ctx(*node, opset, args, allocator, 1);
      fn(ctx);
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (ctx.outputs()[i].raw() != outputs[i].raw()) {
          throw std::logic_error("a replayed kernel wrote somewhere else than it recorded");
        }
      }
    }
  };
  struct Recorded final : RecordedRun {
    std::vector<Work> work;
  };

  void queueCopy(void* dst, const void* src, size_t bytes) const {
    if (!recording_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    Work w;
    w.copy = [dst, src, bytes] { std::memcpy(dst, src, bytes); };
    kept_.push_back(std::move(w));
  }

  // A recorded kernel has not run: its results must not be there to be read (NaN bytes), except
  // where an output is an alias of memory the recording did not write (a Reshape of a weight).
  void destroyRecordedResults() const {
    std::set<const void*> written, external;
    for (const Work& w : kept_) {
      for (const HostTensor& out : w.outputs) written.insert(out.raw());
    }
    for (const Work& w : kept_) {
      for (const HostTensor& in : w.inputs) {
        if (in.raw() && !written.count(in.raw())) external.insert(in.raw());
      }
    }
    for (const Work& w : kept_) {
      for (const HostTensor& out : w.outputs) {
        if (out.raw() && !external.count(out.raw()) && out.dtype() != DType::String) {
          std::memset(const_cast<void*>(out.raw()), 0xff, out.byteSize());
        }
      }
    }
  }

  KernelRegistry registry_;
  mutable bool recording_ = false;
  mutable std::vector<Work> kept_;
  uint64_t launches_ = 0;
};

// 2x8 -> MatMul -> Add -> Relu -> Reshape (a constant shape) -> Softmax: five device nodes,
// four kernel launches (Reshape relabels).
std::string mlpText(const std::string& batch = "2", const std::string& extra_nodes = "",
                    const std::string& extra_ops = "") {
  std::string w, b;
  for (int i = 0; i < 8 * 16; ++i) w += (i ? ", " : "") + std::to_string(((i * 7) % 11 - 5) * 0.1);
  for (int i = 0; i < 16; ++i) b += (i ? ", " : "") + std::to_string((i % 5 - 2) * 0.25);
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "g (float[" + batch + ", 8] X) => (float[" + batch + ", 4, 4] Y" + extra_ops + ")\n"
         "<float[8, 16] W = {" + w + "}, float[16] B = {" + b + "}, int64[3] S = {0, 4, 4}>\n"
         "{\n  M = MatMul (X, W)\n  A = Add (M, B)\n  R = Relu (A)\n"
         "  T = Reshape (R, S)\n  Y = Softmax <axis = -1> (T)\n" + extra_nodes + "}\n";
}

std::vector<NamedTensor> inputsFor(const Model& model, uint64_t seed) {
  return makeRandomInputs(*model.graph, seed);
}

void requireSameOutputs(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(want[i].name);
    REQUIRE(got[i].name == want[i].name);
    REQUIRE(got[i].tensor.dtype() == want[i].tensor.dtype());
    REQUIRE(got[i].tensor.dims() == want[i].tensor.dims());
    CHECK(std::memcmp(got[i].tensor.raw(), want[i].tensor.raw(), want[i].tensor.byteSize()) == 0);
  }
}

// One run of `executor` on `inputs`, whose outputs must be the CPU's bit for bit; its stats.
ExecutionStats runLikeCpu(Executor& executor, const Model& model,
                          const std::vector<NamedTensor>& inputs) {
  ExecutionStats stats;
  requireSameOutputs(executor.run(inputs, &stats), runModel(model, inputs));
  return stats;
}

ExecutorOptions recordingOptions(const Backend& device) {
  ExecutorOptions options;
  options.backend = &device;
  options.capture_graph = true;
  return options;
}

const std::vector<std::string> kMlpOps = {"MatMul", "Add", "Relu", "Softmax"};

}  // namespace

TEST_CASE("recorded runs: replays compute each run's inputs, one recording for runs alike",
          "[recorded_runs]") {
  RecordingDevice device(kMlpOps);
  const auto model = parseModelText(mlpText(), "mlp");
  Executor executor(*model, recordingOptions(device));
  REQUIRE(executor.cpuFallbacks().empty());

  for (uint64_t run = 1; run <= 6; ++run) {
    INFO("run " << run);
    const ExecutionStats stats = runLikeCpu(executor, *model, inputsFor(*model, 100 + run));
    CHECK(stats.nodes_run == 5);
    CHECK(stats.device_launches == 4);
    if (run == 1) {
      CHECK_FALSE(stats.graph_replayed);
      CHECK(stats.device_graph ==
            "not recorded yet: the next run with these inputs' dims records one");
    } else if (run == 2) {
      CHECK_FALSE(stats.graph_replayed);
      CHECK(stats.device_graph == "recorded after this run (its replay agreed with it)");
      CHECK(device.captures == 1);
      CHECK(device.replays == 1);  // the check against this run
    } else {
      CHECK(stats.graph_replayed);
      CHECK(stats.device_graph == "replayed");
      CHECK(stats.copies_to_device == 1);  // X, inside the recording
      CHECK(stats.copies_to_host == 1);    // Y
      CHECK(stats.copied_bytes == (2 * 8 + 2 * 16) * sizeof(float));
    }
  }
  CHECK(device.captures == 1);
  CHECK(device.replays == 5);
  CHECK(device.queued_kernels == 8);  // runs 1 and 2; the rest were replays
  CHECK(device.aborts == 0);
}

TEST_CASE("recorded runs: other dims run queued, and the recording serves its own dims again",
          "[recorded_runs]") {
  RecordingDevice device(kMlpOps);
  const auto model = parseModelText(mlpText("N"), "mlp");
  Executor executor(*model, recordingOptions(device));
  const auto batch = [&](int64_t n, uint64_t seed) {
    return makeRandomInputs(*model->graph, seed, {{"X", Shape::ofStatic({n, 8})}});
  };
  ExecutionStats stats;
  executor.run(batch(2, 1), &stats);
  executor.run(batch(2, 2), &stats);
  REQUIRE(stats.device_graph == "recorded after this run (its replay agreed with it)");

  const auto three = batch(3, 3);
  stats = runLikeCpu(executor, *model, three);
  CHECK_FALSE(stats.graph_replayed);
  CHECK(stats.device_graph ==
        "not used: the inputs differ from the recorded run's (X:float[2,8];)");
  // Two runs of the new dims do not replace the recording: one is kept per executor.
  CHECK_FALSE(runLikeCpu(executor, *model, three).graph_replayed);
  CHECK(device.captures == 1);

  CHECK(runLikeCpu(executor, *model, batch(2, 4)).graph_replayed);
}

TEST_CASE("recorded runs: a node on the CPU, or a host read of a computed value, is refused",
          "[recorded_runs]") {
  SECTION("a CPU fallback") {
    // Sigmoid has no kernel on this device.
    RecordingDevice device(kMlpOps);
    const auto model = parseModelText(
        mlpText("2", "  Z = Sigmoid (Y)\n", ", float[2, 4, 4] Z"), "mlp_sigmoid");
    Executor executor(*model, recordingOptions(device));
    REQUIRE(executor.cpuFallbacks().size() == 1);
    for (uint64_t run = 1; run <= 3; ++run) {
      const ExecutionStats stats = runLikeCpu(executor, *model, inputsFor(*model, run));
      CHECK_FALSE(stats.graph_replayed);
      CHECK(stats.device_graph == "not used: 1 node runs on the CPU (first: 'Sigmoid(Z)' (Sigmoid))");
    }
    CHECK(device.captures == 0);
  }
  SECTION("a shape that is an input: its value would be frozen into the recording") {
    RecordingDevice device(kMlpOps);
    const auto model = parseModelText(
        "<ir_version: 8, opset_import: [\"\" : 17]>\n"
        "g (float[2, 8] X, int64[2] S) => (float[a, b] Y)\n"
        "{\n  R = Relu (X)\n  Y = Reshape (R, S)\n}\n",
        "reshape_by_input");
    Executor executor(*model, recordingOptions(device));
    REQUIRE(executor.cpuFallbacks().empty());
    const auto inputsWith = [&](int64_t rows, int64_t cols, uint64_t seed) {
      auto inputs = makeRandomInputs(*model->graph, seed);
      for (NamedTensor& in : inputs) {
        if (in.name != "S") continue;
        in.tensor = HostTensor(DType::Int64, {2});
        in.tensor.mutableData<int64_t>()[0] = rows;
        in.tensor.mutableData<int64_t>()[1] = cols;
      }
      return inputs;
    };
    ExecutionStats stats;
    executor.run(inputsWith(4, 4, 1), &stats);
    executor.run(inputsWith(4, 4, 2), &stats);
    CHECK(stats.device_graph ==
          "not used: node 'Reshape(Y)' (Reshape): reads 'S' on the host, and it is not a constant");
    CHECK(device.captures == 1);
    CHECK(device.aborts == 1);
    // Same names, dtypes and dims, another shape value: a frozen recording would answer [4, 4].
    const auto other = inputsWith(8, 2, 3);
    const auto outputs = executor.run(other, &stats);
    REQUIRE(outputs[0].tensor.dims() == std::vector<int64_t>{8, 2});
    requireSameOutputs(outputs, runModel(*model, other));
    CHECK_FALSE(stats.graph_replayed);
  }
  SECTION("a backend that cannot record") {
    RecordingDevice device(kMlpOps);
    device.can_capture = false;
    const auto model = parseModelText(mlpText(), "mlp");
    Executor executor(*model, recordingOptions(device));
    ExecutionStats stats;
    for (uint64_t run = 1; run <= 3; ++run) executor.run(inputsFor(*model, run), &stats);
    CHECK(stats.device_graph == "not used: the device 128 backend does not record runs");
    CHECK(device.captures == 0);
  }
  SECTION("the CPU") {
    const auto model = parseModelText(mlpText(), "mlp");
    ExecutorOptions options;
    options.capture_graph = true;
    Executor executor(*model, options);
    ExecutionStats stats;
    for (uint64_t run = 1; run <= 3; ++run) executor.run(inputsFor(*model, run), &stats);
    CHECK(stats.device_graph == "not used: the cpu backend does not record runs");
    CHECK_FALSE(stats.graph_replayed);
  }
}

TEST_CASE("recorded runs: a recording that fails or disagrees is dropped, and runs stay right",
          "[recorded_runs]") {
  const auto model = parseModelText(mlpText(), "mlp");
  SECTION("the device refuses the recording") {
    RecordingDevice device(kMlpOps);
    device.fail_end_capture = true;
    Executor executor(*model, recordingOptions(device));
    ExecutionStats stats;
    for (uint64_t run = 1; run <= 4; ++run) stats = runLikeCpu(executor, *model, inputsFor(*model, run));
    CHECK(stats.device_graph == "not used: recording failed: the device refused the recording");
    CHECK(device.captures == 1);  // tried once, not on every run
    CHECK(device.aborts == 1);
  }
  SECTION("the replay computes something else") {
    RecordingDevice device(kMlpOps);
    device.corrupt_replays = true;
    Executor executor(*model, recordingOptions(device));
    ExecutionStats stats;
    for (uint64_t run = 1; run <= 4; ++run) {
      stats = runLikeCpu(executor, *model, inputsFor(*model, run));
      CHECK_FALSE(stats.graph_replayed);
    }
    CHECK(stats.device_graph.rfind(
              "not used: the recorded run's outputs differ from the queued run's (output 'Y': ",
              0) == 0);
    CHECK(device.replays == 1);
  }
  SECTION("a profiled executor never records: its nodes are timed one by one") {
    RecordingDevice device(kMlpOps);
    ExecutorOptions options = recordingOptions(device);
    options.profile = true;
    Executor executor(*model, options);
    ExecutionStats stats;
    for (uint64_t run = 1; run <= 3; ++run) executor.run(inputsFor(*model, run), &stats);
    CHECK(device.captures == 0);
    CHECK(stats.device_graph.empty());
    CHECK(stats.node_times.size() == 5);
  }
}

TEST_CASE("recorded runs: profile's timed runs replay from the second warmup run on",
          "[recorded_runs][profile]") {
  RecordingDevice device(kMlpOps);
  const auto model = parseModelText(mlpText(), "mlp");
  const auto inputs = inputsFor(*model, 5);
  ProfileOptions options;
  options.execution.backend = &device;
  options.execution.capture_graph = true;
  options.runs = 4;
  SECTION("three warmup runs: every timed run replays") {
    options.warmup = 3;
    const ProfileResult r = profileModels(model.get(), model.get(), inputs, {}, options);
    for (const SideProfile* side : {&*r.unfused, &*r.fused}) {
      INFO(side->name);
      CHECK(side->graph_replays == 4);
      CHECK(side->device_graph == "replayed");
      CHECK(side->device_launches == 4);
      CHECK(side->kernel_invocations == 5);
      // The per-node pass queues node by node: its times are there.
      CHECK(side->nodes.size() == 5);
    }
    REQUIRE(r.agreement);
    CHECK(r.agreement->passed);
    CHECK(device.captures == 2);  // one per side's timing executor
  }
  SECTION("one warmup run: the first timed run records") {
    options.warmup = 1;
    options.sides = ProfiledSides::UnfusedOnly;
    const ProfileResult r = profileModels(model.get(), nullptr, inputs, {}, options);
    CHECK(r.unfused->graph_replays == 3);
    CHECK(r.unfused->device_graph == "replayed");
  }
}

TEST_CASE("recorded runs: profile records both sides or neither", "[recorded_runs][profile]") {
  // The unfused side has a node on the CPU (Sigmoid), the fused one does not: were the fused side
  // replayed, its speedup would be the recording's, not the fusion's.
  RecordingDevice device(kMlpOps);
  const auto unfused =
      parseModelText(mlpText("2", "  Z = Sigmoid (Y)\n", ", float[2, 4, 4] Z"), "mlp_sigmoid");
  const auto fused =
      parseModelText(mlpText("2", "  Z = Relu (Y)\n", ", float[2, 4, 4] Z"), "mlp_relu");
  ProfileOptions options;
  options.execution.backend = &device;
  options.execution.capture_graph = true;
  options.warmup = 3;
  options.runs = 3;
  const ProfileResult r = profileModels(unfused.get(), fused.get(), inputsFor(*unfused, 9), {},
                                        options);
  CHECK(r.unfused->graph_replays == 0);
  CHECK(r.unfused->device_graph == "not used: 1 node runs on the CPU (first: 'Sigmoid(Z)' (Sigmoid))");
  CHECK(r.fused->graph_replays == 0);
  CHECK(r.fused->device_graph ==
        "not used: the unfused side has no recording, and the two are timed alike");
}

TEST_CASE("recorded runs: outputs that alias an input or a weight are read from the right bytes",
          "[recorded_runs]") {
  // Y relabels the graph input's device buffer (which each replay refills), V relabels a weight
  // (which no replay writes): both are copied out inside the recording.
  RecordingDevice device(kMlpOps);
  const auto model = parseModelText(
      "<ir_version: 8, opset_import: [\"\" : 17]>\n"
      "g (float[2, 8] X) => (float[4, 4] Y, float[2, 8] Z, float[8] V)\n"
      "<int64[2] S = {4, 4}, float[2, 4] W = {1, 2, 3, 4, 5, 6, 7, 8}, int64[1] F = {8}>\n"
      "{\n  Y = Reshape (X, S)\n  Z = Relu (X)\n  V = Reshape (W, F)\n}\n",
      "aliases");
  Executor executor(*model, recordingOptions(device));
  for (uint64_t run = 1; run <= 4; ++run) {
    INFO("run " << run);
    CHECK(runLikeCpu(executor, *model, inputsFor(*model, 40 + run)).graph_replayed == (run >= 3));
  }
}
