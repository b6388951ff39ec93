// PassContext: options of the running pass and the --max-rewrites budget.
#include "fusectl/passes/pass.h"

namespace fusectl::passes {

std::string PassContext::option(const std::string& key, const std::string& def) const {
  auto it = options_.find(key);
  return it == options_.end() ? def : it->second;
}

bool PassContext::allowRewrite() {
  if (rewrite_budget_ == 0) return false;
  if (rewrite_budget_ > 0) --rewrite_budget_;
  ++rewrites_allowed_;
  return true;
}

}  // namespace fusectl::passes
