// eliminate-dead-code: remove nodes that no graph output depends on, then initializers that
// nothing reads.
//
// A node is dead when none of its outputs is a graph output or read by a live node (implicit
// uses by subgraphs count as reads). Graph inputs are never removed: they are the interface.
// Initializers that are also graph inputs (overridable, IR < 4) are kept for the same reason.
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

class EliminateDeadCodePass : public Pass {
 public:
  const PassInfo& info() const override { return EliminateDeadCodePassInfo; }

  bool run(const Graph&, PassContext& ctx) override {
    Rewriter rw(ctx);
    size_t nodes = rw.eraseDeadNodes();
    size_t initializers = rw.eraseUnusedInitializers();
    if (nodes) ctx.count("nodes_removed", static_cast<int64_t>(nodes));
    if (initializers) ctx.count("initializers_removed", static_cast<int64_t>(initializers));
    return nodes + initializers > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateDeadCodePass() {
  return std::make_unique<EliminateDeadCodePass>();
}

}  // namespace fusectl::passes
