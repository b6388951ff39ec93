// The optimization report: figures of a graph, and the JSON of docs/schemas/report.schema.json.
#include "fusectl/passes/report.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace fusectl::passes {

std::string_view portabilityName(Portability p) {
  return p == Portability::Standard ? "standard" : "fusectl";
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
std::string rejectionKey(const std::string& pass, const NearMiss& m) {
  return fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}", pass, m.pattern, m.anchor, m.constraint,
                     m.reason);
}
}  // namespace

void Report::addRejection(NearMiss miss, std::string pass) {
  if (!rejection_keys_.insert(rejectionKey(pass, miss)).second) return;
  rejections.push_back({std::move(pass), std::move(miss)});
}

void Report::pruneRejectionsFusedLater() {
  if (rejections.empty()) return;  // the common case, and a million fusion sites to index
  std::unordered_set<std::string> fused;  // pass, pattern, replaced node label
  for (const FusionSite& f : fusions)
    for (const std::string& n : f.replaced_nodes)
      fused.insert(fmt::format("{}\x1f{}\x1f{}", f.pass, f.pattern, n));
  std::vector<Rejection> kept;
  for (Rejection& r : rejections) {
    if (fused.count(fmt::format("{}\x1f{}\x1f{}", r.pass, r.miss.pattern, r.miss.anchor))) {
      continue;
    }
    kept.push_back(std::move(r));
  }
  rejections = std::move(kept);
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

Json fileJson(const std::string& file, const std::string& sha, uint64_t bytes) {
  return Json{{"file", file}, {"sha256", sha}, {"bytes", bytes}};
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
              {"atol", v.atol},     {"rtol", v.rtol},     {"min_cosine", v.min_cosine},
              {"outputs", outs}};
}

}  // namespace

std::string Report::toJson() const {
  Json j;
  j["schema"] = "fusectl.report/1";
  j["tool"] = Json{{"name", "fusectl"}, {"version", tool_version}};
  j["input"] = fileJson(input_file, input_sha256, input_file_bytes);
  j["output"] = fileJson(output_file, output_sha256, output_file_bytes);
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
                       {"activation_bytes_saved", f.activation_bytes_saved}});
  }
  j["fusions"] = fus;
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
                       {"reason", r.miss.reason}});
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
  return j.dump(2) + "\n";
}

// ---------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4), small and dependency-free.

namespace {

constexpr std::array<uint32_t, 64> kSha256K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void sha256Block(std::array<uint32_t, 8>& h, const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) |
           (uint32_t(p[4 * i + 2]) << 8) | uint32_t(p[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                  kSha256K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d;
  h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

}  // namespace

std::string sha256Hex(std::string_view bytes) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t n = bytes.size();
  size_t full = n / 64 * 64;
  for (size_t i = 0; i < full; i += 64) sha256Block(h, data + i);
  uint8_t tail[128] = {};
  size_t rest = n - full;
  if (rest) std::memcpy(tail, data + full, rest);
  tail[rest] = 0x80;
  size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = static_cast<uint64_t>(n) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_len - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  for (size_t i = 0; i < tail_len; i += 64) sha256Block(h, tail + i);
  std::string out;
  for (uint32_t v : h) out += fmt::format("{:08x}", v);
  return out;
}

}  // namespace fusectl::passes
