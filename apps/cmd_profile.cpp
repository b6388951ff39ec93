// `fusectl profile MODEL`: the model as given ("unfused") against the optimizer's output
// ("fused"), run alternately on the same inputs, with per-op, per-node and per-fusion-site
// figures; optionally as JSON (docs/schemas/profile.schema.json), a Chrome trace and an
// annotated model, and gated against a saved report.
//
// The measuring is the library's (kernels::profileModels, fusectl/kernels/profile.h); the
// optimizing is libpasses' optimize(). This file parses flags, feeds one to the other, prints
// and writes. Order of work: every flag and the baseline checked (exit 2 / 3 / 4 before any
// model is read), load the model twice, optimize one copy in memory, make the inputs, profile,
// print, write the files, then the gates (outputs agree, --baseline).
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/npy.h"
#include "fusectl/kernels/profile.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/fusion_stamp.h"
#include "fusectl/passes/optimize.h"

namespace fusectl::cli {
namespace {

using namespace fusectl::kernels;
using Json = nlohmann::ordered_json;

constexpr const char* kSchema = "fusectl.profile/1";

struct ProfileCliOptions {
  std::string model;
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  std::vector<std::string> shapes;
  int level = 3;
  std::string passes;
  std::vector<std::string> disable;
  std::string emit = "fusectl";
  int warmup = 3;
  int runs = 20;
  int threads = 1;
  int top = 10;
  std::string json;
  std::string trace;
  std::string annotate;
  std::string device = "cpu";
  std::string only;
  std::string baseline;
  double max_regression = 5;
  double atol = 1e-5;
  double rtol = 1e-4;
  double min_cosine = 0.9999;
};

[[noreturn]] void usage(const std::string& message) { throw Error(ErrorKind::Usage, message); }

std::string readTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throwIo(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  return ss.str();
}

// The side a gate compares: the fused one, unless only the unfused side runs.
std::string gatedSide(const ProfileCliOptions& opts) {
  return opts.only == "unfused" ? "unfused" : "fused";
}

// The saved report's median for the gated side, in ms; read before any work so that a bad
// baseline fails fast.
double baselineMedianMs(const ProfileCliOptions& opts) {
  const std::string text = readTextFile(opts.baseline);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception&) {
    throwInvalid(fmt::format("{}: --baseline: not JSON (expected a `fusectl profile --json` "
                             "report)",
                             opts.baseline));
  }
  if (!j.is_object() || (j.contains("schema") && j["schema"] != kSchema)) {
    throwInvalid(fmt::format("{}: --baseline: not a `fusectl profile --json` report ({})",
                             opts.baseline, kSchema));
  }
  const std::string side = gatedSide(opts);
  const Json* sides = j.contains("sides") && j["sides"].is_object() ? &j["sides"] : nullptr;
  if (!sides || !sides->contains(side) || !(*sides)[side].is_object() ||
      !(*sides)[side].contains("median_ms") || !(*sides)[side]["median_ms"].is_number() ||
      (*sides)[side]["median_ms"].get<double>() <= 0) {
    throwInvalid(fmt::format("{}: --baseline: no positive sides.{}.median_ms to compare with",
                             opts.baseline, side));
  }
  return (*sides)[side]["median_ms"].get<double>();
}

void checkOutputPath(const std::string& flag, const std::string& path,
                     const ProfileCliOptions& opts) {
  if (path.empty()) return;
  if (isSameFile(path, opts.model)) {
    usage(fmt::format("{}: {} would overwrite the input model", path, flag));
  }
}

// Graph inputs by name from --input (NAME=FILE, or FILE for the next input in order, as
// `fusectl run` binds them), the rest seeded.
std::vector<NamedTensor> profileInputs(const Graph& graph, const ProfileCliOptions& opts,
                                       const std::vector<std::pair<std::string, Shape>>& shapes,
                                       std::vector<std::string>& sources) {
  std::vector<const Value*> positional;
  for (const Value* v : graph.inputs()) {
    if (!v->isInitializer()) positional.push_back(v);
  }
  std::map<std::string, std::pair<HostTensor, std::string>> given;
  size_t next = 0;
  for (const std::string& spec : opts.inputs) {
    std::string name, path = spec;
    const size_t eq = spec.find('=');
    if (eq != std::string::npos && eq > 0) {
      const Value* v = graph.findValue(spec.substr(0, eq));
      if (v && v->isGraphInput()) {
        name = v->name();
        path = spec.substr(eq + 1);
      }
    }
    if (name.empty()) {
      if (next >= positional.size()) {
        usage(fmt::format("--input '{}': no graph input left to bind it to; use NAME=FILE", spec));
      }
      name = positional[next++]->name();
    }
    if (given.count(name)) usage(fmt::format("--input: '{}' given twice", name));
    given[name] = {readTensorFile(path), path};
  }
  std::map<std::string, const Shape*> overrides;
  for (const auto& [name, shape] : shapes) overrides[name] = &shape;
  std::vector<NamedTensor> inputs;
  for (const Value* v : positional) {
    auto it = given.find(v->name());
    if (it != given.end()) {
      inputs.push_back({v->name(), std::move(it->second.first)});
      sources.push_back(it->second.second);
      given.erase(it);
      continue;
    }
    auto ov = overrides.find(v->name());
    inputs.push_back({v->name(), makeRandomInput(*v, opts.seed,
                                                 ov == overrides.end() ? nullptr : ov->second)});
    sources.push_back(fmt::format("random, seed {}", opts.seed));
  }
  for (auto& [name, t] : given) {  // overridden initializers
    inputs.push_back({name, std::move(t.first)});
    sources.push_back(t.second);
  }
  return inputs;
}

// The report's fusion sites as plain data. A site names its fused node by the label it had when
// it was made, and a fused node may take over a replaced node's name afterwards; its fusion
// stamp (fusion_stamp.h) stays on it, so that is how the node is found in the fused model.
std::vector<FusionSiteInput> sitesOf(const passes::Report& report, const Model& fused) {
  std::map<std::string, std::string> label_of_stamp;
  for (const Node* n : fused.graph->nodes()) {
    for (const std::string& line : passes::fusionStampLines(n->doc_string)) {
      label_of_stamp.emplace(line, n->label());
    }
  }
  std::vector<FusionSiteInput> sites;
  for (const passes::FusionSite& f : report.fusions) {
    FusionSiteInput s;
    s.pass = f.pass;
    s.pattern = f.pattern;
    s.fused_node = f.new_node;
    s.fused_op = f.new_op;
    s.replaced_nodes = f.replaced_nodes;
    auto it = label_of_stamp.find(passes::formatFusionStamp(f.pass, f.replaced_nodes));
    if (!f.new_node.empty() && it != label_of_stamp.end() && it->second != f.new_node) {
      s.final_node = it->second;
    }
    sites.push_back(std::move(s));
  }
  return sites;
}

// "\rprofile: fused 7/20" on a terminal, overwritten and cleared at the end. At most ten
// updates a second: a write between two timed runs is a pause the machine did not need.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  ~ProgressLine() { clear(); }
  void show(const ProfileProgress& p) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (width_ > 0 && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    std::string line = fmt::format("profile: {} {}{}{}/{}", p.side,
                                   p.node_times ? "per-node " : "", p.warmup ? "warmup " : "",
                                   p.done + 1, p.total);
    width_ = std::max(width_, line.size());
    std::fprintf(stderr, "\r%-*s", static_cast<int>(width_), line.c_str());
    std::fflush(stderr);
  }
  void clear() {
    if (!enabled_ || width_ == 0) return;
    std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
    std::fflush(stderr);
    width_ = 0;
  }

 private:
  bool enabled_;
  size_t width_ = 0;
  std::chrono::steady_clock::time_point last_;
};

double ms(double seconds) { return seconds * 1e3; }
Json number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

std::string shapesText(const std::vector<std::vector<int64_t>>& dims) {
  std::vector<std::string> parts;
  for (const auto& d : dims) parts.push_back(d.empty() ? "-" : formatDims(d));
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
  j["activation_bytes_written"] = s.activation_bytes_written;
  j["peak_activation_bytes"] = s.peak_activation_bytes;
  Json per_op = Json::array();
  for (const OpTypeProfile& op : s.per_op) {
    per_op.push_back(
        {{"op", op.op_type}, {"ms", ms(op.seconds)}, {"share", op.share}, {"calls", op.calls}});
  }
  j["per_op"] = per_op;
  Json top_nodes = Json::array();
  for (const NodeProfile* n : s.slowest(static_cast<size_t>(top))) top_nodes.push_back(nodeJson(*n));
  j["top_nodes"] = top_nodes;
  return j;
}

Json reportJson(const ProfileCliOptions& opts, const ProfileResult& r, const std::string& pipeline,
                const std::vector<NamedTensor>& inputs, const std::vector<std::string>& sources,
                const Tolerance& tol) {
  Json j;
  j["schema"] = kSchema;
  j["tool_version"] = FUSECTL_VERSION;
  j["model"] = opts.model;
  j["pipeline"] = pipeline;
  j["device"] = opts.device;
  j["threads"] = (r.fused ? *r.fused : *r.unfused).threads;
  j["warmup"] = r.warmup;
  j["runs"] = r.runs;
  j["order"] = "alternating";
  j["only"] = opts.only.empty() ? Json() : Json(opts.only);
  Json ins = Json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back({{"name", inputs[i].name},
                   {"dtype", std::string(dtypeName(inputs[i].tensor.dtype()))},
                   {"shape", inputs[i].tensor.dims()},
                   {"source", sources[i]}});
  }
  j["inputs"] = ins;
  Json sides = Json::object();
  if (r.unfused) sides["unfused"] = sideJson(*r.unfused, opts.top);
  if (r.fused) sides["fused"] = sideJson(*r.fused, opts.top);
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
    j["comparison"] = {
        {"atol", tol.atol}, {"rtol", tol.rtol}, {"min_cosine", tol.min_cosine}, {"outputs", outs}};
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
                     {"missing_nodes", s.missing_nodes},
                     {"superseded_by", s.superseded_by.empty() ? Json() : Json(s.superseded_by)},
                     {"fused_ms", s.fused_found && s.superseded_by.empty()
                                      ? Json(ms(s.fused_seconds))
                                      : Json()},
                     {"replaced_ms", ms(s.replaced_seconds)},
                     {"paid", s.comparable() ? Json(s.status == "paid") : Json()},
                     {"status", s.status}});
  }
  j["fusion_sites"] = sites;
  return j;
}

// ---- Chrome trace-event JSON: each side's median per-node run, one "X" event per kernel ----

Json traceJson(const ProfileResult& r) {
  Json events = Json::array();
  int pid = 1;
  for (const std::optional<SideProfile>* side : {&r.unfused, &r.fused}) {
    if (!*side) continue;
    const SideProfile& s = **side;
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", s.name}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", fmt::format("per-node run {} (the median)", s.trace_run)}}}});
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
                        {"tid", 0},
                        {"args",
                         {{"op", t.op_type},
                          {"input_shapes", t.input_dims},
                          {"output_shapes", t.output_dims},
                          {"output_bytes", t.output_bytes}}}});
      ts += dur;
    }
    ++pid;
  }
  return Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

// ---- Text ----

void printSummary(const ProfileCliOptions& opts, const ProfileResult& r,
                  const std::string& pipeline_name, const std::vector<NamedTensor>& inputs,
                  const std::vector<std::string>& sources, const Tolerance& tol) {
  const SideProfile& any = r.fused ? *r.fused : *r.unfused;
  fmt::print("profile {}: {}, cpu, {} thread{}, {} warmup + {} timed run{} per side{}, then as "
             "many recording per-node times\n",
             opts.model,
             opts.only.empty() ? "unfused vs fused (" + pipeline_name + ")"
                               : opts.only + " only" +
                                     (opts.only == "fused" ? " (" + pipeline_name + ")" : ""),
             any.threads, any.threads == 1 ? "" : "s", r.warmup, r.runs, r.runs == 1 ? "" : "s",
             opts.only.empty() ? ", alternating" : "");
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
  row("activations written",
      [](const SideProfile& s) { return formatBytes(s.activation_bytes_written); });
  row("peak activations", [](const SideProfile& s) { return formatBytes(s.peak_activation_bytes); });
  if (r.speedup) {
    fmt::print("speedup: {:.3f}x (unfused median / fused median; {:.0f}% interval {:.3f}x to "
               "{:.3f}x, bootstrap over {} paired runs)\n",
               r.speedup->median, r.speedup->confidence * 100, r.speedup->ci_low,
               r.speedup->ci_high, r.runs);
  }
  if (r.agreement) {
    double max_abs = 0, min_cos = 1;
    for (const OutputComparison& o : r.agreement->outputs) {
      max_abs = std::max(max_abs, o.max_abs_error);
      min_cos = std::min(min_cos, o.cosine);
    }
    fmt::print("outputs agree: {} (atol {:g}, rtol {:g}, min cosine {:g}; max abs error {:.3g}, "
               "cosine {:.8f})\n",
               r.agreement->passed ? "yes" : "NO", tol.atol, tol.rtol, tol.min_cosine, max_abs,
               min_cos);
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
    const auto slowest = s->slowest(static_cast<size_t>(opts.top));
    if (slowest.empty()) continue;
    fmt::print("\nslowest {} node{}, {} (median)\n", slowest.size(),
               slowest.size() == 1 ? "" : "s", s->name);
    for (const NodeProfile* n : slowest) {
      fmt::print("  {:>10.4f} ms {:>6.1f}%  {} ({}) {} -> {}\n", ms(n->median_seconds),
                 n->share * 100, n->node, n->op_type, shapesText(n->input_dims),
                 shapesText(n->output_dims));
    }
  }

  if (r.unfused && r.fused) {
    size_t counts[4] = {0, 0, 0, 0};  // paid, did not pay, superseded, unmatched
    for (const FusionSiteProfile& s : r.fusion_sites) {
      counts[s.status == "paid" ? 0 : s.status == "did-not-pay" ? 1 : s.status == "superseded" ? 2 : 3]++;
    }
    fmt::print("\nfusion sites: {} in the optimizer's report: {} paid, {} did not pay, {} "
               "superseded by a later fusion, {} unmatched\n",
               r.fusion_sites.size(), counts[0], counts[1], counts[2], counts[3]);
    if (!r.fusion_sites.empty()) {
      fmt::print("  {:<12} {:>10} {:>11}  {}\n", "", "fused ms", "replaced ms",
                 "pass: fused node (op) <- unfused nodes");
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
      if (!s.superseded_by.empty()) tail += fmt::format("; fused again into {}", s.superseded_by);
      if (!s.fused_found) tail += "; the fused node did not run on the fused side";
      if (!s.missing_nodes.empty()) {
        tail += fmt::format("; not in the unfused run: {}", fmt::join(s.missing_nodes, ", "));
      }
      fmt::print("  {:<12} {:>10} {:>11.4f}  {}\n", status, fused_ms, ms(s.replaced_seconds), tail);
    }
  }
}

std::string annotationSummary(const ProfileResult& r, const SideProfile& side,
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

int runProfile(const ProfileCliOptions& opts, bool level_given) {
  if (opts.runs < 1) usage("--runs must be at least 1");
  if (opts.warmup < 0) usage("--warmup must be >= 0");
  if (opts.threads < 0) usage("--threads must be >= 0");
  if (opts.top < 0) usage("--top must be >= 0");
  if (opts.atol < 0 || opts.rtol < 0) usage("tolerances must be >= 0");
  if (opts.max_regression < 0) usage("--max-regression must be >= 0");
  if (opts.device == "cuda") {
    throw Error(ErrorKind::Unsupported,
                "--device cuda: the CUDA backend is not built yet; profile runs on the CPU only "
                "(--device cpu)");
  }
  checkOutputPath("--json", opts.json, opts);
  checkOutputPath("--trace", opts.trace, opts);
  checkOutputPath("--annotate", opts.annotate, opts);
  const auto shapes = parseShapeSpecs(opts.shapes);

  passes::OptimizeRequest request;
  if (level_given || opts.passes.empty()) request.level = opts.level;
  request.passes = opts.passes;
  request.disable = opts.disable;
  request.pass_manager.standard_only = opts.emit == "standard";
  const std::string pipeline = passes::planOptimization(request).pipeline.str();
  const std::string pipeline_name =
      opts.passes.empty() ? fmt::format("-O{}", opts.level) : "--passes " + opts.passes;
  const double baseline_ms = opts.baseline.empty() ? 0 : baselineMedianMs(opts);

  LoadOptions load;
  load.input_shapes = shapes;
  std::unique_ptr<Model> unfused = loadModel(opts.model, load);
  std::unique_ptr<Model> fused;
  std::vector<FusionSiteInput> sites;
  if (opts.only != "unfused") {
    fused = loadModel(opts.model, load);
    const passes::Report report = passes::optimize(*fused, request);
    sites = sitesOf(report, *fused);
  }

  std::vector<std::string> sources;
  const std::vector<NamedTensor> inputs = profileInputs(*unfused->graph, opts, shapes, sources);

  ProfileOptions options;
  options.warmup = opts.warmup;
  options.runs = opts.runs;
  options.sides = opts.only == "fused"     ? ProfiledSides::FusedOnly
                  : opts.only == "unfused" ? ProfiledSides::UnfusedOnly
                                           : ProfiledSides::Both;
  options.execution.num_threads = opts.threads;
  options.tolerance.atol = opts.atol;
  options.tolerance.rtol = opts.rtol;
  options.tolerance.min_cosine = opts.min_cosine;
  ProgressLine progress(isatty(STDERR_FILENO) != 0);
  options.progress = [&progress](const ProfileProgress& p) { progress.show(p); };
  const ProfileResult result =
      profileModels(unfused.get(), fused.get(), inputs, sites, options);
  progress.clear();

  printSummary(opts, result, pipeline_name, inputs, sources, options.tolerance);
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");

  if (!opts.json.empty()) {
    writeFileAtomically(opts.json,
                        reportJson(opts, result, pipeline, inputs, sources, options.tolerance)
                                .dump(2) +
                            "\n");
  }
  if (!opts.trace.empty()) writeFileAtomically(opts.trace, traceJson(result).dump() + "\n");
  if (!opts.annotate.empty()) {
    Model& model = opts.only == "unfused" ? *unfused : *fused;
    const SideProfile& side = opts.only == "unfused" ? *result.unfused : *result.fused;
    annotateModel(model, side, annotationSummary(result, side, pipeline_name));
    saveModel(model, opts.annotate);
  }

  std::vector<std::string> failures;
  if (result.agreement && !result.agreement->passed) {
    for (const OutputComparison& o : result.agreement->outputs) {
      if (o.passed) continue;
      failures.push_back(fmt::format("outputs differ: output '{}': {}", o.name, o.detail));
      break;
    }
  }
  if (!opts.baseline.empty()) {
    const SideProfile& side = opts.only == "unfused" ? *result.unfused : *result.fused;
    const RegressionCheck check =
        checkRegression(ms(side.latency.median), baseline_ms, opts.max_regression);
    fmt::print("baseline: {} median {:.4f} ms now vs {:.4f} ms in {}: {:+.1f}% (limit +{:g}%): "
               "{}\n",
               side.name, check.current, check.baseline, opts.baseline, check.change_percent,
               opts.max_regression, check.regressed ? "REGRESSION" : "ok");
    if (check.regressed) {
      failures.push_back(fmt::format("{} median {:.4f} ms is {:+.1f}% against {:.4f} ms in {} "
                                     "(--max-regression {:g})",
                                     side.name, check.current, check.change_percent,
                                     check.baseline, opts.baseline, opts.max_regression));
    }
  }
  std::cout.flush();
  if (failures.empty()) return 0;
  std::fputs(fmt::format("fusectl: check failed: {}\n", fmt::join(failures, "; ")).c_str(),
             stderr);
  return 1;
}

}  // namespace

Command addProfileCommand(CLI::App& parent) {
  auto opts = std::make_shared<ProfileCliOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "profile", "Time a model as given against its optimized form, run alternately");
  cmd->add_option("MODEL", opts->model, "Model file (.onnx, or .onnxtxt for ONNX text)")
      ->required();
  CLI::Option* level = cmd->add_option("-O", opts->level,
                                       "Optimization level 0-3 of the fused side (default -O3)")
                           ->type_name("LEVEL")
                           ->check(CLI::Range(0, 3));
  cmd->add_option("--passes", opts->passes, "Pipeline text for the fused side instead of -O")
      ->type_name("PIPELINE")
      ->excludes(level);
  cmd->add_option("--disable", opts->disable, "Leave out pass NAME (repeatable)")
      ->type_name("NAME")
      ->allow_extra_args(false);
  cmd->add_option("--emit", opts->emit,
                  "fusectl: fusectl-domain ops allowed; standard: only standard ONNX ops")
      ->check(CLI::IsMember({"fusectl", "standard"}))
      ->capture_default_str();
  cmd->add_option("--input", opts->inputs,
                  "Input data: NAME=FILE or FILE (the next input in order); .npy or TensorProto "
                  ".pb. Inputs not given get seeded random data")
      ->type_name("NAME=FILE")
      ->allow_extra_args(false);
  cmd->add_option("--seed", opts->seed, "Seed for random inputs")->capture_default_str();
  cmd->add_option("--shape", opts->shapes, "Fix an input's dims, e.g. input=1x3x224x224")
      ->type_name("NAME=DIMS")
      ->allow_extra_args(false);
  cmd->add_option("--warmup", opts->warmup, "Untimed runs per side first")->capture_default_str();
  cmd->add_option("--runs", opts->runs, "Timed runs per side")->capture_default_str();
  cmd->add_option("--threads", opts->threads, "Threads per kernel (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--top", opts->top, "Slowest nodes listed per side")->capture_default_str();
  cmd->add_option("--device", opts->device, "cpu (cuda: not built yet)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--only", opts->only, "Profile one side only: fused or unfused")
      ->check(CLI::IsMember({"fused", "unfused"}));
  cmd->add_option("--json", opts->json,
                  "Write the report (docs/schemas/profile.schema.json) to FILE")
      ->type_name("FILE");
  cmd->add_option("--trace", opts->trace,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of each side's median run")
      ->type_name("FILE");
  cmd->add_option("--annotate", opts->annotate,
                  "Write the fused model with each node's median time in its doc_string")
      ->type_name("OUT.onnx");
  cmd->add_option("--baseline", opts->baseline,
                  "A saved --json report: exit 1 when the fused median is slower than its by "
                  "more than --max-regression")
      ->type_name("REPORT.json");
  cmd->add_option("--max-regression", opts->max_regression, "Percent slower --baseline allows")
      ->type_name("PCT")
      ->capture_default_str();
  cmd->add_option("--atol", opts->atol, "Outputs agree: absolute tolerance")->capture_default_str();
  cmd->add_option("--rtol", opts->rtol, "Outputs agree: relative tolerance, times |unfused|")
      ->capture_default_str();
  cmd->add_option("--min-cosine", opts->min_cosine, "Outputs agree: smallest cosine similarity")
      ->capture_default_str();
  cmd->footer(
      "Exit codes: 0 done; 1 the outputs differ or --baseline found a regression (files still "
      "written); 2 usage; 3 invalid model or baseline; 4 I/O error; 5 unsupported (an op "
      "without a kernel, --device cuda). See docs/cli.md.");
  return Command{cmd, [opts, level] { return runProfile(*opts, level->count() > 0); }};
}

}  // namespace fusectl::cli
