// The CPU executor: runs a Model's main graph on host tensors, one kernel call per node.
//
// Building an Executor resolves every node's kernel (by domain, op type and the model's opset
// for that domain) and plans value lifetimes (memory_plan.h); an unsupported op is reported
// then, as fusectl::Error(Unsupported) naming the node. run() validates the inputs against the
// declared dtypes, ranks and static dims, binds symbolic dims from the actual inputs (a symbol
// must take one value across all inputs), runs the nodes in topological order and returns the
// graph outputs. Intermediates come from a best-fit buffer pool and return to it after their
// last reader; initializers are borrowed, never copied; graph outputs get buffers of their own.
// Any failure inside a kernel is a fusectl::Error naming the node ("node 'X' (Op): ...").
//
// Compute is float32; float16/bfloat16 are storage types that kernels convert (half.h).
// Subgraph ops (If, Loop, Scan) are not run unless a kernel for them is registered.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"
#include "fusectl/kernels/memory_plan.h"

namespace fusectl::kernels {

struct NamedTensor {
  std::string name;
  HostTensor tensor;
};

struct ExecutorOptions {
  int num_threads = 1;  // passed to kernels via KernelContext; 0 = hardware concurrency
  bool profile = false;  // record per-node wall time in ExecutionStats::node_times
  const KernelRegistry* registry = nullptr;  // nullptr = KernelRegistry::global()
};

struct NodeTime {
  std::string node;     // Node::label()
  std::string op_type;
  double seconds = 0;
};

struct ExecutionStats {
  // Peak bytes of live activations (node outputs, graph outputs included) during the run;
  // inputs and initializers are not counted. An output that aliases its input counts nothing.
  uint64_t peak_activation_bytes = 0;
  uint64_t pool_reserved_bytes = 0;  // bytes the pool holds from the system after the run
  uint64_t buffer_reuses = 0;        // activation requests served from a released buffer
  size_t intermediate_tensors = 0;   // node outputs that are not graph outputs
  size_t nodes_run = 0;
  double seconds = 0;                // wall time of run()
  std::vector<NodeTime> node_times;  // in execution order, when ExecutorOptions::profile
};

class Executor {
 public:
  // `model` must outlive the executor and stay unmodified while it exists.
  explicit Executor(const Model& model, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Inputs by name: every graph input that is not an initializer is required; an initializer
  // listed as a graph input (IR < 4) may be overridden. Returns the graph outputs in order.
  std::vector<NamedTensor> run(const std::vector<NamedTensor>& inputs,
                               ExecutionStats* stats = nullptr);

  const MemoryPlan& plan() const { return plan_; }
  const Graph& graph() const { return graph_; }
  int numThreads() const { return num_threads_; }

 private:
  class Allocator;
  // Checks the inputs against the graph and stores them (and the initializers) in their slots.
  void bindInputs(const std::vector<NamedTensor>& inputs, std::vector<HostTensor>& slots) const;

  const Model& model_;
  const Graph& graph_;
  ExecutorOptions options_;
  int num_threads_ = 1;
  MemoryPlan plan_;
  std::vector<const KernelInfo*> kernels_;  // per step
  std::vector<int64_t> opsets_;             // per step
  std::vector<HostTensor> initializers_;    // per slot (empty for non-initializers)
  BufferPool pool_;
};

// Runs `model` once: Executor(model, options).run(inputs, stats).
std::vector<NamedTensor> runModel(const Model& model, const std::vector<NamedTensor>& inputs,
                                  const ExecutorOptions& options = {},
                                  ExecutionStats* stats = nullptr);

}  // namespace fusectl::kernels
