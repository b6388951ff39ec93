// The fusion catalog: one place that says what fuses, what is deliberately not fused, and why.
//
// Every rule is data: a name, the pass it belongs to, the variants it covers (one pattern per
// form or spelling, each with its legality constraints and the ops it produces), a status and,
// for a rule that is not applied by default, the evidence that decided it. Active rules are read
// from the registered passes' patterns(), so the catalog cannot drift from what runs. Rejected
// and opt-in rules are entries of the catalog's own table (fusion_catalog.cpp), each with a
// pattern, so that `fusectl match --explain` can say "this would have matched here, and this is
// why it is not done" instead of leaving a user to rediscover a measurement.
//
// A catalog rule carries patterns but no rewrite, and the PassManager builds its pipelines from
// passes.def alone: nothing can apply a rejected rule. Its name is not a pass name either, so
// `--passes` refuses it. (tests/test_fusion_catalog.cpp checks both, and that -O3 leaves a
// rejected rule's nodes as they were.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

enum class RuleStatus {
  Active,    // run by the pass at its -O level
  OptIn,     // not in any -O pipeline; a user asks for it
  Rejected,  // never applied; kept with its evidence so nobody retries it blind
};
std::string_view ruleStatusName(RuleStatus s);  // "active", "opt-in", "rejected"

// Why a rule is not applied by default, as written down in the repository.
struct RuleEvidence {
  std::string measured;  // what was measured or established, and what it showed
  std::string command;   // how: the command line or check that produced it
  std::string figures;   // the figures or finding, verbatim from `source` (a test checks)
  std::string source;    // repository path where it is written down
  bool empty() const { return measured.empty() && figures.empty() && source.empty(); }
};

struct FusionRule {
  std::string name;
  std::string pass;  // the registered pass the rule belongs to
  RuleStatus status = RuleStatus::Active;
  std::string summary;            // one line
  std::vector<Pattern> variants;  // Pattern::name is the variant's name; empty when the pass
                                  // is not pattern based
  RuleEvidence evidence;          // empty for an active rule

  // The constraint names of every variant, each once, in first-seen order.
  std::vector<std::string> constraints() const;
  // The op types any variant produces, each once, in first-seen order.
  std::vector<std::string> produces() const;
};

// Every rule: one active rule per registered pass (named after it, variants from its
// patterns()), in registry order, then the rejected and opt-in rules.
std::vector<FusionRule> fusionCatalog();

// The rules with status `status`, in catalog order.
std::vector<FusionRule> fusionRules(RuleStatus status);

// The generated part of docs/catalog.md (`fusectl passes --catalog --markdown`; a test compares
// the two). Lists the passes.def passes only, not passes registered at run time.
std::string fusionCatalogMarkdown();

}  // namespace fusectl::passes
