// profileModels (profile.h): the A/B runner. Statistics live in profile_statistics.cpp, the
// fusion-site accounting in profile_sites.cpp, the model annotation in profile_annotate.cpp.
#include "fusectl/kernels/profile.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "fusectl/graph/error.h"

namespace fusectl::kernels {

namespace {

// A side being measured: its executor in the current pass and every measured run's statistics.
struct SideRun {
  const char* name;
  const Model* model;
  std::unique_ptr<Executor> executor;
  std::vector<ExecutionStats> timed;     // pass 1
  // Pass 2: each run's stats, with node_times kept only for the first (every run calls the same
  // kernels on the same dims) and each run's node times in profiled_seconds. Holding every
  // run's records (strings and dims allocated in the middle of the run) fragmented the heap
  // under the next run's outputs: PP-OCRv4 rec's RSS grew 1 MB a run, and the page faults of
  // the fresh memory landed in the nodes that allocated it (its last Softmax read 2.4 ms, 0.1
  // in isolation).
  std::vector<ExecutionStats> profiled;
  std::vector<std::vector<double>> profiled_seconds;
  // Per run, the seconds of the first run's body_node_times records, in their order (0 for one
  // a run did not call: an If that took the other branch).
  std::vector<std::vector<double>> profiled_body_seconds;
  int threads = 1;                       // as the executor resolved it (0 = all cores)
  Device device = Device::Cpu;           // the executor's backend's
  std::vector<NamedTensor> outputs;      // of the last timed run, for the agreement check
};

// Both sides' executors, built once for both passes: a second build would pack every weight
// again while the first side's packed weights are still held.
void buildExecutors(std::vector<SideRun>& sides, const ProfileOptions& options) {
  for (SideRun& side : sides) {
    side.executor = std::make_unique<Executor>(*side.model, options.execution);
    side.threads = side.executor->numThreads();
    side.device = side.executor->backend().device();
  }
}

// The seconds of `run`'s body records in the order of `first`'s (the first profiled run's).
// Runs on the same inputs call the same bodies in the same order, so records are matched by
// position, and by parent and node only where that fails.
std::vector<double> bodySeconds(const std::vector<BodyNodeTime>& first,
                                const std::vector<BodyNodeTime>& run) {
  std::vector<double> seconds(first.size(), 0.0);
  auto same = [](const BodyNodeTime& a, const BodyNodeTime& b) {
    return a.parent == b.parent && a.time.node == b.time.node;
  };
  for (size_t i = 0; i < run.size(); ++i) {
    if (i < first.size() && same(first[i], run[i])) {
      seconds[i] = run[i].time.seconds;
      continue;
    }
    for (size_t k = 0; k < first.size(); ++k) {
      if (same(first[k], run[i])) {
        seconds[k] = run[i].time.seconds;
        break;
      }
    }
  }
  return seconds;
}

// One pass over both sides (profile.h): warmup, then measured runs alternating.
void runPass(std::vector<SideRun>& sides, const std::vector<NamedTensor>& inputs,
             bool node_times, const ProfileOptions& options) {
  const ExecutorOptions& exec = options.execution;
  for (SideRun& side : sides) side.executor->setProfiling(node_times);
  const int total = options.warmup + options.runs;
  for (int r = 0; r < total; ++r) {
    const bool warmup = r < options.warmup;
    for (SideRun& side : sides) {
      if (options.progress) {
        options.progress(ProfileProgress{side.name, node_times, warmup,
                                         warmup ? r : r - options.warmup,
                                         warmup ? options.warmup : options.runs});
      }
      ExecutionStats stats;
      // The last run's outputs go before this run allocates its own, so that each run's
      // outputs can take the place the last one's left (only the last timed run's are kept).
      side.outputs.clear();
      std::vector<NamedTensor> outputs = side.executor->run(inputs, &stats);
      if (warmup) continue;
      if (!node_times) {
        side.timed.push_back(std::move(stats));
        side.outputs = std::move(outputs);
        continue;
      }
      outputs.clear();
      std::vector<double> seconds(stats.node_times.size());
      for (size_t i = 0; i < seconds.size(); ++i) seconds[i] = stats.node_times[i].seconds;
      side.profiled_seconds.push_back(std::move(seconds));
      side.profiled_body_seconds.push_back(
          side.profiled.empty() ? bodySeconds(stats.body_node_times, stats.body_node_times)
                                : bodySeconds(side.profiled.front().body_node_times,
                                              stats.body_node_times));
      if (!side.profiled.empty()) {
        std::vector<NodeTime>().swap(stats.node_times);
        std::vector<BodyNodeTime>().swap(stats.body_node_times);
      }
      side.profiled.push_back(std::move(stats));
    }
    // A side replaying a recorded run against one queued node by node would be credited with
    // the launches the recording saves, not with fusion: both replay, or neither does.
    if (sides.size() == 2 && exec.capture_graph && !node_times &&
        sides[0].executor->hasRecording() != sides[1].executor->hasRecording()) {
      const bool first_has = sides[0].executor->hasRecording();
      SideRun& with = first_has ? sides[0] : sides[1];
      const SideRun& without = first_has ? sides[1] : sides[0];
      with.executor->forgoRecording(std::string("the ") + without.name +
                                    " side has no recording, and the two are timed alike");
    }
  }
}

// The index of the run whose wall time is the median: the lower middle one for an even count,
// so that it is a run that happened.
size_t medianRunIndex(const std::vector<double>& seconds) {
  std::vector<size_t> order(seconds.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return seconds[a] < seconds[b]; });
  return order[(order.size() - 1) / 2];
}

double medianOf(std::vector<double> v) { return SampleSummary::of(std::move(v)).median; }

// Record i's time in each per-node run that has one.
std::vector<double> samplesAt(const std::vector<std::vector<double>>& runs, size_t i) {
  std::vector<double> samples;
  samples.reserve(runs.size());
  for (const std::vector<double>& run : runs) {
    if (i < run.size()) samples.push_back(run[i]);
  }
  return samples;
}

// A node's figures from its record (name, op, dims, bytes) and its time in each per-node run.
void fillNodeProfile(NodeProfile& n, const NodeTime& t, std::vector<double> samples) {
  n.node = t.node;
  n.op_type = t.op_type;
  n.run_seconds = samples;
  n.median_seconds = medianOf(std::move(samples));
  n.input_dims = t.input_dims;
  n.output_dims = t.output_dims;
  n.output_bytes = t.output_bytes;
}

// The `n` slowest of `profiles` by median (ties: earlier first).
template <typename Profile>
std::vector<const Profile*> slowestOf(const std::vector<Profile>& profiles, size_t n) {
  std::vector<const Profile*> all;
  for (const Profile& p : profiles) all.push_back(&p);
  std::stable_sort(all.begin(), all.end(), [](const Profile* a, const Profile* b) {
    return a->median_seconds > b->median_seconds;
  });
  if (all.size() > n) all.resize(n);
  return all;
}

SideProfile summarize(SideRun& run) {
  SideProfile side;
  side.name = run.name;
  side.graph_nodes = run.model->graph->numNodes();
  side.threads = run.threads;
  for (const ExecutionStats& s : run.timed) side.run_seconds.push_back(s.seconds);
  side.latency = SampleSummary::of(side.run_seconds);
  const ExecutionStats& first = run.timed.front();
  side.kernel_invocations = first.nodes_run;
  side.device = deviceName(run.device);
  side.device_launches = first.device_launches;
  side.fallback_nodes = first.fallback_nodes;
  side.copies = first.copies_to_device + first.copies_to_host;
  side.copied_bytes = first.copied_bytes;
  side.activation_bytes_written = first.activation_bytes_written;
  for (const ExecutionStats& s : run.timed) {
    side.peak_activation_bytes = std::max(side.peak_activation_bytes, s.peak_activation_bytes);
    side.graph_replays += s.graph_replayed ? 1 : 0;
  }
  side.device_graph = run.timed.back().device_graph;

  for (const ExecutionStats& s : run.profiled) side.node_run_seconds.push_back(s.seconds);
  side.trace_run = medianRunIndex(side.node_run_seconds);
  // Every run calls the same kernels in the same order on the same dims: the first run's
  // records with the traced run's times. A node's figure is its median.
  std::vector<NodeTime> traced_nodes = std::move(run.profiled.front().node_times);
  const std::vector<double>& traced_seconds = run.profiled_seconds[side.trace_run];
  for (size_t i = 0; i < traced_nodes.size() && i < traced_seconds.size(); ++i)
    traced_nodes[i].seconds = traced_seconds[i];
  const size_t steps = traced_nodes.size();
  double total = 0;
  for (size_t i = 0; i < steps; ++i) {
    NodeProfile n;
    fillNodeProfile(n, traced_nodes[i], samplesAt(run.profiled_seconds, i));
    total += n.median_seconds;
    side.nodes.push_back(std::move(n));
  }
  std::map<std::string, OpTypeProfile> by_op;
  for (NodeProfile& n : side.nodes) {
    n.share = total > 0 ? n.median_seconds / total : 0;
    OpTypeProfile& op = by_op[n.op_type];
    op.op_type = n.op_type;
    op.seconds += n.median_seconds;
    op.calls += 1;
  }
  for (auto& [name, op] : by_op) {
    op.share = total > 0 ? op.seconds / total : 0;
    side.per_op.push_back(op);
  }
  // by_op is sorted by name, so a stable sort by time breaks ties by name.
  std::stable_sort(side.per_op.begin(), side.per_op.end(),
                   [](const OpTypeProfile& a, const OpTypeProfile& b) {
                     return a.seconds > b.seconds;
                   });
  side.trace_run_nodes = std::move(traced_nodes);

  const std::vector<BodyNodeTime>& bodies = run.profiled.front().body_node_times;
  for (size_t i = 0; i < bodies.size(); ++i) {
    BodyNodeProfile p;
    fillNodeProfile(p, bodies[i].time, samplesAt(run.profiled_body_seconds, i));
    p.parent = bodies[i].parent;
    p.calls = bodies[i].calls;
    p.share = total > 0 ? p.median_seconds / total : 0;
    side.body_nodes.push_back(std::move(p));
  }
  side.trace_run_body_nodes = bodies;
  const std::vector<double>& traced_body_seconds = run.profiled_body_seconds[side.trace_run];
  for (size_t i = 0; i < bodies.size() && i < traced_body_seconds.size(); ++i)
    side.trace_run_body_nodes[i].time.seconds = traced_body_seconds[i];
  return side;
}

}  // namespace

std::vector<const NodeProfile*> SideProfile::slowest(size_t n) const {
  return slowestOf(nodes, n);
}

std::vector<const BodyNodeProfile*> SideProfile::slowestInBodies(size_t n) const {
  return slowestOf(body_nodes, n);
}

const NodeProfile* SideProfile::find(const std::string& label) const {
  for (const NodeProfile& p : nodes) {
    if (p.node == label) return &p;
  }
  for (const BodyNodeProfile& p : body_nodes) {
    if (p.node == label) return &p;
  }
  return nullptr;
}

ProfileResult profileModels(const Model* unfused, const Model* fused,
                            const std::vector<NamedTensor>& inputs,
                            const std::vector<FusionSiteInput>& sites,
                            const ProfileOptions& options) {
  if (options.runs < 1) throw Error(ErrorKind::Usage, "profile: runs must be at least 1");
  if (options.warmup < 0) throw Error(ErrorKind::Usage, "profile: warmup must be >= 0");
  const bool run_unfused = options.sides != ProfiledSides::FusedOnly;
  const bool run_fused = options.sides != ProfiledSides::UnfusedOnly;
  if ((run_unfused && !unfused) || (run_fused && !fused)) {
    throw Error(ErrorKind::Internal, "profileModels: a side to run has no model");
  }

  std::vector<SideRun> sides;  // unfused first: A/B order
  if (run_unfused) sides.push_back({"unfused", unfused, nullptr, {}, {}, {}, {}, 1, {}, {}});
  if (run_fused) sides.push_back({"fused", fused, nullptr, {}, {}, {}, {}, 1, {}, {}});
  buildExecutors(sides, options);
  runPass(sides, inputs, false, options);
  runPass(sides, inputs, true, options);
  for (SideRun& side : sides) side.executor.reset();

  ProfileResult result;
  result.warmup = options.warmup;
  result.runs = options.runs;
  for (SideRun& side : sides) {
    (std::string(side.name) == "unfused" ? result.unfused : result.fused) =
        summarize(side);
  }

  if (result.unfused && result.fused) {
    result.speedup =
        estimateSpeedup(result.unfused->run_seconds, result.fused->run_seconds,
                        options.bootstrap_resamples, options.bootstrap_seed, options.confidence);
    // sides[0] is the unfused one, the reference.
    result.agreement = compareRunOutputs(sides[0].outputs, sides[1].outputs, options.tolerance);
    result.fusion_sites =
        timeFusionSites(sites, *result.unfused, *result.fused, options.bootstrap_resamples,
                        options.bootstrap_seed, options.confidence);
  }
  return result;
}

}  // namespace fusectl::kernels
