// profileTraceJson (profile.h): a ProfileResult as Chrome trace events.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <string>

#include "fusectl/kernels/profile.h"

namespace fusectl::kernels {

namespace {

using Json = nlohmann::ordered_json;

Json threadName(int pid, int tid, const std::string& name) {
  return {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
          {"args", {{"name", name}}}};
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
    for (const NodeTime& t : s.trace_run_nodes) {
      const double dur = t.seconds * 1e6;
      events.push_back({{"name", t.node},
                        {"cat", t.op_type},
                        {"ph", "X"},
                        {"ts", ts},
                        {"dur", dur},
                        {"pid", pid},
                        {"tid", t.device == Device::Cpu ? 0 : 1},
                        {"args",
                         {{"op", t.op_type},
                          {"device", deviceName(t.device)},
                          {"input_shapes", t.input_dims},
                          {"output_shapes", t.output_dims},
                          {"output_bytes", t.output_bytes}}}});
      ts += dur;
    }
    ++pid;
  }
  return Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace fusectl::kernels
