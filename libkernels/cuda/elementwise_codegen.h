// CUDA C++ source for one fusectl::Elementwise program (elementwise_program.h), compiled at run
// time with NVRTC (nvrtc_compile.h) by elementwise_program_cuda.cpp: one kernel per program in
// which the instructions are straight-line float code, so a fused chain reads each input and
// writes the output once, with no intermediate tensor and no interpretation per element.
//
// Each op computes what the CPU kernel (cpu/elementwise_program.cpp) computes, with the same
// formulas (vec_impl.h's functors, scalar_ops.h), so that the backends differ only by the
// rounding of the math library's transcendentals. Plain C++ here (no CUDA headers): the source
// is text, and the tests check and compile it on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/elementwise_program.h"

namespace fusectl::kernels::cuda {

// How the kernel reads one input at output element i. Baked into the source: a launch whose
// inputs are all Contiguous or Scalar needs no index arithmetic at all.
enum class EwAccess : uint8_t {
  Contiguous,  // at i (BroadcastIndex::contiguous)
  Scalar,      // one element, read once before the loop
  Strided,     // at the offset the broadcast index's strides give
};

// The index struct the generated kernel takes by value. It mirrors cuda_common.h's
// BroadcastIndex field for field; elementwise_program_cuda.cpp static_asserts that the two
// agree, and the generated source asserts its own size, so a change to either breaks the build
// or the NVRTC compile rather than the kernel's indexing.
inline constexpr int kEwMaxRank = 6;
inline constexpr int kEwMaxInputs = 8;
inline constexpr size_t kEwIndexBytes = 448;
inline constexpr size_t kEwIndexOutDimsOffset = 8;
inline constexpr size_t kEwIndexStridesOffset = 56;
inline constexpr size_t kEwIndexNumelOffset = 440;

// The block size the kernel is written for (its __launch_bounds__).
inline constexpr int kEwThreadsPerBlock = 256;

// The source of `extern "C" __global__ void <kernel_name>(EwIndex idx, T* y, const T* in0, ...,
// const T* in<num_inputs-1>)`, T float, or IEEE half or bfloat16 as unsigned short bits (the
// source includes no header: NVRTC has neither cuda_fp16.h nor cuda_bf16.h built in), computing the
// program at every output element (a grid-stride loop over idx.numel). `access` gives one
// EwAccess per input; empty means all Strided (correct for any index). `rank` (1..6) is the
// index rank the Strided inputs are walked in; it is ignored, and not written into the source,
// when no input is Strided. Deterministic: the same arguments give the same text (the compile
// cache keys on it).
//
// Throws fusectl::Error: Unsupported for a dtype other than Float, Float16 and BFloat16;
// Internal for arguments no valid launch produces (no input or more than 8, a program reading
// an input past num_inputs or a temp before it is defined, an `access` of the wrong length, a
// rank out of range with a Strided input, a kernel name that is no C identifier).
std::string elementwiseKernelSource(const ElementwiseProgram& program, size_t num_inputs,
                                    int rank, DType dtype, const std::string& kernel_name,
                                    const std::vector<EwAccess>& access = {});

// The NVRTC options the generated source is meant to be compiled with, besides the language
// standard and the architecture: --fmad=false, because the CPU kernel rounds every instruction's
// result to float before the next reads it (each op writes a block of memory), and a contracted
// a * b + c across two instructions (Mul then Add) would round once instead of twice.
std::vector<std::string> elementwiseCompileOptions();

// A float as an exact CUDA C++ expression: a hex float literal ("0x1.99999ap-4f"), or
// __uint_as_float(<bits>) for infinities and NaNs, which have no literal.
std::string cudaFloatLiteral(float v);

}  // namespace fusectl::kernels::cuda
