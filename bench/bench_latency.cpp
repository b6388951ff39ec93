// Inference latency of one model on fusectl's CPU executor: median and min over repeated runs
// on seeded random inputs, after warm-up. With --inputs-dir it also writes those inputs as
// .npy, so bench/ort_latency.js times ONNX Runtime on exactly the same data.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/npy.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: bench_latency MODEL [--threads N] [--repeat R] [--warmup W] "
               "[--inputs-dir DIR]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string model_path = argv[1], inputs_dir;
  int threads = 1, repeat = 20, warmup = 3;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--threads") threads = std::atoi(argv[++i]);
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup") warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--inputs-dir") inputs_dir = argv[++i];
    else return usage();
  }
  try {
    auto model = fusectl::loadModel(model_path);
    auto inputs = fusectl::kernels::makeRandomInputs(*model->graph, 1);
    if (!inputs_dir.empty()) {
      std::filesystem::create_directories(inputs_dir);
      for (const auto& in : inputs)
        fusectl::kernels::writeNpy(in.tensor, inputs_dir + "/" + in.name + ".npy");
    }
    fusectl::kernels::ExecutorOptions options;
    options.num_threads = threads;
    fusectl::kernels::Executor executor(*model, options);
    for (int i = 0; i < warmup; ++i) executor.run(inputs);
    std::vector<double> ms;
    for (int i = 0; i < repeat; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      executor.run(inputs);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf(
        "{\"runtime\": \"fusectl\", \"model\": \"%s\", \"threads\": %d, \"repeat\": %d, "
        "\"median_ms\": %.3f, \"min_ms\": %.3f}\n",
        model_path.c_str(), threads, repeat, ms[ms.size() / 2], ms.front());
  } catch (const fusectl::Error& e) {
    std::fprintf(stderr, "bench_latency: %s\n", e.what());
    return 3;
  }
  return 0;
}
