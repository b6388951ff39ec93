// The device seam (backend.h) without a GPU: kernel lookup by dtype and device, and a fake
// device that runs one op (float Relu) while every other node falls back to the CPU.
//
// The fake device's memory is host memory from a heap of its own that stores every byte XOR-ed
// with a key, so a tensor handed across the host/device boundary without a copy is garbage to
// whoever reads it, and the outputs could not match the CPU run bit for bit. Fresh buffers are
// poisoned (they decode to NaN) and each ends in a canary checked when it is freed.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/backend.h"
#include "fusectl/kernels/executor.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

constexpr Device kFakeDevice = static_cast<Device>(static_cast<int>(Device::FirstCustom) + 3);
constexpr uint8_t kScramble = 0x5A;
constexpr uint8_t kPoison = 0xFF ^ kScramble;  // decodes to 0xFF bytes: a float NaN
constexpr uint8_t kCanary = 0xC3;
constexpr size_t kCanaryBytes = 64;

class ScrambledMemory final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes) override {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes + kCanaryBytes));
    if (!p) throw std::bad_alloc();
    std::memset(p, kPoison, bytes);
    std::memset(p + bytes, kCanary, kCanaryBytes);
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = bytes;
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    auto* p = static_cast<uint8_t*>(ptr);
    for (size_t i = 0; i < kCanaryBytes; ++i) {
      if (p[bytes + i] != kCanary) ++breaches_;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (live_.erase(p) == 0) ++breaches_;  // freed twice, or never ours
    }
    std::free(p);
  }

  // Whether [p, p + bytes) lies inside one live buffer of this heap.
  bool owns(const void* ptr, size_t bytes) const {
    const auto* p = static_cast<const uint8_t*>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }
  size_t liveBuffers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }
  size_t breaches() const { return breaches_; }

 private:
  mutable std::mutex mu_;
  std::map<const uint8_t*, size_t> live_;
  std::atomic<size_t> breaches_{0};
};

float loadScrambled(const HostTensor& t, int64_t i) {
  uint8_t bytes[4];
  std::memcpy(bytes, t.data<uint8_t>() + 4 * i, 4);
  for (uint8_t& b : bytes) b ^= kScramble;
  float v;
  std::memcpy(&v, bytes, 4);
  return v;
}

void storeScrambled(HostTensor& t, int64_t i, float v) {
  uint8_t bytes[4];
  std::memcpy(bytes, &v, 4);
  for (uint8_t& b : bytes) b ^= kScramble;
  std::memcpy(t.mutableData<uint8_t>() + 4 * i, bytes, 4);
}

class FakeDevice final : public Backend {
 public:
  FakeDevice() : memory_(std::make_shared<ScrambledMemory>()) {
    std::shared_ptr<ScrambledMemory> memory = memory_;
    std::atomic<size_t>* calls = &relu_calls;
    registry_.add({"", "Relu", 1, 1000,
                   [memory, calls](KernelContext& ctx) {
                     const HostTensor& x = ctx.requireInput(0);
                     if (!memory->owns(x.raw(), x.byteSize())) ctx.fail("input not on the device");
                     HostTensor& y = ctx.allocateOutput(0, DType::Float, x.dims());
                     if (!memory->owns(y.raw(), y.byteSize())) ctx.fail("output not on the device");
                     for (int64_t i = 0; i < x.numel(); ++i) {
                       const float v = loadScrambled(x, i);
                       storeScrambled(y, i, v > 0 ? v : 0.0f);  // as the CPU Relu
                     }
                     ++*calls;
                   },
                   DType::Float, kFakeDevice});
  }

  // The seam's optional parts: Reshape and friends through the CPU alias functions (their
  // shape on the host), a Neg kernel that declines every node, and device timestamps that read
  // a fake clock advancing 1 ms per mark.
  void extend() {
    registerAliasKernels(registry_, kFakeDevice, {DType::Float});
    KernelInfo neg{"", "Neg", 1, 1000, noKernel, DType::Float, kFakeDevice};
    neg.accepts = [](const Node&) { return false; };
    registry_.add(std::move(neg));
    timed_ = true;
  }
  int markTime() const override { return timed_ ? marks++ : -1; }
  double elapsedSeconds(int from, int to) const override { return (to - from) * 1e-3; }
  void clearMarks() const override { marks = 0; }
  uint64_t launches() const override { return relu_calls; }
  mutable std::atomic<int> marks{0};

  Device device() const override { return kFakeDevice; }
  std::shared_ptr<DeviceAllocator> allocator() const override { return memory_; }
  const KernelRegistry& kernels() const override { return registry_; }
  void synchronize() const override { ++syncs; }
  void copyToHost(void* host_dst, const void* device_src, size_t bytes) const override {
    copy(host_dst, device_src, bytes, false);
    ++to_host;
  }
  void copyFromHost(void* device_dst, const void* host_src, size_t bytes) const override {
    copy(device_dst, host_src, bytes, true);
    ++to_device;
  }

  const ScrambledMemory& memory() const { return *memory_; }

  mutable std::atomic<size_t> relu_calls{0}, syncs{0}, to_host{0}, to_device{0}, bytes_copied{0};

 private:
  // Scrambles or unscrambles (XOR is its own inverse), after checking that one side is the
  // device's memory and the other is not.
  void copy(void* dst, const void* src, size_t bytes, bool into_device) const {
    const void* device_side = into_device ? dst : src;
    const void* host_side = into_device ? src : dst;
    if (!memory_->owns(device_side, bytes) || memory_->owns(host_side, bytes)) {
      throw std::logic_error("a copy between host and device got its sides wrong");
    }
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    for (size_t i = 0; i < bytes; ++i) d[i] = s[i] ^ kScramble;
    bytes_copied += bytes;
  }

  static void noKernel(KernelContext& ctx) { ctx.fail("a declined kernel ran"); }

  std::shared_ptr<ScrambledMemory> memory_;
  KernelRegistry registry_;
  bool timed_ = false;
};

bool onFakeDevice(const Node& n) {
  return n.domain().empty() && n.opType() == "Relu" && kernelDType(n) == DType::Float;
}

// The copies a run must make when only onFakeDevice nodes run on the device: each value read on
// the side it was not made on crosses once, and graph outputs end on the host.
struct ExpectedCopies {
  size_t to_device = 0, to_device_initializers = 0, to_host = 0, device_nodes = 0;
};

ExpectedCopies expectedCopies(const Graph& g) {
  std::set<const Value*> up, down;
  ExpectedCopies e;
  for (const Node* n : g.nodes()) {
    const bool dev = onFakeDevice(*n);
    e.device_nodes += dev ? 1 : 0;
    for (const Value* v : n->inputs()) {
      if (!v) continue;
      const bool made_on_device = v->producer() && onFakeDevice(*v->producer());
      if (dev && !made_on_device) up.insert(v);
      if (!dev && made_on_device) down.insert(v);
    }
  }
  for (const Value* v : g.outputs()) {
    if (v->producer() && onFakeDevice(*v->producer())) down.insert(v);
  }
  for (const Value* v : up) e.to_device_initializers += v->isInitializer() ? 1 : 0;
  e.to_device = up.size();
  e.to_host = down.size();
  return e;
}

// Deterministic float inputs (symbolic dims set to 1), independent of the executor's helpers.
std::vector<NamedTensor> floatInputs(const Graph& g) {
  std::vector<NamedTensor> inputs;
  uint32_t state = 12345;
  for (const Value* v : g.inputs()) {
    if (v->isInitializer()) continue;
    REQUIRE(v->dtype() == DType::Float);
    std::vector<int64_t> dims;
    for (const Dim& d : v->shape().dims()) dims.push_back(d.isStatic() ? d.value() : 1);
    HostTensor t(DType::Float, dims);
    for (int64_t i = 0; i < t.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.mutableData<float>()[i] = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) /
                                  static_cast<float>(1 << 23);
    }
    inputs.push_back({v->name(), std::move(t)});
  }
  return inputs;
}

void requireBitIdentical(const std::vector<NamedTensor>& got,
                         const std::vector<NamedTensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("output " << want[i].name);
    CHECK(got[i].name == want[i].name);
    REQUIRE(got[i].tensor.dtype() == want[i].tensor.dtype());
    REQUIRE(got[i].tensor.dims() == want[i].tensor.dims());
    CHECK(std::memcmp(got[i].tensor.raw(), want[i].tensor.raw(), want[i].tensor.byteSize()) == 0);
  }
}

ValueType floatType(const std::vector<int64_t>& dims) {
  ValueType t;
  t.dtype = DType::Float;
  t.shape = Shape::ofStatic(dims);
  return t;
}

void noop(KernelContext&) {}

}  // namespace

TEST_CASE("kernel registry: an exact dtype entry wins over an any-dtype one", "[backend]") {
  // The four entries differ in (since_opset, dtype, device), which is how the checks tell them
  // apart: 1 and 3 any-dtype CPU, 2 float CPU, 4 float on the fake device.
  KernelRegistry r;
  r.add({"", "Relu", 1, 1000, noop});
  r.add({"", "Relu", 1, 1000, noop, DType::Float});
  r.add({"", "Relu", 14, 1000, noop});
  r.add({"", "Relu", 1, 1000, noop, DType::Float, kFakeDevice});
  auto idOf = [](const KernelInfo* k) {
    if (!k) return 0;
    if (k->dtype == DType::Float) return k->device == Device::Cpu ? 2 : 4;
    return k->since_opset == 14 ? 3 : 1;
  };
  CHECK(idOf(r.find("", "Relu", 17, DType::Float)) == 2);     // exact dtype beats newer opset
  CHECK(idOf(r.find("ai.onnx", "Relu", 17, DType::Float)) == 2);
  CHECK(idOf(r.find("", "Relu", 17, DType::Int64)) == 3);     // no exact entry: any-dtype
  CHECK(idOf(r.find("", "Relu", 13, DType::Int64)) == 1);
  CHECK(idOf(r.find("", "Relu", 17)) == 3);                   // unknown dtype: any-dtype only
  CHECK(idOf(r.find("", "Relu", 17, DType::Float, kFakeDevice)) == 4);
  CHECK(r.find("", "Relu", 17, DType::Int64, kFakeDevice) == nullptr);  // no any-dtype there
  CHECK(r.find("", "Relu", 17, DType::Float, Device::Cuda) == nullptr);  // device mismatch
  CHECK(r.find("", "Sigmoid", 17, DType::Float) == nullptr);

  // Registration order does not matter for the dtype preference.
  KernelRegistry reversed;
  reversed.add({"", "Relu", 1, 1000, noop, DType::Float});
  reversed.add({"", "Relu", 1, 1000, noop});
  CHECK(reversed.find("", "Relu", 17, DType::Float)->dtype == DType::Float);
  CHECK(reversed.find("", "Relu", 17, DType::Double)->dtype == DType::Undefined);

  CHECK(r.opTypes() == std::vector<std::string>{"Relu"});
  CHECK(r.opTypes(kFakeDevice) == std::vector<std::string>{"Relu"});
  CHECK(r.opTypes(Device::Cuda).empty());
  CHECK(deviceName(Device::Cpu) == "cpu");
  CHECK(deviceName(Device::Cuda) == "cuda");
  CHECK(deviceName(kFakeDevice) == "device 131");
}

TEST_CASE("kernel registry: the node's dtype is its first present input's", "[backend]") {
  Model m;
  Graph& g = *m.graph;
  ValueType i64;
  i64.dtype = DType::Int64;
  ValueType f32;
  f32.dtype = DType::Float;
  Value* a = g.addInput("a", i64);
  Value* b = g.addInput("b", f32);
  Node* cast = g.createNode({"Cast", "", {a}, {"c"}, "cast", {}});
  Node* skip = g.createNode({"Clip", "", {nullptr, b}, {"d"}, "clip", {}});
  Node* constant = g.createNode({"Constant", "", {}, {"e"}, "constant", {}});
  constant->output(0)->type = f32;
  CHECK(kernelDType(*cast) == DType::Int64);
  CHECK(kernelDType(*skip) == DType::Float);
  CHECK(kernelDType(*constant) == DType::Float);
}

TEST_CASE("executor: no kernel anywhere is reported as before, naming the device", "[backend]") {
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  m->setOpsetVersion("test", 3);
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({2}));
  Value* y = g.createNode({"Missing", "test", {x}, {"y"}, "lonely", {}})->output(0);
  g.addOutput(y);

  KernelRegistry empty;
  ExecutorOptions cpu;
  cpu.registry = &empty;
  CHECK_THROWS_WITH(Executor(*m, cpu),
                    "node 'lonely' (Missing): no CPU kernel for test::Missing at opset 3");
  FakeDevice fake;
  ExecutorOptions dev;
  dev.registry = &empty;
  dev.backend = &fake;
  CHECK_THROWS_WITH(
      Executor(*m, dev),
      "node 'lonely' (Missing): no device 131 or CPU kernel for test::Missing at opset 3");
}

TEST_CASE("executor: the CPU backend is the default and copies nothing", "[backend]") {
  std::unique_ptr<Model> model =
      loadModel(FUSECTL_SOURCE_DIR "/testdata/models/resnet_mini.onnx", LoadOptions{});
  const std::vector<NamedTensor> inputs = floatInputs(*model->graph);
  Executor plain(*model);
  CHECK(plain.backend().device() == Device::Cpu);
  CHECK(plain.backend().sharesHostMemory());
  ExecutionStats stats;
  const std::vector<NamedTensor> want = plain.run(inputs, &stats);
  CHECK(stats.fallback_nodes == 0);
  CHECK(stats.copies_to_device + stats.copies_to_host + stats.copied_bytes == 0);

  ExecutorOptions explicit_cpu;
  explicit_cpu.backend = &cpuBackend();
  requireBitIdentical(Executor(*model, explicit_cpu).run(inputs), want);
}

TEST_CASE("executor: a device with one kernel runs the rest on the CPU with copies",
          "[backend]") {
  std::unique_ptr<Model> model =
      loadModel(FUSECTL_SOURCE_DIR "/testdata/models/resnet_mini.onnx", LoadOptions{});
  const Graph& g = *model->graph;
  const ExpectedCopies expected = expectedCopies(g);
  REQUIRE(expected.device_nodes > 0);  // the model must exercise the device
  const std::vector<NamedTensor> inputs = floatInputs(g);
  const std::vector<NamedTensor> want = runModel(*model, inputs);

  FakeDevice fake;
  {
    ExecutorOptions options;
    options.backend = &fake;
    options.profile = true;
    Executor ex(*model, options);
    for (int run = 0; run < 2; ++run) {
      INFO("run " << run);
      const size_t to_host_before = fake.to_host, to_device_before = fake.to_device;
      const size_t bytes_before = fake.bytes_copied, relus_before = fake.relu_calls;
      ExecutionStats stats;
      requireBitIdentical(ex.run(inputs, &stats), want);

      CHECK(fake.relu_calls - relus_before == expected.device_nodes);
      CHECK(stats.nodes_run == g.nodes().size());
      CHECK(stats.fallback_nodes == g.nodes().size() - expected.device_nodes);
      // Initializers cross once, in the first run, and stay on the device.
      CHECK(stats.copies_to_device ==
            expected.to_device - (run ? expected.to_device_initializers : 0));
      CHECK(stats.copies_to_host == expected.to_host);
      CHECK(stats.copies_to_device == fake.to_device - to_device_before);
      CHECK(stats.copies_to_host == fake.to_host - to_host_before);
      CHECK(stats.copied_bytes == fake.bytes_copied - bytes_before);
      CHECK(fake.syncs == static_cast<size_t>(run + 1));

      REQUIRE(stats.node_times.size() == g.nodes().size());
      size_t on_device = 0;
      for (const NodeTime& t : stats.node_times) {
        const bool dev = t.op_type == "Relu";
        CHECK(t.device == (dev ? kFakeDevice : Device::Cpu));
        on_device += t.device == kFakeDevice ? 1 : 0;
      }
      CHECK(on_device == expected.device_nodes);
    }
  }
  CHECK(fake.memory().breaches() == 0);
  CHECK(fake.memory().liveBuffers() == 0);  // every device buffer went back
}

TEST_CASE("executor: initializers are copied to the device once and kept", "[backend]") {
  // r = Relu(w) on the device (w an initializer), s = Add(x, r) on the CPU, y = Relu(s) on the
  // device: w and s go up, r and y come down; a second run copies w no more.
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  Graph& g = *m->graph;
  const ValueType t = floatType({4});
  Value* x = g.addInput("x", t);
  Value* w = g.addInitializer("w", Tensor::fromValues<float>(DType::Float, {4}, {-1, 2, -3, 4}));
  Node* r = g.createNode({"Relu", "", {w}, {"r"}, "relu_w", {}});
  Node* s = g.createNode({"Add", "", {x, r->output(0)}, {"s"}, "add", {}});
  Node* y = g.createNode({"Relu", "", {s->output(0)}, {"y"}, "relu_s", {}});
  for (Node* n : {r, s, y}) n->output(0)->type = t;
  g.addOutput(y->output(0));

  HostTensor xs(DType::Float, {4});
  const float xv[] = {0.5f, -3.0f, 1.0f, -5.0f};
  std::memcpy(xs.mutableRaw(), xv, sizeof xv);

  FakeDevice fake;
  ExecutorOptions options;
  options.backend = &fake;
  {
    Executor ex(*m, options);
    for (int run = 0; run < 2; ++run) {
      INFO("run " << run);
      ExecutionStats stats;
      std::vector<NamedTensor> out = ex.run({{"x", xs}}, &stats);
      REQUIRE(out.size() == 1);
      const float* got = out[0].tensor.data<float>();
      CHECK(std::vector<float>(got, got + 4) == std::vector<float>{0.5f, 0.0f, 1.0f, 0.0f});
      CHECK(stats.fallback_nodes == 1);
      CHECK(stats.copies_to_device == (run == 0 ? 2u : 1u));
      CHECK(stats.copies_to_host == 2);
      CHECK(stats.copied_bytes == (run == 0 ? 4u : 3u) * 16);
    }
  }
  // An input overriding the initializer is uploaded itself, not replaced by the kept copy.
  g.markInitializerAsInput(w);
  Executor overridden(*m, options);
  HostTensor ws(DType::Float, {4});
  const float wv[] = {1, 1, 1, 1};
  std::memcpy(ws.mutableRaw(), wv, sizeof wv);
  overridden.run({{"x", xs}});
  std::vector<NamedTensor> out = overridden.run({{"x", xs}, {"w", ws}});
  const float* got = out[0].tensor.data<float>();
  CHECK(std::vector<float>(got, got + 4) == std::vector<float>{1.5f, 0.0f, 2.0f, 0.0f});
}

// x -> Relu -> Reshape(shape) -> Relu -> Neg -> y, with a Shape of the second Relu's output as a
// second graph output.
std::unique_ptr<Model> seamModel() {
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({2, 6}));
  Value* shape = g.addInitializer("shape", Tensor::fromValues<int64_t>(DType::Int64, {2}, {3, 4}));
  Node* r1 = g.createNode({"Relu", "", {x}, {"r1"}, "relu1", {}});
  r1->output(0)->type = floatType({2, 6});
  Node* reshape = g.createNode({"Reshape", "", {r1->output(0), shape}, {"rs"}, "reshape", {}});
  reshape->output(0)->type = floatType({3, 4});
  Node* r2 = g.createNode({"Relu", "", {reshape->output(0)}, {"r2"}, "relu2", {}});
  r2->output(0)->type = floatType({3, 4});
  Node* neg = g.createNode({"Neg", "", {r2->output(0)}, {"y"}, "neg", {}});
  neg->output(0)->type = floatType({3, 4});
  Node* shape_of = g.createNode({"Shape", "", {r2->output(0)}, {"s"}, "shape_of", {}});
  shape_of->output(0)->type.dtype = DType::Int64;
  shape_of->output(0)->type.shape = Shape::ofStatic({2});
  g.addOutput(neg->output(0));
  g.addOutput(shape_of->output(0));
  return m;
}

TEST_CASE("executor: host inputs, dims-only inputs and declined nodes cross no more than needed",
          "[backend]") {
  std::unique_ptr<Model> model = seamModel();
  const std::vector<NamedTensor> inputs = floatInputs(*model->graph);
  const std::vector<NamedTensor> want = runModel(*model, inputs);
  FakeDevice fake;
  fake.extend();
  {
    ExecutorOptions options;
    options.backend = &fake;
    Executor ex(*model, options);
    ExecutionStats stats;
    requireBitIdentical(ex.run(inputs, &stats), want);
    // On the device: both Relus and the Reshape (its shape read on the host, where the
    // initializer is: nothing copied for it). On the CPU: Neg (declined) and Shape, which reads
    // only r2's dims, so r2 crosses once, for Neg, not twice.
    CHECK(stats.fallback_nodes == 2);
    CHECK(stats.copies_to_device == 1);  // x
    CHECK(stats.copies_to_host == 1);    // r2, for Neg
    CHECK(stats.copied_bytes == 2 * 12 * sizeof(float));
    CHECK(stats.device_launches == 2);   // the Relus; the Reshape is an alias
  }
  CHECK(fake.memory().breaches() == 0);
  CHECK(fake.memory().liveBuffers() == 0);
}

TEST_CASE("executor: a profiled run times device nodes with the device's marks", "[backend]") {
  std::unique_ptr<Model> model = seamModel();
  const std::vector<NamedTensor> inputs = floatInputs(*model->graph);
  FakeDevice fake;
  fake.extend();
  ExecutorOptions options;
  options.backend = &fake;
  options.profile = true;
  Executor ex(*model, options);
  for (int run = 0; run < 2; ++run) {
    ExecutionStats stats;
    ex.run(inputs, &stats);
    REQUIRE(stats.node_times.size() == 5);
    for (const NodeTime& t : stats.node_times) {
      INFO(t.node);
      if (t.device == kFakeDevice) {
        CHECK(t.seconds == 1e-3);  // two consecutive marks of the fake clock
      } else {
        CHECK(t.seconds != 1e-3);  // the host clock's reading
      }
    }
    CHECK(fake.marks == 6);  // cleared each run: two marks per device node
  }
}
