// The CPU executor: memory plan and buffer reuse, borrowing, errors that name the node, input
// validation, seeded inputs, half conversion and tensor comparison. Kernels here are local
// test kernels (domain "test") in a private registry, so these tests do not depend on the
// built-in kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>

#include "shell_util.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/memory_plan.h"
#include "fusectl/kernels/npy.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

ValueType dimsFloatType(std::vector<Dim> dims) {
  ValueType t;
  t.dtype = DType::Float;
  t.shape = Shape(std::move(dims));
  return t;
}

ValueType floatType(const std::vector<int64_t>& dims) {
  ValueType t;
  t.dtype = DType::Float;
  t.shape = Shape::ofStatic(dims);
  return t;
}

struct Recorded {
  const void* input_data = nullptr;
  int threads = 0;
};
Recorded g_recorded;
int g_preparations = 0;
std::vector<int> g_constant_flags;  // per Prepared call: bit 0 input 0 constant, bit 1 input 1
std::vector<int> g_donatable;        // per AddInto call: bit 0 input 0 donatable, bit 1 input 1
std::vector<bool> g_wrote_in_place;  // per AddInto call

std::vector<float> valuesOfRaw(const HostTensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void unary(KernelContext& ctx, float (*f)(float)) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.dtype() != DType::Float) ctx.fail("expects float");
  HostTensor& y = ctx.allocateOutput(0, DType::Float, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.mutableData<float>()[i] = f(x.data<float>()[i]);
}

const KernelRegistry& testRegistry() {
  static KernelRegistry r = [] {
    KernelRegistry reg;
    reg.add({"test", "Double", 1, 1000,
             [](KernelContext& ctx) { unary(ctx, [](float v) { return 2 * v; }); }});
    reg.add({"test", "Add", 1, 1000, [](KernelContext& ctx) {
               const HostTensor& a = ctx.requireInput(0);
               const HostTensor& b = ctx.requireInput(1);
               if (a.dims() != b.dims()) ctx.fail("shapes differ");
               HostTensor& y = ctx.allocateOutput(0, DType::Float, a.dims());
               for (int64_t i = 0; i < a.numel(); ++i) {
                 y.mutableData<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
               }
             }});
    reg.add({"test", "Alias", 1, 1000, [](KernelContext& ctx) {
               const HostTensor& x = ctx.requireInput(0);
               ctx.setOutput(0, x.reshaped({x.numel()}));
             }});
    // y = a + b, written into a's buffer when the executor lets it (g_wrote_in_place records
    // whether it did, and g_donatable what inputDonatable said of both inputs).
    reg.add({"test", "AddInto", 1, 1000, [](KernelContext& ctx) {
               const HostTensor& a = ctx.requireInput(0);
               const HostTensor& b = ctx.requireInput(1);
               if (a.dims() != b.dims()) ctx.fail("shapes differ");
               g_donatable.push_back(ctx.inputDonatable(0) * 1 + ctx.inputDonatable(1) * 2);
               HostTensor* in_place = ctx.overwriteInput(0, 0, DType::Float, a.dims());
               g_wrote_in_place.push_back(in_place != nullptr);
               if (in_place) CHECK(in_place->raw() == a.raw());
               HostTensor& y = in_place ? *in_place : ctx.allocateOutput(0, DType::Float, a.dims());
               for (int64_t i = 0; i < a.numel(); ++i) {
                 y.mutableData<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
               }
             }});
    reg.add({"test", "Fail", 1, 1000, [](KernelContext& ctx) { ctx.fail("bad attribute"); }});
    reg.add({"test", "Throw", 1, 1000,
             [](KernelContext&) { throw std::runtime_error("boom"); }});
    reg.add({"test", "ThrowPlain", 1, 1000,
             [](KernelContext&) { throwInvalid("plain message"); }});
    reg.add({"test", "Record", 1, 1000, [](KernelContext& ctx) {
               g_recorded.input_data = ctx.requireInput(0).raw();
               g_recorded.threads = ctx.numThreads();
               unary(ctx, [](float v) { return v; });
             }});
    reg.add({"test", "Silent", 1, 1000, [](KernelContext&) {}});  // produces nothing
    // y = x + w, where the "prepared" copy of w (standing in for packed weights) is kept in
    // the node's state when w is constant, and rebuilt on every call otherwise.
    reg.add({"test", "Prepared", 1, 1000, [](KernelContext& ctx) {
               struct Prep : KernelState {
                 std::vector<float> w;
               };
               const HostTensor& x = ctx.requireInput(0);
               const HostTensor& w = ctx.requireInput(1);
               auto* prep = static_cast<Prep*>(ctx.state());
               if (!prep || !ctx.inputIsConstant(1)) {
                 auto fresh = std::make_unique<Prep>();
                 fresh->w = valuesOfRaw(w);
                 prep = fresh.get();
                 ++g_preparations;
                 ctx.setState(std::move(fresh));
               }
               g_constant_flags.push_back(ctx.inputIsConstant(0) * 1 + ctx.inputIsConstant(1) * 2);
               HostTensor& y = ctx.allocateOutput(0, DType::Float, x.dims());
               for (int64_t i = 0; i < x.numel(); ++i) {
                 y.mutableData<float>()[i] = x.data<float>()[i] + prep->w[i];
               }
             }});
    return reg;
  }();
  return r;
}

ExecutorOptions testOptions(int threads = 1) {
  ExecutorOptions o;
  o.registry = &testRegistry();
  o.num_threads = threads;
  return o;
}

std::unique_ptr<Model> newModel() {
  auto m = std::make_unique<Model>();
  m->setOpsetVersion("", 17);
  m->setOpsetVersion("test", 1);
  return m;
}

Node* op(Graph& g, const std::string& type, std::vector<Value*> in, const std::string& out,
         Node* pos = nullptr) {
  return g.createNode({type, "test", std::move(in), {out}, type + "_" + out, {}}, pos);
}

HostTensor floats(std::vector<int64_t> dims, std::vector<float> values) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  std::memcpy(t.mutableRaw(), values.data(), values.size() * sizeof(float));
  return t;
}

std::vector<float> valuesOf(const HostTensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// x -> Double -> a -> Double -> b -> Double -> c -> Double -> y
std::unique_ptr<Model> chainModel(int64_t n) {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* v = g.addInput("x", floatType({n}));
  const char* names[] = {"a", "b", "c", "y"};
  for (const char* name : names) v = op(g, "Double", {v}, name)->output(0);
  g.addOutput(v);
  return m;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("executor: a chain reuses released buffers and reports peak bytes") {
  const int64_t n = 1000;
  auto m = chainModel(n);
  Executor ex(*m, testOptions());
  ExecutionStats stats;
  std::vector<float> ones(n, 1.f);
  auto out = ex.run({{"x", floats({n}, ones)}}, &stats);
  REQUIRE(out.size() == 1);
  CHECK(out[0].name == "y");
  CHECK(out[0].tensor.data<float>()[0] == 16.f);
  CHECK(out[0].tensor.data<float>()[n - 1] == 16.f);
  // Live at once: at most the value being read and the one being written.
  CHECK(stats.peak_activation_bytes == 2 * n * sizeof(float));
  CHECK(stats.intermediate_tensors == 3);
  CHECK(stats.nodes_run == 4);
  CHECK(stats.buffer_reuses == 1);  // c takes a's buffer; y (a graph output) is never pooled
  CHECK(ex.plan().release_after.size() == 4);
}

TEST_CASE("executor: a value lives until its last reader") {
  // x -> Double -> a; a -> Double -> b; (a, b) -> Add -> c; c -> Double -> y
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({4}));
  Value* a = op(g, "Double", {x}, "a")->output(0);
  Value* b = op(g, "Double", {a}, "b")->output(0);
  Value* c = op(g, "Add", {a, b}, "c")->output(0);
  Value* y = op(g, "Double", {c}, "y")->output(0);
  g.addOutput(y);
  const MemoryPlan plan = buildMemoryPlan(g);
  CHECK(plan.last_use_step[plan.slot(a)] == 2);
  CHECK(plan.last_use_step[plan.slot(b)] == 2);
  CHECK(plan.last_use_step[plan.slot(c)] == 3);
  CHECK(plan.pinned(plan.slot(y)));
  CHECK(plan.pinned(plan.slot(x)));
  auto out = Executor(*m, testOptions()).run({{"x", floats({4}, {1, 2, 3, 4})}});
  CHECK(valuesOf(out[0].tensor) == std::vector<float>{12, 24, 36, 48});
}

TEST_CASE("executor: a node may overwrite an input only where no one else can see it") {
  const std::vector<float> ones(6, 1.f);
  auto runOnce = [&](Model& m, const ExecutorOptions& o, ExecutionStats* stats = nullptr) {
    g_donatable.clear();
    g_wrote_in_place.clear();
    return Executor(m, o).run({{"x", floats({6}, {1, 2, 3, 4, 5, 6})}}, stats);
  };
  SECTION("last reader of an intermediate: written in place, counted as written") {
    // x -> Double -> a; AddInto(a, x) -> y -> Alias -> out (no buffer of its own, so the peak
    // is a and y side by side, or y alone in a's buffer)
    auto m = newModel();
    Graph& g = *m->graph;
    Value* x = g.addInput("x", floatType({6}));
    Value* a = op(g, "Double", {x}, "a")->output(0);
    Value* y = op(g, "AddInto", {a, x}, "y")->output(0);
    g.addOutput(op(g, "Alias", {y}, "out")->output(0));
    ExecutionStats in_place, copied;
    auto out = runOnce(*m, testOptions(), &in_place);
    CHECK(g_donatable == std::vector<int>{1});  // x is a graph input: never
    CHECK(g_wrote_in_place == std::vector<bool>{true});
    CHECK(valuesOf(out[0].tensor) == std::vector<float>{3, 6, 9, 12, 15, 18});
    ExecutorOptions no_donation = testOptions();
    no_donation.donate_inputs = false;
    auto again = runOnce(*m, no_donation, &copied);
    CHECK(g_donatable == std::vector<int>{0});
    CHECK(g_wrote_in_place == std::vector<bool>{false});
    CHECK(valuesOf(again[0].tensor) == valuesOf(out[0].tensor));
    CHECK(in_place.activation_bytes_written == copied.activation_bytes_written);
    CHECK(in_place.peak_activation_bytes + 6 * sizeof(float) == copied.peak_activation_bytes);
  }
  SECTION("read again later: not offered") {
    // AddInto(a, x) -> y; Add(y, a) -> out: a outlives the AddInto
    auto m = newModel();
    Graph& g = *m->graph;
    Value* x = g.addInput("x", floatType({6}));
    Value* a = op(g, "Double", {x}, "a")->output(0);
    Value* y = op(g, "AddInto", {a, x}, "y")->output(0);
    g.addOutput(op(g, "Add", {y, a}, "out")->output(0));
    auto out = runOnce(*m, testOptions());
    CHECK(g_donatable == std::vector<int>{0});
    CHECK(g_wrote_in_place == std::vector<bool>{false});
    CHECK(valuesOf(out[0].tensor) == std::vector<float>{5, 10, 15, 20, 25, 30});
  }
  SECTION("read twice by the node itself: not offered") {
    auto m = newModel();
    Graph& g = *m->graph;
    Value* x = g.addInput("x", floatType({6}));
    Value* a = op(g, "Double", {x}, "a")->output(0);
    g.addOutput(op(g, "AddInto", {a, a}, "y")->output(0));
    auto out = runOnce(*m, testOptions());
    CHECK(g_donatable == std::vector<int>{0});
    CHECK(valuesOf(out[0].tensor) == std::vector<float>{4, 8, 12, 16, 20, 24});
  }
  SECTION("an initializer, or a buffer another live value aliases: not offered") {
    // AddInto(w, x) with w constant; AddInto(a, x) while Alias(a) -> v is read afterwards
    auto m = newModel();
    Graph& g = *m->graph;
    Value* x = g.addInput("x", floatType({6}));
    Value* w = g.addInitializer("w", Tensor::fromValues<float>(DType::Float, {6}, ones));
    Value* y1 = op(g, "AddInto", {w, x}, "y1")->output(0);
    Value* a = op(g, "Double", {y1}, "a")->output(0);
    Value* v = op(g, "Alias", {a}, "v")->output(0);
    Value* y2 = op(g, "AddInto", {a, x}, "y2")->output(0);
    g.addOutput(op(g, "Add", {y2, v}, "out")->output(0));
    auto out = runOnce(*m, testOptions());
    CHECK(g_donatable == std::vector<int>{0, 0});
    CHECK(g_wrote_in_place == std::vector<bool>{false, false});
    // a = 2 (1 + x); out = (a + x) + a = 4 + 5x
    CHECK(valuesOf(out[0].tensor) == std::vector<float>{9, 14, 19, 24, 29, 34});
    CHECK(w->initializer()->data<float>()[0] == 1.f);
  }
  SECTION("an output the caller keeps: offered, but not written in place") {
    // AddInto's output is a graph output: it gets a buffer of its own, never a pooled one
    auto m = newModel();
    Graph& g = *m->graph;
    Value* x = g.addInput("x", floatType({6}));
    Value* a = op(g, "Double", {x}, "a")->output(0);
    g.addOutput(op(g, "AddInto", {a, x}, "y")->output(0));
    auto out = runOnce(*m, testOptions());
    CHECK(g_donatable == std::vector<int>{1});
    CHECK(g_wrote_in_place == std::vector<bool>{false});
    CHECK(valuesOf(out[0].tensor) == std::vector<float>{3, 6, 9, 12, 15, 18});
  }
}

TEST_CASE("buffer pool: of the idle buffers that fit best, the one released last is reused") {
  // The one released last is the likeliest to still be in cache; the first released of a size
  // class is the coldest (a ResNet-50 run reuses dozens of same-sized activation buffers).
  BufferPool pool;
  void* first = nullptr;
  void* second = nullptr;
  {
    std::shared_ptr<void> a = pool.acquire(4096);
    std::shared_ptr<void> b = pool.acquire(4096);
    first = a.get();
    second = b.get();
    a.reset();  // released first
  }             // b released last
  std::shared_ptr<void> c = pool.acquire(4000);
  CHECK(c.get() == second);
  std::shared_ptr<void> d = pool.acquire(4096);
  CHECK(d.get() == first);
  // Best fit still comes before recency: a smaller idle buffer that fits wins over a larger one
  // released later.
  void* small = nullptr;
  {
    std::shared_ptr<void> s = pool.acquire(1024);
    std::shared_ptr<void> l = pool.acquire(2000);
    small = s.get();
    s.reset();
  }
  CHECK(pool.acquire(1000).get() == small);
  CHECK(pool.stats().reuses == 3);
}

TEST_CASE("executor: graph outputs survive later runs and are never reused") {
  auto m = chainModel(8);
  Executor ex(*m, testOptions());
  auto first = ex.run({{"x", floats({8}, std::vector<float>(8, 1.f))}});
  auto second = ex.run({{"x", floats({8}, std::vector<float>(8, 2.f))}});
  CHECK(first[0].tensor.data<float>()[3] == 16.f);
  CHECK(second[0].tensor.data<float>()[3] == 32.f);
  CHECK(first[0].tensor.raw() != second[0].tensor.raw());
}

TEST_CASE("executor: initializers are borrowed, not copied") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* w = g.addInitializer("w", Tensor::fromValues<float>(DType::Float, {3}, {1, 2, 3}));
  Value* y = op(g, "Record", {w}, "y")->output(0);
  g.addOutput(y);
  g_recorded = {};
  auto out = Executor(*m, testOptions(3)).run({});
  CHECK(g_recorded.input_data == w->initializer()->bytes());
  CHECK(g_recorded.threads == 3);
  CHECK(valuesOf(out[0].tensor) == std::vector<float>{1, 2, 3});
}

TEST_CASE("executor: an initializer listed as an input may be overridden") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* w = g.addInitializer("w", Tensor::fromValues<float>(DType::Float, {2}, {1, 2}));
  g.markInitializerAsInput(w);
  g.addOutput(op(g, "Double", {w}, "y")->output(0));
  Executor ex(*m, testOptions());
  CHECK(valuesOf(ex.run({})[0].tensor) == std::vector<float>{2, 4});
  CHECK(valuesOf(ex.run({{"w", floats({2}, {5, 6})}})[0].tensor) == std::vector<float>{10, 12});
}

TEST_CASE("executor: kernel state persists across runs only while its inputs are constant") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({2}));
  Value* w = g.addInitializer("w", Tensor::fromValues<float>(DType::Float, {2}, {1, 2}));
  g.markInitializerAsInput(w);
  g.addOutput(op(g, "Prepared", {x, w}, "y")->output(0));
  g_preparations = 0;
  g_constant_flags.clear();
  Executor ex(*m, testOptions());
  CHECK(valuesOf(ex.run({{"x", floats({2}, {10, 20})}})[0].tensor) == std::vector<float>{11, 22});
  CHECK(valuesOf(ex.run({{"x", floats({2}, {30, 40})}})[0].tensor) == std::vector<float>{31, 42});
  CHECK(g_preparations == 1);  // prepared once, reused by the second run
  // Overriding the initializer makes w an ordinary input: not constant, so prepared afresh.
  CHECK(valuesOf(ex.run({{"x", floats({2}, {0, 0})}, {"w", floats({2}, {5, 6})}})[0].tensor) ==
        std::vector<float>{5, 6});
  CHECK(g_preparations == 2);
  CHECK(g_constant_flags == std::vector<int>{2, 2, 0});
  // A second executor over the same model starts without state.
  Executor other(*m, testOptions());
  other.run({{"x", floats({2}, {0, 0})}});
  CHECK(g_preparations == 3);
}

TEST_CASE("executor: activation bytes written count outputs, not aliases") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({4}));
  Value* a = op(g, "Double", {x}, "a")->output(0);
  Value* b = op(g, "Alias", {a}, "b")->output(0);
  g.addOutput(op(g, "Double", {b}, "y")->output(0));
  ExecutorOptions o = testOptions();
  o.profile = true;
  ExecutionStats stats;
  Executor(*m, o).run({{"x", floats({4}, {1, 2, 3, 4})}}, &stats);
  CHECK(stats.nodes_run == 3);
  CHECK(stats.activation_bytes_written == 2 * 4 * sizeof(float));  // a and y; b aliases a
  REQUIRE(stats.node_times.size() == 3);
  CHECK(stats.node_times[1].output_bytes == 0);
  CHECK(stats.node_times[1].input_dims == std::vector<std::vector<int64_t>>{{4}});
  CHECK(stats.node_times[1].output_dims == std::vector<std::vector<int64_t>>{{4}});
  CHECK(stats.node_times[2].output_bytes == 4 * sizeof(float));
}

TEST_CASE("executor: an output aliasing its input keeps the input's buffer alive") {
  // x -> Double -> a -> Alias -> b; b -> Double -> c -> Double -> y. If a's buffer went back to
  // the pool when Alias ran, c would overwrite b's bytes before c's producer reads them.
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({4}));
  Value* a = op(g, "Double", {x}, "a")->output(0);
  Value* b = op(g, "Alias", {a}, "b")->output(0);
  Value* c = op(g, "Double", {b}, "c")->output(0);
  Value* d = op(g, "Add", {b, c}, "d")->output(0);
  g.addOutput(d);
  ExecutionStats stats;
  auto out = Executor(*m, testOptions()).run({{"x", floats({4}, {1, 2, 3, 4})}}, &stats);
  CHECK(valuesOf(out[0].tensor) == std::vector<float>{6, 12, 18, 24});
  CHECK(stats.peak_activation_bytes == 3 * 4 * sizeof(float));  // a (= b), c, d
}

TEST_CASE("executor: nodes out of list order run in a topological order") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", floatType({2}));
  Node* producer = op(g, "Double", {x}, "a");
  op(g, "Double", {producer->output(0)}, "y", producer);  // inserted before its producer
  g.addOutput(g.findValue("y"));
  REQUIRE(g.firstNode()->name() == "Double_y");
  auto out = Executor(*m, testOptions()).run({{"x", floats({2}, {1, 2})}});
  CHECK(valuesOf(out[0].tensor) == std::vector<float>{4, 8});
}

TEST_CASE("executor: errors name the node and its op") {
  auto make = [](const std::string& type) {
    auto m = newModel();
    Graph& g = *m->graph;
    Value* x = g.addInput("x", floatType({2}));
    g.addOutput(op(g, type, {x}, "y")->output(0));
    return m;
  };
  const std::vector<NamedTensor> in = {{"x", floats({2}, {1, 2})}};

  auto unsupported = make("NoSuchOp");
  try {
    Executor ex(*unsupported, testOptions());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'NoSuchOp_y' (NoSuchOp)") &&
                             Catch::Contains("no CPU kernel"));
  }
  auto failing = make("Fail");
  CHECK(errorOf([&] { Executor(*failing, testOptions()).run(in); }) ==
        "node 'Fail_y' (Fail): bad attribute");
  auto throwing = make("Throw");
  CHECK_THAT(errorOf([&] { Executor(*throwing, testOptions()).run(in); }),
             Catch::Contains("node 'Throw_y' (Throw)") && Catch::Contains("boom"));
  auto plain = make("ThrowPlain");
  CHECK(errorOf([&] { Executor(*plain, testOptions()).run(in); }) ==
        "node 'ThrowPlain_y' (ThrowPlain): plain message");
  auto silent = make("Silent");
  CHECK_THAT(errorOf([&] { Executor(*silent, testOptions()).run(in); }),
             Catch::Contains("node 'Silent_y' (Silent)") && Catch::Contains("did not produce"));

  auto no_opset = newModel();
  Graph& g = *no_opset->graph;
  Value* x = g.addInput("x", floatType({2}));
  g.addOutput(g.createNode({"Double", "other", {x}, {"y"}, "n", {}})->output(0));
  CHECK_THAT(errorOf([&] { Executor ex(*no_opset, testOptions()); }),
             Catch::Contains("node 'n' (Double)") && Catch::Contains("no opset"));
}

TEST_CASE("executor: inputs are checked against the graph, naming the input") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* a = g.addInput("a", dimsFloatType(std::vector<Dim>{Dim::symbolic("batch"), Dim::known(2)}));
  Value* b = g.addInput("b", dimsFloatType(std::vector<Dim>{Dim::symbolic("batch"), Dim::known(2)}));
  g.addOutput(op(g, "Add", {a, b}, "y")->output(0));
  Executor ex(*m, testOptions());
  auto f = [](std::vector<int64_t> dims) {
    HostTensor t(DType::Float, dims);
    return t;
  };

  auto ok = ex.run({{"a", f({3, 2})}, {"b", f({3, 2})}});
  CHECK(ok[0].tensor.dims() == std::vector<int64_t>{3, 2});
  CHECK_THAT(errorOf([&] { ex.run({{"a", f({3, 2})}}); }), Catch::Contains("missing input 'b'"));
  CHECK_THAT(errorOf([&] { ex.run({{"a", f({3, 2})}, {"b", f({3, 2})}, {"c", f({1})}}); }),
             Catch::Contains("unknown input 'c'") && Catch::Contains("a, b"));
  CHECK_THAT(errorOf([&] { ex.run({{"a", f({3, 3})}, {"b", f({3, 2})}}); }),
             Catch::Contains("input 'a' has shape [3,3]") && Catch::Contains("float[batch,2]"));
  CHECK_THAT(errorOf([&] { ex.run({{"a", f({3, 2, 1})}, {"b", f({3, 2})}}); }),
             Catch::Contains("input 'a' has shape [3,2,1]"));
  CHECK_THAT(errorOf([&] { ex.run({{"a", f({3, 2})}, {"b", f({4, 2})}}); }),
             Catch::Contains("input 'b' has batch = 4") && Catch::Contains("input 'a' has batch = 3"));
  CHECK_THAT(errorOf([&] {
               ex.run({{"a", HostTensor(DType::Int64, {3, 2})}, {"b", f({3, 2})}});
             }),
             Catch::Contains("input 'a' is int64[3,2] but the graph declares float[batch,2]"));
}

TEST_CASE("executor: seeded inputs are deterministic and independent of input order") {
  auto make = [](bool swap) {
    auto m = newModel();
    Graph& g = *m->graph;
    ValueType ints;
    ints.dtype = DType::Int64;
    ints.shape = Shape::ofStatic({64});
    ValueType halves;
    halves.dtype = DType::Float16;
    halves.shape = Shape(std::vector<Dim>{Dim::symbolic("n")});
    if (swap) g.addInput("i", ints);
    g.addInput("x", dimsFloatType(std::vector<Dim>{Dim::symbolic("batch"), Dim::known(100)}));
    if (!swap) g.addInput("i", ints);
    g.addInput("h", halves);
    return m;
  };
  auto m1 = make(false);
  auto m2 = make(true);
  auto in1 = makeRandomInputs(*m1->graph, 7);
  auto in2 = makeRandomInputs(*m2->graph, 7);
  auto in3 = makeRandomInputs(*m1->graph, 8);
  auto find = [](const std::vector<NamedTensor>& ins, const std::string& name) {
    for (const auto& t : ins) {
      if (t.name == name) return t.tensor;
    }
    FAIL("no input " << name);
    return HostTensor();
  };
  const HostTensor x1 = find(in1, "x"), x2 = find(in2, "x"), x3 = find(in3, "x");
  CHECK(x1.dims() == std::vector<int64_t>{1, 100});
  CHECK(std::memcmp(x1.raw(), x2.raw(), x1.byteSize()) == 0);
  CHECK(std::memcmp(x1.raw(), x3.raw(), x1.byteSize()) != 0);
  float lo = 1, hi = -1;
  for (float v : valuesOf(x1)) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  CHECK(lo >= -1.f);
  CHECK(hi < 1.f);
  CHECK(hi - lo > 1.5f);
  const HostTensor i1 = find(in1, "i");
  for (int64_t k = 0; k < i1.numel(); ++k) {
    CHECK(i1.data<int64_t>()[k] >= 0);
    CHECK(i1.data<int64_t>()[k] < 10);
  }
  CHECK(find(in1, "h").dims() == std::vector<int64_t>{1});

  Shape override = Shape::ofStatic({5, 100});
  auto shaped = makeRandomInputs(*m1->graph, 7, {{"x", override}});
  CHECK(find(shaped, "x").dims() == std::vector<int64_t>{5, 100});
  CHECK_THAT(errorOf([&] { makeRandomInputs(*m1->graph, 7, {{"x", Shape::ofStatic({5, 3})}}); }),
             Catch::Contains("'x'"));
  CHECK_THAT(errorOf([&] { makeRandomInputs(*m1->graph, 7, {{"zz", override}}); }),
             Catch::Contains("'zz'"));
}

TEST_CASE("executor: seeded integer inputs named as masks or token types are 0 and 1") {
  auto m = newModel();
  Graph& g = *m->graph;
  ValueType ints;
  ints.dtype = DType::Int64;
  ints.shape = Shape::ofStatic({1, 128});
  ValueType int32s = ints;
  int32s.dtype = DType::Int32;
  g.addInput("input_ids", ints);
  g.addInput("attention_mask", ints);
  g.addInput("Token_Type_Ids", ints);
  g.addInput("segment_ids", int32s);
  g.addInput("padding_MASK", int32s);
  const std::vector<NamedTensor> inputs = makeRandomInputs(g, 0);
  REQUIRE(inputs.size() == 5);
  for (const NamedTensor& t : inputs) {
    INFO(t.name);
    int64_t lo = 100, hi = -1;
    for (int64_t k = 0; k < t.tensor.numel(); ++k) {
      const int64_t v = t.tensor.dtype() == DType::Int64 ? t.tensor.data<int64_t>()[k]
                                                         : t.tensor.data<int32_t>()[k];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    CHECK(lo == 0);
    // 128 draws: a flag takes both values, ids go past 1 (and stay under 10).
    CHECK(hi == (t.name == "input_ids" ? 9 : 1));
  }
}

TEST_CASE("executor: seeded integer inputs follow their uses whatever their names") {
  // "m" reaches Sub after an Unsqueeze and a Cast to float: a mask, 0/1. "t" indexes a constant
  // 3-row table through a Reshape: [0, 3). "ids" indexes a 12-row table and "n" is added as an
  // integer: [0, 10) as before. "both" indexes the 3-row table and is also a mask: 0/1. "e" is
  // tested by Equal against a Constant 0 and "b" cast to bool, each on its way to a Where: 0/1.
  // "k" is tested against 5, which says nothing of a flag: [0, 10). "ids2" indexes the 12-row
  // table and is compared with 0 (the padding id building a mask): ids, [0, 10).
  const auto model = parseModelText(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (int64[1, 64] m, int64[1, 64] t, int64[1, 64] ids, int64[1, 64] n, int64[1, 64] both,
   int64[1, 64] e, int64[1, 64] b, int64[1, 64] k, int64[1, 64] ids2)
    => (float[1, 1, 64] logits, float[1, 64, 4] small, float[1, 64, 1] big, int64[1, 64] sum,
        float[1, 64, 4] both_rows, float[1, 64] both_mask, float[1, 64] e_scores,
        float[1, 64] b_scores, bool[1, 64] k_five, float[1, 64, 1] big2, bool[1, 64] pad2) <
  float[3, 4] small_table = {1,2,3,4,5,6,7,8,9,10,11,12},
  float[12, 1] big_table = {1,2,3,4,5,6,7,8,9,10,11,12},
  int64[1] axis1 = {1},
  int64[2] shape = {1, 64},
  int64 five = {5}
> {
  u = Unsqueeze(m, axis1)
  f = Cast<to = 1>(u)
  one = Constant<value = float {1.0}>()
  logits = Sub(one, f)
  r = Reshape(t, shape)
  small = Gather(small_table, r)
  big = Gather(big_table, ids)
  sum = Add(n, n)
  both_rows = Gather(small_table, both)
  bf = Cast<to = 1>(both)
  both_mask = Mul(bf, bf)
  zero = Constant<value = int64 {0}>()
  padding = Equal(e, zero)
  low = Constant<value = float {-10000.0}>()
  e_scores = Where(padding, low, one)
  keep = Cast<to = 9>(b)
  b_scores = Where(keep, one, low)
  k_five = Equal(k, five)
  big2 = Gather(big_table, ids2)
  pad2 = Equal(ids2, zero)
}
)",
                                    "<seeded uses>");
  const std::vector<NamedTensor> inputs = makeRandomInputs(*model->graph, 0);
  REQUIRE(inputs.size() == 9);
  const std::set<std::string> flags = {"m", "both", "e", "b"};
  for (const NamedTensor& t : inputs) {
    INFO(t.name);
    int64_t lo = 100, hi = -1;
    for (int64_t k = 0; k < t.tensor.numel(); ++k) {
      lo = std::min(lo, t.tensor.data<int64_t>()[k]);
      hi = std::max(hi, t.tensor.data<int64_t>()[k]);
    }
    CHECK(lo == 0);
    // 64 draws take every value of a range this small.
    CHECK(hi == (flags.count(t.name) ? 1 : t.name == "t" ? 2 : 9));
  }
  // And the model runs on them: no index past its table.
  Executor ex(*model);  // the global registry: testOptions() has only this file's kernels
  CHECK(ex.run(inputs).size() == 11);
}

TEST_CASE("executor: the random generator is pinned to PCG32 values") {
  // Recorded from the reference stream; a change here changes every user's seeded inputs, so
  // results from older runs (`verify --seed N`) would no longer reproduce.
  Graph g;
  g.addInput("x", floatType({4}));
  ValueType ints;
  ints.dtype = DType::Int64;
  ints.shape = Shape::ofStatic({4});
  g.addInput("i", ints);
  const HostTensor x = makeRandomInput(*g.findValue("x"), 0);
  CHECK(valuesOf(x) == std::vector<float>{-0.887153983f, -0.502220631f, 0.978850126f,
                                          0.0390783548f});
  const HostTensor i = makeRandomInput(*g.findValue("i"), 42);
  CHECK(std::vector<int64_t>(i.data<int64_t>(), i.data<int64_t>() + 4) ==
        std::vector<int64_t>{8, 2, 2, 4});
}

TEST_CASE("half: float16 conversion is exact and rounds to nearest even") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    if (floatToHalf(f) != h) FAIL("round trip of half " << h);
  }
  CHECK(halfToFloat(0x3c00) == 1.0f);
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(halfToFloat(0x7bff) == 65504.0f);
  CHECK(floatToHalf(65519.0f) == 0x7bff);
  CHECK(floatToHalf(65520.0f) == 0x7c00);  // halfway to 65536 rounds to even: infinity
  CHECK(floatToHalf(1e9f) == 0x7c00);
  CHECK(floatToHalf(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even
  CHECK(floatToHalf(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 * 2^-24: tie -> even (2)
  CHECK(floatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie -> even
  CHECK(floatToHalf(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);  // tie -> even (up)
  CHECK(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
  CHECK((floatToHalf(-std::nanf("")) & 0x8000) != 0);
}

TEST_CASE("half: bfloat16 conversion rounds to nearest even") {
  CHECK(bfloat16ToFloat(0x3f80) == 1.0f);
  CHECK(floatToBFloat16(1.0f) == 0x3f80);
  CHECK(floatToBFloat16(bitsToFloat(0x3f808000)) == 0x3f80);  // tie -> even (down)
  CHECK(floatToBFloat16(bitsToFloat(0x3f818000)) == 0x3f82);  // tie -> even (up)
  CHECK(floatToBFloat16(bitsToFloat(0x3f808001)) == 0x3f81);
  CHECK(floatToBFloat16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(floatToBFloat16(bitsToFloat(0x7f7fffff)) == 0x7f80);  // max float rounds to infinity
  const uint16_t nan = floatToBFloat16(bitsToFloat(0x7f800001));  // payload in the low bits
  CHECK(std::isnan(bfloat16ToFloat(nan)));
}

TEST_CASE("compare: rtol of the tensor's largest magnitude (RtolScale::Tensor)") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tolerance tol;
  tol.atol = 0;
  tol.rtol = 1e-3;
  tol.rtol_scale = RtolScale::Tensor;
  auto cmp = [&](std::vector<float> a, std::vector<float> e) {
    const int64_t n = static_cast<int64_t>(a.size());
    return compareTensors(floats({n}, a), floats({n}, e), tol);
  };
  // The largest |e| is 2 (the -2): every element may differ by 0.002, the one near zero too.
  CHECK(cmp({-2.0f, 0.0015f, 1.0f}, {-2.0f, 0.0f, 1.0f}).passed);
  CHECK_FALSE(cmp({-2.0f, 0.0025f, 1.0f}, {-2.0f, 0.0f, 1.0f}).passed);
  // Element-wise the same drift near zero fails: rtol * |0| leaves only atol.
  tol.rtol_scale = RtolScale::Element;
  const CompareResult element = cmp({-2.0f, 0.0015f, 1.0f}, {-2.0f, 0.0f, 1.0f});
  CHECK_FALSE(element.passed);
  // ... and describe() offers the rtol of the largest magnitude that would pass.
  CHECK(element.max_error_of_scale == Approx(0.0015 / 2).epsilon(1e-4));
  CHECK(element.describe({3}).find("or within rtol 0.00075") != std::string::npos);
  tol.rtol_scale = RtolScale::Tensor;
  // Infinities and NaNs do not set the scale, and still match only themselves.
  CHECK(cmp({inf, nan, 1.0005f}, {inf, nan, 1.0f}).passed);
  CHECK_FALSE(cmp({inf, 1.0f}, {-inf, 1.0f}).passed);
  CHECK_FALSE(cmp({1e30f, 1.0f}, {inf, 1.0f}).passed);
  // An all-zero expected tensor leaves atol alone.
  CHECK_FALSE(cmp({1e-9f, 0.0f}, {0.0f, 0.0f}).passed);
  CHECK(std::string(rtolScaleName(RtolScale::Tensor)) == "tensor");
  CHECK(std::string(rtolScaleName(RtolScale::Element)) == "element");
}

TEST_CASE("compare: allclose semantics match numpy's assert_allclose(equal_nan=True)") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tolerance tol;
  tol.atol = 1e-3;
  tol.rtol = 1e-2;
  auto cmp = [&](std::vector<float> a, std::vector<float> e) {
    const int64_t n = static_cast<int64_t>(a.size());
    return compareTensors(floats({n}, a), floats({n}, e), tol);
  };
  CHECK(cmp({1, 2, 3}, {1, 2, 3}).passed);
  CHECK(cmp({nan, 1}, {nan, 1}).passed);
  CHECK(cmp({inf, -inf}, {inf, -inf}).passed);
  CHECK_FALSE(cmp({1}, {nan}).passed);
  CHECK_FALSE(cmp({nan}, {1}).passed);
  CHECK_FALSE(cmp({inf}, {-inf}).passed);
  CHECK_FALSE(cmp({inf}, {1e30f}).passed);
  CHECK(cmp({1}, {nan}).nonfinite_mismatches == 1);
  // |a - e| <= atol + rtol * |e|: the bound scales with the expected value only.
  CHECK(cmp({101.0f}, {100.0f}).passed);     // 1 <= 0.001 + 1
  CHECK_FALSE(cmp({0.0f}, {0.002f}).passed);  // 0.002 > 0.001 + 0.00002
  CHECK(cmp({0.0f}, {0.0009f}).passed);
  const CompareResult r = cmp({1, 2, 4}, {1, 2, 3});
  CHECK_FALSE(r.passed);
  CHECK(r.mismatches == 1);
  CHECK(r.first_mismatch == 2);
  CHECK(r.max_abs_error == Approx(1.0));
  CHECK(r.max_rel_error == Approx(1.0 / 3));
  CHECK(r.describe({3}).find("1 of 3 elements differ (first at [2]: 4 vs 3)") == 0);

  // Only the element-wise bound failed: the atol that would pass at this rtol is offered.
  const CompareResult drift = cmp({1.0f, 2.0f, 3.05f}, {1.0f, 2.0f, 3.0f});
  CHECK_FALSE(drift.passed);
  CHECK(drift.atol_needed == Approx(0.05 - 0.03).epsilon(1e-4));  // |3.05 - 3| - rtol * 3
  CHECK(drift.describe({3}).find("; every element within atol 0.0") != std::string::npos);
  tol.atol = drift.atol_needed * 1.0001;
  CHECK(cmp({1.0f, 2.0f, 3.05f}, {1.0f, 2.0f, 3.0f}).passed);
  tol.atol = 1e-3;
  // Not offered where no atol would do: the cosine is below the minimum, or a non-finite
  // element differs.
  Tolerance cosine_gate = tol;
  cosine_gate.min_cosine = 0.9999;
  const CompareResult turned = compareTensors(floats({2}, {1, 0.1f}), floats({2}, {1, 0}),
                                              cosine_gate);  // cosine 0.995
  CHECK_FALSE(turned.passed);
  CHECK(turned.atol_needed == -1);
  CHECK(turned.describe({2}).find("every element within") == std::string::npos);
  CHECK(cmp({nan, 1.5f}, {1.0f, 1.0f}).atol_needed == -1);

  // Cosine and zero vectors.
  CHECK(cmp({0, 0}, {0, 0}).cosine == 1.0);
  CHECK(cmp({1, 0}, {0, 1}).cosine == Approx(0.0));
  Tolerance strict = tol;
  strict.atol = 10;
  strict.min_cosine = 0.99;
  CHECK_FALSE(compareTensors(floats({2}, {1, 0}), floats({2}, {0, 1}), strict).passed);

  // Shapes and dtypes.
  CHECK_FALSE(compareTensors(floats({2}, {1, 2}), floats({1, 2}, {1, 2}), tol).passed);
  HostTensor i64(DType::Int64, {2});
  i64.mutableData<int64_t>()[0] = 1;
  i64.mutableData<int64_t>()[1] = 2;
  const CompareResult mixed = compareTensors(floats({2}, {1, 2}), i64, tol);
  CHECK_FALSE(mixed.passed);
  CHECK_FALSE(mixed.dtype_match);
  CHECK(mixed.mismatches == 0);
}

TEST_CASE("compare: integers compare exactly") {
  HostTensor a(DType::Int64, {1}), b(DType::Int64, {1});
  a.mutableData<int64_t>()[0] = (int64_t{1} << 53) + 1;
  b.mutableData<int64_t>()[0] = int64_t{1} << 53;  // equal as doubles
  CHECK_FALSE(compareTensors(a, b).passed);
  Tolerance loose;
  loose.rtol = 0.5;
  HostTensor c(DType::Int32, {1}), d(DType::Int32, {1});
  c.mutableData<int32_t>()[0] = 1000;
  d.mutableData<int32_t>()[0] = 1001;
  CHECK_FALSE(compareTensors(c, d, loose).passed);
  loose.exact_integers = false;
  CHECK(compareTensors(c, d, loose).passed);
}

TEST_CASE("compare: summaries skip NaN and infinity") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const TensorSummary s =
      summarizeTensor(floats({5}, {1, 3, nan, std::numeric_limits<float>::infinity(), 2}));
  CHECK(s.count == 5);
  CHECK(s.nan_count == 1);
  CHECK(s.inf_count == 1);
  CHECK(s.min == 1);
  CHECK(s.max == 3);
  CHECK(s.mean == Approx(2));
  CHECK(s.stddev == Approx(std::sqrt(2.0 / 3)));
}

// ---- ORT differential test ----
//
// Hidden ("[.][ort]"): CTest runs it as `ort_differential` when node and onnxruntime-node are
// present (scripts/install-ort.sh). For every testdata/models/*.onnx it writes seeded inputs as
// .npy, runs `fusectl run --output-dir` and tests/ort_reference.js on them, and compares each
// output: |fusectl - ort| <= 1e-5 + 1e-4 * |ort| element-wise, and cosine >= 0.99999.

using fusectl::test::shellQuote;
using fusectl::test::outputFileStem;

TEST_CASE("ort differential: fusectl run matches onnxruntime on testdata/models", "[.][ort]") {
  namespace fs = std::filesystem;
  const fusectl::test::OrtSetup ort = fusectl::test::findOrtSetup();
  if (!ort.found) {
    WARN(ort.skip_reason);
    return;
  }
  const std::string& node = ort.node;
  const std::string& ort_dir = ort.dir;
  const std::string source = FUSECTL_SOURCE_DIR;
  const fs::path work = fusectl::testing::processTempPath("fusectl_ort_differential");
  fs::remove_all(work);

  std::vector<fs::path> models;
  for (const auto& e : fs::directory_iterator(source + "/testdata/models")) {
    if (e.path().extension() == ".onnx") models.push_back(e.path());
  }
  std::sort(models.begin(), models.end());
  REQUIRE(!models.empty());

  Tolerance tol;
  tol.atol = 1e-5;
  tol.rtol = 1e-4;
  tol.min_cosine = 0.99999;
  for (const fs::path& model_path : models) {
    SECTION(model_path.filename().string()) {
      const fs::path dir = work / model_path.stem();
      fs::create_directories(dir / "in");
      LoadOptions load;
      load.infer_shapes = false;
      auto model = loadModel(model_path.string(), load);
      std::string input_args, ort_args;
      for (const NamedTensor& in : makeRandomInputs(*model->graph, 1)) {
        const std::string file = (dir / "in" / (outputFileStem(in.name) + ".npy")).string();
        writeNpy(in.tensor, file);
        input_args += " --input " + shellQuote(in.name + "=" + file);
        ort_args += " " + shellQuote(in.name + "=" + file);
      }
      const std::string ort_cmd = "FUSECTL_ORT_DIR=" + shellQuote(ort_dir) + " " +
                                  shellQuote(node) + " " +
                                  shellQuote(source + "/tests/ort_reference.js") + " " +
                                  shellQuote(model_path.string()) + " " +
                                  shellQuote((dir / "ort").string()) + ort_args + " > " +
                                  shellQuote((dir / "ort.log").string()) + " 2>&1";
      INFO(ort_cmd);
      REQUIRE(std::system(ort_cmd.c_str()) == 0);
      const std::string run_cmd = shellQuote(FUSECTL_BINARY) + " run " +
                                  shellQuote(model_path.string()) + input_args +
                                  " --output-dir " + shellQuote((dir / "fusectl").string()) +
                                  " > " + shellQuote((dir / "run.log").string()) + " 2>&1";
      INFO(run_cmd);
      REQUIRE(std::system(run_cmd.c_str()) == 0);

      for (const Value* out : model->graph->outputs()) {
        const std::string stem = outputFileStem(out->name()) + ".npy";
        const HostTensor ours = readNpy((dir / "fusectl" / stem).string());
        const HostTensor ref = readNpy((dir / "ort" / stem).string());
        const CompareResult r = compareTensors(ours, ref, tol);
        INFO(model_path.filename().string() << " output '" << out->name()
                                            << "': " << r.describe(ref.dims()));
        CHECK(r.passed);
      }
    }
  }
  fs::remove_all(work);
}
