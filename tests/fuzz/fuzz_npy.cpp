// NumPy .npy files (`fusectl run --input x=file.npy`, conformance data).
#include "fuzz_common.h"
#include "fusectl/kernels/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::fuzz::expectCleanOutcome([&] {
    fusectl::kernels::parseNpy(std::string_view(reinterpret_cast<const char*>(data), size),
                               "fuzz.npy");
  });
  return 0;
}
