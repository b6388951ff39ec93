// The optimization report: figures of a graph, and the JSON of docs/schemas/report.schema.json.
#include "fusectl/passes/report.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace fusectl::passes {

std::string_view portabilityName(Portability p) {
  return p == Portability::Standard ? "standard" : p == Portability::Fusectl ? "fusectl" : "ort";
}

GraphFigures GraphFigures::of(const Graph& g) {
  GraphFigures f;
  f.nodes = g.numNodes();
  for (Node* n : g.nodes())
    for (Value* v : n->outputs())
      if (v && !v->isGraphOutput()) ++f.intermediate_tensors;
  for (Value* v : g.initializers()) {
    const Tensor* t = v->initializer();
    if (!t) continue;
    if (t->dtype() == DType::String) {
      for (const std::string& s : t->strings()) f.parameter_bytes += s.size();
    } else {
      f.parameter_bytes += t->byteSize();
    }
    f.parameters += static_cast<uint64_t>(t->numel());
  }
  for (const auto& [key, count] : g.opHistogram()) {
    const auto& [domain, op] = key;
    f.op_histogram.push_back({domain.empty() ? op : domain + "::" + op, count});
  }
  return f;
}

namespace {
std::string rejectionKey(const std::string& pass, const NearMiss& m, const std::string& scope) {
  return fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", pass, m.pattern, m.anchor, m.constraint,
                     m.reason, scope);
}
}  // namespace

void Report::addRejection(NearMiss miss, std::string pass, std::string scope) {
  if (!rejection_keys_.insert(rejectionKey(pass, miss, scope)).second) return;
  rejections.push_back({std::move(pass), std::move(miss), std::move(scope)});
}

void Report::pruneRejectionsFusedLater() {
  if (rejections.empty()) return;  // the common case, and a million fusion sites to index
  std::unordered_set<std::string> fused;  // pass, pattern, replaced node label
  for (const FusionSite& f : fusions)
    for (const std::string& n : f.replaced_nodes)
      fused.insert(fmt::format("{}\x1f{}\x1f{}\x1f{}", f.pass, f.pattern, n, f.scope));
  std::vector<Rejection> kept;
  for (Rejection& r : rejections) {
    if (fused.count(fmt::format("{}\x1f{}\x1f{}\x1f{}", r.pass, r.miss.pattern, r.miss.anchor,
                                r.scope))) {
      continue;
    }
    kept.push_back(std::move(r));
  }
  rejections = std::move(kept);
}

std::map<std::string, size_t> Report::fusionsByScope() const {
  std::map<std::string, size_t> out;
  for (const FusionSite& f : fusions) ++out[f.scope];
  return out;
}

std::map<std::string, size_t> Report::fusionsByPattern() const {
  std::map<std::string, size_t> out;
  for (const FusionSite& f : fusions) ++out[f.pattern];
  return out;
}

size_t Report::countFusions(const std::string& name) const {
  size_t n = 0;
  for (const FusionSite& f : fusions) n += (f.pass == name || f.pattern == name) ? 1 : 0;
  return n;
}

std::vector<const Report::Rejection*> Report::legalityRejections(const std::string& name) const {
  std::vector<const Rejection*> out;
  for (const Rejection& r : rejections)
    if ((r.pass == name || r.miss.pattern == name) && r.miss.constraint != "structure")
      out.push_back(&r);
  return out;
}

uint64_t Report::activationBytesSaved() const {
  uint64_t total = 0;
  for (const FusionSite& f : fusions) total += f.activation_bytes_saved;
  return total;
}

namespace {

using Json = nlohmann::ordered_json;

Json figuresJson(const GraphFigures& f) {
  Json hist = Json::object();
  for (const auto& [op, count] : f.op_histogram) hist[op] = count;
  return Json{{"nodes", f.nodes},
              {"intermediate_tensors", f.intermediate_tensors},
              {"parameter_bytes", f.parameter_bytes},
              {"parameters", f.parameters},
              {"op_histogram", hist}};
}

Json digestJson(const FileDigest& f) {
  return Json{{"file", f.file}, {"sha256", f.sha256}, {"bytes", f.bytes}};
}

Json fileJson(const FileDigest& f, const std::vector<FileDigest>& external_data) {
  Json external = Json::array();
  for (const FileDigest& e : external_data) external.push_back(digestJson(e));
  Json j = digestJson(f);
  j["external_data"] = external;
  return j;
}

// Errors can be infinite (a NaN where the reference has a number); JSON has no infinity.
Json finiteOrNull(double v) { return std::isfinite(v) ? Json(v) : Json(); }

Json verificationJson(const Verification& v) {
  if (!v.ran) return Json();
  Json outs = Json::array();
  for (const VerificationOutput& o : v.outputs) {
    outs.push_back(Json{{"name", o.name},
                        {"max_abs_error", finiteOrNull(o.max_abs_error)},
                        {"max_rel_error", finiteOrNull(o.max_rel_error)},
                        {"cosine", finiteOrNull(o.cosine)},
                        {"mismatches", o.mismatches},
                        {"passed", o.passed},
                        {"detail", o.detail}});
  }
  return Json{{"passed", v.passed}, {"seed", v.seed},     {"runs", v.runs},
              {"atol", v.atol},     {"rtol", v.rtol},     {"rtol_scale", v.rtol_scale},
              {"min_cosine", v.min_cosine}, {"outputs", outs}};
}

Json gateJson(const NumericGate& g) {
  if (!g.ran) return Json();
  Json sites = Json::array();
  for (const GatedSite& s : g.sites) {
    sites.push_back(Json{{"pass", s.pass},
                         {"pattern", s.pattern},
                         {"anchor", s.anchor},
                         {"new_node", s.new_node},
                         {"new_op", s.new_op},
                         {"measured", s.measured},
                         {"cosine", finiteOrNull(s.cosine)},
                         {"max_abs_error", finiteOrNull(s.max_abs_error)},
                         {"max_rel_error", finiteOrNull(s.max_rel_error)},
                         {"p99_abs_error", finiteOrNull(s.p99_abs_error)},
                         {"verdict", s.verdict},
                         {"detail", s.detail},
                         {"round", s.round}});
  }
  return Json{{"min_cosine", g.min_cosine},
              {"max_rel_error", finiteOrNull(g.max_rel_error)},
              {"max_abs_error", finiteOrNull(g.max_abs_error)},
              {"max_p99_abs_error", finiteOrNull(g.max_p99_abs_error)},
              {"seed", g.seed},
              {"rounds", g.rounds},
              {"undone", g.undone()},
              {"sites", sites}};
}

}  // namespace

size_t NumericGate::undone() const {
  size_t n = 0;
  for (const GatedSite& s : sites) n += s.verdict == "undone";
  return n;
}

std::string Report::toJson() const {
  Json j;
  j["schema"] = "fusectl.report/1";
  j["tool"] = Json{{"name", "fusectl"}, {"version", tool_version}};
  j["input"] = fileJson(input, input_external_data);
  j["output"] = fileJson(output, output_external_data);
  j["pipeline"] = pipeline;
  j["summary"] = Json{
      {"nodes_before", before.nodes},
      {"nodes_after", after.nodes},
      {"intermediate_tensors_before", before.intermediate_tensors},
      {"intermediate_tensors_after", after.intermediate_tensors},
      {"parameter_bytes_before", before.parameter_bytes},
      {"parameter_bytes_after", after.parameter_bytes},
      {"fusions", fusions.size()},
      {"rejections", rejections.size()},
      {"activation_bytes_saved", activationBytesSaved()},
  };
  j["before"] = figuresJson(before);
  j["after"] = figuresJson(after);

  Json passes_json = Json::array();
  for (const PassStatistics& s : passes) {
    Json counters = Json::object();
    for (const auto& [k, v] : s.counters) counters[k] = v;
    passes_json.push_back(Json{{"pass", s.pass},
                               {"iteration", s.iteration},
                               {"seconds", s.seconds},
                               {"changed", s.changed},
                               {"nodes_before", s.nodes_before},
                               {"nodes_after", s.nodes_after},
                               {"intermediates_before", s.intermediates_before},
                               {"intermediates_after", s.intermediates_after},
                               {"counters", counters}});
  }
  j["passes"] = passes_json;

  Json fix = Json::array();
  for (const FixpointRun& f : fixpoints) {
    fix.push_back(Json{{"group", f.group}, {"iterations", f.iterations},
                       {"converged", f.converged}});
  }
  j["fixpoints"] = fix;

  Json fus = Json::array();
  for (const FusionSite& f : fusions) {
    fus.push_back(Json{{"pass", f.pass},
                       {"pattern", f.pattern},
                       {"replaced_nodes", f.replaced_nodes},
                       {"new_node", f.new_node},
                       {"new_op", f.new_op},
                       {"portability", std::string(portabilityName(f.portability))},
                       {"activation_bytes_saved", f.activation_bytes_saved},
                       {"scope", f.scope}});
  }
  j["fusions"] = fus;
  Json by_scope = Json::object();
  for (const auto& [scope, count] : fusionsByScope()) by_scope[scope] = count;
  j["fusions_by_scope"] = by_scope;
  Json by = Json::object();
  for (const auto& [pattern, count] : fusionsByPattern()) by[pattern] = count;
  j["fusions_by_pattern"] = by;

  Json rej = Json::array();
  for (const Rejection& r : rejections) {
    rej.push_back(Json{{"pass", r.pass},
                       {"pattern", r.miss.pattern},
                       {"anchor", r.miss.anchor},
                       {"constraint", r.miss.constraint},
                       {"node", r.miss.node},
                       {"reason", r.miss.reason},
                       {"scope", r.scope}});
  }
  j["rejections"] = rej;

  j["verification"] = verificationJson(verification);
  Json checks = Json::array();
  for (const Expectation& e : expectations) {
    checks.push_back(Json{{"kind", e.kind},
                          {"pattern", e.pattern},
                          {"expected", e.expected < 0 ? Json() : Json(e.expected)},
                          {"found", e.found},
                          {"passed", e.passed},
                          {"detail", e.detail}});
  }
  j["expectations"] = checks;
  j["gate"] = gateJson(gate);
  return j.dump(2) + "\n";
}

}  // namespace fusectl::passes
