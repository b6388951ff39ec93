// fusectl::Elementwise on the GPU: the node's program becomes one kernel (elementwise_codegen.h),
// compiled with NVRTC the first time a launch needs it and loaded through the CUDA runtime's
// library API, so the backend links cudart and libnvrtc but not the driver library.
//
// A kernel is specialised on the dtype and on how each input is read (same index as the output,
// one element, or through the broadcast strides, in the merged rank), which the shapes decide,
// so a node may use a few kernels; the node's state remembers the last one, and a process-wide
// cache keyed by source text and architecture compiles each source once, whichever node or
// executor asks.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_common.h"
#include "elementwise_codegen.h"
#include "fusectl/graph/elementwise_program.h"
#include "fusectl/graph/error.h"
#include "nvrtc_compile.h"

namespace fusectl::kernels::cuda {
namespace {

// The generated EwIndex is this struct, passed by value as the kernel's first parameter.
static_assert(BroadcastIndex::kMaxRank == kEwMaxRank && BroadcastIndex::kMaxInputs == kEwMaxInputs);
static_assert(sizeof(BroadcastIndex) == kEwIndexBytes);
static_assert(offsetof(BroadcastIndex, rank) == 0 && offsetof(BroadcastIndex, num_inputs) == 4);
static_assert(offsetof(BroadcastIndex, out_dims) == kEwIndexOutDimsOffset);
static_assert(offsetof(BroadcastIndex, strides) == kEwIndexStridesOffset);
static_assert(offsetof(BroadcastIndex, numel) == kEwIndexNumelOffset);
static_assert(sizeof(long long) == sizeof(int64_t));

constexpr const char* kKernelName = "fusectl_elementwise";

struct Arch {
  int major = 0, minor = 0;
};

Arch deviceArch(int device) {
  Arch a;
  check(cudaDeviceGetAttribute(&a.major, cudaDevAttrComputeCapabilityMajor, device),
        "compute capability");
  check(cudaDeviceGetAttribute(&a.minor, cudaDevAttrComputeCapabilityMinor, device),
        "compute capability");
  return a;
}

// A cubin for the device when NVRTC targets it; otherwise PTX for the newest architecture NVRTC
// has below it, which the driver compiles at load (a GPU newer than the toolkit).
std::string compileForDevice(const std::string& source, Arch arch) {
  const int want = arch.major * 10 + arch.minor;
  const std::vector<int> archs = nvrtcSupportedArchs();
  for (int a : archs)
    if (a == want)
      return compileToCubinOrPtx(source, "fusectl_elementwise.cu", arch.major, arch.minor,
                                 /*ptx_only=*/false, elementwiseCompileOptions());
  int best = -1;
  for (int a : archs)
    if (a < want) best = a;
  if (best < 0)
    throwUnsupported(fmt::format("Elementwise on CUDA: NVRTC does not target sm_{} or any older "
                                 "architecture",
                                 want));
  return compileToCubinOrPtx(source, "fusectl_elementwise.cu", best / 10, best % 10,
                             /*ptx_only=*/true, elementwiseCompileOptions());
}

// One compiled source. Libraries stay loaded until the process exits: kernels are shared by
// every executor, and unloading at static destruction would race the runtime's own teardown.
struct Compiled {
  std::once_flag once;
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

// The kernel of `source` for the current device. Threads asking for the same source wait for
// one compile; different sources compile in parallel. A failed compile throws to each caller
// that tries it (call_once leaves the flag unset), so nothing broken is cached.
cudaKernel_t compiledKernel(const std::string& source) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const Arch arch = deviceArch(device);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Compiled>> cache;
  std::shared_ptr<Compiled> entry;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Compiled>& slot =
        cache[fmt::format("sm_{}{}\n{}", arch.major, arch.minor, source)];
    if (!slot) slot = std::make_shared<Compiled>();
    entry = slot;
  }
  std::call_once(entry->once, [&] {
    const std::string image = compileForDevice(source, arch);
    cudaLibrary_t library = nullptr;
    check(cudaLibraryLoadData(&library, image.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "load the Elementwise kernel");
    cudaKernel_t kernel = nullptr;
    const cudaError_t err = cudaLibraryGetKernel(&kernel, library, kKernelName);
    if (err != cudaSuccess) cudaLibraryUnload(library);
    check(err, "find the Elementwise kernel");
    entry->library = library;
    entry->kernel = kernel;
  });
  return entry->kernel;
}

// The parsed program, and the kernel of the last launch with what chose it.
struct ProgramState : KernelState {
  std::string text;
  size_t num_inputs = 0;
  ElementwiseProgram program;
  DType dtype = DType::Undefined;
  int rank = 0;
  std::vector<EwAccess> access;
  int device = -1;
  cudaKernel_t kernel = nullptr;
};

void runElementwise(KernelContext& ctx) {
  const size_t num_inputs = ctx.numInputs();
  if (num_inputs == 0 || num_inputs > kMaxElementwiseInputs)
    ctx.fail(fmt::format("takes 1 to {} inputs, has {}", kMaxElementwiseInputs, num_inputs));
  const DType dtype = ctx.requireInput(0).dtype();
  std::vector<const std::vector<int64_t>*> shapes;
  for (size_t i = 0; i < num_inputs; ++i) {
    const HostTensor& t = ctx.requireInput(i);
    if (!cudaFloatType(t.dtype()) || t.dtype() != dtype)
      ctx.fail(fmt::format("input {} is {}; Elementwise on CUDA computes float32, float16 or "
                           "bfloat16, every input of the same dtype",
                           i, dtypeName(t.dtype())));
    shapes.push_back(&t.dims());
  }
  auto* state = dynamic_cast<ProgramState*>(ctx.state());
  std::string text = ctx.attrString("program", "");
  if (!state || state->text != text || state->num_inputs != num_inputs) {
    auto s = std::make_unique<ProgramState>();
    try {
      s->program = ElementwiseProgram::parse(text, num_inputs);
    } catch (const Error& e) {
      ctx.fail(e.what());
    }
    s->text = std::move(text);
    s->num_inputs = num_inputs;
    ctx.setState(std::move(s));
    state = static_cast<ProgramState*>(ctx.state());
  }

  std::vector<int64_t> dims;
  BroadcastIndex index;
  try {
    index = BroadcastIndex::make(shapes, dims);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::InvalidInput) throw;
    ctx.fail(e.what());
  }
  HostTensor& y = ctx.allocateOutput(0, dtype, dims);
  if (y.numel() == 0) return;
  if (index.numel != y.numel())
    throwInternal(fmt::format("Elementwise: broadcast index of {} elements for output {}",
                              index.numel, formatDims(dims)));

  std::vector<EwAccess> access(num_inputs);
  bool any_strided = false;
  for (size_t i = 0; i < num_inputs; ++i) {
    if (ctx.requireInput(i).numel() == 1) {
      access[i] = EwAccess::Scalar;
    } else if (index.contiguous(static_cast<int>(i))) {
      access[i] = EwAccess::Contiguous;
    } else {
      access[i] = EwAccess::Strided;
      any_strided = true;
    }
  }
  // Without a strided input the rank is not in the source: one kernel serves every shape.
  const int rank = any_strided ? index.rank : 0;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (!state->kernel || state->dtype != dtype || state->rank != rank ||
      state->access != access || state->device != device) {
    state->kernel = nullptr;
    state->kernel = compiledKernel(
        elementwiseKernelSource(state->program, num_inputs, rank, dtype, kKernelName, access));
    state->dtype = dtype;
    state->rank = rank;
    state->access = access;
    state->device = device;
  }

  void* out = y.mutableRaw();
  const void* in[kMaxElementwiseInputs] = {};
  void* args[2 + kMaxElementwiseInputs] = {&index, &out};
  for (size_t i = 0; i < num_inputs; ++i) {
    in[i] = ctx.requireInput(i).raw();
    args[2 + i] = &in[i];
  }
  // The runtime takes a cudaKernel_t where it takes a kernel's address (cuda_runtime_api.h's
  // note on cudaKernel_t for cudaLaunchKernel).
  check(cudaLaunchKernel(reinterpret_cast<const void*>(state->kernel),
                         dim3(gridFor(index.numel, kEwThreadsPerBlock)), dim3(kEwThreadsPerBlock),
                         args, 0, stream()),
        "launch Elementwise");
  launched("Elementwise");
}

}  // namespace

void registerElementwiseProgramKernels(KernelRegistry& r) {
  addCudaKernel(r, "fusectl", "Elementwise", 1, 1000, runElementwise);
}

}  // namespace fusectl::kernels::cuda
