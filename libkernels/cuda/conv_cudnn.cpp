// Conv, FusedConv (domain "fusectl", every spelling), MaxPool, AveragePool, GlobalAveragePool and
// GlobalMaxPool on the CUDA backend, through cuDNN 9's legacy descriptor API (host code, g++).
//
// Geometry is the CPU kernels' own (cpu/compute_common.h's resolveWindow: pads, auto_pad,
// strides, dilations, ceil_mode), so both backends agree on output shapes and on which windows
// exist; cuDNN only computes. 1-D ops run as 2-D with a leading unit spatial dim (cuDNN takes 4-D
// and 5-D tensors), 2-D and 3-D as they are.
//
// What cuDNN cannot express directly, and how it is handled:
//  - Asymmetric Conv pads (SAME_* with an odd total, tf2onnx's explicit pads): cuDNN pads both
//    sides alike, so X is first copied into the interior of a zeroed tensor carrying the surplus
//    of the larger side, and the convolution pads the smaller amount symmetrically.
//  - AveragePool with count_include_pad where pads are asymmetric or ceil_mode adds a window that
//    overhangs the end padding: cuDNN's INCLUDE_PADDING divisor is only certain for windows that
//    lie inside a symmetric padded extent, so X is copied into an explicitly zero-padded tensor
//    and pooled with EXCLUDE_PADDING and no padding, whose divisor (the window positions inside
//    that tensor) is exactly the CPU's (positions inside [-pad_begin, in + pad_end)).
//  - MaxPool and AveragePool without count_include_pad take pad_begin as cuDNN's padding and the
//    CPU's output dims as Y's: cuDNN derives each window from the output index, stride and
//    padding and clips it to the input, so asymmetric pads and ceil_mode need nothing else.
// Not run here: MaxPool's Indices output, pooling with dilations, negative pads, a MaxPool or
// AveragePool (without count_include_pad) pad as wide as its window (windows of padding alone,
// whose value cuDNN does not define), more than 3 spatial dims. The registrations' `accepts`
// declines such nodes, which then run on the CPU; what only the run's shapes reveal (an
// undeclared rank, tensors past cuDNN's int limits) throws fusectl::Error(Unsupported) naming
// the node.
//
// Numerics: float32 convolutions use CUDNN_FMA_MATH (no TF32: results must match the CPU to a
// normalised MSE of 1e-7), float16 and bfloat16 ones 16-bit tensors with float accumulation
// (PSEUDO_HALF / PSEUDO_BFLOAT16: the convolution descriptor's compute type is FLOAT) and
// tensor-op math. The FFT algorithms are never used (large workspaces, error that grows with the
// image), nor, for float16 and bfloat16, WINOGRAD_NONFUSED (its transforms may round to the
// 16-bit type, and bfloat16 has only 8 bits of mantissa to lose).
//
// One cuDNN handle serves the process; calls on it are serialised by a mutex, as cuDNN requires
// of a handle shared between host threads, and each queues its work on cuda::stream().
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../cpu/compute_common.h"
#include "cuda_common.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cuda {
namespace {

// ---- cuDNN plumbing ----

void checkCudnn(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw Error(ErrorKind::Internal,
              std::string("cuDNN ") + call + ": " + cudnnGetErrorString(status));
}

// Errors carry the node the way KernelContext::fail spells it, but as Unsupported: the model is
// valid, this backend just does not run it (the CPU kernel does).
[[noreturn]] void unsupported(const KernelContext& ctx, const std::string& what) {
  throw Error(ErrorKind::Unsupported, "node '" + ctx.node().label() + "' (" +
                                          ctx.node().opType() + "): " + what +
                                          " is not supported by the CUDA backend");
}

struct SharedHandle {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
};

SharedHandle& sharedHandle() {
  // Never destroyed: kernels may run from static destructors' threads, and the driver releases
  // the handle's resources with the process. A throw leaves the static unset, so the next call
  // tries again.
  static SharedHandle* shared = [] {
    auto h = std::make_unique<SharedHandle>();
    checkCudnn(cudnnCreate(&h->handle), "cudnnCreate");
    return h.release();
  }();
  return *shared;
}

// Exclusive use of the process's handle, bound to the backend's stream.
class Cudnn {
 public:
  Cudnn() : shared_(sharedHandle()), lock_(shared_.mu) {
    checkCudnn(cudnnSetStream(shared_.handle, stream()), "cudnnSetStream");
  }
  cudnnHandle_t get() const { return shared_.handle; }

 private:
  SharedHandle& shared_;
  std::lock_guard<std::mutex> lock_;
};

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { checkCudnn(Create(&d_), "create descriptor"); }
  ~Descriptor() {
    if (d_) Destroy(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator T() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                            cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                            cudnnDestroyPoolingDescriptor>;
using ActDesc = Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                           cudnnDestroyActivationDescriptor>;
using ReduceDesc = Descriptor<cudnnReduceTensorDescriptor_t, cudnnCreateReduceTensorDescriptor,
                              cudnnDestroyReduceTensorDescriptor>;

cudnnDataType_t cudnnType(DType t) {
  switch (t) {
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

bool is16Bit(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// cuDNN's legacy descriptors take int dims, and a tensor may hold at most 2^31 - 1 elements.
constexpr int64_t kMaxElements = INT_MAX;

void checkFits(const KernelContext& ctx, const std::vector<int64_t>& dims, const char* what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d > INT_MAX) unsupported(ctx, std::string(what) + " dim " + std::to_string(d));
    n *= d;
    if (n > kMaxElements) {
      unsupported(ctx, std::string(what) + " of " + formatDims(dims) +
                           " (cuDNN tensors hold at most 2^31 - 1 elements)");
    }
  }
}

std::vector<int> toInts(const std::vector<int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

std::vector<int64_t> packedStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

void setTensor(cudnnTensorDescriptor_t desc, DType dtype, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& strides) {
  const std::vector<int> d = toInts(dims), s = toInts(strides);
  checkCudnn(cudnnSetTensorNdDescriptor(desc, cudnnType(dtype), static_cast<int>(d.size()),
                                        d.data(), s.data()),
             "cudnnSetTensorNdDescriptor");
}

void setTensor(cudnnTensorDescriptor_t desc, DType dtype, const std::vector<int64_t>& dims) {
  setTensor(desc, dtype, dims, packedStrides(dims));
}

size_t alignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

// cuDNN's scaling factors are float for float, half and bfloat16 data (double only for double).
const float kOne = 1.f, kZero = 0.f;

// ---- spatial geometry as cuDNN sees it ----

// The window of a Conv or pool mapped to cuDNN's 2 or 3 spatial dims, with the padding cuDNN
// applies itself (`pad`, both sides) and the zeros an explicit copy of X adds before and after
// each dim (`extra_begin`, `extra_end`), so that pad + extra_begin == pad_begin and pad +
// extra_end == pad_end of the ONNX window.
struct Spatial {
  std::vector<int64_t> in, kernel, stride, dilation, pad_begin, pad_end, out;
  std::vector<int64_t> pad, extra_begin, extra_end;

  size_t rank() const { return in.size(); }
  bool copiesInput() const {
    for (size_t i = 0; i < rank(); ++i) {
      if (extra_begin[i] || extra_end[i]) return true;
    }
    return false;
  }
  // The spatial dims of the tensor cuDNN reads: X's, or the padded copy's.
  std::vector<int64_t> sourceIn() const {
    std::vector<int64_t> v(rank());
    for (size_t i = 0; i < rank(); ++i) v[i] = in[i] + extra_begin[i] + extra_end[i];
    return v;
  }
};

Spatial toSpatial(const KernelContext& ctx, const cpu::Window& w) {
  const size_t r = w.rank();
  if (r == 0 || r > 3) unsupported(ctx, std::to_string(r) + " spatial dims (cuDNN takes 1 to 3)");
  Spatial s;
  s.in = w.in;
  s.kernel = w.kernel;
  s.stride = w.strides;
  s.dilation = w.dilations;
  s.pad_begin = w.pad_begin;
  s.pad_end = w.pad_end;
  s.out = w.out;
  for (size_t i = 0; i < r; ++i) {
    if (w.pad_begin[i] < 0 || w.pad_end[i] < 0) unsupported(ctx, "a negative pad");
  }
  if (r == 1) {  // 1-D as 2-D: a leading spatial dim of 1, unpadded, unit kernel and stride
    for (auto* v : {&s.in, &s.kernel, &s.stride, &s.dilation, &s.out}) v->insert(v->begin(), 1);
    s.pad_begin.insert(s.pad_begin.begin(), 0);
    s.pad_end.insert(s.pad_end.begin(), 0);
  }
  s.pad.assign(s.rank(), 0);
  s.extra_begin.assign(s.rank(), 0);
  s.extra_end.assign(s.rank(), 0);
  return s;
}

std::vector<int64_t> withBatchChannels(int64_t n, int64_t c, const std::vector<int64_t>& spatial) {
  std::vector<int64_t> d = {n, c};
  d.insert(d.end(), spatial.begin(), spatial.end());
  return d;
}

// Writes X into the interior of a zeroed tensor of the padded dims: a memset, then a strided
// cudnnTransformTensor whose destination view has X's dims and the padded tensor's strides.
struct PaddedCopy {
  TensorDesc src, view;
  size_t bytes = 0;   // the padded tensor's
  size_t offset = 0;  // bytes from its start to X's first element

  void init(DType dtype, int64_t n, int64_t c, const Spatial& s) {
    const std::vector<int64_t> padded = withBatchChannels(n, c, s.sourceIn());
    const std::vector<int64_t> strides = packedStrides(padded);
    const std::vector<int64_t> xdims = withBatchChannels(n, c, s.in);
    setTensor(src, dtype, xdims);
    setTensor(view, dtype, xdims, strides);
    int64_t elems = 1, first = 0;
    for (int64_t d : padded) elems *= d;
    for (size_t i = 0; i < s.rank(); ++i) first += s.extra_begin[i] * strides[2 + i];
    bytes = static_cast<size_t>(elems) * dtypeSize(dtype);
    offset = static_cast<size_t>(first) * dtypeSize(dtype);
  }

  void run(const Cudnn& dnn, const void* x, void* padded) const {
    check(cudaMemsetAsync(padded, 0, bytes, stream()), "memset of the padded input");
    countLaunches(1);
    checkCudnn(cudnnTransformTensor(dnn.get(), &kOne, src, x, &kZero, view,
                                    static_cast<char*>(padded) + offset),
               "cudnnTransformTensor");
    countLaunches(1);
  }
};

// ---- Conv and FusedConv ----

// The CPU's checks of X, W and the attributes (cpu/conv.cpp convDims), with its messages.
struct ConvShape {
  int64_t N = 0, C = 0, M = 0, group = 1;
  cpu::Window win;
};

ConvShape convShape(const KernelContext& ctx, const HostTensor& x, const HostTensor& w) {
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  if (w.rank() != x.rank()) ctx.fail("W must have the same rank as X");
  ConvShape d;
  d.N = x.dim(0);
  d.C = x.dim(1);
  d.M = w.dim(0);
  d.group = ctx.attrInt("group", 1);
  if (d.group <= 0 || d.C % d.group != 0 || d.M % d.group != 0) {
    ctx.fail("group " + std::to_string(d.group) + " must divide the input channels (" +
             std::to_string(d.C) + ") and the output channels (" + std::to_string(d.M) + ")");
  }
  if (w.dim(1) != d.C / d.group) {
    ctx.fail("W has " + std::to_string(w.dim(1)) + " input channels per group, expected " +
             std::to_string(d.C / d.group));
  }
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> kernel(w.dims().begin() + 2, w.dims().end());
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (!ks.empty() && ks != kernel) ctx.fail("kernel_shape does not match W's spatial dims");
  d.win = cpu::resolveWindow(ctx, std::move(in), std::move(kernel), false);
  return d;
}

bool algoAllowed(cudnnConvolutionFwdAlgo_t algo, DType dtype) {
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return false;
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return !is16Bit(dtype);
    default: return true;
  }
}

// Larger workspaces are passed over for the next algorithm the heuristics rank.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

// Everything one (X dims, W dims) needs: descriptors, algorithms, workspace sizes.
struct ConvPlan {
  Spatial sp;
  PaddedCopy copy;
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  ActDesc act;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;
  // cudnnConvolutionBiasActivationForward: set up when the node's epilogue is bias [+ residual]
  // [+ Relu]; cleared for good if cuDNN refuses it, and the epilogue then runs separately.
  bool fused = false;
  cudnnConvolutionFwdAlgo_t fused_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  size_t fused_workspace = 0;
};

struct ConvState final : KernelState {
  std::map<std::vector<int64_t>, std::unique_ptr<ConvPlan>> plans;  // by X dims, -1, W dims
};

bool workspaceFor(const Cudnn& dnn, const ConvPlan& p, cudnnConvolutionFwdAlgo_t algo,
                  size_t* bytes) {
  return cudnnGetConvolutionForwardWorkspaceSize(dnn.get(), p.x, p.w, p.conv, p.y, algo, bytes) ==
         CUDNN_STATUS_SUCCESS;
}

void chooseAlgorithm(const Cudnn& dnn, ConvPlan& p, DType dtype) {
  int max_count = 0;
  checkCudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(dnn.get(), &max_count),
             "cudnnGetConvolutionForwardAlgorithmMaxCount");
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
  int returned = 0;
  checkCudnn(cudnnGetConvolutionForwardAlgorithm_v7(dnn.get(), p.x, p.w, p.conv, p.y,
                                                    static_cast<int>(perf.size()), &returned,
                                                    perf.data()),
             "cudnnGetConvolutionForwardAlgorithm_v7");
  // The heuristics rank by expected speed; the first that runs under the descriptor's math
  // type (asked again: a ranked entry may assume another), within the workspace cap, wins.
  for (int i = 0; i < returned; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& r = perf[static_cast<size_t>(i)];
    size_t bytes = 0;
    if (r.status != CUDNN_STATUS_SUCCESS || !algoAllowed(r.algo, dtype)) continue;
    if (!workspaceFor(dnn, p, r.algo, &bytes) || bytes > kMaxWorkspace) continue;
    p.algo = r.algo;
    p.workspace = bytes;
    return;
  }
  // IMPLICIT_GEMM supports every configuration without workspace.
  p.algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  checkCudnn(cudnnGetConvolutionForwardWorkspaceSize(dnn.get(), p.x, p.w, p.conv, p.y, p.algo,
                                                     &p.workspace),
             "cudnnGetConvolutionForwardWorkspaceSize");
}

std::unique_ptr<ConvPlan> makeConvPlan(const KernelContext& ctx, const ConvShape& d,
                                       const HostTensor& w, DType dtype, bool fusable,
                                       Activation act) {
  auto p = std::make_unique<ConvPlan>();
  Spatial& s = p->sp;
  s = toSpatial(ctx, d.win);
  for (size_t i = 0; i < s.rank(); ++i) {
    s.pad[i] = std::min(s.pad_begin[i], s.pad_end[i]);
    s.extra_begin[i] = s.pad_begin[i] - s.pad[i];
    s.extra_end[i] = s.pad_end[i] - s.pad[i];
  }
  const std::vector<int64_t> xdims = withBatchChannels(d.N, d.C, s.sourceIn());
  const std::vector<int64_t> ydims = withBatchChannels(d.N, d.M, s.out);
  std::vector<int64_t> wdims = {d.M, w.dim(1)};
  wdims.insert(wdims.end(), s.kernel.begin(), s.kernel.end());
  checkFits(ctx, withBatchChannels(d.N, d.C, s.in), "X");
  checkFits(ctx, xdims, "the padded copy of X");
  checkFits(ctx, wdims, "W");
  checkFits(ctx, ydims, "Y");
  for (int64_t v : s.pad) {
    if (v > INT_MAX) unsupported(ctx, "a pad of " + std::to_string(v));
  }
  for (size_t i = 0; i < s.rank(); ++i) {
    if (s.stride[i] > INT_MAX || s.dilation[i] > INT_MAX) {
      unsupported(ctx, "a stride or dilation past 2^31");
    }
  }
  if (s.copiesInput()) p->copy.init(dtype, d.N, d.C, s);

  setTensor(p->x, dtype, xdims);
  setTensor(p->y, dtype, ydims);
  const std::vector<int> wd = toInts(wdims);
  checkCudnn(cudnnSetFilterNdDescriptor(p->w, cudnnType(dtype), CUDNN_TENSOR_NCHW,
                                        static_cast<int>(wd.size()), wd.data()),
             "cudnnSetFilterNdDescriptor");
  const std::vector<int> pad = toInts(s.pad), stride = toInts(s.stride),
                         dilation = toInts(s.dilation);
  checkCudnn(cudnnSetConvolutionNdDescriptor(p->conv, static_cast<int>(s.rank()), pad.data(),
                                             stride.data(), dilation.data(),
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
             "cudnnSetConvolutionNdDescriptor");
  checkCudnn(cudnnSetConvolutionGroupCount(p->conv, static_cast<int>(d.group)),
             "cudnnSetConvolutionGroupCount");
  checkCudnn(cudnnSetConvolutionMathType(
                 p->conv, is16Bit(dtype) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
             "cudnnSetConvolutionMathType");

  // cuDNN's idea of the output must be the CPU's, or the geometry mapping above is wrong.
  std::vector<int> got(ydims.size());
  checkCudnn(cudnnGetConvolutionNdForwardOutputDim(p->conv, p->x, p->w,
                                                   static_cast<int>(got.size()), got.data()),
             "cudnnGetConvolutionNdForwardOutputDim");
  if (std::vector<int64_t>(got.begin(), got.end()) != ydims) {
    throw Error(ErrorKind::Internal, "cuDNN computes a Conv output of " +
                                         formatDims(std::vector<int64_t>(got.begin(), got.end())) +
                                         ", the CPU " + formatDims(ydims));
  }

  Cudnn dnn;
  chooseAlgorithm(dnn, *p, dtype);
  if (fusable) {
    std::vector<int64_t> bdims(ydims.size(), 1);
    bdims[1] = d.M;
    // The bias has Y's type: HALF under PSEUDO_HALF_CONFIG, BFLOAT16 under PSEUDO_BFLOAT16.
    // Should cuDNN refuse the fused call for a type, runConv falls back to convolve + epilogue.
    setTensor(p->bias, dtype, bdims);
    const bool relu = act == Activation::Relu;
    checkCudnn(cudnnSetActivationDescriptor(
                   p->act, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                   CUDNN_NOT_PROPAGATE_NAN, 0.0),
               "cudnnSetActivationDescriptor");
    // With the identity activation cuDNN runs only IMPLICIT_PRECOMP_GEMM.
    p->fused_algo = relu ? p->algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    p->fused = workspaceFor(dnn, *p, p->fused_algo, &p->fused_workspace) &&
               p->fused_workspace <= kMaxWorkspace;
  }
  return p;
}

void runConv(KernelContext& ctx, bool fused_op) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  const DType dtype = x.dtype();
  if (!cudaFloatType(dtype)) ctx.fail("unsupported element type " + std::string(dtypeName(dtype)));
  const ConvShape d = convShape(ctx, x, w);
  const FusedOperands operands =
      fused_op ? fusedOperands(ctx) : FusedOperands{ctx.input(2), nullptr};
  const HostTensor* b = operands.bias;
  if (b && b->numel() != d.M) ctx.fail("B must have one value per output channel");
  const HostTensor* z = operands.residual;
  const std::vector<int64_t> ydims = withBatchChannels(d.N, d.M, d.win.out);
  if (z && z->dims() != ydims) ctx.fail("residual Z must have the output's shape");
  if (w.dtype() != dtype || (b && b->dtype() != dtype) || (z && z->dtype() != dtype)) {
    ctx.fail("W, B and Z must have X's element type " + std::string(dtypeName(dtype)));
  }
  Epilogue ep;  // the CPU's activation parameters and defaults
  if (fused_op) {
    const Activation a = readNodeActivation(ctx, ep);
    checkFusedSpelling(ctx, "FusedConv", b != nullptr, z != nullptr, a);
  }
  DeviceEpilogue de;
  de.bias = b ? b->raw() : nullptr;
  de.bias_dtype = dtype;
  de.bias_per_row = true;
  de.bias_period = d.M;
  de.residual = z ? z->raw() : nullptr;
  de.activation = ep.activation;
  de.alpha = ep.alpha;
  de.beta = ep.beta;

  HostTensor& y = ctx.allocateOutput(0, dtype, ydims);
  if (y.numel() == 0) return;
  const int64_t rows = d.N * d.M, cols = y.numel() / rows;
  if (d.C == 0) {  // no input channels: the convolution is zero, the epilogue still applies
    check(cudaMemsetAsync(y.mutableRaw(), 0, y.byteSize(), stream()), "memset of Conv output");
    countLaunches(1);
    if (!de.empty()) applyEpilogue(y.mutableRaw(), dtype, rows, cols, de);
    return;
  }

  // A plain Conv's bias goes through applyEpilogue instead: the fused call's identity activation
  // would tie it to IMPLICIT_PRECOMP_GEMM whatever the heuristics prefer.
  const bool fusable = fused_op && b &&
                       (ep.activation == Activation::None || ep.activation == Activation::Relu);
  auto* state = dynamic_cast<ConvState*>(ctx.state());
  if (!state) {
    auto fresh = std::make_unique<ConvState>();
    state = fresh.get();
    ctx.setState(std::move(fresh));
  }
  std::vector<int64_t> key = x.dims();
  key.push_back(-1);
  key.insert(key.end(), w.dims().begin(), w.dims().end());
  auto it = state->plans.find(key);
  if (it == state->plans.end()) {
    if (state->plans.size() >= 64) state->plans.clear();  // shapes that keep changing
    it = state->plans.emplace(key, makeConvPlan(ctx, d, w, dtype, fusable, ep.activation)).first;
  }
  ConvPlan& p = *it->second;

  const bool copies = p.sp.copiesInput();
  const size_t copy_bytes = copies ? alignUp(p.copy.bytes) : 0;
  const size_t conv_bytes = std::max(p.workspace, p.fused ? p.fused_workspace : size_t{0});
  const void* src = x.raw();

  bool epilogue_done = false;
  {
    Cudnn dnn;
    // Taken under the handle's lock, so that another cuDNN kernel cannot grow (free) the
    // workspace between this one queueing work on it and that work being ordered on the stream.
    char* ws = copy_bytes + conv_bytes > 0
                   ? static_cast<char*>(workspace(copy_bytes + conv_bytes))
                   : nullptr;
    void* conv_ws = conv_bytes > 0 ? ws + copy_bytes : nullptr;
    if (copies) {
      p.copy.run(dnn, x.raw(), ws);
      src = ws;
    }
    if (p.fused && b) {
      // Without a residual z is Y itself under alpha2 = 0, which cuDNN does not read (as ONNX
      // Runtime's and TensorFlow's fused convolutions rely on).
      const float alpha2 = z ? 1.f : 0.f;
      const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
          dnn.get(), &kOne, p.x, src, p.w, w.raw(), p.conv, p.fused_algo, conv_ws,
          p.fused_workspace, &alpha2, p.y, z ? z->raw() : y.raw(), p.bias, b->raw(), p.act, p.y,
          y.mutableRaw());
      if (status == CUDNN_STATUS_SUCCESS) {
        countLaunches(1);
        epilogue_done = true;
      } else {
        p.fused = false;  // a configuration the fused call refuses: convolve, then the epilogue
      }
    }
    if (!epilogue_done) {
      checkCudnn(cudnnConvolutionForward(dnn.get(), &kOne, p.x, src, p.w, w.raw(), p.conv, p.algo,
                                         conv_ws, p.workspace, &kZero, p.y, y.mutableRaw()),
                 "cudnnConvolutionForward");
      countLaunches(1);
    }
  }
  if (!epilogue_done && !de.empty()) applyEpilogue(y.mutableRaw(), dtype, rows, cols, de);
}

// ---- MaxPool and AveragePool ----

void runPool(KernelContext& ctx, bool is_max) {
  const HostTensor& x = ctx.requireInput(0);
  const DType dtype = x.dtype();
  if (!cudaFloatType(dtype)) ctx.fail("unsupported element type " + std::string(dtypeName(dtype)));
  // The CPU's checks (cpu/pool.cpp poolWindow), then its geometry.
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  if (x.rank() > 5) ctx.fail("pools over more than 3 spatial dims are not supported");
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (ks.size() != x.rank() - 2) ctx.fail("kernel_shape must have one value per spatial dim");
  const bool ceil_mode = ctx.attrInt("ceil_mode", 0) != 0;
  const cpu::Window win = cpu::resolveWindow(
      ctx, std::vector<int64_t>(x.dims().begin() + 2, x.dims().end()), std::move(ks), ceil_mode);
  if (is_max && ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    unsupported(ctx, "MaxPool's Indices output");
  }
  for (int64_t dl : win.dilations) {
    if (dl != 1) unsupported(ctx, "pooling with dilations (cuDNN pools have none)");
  }
  const bool include_pad = !is_max && ctx.attrInt("count_include_pad", 0) != 0;
  Spatial s = toSpatial(ctx, win);
  const int64_t N = x.dim(0), C = x.dim(1);

  cudnnPoolingMode_t mode =
      is_max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  if (include_pad) {
    // INCLUDE_PADDING divides by the window size, which is the CPU's count only when every
    // window lies inside a symmetric padded extent (no ceil_mode overhang) and pads are narrower
    // than the window; otherwise pad explicitly and count what the padded tensor holds.
    bool direct = true;
    for (size_t i = 0; i < s.rank(); ++i) {
      const int64_t floor_out =
          (s.in[i] + s.pad_begin[i] + s.pad_end[i] - s.kernel[i]) / s.stride[i] + 1;
      direct = direct && s.pad_begin[i] == s.pad_end[i] && s.pad_begin[i] < s.kernel[i] &&
               s.out[i] <= floor_out;
    }
    if (direct) {
      mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
      s.pad = s.pad_begin;
    } else {
      s.extra_begin = s.pad_begin;
      s.extra_end = s.pad_end;
    }
  } else {
    for (size_t i = 0; i < s.rank(); ++i) {
      if (s.pad_begin[i] >= s.kernel[i] || s.pad_end[i] >= s.kernel[i]) {
        unsupported(ctx, "a pad as wide as the pooling window");
      }
    }
    s.pad = s.pad_begin;
  }

  std::vector<int64_t> ydims = withBatchChannels(N, C, win.out);
  HostTensor& y = ctx.allocateOutput(0, dtype, ydims);
  if (y.numel() == 0) return;
  checkFits(ctx, withBatchChannels(N, C, s.in), "X");
  checkFits(ctx, withBatchChannels(N, C, s.sourceIn()), "the padded copy of X");
  for (size_t i = 0; i < s.rank(); ++i) {
    if (s.kernel[i] > INT_MAX || s.stride[i] > INT_MAX || s.pad[i] > INT_MAX) {
      unsupported(ctx, "a pooling window, stride or pad past 2^31");
    }
  }

  TensorDesc xdesc, ydesc;
  PoolDesc pool;
  PaddedCopy copy;
  const bool copies = s.copiesInput();
  setTensor(xdesc, dtype, withBatchChannels(N, C, s.sourceIn()));
  setTensor(ydesc, dtype, withBatchChannels(N, C, s.out));
  const std::vector<int> window = toInts(s.kernel), pad = toInts(s.pad), stride = toInts(s.stride);
  checkCudnn(cudnnSetPoolingNdDescriptor(pool, mode, CUDNN_PROPAGATE_NAN,
                                         static_cast<int>(s.rank()), window.data(), pad.data(),
                                         stride.data()),
             "cudnnSetPoolingNdDescriptor");
  if (copies) copy.init(dtype, N, C, s);

  Cudnn dnn;
  void* padded = copies ? workspace(copy.bytes) : nullptr;  // under the lock, as in runConv
  if (copies) copy.run(dnn, x.raw(), padded);
  checkCudnn(cudnnPoolingForward(dnn.get(), pool, &kOne, xdesc, copies ? padded : x.raw(), &kZero,
                                 ydesc, y.mutableRaw()),
             "cudnnPoolingForward");
  countLaunches(1);
}

// ---- GlobalAveragePool and GlobalMaxPool ----

// A reduction of each (image, channel) plane to one value: X viewed as [N, C, P, 1].
void runGlobalPool(KernelContext& ctx, bool is_max) {
  const HostTensor& x = ctx.requireInput(0);
  const DType dtype = x.dtype();
  if (!cudaFloatType(dtype)) ctx.fail("unsupported element type " + std::string(dtypeName(dtype)));
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  std::vector<int64_t> ydims = x.dims();
  for (size_t i = 2; i < ydims.size(); ++i) ydims[i] = 1;
  HostTensor& y = ctx.allocateOutput(0, dtype, ydims);
  if (y.numel() == 0) return;
  const int64_t N = x.dim(0), C = x.dim(1), P = cpu::product(x.dims(), 2);
  const std::vector<int64_t> cdims = {N, C, 1, 1};
  checkFits(ctx, cdims, "Y");
  TensorDesc cdesc;
  setTensor(cdesc, dtype, cdims);
  if (P == 0) {  // empty planes: the CPU's mean of nothing (0) and max of nothing (-inf)
    // cudnnSetTensor's value has the tensor's own type (not float, as scaling factors do).
    const float f = is_max ? -INFINITY : 0.f;
    const uint16_t h = is_max ? 0xFC00 : 0;   // half -inf, +0
    const uint16_t bf = is_max ? 0xFF80 : 0;  // bfloat16 -inf, +0
    const void* value = dtype == DType::Float16    ? static_cast<const void*>(&h)
                        : dtype == DType::BFloat16 ? static_cast<const void*>(&bf)
                                                   : static_cast<const void*>(&f);
    Cudnn dnn;
    checkCudnn(cudnnSetTensor(dnn.get(), cdesc, y.mutableRaw(), value), "cudnnSetTensor");
    countLaunches(1);
    return;
  }
  const std::vector<int64_t> adims = {N, C, P, 1};
  checkFits(ctx, adims, "X");
  TensorDesc adesc;
  setTensor(adesc, dtype, adims);
  ReduceDesc reduce;
  checkCudnn(cudnnSetReduceTensorDescriptor(
                 reduce, is_max ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_AVG,
                 CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN, CUDNN_REDUCE_TENSOR_NO_INDICES,
                 CUDNN_32BIT_INDICES),
             "cudnnSetReduceTensorDescriptor");
  size_t indices_bytes = 0, ws_bytes = 0;
  {
    Cudnn dnn;
    checkCudnn(cudnnGetReductionIndicesSize(dnn.get(), reduce, adesc, cdesc, &indices_bytes),
               "cudnnGetReductionIndicesSize");
    checkCudnn(cudnnGetReductionWorkspaceSize(dnn.get(), reduce, adesc, cdesc, &ws_bytes),
               "cudnnGetReductionWorkspaceSize");
  }
  const size_t index_part = alignUp(indices_bytes);
  Cudnn dnn;
  char* ws = index_part + ws_bytes > 0 ? static_cast<char*>(workspace(index_part + ws_bytes))
                                       : nullptr;  // under the lock, as in runConv
  checkCudnn(cudnnReduceTensor(dnn.get(), reduce, indices_bytes ? ws : nullptr, indices_bytes,
                               ws_bytes ? ws + index_part : nullptr, ws_bytes, &kOne, adesc,
                               x.raw(), &kZero, cdesc, y.mutableRaw()),
             "cudnnReduceTensor");
  countLaunches(1);
}

// ---- which nodes the CUDA kernels take ----
//
// What the attributes and declared ranks already rule out is declined here, so that those nodes
// run on the CPU instead of failing; the kernels' own refusals remain for what only the run's
// shapes show (and for callers that bypass the executor).

bool declaredRankAbove(const Value* v, size_t rank) {
  return v && v->shape().hasRank() && v->shape().rank() > rank;
}

bool convAccepts(const Node& n) {
  try {
    for (int64_t p : n.attrInts("pads")) {
      if (p < 0) return false;
    }
    if (n.attrInts("kernel_shape").size() > 3) return false;
    return !declaredRankAbove(n.input(0), 5) && !declaredRankAbove(n.input(1), 5);
  } catch (const Error&) {
    return true;  // an attribute of the wrong kind: the kernel reports it as the CPU's does
  }
}

bool poolAccepts(const Node& n, bool is_max) {
  try {
    if (is_max) {  // the Indices output, when anything reads it
      const Value* indices = n.output(1);
      if (indices && !indices->name().empty() && (indices->hasUses() || indices->isGraphOutput())) {
        return false;
      }
    }
    for (int64_t d : n.attrInts("dilations")) {
      if (d != 1) return false;
    }
    const std::vector<int64_t> ks = n.attrInts("kernel_shape");
    if (ks.size() > 3) return false;
    const bool include_pad = !is_max && n.attrInt("count_include_pad", 0) != 0;
    const std::vector<int64_t> pads = n.attrInts("pads");
    for (size_t i = 0; i < pads.size(); ++i) {
      if (pads[i] < 0) return false;
      // Windows of padding alone (explicit pads only: SAME_* pads are narrower than the window).
      if (!include_pad && pads.size() == 2 * ks.size() && pads[i] >= ks[i % ks.size()]) {
        return false;
      }
    }
    return true;
  } catch (const Error&) {
    return true;
  }
}

}  // namespace

void registerConvKernels(KernelRegistry& r) {
  const std::initializer_list<DType> types = kCudaFloatTypes;
  addCudaKernel(r, "", "Conv", 1, 1000, [](KernelContext& c) { runConv(c, false); }, types, 0,
                convAccepts);
  // FusedConv and its portable spellings FusedConv[_NoBias][_Add][_<activation>] (fused_ops.h).
  forEachFusedSpelling("FusedConv", [&r, &types](const std::string& name) {
    addCudaKernel(r, std::string(kFusectlDomain), name, 1, 1000,
                  [](KernelContext& c) { runConv(c, true); }, types, 0, convAccepts);
  });
  addCudaKernel(r, "", "MaxPool", 1, 1000, [](KernelContext& c) { runPool(c, true); }, types, 0,
                [](const Node& n) { return poolAccepts(n, true); });
  addCudaKernel(r, "", "AveragePool", 1, 1000, [](KernelContext& c) { runPool(c, false); }, types,
                0, [](const Node& n) { return poolAccepts(n, false); });
  addCudaKernel(r, "", "GlobalMaxPool", 1, 1000, [](KernelContext& c) { runGlobalPool(c, true); },
                types);
  addCudaKernel(r, "", "GlobalAveragePool", 1, 1000,
                [](KernelContext& c) { runGlobalPool(c, false); }, types);
}

}  // namespace fusectl::kernels::cuda
