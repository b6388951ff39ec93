// Fused against unfused epilogues, kernel by kernel: FusedConv (bias+Relu, bias+residual+Relu)
// against Conv followed by the separate BatchNormalization / Add / Relu kernels, and FusedGemm
// against Gemm + Add + Relu, on the shapes of the testdata models and of ResNet-50's layers.
//
//   bench_fused_epilogue [--threads N] [--repeat R] [--only SUBSTRING] [--clock wall|cpu]
//
// Every kernel is called through the KernelRegistry, as the executor calls it, with a persistent
// state slot and the weights marked constant (so prepacked weights are what is timed), and with
// output buffers reused across runs (no page faults in the timings). The two sides alternate
// A/B/A/B and each prints its median; the requirement is ratio (fused/unfused) <= 1.
// Prints one JSON line per shape; no assertions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"

namespace {

using fusectl::Attribute;
using fusectl::DType;
using fusectl::Graph;
using fusectl::Node;
using fusectl::Value;
using fusectl::ValueType;
using fusectl::kernels::HostTensor;
using fusectl::kernels::KernelContext;
using fusectl::kernels::KernelInfo;
using fusectl::kernels::KernelRegistry;
using fusectl::kernels::KernelState;
using fusectl::kernels::OutputAllocator;
using Dims = std::vector<int64_t>;

// Hands out the same buffer for the same (call index, size) on every run, so that repeated runs
// touch warm memory as the executor's arena does.
class ReusingAllocator : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    auto& slot = buffers_[next_++];
    if (!slot || slot->byteSize() != count * fusectl::dtypeSize(dtype)) {
      slot = std::make_shared<HostTensor>(dtype, dims);
    }
    return HostTensor::borrow(dtype, dims, slot->raw(), slot);
  }
  void rewind() { next_ = 0; }

 private:
  std::map<int, std::shared_ptr<HostTensor>> buffers_;
  int next_ = 0;
};

HostTensor randomTensor(const Dims& dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  HostTensor t(DType::Float, dims);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.mutableData<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

// One node run through its registered kernel, keeping its state across runs like the executor.
class NodeRunner {
 public:
  NodeRunner(std::string domain, std::string op, std::vector<const HostTensor*> inputs,
             uint64_t constant_inputs, std::vector<Attribute> attrs, int threads)
      : inputs_(std::move(inputs)), constant_(constant_inputs), threads_(threads) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      ValueType vt;
      vt.dtype = inputs_[i]->dtype();
      ins.push_back(graph_.addInput("in" + std::to_string(i), vt));
    }
    node_ = graph_.createNode({op, domain, ins, {"out"}, "n", std::move(attrs)});
    graph_.addOutput(node_->output(0));
    kernel_ = KernelRegistry::global().find(domain, op, domain.empty() ? 17 : 1);
    if (!kernel_) {
      std::fprintf(stderr, "no kernel for %s\n", op.c_str());
      std::exit(1);
    }
  }
  const HostTensor& run() {
    allocator_.rewind();
    KernelContext ctx(*node_, node_->domain().empty() ? 17 : 1, inputs_, allocator_, threads_);
    ctx.bindPersistentState(&state_, constant_);
    kernel_->fn(ctx);
    output_ = ctx.outputs()[0];
    return output_;
  }

 private:
  Graph graph_{"bench"};
  Node* node_ = nullptr;
  const KernelInfo* kernel_ = nullptr;
  std::vector<const HostTensor*> inputs_;
  uint64_t constant_;
  int threads_;
  ReusingAllocator allocator_;
  std::unique_ptr<KernelState> state_;
  HostTensor output_;
};

using fusectl::bench::g_cpu_clock;
using fusectl::bench::now;

double seconds(const std::function<void()>& f) {
  const double t0 = now();
  f();
  return now() - t0;
}

using fusectl::bench::median;

struct Timing {
  double unfused_ms, fused_ms;
};

// Alternates the two sides after one warm-up run of each; medians in milliseconds.
Timing timeBoth(const std::function<void()>& unfused, const std::function<void()>& fused,
                int repeat) {
  unfused();
  fused();
  std::vector<double> a, b;
  for (int r = 0; r < repeat; ++r) {
    a.push_back(seconds(unfused));
    b.push_back(seconds(fused));
  }
  return {median(a) * 1e3, median(b) * 1e3};
}

struct ConvShape {
  const char* model;
  int64_t C, H, W, M, k, stride, group;
};

void benchConv(const ConvShape& s, bool residual, int threads, int repeat) {
  const int64_t pad = s.k / 2;
  const int64_t OH = (s.H + 2 * pad - s.k) / s.stride + 1;
  const int64_t OW = (s.W + 2 * pad - s.k) / s.stride + 1;
  HostTensor x = randomTensor({1, s.C, s.H, s.W}, 1);
  HostTensor w = randomTensor({s.M, s.C / s.group, s.k, s.k}, 2, -0.1f, 0.1f);
  HostTensor bias = randomTensor({s.M}, 3);
  HostTensor scale = randomTensor({s.M}, 4, 0.5f, 1.5f), shift = randomTensor({s.M}, 5);
  HostTensor mean = randomTensor({s.M}, 6), var = randomTensor({s.M}, 7, 0.5f, 1.5f);
  HostTensor z = randomTensor({1, s.M, OH, OW}, 8);
  const std::vector<Attribute> conv_attrs = {
      Attribute::ofInts("kernel_shape", {s.k, s.k}),
      Attribute::ofInts("strides", {s.stride, s.stride}),
      Attribute::ofInts("pads", {pad, pad, pad, pad}), Attribute::ofInt("group", s.group)};

  NodeRunner conv("", "Conv", {&x, &w}, 0b10, conv_attrs, threads);
  const HostTensor& y = conv.run();
  NodeRunner bn("", "BatchNormalization", {&y, &scale, &shift, &mean, &var}, 0b11110, {}, threads);
  const HostTensor& ybn = bn.run();
  NodeRunner add("", "Add", {&ybn, &z}, 0, {}, threads);
  const HostTensor& yadd = add.run();
  NodeRunner relu("", "Relu", {residual ? &yadd : &ybn}, 0, {}, threads);

  std::vector<Attribute> fused_attrs = conv_attrs;
  fused_attrs.push_back(Attribute::ofString("activation", "Relu"));
  std::vector<const HostTensor*> fused_inputs = {&x, &w, &bias};
  if (residual) fused_inputs.push_back(&z);
  NodeRunner fused("fusectl", "FusedConv", fused_inputs, 0b110, fused_attrs, threads);

  const Timing t = timeBoth(
      [&] {
        conv.run();
        bn.run();
        if (residual) add.run();
        relu.run();
      },
      [&] { fused.run(); }, repeat);
  const double gflop = 2.0 * s.M * OH * OW * (s.C / s.group) * s.k * s.k * 1e-9;
  std::printf(
      "{\"bench\":\"fused_epilogue\",\"op\":\"Conv\",\"model\":\"%s\",\"x\":[1,%lld,%lld,%lld],"
      "\"w\":[%lld,%lld,%lld,%lld],\"stride\":%lld,\"group\":%lld,\"epilogue\":\"%s\","
      "\"threads\":%d,\"unfused_ms\":%.4f,\"fused_ms\":%.4f,\"ratio\":%.3f,"
      "\"fused_gflops\":%.1f}\n",
      s.model, (long long)s.C, (long long)s.H, (long long)s.W, (long long)s.M,
      (long long)(s.C / s.group), (long long)s.k, (long long)s.k, (long long)s.stride,
      (long long)s.group, residual ? "bias+residual+Relu" : "bias+Relu", threads, t.unfused_ms,
      t.fused_ms, t.fused_ms / t.unfused_ms, gflop / (t.fused_ms * 1e-3));
  std::fflush(stdout);
}

struct GemmShape {
  const char* model;
  int64_t M, N, K;
};

// Gemm(A, B^T, C) [+ Add(Z)] + Relu against FusedGemm with the same bias, residual and Relu.
void benchGemm(const GemmShape& s, bool residual, int threads, int repeat) {
  HostTensor a = randomTensor({s.M, s.K}, 11), b = randomTensor({s.N, s.K}, 12);
  HostTensor c = randomTensor({s.N}, 13), z = randomTensor({s.M, s.N}, 14);
  const std::vector<Attribute> attrs = {Attribute::ofInt("transB", 1)};
  NodeRunner gemm("", "Gemm", {&a, &b, &c}, 0b110, attrs, threads);
  const HostTensor& y = gemm.run();
  NodeRunner add("", "Add", {&y, &z}, 0, {}, threads);
  const HostTensor& yadd = add.run();
  NodeRunner relu("", "Relu", {residual ? &yadd : &y}, 0, {}, threads);
  std::vector<Attribute> fused_attrs = attrs;
  fused_attrs.push_back(Attribute::ofString("activation", "Relu"));
  std::vector<const HostTensor*> fused_inputs = {&a, &b, &c};
  if (residual) fused_inputs.push_back(&z);
  NodeRunner fused("fusectl", "FusedGemm", fused_inputs, 0b110, fused_attrs, threads);
  const Timing t = timeBoth(
      [&] {
        gemm.run();
        if (residual) add.run();
        relu.run();
      },
      [&] { fused.run(); }, repeat);
  std::printf(
      "{\"bench\":\"fused_epilogue\",\"op\":\"Gemm\",\"model\":\"%s\",\"M\":%lld,\"N\":%lld,"
      "\"K\":%lld,\"epilogue\":\"%s\",\"threads\":%d,\"unfused_ms\":%.4f,\"fused_ms\":%.4f,"
      "\"ratio\":%.3f}\n",
      s.model, (long long)s.M, (long long)s.N, (long long)s.K,
      residual ? "bias+residual+Relu" : "bias+Relu", threads, t.unfused_ms, t.fused_ms,
      t.fused_ms / t.unfused_ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeat = 15;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--clock") g_cpu_clock = std::string(argv[i + 1]) == "cpu";
    else {
      std::fprintf(stderr,
                   "usage: bench_fused_epilogue [--threads N] [--repeat R] [--only S] "
                   "[--clock wall|cpu]\n");
      return 2;
    }
  }
  // ResNet-50 at 224x224 (each distinct layer once), then the testdata models at 32x32.
  const ConvShape convs[] = {
      {"resnet50", 3, 224, 224, 64, 7, 2, 1},     {"resnet50", 64, 56, 56, 64, 1, 1, 1},
      {"resnet50", 64, 56, 56, 64, 3, 1, 1},      {"resnet50", 64, 56, 56, 256, 1, 1, 1},
      {"resnet50", 256, 56, 56, 64, 1, 1, 1},     {"resnet50", 256, 56, 56, 128, 1, 1, 1},
      {"resnet50", 128, 56, 56, 128, 3, 2, 1},    {"resnet50", 128, 28, 28, 512, 1, 1, 1},
      {"resnet50", 512, 28, 28, 128, 1, 1, 1},    {"resnet50", 128, 28, 28, 128, 3, 1, 1},
      {"resnet50", 256, 28, 28, 256, 3, 1, 1},    {"resnet50", 256, 14, 14, 1024, 1, 1, 1},
      {"resnet50", 1024, 14, 14, 256, 1, 1, 1},   {"resnet50", 256, 14, 14, 256, 3, 1, 1},
      {"resnet50", 512, 14, 14, 512, 3, 1, 1},    {"resnet50", 512, 7, 7, 2048, 1, 1, 1},
      {"resnet50", 2048, 7, 7, 512, 1, 1, 1},     {"resnet50", 512, 7, 7, 512, 3, 1, 1},
      {"resnet_mini", 3, 32, 32, 16, 3, 1, 1},    {"resnet_mini", 16, 16, 16, 16, 3, 1, 1},
      {"resnet_mini", 16, 16, 16, 32, 3, 2, 1},   {"resnet_mini", 32, 8, 8, 32, 3, 1, 1},
      {"mobilenet_mini", 3, 32, 32, 16, 3, 2, 1}, {"mobilenet_mini", 16, 16, 16, 16, 3, 1, 16},
      {"mobilenet_mini", 16, 16, 16, 64, 1, 1, 1}, {"mobilenet_mini", 64, 16, 16, 64, 3, 2, 64},
      {"mobilenet_mini", 64, 8, 8, 24, 1, 1, 1},  {"mobilenet_mini", 96, 8, 8, 96, 3, 1, 96},
      {"mobilenetv2", 144, 56, 56, 144, 3, 1, 144}, {"mobilenetv2", 192, 28, 28, 192, 3, 2, 192},
      {"mobilenetv2", 32, 112, 112, 32, 3, 1, 32},  {"mobilenetv2", 96, 112, 112, 96, 3, 2, 96},
      {"mobilenetv2", 576, 14, 14, 576, 3, 1, 576}, {"mobilenetv2", 960, 7, 7, 960, 3, 1, 960},
      {"efficientnet_b0", 240, 28, 28, 240, 5, 1, 240},
  };
  for (const ConvShape& s : convs) {
    if (!only.empty() && std::string(s.model).find(only) == std::string::npos) continue;
    for (bool residual : {false, true}) benchConv(s, residual, threads, repeat);
  }
  const GemmShape gemms[] = {{"resnet_mini", 1, 10, 64},   {"bert_layer", 8, 64, 64},
                             {"bert_layer", 128, 256, 64}, {"resnet50", 1, 1000, 2048},
                             {"bert_base", 128, 768, 768}, {"bert_base", 128, 3072, 768}};
  for (const GemmShape& s : gemms) {
    if (!only.empty() && std::string(s.model).find(only) == std::string::npos) continue;
    for (bool residual : {false, true}) benchGemm(s, residual, threads, repeat);
  }
  return 0;
}
