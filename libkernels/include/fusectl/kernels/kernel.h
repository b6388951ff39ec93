// The contract between the executor and CPU kernels.
//
// A kernel is a function of a KernelContext: it reads the node's attributes and its input
// tensors, decides each output's dtype and shape, asks the context for the output buffer (the
// executor serves it from its memory plan, so kernels never allocate activations themselves),
// and fills it. Kernels are registered per (domain, op type, opset range, dtype, device); one
// dispatcher picks them, so fusion in the executor can be switched off by registering fused ops
// or not. On a device other than the CPU the tensors a kernel sees hold that device's pointers
// (backend.h); everything else in this contract is the same.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusectl/graph/dtype.h"
#include "fusectl/graph/graph.h"

namespace fusectl::kernels {

// Dims as "[1,3,224,224]" ("[]" for a scalar): the one spelling of dims in kernel errors,
// executor and conformance messages and comparisons.
std::string formatDims(const std::vector<int64_t>& dims);

// A tensor at run time: concrete dims, contiguous row-major bytes. Either owns its storage or
// borrows it (an initializer's bytes, a slice of the executor's arena).
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> dims);  // owns zero-filled storage
  // Borrows `data`; `keep_alive` (may be null) keeps the owner alive.
  static HostTensor borrow(DType dtype, std::vector<int64_t> dims, const void* data,
                           std::shared_ptr<const void> keep_alive);
  // Borrows the tensor's buffer, or copies bytes a typed pointer cannot borrow (misaligned:
  // raw_data at an odd offset of a mapped file) and deferred bytes not computed yet, without
  // the tensor keeping them. A copy's identity() is the tensor's (identityOf).
  static HostTensor fromTensor(const Tensor& t);
  static bool borrowable(const Tensor& t);  // whether fromTensor(t) borrows rather than copies
  // What names a tensor's bytes: their address, or for deferred bytes their buffer's owner.
  static const void* identityOf(const Tensor& t);
  Tensor toTensor() const;                        // copies into a graph Tensor

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  size_t rank() const { return dims_.size(); }
  int64_t dim(size_t i) const { return dims_[i]; }
  int64_t numel() const;
  size_t byteSize() const;

  template <typename T> const T* data() const { return static_cast<const T*>(data_); }
  template <typename T> T* mutableData() { return static_cast<T*>(data_); }
  const void* raw() const { return data_; }
  void* mutableRaw() { return data_; }
  // Strings live beside the (empty) byte storage; only DType::String tensors use them.
  std::vector<std::string>& strings() { return strings_; }
  const std::vector<std::string>& strings() const { return strings_; }

  // Reinterprets the same bytes with new dims (same element count), sharing storage.
  HostTensor reshaped(std::vector<int64_t> dims) const;

  // A constant whose copy the executor does not hold: not made yet, or let go once every
  // kernel that reads it had packed a copy of its own (copied_inputs.h). The dtype and dims
  // stay, the bytes and raw() do not, and identity() still names the bytes, so that a kernel's
  // cache of what it packed from them stays valid. A kernel that must read them again asks
  // KernelContext::restoredInput() for them.
  static HostTensor released(const HostTensor& t);
  static HostTensor released(DType dtype, std::vector<int64_t> dims, const void* identity);
  bool isReleased() const { return !data_ && identity_; }
  // Whether this object is the only holder of its buffer: no copy, reshaped view or slice
  // shares it (what lets an executor hand the buffer to a node that overwrites it).
  bool soleOwnerOfStorage() const { return data_ && storage_ && storage_.use_count() == 1; }
  // What names these bytes across copies: the address of the bytes this tensor holds or copies
  // (fromTensor), or held before it was released.
  const void* identity() const { return identity_ ? identity_ : data_; }

  // A rank-4 tensor whose dims stay [N, C, H, W] while its bytes are laid out channels-last,
  // [N][H][W][C]: what a convolution writes for the next convolution to read where the executor
  // found that every reader of the value takes that layout (KernelInfo::reads_channels_last),
  // so that neither pays for moving channels across pixels. Only kernels that declared the
  // layout ever see such a tensor; reshaped() and toTensor() refuse one.
  bool channelsLast() const { return channels_last_; }
  void setChannelsLast(bool on) { channels_last_ = on; }

  // ONNX sequence(tensor) and optional(...) values travel in the executor's slots like
  // tensors, so the memory plan, the step loop and subgraph bodies carry them unchanged. One
  // is a HostTensor of another kind with dims [0] and no bytes (a kernel that expects a tensor
  // sees an empty one); its dtype() is the element dtype. An optional holding a value is that
  // value itself; only an empty optional has a kind of its own.
  enum class Kind : uint8_t { Tensor, Sequence, EmptyOptional };
  static HostTensor sequence(DType element_dtype, std::vector<HostTensor> items);
  static HostTensor emptyOptional(DType element_dtype, bool of_sequence);
  Kind kind() const { return kind_; }
  bool isTensor() const { return kind_ == Kind::Tensor; }
  bool isSequence() const { return kind_ == Kind::Sequence; }
  bool isEmptyOptional() const { return kind_ == Kind::EmptyOptional; }
  bool emptyOptionalOfSequence() const { return optional_of_sequence_; }
  const std::vector<HostTensor>& items() const;  // a sequence's tensors (none for the rest)

 private:
  friend class OutputAllocator;
  DType dtype_ = DType::Undefined;
  std::vector<int64_t> dims_;
  void* data_ = nullptr;
  const void* identity_ = nullptr;  // a copy's or a released tensor's: compared, never read
  std::shared_ptr<const void> storage_;
  std::vector<std::string> strings_;
  Kind kind_ = Kind::Tensor;
  bool optional_of_sequence_ = false;
  bool channels_last_ = false;
  std::shared_ptr<const std::vector<HostTensor>> items_;  // shared: sequences are immutable
};

// Serves output buffers; implemented by the executor's memory planner.
class OutputAllocator {
 public:
  virtual ~OutputAllocator() = default;
  // A buffer of byteSize(dtype, dims) bytes, uninitialised, valid until the value dies.
  virtual HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) = 0;
  // The buffer for output `index` of `node` (what KernelContext::allocateOutput calls). The
  // executor overrides it so that graph outputs get buffers of their own, never pooled ones.
  virtual HostTensor allocateFor(const Node& node, size_t index, DType dtype,
                                 const std::vector<int64_t>& dims) {
    return allocate(dtype, dims);
  }
  // The most bytes one tensor may take (--max-tensor-bytes): what a kernel that gathers its
  // output piece by piece (Loop's scan outputs) checks as it goes, not only at the end.
  virtual uint64_t maxTensorBytes() const { return UINT64_MAX; }

 protected:
  static HostTensor wrap(DType dtype, std::vector<int64_t> dims, void* data,
                         std::shared_ptr<const void> storage);
};

// What a kernel keeps between runs of one node inside one executor: weights packed for its
// GEMM, an algorithm it chose for the shapes. Derive from it; the executor owns it.
class KernelState {
 public:
  virtual ~KernelState() = default;
};

// Runs the subgraphs of the node being executed (If/Loop/Scan bodies); the executor implements
// it. A body needs what only the executor has (kernels chosen once per body, a memory plan, the
// values of every enclosing scope it captures), so a kernel reaches it through this one hook
// rather than by building executors itself: control-flow kernels stay plain functions of their
// context, and no other kernel or the rest of the contract changes.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // Runs `body` (a graph attribute of the current node) with its inputs bound in order to
  // `inputs` and its outer references to the enclosing scopes' values; returns its outputs.
  virtual std::vector<HostTensor> run(const Graph& body, const std::vector<HostTensor>& inputs) = 0;
};

// Brings the bytes of a released constant input (HostTensor::released) back into the tensor the
// node's context points to; the executor implements it (KernelContext::restoredInput).
class ConstantRestorer {
 public:
  virtual ~ConstantRestorer() = default;
  virtual void restore(const Node& node, size_t input) = 0;
};

class KernelContext {
 public:
  KernelContext(const Node& node, int64_t opset, std::vector<const HostTensor*> inputs,
                OutputAllocator& allocator, int num_threads);

  const Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  int numThreads() const { return num_threads_; }
  uint64_t maxTensorBytes() const { return allocator_.maxTensorBytes(); }

  size_t numInputs() const { return inputs_.size(); }
  // nullptr for an omitted optional input or an index past the end.
  const HostTensor* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  const HostTensor& requireInput(size_t i) const;  // throws naming the node when absent

  size_t numOutputs() const { return outputs_.size(); }
  bool outputWanted(size_t i) const;  // false for an omitted optional output
  HostTensor& allocateOutput(size_t i, DType dtype, const std::vector<int64_t>& dims);
  // An output that aliases an input's bytes (Reshape, Identity, Squeeze...): no copy.
  void setOutput(size_t i, HostTensor t);
  std::vector<HostTensor>& outputs() { return outputs_; }

  // Attribute helpers that read the node (defaults as in the ONNX spec are the caller's).
  int64_t attrInt(std::string_view name, int64_t def) const { return node_.attrInt(name, def); }
  float attrFloat(std::string_view name, float def) const { return node_.attrFloat(name, def); }
  std::string attrString(std::string_view name, std::string def) const {
    return node_.attrString(name, std::move(def));
  }
  std::vector<int64_t> attrInts(std::string_view name, std::vector<int64_t> def = {}) const {
    return node_.attrInts(name, std::move(def));
  }
  std::vector<float> attrFloats(std::string_view name, std::vector<float> def = {}) const {
    return node_.attrFloats(name, std::move(def));
  }

  // Whether input `i` is one of the model's initializers (not overridden by a run's input), so
  // that its bytes and address stay the same for every run of this executor: what makes it
  // safe to keep work derived from it (packed weights) in state().
  bool inputIsConstant(size_t i) const { return i < 64 && ((constant_inputs_ >> i) & 1u); }
  // This node's state from earlier runs of the same executor (nullptr on the first run, and
  // always when a kernel is called outside an executor); setState() keeps a new one.
  KernelState* state() const { return state_slot_ ? state_slot_->get() : local_state_.get(); }
  void setState(std::unique_ptr<KernelState> state) {
    (state_slot_ ? *state_slot_ : local_state_) = std::move(state);
  }
  // Called by the executor: the node's persistent state slot and which inputs are constant.
  void bindPersistentState(std::unique_ptr<KernelState>* slot, uint64_t constant_inputs) {
    state_slot_ = slot;
    constant_inputs_ = constant_inputs;
  }
  // Input `i` with its bytes: for a released constant (HostTensor::released) the executor
  // brings them back first, into the same tensor object input(i) points to. A kernel whose
  // packed copy no longer fits (another variant for new shapes, another micro-kernel) calls it
  // before it repacks. Fails, naming the node, when no executor can restore them.
  const HostTensor* restoredInput(size_t i);
  // Called by the executor: what brings released constant inputs back.
  void bindConstantRestorer(ConstantRestorer* restorer) { restorer_ = restorer; }

  // Whether this node may overwrite input `i`'s buffer. The executor offers it only where no one
  // can tell: this node is the value's last reader and reads it at no other input (a subgraph
  // capture included), the value is no graph input, graph output or initializer, and no other
  // value shares its buffer (a Reshape's alias). Never outside an executor.
  bool inputDonatable(size_t i) const { return i < 64 && ((donatable_inputs_ >> i) & 1u); }
  // Output `out`, of `dtype` and `dims`, as input `in`'s buffer, to be written in place, where
  // inputDonatable(in), the input has that dtype and those dims, and the output is no graph
  // output (those get buffers of their own); nullptr otherwise (allocate as usual). For kernels
  // that read each element of the input before they write the same element of the output (a
  // residual epilogue): the output then lands in lines the read just brought into cache rather
  // than in a buffer last touched long ago, and needs no buffer of its own.
  HostTensor* overwriteInput(size_t in, size_t out, DType dtype, const std::vector<int64_t>& dims);
  // Output `out` in the buffer of the first input overwriteInput allows, else in a buffer of its
  // own (allocateOutput). For elementwise kernels, which read each element of every input before
  // they write that element of the output: without it, an activation or a scale writes into a
  // pooled buffer last touched a whole run ago, and pays to bring it into cache first.
  HostTensor& allocateOutputOverInputs(size_t out, DType dtype, const std::vector<int64_t>& dims);
  // Whether output `out` was written into an input's buffer by overwriteInput (the executor
  // counts it as written, not as an alias).
  bool wroteInPlace(size_t out) const { return out < 64 && ((in_place_outputs_ >> out) & 1u); }
  // Called by the executor: which inputs this node may overwrite.
  void bindDonatableInputs(uint64_t inputs) { donatable_inputs_ = inputs; }

  // Whether the executor asks for output `i` channels-last (HostTensor::channelsLast): only
  // for outputs whose every reader declared it takes that layout, never for a graph output.
  // The kernel may still write it as usual; it marks what it wrote on the output tensor, and
  // readers go by that mark. Never outside an executor.
  bool channelsLastWanted(size_t i) const {
    return i < 64 && ((channels_last_outputs_ >> i) & 1u);
  }
  // Called by the executor: which outputs it asks for channels-last.
  void bindChannelsLastOutputs(uint64_t outputs) { channels_last_outputs_ = outputs; }

  // Runs the node's subgraph held by graph attribute `attr` (see SubgraphRunner); fails naming
  // the node when the attribute is missing or the kernel runs outside an executor.
  std::vector<HostTensor> runSubgraph(std::string_view attr,
                                      const std::vector<HostTensor>& inputs) const;
  void bindSubgraphRunner(SubgraphRunner* runner) { subgraph_runner_ = runner; }

  // Throws fusectl::Error(InvalidInput) "node 'X' (Op): <message>".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const Node& node_;
  int64_t opset_;
  std::vector<const HostTensor*> inputs_;
  std::vector<HostTensor> outputs_;
  OutputAllocator& allocator_;
  int num_threads_;
  std::unique_ptr<KernelState>* state_slot_ = nullptr;
  std::unique_ptr<KernelState> local_state_;
  uint64_t constant_inputs_ = 0;
  uint64_t donatable_inputs_ = 0;
  uint64_t in_place_outputs_ = 0;
  uint64_t channels_last_outputs_ = 0;
  ConstantRestorer* restorer_ = nullptr;
  SubgraphRunner* subgraph_runner_ = nullptr;
};

using KernelFn = std::function<void(KernelContext&)>;

// Where a kernel runs and where the bytes of its tensors live. Ids from FirstCustom on are free
// for backends defined outside libkernels (the tests' fake device is one).
enum class Device : uint8_t { Cpu = 0, Cuda = 1, FirstCustom = 128 };
std::string deviceName(Device device);  // "cpu", "cuda", "device 128"

// The dtype a node's kernel is chosen by: its first present input's, else its first output's
// (ops without inputs, such as Constant); Undefined when the graph does not declare it.
DType kernelDType(const Node& node);

// Fields after `fn` have defaults, so `{domain, op, since, until, fn}` registers a CPU kernel for
// every dtype, as all built-in kernels do (they dispatch on dtype themselves, cpu/dtype_dispatch).
struct KernelInfo {
  std::string domain;  // "" for ai.onnx
  std::string op_type;
  int64_t since_opset = 1;   // first opset this kernel implements
  int64_t until_opset = 1000;  // last opset (inclusive)
  KernelFn fn;
  DType dtype = DType::Undefined;  // the kernelDType() it handles; Undefined = any dtype
  Device device = Device::Cpu;
  // Inputs (bit i = input i) a device kernel reads on the host: shapes, axes, starts and ends,
  // which decide what is launched. The executor hands it a host copy of each (copied over once
  // per value, like a fallback's inputs); the rest of its inputs stay on the device. Ignored
  // for CPU kernels, whose inputs are all on the host.
  uint64_t host_inputs = 0;
  // Inputs whose bytes the kernel never reads, only their dtype and dims (Shape, Size): a
  // CPU fallback gets them from whichever side holds them, and nothing is copied. The tensor
  // it sees may hold device pointers, which it must not touch.
  uint64_t dims_only_inputs = 0;
  // For a device kernel that takes only some nodes of its (op, dtype): whether it takes this
  // one, from the node's attributes and declared types (Cast's target, Where's value dtype).
  // A node it declines runs on the CPU. Empty: every node.
  std::function<bool(const Node&)> accepts = {};
  // The channels-last layout (HostTensor::channelsLast) of a rank-4 value between two nodes:
  // whether this kernel reads input `i` of this node in that layout (it must then handle a
  // tensor marked channels-last there, whatever its path), and whether it can write output `i`
  // that way when asked (KernelContext::channelsLastWanted). The executor stores a value
  // channels-last only where its producer writes it and every reader reads it so; a kernel
  // says yes only where that layout pays for it. Empty: never. CPU kernels only.
  std::function<bool(const Node&, size_t input)> reads_channels_last = {};
  std::function<bool(const Node&, size_t output)> writes_channels_last = {};
};

class KernelRegistry {
 public:
  static KernelRegistry& global();  // every built-in kernel registered
  void add(KernelInfo info);
  // The kernel for this op at this opset, dtype (kernelDType of the node) and device, or
  // nullptr. An entry for exactly `dtype` wins over an any-dtype one; an unknown dtype
  // (Undefined) finds only any-dtype entries. Among the rest the latest since_opset, then the
  // last added, wins, which lets a test or an optimized kernel override a reference one.
  const KernelInfo* find(std::string_view domain, std::string_view op_type, int64_t opset,
                         DType dtype = DType::Undefined, Device device = Device::Cpu) const;
  std::vector<std::string> opTypes(Device device = Device::Cpu) const;  // sorted "domain::op"/"op"

 private:
  std::vector<KernelInfo> kernels_;
};

// Each kernel file group registers through a function called from registerAllKernels() rather
// than through static initialisers, which a static-library link would silently drop.
void registerAllKernels(KernelRegistry& registry);
// Reshape, Flatten, Squeeze and Unsqueeze relabel their input's bytes without reading them (an
// alias), so the CPU functions serve any device that brings their shape or axes input to the
// host (KernelInfo::host_inputs): this registers them for `device` and each of `dtypes`.
void registerAliasKernels(KernelRegistry& registry, Device device, const std::vector<DType>& dtypes);

}  // namespace fusectl::kernels
