// dedup-initializers: merge initializers with identical dtype, shape and bytes.
//
//   W1 = {1,2,3}, W2 = {1,2,3};  Mul(x, W1), Add(y, W2)  =>  Mul(x, W1), Add(y, W1)
//
// The first initializer in file order is kept; readers of the others read it instead. Skipped:
// initializers that are graph inputs (a caller may override them, so equal bytes today do not
// make them the same value) or graph outputs (their names are part of the interface).
// Candidates are bucketed by a hash of dtype, dims and bytes, then compared byte for byte.
#include <functional>
#include <string_view>
#include <unordered_map>

#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

class DedupInitializersPass : public Pass {
 public:
  const PassInfo& info() const override { return DedupInitializersPassInfo; }

  bool run(Graph& graph, PassContext& ctx) override {
    Rewriter rw(graph, ctx);
    std::unordered_map<size_t, std::vector<Value*>> kept;  // hash -> initializers kept
    std::vector<Value*> initializers = graph.initializers();  // copy: we remove while walking
    size_t merged = 0;
    for (Value* v : initializers) {
      if (v->isGraphInput() || v->isGraphOutput() || !v->initializer()) continue;
      const Tensor& t = *v->initializer();
      std::vector<Value*>& bucket = kept[t.contentHash()];
      Value* same = nullptr;
      for (Value* k : bucket)
        if (k->initializer()->identical(t)) same = k;
      if (!same) {
        bucket.push_back(v);
        continue;
      }
      if (!ctx.allowRewrite()) {
        ctx.count("skipped_max_rewrites");
        break;
      }
      ctx.count("bytes_saved", static_cast<int64_t>(t.byteSize()));
      rw.replaceAllUsesWith(v, same);
      graph.removeInitializer(v);
      ++merged;
    }
    if (merged) ctx.count("merged", static_cast<int64_t>(merged));
    return merged > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> createDedupInitializersPass() {
  return std::make_unique<DedupInitializersPass>();
}

}  // namespace fusectl::passes
