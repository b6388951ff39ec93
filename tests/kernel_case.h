// Runs one CPU kernel on a one-node graph, outside the executor: for kernel unit tests.
//
//   KernelCase k("Add", 14);
//   k.input(tensorOf<float>(DType::Float, {2}, {1, 2})).input(tensorOf<float>(...));
//   std::vector<HostTensor> out = k.run();
#pragma once

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {
void registerElementwiseKernels(KernelRegistry& r);
void registerReduceKernels(KernelRegistry& r);
void registerTensorKernels(KernelRegistry& r);
}  // namespace fusectl::kernels

namespace fusectl::testing {

using kernels::HostTensor;

// Elementwise, reduction and data-movement kernels only, so these tests do not depend on the
// compute kernels being built.
inline kernels::KernelRegistry& k2Registry() {
  static kernels::KernelRegistry* r = [] {
    auto* reg = new kernels::KernelRegistry();
    kernels::registerElementwiseKernels(*reg);
    kernels::registerReduceKernels(*reg);
    kernels::registerTensorKernels(*reg);
    return reg;
  }();
  return *r;
}

class PlainAllocator : public kernels::OutputAllocator {
 public:
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return HostTensor(dtype, dims);
  }
};

template <typename T>
HostTensor tensorOf(DType dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
  HostTensor t(dtype, std::move(dims));
  if (static_cast<int64_t>(values.size()) != t.numel()) throw std::logic_error("value count");
  if (!values.empty()) std::memcpy(t.mutableRaw(), values.data(), values.size() * sizeof(T));
  return t;
}
inline HostTensor floats(std::vector<int64_t> dims, const std::vector<float>& v) {
  return tensorOf<float>(DType::Float, std::move(dims), v);
}
inline HostTensor int64s(std::vector<int64_t> dims, const std::vector<int64_t>& v) {
  return tensorOf<int64_t>(DType::Int64, std::move(dims), v);
}
inline HostTensor bools(std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return tensorOf<uint8_t>(DType::Bool, std::move(dims), v);
}

template <typename T>
std::vector<T> valuesOf(const HostTensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

class KernelCase {
 public:
  KernelCase(std::string op, int64_t opset, int num_outputs = 1)
      : op_(std::move(op)), opset_(opset), num_outputs_(num_outputs) {}

  KernelCase& input(HostTensor t) {
    inputs_.emplace_back(std::move(t));
    return *this;
  }
  KernelCase& omitted() {
    inputs_.emplace_back(std::nullopt);
    return *this;
  }
  KernelCase& attr(Attribute a) {
    attrs_.push_back(std::move(a));
    return *this;
  }
  KernelCase& attrInt(const std::string& n, int64_t v) { return attr(Attribute::ofInt(n, v)); }
  KernelCase& attrInts(const std::string& n, std::vector<int64_t> v) {
    return attr(Attribute::ofInts(n, std::move(v)));
  }
  KernelCase& attrFloat(const std::string& n, float v) { return attr(Attribute::ofFloat(n, v)); }
  KernelCase& attrString(const std::string& n, std::string v) {
    return attr(Attribute::ofString(n, std::move(v)));
  }
  KernelCase& threads(int n) {
    threads_ = n;
    return *this;
  }
  // The op's domain ("fusectl" for the fused ops; default the ONNX one).
  KernelCase& domain(std::string d) {
    domain_ = std::move(d);
    return *this;
  }
  // Finds the kernel in `r` (e.g. KernelRegistry::global(), every built-in kernel) instead of
  // k2Registry().
  KernelCase& registry(const kernels::KernelRegistry& r) {
    registry_ = &r;
    return *this;
  }
  // Serves outputs from `a` instead of fresh zero-filled tensors (for timing).
  KernelCase& allocator(kernels::OutputAllocator* a) {
    allocator_ = a;
    return *this;
  }

  std::vector<HostTensor> run() {
    graph_ = std::make_unique<Graph>("t");
    Graph::NodeSpec spec;
    spec.op_type = op_;
    spec.domain = domain_;
    spec.name = "node_" + op_;
    std::vector<const HostTensor*> ptrs;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!inputs_[i]) {
        spec.inputs.push_back(nullptr);
        ptrs.push_back(nullptr);
        continue;
      }
      ValueType vt;
      vt.dtype = inputs_[i]->dtype();
      spec.inputs.push_back(graph_->addInput("in" + std::to_string(i), vt));
      ptrs.push_back(&*inputs_[i]);
    }
    for (int i = 0; i < num_outputs_; ++i) spec.output_names.push_back("out" + std::to_string(i));
    spec.attributes = attrs_;
    Node* node = graph_->createNode(std::move(spec));
    for (Value* v : node->outputs()) graph_->addOutput(v);
    const kernels::KernelRegistry& registry = registry_ ? *registry_ : k2Registry();
    const kernels::KernelInfo* info = registry.find(domain_, op_, opset_);
    if (!info) throw std::logic_error("no kernel for " + op_);
    PlainAllocator plain;
    kernels::KernelContext ctx(*node, opset_, ptrs, allocator_ ? *allocator_ : plain, threads_);
    info->fn(ctx);
    return ctx.outputs();
  }

 private:
  std::string op_;
  std::string domain_;
  const kernels::KernelRegistry* registry_ = nullptr;
  int64_t opset_;
  int num_outputs_;
  std::vector<std::optional<HostTensor>> inputs_;
  std::vector<Attribute> attrs_;
  std::unique_ptr<Graph> graph_;
  kernels::OutputAllocator* allocator_ = nullptr;
  int threads_ = 1;
};

}  // namespace fusectl::testing
