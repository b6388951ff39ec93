// Inference latency of one model on fusectl's CPU executor: median and min over repeated runs
// on seeded random inputs, after warm-up. With --inputs-dir it also writes those inputs as
// .npy, so bench/ort_latency.js times ONNX Runtime on exactly the same data. With --ab OPTION
// it times the executor with one of its options off (donate_inputs, channels_last) against the
// defaults in the same process, a run of each in turn: on a host whose speed drifts by more
// than the difference between them within a minute, only runs side by side compare.
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
               "[--inputs-dir DIR] [--ab donate_inputs|channels_last]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string model_path = argv[1], inputs_dir, ab;
  int threads = 1, repeat = 20, warmup = 3;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--threads") threads = std::atoi(argv[++i]);
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup") warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--inputs-dir") inputs_dir = argv[++i];
    else if (a == "--ab") ab = argv[++i];
    else return usage();
  }
  if (!ab.empty() && ab != "donate_inputs" && ab != "channels_last") return usage();
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
    if (!ab.empty()) {
      fusectl::kernels::ExecutorOptions off = options;
      (ab == "donate_inputs" ? off.donate_inputs : off.channels_last) = false;
      fusectl::kernels::Executor other(*model, off);
      for (int i = 0; i < warmup; ++i) {
        executor.run(inputs);
        other.run(inputs);
      }
      auto time = [&](fusectl::kernels::Executor& e) {
        auto t0 = std::chrono::steady_clock::now();
        e.run(inputs);
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
      };
      std::vector<double> on_ms, off_ms, ratios;
      for (int i = 0; i < repeat; ++i) {
        // Alternate which goes first, so that neither always follows the other's run.
        const bool on_first = i % 2 == 0;
        const double a = on_first ? time(executor) : 0, b = time(other);
        const double on = on_first ? a : time(executor);
        on_ms.push_back(on);
        off_ms.push_back(b);
        ratios.push_back(on / b);
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf(
          "{\"runtime\": \"fusectl\", \"model\": \"%s\", \"threads\": %d, \"repeat\": %d, "
          "\"option\": \"%s\", \"on_median_ms\": %.3f, \"off_median_ms\": %.3f, "
          "\"on_min_ms\": %.3f, \"off_min_ms\": %.3f, \"median_on_over_off\": %.4f}\n",
          model_path.c_str(), threads, repeat, ab.c_str(), median(on_ms), median(off_ms),
          *std::min_element(on_ms.begin(), on_ms.end()),
          *std::min_element(off_ms.begin(), off_ms.end()), median(ratios));
      return 0;
    }
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
