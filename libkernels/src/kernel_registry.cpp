// KernelContext (what a kernel sees of its node) and the kernel registry (the one dispatcher,
// keyed by domain, op, opset, dtype and device).
#include <algorithm>
#include <string>

#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

namespace {

std::string_view canonicalDomain(std::string_view domain) {
  return domain == "ai.onnx" ? std::string_view() : domain;
}

}  // namespace

std::string deviceName(Device device) {
  switch (device) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
    default: return "device " + std::to_string(static_cast<int>(device));
  }
}

DType kernelDType(const Node& node) {
  for (const Value* v : node.inputs()) {
    if (v) return v->dtype();
  }
  for (const Value* v : node.outputs()) {
    if (v) return v->dtype();
  }
  return DType::Undefined;
}

// ---- KernelContext ----

KernelContext::KernelContext(const Node& node, int64_t opset, std::vector<const HostTensor*> inputs,
                             OutputAllocator& allocator, int num_threads)
    : node_(node),
      opset_(opset),
      inputs_(std::move(inputs)),
      outputs_(node.numOutputs()),
      allocator_(allocator),
      num_threads_(std::max(num_threads, 1)) {}

const HostTensor& KernelContext::requireInput(size_t i) const {
  const HostTensor* t = input(i);
  if (!t) fail("required input " + std::to_string(i) + " is missing");
  return *t;
}

const HostTensor* KernelContext::restoredInput(size_t i) {
  const HostTensor* t = input(i);
  if (!t || !t->isReleased()) return t;
  if (!restorer_) fail("input " + std::to_string(i) + " was released and cannot be restored here");
  restorer_->restore(node_, i);
  if (t->isReleased()) fail("input " + std::to_string(i) + " was not restored");
  return t;
}

bool KernelContext::outputWanted(size_t i) const {
  const Value* v = node_.output(i);
  return v != nullptr && !v->name().empty() && (v->hasUses() || v->isGraphOutput());
}

HostTensor& KernelContext::allocateOutput(size_t i, DType dtype, const std::vector<int64_t>& dims) {
  if (i >= outputs_.size()) {
    fail("kernel allocates output " + std::to_string(i) + " but the node has " +
         std::to_string(outputs_.size()) + " outputs");
  }
  for (int64_t d : dims) {
    if (d < 0) fail("output " + std::to_string(i) + " would have negative dimension " +
                    std::to_string(d));
  }
  outputs_[i] = allocator_.allocateFor(node_, i, dtype, dims);
  return outputs_[i];
}

void KernelContext::setOutput(size_t i, HostTensor t) {
  if (i >= outputs_.size()) {
    fail("kernel sets output " + std::to_string(i) + " but the node has " +
         std::to_string(outputs_.size()) + " outputs");
  }
  outputs_[i] = std::move(t);
}

HostTensor* KernelContext::overwriteInput(size_t in, size_t out, DType dtype,
                                          const std::vector<int64_t>& dims) {
  if (!inputDonatable(in) || out >= outputs_.size() || out >= 64 || !outputWanted(out) ||
      node_.output(out)->isGraphOutput()) {
    return nullptr;
  }
  const HostTensor* source = inputs_[in];
  if (!source || !source->isTensor() || !source->soleOwnerOfStorage() ||
      source->dtype() != dtype || source->dims() != dims) {
    return nullptr;
  }
  outputs_[out] = *source;
  outputs_[out].setChannelsLast(false);  // the kernel marks the layout it writes
  in_place_outputs_ |= uint64_t{1} << out;
  return &outputs_[out];
}

HostTensor& KernelContext::allocateOutputOverInputs(size_t out, DType dtype,
                                                    const std::vector<int64_t>& dims) {
  for (size_t in = 0; in < inputs_.size(); ++in)
    if (HostTensor* t = overwriteInput(in, out, dtype, dims)) return *t;
  return allocateOutput(out, dtype, dims);
}

void KernelContext::fail(const std::string& message) const {
  throw Error(ErrorKind::InvalidInput,
              "node '" + node_.label() + "' (" + node_.opType() + "): " + message);
}

// ---- KernelRegistry ----

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();  // never destroyed: kernels may run during static teardown
    registerAllKernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::add(KernelInfo info) {
  if (!info.fn) throwInternal("kernel " + info.op_type + " registered without a function");
  if (info.since_opset > info.until_opset) {
    throwInternal("kernel " + info.op_type + " registered with an empty opset range");
  }
  info.domain = std::string(canonicalDomain(info.domain));
  kernels_.push_back(std::move(info));
}

const KernelInfo* KernelRegistry::find(std::string_view domain, std::string_view op_type,
                                       int64_t opset, DType dtype, Device device) const {
  // The executor looks kernels up once per node when it is built, so a scan is cheap enough.
  const std::string_view dom = canonicalDomain(domain);
  // A spelled fusectl op (an Elementwise program's function name) runs its base op's kernel.
  if (dom == kFusectlDomain) op_type = fusedOpBaseName(op_type);
  const KernelInfo* best = nullptr;
  for (const KernelInfo& k : kernels_) {
    if (k.op_type != op_type || k.domain != dom || k.device != device) continue;
    if (opset < k.since_opset || opset > k.until_opset) continue;
    if (k.dtype != DType::Undefined && k.dtype != dtype) continue;
    if (best && best->dtype != k.dtype) {
      if (k.dtype == DType::Undefined) continue;  // an exact-dtype entry beats any-dtype ones
    } else if (best && k.since_opset < best->since_opset) {
      continue;
    }
    best = &k;
  }
  return best;
}

std::vector<std::string> KernelRegistry::opTypes(Device device) const {
  std::vector<std::string> names;
  names.reserve(kernels_.size());
  for (const KernelInfo& k : kernels_) {
    if (k.device != device) continue;
    names.push_back(k.domain.empty() ? k.op_type : k.domain + "::" + k.op_type);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace fusectl::kernels
