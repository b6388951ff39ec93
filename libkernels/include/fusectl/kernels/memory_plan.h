// Value lifetimes and the buffer pool that serves activations while a graph runs.
//
// The executor runs nodes in one topological order (a "step" per node). A value lives from the
// step that produces it to the step of its last reader (subgraph captures count as reads); after
// that step its buffer returns to the pool. Graph inputs, initializers and graph outputs are
// pinned: never released, never reused. A node output nobody reads dies right after its producer.
//
// Shapes are only known at run time (symbolic dims, data-dependent ops such as Reshape with a
// computed shape), so buffer sizes are not fixed in advance: the lifetimes are planned once per
// graph, and the pool serves each request best-fit from the buffers released so far. A buffer
// stays alive while any HostTensor shares it, so a kernel output that aliases its input (Reshape,
// Identity) keeps the input's buffer out of the pool for as long as the alias lives.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fusectl/graph/graph.h"

namespace fusectl::kernels {

struct MemoryPlan {
  static constexpr int kPinned = INT_MAX;  // last_use_step of a value that is never released
  static constexpr int kNotProduced = -1;  // producer_step of inputs and initializers

  std::vector<const Node*> order;    // execution order: step -> node
  std::vector<const Value*> values;  // slot -> value: graph inputs, initializers, node outputs
  std::unordered_map<const Value*, int> slot_of;
  std::vector<int> producer_step;  // per slot
  std::vector<int> last_use_step;  // per slot
  std::vector<std::vector<int>> release_after;  // per step: slots to release once it has run
  size_t intermediate_tensors = 0;  // node outputs that are not graph outputs

  int slot(const Value* v) const {  // -1 for a value the plan does not know
    auto it = slot_of.find(v);
    return it == slot_of.end() ? -1 : it->second;
  }
  bool pinned(int slot) const { return last_use_step[slot] == kPinned; }
};

// Lifetimes for the graph's own node list when it is topologically ordered, else for a
// topological order computed here (the graph is not modified). Throws fusectl::Error
// (InvalidInput) naming a node whose input nothing produces, or a node on a cycle. O(nodes+uses).
MemoryPlan buildMemoryPlan(const Graph& graph);

// Raw memory of one device, what a BufferPool pools (a backend supplies it, backend.h).
// Implementations are thread-safe.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // `bytes` (a positive multiple of 64) of uninitialised memory, 64-byte aligned; throws
  // std::bad_alloc when the device has none left.
  virtual void* allocate(size_t bytes) = 0;
  // Returns what allocate(bytes) gave.
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
};

// Host memory (aligned_alloc/free): the CPU backend's allocator.
std::shared_ptr<DeviceAllocator> hostAllocator();

// Activation buffers: 64-byte aligned, uninitialised, reused best-fit. Thread-safe. Buffers
// keep the pool's state alive, so they may outlive the BufferPool object.
class BufferPool {
 public:
  struct Stats {
    uint64_t live_bytes = 0;       // bytes requested by buffers currently in use
    uint64_t peak_live_bytes = 0;  // maximum of live_bytes since the last resetPeak()
    uint64_t reserved_bytes = 0;   // capacity held from the system: in use plus idle
    uint64_t fresh_allocations = 0;
    uint64_t reuses = 0;           // requests served from an idle buffer
  };

  BufferPool();  // over hostAllocator()
  explicit BufferPool(std::shared_ptr<DeviceAllocator> memory);
  // A pooled buffer: back in the idle list when its last owner lets go. The smallest idle buffer
  // that fits is reused, unless it is more than twice (and 4 KiB more than) the request, so a
  // scalar never pins a large buffer that a later large value would need. Among idle buffers of
  // that size, the one released last: its lines are the likeliest to be in cache still, where
  // the first released (what a multimap's lower_bound gives) is the coldest.
  std::shared_ptr<void> acquire(size_t bytes);
  // Counted like a pooled buffer, but freed when released and never reused (graph outputs,
  // which outlive the run).
  std::shared_ptr<void> acquireUnpooled(size_t bytes);

  Stats stats() const;
  void resetPeak();  // peak := live, for per-run statistics
  void trim();       // returns idle buffers to the system

  struct State;  // opaque; shared with the buffers handed out

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fusectl::kernels
