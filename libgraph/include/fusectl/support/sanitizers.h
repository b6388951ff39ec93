// Which sanitizers this file is compiled with, as one set of macros: GCC says so with
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang with __has_feature. FUSECTL_ASAN,
// FUSECTL_TSAN and FUSECTL_MSAN are defined (as 1) for AddressSanitizer, ThreadSanitizer and
// MemorySanitizer builds, and absent otherwise.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define FUSECTL_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define FUSECTL_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(FUSECTL_ASAN)
#define FUSECTL_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(FUSECTL_TSAN)
#define FUSECTL_TSAN 1
#endif
#if __has_feature(memory_sanitizer)
#define FUSECTL_MSAN 1
#endif
#endif
