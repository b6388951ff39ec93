// The executor's fixed cost per node: a chain of N tiny Relu nodes built in memory, run
// repeatedly; ns per node of the whole run, minus the ns the Relu kernel itself takes when
// called directly on the same tensor, is what the executor adds around each kernel call.
// Prints one JSON line, then one for the cost of a parallel region of the kernels' worker pool
// (2 threads, empty tasks). No assertions: the targets are read off by people (issue 13: under
// 1 us per node, a few us per region).
//
//   bench_executor_overhead [--nodes N] [--repeat R] [--elements E] [--threads T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../libkernels/cpu/thread_pool.h"
#include "bench_clock.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/executor.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fusectl;
using namespace fusectl::kernels;

using fusectl::bench::median;

std::unique_ptr<Model> reluChain(int nodes, int64_t elements) {
  auto model = std::make_unique<Model>();
  model->setOpsetVersion("", 17);
  Graph& g = *model->graph;
  ValueType vt;
  vt.dtype = DType::Float;
  vt.shape = Shape::ofStatic({elements});
  Value* cur = g.addInput("x", vt);
  for (int i = 0; i < nodes; ++i) {
    Graph::NodeSpec spec;
    spec.op_type = "Relu";
    spec.name = "relu_" + std::to_string(i);
    spec.inputs = {cur};
    spec.output_names = {i + 1 == nodes ? std::string("y") : "t" + std::to_string(i)};
    cur = g.createNode(std::move(spec))->output(0);
  }
  g.addOutput(cur);
  return model;
}

// Serves the same buffer every call, so the direct-call loop measures the kernel alone.
class ReusingAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    if (kept_.dtype() != dtype || kept_.dims() != dims) kept_ = HostTensor(dtype, dims);
    return kept_;
  }

 private:
  HostTensor kept_;
};

}  // namespace

int main(int argc, char** argv) {
  int nodes = 10000, repeat = 30, threads = 1;
  int64_t elements = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--nodes") nodes = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--elements") elements = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: bench_executor_overhead [--nodes N] [--repeat R] "
                           "[--elements E] [--threads T]\n");
      return 2;
    }
  }
  auto model = reluChain(nodes, elements);
  ExecutorOptions options;
  options.num_threads = threads;
  Executor executor(*model, options);
  HostTensor x(DType::Float, {elements});
  for (int64_t i = 0; i < elements; ++i) x.mutableData<float>()[i] = static_cast<float>(i % 7) - 3;
  const std::vector<NamedTensor> inputs = {{"x", x}};

  for (int i = 0; i < 3; ++i) executor.run(inputs);
  std::vector<double> run_ns;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = Clock::now();
    executor.run(inputs);
    run_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }

  // The kernel alone: the same node's kernel called back to back on one context.
  const Node& first = **model->graph->nodes().begin();
  const KernelInfo* relu = KernelRegistry::global().find("", "Relu", 17);
  ReusingAllocator reuse;
  std::vector<const HostTensor*> args = {&x};
  KernelContext ctx(first, 17, args, reuse, threads);
  std::vector<double> kernel_ns;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < nodes; ++i) relu->fn(ctx);
    kernel_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }

  const double per_node = median(run_ns) / nodes;
  const double per_kernel = median(kernel_ns) / nodes;
  std::printf(
      "{\"bench\":\"executor_overhead\",\"nodes\":%d,\"elements\":%lld,\"threads\":%d,"
      "\"repeat\":%d,\"run_ms_median\":%.3f,\"run_ms_min\":%.3f,\"ns_per_node\":%.1f,"
      "\"kernel_ns_per_call\":%.1f,\"executor_ns_per_node\":%.1f}\n",
      nodes, static_cast<long long>(elements), threads, repeat, median(run_ns) / 1e6,
      *std::min_element(run_ns.begin(), run_ns.end()) / 1e6, per_node, per_kernel,
      per_node - per_kernel);

  // A region of two tasks of ~2 us each, against the same two tasks run back to back on the
  // calling thread: the region's cost is its time minus half the serial time.
  const int regions = 5000;
  auto work = [](int) {
    volatile float acc = 0;
    for (int i = 0; i < 2000; ++i) acc = acc + 1.0f;
  };
  std::vector<double> region_ns, serial_ns;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < regions; ++i) cpu::runOnWorkers(2, work);
    region_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                        regions);
    t0 = Clock::now();
    for (int i = 0; i < regions; ++i) {
      work(0);
      work(1);
    }
    serial_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                        regions);
  }
  std::printf("{\"bench\":\"parallel_region\",\"threads\":2,\"regions\":%d,"
              "\"us_per_region\":%.2f,\"us_serial\":%.2f,\"us_overhead\":%.2f}\n",
              regions, median(region_ns) / 1e3, median(serial_ns) / 1e3,
              (median(region_ns) - median(serial_ns) / 2) / 1e3);
  return 0;
}
