// Times what every fusectl command pays before and after its real work: load (parse, import,
// shape inference), Graph::verify(), and save, on one model. One process per model, so the
// reported peak RSS belongs to that model alone.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/support/background_prefault.h"
#include "fusectl/support/huge_page_malloc.h"

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double peakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  fusectl::restartWithHugePageMalloc(argv);  // what fusectl itself does
  fusectl::startBackgroundPrefault();
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_io MODEL.onnx OUT.onnx [--no-shapes]\n");
    return 2;
  }
  std::string in = argv[1], out = argv[2];
  bool infer = !(argc > 3 && std::string(argv[3]) == "--no-shapes");
  try {
    auto t0 = std::chrono::steady_clock::now();
    fusectl::LoadOptions load_options;
    load_options.infer_shapes = infer;
    auto model = fusectl::loadModel(in, load_options);
    double load_s = secondsSince(t0);

    t0 = std::chrono::steady_clock::now();
    std::string problem = model->graph->verify();
    double verify_s = secondsSince(t0);
    if (!problem.empty()) {
      std::fprintf(stderr, "verify failed: %s\n", problem.c_str());
      return 1;
    }

    t0 = std::chrono::steady_clock::now();
    fusectl::saveModel(*model, out);
    double save_s = secondsSince(t0);

    std::printf("{\"model\": \"%s\", \"nodes\": %zu, \"bytes\": %llu, \"load_s\": %.3f, "
                "\"verify_s\": %.3f, \"save_s\": %.3f, \"total_s\": %.3f, \"peak_rss_mib\": %.1f}\n",
                in.c_str(), model->graph->numNodes(),
                static_cast<unsigned long long>(std::filesystem::file_size(in)), load_s, verify_s,
                save_s, load_s + verify_s + save_s, peakRssMiB());
  } catch (const fusectl::Error& e) {
    std::fprintf(stderr, "bench_io: %s\n", e.what());
    return 3;
  }
  return 0;
}
