// Value lifetimes over a topological order, and the best-fit buffer pool.
#include "fusectl/kernels/memory_plan.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <queue>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "fusectl/graph/error.h"

namespace fusectl::kernels {

namespace {

// Visits every value a node reads: explicit inputs (null for omitted ones) and subgraph captures.
template <typename Fn>
void forEachRead(const Node* n, Fn&& fn) {
  for (Value* v : n->inputs()) {
    if (v) fn(v);
  }
  for (Value* v : n->implicitInputs()) {
    if (v) fn(v);
  }
}

bool listOrderIsTopological(const Graph& g) {
  std::unordered_map<const Value*, bool> ready;
  ready.reserve(g.allValues().size());
  for (const Value* v : g.inputs()) ready[v] = true;
  for (const Value* v : g.initializers()) ready[v] = true;
  for (const Value* v : g.outerRefs()) ready[v] = true;
  for (const Node* n : g.nodes()) {
    bool ok = true;
    forEachRead(n, [&](const Value* v) { ok = ok && ready.count(v); });
    if (!ok) return false;
    for (const Value* v : n->outputs()) {
      if (v) ready[v] = true;
    }
  }
  return true;
}

// Kahn's algorithm, preferring the list order among ready nodes.
std::vector<const Node*> kahnOrder(const Graph& g) {
  std::vector<const Node*> nodes(g.nodes().begin(), g.nodes().end());
  std::unordered_map<const Node*, size_t> index;
  index.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;

  std::vector<size_t> pending(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<const Node*> producers;
    forEachRead(nodes[i], [&](const Value* v) {
      if (v->producer() && index.count(v->producer())) producers.push_back(v->producer());
      else if (v->kind() == Value::Kind::NodeOutput) {
        throwInvalid("node '" + nodes[i]->label() + "' (" + nodes[i]->opType() +
                     ") reads '" + v->name() + "', which no node of the graph produces");
      }
    });
    std::sort(producers.begin(), producers.end());
    producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
    pending[i] = producers.size();
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<const Node*> order;
  order.reserve(nodes.size());
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(nodes[i]);
    std::vector<const Node*> consumers;
    for (const Value* v : nodes[i]->outputs()) {
      if (!v) continue;
      for (const Node* c : v->consumers()) consumers.push_back(c);
    }
    std::sort(consumers.begin(), consumers.end());
    consumers.erase(std::unique(consumers.begin(), consumers.end()), consumers.end());
    for (const Node* c : consumers) {
      auto it = index.find(c);
      if (it != index.end() && --pending[it->second] == 0) ready.push(it->second);
    }
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (pending[i] != 0) {
        throwInvalid("node '" + nodes[i]->label() + "' (" + nodes[i]->opType() +
                     ") is on a cycle or reads a value that is never produced");
      }
    }
  }
  return order;
}

}  // namespace

MemoryPlan buildMemoryPlan(const Graph& graph) {
  MemoryPlan plan;
  if (listOrderIsTopological(graph)) {
    plan.order.assign(graph.nodes().begin(), graph.nodes().end());
  } else {
    plan.order = kahnOrder(graph);
  }

  auto addSlot = [&](const Value* v, int producer, bool pinned) {
    if (plan.slot_of.count(v)) return;
    plan.slot_of.emplace(v, static_cast<int>(plan.values.size()));
    plan.values.push_back(v);
    plan.producer_step.push_back(producer);
    plan.last_use_step.push_back(pinned ? MemoryPlan::kPinned : producer);
  };
  plan.slot_of.reserve(graph.allValues().size());
  for (const Value* v : graph.inputs()) addSlot(v, MemoryPlan::kNotProduced, true);
  for (const Value* v : graph.initializers()) addSlot(v, MemoryPlan::kNotProduced, true);
  for (const Value* v : graph.outerRefs()) addSlot(v, MemoryPlan::kNotProduced, true);

  const int steps = static_cast<int>(plan.order.size());
  for (int step = 0; step < steps; ++step) {
    const Node* n = plan.order[step];
    forEachRead(n, [&](const Value* v) {
      const int s = plan.slot(v);
      if (s < 0) {
        throwInvalid("node '" + n->label() + "' (" + n->opType() + ") reads '" + v->name() +
                     "', which is not produced before it");
      }
      if (!plan.pinned(s)) plan.last_use_step[s] = std::max(plan.last_use_step[s], step);
    });
    for (const Value* v : n->outputs()) {
      if (!v) continue;
      if (plan.slot_of.count(v)) {
        throwInvalid("value '" + v->name() + "' is written twice (node '" + n->label() + "')");
      }
      addSlot(v, step, v->isGraphOutput());
      if (!v->isGraphOutput()) ++plan.intermediate_tensors;
    }
  }

  plan.release_after.assign(plan.order.size(), {});
  for (size_t s = 0; s < plan.values.size(); ++s) {
    if (plan.producer_step[s] == MemoryPlan::kNotProduced || plan.pinned(static_cast<int>(s))) {
      continue;
    }
    plan.release_after[plan.last_use_step[s]].push_back(static_cast<int>(s));
  }
  return plan;
}

// ---- BufferPool ----

namespace {
constexpr size_t kAlignment = 64;
size_t roundUp(size_t bytes) {
  return std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
}

// Buffers of a huge page and more start on one and are advised to transparent huge pages.
// The fusectl CLI gets that from glibc (huge_page_malloc.h restarts it with malloc.hugetlb=1);
// a program that uses the library does not, and its large activations then took TLB misses:
// ResNet-50's per-node minima summed 57.0 ms on 4 KiB pages against 55.1 on huge ones
// (bench/ab_node_times.py --env-a FUSECTL_NO_HUGE_PAGES=1, bench/README.md).
constexpr size_t kHugePage = size_t{2} << 20;

class HostAllocator final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes >= kHugePage) {
      const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
      void* p = std::aligned_alloc(kHugePage, rounded);
      if (!p) throw std::bad_alloc();
#if defined(__linux__)
      ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
      return p;
    }
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { std::free(p); }
};

}  // namespace

std::shared_ptr<DeviceAllocator> hostAllocator() {
  static const std::shared_ptr<DeviceAllocator> host = std::make_shared<HostAllocator>();
  return host;
}

struct BufferPool::State {
  explicit State(std::shared_ptr<DeviceAllocator> m) : memory(std::move(m)) {}

  const std::shared_ptr<DeviceAllocator> memory;
  mutable std::mutex mu;
  std::multimap<size_t, void*> idle;  // capacity -> buffer
  Stats stats;

  ~State() {
    for (auto& [cap, p] : idle) memory->deallocate(p, cap);
  }

  void* fresh(size_t capacity) {
    void* p = memory->allocate(capacity);
    stats.reserved_bytes += capacity;
    ++stats.fresh_allocations;
    return p;
  }

  void countLive(size_t bytes) {
    stats.live_bytes += bytes;
    stats.peak_live_bytes = std::max(stats.peak_live_bytes, stats.live_bytes);
  }
};

namespace {

struct Release {
  std::shared_ptr<BufferPool::State> state;
  size_t capacity;
  size_t bytes;
  bool pooled;
  void operator()(void* p) const {
    std::lock_guard<std::mutex> lock(state->mu);
    state->stats.live_bytes -= bytes;
    if (pooled) {
      state->idle.emplace(capacity, p);
    } else {
      state->stats.reserved_bytes -= capacity;
      state->memory->deallocate(p, capacity);
    }
  }
};

}  // namespace

BufferPool::BufferPool() : BufferPool(hostAllocator()) {}

BufferPool::BufferPool(std::shared_ptr<DeviceAllocator> memory)
    : state_(std::make_shared<State>(std::move(memory))) {}

std::shared_ptr<void> BufferPool::acquire(size_t bytes) {
  const size_t need = roundUp(bytes);
  void* p = nullptr;
  size_t capacity = need;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->idle.lower_bound(need);
    if (it != state_->idle.end() && it->first <= std::max(2 * need, need + 4096)) {
      // The last released of that capacity (equal keys keep insertion order).
      it = std::prev(state_->idle.upper_bound(it->first));
      capacity = it->first;
      p = it->second;
      state_->idle.erase(it);
      ++state_->stats.reuses;
    } else {
      p = state_->fresh(capacity);
    }
    state_->countLive(bytes);
  }
  return std::shared_ptr<void>(p, Release{state_, capacity, bytes, true});
}

std::shared_ptr<void> BufferPool::acquireUnpooled(size_t bytes) {
  const size_t capacity = roundUp(bytes);
  std::lock_guard<std::mutex> lock(state_->mu);
  void* p = state_->fresh(capacity);
  state_->countLive(bytes);
  return std::shared_ptr<void>(p, Release{state_, capacity, bytes, false});
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

void BufferPool::resetPeak() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stats.peak_live_bytes = state_->stats.live_bytes;
}

void BufferPool::trim() {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (auto& [cap, p] : state_->idle) {
    state_->stats.reserved_bytes -= cap;
    state_->memory->deallocate(p, cap);
  }
  state_->idle.clear();
}

}  // namespace fusectl::kernels
