// profileTraceJson (profile.h): a ProfileResult as Chrome trace events.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "fusectl/kernels/profile.h"

namespace fusectl::kernels {

namespace {

using Json = nlohmann::ordered_json;

Json threadName(int pid, int tid, const std::string& name) {
  return {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
          {"args", {{"name", name}}}};
}

Json kernelArgs(const NodeTime& t) {
  return {{"op", t.op_type},
          {"device", deviceName(t.device)},
          {"input_shapes", t.input_dims},
          {"output_shapes", t.output_dims},
          {"output_bytes", t.output_bytes}};
}

// One complete ("X") event for node `t`, `ts` and `dur` in microseconds.
Json kernelEvent(const NodeTime& t, double ts, double dur, int pid, int tid, Json args) {
  return {{"name", t.node}, {"cat", t.op_type}, {"ph", "X"},  {"ts", ts},
          {"dur", dur},     {"pid", pid},       {"tid", tid}, {"args", std::move(args)}};
}

// Where the events of a control-flow node's subgraphs go: inside its own event, one after
// another from its start.
struct Span {
  double next = 0;   // where the next node of its subgraphs starts
  double end = 0;
  double scale = 1;  // <= 1: its subgraphs' summed times squeezed to fit its own
  int tid = 0;
};

// "If_1" of "Loop_3/body > If_1/else_branch": a parent's last control-flow node as a path of
// its own ("Loop_3/body > If_1"), which is how its span is found. The attribute follows a
// label's last '/'.
std::string ownerPath(const std::string& parent) {
  const size_t slash = parent.rfind('/');
  return slash == std::string::npos ? parent : parent.substr(0, slash);
}

size_t depthOf(const std::string& parent) {
  size_t depth = 1;
  for (size_t at = parent.find(" > "); at != std::string::npos; at = parent.find(" > ", at + 3))
    ++depth;
  return depth;
}

// The nodes inside If, Loop and Scan bodies, each one event inside its control-flow node's
// event. They carry their time summed over all their calls in the run (a Loop body's node runs
// once per iteration), not one event per call, which the executor does not record; those
// that together outlast their parent's own time (timer noise) are scaled down to fit and keep
// their measured time in args.
void addBodyEvents(const std::vector<BodyNodeTime>& bodies, std::map<std::string, Span>& spans,
                   int pid, Json& events) {
  std::vector<size_t> order(bodies.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // A node's span must exist before the nodes inside it are placed: outer bodies first.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return depthOf(bodies[a].parent) < depthOf(bodies[b].parent);
  });
  std::map<std::string, double> summed;  // per owner: its body nodes' microseconds
  for (const BodyNodeTime& b : bodies) summed[ownerPath(b.parent)] += b.time.seconds * 1e6;
  const auto spanOf = [&](const std::string& path, double start, double dur, int tid) {
    const auto total = summed.find(path);
    const double scale =
        total != summed.end() && total->second > dur ? dur / total->second : 1.0;
    return Span{start, start + dur, scale, tid};
  };
  for (auto& [path, span] : spans) span = spanOf(path, span.next, span.end - span.next, span.tid);
  for (size_t i : order) {
    const BodyNodeTime& b = bodies[i];
    auto owner = spans.find(ownerPath(b.parent));
    if (owner == spans.end()) continue;  // its control-flow node is not in the traced run
    Span& span = owner->second;
    const double dur = b.time.seconds * 1e6 * span.scale;
    Json args = kernelArgs(b.time);
    args["parent"] = b.parent;
    args["calls"] = b.calls;
    args["summed_seconds"] = b.time.seconds;
    events.push_back(kernelEvent(b.time, span.next, dur, pid, span.tid, std::move(args)));
    const std::string path = b.parent + " > " + b.time.node;
    spans.emplace(path, spanOf(path, span.next, dur, span.tid));
    span.next += dur;
  }
}

}  // namespace

std::string profileTraceJson(const ProfileResult& r) {
  Json events = Json::array();
  int pid = 1;
  for (const std::optional<SideProfile>* side : {&r.unfused, &r.fused}) {
    if (!*side) continue;
    const SideProfile& s = **side;
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", s.name}}}});
    // Device kernels get a track of their own (tid 1), so that what a fusion saved on the GPU
    // and what still runs on the CPU with copies read apart at a glance.
    bool any_device = false;
    for (const NodeTime& t : s.trace_run_nodes) any_device = any_device || t.device != Device::Cpu;
    const std::string run = fmt::format("per-node run {} (the median)", s.trace_run);
    events.push_back(threadName(pid, 0, any_device ? "cpu: " + run : run));
    if (any_device) {
      Device device = Device::Cpu;
      for (const NodeTime& t : s.trace_run_nodes)
        if (t.device != Device::Cpu) device = t.device;
      events.push_back(threadName(pid, 1, deviceName(device) + " kernels: " + run));
    }
    // Kernels back to back: node_times hold durations only, so the executor's time between
    // kernels is left out and each event starts where the one before ended.
    double ts = 0;
    std::map<std::string, Span> spans;  // by node path: "If_0", "Loop_3/body > If_1"
    for (const NodeTime& t : s.trace_run_nodes) {
      const double dur = t.seconds * 1e6;
      const int tid = t.device == Device::Cpu ? 0 : 1;
      events.push_back(kernelEvent(t, ts, dur, pid, tid, kernelArgs(t)));
      spans.emplace(t.node, Span{ts, ts + dur, 1, tid});
      ts += dur;
    }
    addBodyEvents(s.trace_run_body_nodes, spans, pid, events);
    ++pid;
  }
  return Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace fusectl::kernels
