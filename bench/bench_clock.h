// The clock and the statistic every kernel benchmark reports with.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <utility>
#include <vector>

namespace fusectl::bench {

// Wall time, or with --clock cpu the process's CPU time: on a shared machine that leaves out
// the time other processes held the core (1-thread figures only; threads add up).
inline bool g_cpu_clock = false;

inline double now() {
  if (!g_cpu_clock) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// The upper median (v.size() / 2 after sorting), as all bench/ figures use.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `a` then `b` once per round, `rounds` times, so that both see the same machine noise;
// returns the median seconds of each.
template <typename A, typename B>
std::pair<double, double> alternatingMedians(int rounds, A&& a, B&& b) {
  std::vector<double> ta, tb;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now();
    a();
    const double t1 = now();
    b();
    const double t2 = now();
    ta.push_back(t1 - t0);
    tb.push_back(t2 - t1);
  }
  return {median(ta), median(tb)};
}

}  // namespace fusectl::bench
