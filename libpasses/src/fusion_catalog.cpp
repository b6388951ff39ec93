// The fusion catalog (fusion_catalog.h): active rules read from the registered passes, and the
// table of rules that are not applied by default, with the evidence that decided each.
//
// A rule enters the table below only with evidence written down somewhere in this repository:
// `figures` is quoted verbatim from `source` (tests/test_fusion_catalog.cpp checks that it is
// still there), never paraphrased or invented. A rejected rule's pattern and constraints say
// exactly when it would have applied, so that it matches where its pass declines for the
// rule's reason and nowhere else; the tests check that on an example of each.
#include "fusectl/passes/fusion_catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "constant_math.h"
#include "fusectl/graph/fused_ops.h"
#include "expand_depthwise_legality.h"
#include "fusectl/passes/registry.h"

namespace fusectl::passes {

namespace {

void appendOnce(std::vector<std::string>& out, const std::string& s) {
  if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
}

// ---- merge-narrow-projections (merge-parallel-matmuls' condition 3) ----

// What merge-parallel-matmuls takes as a member (its condition 1): a MatMul reading `x` as A
// with a constant 2-D weight of x's dtype.
bool isProjectionOf(const Node& n, const Value* x) {
  if (!n.is("MatMul") || n.numInputs() < 2 || n.input(0) != x || n.input(1) == x) return false;
  const Value* w = n.input(1);
  return w && w->isConstant() && w->dtype() == x->dtype() &&
         w->initializer()->dims().size() == 2;
}

std::vector<Node*> projectionsOf(const Value* x) {
  std::vector<Node*> out;
  for (Node* c : x->consumers())
    if (isProjectionOf(*c, x) && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

int64_t widthOf(const Node& mm) { return mm.input(1)->initializer()->dims()[1]; }

// The pass merges a group as a whole and reports it at its first member, so the rule matches
// there only: one match per group, as one rejection per group.
Constraint firstOfParallelProjections() {
  return {"parallel-projections:mm", [](const Match& m, Why& why) {
            Node* mm = m.get("mm");
            const Value* x = mm->input(0);
            const std::vector<Node*> group = projectionsOf(x);
            if (group.size() < 2 || group[0] != mm) {
              return why.fail(*mm, [&] {
                if (group.size() < 2) {
                  return fmt::format("{} is the only MatMul of '{}' by a constant 2-D weight of its type",
                                     mm->label(), x->name());
                }
                return fmt::format("{} is not the first projection of '{}' ({} is)", mm->label(),
                                   x->name(), group[0]->label());
              });
            }
            if (!constraints::isFusibleFloat(x->dtype()) || !x->shape().hasRank() || x->shape().rank() < 2) {
              return why.fail(*mm, [&] {
                return fmt::format("'{}' is {} with shape {}: the pass merges float32, float16 or "
                                   "bfloat16 of rank >= 2 only",
                                   x->name(), dtypeName(x->dtype()), x->shape().str());
              });
            }
            return true;
          }};
}

Constraint narrowestUnderHalfWidest() {
  return {"narrow-member:mm", [](const Match& m, Why& why) {
            Node* mm = m.get("mm");
            const std::vector<Node*> group = projectionsOf(mm->input(0));
            int64_t widest = 0, narrowest = widthOf(*group[0]);
            for (const Node* n : group) {
              widest = std::max(widest, widthOf(*n));
              narrowest = std::min(narrowest, widthOf(*n));
            }
            if (2 * narrowest < widest) return true;
            return why.fail(*mm, [&] {
              return fmt::format("the {} projections of '{}' are {} to {} wide: at least half the "
                                 "widest, which merge-parallel-matmuls merges",
                                 group.size(), mm->input(0)->name(), narrowest, widest);
            });
          }};
}

Pattern mergeNarrowProjections() {
  Pattern p = Pattern::parse("mm:MatMul[dtype=float|float16|bfloat16]($x, $w:const)", "merge-narrow-projections");
  p.require(firstOfParallelProjections()).require(narrowestUnderHalfWidest());
  return p.producing({"MatMul", "Slice"});
}

// ---- div-by-inexact-constant, div-by-sqrt-to-reciprocal (canonicalize) ----


// A constant x is fold-constants' business, as canonicalize says.
Constraint computedDividend() {
  return {"computed:d", [](const Match& m, Why& why) {
            Node* d = m.get("d");
            if (!d->input(0)->isConstant()) return true;
            return why.fail(*d, [&] {
              return fmt::format("{}: '{}' is a constant too (fold-constants evaluates it)",
                                 d->label(), d->input(0)->name());
            });
          }};
}

Constraint inexactReciprocal() {
  return {"inexact-reciprocal:d", [](const Match& m, Why& why) {
            Node* d = m.get("d");
            const Value* c = d->input(1);
            if (!c->initializer()) {
              return why.fail(*d, [&] {
                return fmt::format("{} divides by '{}', a Constant node's output: canonicalize "
                                   "reads initializers",
                                   d->label(), c->name());
              });
            }
            for (double v : constantAsDoubles(*c->initializer()))
              if (!exactReciprocal(v, c->dtype())) return true;
            return why.fail(*d, [&] {
              return fmt::format("{} divides by '{}', every element a power of two: canonicalize "
                                 "rewrites that exactly",
                                 d->label(), c->name());
            });
          }};
}

Pattern divByInexactConstant() {
  Pattern p = Pattern::parse("d:Div[dtype=float|double|float16|bfloat16]($x, $c:const)", "div-by-inexact-constant");
  p.require(computedDividend()).require(inexactReciprocal());
  return p.producing({"Mul"});
}

Pattern divBySqrtToReciprocal() {
  Pattern p = Pattern::parse("d:Div[dtype=float|double]($x, s:Sqrt($v))", "div-by-sqrt-to-reciprocal");
  return p.producing({"Mul", "Reciprocal"});
}

// ---- expand-depthwise-within-l2 (fuse-expand-depthwise's condition 6, by size) ----

// Every condition of the pass holds but the expanded tensor is under its threshold (one L2).
Pattern expandDepthwiseWithinL2() {
  Pattern p = Pattern::parse("e:fusectl::FusedConv -> 0:^d:fusectl::FusedConv",
                             "expand-depthwise-within-l2");
  p.require(expandDepthwisePair(0, defaultMinExpandedBytes()));
  return p.producing({"ExpandDepthwiseConv"});
}

// The rules no -O level applies. Add one only with evidence written down in the repository.
struct HeldBackRule {
  const char* name;
  const char* pass;
  RuleStatus status;
  const char* summary;
  Pattern (*pattern)();
  RuleEvidence evidence;
};

const std::vector<HeldBackRule>& heldBackRules() {
  static const std::vector<HeldBackRule> rules = {
      {"merge-narrow-projections", "merge-parallel-matmuls", RuleStatus::OptIn,
       "Merge MatMuls of one input whose narrowest width is under half the widest (grouped-query "
       "Q with its K/V) into one MatMul + Slices; asked for with `--pass-option "
       "'merge-parallel-matmuls{narrow=true}'` (or that element in a --passes pipeline)",
       mergeNarrowProjections,
       {"on this CPU: the grouped-query Q+KV merge alone level or faster (bench_merge_matmuls), "
        "and a LLaMA-3-style 8-layer decoder (16 q heads, 4 k/v heads of 128) level to 1.019x "
        "faster end to end with it, as its attention then reads the merged projection packed "
        "(AttentionPackedRotary: kernels 160 -> 64 a run), outputs bit-identical. Not the "
        "default: the FlashRT notes observed the Q+KV merge slower on a GPU, and fusectl's CUDA "
        "backend has not been measured on it",
        "bench/bench_merge_matmuls --threads 1 --repeat 15 --clock cpu; fusectl profile "
        "llama_gqa_8l's -O3 model --passes <the -O3 pipeline with "
        "merge-parallel-matmuls{narrow=true}> (bench/README.md, sixth session)",
        "ratio merged/separate: GQA q + k/v (2048 + 2x512) 0.98-0.99 (seq 32) / 0.94-0.96 (seq "
        "128); BERT-base q/k/v 0.96-1.00 / 0.93-0.98; gate/up 2x5632 0.98-1.06 / 0.99-1.03. "
        "llama_gqa_8l (hidden 2048, seq 128, 1 thread): 525.2 -> 515.7 ms (1.019x, 95% interval "
        "1.005-1.030), 510.6 -> 505.8 ms (1.010x, 0.994-1.027) and 506.6 -> 505.3 ms (1.003x, "
        "0.983-1.038) in three alternating profiles; the attention block's nodes 10.1 -> 8.7 ms "
        "a run.",
        "bench/README.md"}},
      {"expand-depthwise-within-l2", "fuse-expand-depthwise", RuleStatus::Rejected,
       "Fuse a 1x1 expansion into the depthwise 3x3 convolution reading it (ExpandDepthwiseConv) "
       "where one image's expanded tensor is under min-expanded-bytes (2 MiB, one core's L2): "
       "MobileNetV2's and EfficientNet-B0's blocks at 56x56 and below (bench_expand_depthwise "
       "found the 28x28 ones slower banded too)",
       expandDepthwiseWithinL2,
       {"per node in MobileNetV2, the two FusedConvs against the fused node with every 3x3 pair "
        "over 1 MiB fused: the 112x112 block (4.6 MiB expanded) faster both ways, the 56x56 "
        "blocks (1.7 MiB, which L2 keeps between the two nodes) slower warm and level to slower "
        "alternated with the unfused model",
        "/usr/bin/python3 bench/ab_node_times.py mobilenet_v2.onnx --a build/apps/fusectl "
        "--args-a \"--disable fuse-expand-depthwise\" --args-b \"--pass-option "
        "fuse-expand-depthwise{min-expanded-bytes=1000000}\" [--alternated] --rounds 3 --runs "
        "100 (bench/README.md, fourteenth session)",
        "In words: the 24 -> 144 blocks at 56x56 took 0.401 -> 0.448 ms (stride 1) and 0.269 -> "
        "0.305 ms (stride 2) fused when warm, 0.504 -> 0.521 and 0.279 -> 0.378 ms alternated.",
        "bench/README.md"}},
      {"div-by-inexact-constant", "canonicalize", RuleStatus::Rejected,
       "Rewrite Div(x, c) as Mul(x, 1/c) when 1/c is not exact (c not a power of two)",
       divByInexactConstant,
       {"not timed: a rounding argument. x * fl(1/c) can differ from x / c by one ulp when 1/c "
        "rounds, and the fusions accept a Div by a constant scale, so the rewrite would change "
        "results and gain nothing; kept as a golden negative case",
        "FUSECTL_GOLDEN=div_by_constant.onnxtxt:no_rewrite_when_the_reciprocal_is_not_exact "
        "build/tests/fusectl_tests '[golden]'",
        "sqrt(2), as the Erf-spelled Gelu divides by it: 1/sqrt(2) rounds, and x * 0.70710677 "
        "can be one ulp away from x / 1.4142135.",
        "testdata/passes/canonicalize/div_by_constant.onnxtxt"}},
      {"div-by-sqrt-to-reciprocal", "canonicalize", RuleStatus::Rejected,
       "Rewrite Div(x, Sqrt(v)) (the LayerNorm spelling) as Mul(x, Reciprocal(Sqrt(v))), the "
       "canonical reciprocal square root",
       divBySqrtToReciprocal,
       {"not timed: a rounding argument. Div(x, Sqrt(v)) rounds once where Mul(x, "
        "Reciprocal(Sqrt(v))) rounds twice, so the rewrite could change results; kept as a "
        "golden negative case",
        "FUSECTL_GOLDEN=div_by_constant.onnxtxt:no_rewrite_of_a_division_by_a_computed_value "
        "build/tests/fusectl_tests '[golden]'",
        "LayerNorm's Div(x - mean, Sqrt(var + eps)) stays: Mul(x, Reciprocal(Sqrt(.))) rounds "
        "twice.",
        "testdata/passes/canonicalize/div_by_constant.onnxtxt"}},
  };
  return rules;
}

std::string code(std::string_view s) { return fmt::format("`{}`", s); }

// In a table cell a '|' ends the cell, even inside backticks, unless escaped.
std::string cellCode(std::string_view s) {
  std::string out = "`";
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out + "`";
}

std::string codeList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& s : items) out.push_back(cellCode(s));
  return fmt::format("{}", fmt::join(out, ", "));
}

std::vector<std::string> constraintNames(const Pattern& p) {
  std::vector<std::string> out;
  for (const Constraint& c : p.constraints) out.push_back(c.name);
  return out;
}

}  // namespace

std::string_view ruleStatusName(RuleStatus s) {
  switch (s) {
    case RuleStatus::Active: return "active";
    case RuleStatus::OptIn: return "opt-in";
    case RuleStatus::Rejected: return "rejected";
  }
  return "?";
}

std::vector<std::string> FusionRule::constraints() const {
  std::vector<std::string> out;
  for (const Pattern& p : variants)
    for (const Constraint& c : p.constraints) appendOnce(out, c.name);
  return out;
}

std::vector<std::string> FusionRule::produces() const {
  std::vector<std::string> out;
  for (const Pattern& p : variants)
    for (const std::string& op : p.produces) appendOnce(out, op);
  return out;
}

std::vector<FusionRule> fusionCatalog() {
  std::vector<FusionRule> out;
  for (const PassInfo& info : allPasses()) {
    FusionRule r;
    r.name = std::string(info.name);
    r.pass = r.name;
    r.summary = std::string(info.description);
    r.variants = createPass(info.name)->patterns();
    out.push_back(std::move(r));
  }
  for (const HeldBackRule& h : heldBackRules()) {
    FusionRule r;
    r.name = h.name;
    r.pass = h.pass;
    r.status = h.status;
    r.summary = h.summary;
    r.variants.push_back(h.pattern());
    r.evidence = h.evidence;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<FusionRule> fusionRules(RuleStatus status) {
  std::vector<FusionRule> out;
  for (FusionRule& r : fusionCatalog())
    if (r.status == status) out.push_back(std::move(r));
  return out;
}

std::string fusionCatalogMarkdown() {
  const std::vector<FusionRule> rules = fusionCatalog();
  std::string active =
      "## Active rules\n\n"
      "One rule per pass, one row per variant (the pass's patterns, `fusectl match --catalog "
      "PASS`).\n\n"
      "| rule | level | variant | pattern | constraints | produces |\n"
      "|---|---|---|---|---|---|\n";
  std::string held = "## Rejected and opt-in rules\n";
  size_t held_count = 0;
  for (const FusionRule& r : rules) {
    if (r.status == RuleStatus::Active) {
      if (!isBuiltinPass(r.pass)) continue;
      const PassInfo* info = findPass(r.pass);
      const std::string level = info ? fmt::format("-O{}", info->level) : "";
      if (r.variants.empty()) {
        active += fmt::format("| `{}` | {} | | (not pattern based) | | |\n", r.name, level);
        continue;
      }
      for (const Pattern& p : r.variants) {
        active += fmt::format("| `{}` | {} | `{}` | {} | {} | {} |\n", r.name, level, p.name,
                              cellCode(p.str()), codeList(constraintNames(p)), codeList(p.produces));
      }
      continue;
    }
    ++held_count;
    held += fmt::format("\n### `{}` ({}, pass `{}`)\n\n{}.\n\n", r.name, ruleStatusName(r.status),
                        r.pass, r.summary);
    for (const Pattern& p : r.variants) held += fmt::format("- pattern: {}\n", code(p.str()));
    const std::vector<std::string> constraints = r.constraints();
    held += fmt::format("- constraints: {}\n",
                        constraints.empty() ? "none beyond the pattern text" : codeList(constraints));
    held += fmt::format("- would produce: {}\n", codeList(r.produces()));
    held += fmt::format("- measured: {}\n", r.evidence.measured);
    held += fmt::format("- command: `{}`\n", r.evidence.command);
    held += fmt::format("- source: `{}`, which says:\n\n> {}\n", r.evidence.source,
                        r.evidence.figures);
  }
  if (held_count == 0) held += "\nNone.\n";
  return active + "\n" + held;
}

}  // namespace fusectl::passes
