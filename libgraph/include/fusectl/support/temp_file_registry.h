// Temporary files that an interrupted process must not leave behind.
//
// Every file fusectl writes goes first to a temporary file beside its target (AtomicFile), which
// is renamed into place when complete. An exception unwinds and removes it; a SIGINT or SIGTERM
// does not unwind, so the temporary files in flight are registered here, and the handler that
// installTempFileCleanup() installs unlinks them and then dies of the same signal. A SIGKILL
// leaves them (hidden, named ".<target>.fusectl-XXXXXX"), but never a partial target.
#pragma once

#include <thread>
#include <utility>

namespace fusectl {

// Installs the SIGINT/SIGTERM/SIGHUP handler once, and ignores SIGXFSZ (a file-size limit then
// fails the write with EFBIG) (a program's main calls it; the library never
// does, so an embedding program keeps its own handlers). Safe to call more than once.
void installTempFileCleanup();

// Registers a path for removal on a signal; returns a slot for unregisterTempFile, or -1 when
// all slots are taken (the file is then simply not cleaned up on a signal). The path is copied.
int registerTempFile(const char* path);
void unregisterTempFile(int slot);

// Blocks the cleanup signals while alive: the renames that publish a model and its external
// data happen together, or, when a signal arrives first, not at all.
class CleanupSignalsBlocked {
 public:
  CleanupSignalsBlocked();
  ~CleanupSignalsBlocked();
  CleanupSignalsBlocked(const CleanupSignalsBlocked&) = delete;
  CleanupSignalsBlocked& operator=(const CleanupSignalsBlocked&) = delete;

 private:
  alignas(16) unsigned char saved_[128];  // the previous sigset_t, kept opaque to keep <signal.h> out
};

// A thread running `f` with the cleanup signals blocked for its whole life (it inherits the
// mask), so that a SIGINT or SIGTERM goes to a thread that can hold it off (CleanupSignalsBlocked)
// while it creates and registers a temporary file or publishes one. The library starts its own
// threads so.
template <typename F>
std::thread threadWithoutCleanupSignals(F&& f) {
  CleanupSignalsBlocked inherited;
  return std::thread(std::forward<F>(f));
}

}  // namespace fusectl
