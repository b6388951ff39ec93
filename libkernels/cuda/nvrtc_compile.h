// Run-time compilation of generated CUDA C++ (elementwise_codegen.h) with NVRTC. Host code; it
// needs libnvrtc but no GPU, so the tests compile generated sources on any machine.
#pragma once

#include <string>
#include <vector>

namespace fusectl::kernels::cuda {

// Compiles `source` (one translation unit that includes nothing outside NVRTC's built-in
// headers; `name` is its file name in diagnostics) with --std=c++17, the IEEE-exact defaults
// (no --use_fast_math) and `extra_options`, for sm_<major><minor>: a cubin for that GPU, or,
// with ptx_only, PTX for compute_<major><minor> that the driver compiles for any later GPU.
// Returns the image as bytes (PTX without a trailing NUL; c_str() is what the loader wants).
// Throws fusectl::Error(Internal) with NVRTC's log when the source does not compile, and
// Unsupported when NVRTC does not target the architecture.
std::string compileToCubinOrPtx(const std::string& source, const std::string& name, int sm_major,
                                int sm_minor, bool ptx_only,
                                const std::vector<std::string>& extra_options = {});

// The architectures this NVRTC targets, as major * 10 + minor, ascending (75, 80, 86...).
std::vector<int> nvrtcSupportedArchs();

}  // namespace fusectl::kernels::cuda
