// The per-rewrite numeric gate (numeric_gate.h).
#include "fusectl/passes/numeric_gate.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>

#include "fusectl/graph/error.h"
#include "fusectl/passes/fusion_stamp.h"

namespace fusectl::passes {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

double parseNumber(std::string_view item, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v) || v < 0)
    throw Error(ErrorKind::Usage, fmt::format("--gate: '{}' needs a finite number >= 0", item));
  return v;
}

// max |replacement - original| over the largest |original|; 0 for an all-zero original, where
// only the absolute limits apply.
double relativeError(const SiteMeasurement& m) {
  return m.scale > 0 ? m.max_abs_error / m.scale : 0;
}

bool within(const SiteMeasurement& m, const GateThresholds& given) {
  const GateThresholds t = given.forDType(m.dtype);
  return m.cosine >= t.min_cosine && relativeError(m) <= t.max_rel_error &&
         m.max_abs_error <= t.max_abs_error && m.p99_abs_error <= t.max_p99_abs_error;
}

std::string outside(const SiteMeasurement& m, const GateThresholds& given) {
  const GateThresholds t = given.forDType(m.dtype);
  std::vector<std::string> why;
  if (!(m.cosine >= t.min_cosine)) why.push_back(fmt::format("cosine {:.9g} < {:.9g}", m.cosine, t.min_cosine));
  if (!(relativeError(m) <= t.max_rel_error))
    why.push_back(fmt::format("max rel {:.3g} > {:.3g} (max abs {:.3g} of largest |original| {:.3g})",
                              relativeError(m), t.max_rel_error, m.max_abs_error, m.scale));
  if (!(m.max_abs_error <= t.max_abs_error))
    why.push_back(fmt::format("max abs {:.3g} > {:.3g}", m.max_abs_error, t.max_abs_error));
  if (!(m.p99_abs_error <= t.max_p99_abs_error))
    why.push_back(fmt::format("p99 abs {:.3g} > {:.3g}", m.p99_abs_error, t.max_p99_abs_error));
  if (t.max_rel_error != given.max_rel_error)
    why.push_back(fmt::format("limits scaled for {}", dtypeName(m.dtype)));
  return fmt::format("{}", fmt::join(why, ", "));
}

GatedSite gatedSite(const FusionSite& f, int round) {
  GatedSite g;
  g.pass = f.pass;
  g.pattern = f.pattern;
  g.anchor = f.anchor;
  g.new_node = f.new_node;
  g.new_op = f.new_op;
  g.round = round;
  return g;
}

}  // namespace

GateThresholds GateThresholds::forDType(DType t) const {
  // Machine epsilons relative to float32's 2^-23: float16 has 10 fraction bits, bfloat16 7.
  const double scale = t == DType::Float16 ? 8192.0 : t == DType::BFloat16 ? 65536.0 : 1.0;
  GateThresholds out = *this;
  out.max_rel_error *= scale;
  out.max_abs_error *= scale;
  out.max_p99_abs_error *= scale;
  return out;
}

GateThresholds parseGateSpec(std::string_view spec) {
  GateThresholds t;
  spec = trim(spec);
  if (spec.empty() || spec == "default") return t;
  std::set<std::string> seen;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string key(trim(item.substr(0, eq)));
    if (eq == std::string_view::npos || key.empty())
      throw Error(ErrorKind::Usage, fmt::format("--gate: '{}' is not KEY=VALUE (keys: cosine, max-rel, max-abs, p99-abs)", item));
    if (!seen.insert(key).second) throw Error(ErrorKind::Usage, fmt::format("--gate: '{}' given twice", key));
    const double v = parseNumber(item, trim(item.substr(eq + 1)));
    if (key == "cosine") {
      if (v > 1) throw Error(ErrorKind::Usage, fmt::format("--gate: '{}': a cosine is at most 1", item));
      t.min_cosine = v;
    } else if (key == "max-rel") {
      t.max_rel_error = v;
    } else if (key == "max-abs") {
      t.max_abs_error = v;
    } else if (key == "p99-abs") {
      t.max_p99_abs_error = v;
    } else {
      throw Error(ErrorKind::Usage, fmt::format("--gate: unknown key '{}' (keys: cosine, max-rel, max-abs, p99-abs)", key));
    }
  }
  return t;
}

GatedOptimization optimizeWithGate(const Model& original, const OptimizeRequest& request,
                                   const GateThresholds& thresholds, const SiteMeasure& measure,
                                   int max_runs) {
  OptimizeRequest req = request;
  std::vector<GatedSite> undone;  // from earlier rounds, in the order they were found
  GatedOptimization out;
  for (int round = 1;; ++round) {
    out.model = original.clone();
    out.report = optimize(*out.model, req);
    std::map<std::string, const Node*> by_label;
    // A fused node whose label changed after its rewrite (an unnamed node is labelled by its op,
    // and export respells FusedConv -> FusedConv_Relu, Elementwise -> Elementwise_<hash>) is
    // found by its last fusion stamp: the one this site wrote, if no later rewrite replaced it.
    std::map<std::string, const Node*> by_last_stamp;
    for (const Node* n : out.model->graph->nodes()) {
      by_label.emplace(n->label(), n);
      const std::vector<std::string> stamps = fusionStampLines(n->doc_string);
      if (!stamps.empty()) by_last_stamp.emplace(stamps.back(), n);
    }
    std::set<std::string> redefined;
    for (const auto& [value, pass] : out.report.redefined_values) redefined.insert(value);

    std::vector<const FusionSite*> measured_sites;
    std::vector<std::string> new_nodes;
    std::vector<GatedSite> sites;
    for (const FusionSite& f : out.report.fusions) {
      if (!f.scope.empty()) continue;  // bodies: the executor cannot run one node of a body
      GatedSite g = gatedSite(f, round);
      const Node* fused = nullptr;
      if (!f.new_node.empty()) {
        auto by_name = by_label.find(f.new_node);
        auto by_stamp = by_last_stamp.find(formatFusionStamp(f.pass, f.replaced_nodes));
        if (by_name != by_label.end()) fused = by_name->second;
        else if (by_stamp != by_last_stamp.end()) fused = by_stamp->second;
      }
      if (!fused) {
        g.verdict = "superseded";
        g.detail = "a later rewrite replaced this node; its own site is measured";
        sites.push_back(std::move(g));
        continue;
      }
      const Value* y = fused->output(0);
      auto redef = y ? out.report.redefined_values.find(y->name())
                     : out.report.redefined_values.end();
      if (redef != out.report.redefined_values.end()) {
        g.verdict = "superseded";
        g.detail = fmt::format("{} redefined its output '{}' (its readers now carry what the "
                               "original computes there); not compared with the original",
                               redef->second, y->name());
        sites.push_back(std::move(g));
        continue;
      }
      measured_sites.push_back(&f);
      new_nodes.push_back(fused->label());
      sites.push_back(std::move(g));
    }
    const std::vector<SiteMeasurement> numbers = measure(*out.model, new_nodes, redefined);
    std::vector<std::pair<std::string, std::string>> refuse;
    size_t k = 0;
    for (GatedSite& g : sites) {
      if (!g.verdict.empty()) continue;
      const SiteMeasurement& m = numbers.at(k++);
      g.measured = m.measured;
      g.cosine = m.cosine;
      g.max_abs_error = m.max_abs_error;
      g.p99_abs_error = m.p99_abs_error;
      g.max_rel_error = relativeError(m);
      if (!m.measured) {
        g.verdict = "unmeasured";
        g.detail = m.detail;
      } else if (within(m, thresholds)) {
        g.verdict = "kept";
      } else {
        g.detail = outside(m, thresholds);
        const std::pair<std::string, std::string> key{g.pass, g.anchor};
        const bool can_refuse = !g.anchor.empty() && !req.pass_manager.refused_rewrites.count(key);
        if (can_refuse && round < max_runs) {
          g.verdict = "undone";
          refuse.push_back(key);
        } else {
          g.verdict = "failed";
          g.detail += can_refuse ? fmt::format("; not undone: {} optimization runs are the limit",
                                               max_runs)
                                 : "; not undone: refusing the rewrite at its anchor did not "
                                   "keep it out";
        }
      }
    }
    if (refuse.empty()) {
      out.report.gate.ran = true;
      out.report.gate.min_cosine = thresholds.min_cosine;
      out.report.gate.max_rel_error = thresholds.max_rel_error;
      out.report.gate.max_abs_error = thresholds.max_abs_error;
      out.report.gate.max_p99_abs_error = thresholds.max_p99_abs_error;
      out.report.gate.rounds = round;
      out.report.gate.sites = std::move(undone);
      for (GatedSite& g : sites) out.report.gate.sites.push_back(std::move(g));
      return out;
    }
    for (GatedSite& g : sites)
      if (g.verdict == "undone") undone.push_back(std::move(g));
    for (auto& key : refuse) req.pass_manager.refused_rewrites.insert(std::move(key));
  }
}

bool numericGatePassed(const Report& report) {
  if (!report.gate.ran) return true;
  for (const GatedSite& s : report.gate.sites)
    if (s.verdict == "failed") return false;
  return true;
}

}  // namespace fusectl::passes
