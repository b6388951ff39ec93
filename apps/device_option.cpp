// `--device`, shared by run, verify and profile.
#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/cuda_backend.h"

namespace fusectl::cli {

void addDeviceOption(CLI::App& command, std::string& device) {
  command
      .add_option("--device", device,
                  "cpu, or cuda: nodes with a CUDA kernel run on the GPU, the rest on the CPU "
                  "with copies (exit 5 when no GPU is usable)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

const kernels::Backend* deviceBackend(const std::string& device) {
  if (device == "cpu") return nullptr;
  try {
    return &kernels::cudaBackend();
  } catch (const Error& e) {
    throw Error(e.kind(), "--device cuda: " + std::string(e.what()));
  }
}

}  // namespace fusectl::cli
