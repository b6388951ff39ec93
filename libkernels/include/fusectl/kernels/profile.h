// Fused against unfused, measured: the engine of `fusectl profile`.
//
// profileModels() runs a model as given ("unfused") and as the optimizer left it ("fused") on
// the same inputs, in two passes over both sides:
//  1. timing: one Executor per side, built once; `warmup` untimed runs per side, then `runs`
//     timed runs alternating unfused, fused, unfused, fused... so that both sides see the same
//     drift of the machine (frequency, other processes, caches). Latency, kernel invocations
//     and memory figures come from these runs. With ExecutorOptions::capture_graph on a device
//     that records (CUDA Graphs), a side's second warmup run records its run and the timed
//     runs replay it (executor.h); the per-node pass never does.
//  2. per node: the same again with the same executors recording per-node times
//     (Executor::setProfiling). A node's figure is its median over these runs. They are kept
//     apart from the timing runs because recording costs per node (its label, its shapes):
//     about 0.15 us a node here (testdata's bert_layer, 95 nodes: 50 us a run recording, 37 us
//     not), more on the side with more nodes, which would bias the comparison towards the
//     fused side.
// Both passes share the two executors, so each side's weights are packed once. The result says how long each side took, what it wrote, how the two compare
// (a speedup with a bootstrap confidence interval over the paired runs), whether their outputs
// agree (the comparison `fusectl verify` makes, on the outputs of the last timed run of each
// side: compareRunOutputs) and, per fusion site of the
// optimizer, whether the fused node is faster than the nodes it replaced were.
//
// This library knows no optimizer: the caller passes the fusion sites as plain data (from
// libpasses' Report, see apps/cmd_profile.cpp) and the fused model already optimized.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"

namespace fusectl::kernels {

// One fusion of the optimizer, by node labels (Node::label()): `fused_node` in the fused model
// replaced `replaced_nodes`. A later fusion may replace an earlier one's node again (Conv+BN
// folded into a Conv, then Conv+Relu fused): profileModels follows such chains.
struct FusionSiteInput {
  std::string pass;
  std::string pattern;
  // The fused node's label when it was made ("" when the fusion only removed nodes): what a
  // later site's replaced_nodes name it by.
  std::string fused_node;
  // Its label in the fused model when the caller knows it is another (a later pass relabelled
  // it); "" means fused_node.
  std::string final_node;
  std::string fused_op;
  std::vector<std::string> replaced_nodes;
  // Further nodes the rewrite made, shared with other sites (passes::FusionSite::helper_nodes):
  // a later site that replaces one of them stands for all the sites that share it.
  std::vector<std::string> helper_nodes;

  const std::string& finalNode() const { return final_node.empty() ? fused_node : final_node; }
};

enum class ProfiledSides { Both, UnfusedOnly, FusedOnly };

// Where a run stands, for a progress line: side is "unfused" or "fused"; `done` of `total`
// runs of that side in this pass, warmup runs counted apart from measured ones.
struct ProfileProgress {
  const char* side = "";
  bool node_times = false;  // the second pass (per-node times)
  bool warmup = false;
  int done = 0;
  int total = 0;
};

struct ProfileOptions {
  int warmup = 3;
  int runs = 20;
  ProfiledSides sides = ProfiledSides::Both;
  ExecutorOptions execution;  // threads, registry, backend; profiling is switched per pass
  Tolerance tolerance;        // for outputs_agree; `fusectl profile` uses verify's defaults
  // The speedup's confidence interval: resamples of the paired runs, and the generator's seed
  // (fixed, so the same timings always give the same interval).
  int bootstrap_resamples = 2000;
  uint64_t bootstrap_seed = 0x5eed;
  double confidence = 0.95;
  std::function<void(const ProfileProgress&)> progress;  // called before each run
};

// Order statistics of a sample, in seconds. Median: the middle value, or the mean of the two
// middle ones; p90: the nearest-rank 90th percentile (the ceil(0.9 n)-th smallest).
struct SampleSummary {
  double median = 0, min = 0, max = 0, p90 = 0;
  static SampleSummary of(std::vector<double> sample);
};

// One node of a side, in execution order, with its median time over the timed runs.
struct NodeProfile {
  std::string node;  // Node::label()
  std::string op_type;
  double median_seconds = 0;
  // Its time in each per-node run, in run order: run i of one side ran right after or before
  // run i of the other, which is what a fusion site's interval pairs (timeFusionSites).
  std::vector<double> run_seconds;
  double share = 0;  // of the sum of all nodes' medians on this side
  std::vector<std::vector<int64_t>> input_dims, output_dims;
  uint64_t output_bytes = 0;
};

// One node inside a subgraph of a side (ExecutionStats::body_node_times), as a NodeProfile
// whose figures are per run, summed over its calls in the run (dims: of its first call); its
// share is of the side's main-graph nodes, one of which (its control-flow parent) already
// counts its time.
struct BodyNodeProfile : NodeProfile {
  std::string parent;  // "If_0/then_branch", "Loop_3/body > If_1/else_branch"
  size_t calls = 0;    // per run
};

// One op type of a side: its nodes' medians summed, their share of the side's sum, and how many
// nodes of it one run calls.
struct OpTypeProfile {
  std::string op_type;
  double seconds = 0;
  double share = 0;
  size_t calls = 0;
};

struct SideProfile {
  std::string name;                 // "unfused" or "fused"
  size_t graph_nodes = 0;           // nodes of the model's main graph
  std::vector<double> run_seconds;  // each timed run's wall time (ExecutionStats::seconds)
  SampleSummary latency;            // of run_seconds
  size_t kernel_invocations = 0;    // ExecutionStats::nodes_run of one run
  // On a device other than the CPU (all zero on the CPU), from one run: kernel launches on the
  // device, nodes that ran on the CPU for want of a device kernel, and the host/device copies
  // that cost (ExecutionStats).
  std::string device = "cpu";
  uint64_t device_launches = 0;
  size_t fallback_nodes = 0;
  uint64_t copies = 0;
  uint64_t copied_bytes = 0;
  // ExecutorOptions::capture_graph (a CUDA Graph per side): how many timed runs replayed the
  // recorded run, and the last timed run's ExecutionStats::device_graph ("" when not asked).
  size_t graph_replays = 0;
  std::string device_graph;
  uint64_t activation_bytes_written = 0;
  uint64_t peak_activation_bytes = 0;  // the largest of the timed runs
  int threads = 1;                     // the executor's
  // The per-node pass: each run's wall time (recording included), and per node the median.
  std::vector<double> node_run_seconds;
  std::vector<NodeProfile> nodes;      // execution order
  std::vector<OpTypeProfile> per_op;   // slowest first (ties: op type name)
  // Nodes inside subgraphs, in the order of their first calls (empty without control flow).
  std::vector<BodyNodeProfile> body_nodes;
  // The per-node run whose wall time is the median (the lower of the two middle ones for an
  // even count), and its per-node times as recorded: what a trace shows.
  size_t trace_run = 0;
  std::vector<NodeTime> trace_run_nodes;
  // That run's nodes inside subgraphs, as body_nodes lists them, each with its seconds summed
  // over its calls in that run.
  std::vector<BodyNodeTime> trace_run_body_nodes;

  // The `n` slowest nodes (ties: earlier first).
  std::vector<const NodeProfile*> slowest(size_t n) const;
  // The `n` slowest nodes inside subgraphs (ties: earlier first).
  std::vector<const BodyNodeProfile*> slowestInBodies(size_t n) const;
  // The first node with this label, or nullptr; a main-graph node before one inside a subgraph
  // (a fusion the optimizer made inside a Loop body is timed there).
  const NodeProfile* find(const std::string& label) const;
};

// unfused median / fused median, and a confidence interval: the percentile bootstrap of that
// ratio over resamples of the paired runs (pair i: the i-th timed run of each side, run back to
// back).
struct SpeedupEstimate {
  double median = 0;
  double ci_low = 0, ci_high = 0;
  double confidence = 0.95;
  int resamples = 0;
  uint64_t seed = 0;
  std::string method = "bootstrap";
};

// A fusion site, timed. `compared_nodes` are the unfused model's nodes the fused node stands
// for: the site's replaced nodes, where one that an earlier site had produced is replaced by
// what that site had replaced (recursively). A site whose fused node a later site replaced
// again is `superseded_by` that site's fused node: it has no time of its own.
struct FusionSiteProfile {
  FusionSiteInput site;
  std::vector<std::string> compared_nodes;
  std::vector<std::string> missing_nodes;  // compared nodes the unfused run does not have
  std::string superseded_by;               // "" unless superseded
  bool fused_found = false;                // the fused node ran on the fused side
  std::string fused_op_run;                // its op type there, e.g. "FusedConv_Relu"
  double fused_seconds = 0;                // its median, with those of also_fused
  // Fused nodes of the sites this one superseded through their helper nodes (merged q/k/v's
  // Slices), which still run beside this site's fused node and count with it.
  std::vector<std::string> also_fused;
  double replaced_seconds = 0;             // sum of the medians of the compared nodes found
  // replaced / fused over the per-node runs, with the bootstrap interval of estimateSpeedup:
  // run i's figure on each side is the sum of the site's nodes in that run. Absent when the
  // nodes carry no per-run times of equal count (hand-made sides), or the site is not
  // comparable.
  std::optional<SpeedupEstimate> speedup;
  // Status, one of:
  //  "paid": faster; with a speedup, its whole interval is above 1, else fused <= replaced;
  //  "did-not-pay": slower; with a speedup, its whole interval is below 1, else fused > replaced;
  //  "level": the interval contains 1 (the difference is within the nodes' run-to-run spread);
  //  "superseded";
  //  "unmatched" (the fused node or some compared node was not found: nothing is claimed).
  std::string status;
  bool comparable() const {
    return status == "paid" || status == "did-not-pay" || status == "level";
  }
};

struct ProfileResult {
  int warmup = 0, runs = 0;
  std::optional<SideProfile> unfused, fused;
  std::optional<SpeedupEstimate> speedup;  // both sides only
  // Both sides only: compareRunOutputs on the outputs of each side's last timed run.
  std::optional<Comparison> agreement;
  std::vector<FusionSiteProfile> fusion_sites;  // in the order given; empty unless both sides
};

// Runs the sides `options.sides` asks for (the model of a side not run may be null) on
// `inputs` and measures them as described at the top. Executors are built first, so an op
// without a kernel throws fusectl::Error(Unsupported) naming the node before anything runs.
ProfileResult profileModels(const Model* unfused, const Model* fused,
                            const std::vector<NamedTensor>& inputs,
                            const std::vector<FusionSiteInput>& sites,
                            const ProfileOptions& options);

// Timed sites from the two sides' node figures (profileModels calls it with its options'
// bootstrap settings; exposed for tests).
std::vector<FusionSiteProfile> timeFusionSites(const std::vector<FusionSiteInput>& sites,
                                               const SideProfile& unfused,
                                               const SideProfile& fused,
                                               int bootstrap_resamples = 2000,
                                               uint64_t bootstrap_seed = 0x5eed,
                                               double confidence = 0.95);

// The speedup of paired runs (exposed for tests): unfused[i] and fused[i] ran back to back.
SpeedupEstimate estimateSpeedup(const std::vector<double>& unfused,
                                const std::vector<double>& fused, int resamples,
                                uint64_t seed, double confidence);

// Writes each node's median time and share into its doc_string (after what is there, one line
// "fusectl profile: 0.123 ms median, 12.3% of the run") and `summary` into the model's
// metadata_props under "fusectl.profile" (replacing an earlier one). Nodes are matched to
// `side` by label, the k-th node of a label in the graph's order to the k-th of the side's; a
// node the side lacks keeps its doc_string. Nodes inside subgraphs are matched to
// `side.body_nodes` by parent path and label ("... ms median per run (4 calls), ...").
// Only doc strings and metadata change.
void annotateModel(Model& model, const SideProfile& side, const std::string& summary);

// Chrome trace-event JSON (Perfetto, chrome://tracing) of `r`, with a final newline: each side
// a process ("unfused", "fused"), its median per-node run one complete ("X") event per kernel
// invocation with the node's name, op, shapes and output bytes, laid back to back (the node
// times hold durations only). A side that ran on a device puts the kernels its device ran on a
// track of their own ("<device> kernels"), and what ran on the CPU (fallbacks, dims-only ops) on
// the "cpu" track, each event where it falls in the run's order.
std::string profileTraceJson(const ProfileResult& r);

// A CI gate: `current` against `baseline` (seconds). Regressed when slower by more than
// `max_regression_percent` percent.
struct RegressionCheck {
  double current = 0, baseline = 0;
  double change_percent = 0;  // (current / baseline - 1) * 100
  bool regressed = false;
};
RegressionCheck checkRegression(double current, double baseline, double max_regression_percent);

}  // namespace fusectl::kernels
