// dedup-initializers: merge initializers with identical dtype, shape and bytes.
//
//   W1 = {1,2,3}, W2 = {1,2,3};  Mul(x, W1), Add(y, W2)  =>  Mul(x, W1), Add(y, W1)
//
// The first initializer in file order is kept; readers of the others read it instead. Skipped:
// initializers that are graph inputs (a caller may override them, so equal bytes today do not
// make them the same value) or graph outputs (their names are part of the interface).
// Candidates are bucketed by a hash of dtype, dims and bytes, then compared byte for byte.
// Only those whose sample hash (dtype, dims and three 64-byte windows, Tensor::sampleHash) some
// other candidate shares are hashed in full: a weight with a sample of its own has no twin. A
// BERT-base export's random weights all differ in their first bytes, so the pass read 415 MB
// (0.26 s of a 0.56 s -O3 pipeline) to merge nothing; the small constants that do repeat
// (zeros, ones, shape vectors) share samples and are still hashed and compared in full. Full
// hashing runs on two threads when there is much to read (600 MB on the 1M-node benchmark
// graph, whose weights repeat).
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
    candidates = withSharedSamples(candidates);
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
  // The candidates, in order, whose sample hash another candidate has too.
  static std::vector<Value*> withSharedSamples(const std::vector<Value*>& values) {
    std::vector<std::pair<uint64_t, size_t>> samples(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      samples[i] = {values[i]->initializer()->sampleHash(), i};
    std::sort(samples.begin(), samples.end());
    std::vector<bool> shared(values.size(), false);
    for (size_t i = 0; i + 1 < samples.size(); ++i) {
      if (samples[i].first != samples[i + 1].first) continue;
      shared[samples[i].second] = shared[samples[i + 1].second] = true;
    }
    std::vector<Value*> out;
    for (size_t i = 0; i < values.size(); ++i)
      if (shared[i]) out.push_back(values[i]);
    return out;
  }

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
