// NumPy .npy files (format versions 1.0, 2.0 and 3.0), and tensor files of either format.
//
// Supported: little-endian (or byte-order-free) float32, float16, float64, int8, uint8, int16,
// uint16, int32, uint32, int64, uint64 and bool, C order. Fortran order, big-endian data, object
// and structured dtypes are rejected with a fusectl::Error naming the file and the reason.
// bfloat16 has no .npy dtype: writing one throws Unsupported (store it as .pb instead).
// Files are written as version 1.0 (2.0 when the header needs it), header padded to 64 bytes.
#pragma once

#include <string>
#include <string_view>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

// Parses .npy bytes; `display_name` names the source in errors.
HostTensor parseNpy(std::string_view bytes, const std::string& display_name);
HostTensor readNpy(const std::string& path);
std::string npyBytes(const HostTensor& t);
void writeNpy(const HostTensor& t, const std::string& path);  // atomic

enum class TensorFileFormat { Npy, Pb };

// By extension: ".npy" is NumPy, anything else a serialized onnx.TensorProto (".pb"). `name`,
// when not null, receives the TensorProto's name ("" for .npy).
HostTensor readTensorFile(const std::string& path, std::string* name = nullptr);
void writeTensorFile(const HostTensor& t, const std::string& name, const std::string& path,
                     TensorFileFormat format);

}  // namespace fusectl::kernels
