// How `fusectl profile` shows a result: the text on stdout, the JSON report
// (docs/schemas/profile.schema.json), the Chrome trace and the annotated model's summary.
#include "profile_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/passes/fusion_stamp.h"

namespace fusectl::cli {

using namespace fusectl::kernels;

const char* const kProfileSchema = "fusectl.profile/1";

namespace {

using Json = nlohmann::ordered_json;

double ms(double seconds) { return seconds * 1e3; }
Json number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

std::string shapesText(const std::vector<std::vector<int64_t>>& dims) {
  std::vector<std::string> parts;
  for (const auto& d : dims) parts.push_back(formatDims(d));  // [] also for an omitted input
  return fmt::format("{}", fmt::join(parts, ","));
}

// ---- JSON (docs/schemas/profile.schema.json) ----

Json nodeJson(const NodeProfile& n) {
  return Json{{"node", n.node},
              {"op", n.op_type},
              {"ms", ms(n.median_seconds)},
              {"share", n.share},
              {"input_shapes", n.input_dims},
              {"output_shapes", n.output_dims},
              {"output_bytes", n.output_bytes}};
}

// A node's object with where it runs and how often (schema: body_node).
Json bodyNodeJson(const BodyNodeProfile& n) {
  Json j = nodeJson(n);
  j["parent"] = n.parent;
  j["calls"] = n.calls;
  return j;
}

Json sideJson(const SideProfile& s, int top) {
  Json j;
  j["median_ms"] = ms(s.latency.median);
  j["min_ms"] = ms(s.latency.min);
  j["max_ms"] = ms(s.latency.max);
  j["p90_ms"] = ms(s.latency.p90);
  Json runs = Json::array();
  for (double r : s.run_seconds) runs.push_back(ms(r));
  j["runs_ms"] = runs;
  Json node_runs = Json::array();
  for (double r : s.node_run_seconds) node_runs.push_back(ms(r));
  j["node_runs_ms"] = node_runs;
  j["trace_run"] = s.trace_run;
  j["graph_nodes"] = s.graph_nodes;
  j["kernel_invocations"] = s.kernel_invocations;
  if (s.device != "cpu") {
    j["device_launches"] = s.device_launches;
    j["fallback_nodes"] = s.fallback_nodes;
    j["copies"] = s.copies;
    j["copied_bytes"] = s.copied_bytes;
  }
  if (!s.device_graph.empty()) {
    j["cuda_graph"] = {{"replayed_runs", s.graph_replays}, {"status", s.device_graph}};
  }
  j["activation_bytes_written"] = s.activation_bytes_written;
  j["peak_activation_bytes"] = s.peak_activation_bytes;
  Json per_op = Json::array();
  for (const OpTypeProfile& op : s.per_op) {
    per_op.push_back(
        {{"op", op.op_type}, {"ms", ms(op.seconds)}, {"share", op.share}, {"calls", op.calls}});
  }
  j["per_op"] = per_op;
  Json top_nodes = Json::array();
  for (const NodeProfile* n : s.slowest(static_cast<size_t>(top)))
    top_nodes.push_back(nodeJson(*n));
  j["top_nodes"] = top_nodes;
  if (!s.body_nodes.empty()) {
    Json body_nodes = Json::array();
    for (const BodyNodeProfile* n : s.slowestInBodies(static_cast<size_t>(top)))
      body_nodes.push_back(bodyNodeJson(*n));
    j["top_body_nodes"] = body_nodes;
  }
  return j;
}

Json reportJson(const ProfileRequestInfo& info, const ProfileResult& r) {
  const std::vector<NamedTensor>& inputs = *info.inputs;
  const std::vector<std::string>& sources = info.sources;
  const Tolerance& tol = info.tolerance;
  Json j;
  j["schema"] = kProfileSchema;
  j["tool_version"] = FUSECTL_VERSION;
  j["model"] = info.model;
  j["pipeline"] = info.pipeline;
  j["device"] = info.device;
  j["threads"] = (r.fused ? *r.fused : *r.unfused).threads;
  j["warmup"] = r.warmup;
  j["runs"] = r.runs;
  j["order"] = "alternating";
  j["only"] = info.only.empty() ? Json() : Json(info.only);
  Json ins = Json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back({{"name", inputs[i].name},
                   {"dtype", std::string(dtypeName(inputs[i].tensor.dtype()))},
                   {"shape", inputs[i].tensor.dims()},
                   {"source", sources[i]}});
  }
  j["inputs"] = ins;
  Json sides = Json::object();
  if (r.unfused) sides["unfused"] = sideJson(*r.unfused, info.top);
  if (r.fused) sides["fused"] = sideJson(*r.fused, info.top);
  j["sides"] = sides;
  if (r.speedup) {
    j["speedup"] = {{"median", r.speedup->median},
                    {"ci_low", r.speedup->ci_low},
                    {"ci_high", r.speedup->ci_high},
                    {"confidence", r.speedup->confidence},
                    {"method", r.speedup->method},
                    {"resamples", r.speedup->resamples},
                    {"seed", r.speedup->seed}};
  }
  if (r.agreement) {
    j["outputs_agree"] = r.agreement->passed;
    Json outs = Json::array();
    for (const OutputComparison& o : r.agreement->outputs) {
      outs.push_back({{"name", o.name},
                      {"max_abs_error", number(o.max_abs_error)},
                      {"max_rel_error", number(o.max_rel_error)},
                      {"cosine", number(o.cosine)},
                      {"mismatches", o.mismatches},
                      {"passed", o.passed},
                      {"detail", o.detail}});
    }
    j["comparison"] = {{"atol", tol.atol},
                       {"rtol", tol.rtol},
                       {"rtol_scale", kernels::rtolScaleName(tol.rtol_scale)},
                       {"min_cosine", tol.min_cosine},
                       {"outputs", outs}};
  } else {
    j["outputs_agree"] = Json();
    j["comparison"] = Json();
  }
  Json sites = Json::array();
  for (const FusionSiteProfile& s : r.fusion_sites) {
    sites.push_back({{"pass", s.site.pass},
                     {"pattern", s.site.pattern},
                     {"fused_node", s.site.finalNode()},
                     {"report_fused_node", s.site.fused_node},
                     {"fused_op", s.fused_op_run.empty() ? s.site.fused_op : s.fused_op_run},
                     {"replaced_nodes", s.site.replaced_nodes},
                     {"compared_nodes", s.compared_nodes},
                     {"also_fused", s.also_fused},
                     {"missing_nodes", s.missing_nodes},
                     {"superseded_by", s.superseded_by.empty() ? Json() : Json(s.superseded_by)},
                     {"fused_ms", s.fused_found && s.superseded_by.empty()
                                      ? Json(ms(s.fused_seconds))
                                      : Json()},
                     {"replaced_ms", ms(s.replaced_seconds)},
                     {"speedup", s.speedup ? Json{{"median", s.speedup->median},
                                                  {"ci_low", s.speedup->ci_low},
                                                  {"ci_high", s.speedup->ci_high}}
                                           : Json()},
                     {"paid", s.status == "paid" || s.status == "did-not-pay"
                                  ? Json(s.status == "paid")
                                  : Json()},
                     {"status", s.status}});
  }
  j["fusion_sites"] = sites;
  return j;
}

// ---- Text ----

}  // namespace

void printProfile(const ProfileRequestInfo& info, const ProfileResult& r) {
  const std::vector<NamedTensor>& inputs = *info.inputs;
  const std::vector<std::string>& sources = info.sources;
  const Tolerance& tol = info.tolerance;
  const std::string& pipeline_name = info.pipeline_name;
  const SideProfile& any = r.fused ? *r.fused : *r.unfused;
  fmt::print("profile {}: {}, cpu, {} thread{}, {} warmup + {} timed run{} per side{}, then as "
             "many recording per-node times\n",
             info.model,
             info.only.empty() ? "unfused vs fused (" + pipeline_name + ")"
                               : info.only + " only" +
                                     (info.only == "fused" ? " (" + pipeline_name + ")" : ""),
             any.threads, any.threads == 1 ? "" : "s", r.warmup, r.runs, r.runs == 1 ? "" : "s",
             info.only.empty() ? ", alternating" : "");
  for (size_t i = 0; i < inputs.size(); ++i) {
    fmt::print("input {}: {}{} ({})\n", inputs[i].name, dtypeName(inputs[i].tensor.dtype()),
               formatDims(inputs[i].tensor.dims()), sources[i]);
  }
  std::vector<const SideProfile*> sides;
  if (r.unfused) sides.push_back(&*r.unfused);
  if (r.fused) sides.push_back(&*r.fused);
  fmt::print("\n{:<22}", "");
  for (const SideProfile* s : sides) fmt::print("{:>14}", s->name);
  fmt::print("\n");
  auto row = [&](const char* label, auto&& cell) {
    fmt::print("{:<22}", label);
    for (const SideProfile* s : sides) fmt::print("{:>14}", cell(*s));
    fmt::print("\n");
  };
  auto msCell = [](double s) { return fmt::format("{:.3f} ms", ms(s)); };
  row("median", [&](const SideProfile& s) { return msCell(s.latency.median); });
  row("p90", [&](const SideProfile& s) { return msCell(s.latency.p90); });
  row("min", [&](const SideProfile& s) { return msCell(s.latency.min); });
  row("max", [&](const SideProfile& s) { return msCell(s.latency.max); });
  row("kernel invocations",
      [](const SideProfile& s) { return std::to_string(s.kernel_invocations); });
  if (sides.front()->device != "cpu") {
    row("device launches", [](const SideProfile& s) { return std::to_string(s.device_launches); });
    row("nodes on the CPU", [](const SideProfile& s) { return std::to_string(s.fallback_nodes); });
    row("host/device copies", [](const SideProfile& s) {
      return fmt::format("{} ({})", s.copies, formatBytes(s.copied_bytes));
    });
    bool graphs_asked = false;
    for (const SideProfile* s : sides) graphs_asked = graphs_asked || !s->device_graph.empty();
    if (graphs_asked) {
      row("CUDA graph replays", [](const SideProfile& s) {
        return fmt::format("{}/{}", s.graph_replays, s.run_seconds.size());
      });
    }
  }
  row("activations written",
      [](const SideProfile& s) { return formatBytes(s.activation_bytes_written); });
  row("peak activations",
      [](const SideProfile& s) { return formatBytes(s.peak_activation_bytes); });
  for (const SideProfile* s : sides) {
    if (!s->device_graph.empty() && s->graph_replays < s->run_seconds.size()) {
      fmt::print("CUDA graph, {}: {}\n", s->name, s->device_graph);
    }
  }
  if (r.speedup) {
    fmt::print(
        "speedup: {:.3f}x (unfused median / fused median; {:.0f}% interval {:.3f}x to "
        "{:.3f}x, bootstrap over {} paired runs)\n",
        r.speedup->median, r.speedup->confidence * 100, r.speedup->ci_low, r.speedup->ci_high,
        r.runs);
  }
  if (r.agreement) {
    double max_abs = 0, min_cos = 1;
    for (const OutputComparison& o : r.agreement->outputs) {
      max_abs = std::max(max_abs, o.max_abs_error);
      min_cos = std::min(min_cos, o.cosine);
    }
    // A half output is judged at its type's resolution (Tolerance::forDType); say so.
    std::string raised;
    for (const OutputComparison& o : r.agreement->outputs) {
      const Tolerance used = tol.forDType(o.dtype);
      if (raised.empty() && (used.atol != tol.atol || used.rtol != tol.rtol))
        raised = fmt::format(", {} outputs at atol {:g}, rtol {:g}", dtypeName(o.dtype), used.atol,
                             used.rtol);
    }
    fmt::print("outputs agree: {} (atol {:g}, {}, min cosine {:g}{}; max abs error {:.3g}, "
               "cosine {:.8f})\n",
               r.agreement->passed ? "yes" : "NO", tol.atol, rtolText(tol.rtol, tol.rtol_scale),
               tol.min_cosine, raised,
               max_abs, min_cos);
    for (const OutputComparison& o : r.agreement->outputs) {
      if (!o.passed) fmt::print("  output {}: {}\n", o.name, o.detail);
    }
  }

  for (const SideProfile* s : sides) {
    fmt::print("\nper op type, {} (median per node, summed; calls per run)\n", s->name);
    fmt::print("  {:<28} {:>10} {:>7} {:>6}\n", "op", "ms", "share", "calls");
    for (const OpTypeProfile& op : s->per_op) {
      fmt::print("  {:<28} {:>10.4f} {:>6.1f}% {:>6}\n", op.op_type, ms(op.seconds),
                 op.share * 100, op.calls);
    }
  }
  for (const SideProfile* s : sides) {
    const auto slowest = s->slowest(static_cast<size_t>(info.top));
    if (slowest.empty()) continue;
    fmt::print("\nslowest {} node{}, {} (median)\n", slowest.size(),
               slowest.size() == 1 ? "" : "s", s->name);
    for (const NodeProfile* n : slowest) {
      fmt::print("  {:>10.4f} ms {:>6.1f}%  {} ({}) {} -> {}\n", ms(n->median_seconds),
                 n->share * 100, n->node, n->op_type, shapesText(n->input_dims),
                 shapesText(n->output_dims));
    }
    const auto in_bodies = s->slowestInBodies(static_cast<size_t>(info.top));
    if (in_bodies.empty()) continue;
    fmt::print("\nslowest {} node{} inside control flow, {} (median per run, summed over its "
               "calls; part of its parent's time above)\n",
               in_bodies.size(), in_bodies.size() == 1 ? "" : "s", s->name);
    for (const BodyNodeProfile* n : in_bodies) {
      fmt::print("  {:>10.4f} ms {:>6.1f}%  {} ({}) in {}{} {} -> {}\n", ms(n->median_seconds),
                 n->share * 100, n->node, n->op_type, n->parent,
                 n->calls > 1 ? fmt::format(", {} calls", n->calls) : std::string(),
                 shapesText(n->input_dims), shapesText(n->output_dims));
    }
  }

  if (r.unfused && r.fused) {
    size_t counts[5] = {0, 0, 0, 0, 0};  // paid, did not pay, level, superseded, unmatched
    for (const FusionSiteProfile& s : r.fusion_sites) {
      counts[s.status == "paid"          ? 0
             : s.status == "did-not-pay" ? 1
             : s.status == "level"       ? 2
             : s.status == "superseded"  ? 3
                                         : 4]++;
    }
    fmt::print(
        "\nfusion sites: {} in the optimizer's report: {} paid, {} did not pay, {} level "
        "(within the run-to-run spread), {} superseded by a later fusion, {} unmatched\n",
        r.fusion_sites.size(), counts[0], counts[1], counts[2], counts[3], counts[4]);
    if (!r.fusion_sites.empty()) {
      fmt::print("  (speedup: replaced / fused, its {:.0f}% interval over the paired per-node "
                 "runs; a verdict needs the whole interval on one side of 1)\n",
                 r.speedup->confidence * 100);  // both sides ran: the run's interval
      fmt::print("  {:<12} {:>10} {:>11} {:>21}  {}\n", "", "fused ms", "replaced ms",
                 "speedup", "pass: fused node (op) <- unfused nodes");
    }
    for (const FusionSiteProfile& s : r.fusion_sites) {
      const std::string fused_node =
          s.site.fused_node.empty() ? "(nothing)" : s.site.finalNode();
      std::string status = s.status == "did-not-pay" ? "DID NOT PAY" : s.status;
      std::string fused_ms =
          s.comparable() ? fmt::format("{:.4f}", ms(s.fused_seconds)) : std::string("-");
      std::string tail = fmt::format("{}: {} ({}) <- {}", s.site.pass, fused_node,
                                     s.fused_op_run.empty() ? s.site.fused_op : s.fused_op_run,
                                     fmt::join(s.compared_nodes, ", "));
      if (!s.also_fused.empty())
        tail += fmt::format("; timed with {}", fmt::join(s.also_fused, ", "));
      if (!s.superseded_by.empty()) tail += fmt::format("; fused again into {}", s.superseded_by);
      if (!s.fused_found && s.superseded_by.empty())
        tail += "; the fused node did not run on the fused side";
      if (!s.missing_nodes.empty()) {
        tail += fmt::format("; not in the unfused run: {}", fmt::join(s.missing_nodes, ", "));
      }
      const std::string speedup =
          s.speedup ? fmt::format("{:.3f}x ({:.3f}-{:.3f})", s.speedup->median,
                                  s.speedup->ci_low, s.speedup->ci_high)
                    : std::string("-");
      fmt::print("  {:<12} {:>10} {:>11.4f} {:>21}  {}\n", status, fused_ms,
                 ms(s.replaced_seconds), speedup, tail);
    }
  }
}

std::string profileAnnotation(const ProfileResult& r, const SideProfile& side,
                              const std::string& pipeline_name) {
  std::string s = fmt::format("{} median {:.4f} ms over {} runs ({} warmup), {} kernels, {} "
                              "thread{}, pipeline {}",
                              side.name, ms(side.latency.median), r.runs, r.warmup,
                              side.kernel_invocations, side.threads,
                              side.threads == 1 ? "" : "s", pipeline_name);
  if (r.speedup && r.unfused) {
    s += fmt::format("; unfused median {:.4f} ms, speedup {:.3f}x ({:.3f}-{:.3f})",
                     ms(r.unfused->latency.median), r.speedup->median, r.speedup->ci_low,
                     r.speedup->ci_high);
  }
  return s;
}

std::string profileReportJson(const ProfileRequestInfo& info, const ProfileResult& r) {
  return reportJson(info, r).dump(2) + "\n";
}

std::vector<kernels::FusionSiteInput> profileFusionSites(const passes::Report& report,
                                                         const Model& fused) {
  std::map<std::string, std::string> label_of_stamp;
  for (const Node* n : fused.graph->nodes()) {
    for (const std::string& line : passes::fusionStampLines(n->doc_string)) {
      label_of_stamp.emplace(line, n->label());
    }
  }
  std::vector<kernels::FusionSiteInput> sites;
  for (const passes::FusionSite& f : report.fusions) {
    kernels::FusionSiteInput s;
    s.pass = f.pass;
    s.pattern = f.pattern;
    s.fused_node = f.new_node;
    s.fused_op = f.new_op;
    s.replaced_nodes = f.replaced_nodes;
    s.helper_nodes = f.helper_nodes;
    auto it = label_of_stamp.find(passes::formatFusionStamp(f.pass, f.replaced_nodes));
    if (!s.fused_node.empty() && it != label_of_stamp.end() && it->second != s.fused_node) {
      s.final_node = it->second;
    }
    sites.push_back(std::move(s));
  }
  return sites;
}

}  // namespace fusectl::cli
