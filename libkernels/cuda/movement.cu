// Data movement on the device: Transpose, Concat, Split, Slice, Gather and Expand, plus the
// alias ops (Reshape, Flatten, Squeeze, Unsqueeze), whose CPU functions only relabel bytes and
// so serve the device once their shape or axes input is on the host. Shapes, axes, starts and
// the like are read on the host (KernelInfo::host_inputs); the data never leaves the device.
#include <cuda_fp16.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "cuda_common.h"
#include "cuda_device_util.cuh"
#include "fusectl/graph/error.h"
#include "fusectl/graph/slice_range.h"

namespace fusectl::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRank = 8;

// An output walked in row-major order whose element i reads the input at offset
// base + sum(index_d * in_strides[d]).
struct StridedView {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t base = 0;
  int64_t numel = 1;
};

template <typename T>
__global__ void gatherStridedKernel(const T* __restrict__ x, T* __restrict__ y, StridedView v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < v.numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, offset = v.base;
    for (int d = v.rank - 1; d >= 0; --d) {
      const int64_t q = rest / v.out_dims[d];
      offset += (rest - q * v.out_dims[d]) * v.in_strides[d];
      rest = q;
    }
    y[i] = x[offset];
  }
}

// The same by element size, so one instantiation serves float, float16 and bfloat16 (and any
// 2- or 4-byte type) alike.
void launchStrided(const void* x, void* y, size_t element_bytes, const StridedView& v) {
  if (v.numel == 0) return;
  const unsigned grid = gridFor(v.numel, kThreads);
  if (element_bytes == 4) {
    gatherStridedKernel<<<grid, kThreads, 0, stream()>>>(static_cast<const float*>(x),
                                                         static_cast<float*>(y), v);
  } else if (element_bytes == 2) {
    gatherStridedKernel<<<grid, kThreads, 0, stream()>>>(static_cast<const __half*>(x),
                                                         static_cast<__half*>(y), v);
  } else if (element_bytes == 8) {
    gatherStridedKernel<<<grid, kThreads, 0, stream()>>>(static_cast<const int64_t*>(x),
                                                         static_cast<int64_t*>(y), v);
  } else {
    gatherStridedKernel<<<grid, kThreads, 0, stream()>>>(static_cast<const uint8_t*>(x),
                                                         static_cast<uint8_t*>(y), v);
  }
  launched("strided copy");
}

size_t elementBytes(const HostTensor& t) { return dtypeSize(t.dtype()); }

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Drops output dims of size 1 and merges dims the input also walks contiguously, so that
// common permutations index in rank 2 to 4. Fails when more than kMaxRank dims remain.
StridedView makeView(const KernelContext& ctx, const std::vector<int64_t>& out_dims,
                     const std::vector<int64_t>& in_strides, int64_t base) {
  StridedView v;
  v.base = base;
  std::vector<int64_t> dims, strides;
  for (size_t d = 0; d < out_dims.size(); ++d) {
    v.numel *= out_dims[d];
    if (out_dims[d] == 1) continue;
    if (!dims.empty() && strides.back() == in_strides[d] * out_dims[d]) {
      dims.back() *= out_dims[d];
      strides.back() = in_strides[d];
    } else {
      dims.push_back(out_dims[d]);
      strides.push_back(in_strides[d]);
    }
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    ctx.fail("more than " + std::to_string(kMaxRank) + " irreducible dims");
  }
  v.rank = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), v.out_dims);
  std::copy(strides.begin(), strides.end(), v.in_strides);
  return v;
}

int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

void runTranspose(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const size_t rank = x.rank();
  std::vector<int64_t> perm = ctx.attrInts("perm");
  if (perm.empty()) {
    perm.resize(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
  }
  if (perm.size() != rank) ctx.fail("perm has " + std::to_string(perm.size()) + " entries");
  std::vector<bool> seen(rank, false);
  const std::vector<int64_t> strides = rowMajorStrides(x.dims());
  std::vector<int64_t> out_dims(rank), in_strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t p = perm[i];
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(p)]) {
      ctx.fail("perm " + formatDims(perm) + " is not a permutation");
    }
    seen[static_cast<size_t>(p)] = true;
    out_dims[i] = x.dim(static_cast<size_t>(p));
    in_strides[i] = strides[static_cast<size_t>(p)];
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), out_dims);
  launchStrided(x.raw(), y.mutableRaw(), elementBytes(x), makeView(ctx, out_dims, in_strides, 0));
}

// Rows of `row_bytes` bytes from a source of pitch src_pitch into a destination of pitch
// dst_pitch: one cudaMemcpy2DAsync, which handles any pitch on the device.
void copyRows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
              size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                          cudaMemcpyDeviceToDevice, stream()),
        "2-D copy");
  countLaunches(1);
}

void runConcat(KernelContext& ctx) {
  const HostTensor& first = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(first.rank());
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  std::vector<int64_t> dims = first.dims();
  dims[axis] = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const HostTensor& t = ctx.requireInput(i);
    if (t.rank() != first.rank() || t.dtype() != first.dtype()) ctx.fail("inputs differ in rank or dtype");
    for (size_t d = 0; d < t.rank(); ++d) {
      if (d != axis && t.dim(d) != first.dim(d)) ctx.fail("inputs differ outside the axis");
    }
    dims[axis] += t.dim(axis);
  }
  HostTensor& y = ctx.allocateOutput(0, first.dtype(), dims);
  const size_t esize = elementBytes(first);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  const size_t dst_pitch = static_cast<size_t>(dims[axis] * inner) * esize;
  size_t offset = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const HostTensor& t = ctx.requireInput(i);
    const size_t row = static_cast<size_t>(t.dim(axis) * inner) * esize;
    copyRows(static_cast<char*>(y.mutableRaw()) + offset, dst_pitch, t.raw(), row, row,
             static_cast<size_t>(outer));
    offset += row;
  }
}

void runSplit(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  const size_t outputs = ctx.numOutputs();
  std::vector<int64_t> sizes;
  if (ctx.opset() >= 13) {
    if (const HostTensor* s = ctx.input(1); s && s->numel() > 0) sizes = hostInts(*s);
  } else {
    sizes = ctx.attrInts("split");
  }
  const int64_t dim = x.dim(axis);
  if (sizes.empty()) {
    // Equal parts; from opset 18 the last may be smaller (ceil division), as the CPU kernel.
    const int64_t n = static_cast<int64_t>(outputs);
    const int64_t part = ctx.opset() >= 18 ? (dim + n - 1) / n : dim / n;
    if (ctx.opset() < 18 && part * n != dim) ctx.fail("axis size is not divisible by the outputs");
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::min(part, dim - part * i));
  }
  if (sizes.size() != outputs) ctx.fail("split sizes do not match the outputs");
  if (std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != dim) {
    ctx.fail("split sizes do not add up to the axis size");
  }
  const size_t esize = elementBytes(x);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (size_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const size_t src_pitch = static_cast<size_t>(dim * inner) * esize;
  size_t offset = 0;
  for (size_t i = 0; i < outputs; ++i) {
    std::vector<int64_t> dims = x.dims();
    dims[axis] = sizes[i];
    const size_t row = static_cast<size_t>(sizes[i] * inner) * esize;
    if (ctx.outputWanted(i)) {
      HostTensor& y = ctx.allocateOutput(i, x.dtype(), dims);
      copyRows(y.mutableRaw(), row, static_cast<const char*>(x.raw()) + offset, src_pitch, row,
               static_cast<size_t>(outer));
    }
    offset += row;
  }
}

void runSlice(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.attrInts("starts");
    ends = ctx.attrInts("ends");
    axes = ctx.attrInts("axes");
  } else {
    starts = hostInts(ctx.requireInput(1));
    ends = hostInts(ctx.requireInput(2));
    if (const HostTensor* a = ctx.input(3)) axes = hostInts(*a);
    if (const HostTensor* s = ctx.input(4)) steps = hostInts(*s);
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), int64_t{0});
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    ctx.fail("starts, ends, axes and steps differ in length");
  }
  std::vector<int64_t> first(x.rank(), 0), step(x.rank(), 1), out_dims = x.dims();
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t a = static_cast<size_t>(normalizeAxis(ctx, axes[i], rank));
    const int64_t d = x.dim(a), st = steps[i];
    if (st == 0) ctx.fail("a step is 0");
    const SliceRange range = sliceRange(d, starts[i], ends[i], st);
    first[a] = range.first;
    // The step matters only when two elements are taken; then it cannot overflow the stride.
    step[a] = range.count > 1 ? st : 1;
    out_dims[a] = range.count;
  }
  const std::vector<int64_t> strides = rowMajorStrides(x.dims());
  std::vector<int64_t> in_strides(x.rank());
  int64_t base = 0;
  for (size_t d = 0; d < x.rank(); ++d) {
    in_strides[d] = strides[d] * step[d];
    base += first[d] * strides[d];
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), out_dims);
  launchStrided(x.raw(), y.mutableRaw(), elementBytes(x), makeView(ctx, out_dims, in_strides, base));
}

template <typename T, typename I>
__global__ void gatherKernel(const T* __restrict__ x, const I* __restrict__ indices,
                             T* __restrict__ y, int64_t outer, int64_t count, int64_t dim,
                             int64_t inner) {
  const int64_t n = outer * count * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = i % inner;
    const int64_t j = (i / inner) % count;
    const int64_t o = i / (inner * count);
    int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < 0) idx += dim;
    // An index out of range reads zero: the CPU kernel refuses it, which a device cannot do
    // without a synchronising check.
    y[i] = (idx >= 0 && idx < dim) ? x[(o * dim + idx) * inner + k] : T{};
  }
}

template <typename T>
void launchGather(const HostTensor& x, const HostTensor& idx, HostTensor& y, int64_t outer,
                  int64_t count, int64_t dim, int64_t inner) {
  const unsigned grid = gridFor(outer * count * inner, kThreads);
  if (idx.dtype() == DType::Int64) {
    gatherKernel<<<grid, kThreads, 0, stream()>>>(x.data<T>(), idx.data<int64_t>(),
                                                  y.mutableData<T>(), outer, count, dim, inner);
  } else {
    gatherKernel<<<grid, kThreads, 0, stream()>>>(x.data<T>(), idx.data<int32_t>(),
                                                  y.mutableData<T>(), outer, count, dim, inner);
  }
}

void runGather(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& idx = ctx.requireInput(1);
  if (idx.dtype() != DType::Int64 && idx.dtype() != DType::Int32) ctx.fail("indices must be int32 or int64");
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  std::vector<int64_t> dims(x.dims().begin(), x.dims().begin() + static_cast<int64_t>(axis));
  dims.insert(dims.end(), idx.dims().begin(), idx.dims().end());
  dims.insert(dims.end(), x.dims().begin() + static_cast<int64_t>(axis) + 1, x.dims().end());
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), dims);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (size_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t count = idx.numel();
  if (outer * count * inner == 0) return;
  withFloatType(x.dtype(), [&](auto tag) {
    launchGather<decltype(tag)>(x, idx, y, outer, count, x.dim(axis), inner);
  });
  launched("Gather");
}

void runExpand(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> shape = hostInts(ctx.requireInput(1));
  std::vector<int64_t> out_dims;
  BroadcastIndex index;
  try {
    index = BroadcastIndex::make({&x.dims(), &shape}, out_dims);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), out_dims);
  // A broadcast read is a strided view with stride 0 along the broadcast dims.
  StridedView v;
  v.rank = index.rank;
  v.numel = index.numel;
  for (int d = 0; d < index.rank; ++d) {
    v.out_dims[d] = index.out_dims[d];
    v.in_strides[d] = index.strides[0][d];
  }
  launchStrided(x.raw(), y.mutableRaw(), elementBytes(x), v);
}

// A Constant's value is made on the host by the CPU kernel (which reads every spelling of the
// attribute), uploaded on the node's first run and kept: later runs hand out the same bytes
// without a copy, where a CPU fallback would upload them every run.
struct ConstantState : KernelState {
  HostTensor device;
};

class HostOutputs final : public OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return HostTensor(dtype, dims);
  }
};

void runConstant(KernelContext& ctx) {
  auto* state = dynamic_cast<ConstantState*>(ctx.state());
  if (!state) {
    const KernelInfo* cpu = KernelRegistry::global().find("", "Constant", ctx.opset());
    if (!cpu) ctx.fail("no CPU Constant kernel to decode the value");
    HostOutputs host;
    KernelContext decode(ctx.node(), ctx.opset(), {}, host, 1);
    cpu->fn(decode);
    const HostTensor& value = decode.outputs()[0];
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(value.byteSize(), 1)), "Constant allocation");
    std::shared_ptr<void> storage(p, [](void* q) { cudaFree(q); });
    // On the kernels' stream, so that they see it; a pageable source is staged before return.
    check(cudaMemcpyAsync(p, value.raw(), value.byteSize(), cudaMemcpyHostToDevice, stream()),
          "Constant upload");
    auto fresh = std::make_unique<ConstantState>();
    fresh->device = HostTensor::borrow(value.dtype(), value.dims(), p, storage);
    state = fresh.get();
    ctx.setState(std::move(fresh));
  }
  ctx.setOutput(0, state->device);
}

}  // namespace

void registerMovementKernels(KernelRegistry& r) {
  addCudaKernel(r, "", "Constant", 1, 1000, runConstant);
  registerAliasKernels(r, Device::Cuda, kCudaFloatTypes);
  addCudaKernel(r, "", "Transpose", 1, 1000, runTranspose);
  addCudaKernel(r, "", "Concat", 4, 1000, runConcat);
  addCudaKernel(r, "", "Split", 2, 1000, runSplit, kCudaFloatTypes, 0b10);
  addCudaKernel(r, "", "Slice", 1, 1000, runSlice, kCudaFloatTypes, 0b11110);
  addCudaKernel(r, "", "Gather", 1, 1000, runGather);
  addCudaKernel(r, "", "Expand", 8, 1000, runExpand, kCudaFloatTypes, 0b10);
}

}  // namespace fusectl::kernels::cuda
