// Persistent worker threads for the kernels' parallel loops.
//
// Starting std::threads per parallel region cost more than the work itself on small tensors
// (a 2-thread run of the testdata models took 20x longer than a 1-thread run). Workers are
// started once, on first use, and wait for work; a region hands its chunks out through an
// atomic counter, and the calling thread works on them too.
#pragma once

#include <cstdint>
#include <functional>

namespace fusectl::kernels::cpu {

// Calls task(i) once for every i in [0, count), on up to `count` threads (the caller included),
// and returns when all calls have returned. A call from inside a task, or while another thread
// holds the pool, runs its tasks on the calling thread: never a deadlock, never oversubscription.
void runOnWorkers(int count, const std::function<void(int)>& task);

}  // namespace fusectl::kernels::cpu
