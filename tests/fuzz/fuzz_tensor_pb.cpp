// Serialized onnx.TensorProto files (.pb: conformance data, `fusectl run --input x=file.pb`).
#include "fuzz_common.h"
#include "onnx_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::fuzz::expectCleanOutcome([&] {
    std::string name;
    fusectl::onnx_convert::importBinaryTensor(fusectl::fuzz::bytesOf(data, size), "fuzz.pb",
                                              "/nonexistent-fuzz-dir", &name);
  });
  return 0;
}
