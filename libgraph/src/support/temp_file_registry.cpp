// The signal-safe registry of temporary files (temp_file_registry.h).
//
// The handler may run at any instruction of any thread, so it touches only what is safe there:
// lock-free atomics over static storage, unlink(), signal() and raise(). Registration claims a
// slot with a compare-exchange, copies the path, then publishes it; the handler unlinks only
// published slots. A slot unregistered after its file was renamed may still be unlinked by a
// signal in between: the name no longer exists then, and unlink fails harmlessly.
#include "fusectl/support/temp_file_registry.h"

#include <signal.h>
#include <unistd.h>

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace fusectl {
namespace {

constexpr int kSlots = 64;
constexpr size_t kMaxPath = 4096;
enum SlotState : int { kFree = 0, kClaimed = 1, kPublished = 2 };

char g_paths[kSlots][kMaxPath];
std::atomic<int> g_state[kSlots];
std::atomic<bool> g_installed{false};
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");
static_assert(sizeof(sigset_t) <= 128, "CleanupSignalsBlocked::saved_ is too small");

extern "C" void removeTempFilesAndDie(int sig) {
  const int saved_errno = errno;
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load(std::memory_order_acquire) == kPublished) ::unlink(g_paths[i]);
  // Die of the same signal, so that the parent sees what happened: the default action runs as
  // soon as the handler returns (the signal is blocked inside its own handler).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  errno = saved_errno;
}

}  // namespace

void installTempFileCleanup() {
  if (g_installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_handler = removeTempFilesAndDie;
  sigemptyset(&action.sa_mask);
  for (int sig : kCleanupSignals) sigaddset(&action.sa_mask, sig);  // one cleanup at a time
  for (int sig : kCleanupSignals) {
    struct sigaction previous {};
    ::sigaction(sig, nullptr, &previous);
    if (previous.sa_handler == SIG_IGN) continue;  // e.g. nohup: stay ignored
    ::sigaction(sig, &action, nullptr);
  }
  // Past a file-size limit (RLIMIT_FSIZE) write() then fails with EFBIG, which the writer
  // reports as one line, instead of the process dying of SIGXFSZ with its temporary file left.
  ::signal(SIGXFSZ, SIG_IGN);
}

int registerTempFile(const char* path) {
  const size_t length = std::strlen(path);
  if (length >= kMaxPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_state[i].compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel))
      continue;
    std::memcpy(g_paths[i], path, length + 1);
    g_state[i].store(kPublished, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregisterTempFile(int slot) {
  if (slot >= 0 && slot < kSlots) g_state[slot].store(kFree, std::memory_order_release);
}

CleanupSignalsBlocked::CleanupSignalsBlocked() {
  sigset_t block;
  sigemptyset(&block);
  for (int sig : kCleanupSignals) sigaddset(&block, sig);
  ::pthread_sigmask(SIG_BLOCK, &block, reinterpret_cast<sigset_t*>(saved_));
}

CleanupSignalsBlocked::~CleanupSignalsBlocked() {
  ::pthread_sigmask(SIG_SETMASK, reinterpret_cast<const sigset_t*>(saved_), nullptr);
}

}  // namespace fusectl
