// dedup-initializers: merge initializers with identical dtype, shape and bytes.
//
//   W1 = {1,2,3}, W2 = {1,2,3};  Mul(x, W1), Add(y, W2)  =>  Mul(x, W1), Add(y, W1)
//
// The first initializer in file order is kept; readers of the others read it instead. Skipped:
// initializers that are graph inputs (a caller may override them, so equal bytes today do not
// make them the same value) or graph outputs (their names are part of the interface).
// Candidates are bucketed by a hash of dtype, dims and bytes, then compared byte for byte.
// Hashing reads every weight byte (600 MB on the 1M-node benchmark graph), so it runs on two
// threads when there is that much to read.
#include <algorithm>
#include <thread>
#include <vector>

#include "fusectl/passes/hash_buckets.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// Whether one node's bodies capture both a and b: merging them would leave a body two
// references of one name (a body reads an enclosing value by its name).
bool capturedByOneOwner(const Value& a, const Value& b) {
  for (const Use& u : a.uses()) {
    if (u.input != Use::kImplicitUse) continue;
    for (const Use& w : b.uses())
      if (w.input == Use::kImplicitUse && w.node == u.node) return true;
  }
  return false;
}

class DedupInitializersPass : public Pass {
 public:
  const PassInfo& info() const override { return DedupInitializersPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    Rewriter rw(ctx);
    std::vector<Value*> candidates;  // a copy: initializers are removed while walking
    for (Value* v : graph.initializers())
      if (!v->isGraphInput() && !v->isGraphOutput() && v->initializer()) candidates.push_back(v);
    const std::vector<uint64_t> hashes = contentHashes(candidates);
    HashBuckets<Value> kept(candidates.size());
    size_t merged = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      Value* v = candidates[i];
      const Tensor& t = *v->initializer();
      Value* same =
          kept.find(hashes[i], [&](const Value* k) { return k->initializer()->identical(t); });
      if (!same) {
        kept.insert(hashes[i], v);
        continue;
      }
      if (capturedByOneOwner(*v, *same)) {
        ctx.count("skipped_captured_together");
        continue;
      }
      if (!ctx.allowRewrite()) {
        ctx.count("skipped_max_rewrites");
        break;
      }
      ctx.count("bytes_saved", static_cast<int64_t>(t.byteSize()));
      rw.replaceConstant(v, same);
      ++merged;
    }
    if (merged) ctx.count("merged", static_cast<int64_t>(merged));
    return merged > 0;
  }

 private:
  static std::vector<uint64_t> contentHashes(const std::vector<Value*>& values) {
    std::vector<uint64_t> hashes(values.size());
    auto hashRange = [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) hashes[i] = values[i]->initializer()->contentHash();
    };
    size_t bytes = 0;
    for (const Value* v : values) bytes += v->initializer()->byteSize();
    constexpr size_t kParallelBytes = 64u << 20;
    if (bytes < kParallelBytes || std::thread::hardware_concurrency() < 2) {
      hashRange(0, values.size());
      return hashes;
    }
    // Split by bytes, not by count: a few large weights can hold most of them.
    size_t half = 0;
    for (size_t seen = 0; half < values.size() && 2 * seen < bytes; ++half)
      seen += values[half]->initializer()->byteSize();
    std::thread second(hashRange, half, values.size());
    hashRange(0, half);
    second.join();
    return hashes;
  }
};

}  // namespace

std::unique_ptr<Pass> createDedupInitializersPass() {
  return std::make_unique<DedupInitializersPass>();
}

}  // namespace fusectl::passes
