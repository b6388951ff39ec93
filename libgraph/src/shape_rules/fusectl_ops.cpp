// Shape rules of the fusectl ops (domain "fusectl", fused_ops.def). An op whose entry declares
// SameAsInput gets it from the table; a composite op with a rule of its own (shape_rule None)
// is registered below, one line per op, its rule written in this file.
#include "fusectl/graph/fused_ops.h"
#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Every output present takes input 0's dtype and shape (a norm's Y and its saved sum alike).
bool everyOutputAsInput(RuleContext& ctx) {
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    if (ctx.hasOutput(i)) propagateInput(ctx, i, 0);
  return true;
}

}  // namespace

void registerFusectlOpRules(RuleRegistry& r) {
  for (const FusedOpInfo& op : allFusedOps())
    if (op.shape_rule == FusedShapeRule::SameAsInput) r.add(kFusectlDomain, op.name, everyOutputAsInput);
}

}  // namespace fusectl::shape_rules
