// The executor: runs a Model's main graph on a backend (backend.h; the CPU by default), one
// kernel call per node.
//
// Building an Executor resolves every node's kernel (by domain, op type, the model's opset for
// that domain, the node's kernelDType and the backend's device, falling back to a CPU kernel
// when the device has none) and plans value lifetimes (memory_plan.h); an unsupported op is
// reported then, as fusectl::Error(Unsupported) naming the node. run() validates the inputs
// against the declared dtypes, ranks and static dims, binds symbolic dims from the actual inputs
// (a symbol must take one value across all inputs), runs the nodes in topological order and
// returns the graph outputs (on the host, whatever the backend). Intermediates come from a
// best-fit buffer pool and return to it after their last reader; initializers are borrowed,
// never copied (on the CPU); graph outputs get buffers of their own.
// Any failure inside a kernel is a fusectl::Error naming the node ("node 'X' (Op): ...").
//
// Compute is float32; float16/bfloat16 are storage types that kernels convert (half.h).
// Subgraphs (If/Loop/Scan bodies, at any depth) get executors of their own, built once with
// the outer one (kernels resolved and lifetimes planned per body, not per iteration) and run
// on the CPU; a control-flow kernel runs them through KernelContext::runSubgraph, and a body's
// outer references read the values of the enclosing scopes as they are at that step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/backend.h"
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
  // The CPU kernels: what runs when no backend is given, and what another device falls back
  // to. nullptr = KernelRegistry::global().
  const KernelRegistry* registry = nullptr;
  // Where nodes run; nullptr = a CpuBackend over `registry`. Must outlive the executor.
  const Backend* backend = nullptr;
  // The largest tensor a node may produce during a run, in bytes: a larger output is refused
  // with an error naming the node (ErrorKind::InvalidInput, what the loader's limit of the same
  // name gives) before anything is allocated. What keeps a model whose declared or mutated
  // shapes ask for terabytes from ending in an allocation failure, or in swapping.
  uint64_t max_tensor_bytes = LoadOptions::kDefaultMaxTensorBytes;  // the loader's default
  // Record a run on the device (Backend::beginCapture: a CUDA Graph) and replay it, one launch
  // per run instead of one per kernel, while later runs get inputs of the same names, dtypes
  // and dims. The first run with given shapes runs as usual; the next one with the same shapes
  // runs as usual too, then records the run and replays it on the same inputs, and keeps the
  // recording only if the replay's outputs agree with that run's (compareRunOutputs, default
  // tolerance): a recording that computes something else is never used. Refused, with the
  // reason in ExecutionStats::device_graph, when the backend cannot record, a node runs on the
  // CPU (fallbacks, control flow), a device kernel reads a value on the host that is not a
  // constant, or recording fails; then every run is a plain one. Ignored when `profile` is set
  // (per-node timing needs the nodes queued one by one). Inputs and outputs of replays go
  // through page-locked buffers kept with the recording.
  bool capture_graph = false;
  // Let a kernel write an output into the buffer of an input it is the last reader of
  // (KernelContext::inputDonatable; FusedConv's residual). Off only to compare against.
  bool donate_inputs = true;
  // Store a value between two nodes channels-last (HostTensor::channelsLast) where its
  // producer's kernel writes that layout and every reader's kernel reads it
  // (KernelInfo::reads_channels_last / writes_channels_last): the 1x1 / depthwise / 1x1
  // convolution chains of MobileNet and EfficientNet, whose channels would otherwise be moved
  // across pixels on the way into and out of every depthwise convolution. CPU backend only.
  // Off (or the environment variable FUSECTL_NO_CHANNELS_LAST set) only to compare against.
  bool channels_last = true;
};

struct NodeTime {
  std::string node;     // Node::label()
  std::string op_type;
  double seconds = 0;
  Device device = Device::Cpu;  // where it ran (Cpu for a fallback from another device)
  // What the node read and wrote: dims per input and output (empty for an omitted one), and
  // the bytes of the outputs it wrote itself (an output aliasing an input counts nothing, one
  // written into an input's buffer, KernelContext::overwriteInput, counts in full).
  std::vector<std::vector<int64_t>> input_dims;
  std::vector<std::vector<int64_t>> output_dims;
  uint64_t output_bytes = 0;
};

// A node of a subgraph (an If branch, a Loop or Scan body) in a profiled run: its time is part
// of the control-flow node that ran it, which is all a main graph's node_times can show (Silero
// VAD's If took 99.8% of its run, and said nothing of what inside it).
struct BodyNodeTime {
  // The control-flow nodes it runs inside, outermost first, each as "<label>/<attribute>":
  // "If_0/then_branch", or "Loop_3/body > If_1/else_branch" for a body inside a body.
  std::string parent;
  // seconds and output_bytes summed over its calls in the run (a Loop body's nodes run once per
  // iteration); dims of its first call.
  NodeTime time;
  size_t calls = 0;
};

struct ExecutionStats {
  // Peak bytes of live activations (node outputs, graph outputs included) during the run;
  // inputs and initializers are not counted. An output that aliases its input counts nothing.
  uint64_t peak_activation_bytes = 0;
  uint64_t pool_reserved_bytes = 0;  // bytes the pool holds from the system after the run
  uint64_t buffer_reuses = 0;        // activation requests served from a released buffer
  size_t intermediate_tensors = 0;   // node outputs that are not graph outputs
  size_t nodes_run = 0;               // kernel invocations
  // Bytes of node outputs written during the run (graph outputs included; an output that
  // aliases an input's bytes, such as Reshape's, writes nothing): the activation traffic that
  // fusion removes.
  uint64_t activation_bytes_written = 0;
  double seconds = 0;                // wall time of run()
  std::vector<NodeTime> node_times;  // in execution order, when ExecutorOptions::profile
  // ExecutorOptions::profile: every node run inside a subgraph, once per node and parent, in
  // the order of their first calls. Their times are already in their parents' node_times.
  std::vector<BodyNodeTime> body_node_times;

  // Only on a backend whose device is not the CPU (all zero on the CPU backend): nodes run on
  // the CPU because the device has no kernel for them, and tensors copied between host and
  // device memory during the run (initializers are copied on their first use on the device and
  // kept for later runs). Memory figures above are the device arena's.
  size_t fallback_nodes = 0;
  uint64_t copies_to_device = 0;
  uint64_t copies_to_host = 0;
  uint64_t copied_bytes = 0;  // both directions
  // Kernel launches the device counted during the run (Backend::launches); 0 on the CPU. For a
  // replayed run: the kernels the recording holds (recorded once, replayed by one launch).
  uint64_t device_launches = 0;
  // ExecutorOptions::capture_graph: whether this run was a replay of the recorded run, and one
  // line on the recording ("" when not asked for): "replayed", "recorded after this run
  // (checked against it)", "not recorded yet: ...", "not used: <reason>".
  bool graph_replayed = false;
  std::string device_graph;
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
  const Backend& backend() const { return *backend_; }
  // Bytes of the initializers' own copies this executor does not hold now, because every
  // kernel reading one keeps a packed copy (copied_inputs.h); before the first run, those it
  // will make when a node first reads them. Subgraphs' executors not included.
  uint64_t releasedConstantBytes() const;
  // Whether later runs time each node (ExecutorOptions::profile), for one executor to serve
  // timed and profiled runs without packing its weights twice.
  // Subgraphs' executors follow, so their nodes are timed too (ExecutionStats::body_node_times).
  void setProfiling(bool on);
  // The nodes that run on the CPU because the backend's device has no kernel for them (or its
  // kernel declines them), in execution order; empty on the CPU backend.
  std::vector<const Node*> cpuFallbacks() const;
  // The values this executor stores channels-last (ExecutorOptions::channels_last), in
  // execution order of their producers; subgraphs' executors not included.
  std::vector<const Value*> channelsLastValues() const;

  // ExecutorOptions::capture_graph: whether a recording is kept, and a way to give it up for
  // good (later runs are queued, and ExecutionStats::device_graph says "not used: <reason>"):
  // what a comparison does when the other side it is timed against has none.
  bool hasRecording() const { return recording_ != nullptr; }
  void forgoRecording(const std::string& reason);

 private:
  class Allocator;
  class BodyRunner;
  struct Scope;
  struct BodyTimes;
  struct Recording;
  // One run as the nodes' kernels queue it (what run() does without a recording).
  std::vector<NamedTensor> runQueued(const std::vector<NamedTensor>& inputs, ExecutionStats* stats);
  // Records the run with these inputs (after runQueued gave `expected` for them), replays it and
  // keeps it in recording_ when it agrees; else sets graph_refusal_.
  void tryRecording(const std::vector<NamedTensor>& inputs,
                    const std::vector<NamedTensor>& expected, const ExecutionStats& queued);
  std::unique_ptr<Recording> record(const std::vector<NamedTensor>& inputs,
                                    const std::vector<NamedTensor>& expected);
  std::vector<NamedTensor> replay(const Recording& recording,
                                  const std::vector<NamedTensor>& inputs, ExecutionStats* stats);
  // Why no run of this executor can be recorded, whatever its inputs ("" when one may be).
  std::string staticRecordingRefusal() const;
  // The executor of a subgraph `body` nested `depth` graphs deep in `model`.
  Executor(const Model& model, const Graph& body, ExecutorOptions options, int depth);
  // Builds an executor for every subgraph of this graph's nodes.
  void prepareBodies(int depth);
  // Runs this body with its inputs bound in order and outer references read from `outer`.
  // `times` (profiled runs only) collects the body's node times under `parent`.
  std::vector<HostTensor> runBody(const std::vector<HostTensor>& inputs, const Scope& outer,
                                  BodyTimes* times, const std::string& parent);
  // The step loop over bound `slots` (and `host`, on a device); `outer` is null for the main graph.
  // `body_times` and `parent`: where this graph's bodies' node times go, and the parent path
  // of this graph (empty for the main graph), in a profiled run.
  void runSteps(std::vector<HostTensor>& slots, std::vector<HostTensor>& host, const Scope* outer,
                ExecutionStats* stats, ExecutionStats& copies, uint64_t& bytes_written,
                BodyTimes* body_times = nullptr, const std::string& parent = {});
  // Finds every step's kernel, on the backend's device or as a CPU fallback.
  void resolveKernels();
  // Checks the inputs against the graph and stores them (and the initializers) in their slots.
  void bindInputs(const std::vector<NamedTensor>& inputs, std::vector<HostTensor>& slots) const;
  // Whether `t` is slot `s`'s initializer itself (not an input overriding it).
  bool isInitializer(int s, const HostTensor& t) const;
  // Which initializers' own copies may be released, and after how many uses' copies.
  void countReleasableUses();
  // Which outputs of each step are asked for channels-last (channels_last_outputs_).
  void planChannelsLast();
  // After step `step` set a new state: lets go of constant inputs it copied (copied_inputs.h).
  void noteCopiedInputs(size_t step, const KernelState* state, uint64_t constant_inputs,
                        std::vector<HostTensor>& slots);
  // Whether input `input` of step `step` reads slot `s` through a packed copy of its own.
  bool useHasCopy(size_t s, size_t step, size_t input) const;
  // Of the inputs `node` reads for the last time (no initializers), those its kernel may
  // overwrite (KernelContext::inputDonatable), on a backend that shares the host's memory.
  static uint64_t donatableInputs(const Node& node, const std::vector<const HostTensor*>& args,
                                  uint64_t last_read_here);
  // Brings a released initializer's bytes back into its slot (KernelContext::restoredInput).
  void restoreConstant(size_t s, std::vector<HostTensor>& slots);
  // On a device: the device copies kept from earlier runs, put in `slots` for the initializers
  // `host` holds (bound by bindInputs), so they are not copied again.
  void reuseDeviceInitializers(const std::vector<HostTensor>& host,
                               std::vector<HostTensor>& slots) const;
  // Makes sure slot `s` has a copy on the host (`to_host`) or the device, copying it across
  // the boundary when it has none yet; counts the copy in `stats`.
  void bringOver(int s, bool to_host, bool pooled, std::vector<HostTensor>& device,
                 std::vector<HostTensor>& host, ExecutionStats& stats);

  const Model& model_;
  const Graph& graph_;
  ExecutorOptions options_;
  int num_threads_ = 1;
  std::unique_ptr<Backend> own_backend_;  // when the options name none
  const Backend* backend_ = nullptr;
  MemoryPlan plan_;
  std::vector<const KernelInfo*> kernels_;  // per step
  std::vector<int64_t> opsets_;             // per step
  std::vector<HostTensor> initializers_;    // per slot (empty for non-initializers)
  // Per slot: uses (node inputs) of an initializer copy that is released once each has copied
  // it (0: kept), and the uses that have, as step << 6 | input.
  std::vector<uint32_t> constant_uses_;
  std::vector<std::vector<uint64_t>> copied_uses_;
  std::vector<std::unique_ptr<KernelState>> kernel_states_;  // per step, kept across runs
  std::vector<uint64_t> channels_last_outputs_;  // per step: KernelContext::channelsLastWanted
  BufferPool pool_;                         // the backend's arena
  // Only when the backend's memory is not the host's:
  std::vector<bool> on_cpu_;                   // per step: a CPU fallback
  size_t fallback_steps_ = 0;
  std::vector<HostTensor> device_initializers_;  // per slot: copied on first use, then kept
  BufferPool host_pool_;                       // host buffers of fallbacks and copies
  std::unordered_map<const Graph*, std::unique_ptr<Executor>> bodies_;  // per subgraph
  // A profiled run on a device with timers: which node_times entry each pair of marks times.
  struct DeviceMark {
    size_t node_time;
    int before, after;
  };
  std::vector<DeviceMark> device_marks_;
  // ExecutorOptions::capture_graph: the recording, the reason none is made, the inputs'
  // names, dtypes and dims in the last run (a recording needs two runs alike), and whether a
  // run is being recorded (then nothing may be copied or synchronised).
  std::unique_ptr<Recording> recording_;
  std::string graph_refusal_;
  std::string last_signature_;
  bool recording_run_ = false;
};

// Runs `model` once: Executor(model, options).run(inputs, stats).
std::vector<NamedTensor> runModel(const Model& model, const std::vector<NamedTensor>& inputs,
                                  const ExecutorOptions& options = {},
                                  ExecutionStats* stats = nullptr);

}  // namespace fusectl::kernels
