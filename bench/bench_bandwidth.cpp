// Memory bandwidth of the memory-bound CPU kernels against the STREAM triad measured in the
// same run: one JSON line per (kernel, threads) with GB/s (bytes of every input and output
// divided by the median time of repeated calls) and the ratio to the triad's GB/s at the same
// thread count. Kernels are called directly, outside the executor, with output buffers reused
// across calls, so page faults and the executor's per-node cost stay out of the figure.
// No assertions (issue 13's target, >= 0.8 of the triad, is read off by people).
//
//   bench_bandwidth [--elements N] [--repeat R] [--threads 1,2] [--only SUBSTRING]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_clock.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fusectl;
using namespace fusectl::kernels;

using fusectl::bench::median;

// Keeps one buffer per output shape, so every call after the first writes warm pages.
class ReusingAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    HostTensor& t = kept_[{static_cast<int>(dtype), dims}];
    if (t.dtype() == DType::Undefined) t = HostTensor(dtype, dims);
    return t;
  }

 private:
  std::map<std::pair<int, std::vector<int64_t>>, HostTensor> kept_;
};

HostTensor randomFloats(std::vector<int64_t> dims, uint32_t seed, float lo = -4, float hi = 4) {
  HostTensor t(DType::Float, std::move(dims));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.mutableData<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

struct Case {
  std::string name;  // what the JSON line calls it
  std::string op;
  int64_t opset = 17;
  std::vector<HostTensor> inputs;
  std::vector<Attribute> attrs;
};

// Seconds per call of the case's kernel, median of `repeat` calls after one warm-up; `between`
// runs before each timed call (the paired triad, see main).
template <typename Between>
double timeCase(const Case& c, int threads, int repeat, uint64_t* bytes, Between between) {
  Graph g("bench");
  Graph::NodeSpec spec;
  spec.op_type = c.op;
  spec.name = c.name;
  std::vector<const HostTensor*> args;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ValueType vt;
    vt.dtype = c.inputs[i].dtype();
    spec.inputs.push_back(g.addInput("in" + std::to_string(i), vt));
    args.push_back(&c.inputs[i]);
  }
  spec.output_names = {"out"};
  spec.attributes = c.attrs;
  Node* node = g.createNode(std::move(spec));
  const KernelInfo* info = KernelRegistry::global().find("", c.op, c.opset);
  if (!info) {
    std::fprintf(stderr, "no kernel for %s\n", c.op.c_str());
    std::exit(1);
  }
  ReusingAllocator reuse;
  KernelContext ctx(*node, c.opset, args, reuse, threads);
  info->fn(ctx);
  *bytes = ctx.outputs()[0].byteSize();
  for (const HostTensor& t : c.inputs) *bytes += t.byteSize();
  std::vector<double> s;
  for (int r = 0; r < repeat; ++r) {
    between();
    const auto t0 = Clock::now();
    info->fn(ctx);
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(s);
}

__attribute__((noinline)) void triadPart(float* __restrict a, const float* __restrict b,
                                         const float* __restrict c, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
}

// STREAM triad a = b + 3c on `threads` threads (each its own contiguous part of the arrays),
// seconds for one pass; bytes are counted as STREAM does (two reads, one write).
double triadOnce(std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
                 int threads) {
  const int64_t n = static_cast<int64_t>(a.size());
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(triadPart, a.data(), b.data(), c.data(), n * t / threads,
                      n * (t + 1) / threads);
  triadPart(a.data(), b.data(), c.data(), 0, n / threads);
  for (std::thread& t : pool) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<Case> makeCases(int64_t n) {
  std::vector<Case> cases;
  auto unary = [&](const std::string& op, std::vector<Attribute> attrs = {}) {
    cases.push_back({op, op, 17, {randomFloats({n}, 1)}, std::move(attrs)});
  };
  unary("Relu");
  unary("Sigmoid");
  unary("Tanh");
  unary("Exp");
  unary("Erf");
  cases.push_back({"Gelu", "Gelu", 20, {randomFloats({n}, 1)}, {}});
  unary("LeakyRelu");

  const int64_t hidden = 1024, rows = n / hidden;
  const int64_t c = 64, hw = n / c;
  cases.push_back({"Add_same", "Add", 17, {randomFloats({n}, 1), randomFloats({n}, 2)}, {}});
  cases.push_back({"Mul_same", "Mul", 17, {randomFloats({n}, 1), randomFloats({n}, 2)}, {}});
  cases.push_back({"Add_scalar", "Add", 17, {randomFloats({n}, 1), randomFloats({}, 2)}, {}});
  cases.push_back({"Mul_scalar_first", "Mul", 17, {randomFloats({}, 2), randomFloats({n}, 1)}, {}});
  cases.push_back({"Add_per_channel_NCHW", "Add", 17,
                   {randomFloats({1, c, hw / 256, 256}, 1), randomFloats({c, 1, 1}, 2)}, {}});
  cases.push_back({"Add_last_axis", "Add", 17,
                   {randomFloats({1, rows, hidden}, 1), randomFloats({hidden}, 2)}, {}});
  cases.push_back({"Div_last_axis", "Div", 17,
                   {randomFloats({1, rows, hidden}, 1), randomFloats({hidden}, 2, 1, 2)}, {}});

  cases.push_back({"BatchNormalization", "BatchNormalization", 15,
                   {randomFloats({1, c, hw / 256, 256}, 1), randomFloats({c}, 2),
                    randomFloats({c}, 3), randomFloats({c}, 4), randomFloats({c}, 5, 0.5f, 2)},
                   {}});
  cases.push_back({"Softmax_last_axis", "Softmax", 13, {randomFloats({rows, hidden}, 1)}, {}});
  cases.push_back({"LogSoftmax_last_axis", "LogSoftmax", 13, {randomFloats({rows, hidden}, 1)}, {}});
  cases.push_back({"LayerNormalization", "LayerNormalization", 17,
                   {randomFloats({rows, hidden}, 1), randomFloats({hidden}, 2),
                    randomFloats({hidden}, 3)},
                   {}});
  const int64_t pool_h = n / c / 512;
  cases.push_back({"MaxPool_3x3_s2_p1", "MaxPool", 12, {randomFloats({1, c, pool_h, 512}, 1)},
                   {Attribute::ofInts("kernel_shape", {3, 3}), Attribute::ofInts("strides", {2, 2}),
                    Attribute::ofInts("pads", {1, 1, 1, 1})}});
  cases.push_back({"MaxPool_2x2_s2", "MaxPool", 12, {randomFloats({1, c, pool_h, 512}, 1)},
                   {Attribute::ofInts("kernel_shape", {2, 2}), Attribute::ofInts("strides", {2, 2})}});
  cases.push_back({"AveragePool_3x3_s1_p1", "AveragePool", 19,
                   {randomFloats({1, c, pool_h, 512}, 1)},
                   {Attribute::ofInts("kernel_shape", {3, 3}), Attribute::ofInts("pads", {1, 1, 1, 1})}});
  cases.push_back({"GlobalAveragePool", "GlobalAveragePool", 1,
                   {randomFloats({1, 256, n / 256 / 64, 64}, 1)}, {}});
  cases.push_back({"GlobalMaxPool", "GlobalMaxPool", 1,
                   {randomFloats({1, 256, n / 256 / 64, 64}, 1)}, {}});
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 1 << 24;
  int repeat = 7;
  std::vector<int> thread_counts = {1, 2};
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--elements") n = std::max<int64_t>(1 << 16, std::atoll(argv[i + 1]));
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--threads") {
      thread_counts.clear();
      for (const char* p = argv[i + 1]; *p;) {
        thread_counts.push_back(std::max(1, std::atoi(p)));
        p = std::strchr(p, ',');
        if (!p) break;
        ++p;
      }
    } else {
      std::fprintf(stderr, "usage: bench_bandwidth [--elements N] [--repeat R] [--threads 1,2] "
                           "[--only SUBSTRING]\n");
      return 2;
    }
  }
  n = n / (1 << 16) * (1 << 16);  // whole rows and planes in every case's shape
  std::vector<float> a(static_cast<size_t>(n), 0.f), b(a.size(), 1.f), c(a.size(), 2.f);
  const std::vector<Case> cases = makeCases(n);
  // The machine may be shared: each kernel call is paired with a triad pass just before it,
  // and each line's ratio is between the medians of those pairs.
  for (int threads : thread_counts) {
    std::vector<double> all_triads;
    for (const Case& k : cases) {
      if (!only.empty() && k.name.find(only) == std::string::npos) continue;
      std::vector<double> triads;
      uint64_t bytes = 0;
      const double s = timeCase(k, threads, repeat, &bytes,
                                [&] { triads.push_back(triadOnce(a, b, c, threads)); });
      const double triad_gbs = 3.0 * 4 * n / median(triads) / 1e9;
      all_triads.insert(all_triads.end(), triads.begin(), triads.end());
      const double gbs = static_cast<double>(bytes) / s / 1e9;
      std::printf("{\"kernel\":\"%s\",\"threads\":%d,\"bytes\":%llu,\"ms\":%.3f,"
                  "\"gb_per_s\":%.2f,\"triad_gb_per_s\":%.2f,\"ratio_to_triad\":%.2f}\n",
                  k.name.c_str(), threads, static_cast<unsigned long long>(bytes), s * 1e3, gbs,
                  triad_gbs, gbs / triad_gbs);
      std::fflush(stdout);
    }
    if (!all_triads.empty()) {
      const double triad_s = median(all_triads);
      std::printf("{\"kernel\":\"stream_triad\",\"threads\":%d,\"elements\":%lld,\"ms\":%.3f,"
                  "\"gb_per_s\":%.2f,\"ratio_to_triad\":1.00}\n",
                  threads, static_cast<long long>(n), triad_s * 1e3, 3.0 * 4 * n / triad_s / 1e9);
    }
  }
  return 0;
}
