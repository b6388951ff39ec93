// Faulting fresh memory in on a second thread, ahead of its first use.
//
// On the 2-core benchmark VMs the first write to a page of fresh memory costs more than what the
// program then does with it: the guest kernel zeroes the page and the host backs it, at
// 0.3-0.6 GB/s for one thread. A 1M-node `optimize` writes ~1.4 GB of fresh memory, and a third
// of its run was clear_page. Two threads fault memory in twice as fast as one, and building a
// graph is single-threaded, so the second core can fault in the heap's newly grown top and the
// graph's object-pool chunks while the main thread is still filling the previous ones.
//
// Programs opt in (fusectl's main does); a library user's process gets no thread it did not ask
// for, and every call below is then a no-op.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fusectl {

// Starts the thread, once per process; later calls do nothing. From then on the heap's growth
// (the program break, polled every few milliseconds) is faulted in as soon as it is seen, and
// so is every range handed to prefaultInBackground. Returns false, and starts nothing, where the
// kernel lacks MADV_POPULATE_WRITE (Linux before 5.14) or this is not Linux.
//
// The thread is never joined: it only makes madvise() calls on address ranges, which change no
// byte of memory, and a range unmapped meanwhile fails harmlessly.
bool startBackgroundPrefault();

// Queues [data, data + size) to be faulted in writable (MADV_POPULATE_WRITE): anonymous memory
// that the caller is about to fill. Only for private memory: on a writable shared file mapping
// it would dirty pages. No-op unless the thread runs.
void prefaultInBackground(void* data, size_t size);

// Queues a read-only file mapping to have its pages mapped (MADV_POPULATE_READ), so that the
// reader takes no page faults. No-op unless the thread runs.
void prefaultMappingInBackground(const void* data, size_t size);

// Bytes the thread has faulted in so far (heap and queued ranges), for tests and diagnostics.
uint64_t backgroundPrefaultedBytes();

}  // namespace fusectl
