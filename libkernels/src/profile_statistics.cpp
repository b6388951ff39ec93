// The statistics of `fusectl profile` (profile.h): order statistics of a sample, the speedup's
// bootstrap interval and the regression gate.
//
// The bootstrap draws its resamples from a SplitMix64 stream, not from <random>'s
// distributions, whose output the C++ standard leaves to each library: the same timings must
// give the same interval with every compiler.
#include <algorithm>
#include <cmath>

#include "fusectl/graph/error.h"
#include "fusectl/kernels/profile.h"

namespace fusectl::kernels {

namespace {

uint64_t splitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The nearest-rank q-quantile of a sorted, non-empty sample: its ceil(q n)-th smallest value.
double nearestRank(const std::vector<double>& sorted, double q) {
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t k = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size())));
  return sorted[k - 1];
}

double medianOfSorted(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

SampleSummary SampleSummary::of(std::vector<double> sample) {
  SampleSummary s;
  if (sample.empty()) return s;
  std::sort(sample.begin(), sample.end());
  s.median = medianOfSorted(sample);
  s.min = sample.front();
  s.max = sample.back();
  s.p90 = nearestRank(sample, 0.9);
  return s;
}

SpeedupEstimate estimateSpeedup(const std::vector<double>& unfused,
                                const std::vector<double>& fused, int resamples,
                                uint64_t seed, double confidence) {
  if (unfused.size() != fused.size() || unfused.empty()) {
    throw Error(ErrorKind::Internal, "estimateSpeedup: the two sides need the same, non-zero "
                                     "number of runs");
  }
  SpeedupEstimate e;
  e.confidence = confidence;
  e.resamples = std::max(resamples, 1);
  e.seed = seed;
  e.median = ratio(SampleSummary::of(unfused).median, SampleSummary::of(fused).median);

  // Pairs are resampled together: a pair's two runs shared the machine's state at the time.
  const size_t n = unfused.size();
  uint64_t state = seed;
  std::vector<double> ratios, u(n), f(n);
  ratios.reserve(static_cast<size_t>(e.resamples));
  for (int r = 0; r < e.resamples; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(splitMix64(state) % n);
      u[i] = unfused[k];
      f[i] = fused[k];
    }
    std::sort(u.begin(), u.end());
    std::sort(f.begin(), f.end());
    ratios.push_back(ratio(medianOfSorted(u), medianOfSorted(f)));
  }
  std::sort(ratios.begin(), ratios.end());
  const double tail = (1 - confidence) / 2;
  e.ci_low = nearestRank(ratios, tail);
  e.ci_high = nearestRank(ratios, 1 - tail);
  return e;
}

RegressionCheck checkRegression(double current, double baseline, double max_regression_percent) {
  RegressionCheck c;
  c.current = current;
  c.baseline = baseline;
  c.change_percent = baseline > 0 ? (current / baseline - 1) * 100 : 0;
  c.regressed = baseline > 0 && c.change_percent > max_regression_percent;
  return c;
}

}  // namespace fusectl::kernels
