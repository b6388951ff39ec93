// `fusectl optimize --bisect`: when the optimized model differs from the original beyond a
// tolerance, which rewrite made it so.
//
// Every rewrite asks PassContext::allowRewrite() first, so `--max-rewrites K` stops a pipeline
// after its first K rewrites, deterministically. bisectRewrites runs the pipeline once in full
// to count its rewrites N, then halves [0, N] on K with the caller's check (run the model,
// compare with the original) to find the smallest K whose model fails: rewrite K is the first
// bad one, and the model with K - 1 rewrites is the largest prefix that passes. That needs
// about log2(N) + 2 pipeline runs and checks, each on a fresh copy of the original
// (Model::clone shares the weights; passes copy what they change).
//
// The check is the caller's, so that libpasses needs no executor (libpasses uses libkernels
// only to fold constants): the CLI compares outputs with kernels::compareModels on --input
// files or seeded inputs. A check must be deterministic for the halving to mean anything.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/passes/graph_diff.h"
#include "fusectl/passes/optimize.h"
#include "fusectl/passes/report.h"

namespace fusectl::passes {

struct BisectProbe {
  bool acceptable = true;
  std::string detail;  // for people: "output 'y': max abs error 3.1e-3 > atol 1e-5 + ..."
};

using BisectCheck = std::function<BisectProbe(const Model& optimized)>;

// One pipeline run with --max-rewrites K (K = -1: unlimited) and what the check said.
struct BisectStep {
  int64_t max_rewrites = -1;
  BisectProbe probe;
};

struct BisectResult {
  int64_t total_rewrites = 0;  // what the whole pipeline makes
  // The 1-based number of the first rewrite after which the check fails; 0 when the whole
  // pipeline's result passes; -1 when even the model with no rewrite fails (the check itself,
  // its tolerance or its inputs are the problem, not a rewrite).
  int64_t first_bad = 0;
  std::vector<BisectStep> steps;  // in the order they ran
  // With first_bad > 0, what rewrite first_bad did:
  std::string pass;                // the pass that made it
  std::vector<FusionSite> sites;   // the fusion sites it added (none for a cleanup rewrite)
  GraphDiff diff;                  // the model with first_bad - 1 rewrites against first_bad
  BisectProbe bad_probe;           // the check on the model with first_bad rewrites
  // The model with first_bad - 1 rewrites (the largest prefix that passes; with first_bad 0 the
  // whole pipeline's result, with -1 the model with no rewrite), as optimize() leaves it.
  std::unique_ptr<Model> last_good;
  Report last_good_report;
};

// Runs `request` (its max_rewrites is ignored) on copies of `original`. Throws what optimize()
// throws for a bad request.
BisectResult bisectRewrites(const Model& original, const OptimizeRequest& request,
                            const BisectCheck& check);

}  // namespace fusectl::passes
