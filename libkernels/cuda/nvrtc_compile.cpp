// NVRTC compilation (nvrtc_compile.h).
#include "nvrtc_compile.h"

#include <nvrtc.h>

#include <algorithm>
#include <memory>

#include "fusectl/graph/error.h"

namespace fusectl::kernels::cuda {
namespace {

void checkNvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    throwInternal(std::string("NVRTC ") + what + ": " + nvrtcGetErrorString(r));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string programLog(nvrtcProgram p) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::vector<int> nvrtcSupportedArchs() {
  int n = 0;
  checkNvrtc(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(n));
  if (n > 0) checkNvrtc(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  std::sort(archs.begin(), archs.end());
  return archs;
}

std::string compileToCubinOrPtx(const std::string& source, const std::string& name, int sm_major,
                                int sm_minor, bool ptx_only,
                                const std::vector<std::string>& extra_options) {
  const int arch = sm_major * 10 + sm_minor;
  const std::vector<int> archs = nvrtcSupportedArchs();
  if (sm_major < 0 || sm_minor < 0 || sm_minor > 9 ||
      std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    std::string list;
    for (int a : archs) list += (list.empty() ? "" : ", ") + std::to_string(a);
    throwUnsupported("NVRTC does not target sm_" + std::to_string(arch) + " (it targets " + list +
                     ")");
  }
  nvrtcProgram raw = nullptr;
  checkNvrtc(nvrtcCreateProgram(&raw, source.c_str(), name.c_str(), 0, nullptr, nullptr),
             "nvrtcCreateProgram");
  Program program(raw);
  std::vector<std::string> options = {
      "--std=c++17", (ptx_only ? "-arch=compute_" : "-arch=sm_") + std::to_string(arch)};
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult r =
      nvrtcCompileProgram(raw, static_cast<int>(argv.size()), argv.data());
  if (r != NVRTC_SUCCESS) {
    // Messages are one line (fusectl::Error escapes newlines): the log stays readable as \n.
    throwInternal("NVRTC could not compile " + name + " for " + options[1] + " (" +
                  nvrtcGetErrorString(r) + "):\n" + programLog(raw));
  }
  size_t size = 0;
  std::string image;
  if (ptx_only) {
    checkNvrtc(nvrtcGetPTXSize(raw, &size), "nvrtcGetPTXSize");
    image.resize(size);
    checkNvrtc(nvrtcGetPTX(raw, image.data()), "nvrtcGetPTX");
    while (!image.empty() && image.back() == '\0') image.pop_back();
  } else {
    checkNvrtc(nvrtcGetCUBINSize(raw, &size), "nvrtcGetCUBINSize");
    image.resize(size);
    checkNvrtc(nvrtcGetCUBIN(raw, image.data()), "nvrtcGetCUBIN");
  }
  if (image.empty()) throwInternal("NVRTC produced an empty image for " + name);
  return image;
}

}  // namespace fusectl::kernels::cuda
