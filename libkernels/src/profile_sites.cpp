// timeFusionSites (profile.h): did each fusion pay? The fused node's median on the fused side
// against the summed medians, on the unfused side, of the nodes it stands for; and, where the
// nodes carry their per-run times, the bootstrap interval of that ratio over the paired runs,
// so that a difference within the nodes' run-to-run spread is called level, not a loss (on
// ViT-B/16, 0.3-1.5% differences between a FusedMatMul_Add and its MatMul and Add were flagged
// "did not pay" by their medians alone).
//
// Fusions chain: fold-conv-bn turns Conv(c1)+BN(b1) into a Conv that keeps the label c1, then
// fuse-epilogue turns that Conv and Relu(r1) into a FusedConv labelled c1. Only the last node runs on
// the fused side, and it stands for c1, b1 and r1 of the unfused side; comparing it with c1 and
// r1 alone would forget b1. So a replaced node that an earlier, not yet superseded site
// produced is expanded into what that site compared, and that site is marked superseded.
#include <algorithm>
#include <string_view>

#include "fusectl/kernels/profile.h"

namespace fusectl::kernels {

namespace {

void appendUnique(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

// The name inside a node label "Op(name)", or "" for a label of another form.
std::string_view nameOfLabel(std::string_view label) {
  const size_t open = label.find('(');
  if (open == std::string_view::npos || label.empty() || label.back() != ')') return {};
  return label.substr(open + 1, label.size() - open - 2);
}

// The unfused node a replaced label stands for. canonicalize respells a node in place and keeps
// its name (Div(D) by a power of two becomes Mul(D)), so a label the unfused run lacks is
// looked up by its name too, when exactly one unfused node has that name.
const NodeProfile* findReplaced(const SideProfile& unfused, const std::string& label) {
  if (label.empty()) return nullptr;
  if (const NodeProfile* exact = unfused.find(label)) return exact;
  const std::string_view name = nameOfLabel(label);
  if (name.empty()) return nullptr;
  const NodeProfile* found = nullptr;
  auto consider = [&](const NodeProfile& p) {
    if (nameOfLabel(p.node) != name) return true;
    if (found) return false;
    found = &p;
    return true;
  };
  for (const NodeProfile& p : unfused.nodes)
    if (!consider(p)) return nullptr;
  for (const NodeProfile& p : unfused.body_nodes)
    if (!consider(p)) return nullptr;
  return found;
}

// A site's nodes of one side summed run by run; unusable once a node has no per-run times or
// another count of them than the nodes before it.
struct RunSums {
  std::vector<double> sums;
  bool consistent = true;
  void add(const NodeProfile& n) {
    if (n.run_seconds.empty() || (!sums.empty() && n.run_seconds.size() != sums.size())) {
      consistent = false;
      return;
    }
    if (sums.empty()) sums.assign(n.run_seconds.size(), 0.0);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += n.run_seconds[i];
  }
  bool usable() const { return consistent && !sums.empty(); }
};

// The latest site after `from` in `sites` whose final node is `label`: the one that superseded
// `from` (a site supersedes only sites recorded before it); nullptr when there is none.
FusionSiteProfile* siteOfFinalNode(std::vector<FusionSiteProfile>& sites, const std::string& label,
                                   const FusionSiteProfile* from) {
  FusionSiteProfile* found = nullptr;
  bool after = false;
  for (FusionSiteProfile& q : sites) {
    if (&q == from) {
      after = true;
      continue;
    }
    if (after && !q.site.fused_node.empty() && q.site.finalNode() == label) found = &q;
  }
  return found;
}

}  // namespace

std::vector<FusionSiteProfile> timeFusionSites(const std::vector<FusionSiteInput>& sites,
                                               const SideProfile& unfused,
                                               const SideProfile& fused,
                                               int bootstrap_resamples, uint64_t bootstrap_seed,
                                               double confidence) {
  std::vector<FusionSiteProfile> out;
  out.reserve(sites.size());
  for (const FusionSiteInput& site : sites) {
    FusionSiteProfile p;
    p.site = site;
    for (const std::string& replaced : site.replaced_nodes) {
      // The latest earlier site that produced this label and still stands.
      FusionSiteProfile* producer = nullptr;
      for (auto it = out.rbegin(); it != out.rend(); ++it) {
        if (it->superseded_by.empty() && !it->site.fused_node.empty() &&
            it->site.fused_node == replaced) {
          producer = &*it;
          break;
        }
      }
      // Or every earlier standing site that made it as a shared helper (merged q/k/v): this
      // site stands for all of them, and their own fused nodes (the Slices) run on beside it.
      std::vector<FusionSiteProfile*> sharers;
      bool taken = false;  // a helper of sites this one already took in (the merged bias Add)
      const std::string here = site.fused_node.empty() ? "(removed)" : site.finalNode();
      if (!producer) {
        for (FusionSiteProfile& q : out) {
          const auto& h = q.site.helper_nodes;
          if (std::find(h.begin(), h.end(), replaced) == h.end()) continue;
          // A sharer already superseded by another site (the merged q/k/v's Slices taken into
          // an AttentionPacked before the merged MatMul took its bias) is stood for by that
          // site now, which this one then takes in.
          FusionSiteProfile* stands = &q;
          while (stands && !stands->superseded_by.empty() && stands->superseded_by != here)
            stands = siteOfFinalNode(out, stands->superseded_by, stands);
          if (!stands) continue;
          if (stands->superseded_by == here) taken = true;
          else if (std::find(sharers.begin(), sharers.end(), stands) == sharers.end())
            sharers.push_back(stands);
        }
      }
      if (taken && sharers.empty()) continue;
      if (!producer && sharers.empty()) {
        appendUnique(p.compared_nodes, replaced);
        continue;
      }
      if (producer) sharers = {producer};
      for (FusionSiteProfile* q : sharers) {
        for (const std::string& n : q->compared_nodes) appendUnique(p.compared_nodes, n);
        // A sharer whose node this site's node replaces under the same label (fuse-attention's
        // Attention and its views, met through a view before the Attention itself) is no
        // second node running beside this one.
        if (q != producer && !q->site.fused_node.empty() && q->site.finalNode() != here)
          appendUnique(p.also_fused, q->site.finalNode());
        for (const std::string& n : q->also_fused)
          if (n != here) appendUnique(p.also_fused, n);
        q->superseded_by = here;
        q->status = "superseded";
      }
    }
    out.push_back(std::move(p));
  }

  for (FusionSiteProfile& p : out) {
    p.missing_nodes.clear();
    p.replaced_seconds = 0;
    p.speedup.reset();
    RunSums replaced_runs, fused_runs;
    for (const std::string& n : p.compared_nodes) {
      const NodeProfile* found = findReplaced(unfused, n);
      if (found) {
        p.replaced_seconds += found->median_seconds;
        replaced_runs.add(*found);
      } else {
        p.missing_nodes.push_back(n.empty() ? "(a node without a label)" : n);
      }
    }
    // A fusion that only removed nodes leaves nothing running in their place.
    // A superseded site's label now names the node that superseded it: it has no node.
    const bool superseded = !p.superseded_by.empty();
    const NodeProfile* fused_node = p.site.fused_node.empty() || superseded
                                        ? nullptr
                                        : fused.find(p.site.finalNode());
    p.fused_found = (p.site.fused_node.empty() && !superseded) || fused_node;
    p.fused_seconds = fused_node ? fused_node->median_seconds : 0;
    if (fused_node) fused_runs.add(*fused_node);
    for (const std::string& n : p.also_fused) {
      const NodeProfile* also = superseded ? nullptr : fused.find(n);
      if (also) {
        p.fused_seconds += also->median_seconds;
        fused_runs.add(*also);
      } else if (!superseded) {
        p.fused_found = false;
      }
    }
    p.fused_op_run = fused_node ? fused_node->op_type : "";
    if (superseded) {
      p.status = "superseded";
    } else if (!p.fused_found || !p.missing_nodes.empty()) {
      p.status = "unmatched";
    } else {
      // A fusion that only removed nodes has nothing to pair: it paid what it removed.
      if (fused_node && replaced_runs.usable() && fused_runs.usable() &&
          replaced_runs.sums.size() == fused_runs.sums.size()) {
        p.speedup = estimateSpeedup(replaced_runs.sums, fused_runs.sums, bootstrap_resamples,
                                    bootstrap_seed, confidence);
      }
      if (!p.speedup) {
        p.status = p.fused_seconds <= p.replaced_seconds ? "paid" : "did-not-pay";
      } else if (p.speedup->ci_low > 1) {
        p.status = "paid";
      } else if (p.speedup->ci_high < 1) {
        p.status = "did-not-pay";
      } else {
        p.status = "level";
      }
    }
  }
  return out;
}

}  // namespace fusectl::kernels
