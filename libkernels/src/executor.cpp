// The executor: kernel resolution (with CPU fallbacks), input binding, and the step loop with
// its host/device copies.
#include "fusectl/kernels/executor.h"

#include "fusectl/graph/buffer_residency.h"
#include "fusectl/kernels/copied_inputs.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "fusectl/graph/error.h"
#include "fusectl/graph/tensor_limit.h"
#include "fusectl/kernels/compare.h"

namespace fusectl::kernels {

namespace {

// Why the run being recorded cannot be: thrown inside it, caught by tryRecording.
struct RecordingRefused {
  std::string reason;
};

using Clock = std::chrono::steady_clock;

std::string nodePrefix(const Node& n) { return "node '" + n.label() + "' (" + n.opType() + "): "; }

std::string typeText(DType dtype, const std::vector<int64_t>& dims) {
  return std::string(dtypeName(dtype)) + formatDims(dims);
}

// A symbolic dim that is one plain name ("batch"), as opposed to an expression ("2*batch").
bool isPlainSymbol(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
          c == ':' || c == '/')) {
      return false;
    }
  }
  return true;
}

}  // namespace

// Graph outputs get unpooled buffers (they outlive the run); everything else is pooled.
class Executor::Allocator : public OutputAllocator {
 public:
  Allocator(BufferPool& pool, uint64_t max_bytes) : pool_(pool), max_bytes_(max_bytes) {}

  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    return make(dtype, dims, false, nullptr);
  }
  uint64_t maxTensorBytes() const override { return max_bytes_; }
  HostTensor allocateFor(const Node& node, size_t index, DType dtype,
                         const std::vector<int64_t>& dims) override {
    const Value* v = node.output(index);
    return make(dtype, dims, v && v->isGraphOutput(), v);
  }

 private:
  HostTensor make(DType dtype, const std::vector<int64_t>& dims, bool unpooled, const Value* v) {
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d < 0) throwInvalid("negative dimension " + std::to_string(d));
      if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
        throwInvalid("element count of " + formatDims(dims) + " overflows int64");
      }
      n *= d;
    }
    if (dtype == DType::Undefined) throwInternal("output allocated with an undefined dtype");
    // Past 2^59 elements even the byte count could overflow; such a tensor is over any limit.
    const bool huge = n > (std::numeric_limits<int64_t>::max() >> 4);
    const size_t bytes = huge ? std::numeric_limits<size_t>::max() : dtypeStorageBytes(dtype, n);
    if (bytes > max_bytes_) {
      const std::string what = v ? "output '" + v->name() + "': " : std::string("a tensor: ");
      throw Error(ErrorKind::InvalidInput,
                  what + (huge ? std::string(dtypeName(dtype)) + " dims " + formatDims(dims) +
                                     " take more than 2^59 elements, more than the limit of " +
                                     std::to_string(max_bytes_) + " (--max-tensor-bytes)"
                               : tensorOverLimitMessage(dtype, dims, bytes, max_bytes_)));
    }
    std::shared_ptr<void> buffer = unpooled ? pool_.acquireUnpooled(bytes) : pool_.acquire(bytes);
    void* data = buffer.get();
    return wrap(dtype, dims, data, std::move(buffer));
  }

  BufferPool& pool_;
  uint64_t max_bytes_;
};

// The values of one running graph, for the outer references of its bodies.
struct Executor::Scope {
  const Executor* executor = nullptr;
  const std::vector<HostTensor>* slots = nullptr;
  const std::vector<HostTensor>* host = nullptr;  // host copies, on a device (else empty)
  const Scope* parent = nullptr;
};

// A profiled run's body node times (ExecutionStats::body_node_times), one record per node and
// parent: a Loop of a thousand iterations adds to its body's records, not a thousand more.
struct Executor::BodyTimes {
  std::vector<BodyNodeTime>* records = nullptr;
  std::unordered_map<std::string, size_t> index;  // parent + '\n' + node label -> record

  void add(const std::string& parent, NodeTime&& t) {
    auto [it, fresh] = index.emplace(parent + '\n' + t.node, records->size());
    if (fresh) {
      records->push_back({parent, std::move(t), 1});
      return;
    }
    BodyNodeTime& r = (*records)[it->second];
    r.time.seconds += t.seconds;
    r.time.output_bytes += t.output_bytes;
    ++r.calls;
  }
};

class Executor::BodyRunner : public SubgraphRunner {
 public:
  BodyRunner(Executor& owner, const Scope& scope, const Node& node, BodyTimes* times,
             const std::string& parent)
      : owner_(owner), scope_(scope), node_(node), times_(times), parent_(parent) {}
  std::vector<HostTensor> run(const Graph& body, const std::vector<HostTensor>& inputs) override {
    auto it = owner_.bodies_.find(&body);
    if (it == owner_.bodies_.end()) throwInternal("a subgraph the executor did not prepare");
    if (!times_) return it->second->runBody(inputs, scope_, nullptr, {});
    std::string path = parent_.empty() ? std::string() : parent_ + " > ";
    path += node_.label() + "/" + attributeHolding(body);
    return it->second->runBody(inputs, scope_, times_, path);
  }

 private:
  // The name of the node's attribute that holds `body` (a Loop's "body", an If's branches).
  std::string attributeHolding(const Graph& body) const {
    for (const Attribute& a : node_.attributes()) {
      if (a.g.get() == &body) return a.name;
      for (const auto& g : a.graphs)
        if (g.get() == &body) return a.name;
    }
    return body.name;
  }

  Executor& owner_;
  const Scope& scope_;
  const Node& node_;
  BodyTimes* times_;
  const std::string& parent_;
};

namespace {
// Nested bodies each hold an executor that builds its own bodies: a bound keeps a hostile
// model from exhausting the stack.
constexpr int kMaxSubgraphDepth = 64;
}  // namespace

// The model's executor and each body's: a body gets options without a backend (see
// prepareBodies), so it owns a CPU backend.
Executor::Executor(const Model& model, const Graph& graph, ExecutorOptions options, int depth)
    : model_(model), graph_(graph), options_(options) {
  num_threads_ = options_.num_threads > 0
                     ? options_.num_threads
                     : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  backend_ = options_.backend;
  if (!backend_) {
    own_backend_ = std::make_unique<CpuBackend>(
        options_.registry ? *options_.registry : KernelRegistry::global());
    backend_ = own_backend_.get();
  }
  pool_ = BufferPool(backend_->allocator());
  plan_ = buildMemoryPlan(graph_);
  resolveKernels();
  planChannelsLast();
  initializers_.resize(plan_.values.size());
  countReleasableUses();
  for (const Value* v : graph_.initializers()) {
    const int s = plan_.slot(v);
    if (s >= 0 && v->initializer()) {
      const Tensor& src = *v->initializer();
      try {
        // A copy that is let go once packed is made when a node first reads it.
        initializers_[s] = constant_uses_[static_cast<size_t>(s)] > 0
                               ? HostTensor::released(src.dtype(), src.dims(),
                                                      HostTensor::identityOf(src))
                               : HostTensor::fromTensor(src);
      } catch (const Error& e) {
        throw Error(e.kind(), "initializer '" + v->name() + "': " + e.what());
      }
    }
  }
  prepareBodies(depth);
}

// An initializer's own copy (fromTensor copies bytes it cannot borrow: raw_data at an odd offset
// of a mapped file, which is most weights of an exported model) is dead weight once every kernel
// that reads it has packed a copy of its own; ONNX Runtime drops prepacked initializers alike.
// Such a copy is made when a node first needs it and let go when its last use has copied it,
// so that a model's weights are held about once at any moment, not as file pages, copies and
// packed panels at the same time. Borrowed bytes belong to the model: a file mapping's pages are
// let go instead (releaseResidentPages), which costs at most a re-read. An initializer is
// copied up front and kept when it is a graph output, a subgraph reads it, a node reads it as
// an input past the 64th, or the device is not the host's.
void Executor::countReleasableUses() {
  constant_uses_.assign(plan_.values.size(), 0);
  copied_uses_.assign(plan_.values.size(), {});
  if (!backend_->sharesHostMemory()) return;
  std::vector<bool> pinned(plan_.values.size(), false);
  for (const Value* v : graph_.outputs()) {
    if (plan_.slot(v) >= 0) pinned[static_cast<size_t>(plan_.slot(v))] = true;
  }
  for (const Node* n : plan_.order) {
    for (const Value* v : n->implicitInputs()) {
      if (plan_.slot(v) >= 0) pinned[static_cast<size_t>(plan_.slot(v))] = true;
    }
    for (size_t i = 0; i < n->numInputs(); ++i) {
      const int s = n->input(i) ? plan_.slot(n->input(i)) : -1;
      if (s < 0) continue;
      if (i >= 64) pinned[static_cast<size_t>(s)] = true;
      ++constant_uses_[static_cast<size_t>(s)];
    }
  }
  for (size_t s = 0; s < constant_uses_.size(); ++s) {
    const Tensor* src = plan_.values[s]->initializer();
    // A tensor short of bytes stays with fromTensor, which says so naming the initializer.
    const bool copied = src && src->dtype() != DType::String && src->byteSize() > 0 &&
                        src->byteSize() >= dtypeStorageBytes(src->dtype(), src->numel()) &&
                        !HostTensor::borrowable(*src) && HostTensor::identityOf(*src);
    if (pinned[s] || !copied) constant_uses_[s] = 0;
  }
}

// Once a kernel keeps its own copy of constant inputs (packed weights), the originals need not
// stay in memory (copied_inputs.h): a file mapping's pages are dropped at once, an own copy when
// the last of its uses has copied it.
void Executor::noteCopiedInputs(size_t step, const KernelState* state, uint64_t constant_inputs,
                                std::vector<HostTensor>& slots) {
  const auto* copied = dynamic_cast<const CopiedConstantInputs*>(state);
  const uint64_t bits = copied ? copied->copied_inputs & constant_inputs : 0;
  const Node& node = *plan_.order[step];
  for (size_t i = 0; i < node.numInputs() && i < 64; ++i) {
    if (!((constant_inputs >> i) & 1u)) continue;
    const Value* v = node.input(i);
    if (!v || !v->initializer()) continue;
    const bool copies = (bits >> i) & 1u;
    if (copies) releaseResidentPages(v->initializer()->buffer());
    const auto s = static_cast<size_t>(plan_.slot(v));
    if (constant_uses_[s] == 0) continue;
    std::vector<uint64_t>& uses = copied_uses_[s];
    const uint64_t use = (uint64_t{step} << 6) | i;
    const auto it = std::find(uses.begin(), uses.end(), use);
    if (!copies) {  // a new state that reads the input itself
      if (it != uses.end()) uses.erase(it);
      continue;
    }
    if (it == uses.end()) uses.push_back(use);
    if (uses.size() < constant_uses_[s] || initializers_[s].isReleased()) continue;
    initializers_[s] = HostTensor::released(initializers_[s]);
    slots[s] = initializers_[s];
  }
}

bool Executor::useHasCopy(size_t s, size_t step, size_t input) const {
  const std::vector<uint64_t>& uses = copied_uses_[s];
  return std::find(uses.begin(), uses.end(), (uint64_t{step} << 6) | input) != uses.end();
}

void Executor::restoreConstant(size_t s, std::vector<HostTensor>& slots) {
  if (!initializers_[s].isReleased()) return;
  // The copy has the same identity(), so the uses' packed copies stay valid.
  initializers_[s] = HostTensor::fromTensor(*plan_.values[s]->initializer());
  slots[s] = initializers_[s];
}

void Executor::setProfiling(bool on) {
  options_.profile = on;
  for (auto& [graph, body] : bodies_) body->setProfiling(on);
}

uint64_t Executor::releasedConstantBytes() const {
  uint64_t bytes = 0;
  for (size_t s = 0; s < constant_uses_.size(); ++s) {
    if (constant_uses_[s] && initializers_[s].isReleased()) bytes += initializers_[s].byteSize();
  }
  return bytes;
}

void Executor::prepareBodies(int depth) {
  // Bodies run on the CPU: the control-flow kernel that calls them is a CPU kernel, and a body
  // is small next to the copies a device would need per iteration.
  ExecutorOptions body_options = options_;
  body_options.backend = nullptr;
  for (const Node* n : plan_.order) {
    n->forEachSubgraph([&](const Graph& body) {
      if (depth + 1 > kMaxSubgraphDepth) {
        throwInvalid(nodePrefix(*n) + "subgraphs nest deeper than " +
                     std::to_string(kMaxSubgraphDepth) + " levels");
      }
      if (!bodies_.count(&body)) {
        bodies_.emplace(&body, std::unique_ptr<Executor>(
                                   new Executor(model_, body, body_options, depth + 1)));
      }
    });
  }
}

std::vector<HostTensor> Executor::runBody(const std::vector<HostTensor>& inputs,
                                          const Scope& outer, BodyTimes* times,
                                          const std::string& parent) {
  std::vector<HostTensor> slots(plan_.values.size());
  for (size_t s = 0; s < initializers_.size(); ++s) {
    if (initializers_[s].dtype() != DType::Undefined) slots[s] = initializers_[s];
  }
  const auto& formal = graph_.inputs();
  if (inputs.size() != formal.size()) {
    throwInvalid("subgraph '" + graph_.name + "' takes " + std::to_string(formal.size()) +
                 " inputs but was given " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < formal.size(); ++i) {
    const int s = plan_.slot(formal[i]);
    if (s >= 0) slots[s] = inputs[i];
  }
  for (const Value* ref : graph_.outerRefs()) {
    const int s = plan_.slot(ref);
    if (s < 0) continue;
    // The importer captures through every graph in between, so the parent usually holds the
    // value; a clone may point further out, hence the walk.
    const Value* target = ref->outerValue();
    for (const Scope* scope = &outer; scope && target; scope = scope->parent) {
      const int os = scope->executor->plan_.slot(target);
      if (os < 0) continue;
      const HostTensor* t = nullptr;
      if (!scope->host->empty() && (*scope->host)[os].dtype() != DType::Undefined) {
        t = &(*scope->host)[os];
      } else if (scope->host->empty()) {
        t = &(*scope->slots)[os];
      }
      if (t && t->dtype() != DType::Undefined) slots[s] = *t;
      break;
    }
    if (slots[s].dtype() == DType::Undefined) {
      throwInvalid("subgraph '" + graph_.name + "': outer value '" + ref->name() +
                   "' is not available");
    }
  }
  std::vector<HostTensor> host;
  ExecutionStats copies;
  uint64_t written = 0;
  if (times && options_.profile) {
    ExecutionStats body_stats;
    runSteps(slots, host, &outer, &body_stats, copies, written, times, parent);
    for (NodeTime& t : body_stats.node_times) times->add(parent, std::move(t));
  } else {
    runSteps(slots, host, &outer, nullptr, copies, written);
  }
  std::vector<HostTensor> outputs;
  outputs.reserve(graph_.outputs().size());
  for (const Value* v : graph_.outputs()) {
    const int s = plan_.slot(v);
    if (s < 0 || slots[s].dtype() == DType::Undefined) {
      throwInvalid("subgraph '" + graph_.name + "': output '" + v->name() + "' was not produced");
    }
    outputs.push_back(slots[s]);
  }
  return outputs;
}

Executor::Executor(const Model& model, ExecutorOptions options)
    : Executor(model, *model.graph, options, 0) {}

Executor::~Executor() = default;

void Executor::resolveKernels() {
  const Device device = backend_->device();
  const bool may_fall_back = !backend_->sharesHostMemory();
  const KernelRegistry& cpu_kernels =
      options_.registry ? *options_.registry : KernelRegistry::global();

  struct Choice {
    const KernelInfo* kernel = nullptr;  // the device's (the CPU's when it is the device)
    const KernelInfo* fallback = nullptr;  // the CPU's, on another device
  };
  // One registry lookup per distinct (domain, op, opset, dtype), not per node.
  std::map<std::tuple<std::string, std::string, int64_t, DType>, Choice> cache;
  std::vector<const Node*> unsupported;
  std::set<std::string> unsupported_ops;
  kernels_.reserve(plan_.order.size());
  opsets_.reserve(plan_.order.size());
  if (may_fall_back) on_cpu_.reserve(plan_.order.size());
  for (const Node* n : plan_.order) {
    const int64_t opset = model_.opsetVersion(n->domain());
    if (opset <= 0) {
      throwInvalid(nodePrefix(*n) + "the model imports no opset for domain '" +
                   (n->domain().empty() ? std::string("ai.onnx") : n->domain()) + "'");
    }
    const DType dtype = kernelDType(*n);
    auto key = std::make_tuple(n->domain(), n->opType(), opset, dtype);
    auto it = cache.find(key);
    if (it == cache.end()) {
      Choice c;
      c.kernel = backend_->kernels().find(n->domain(), n->opType(), opset, dtype, device);
      if (may_fall_back) {
        c.fallback = cpu_kernels.find(n->domain(), n->opType(), opset, dtype, Device::Cpu);
      }
      it = cache.emplace(key, c).first;
    }
    const KernelInfo* kernel = it->second.kernel;
    if (kernel && kernel->accepts && !kernel->accepts(*n)) kernel = nullptr;
    const bool on_cpu = !kernel && it->second.fallback;
    if (on_cpu) kernel = it->second.fallback;
    if (!kernel) {
      unsupported.push_back(n);
      unsupported_ops.insert((n->domain().empty() ? "" : n->domain() + "::") + n->opType() +
                             "-" + std::to_string(opset));
    }
    kernels_.push_back(kernel);
    opsets_.push_back(opset);
    kernel_states_.emplace_back();
    if (may_fall_back) {
      on_cpu_.push_back(on_cpu);
      fallback_steps_ += on_cpu ? 1 : 0;
    }
  }
  if (!unsupported.empty()) {
    const Node& n = *unsupported.front();
    const std::string where = may_fall_back ? deviceName(device) + " or CPU" : "CPU";
    std::string msg = nodePrefix(n) + "no " + where + " kernel for " +
                      (n.domain().empty() ? "" : n.domain() + "::") + n.opType() + " at opset " +
                      std::to_string(model_.opsetVersion(n.domain()));
    if (unsupported.size() > 1) {
      msg += " (" + std::to_string(unsupported.size()) + " nodes lack a kernel; ops:";
      for (const std::string& op : unsupported_ops) msg += " " + op;
      msg += ")";
    }
    throwUnsupported(msg);
  }
  if (may_fall_back) device_initializers_.resize(plan_.values.size());
}

void Executor::planChannelsLast() {
  channels_last_outputs_.assign(plan_.order.size(), 0);
  if (!options_.channels_last || std::getenv("FUSECTL_NO_CHANNELS_LAST") ||
      backend_->device() != Device::Cpu) {
    return;
  }
  std::unordered_map<const Node*, size_t> step_of;
  for (size_t step = 0; step < plan_.order.size(); ++step) step_of[plan_.order[step]] = step;
  // A value a subgraph reads is read by kernels this executor does not choose.
  std::set<const Value*> captured;
  for (const Node* n : plan_.order)
    captured.insert(n->implicitInputs().begin(), n->implicitInputs().end());
  for (size_t step = 0; step < plan_.order.size(); ++step) {
    const Node& node = *plan_.order[step];
    const KernelInfo* producer = kernels_[step];
    if (!producer || !producer->writes_channels_last) continue;
    for (size_t o = 0; o < node.numOutputs() && o < 64; ++o) {
      const Value* v = node.output(o);
      if (!v || v->isGraphOutput() || captured.count(v) || !producer->writes_channels_last(node, o))
        continue;
      bool every_reader = false;
      for (const Node* reader : v->consumers()) {
        auto it = step_of.find(reader);
        const KernelInfo* k = it == step_of.end() ? nullptr : kernels_[it->second];
        every_reader = k && k->reads_channels_last;
        for (size_t i = 0; every_reader && i < reader->numInputs(); ++i) {
          if (reader->input(i) == v) every_reader = k->reads_channels_last(*reader, i);
        }
        if (!every_reader) break;
      }
      if (every_reader) channels_last_outputs_[step] |= uint64_t{1} << o;
    }
  }
}

std::vector<const Value*> Executor::channelsLastValues() const {
  std::vector<const Value*> values;
  for (size_t step = 0; step < channels_last_outputs_.size(); ++step) {
    const Node& node = *plan_.order[step];
    for (size_t o = 0; o < node.numOutputs() && o < 64; ++o) {
      if ((channels_last_outputs_[step] >> o) & 1u) values.push_back(node.output(o));
    }
  }
  return values;
}

void Executor::bindInputs(const std::vector<NamedTensor>& inputs,
                          std::vector<HostTensor>& slots) const {
  for (size_t s = 0; s < initializers_.size(); ++s) {
    if (initializers_[s].dtype() != DType::Undefined) slots[s] = initializers_[s];
  }

  std::unordered_map<std::string_view, const NamedTensor*> given;
  for (const NamedTensor& in : inputs) {
    if (!given.emplace(in.name, &in).second) throwInvalid("input '" + in.name + "' given twice");
    const Value* v = graph_.findValue(in.name);
    if (!v || !v->isGraphInput()) {
      std::string names;
      for (const Value* gi : graph_.inputs()) {
        if (!gi->isInitializer()) names += (names.empty() ? "" : ", ") + gi->name();
      }
      throwInvalid("unknown input '" + in.name + "'; the graph's inputs are: " +
                   (names.empty() ? "(none)" : names));
    }
  }

  // symbol -> (value, input that bound it)
  std::unordered_map<std::string, std::pair<int64_t, std::string>> symbols;
  for (const Value* v : graph_.inputs()) {
    auto it = given.find(v->name());
    if (it == given.end()) {
      if (v->isInitializer()) continue;
      throwInvalid("missing input '" + v->name() + "' (" + v->type.str() + ")");
    }
    const HostTensor& t = it->second->tensor;
    const std::string what = "input '" + v->name() + "'";
    if (t.dtype() == DType::Undefined) throwInvalid(what + " has no data");
    if (v->dtype() != DType::Undefined && t.dtype() != v->dtype()) {
      throwInvalid(what + " is " + typeText(t.dtype(), t.dims()) + " but the graph declares " +
                   v->type.str());
    }
    const Shape& shape = v->shape();
    if (shape.hasRank()) {
      bool ok = shape.rank() == t.rank();
      for (size_t d = 0; ok && d < shape.rank(); ++d) {
        const Dim& dim = shape[d];
        if (dim.isStatic() && dim.value() != t.dim(d)) ok = false;
      }
      if (!ok) {
        throwInvalid(what + " has shape " + formatDims(t.dims()) + " but the graph declares " +
                     v->type.str());
      }
      for (size_t d = 0; d < shape.rank(); ++d) {
        const Dim& dim = shape[d];
        if (!dim.isSymbolic() || !isPlainSymbol(dim.symbol())) continue;
        auto [sit, inserted] = symbols.emplace(dim.symbol(), std::make_pair(t.dim(d), v->name()));
        if (!inserted && sit->second.first != t.dim(d)) {
          throwInvalid(what + " has " + dim.symbol() + " = " + std::to_string(t.dim(d)) +
                       " (dim " + std::to_string(d) + ") but input '" + sit->second.second +
                       "' has " + dim.symbol() + " = " + std::to_string(sit->second.first));
        }
      }
    }
    if (t.dtype() != DType::String && t.byteSize() > 0 && t.raw() == nullptr) {
      throwInvalid(what + " has no data");
    }
    slots[plan_.slot(v)] = t;
  }
}

void Executor::reuseDeviceInitializers(const std::vector<HostTensor>& host,
                                       std::vector<HostTensor>& slots) const {
  for (size_t s = 0; s < device_initializers_.size(); ++s) {
    const HostTensor& kept = device_initializers_[s];
    if (kept.dtype() != DType::Undefined && isInitializer(static_cast<int>(s), host[s])) {
      slots[s] = kept;
    }
  }
}

bool Executor::isInitializer(int s, const HostTensor& t) const {
  const HostTensor& init = initializers_[s];
  return init.dtype() != DType::Undefined && t.identity() == init.identity() &&
         t.dims() == init.dims();
}

void Executor::bringOver(int s, bool to_host, bool pooled, std::vector<HostTensor>& device,
                         std::vector<HostTensor>& host, ExecutionStats& stats) {
  HostTensor& dst = to_host ? host[s] : device[s];
  const HostTensor& src = to_host ? device[s] : host[s];
  if (dst.dtype() != DType::Undefined || src.dtype() == DType::Undefined) return;
  if (recording_run_) {
    throw RecordingRefused{"'" + plan_.values[static_cast<size_t>(s)]->name() +
                           "' would be copied to the " + (to_host ? "host" : "device") +
                           " during the run"};
  }
  if (src.dtype() == DType::String) {  // strings never leave the host
    dst = src;
    return;
  }
  const size_t bytes = src.byteSize();
  BufferPool& pool = to_host ? host_pool_ : pool_;
  std::shared_ptr<void> buffer = pooled ? pool.acquire(bytes) : pool.acquireUnpooled(bytes);
  if (to_host) {
    backend_->copyToHost(buffer.get(), src.raw(), bytes);
    ++stats.copies_to_host;
  } else {
    backend_->copyFromHost(buffer.get(), src.raw(), bytes);
    ++stats.copies_to_device;
  }
  stats.copied_bytes += bytes;
  void* data = buffer.get();
  dst = HostTensor::borrow(src.dtype(), src.dims(), data, std::move(buffer));
  if (!to_host && isInitializer(s, src)) device_initializers_[s] = dst;
}

namespace {

// The inputs' names, dtypes and dims, in name order: a recording replays only runs alike.
std::string inputSignature(const std::vector<NamedTensor>& inputs) {
  std::vector<std::string> parts;
  parts.reserve(inputs.size());
  for (const NamedTensor& in : inputs) {
    parts.push_back(in.name + ":" + typeText(in.tensor.dtype(), in.tensor.dims()));
  }
  std::sort(parts.begin(), parts.end());
  std::string signature;
  for (const std::string& p : parts) signature += p + ";";
  return signature;
}

}  // namespace

// A recorded run (ExecutorOptions::capture_graph): what the device replays, and the buffers it
// reads and writes, which must stay where they were when it was recorded.
struct Executor::Recording {
  struct Binding {
    std::string name;
    int slot = -1;
    DType dtype = DType::Undefined;
    std::vector<int64_t> dims;
    size_t bytes = 0;
    std::shared_ptr<void> pinned;  // the host side of the copy inside the recording
    HostTensor device;             // holds the device buffer as long as the recording
  };
  std::string signature;
  std::vector<Binding> inputs;   // as given when recorded
  std::vector<Binding> outputs;  // the graph's, in order
  std::unique_ptr<Backend::RecordedRun> run;
  ExecutionStats figures;  // of the queued run it was recorded after (no node times)
};

std::vector<NamedTensor> Executor::run(const std::vector<NamedTensor>& inputs,
                                       ExecutionStats* stats) {
  if (!options_.capture_graph || options_.profile) return runQueued(inputs, stats);
  const std::string signature = inputSignature(inputs);
  if (recording_ && recording_->signature == signature) return replay(*recording_, inputs, stats);
  if (!recording_ && graph_refusal_.empty()) graph_refusal_ = staticRecordingRefusal();
  // Two runs alike before recording: the first may set up what a recording cannot contain
  // (weights uploaded, kernel states built, the pool and workspace grown to their size).
  const bool record_now = !recording_ && graph_refusal_.empty() && signature == last_signature_;
  last_signature_ = signature;
  ExecutionStats local;
  ExecutionStats* run_stats = stats ? stats : (record_now ? &local : nullptr);
  std::vector<NamedTensor> outputs = runQueued(inputs, run_stats);
  if (record_now) tryRecording(inputs, outputs, *run_stats);
  if (stats) {
    if (recording_ && record_now) {
      stats->device_graph = "recorded after this run (its replay agreed with it)";
    } else if (recording_) {
      stats->device_graph = "not used: the inputs differ from the recorded run's (" +
                            recording_->signature + ")";
    } else if (!graph_refusal_.empty()) {
      stats->device_graph = "not used: " + graph_refusal_;
    } else {
      stats->device_graph = "not recorded yet: the next run with these inputs' dims records one";
    }
  }
  return outputs;
}

void Executor::forgoRecording(const std::string& reason) {
  recording_.reset();
  graph_refusal_ = reason;
}

std::string Executor::staticRecordingRefusal() const {
  if (!backend_->canCapture()) {
    return "the " + deviceName(backend_->device()) + " backend does not record runs";
  }
  if (fallback_steps_ > 0) {
    const Node* first = nullptr;
    for (size_t step = 0; step < on_cpu_.size() && !first; ++step) {
      if (on_cpu_[step]) first = plan_.order[step];
    }
    return std::to_string(fallback_steps_) + (fallback_steps_ == 1 ? " node runs" : " nodes run") +
           " on the CPU (first: '" + (first ? first->label() : std::string("?")) + "' (" +
           (first ? first->opType() : std::string()) + "))";
  }
  if (!bodies_.empty()) return "the graph has subgraphs (control flow), which run on the CPU";
  return "";
}

void Executor::tryRecording(const std::vector<NamedTensor>& inputs,
                            const std::vector<NamedTensor>& expected,
                            const ExecutionStats& queued) {
  std::unique_ptr<Recording> recording;
  try {
    recording = record(inputs, expected);
  } catch (const RecordingRefused& e) {
    graph_refusal_ = e.reason;
    return;
  } catch (const std::exception& e) {
    graph_refusal_ = std::string("recording failed: ") + e.what();
    return;
  }
  recording->figures = queued;
  recording->figures.node_times.clear();
  recording->figures.body_node_times.clear();
  std::vector<NamedTensor> replayed;
  try {
    replayed = replay(*recording, inputs, nullptr);
  } catch (const std::exception& e) {
    graph_refusal_ = std::string("the recorded run failed: ") + e.what();
    return;
  }
  // The check that makes a recording safe to use: it must compute what the queued run did.
  const Comparison agreement = compareRunOutputs(expected, replayed, Tolerance{});
  if (!agreement.passed) {
    std::string detail;
    for (const OutputComparison& o : agreement.outputs) {
      if (!o.passed) {
        detail = "output '" + o.name + "': " + o.detail;
        break;
      }
    }
    graph_refusal_ = "the recorded run's outputs differ from the queued run's (" + detail + ")";
    return;
  }
  recording_ = std::move(recording);
}

std::unique_ptr<Executor::Recording> Executor::record(const std::vector<NamedTensor>& inputs,
                                                      const std::vector<NamedTensor>& expected) {
  auto recording = std::make_unique<Recording>();
  recording->signature = inputSignature(inputs);
  std::vector<HostTensor> slots(plan_.values.size());
  std::vector<HostTensor> host(slots.size());
  bindInputs(inputs, host);
  reuseDeviceInitializers(host, slots);
  // Buffers allocated before recording starts: an allocation while recording is not part of
  // the recording, and on some devices not allowed during it.
  for (const NamedTensor& in : inputs) {
    const int s = plan_.slot(graph_.findValue(in.name));
    if (s < 0) continue;  // an input no node reads
    if (in.tensor.dtype() == DType::String) {
      throw RecordingRefused{"input '" + in.name + "' is a string tensor, which stays on the host"};
    }
    Recording::Binding b;
    b.name = in.name;
    b.slot = s;
    b.dtype = in.tensor.dtype();
    b.dims = in.tensor.dims();
    b.bytes = in.tensor.byteSize();
    b.pinned = backend_->allocatePinned(std::max<size_t>(b.bytes, 1));
    std::shared_ptr<void> buffer = pool_.acquireUnpooled(b.bytes);
    void* data = buffer.get();
    b.device = HostTensor::borrow(b.dtype, b.dims, data, std::move(buffer));
    slots[s] = b.device;
    recording->inputs.push_back(std::move(b));
  }
  const auto& graph_outputs = graph_.outputs();
  if (expected.size() != graph_outputs.size()) throwInternal("outputs of the queued run missing");
  for (size_t i = 0; i < graph_outputs.size(); ++i) {
    const HostTensor& t = expected[i].tensor;
    if (t.dtype() == DType::String) {
      throw RecordingRefused{"output '" + expected[i].name + "' is a string tensor"};
    }
    Recording::Binding b;
    b.name = expected[i].name;
    b.slot = plan_.slot(graph_outputs[i]);
    b.dtype = t.dtype();
    b.dims = t.dims();
    b.bytes = t.byteSize();
    b.pinned = backend_->allocatePinned(std::max<size_t>(b.bytes, 1));
    recording->outputs.push_back(std::move(b));
  }

  backend_->beginCapture();
  recording_run_ = true;
  try {
    for (Recording::Binding& b : recording->inputs) {
      if (b.bytes) backend_->copyFromPinnedAsync(b.device.mutableRaw(), b.pinned.get(), b.bytes);
    }
    ExecutionStats copies;
    uint64_t written = 0;
    runSteps(slots, host, nullptr, nullptr, copies, written);
    for (Recording::Binding& b : recording->outputs) {
      const HostTensor& t = slots[b.slot];
      if (t.dtype() == DType::Undefined) {
        throw RecordingRefused{"output '" + b.name + "' is not computed on the device"};
      }
      if (t.dtype() != b.dtype || t.dims() != b.dims) {
        throw RecordingRefused{"output '" + b.name + "' came out as " +
                               typeText(t.dtype(), t.dims()) + " while recording, " +
                               typeText(b.dtype, b.dims) + " before"};
      }
      b.device = t;
      if (b.bytes) backend_->copyToPinnedAsync(b.pinned.get(), t.raw(), b.bytes);
    }
    recording_run_ = false;
    recording->run = backend_->endCapture();
  } catch (...) {
    recording_run_ = false;
    backend_->abortCapture();
    throw;
  }
  return recording;
}

std::vector<NamedTensor> Executor::replay(const Recording& recording,
                                          const std::vector<NamedTensor>& inputs,
                                          ExecutionStats* stats) {
  const auto start = Clock::now();
  {
    std::vector<HostTensor> checked(plan_.values.size());
    bindInputs(inputs, checked);  // the same checks as a queued run's
  }
  std::unordered_map<std::string_view, const HostTensor*> given;
  for (const NamedTensor& in : inputs) given.emplace(in.name, &in.tensor);
  uint64_t copied = 0;
  for (const Recording::Binding& b : recording.inputs) {
    const HostTensor* t = given.at(b.name);
    if (b.bytes) std::memcpy(b.pinned.get(), t->raw(), b.bytes);
    copied += b.bytes;
  }
  backend_->replay(*recording.run);
  backend_->synchronize();
  std::vector<NamedTensor> outputs;
  outputs.reserve(recording.outputs.size());
  for (const Recording::Binding& b : recording.outputs) {
    HostTensor t(b.dtype, b.dims);
    if (b.bytes) std::memcpy(t.mutableRaw(), b.pinned.get(), b.bytes);
    copied += b.bytes;
    outputs.push_back({b.name, std::move(t)});
  }
  if (stats) {
    const ExecutionStats& f = recording.figures;
    stats->node_times.clear();
    stats->body_node_times.clear();
    stats->peak_activation_bytes = f.peak_activation_bytes;
    stats->pool_reserved_bytes = pool_.stats().reserved_bytes;
    stats->buffer_reuses = f.buffer_reuses;
    stats->intermediate_tensors = f.intermediate_tensors;
    stats->nodes_run = f.nodes_run;
    stats->activation_bytes_written = f.activation_bytes_written;
    stats->fallback_nodes = 0;
    stats->copies_to_device = recording.inputs.size();
    stats->copies_to_host = recording.outputs.size();
    stats->copied_bytes = copied;
    stats->device_launches = f.device_launches;
    stats->graph_replayed = true;
    stats->device_graph = "replayed";
    stats->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return outputs;
}

std::vector<NamedTensor> Executor::runQueued(const std::vector<NamedTensor>& inputs,
                                             ExecutionStats* stats) {
  const auto start = Clock::now();
  // On the CPU backend `slots` holds the one copy of each value. On another device it holds the
  // device copies and `host` the host ones; a value gets a copy on the other side when a node
  // there first reads it.
  const bool transfers = !backend_->sharesHostMemory();
  std::vector<HostTensor> slots(plan_.values.size());
  std::vector<HostTensor> host(transfers ? slots.size() : 0);
  bindInputs(inputs, transfers ? host : slots);
  reuseDeviceInitializers(host, slots);

  pool_.resetPeak();
  const BufferPool::Stats before = pool_.stats();
  const uint64_t launches_before = backend_->launches();
  device_marks_.clear();
  if (options_.profile && stats) backend_->clearMarks();
  ExecutionStats copies;
  BodyTimes body_times;
  if (stats) {
    stats->node_times.clear();
    stats->body_node_times.clear();
    if (options_.profile) stats->node_times.reserve(plan_.order.size());
    body_times.records = &stats->body_node_times;
  }

  uint64_t activation_bytes_written = 0;
  runSteps(slots, host, nullptr, stats, copies, activation_bytes_written,
           options_.profile && stats && !bodies_.empty() ? &body_times : nullptr);

  std::vector<NamedTensor> outputs;
  outputs.reserve(graph_.outputs().size());
  for (const Value* v : graph_.outputs()) {
    const int s = plan_.slot(v);
    if (transfers) bringOver(s, true, false, slots, host, copies);
    const HostTensor& t = transfers ? host[s] : slots[s];
    if (t.dtype() == DType::Undefined) {
      throwInvalid("graph output '" + v->name() + "' was not produced");
    }
    outputs.push_back({v->name(), t});
  }
  slots.clear();
  host.clear();

  if (stats) {
    const BufferPool::Stats after = pool_.stats();
    stats->peak_activation_bytes = after.peak_live_bytes - before.live_bytes;
    stats->pool_reserved_bytes = after.reserved_bytes;
    stats->buffer_reuses = after.reuses - before.reuses;
    stats->intermediate_tensors = plan_.intermediate_tensors;
    stats->nodes_run = plan_.order.size();
    stats->activation_bytes_written = activation_bytes_written;
    stats->fallback_nodes = fallback_steps_;
    stats->copies_to_device = copies.copies_to_device;
    stats->copies_to_host = copies.copies_to_host;
    stats->copied_bytes = copies.copied_bytes;
    stats->device_launches = backend_->launches() - launches_before;
    // The device's own clock for the nodes it ran (runSteps synchronised at its end).
    for (const DeviceMark& m : device_marks_) {
      stats->node_times[m.node_time].seconds = backend_->elapsedSeconds(m.before, m.after);
    }
    stats->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return outputs;
}

void Executor::runSteps(std::vector<HostTensor>& slots, std::vector<HostTensor>& host,
                        const Scope* outer, ExecutionStats* stats, ExecutionStats& copies,
                        uint64_t& activation_bytes_written, BodyTimes* body_times,
                        const std::string& parent) {
  const bool transfers = !backend_->sharesHostMemory();
  Allocator allocator(pool_, options_.max_tensor_bytes);
  Allocator host_allocator(host_pool_, options_.max_tensor_bytes);
  const Scope scope{this, &slots, &host, outer};
  // Released copies exist on the CPU backend only, where `slots` holds every value.
  struct Restorer : ConstantRestorer {
    Restorer(Executor& e, std::vector<HostTensor>& s) : executor(e), slots(s) {}
    void restore(const Node& node, size_t input) override {
      const int s = executor.plan_.slot(node.input(input));
      if (s >= 0) executor.restoreConstant(static_cast<size_t>(s), slots);
    }
    Executor& executor;
    std::vector<HostTensor>& slots;
  } restorer(*this, slots);
  std::vector<const HostTensor*> args;
  for (size_t step = 0; step < plan_.order.size(); ++step) {
    const Node& node = *plan_.order[step];
    const bool on_cpu = transfers && on_cpu_[step];
    std::vector<HostTensor>& side = on_cpu ? host : slots;
    args.assign(node.numInputs(), nullptr);
    uint64_t constant_inputs = 0;
    uint64_t last_read_here = 0;  // inputs whose value this step reads for the last time
    for (size_t i = 0; i < node.numInputs(); ++i) {
      const Value* v = node.input(i);
      if (!v) continue;
      const int s = plan_.slot(v);
      if (transfers && i < 64 && ((kernels_[step]->dims_only_inputs >> i) & 1u)) {
        const HostTensor& t = slots[s].dtype() != DType::Undefined ? slots[s] : host[s];
        if (t.dtype() == DType::Undefined) {
          throwInvalid(nodePrefix(node) + "input " + std::to_string(i) + " ('" + v->name() +
                       "') was not produced by its node");
        }
        args[i] = &t;
        continue;
      }
      // A device kernel reads its host inputs (shapes, axes) from a host copy.
      const bool host_arg =
          on_cpu || (transfers && i < 64 && ((kernels_[step]->host_inputs >> i) & 1u));
      // A kernel reads a host input while it queues its work: a recording would keep the value
      // it had then, which is right only for a constant.
      if (recording_run_ && host_arg &&
          !(host[s].dtype() != DType::Undefined && isInitializer(s, host[s]))) {
        throw RecordingRefused{nodePrefix(node) + "reads '" + v->name() +
                               "' on the host, and it is not a constant"};
      }
      if (transfers) bringOver(s, host_arg, true, slots, host, copies);
      if (!transfers && side[s].isReleased() && i < 64 &&
          !useHasCopy(static_cast<size_t>(s), step, i)) {
        restoreConstant(static_cast<size_t>(s), side);
      }
      const HostTensor& t = (transfers && host_arg) ? host[s] : side[s];
      if (t.dtype() == DType::Undefined) {
        throwInvalid(nodePrefix(node) + "input " + std::to_string(i) + " ('" + v->name() +
                     "') was not produced by its node");
      }
      args[i] = &t;
      if (i < 64 && isInitializer(s, t)) constant_inputs |= uint64_t{1} << i;
      // Pinned values (graph inputs and outputs, initializers) never have a last use.
      if (i < 64 && plan_.last_use_step[s] == static_cast<int>(step)) {
        last_read_here |= uint64_t{1} << i;
      }
    }

    KernelContext ctx(node, opsets_[step], args, on_cpu ? host_allocator : allocator,
                      num_threads_);
    ctx.bindPersistentState(&kernel_states_[step], constant_inputs);
    if (!transfers && options_.donate_inputs) {
      ctx.bindDonatableInputs(donatableInputs(node, args, last_read_here & ~constant_inputs));
    }
    if (!transfers) ctx.bindChannelsLastOutputs(channels_last_outputs_[step]);
    ctx.bindConstantRestorer(&restorer);
    BodyRunner bodies(*this, scope, node, body_times, parent);
    if (!node.implicitInputs().empty() || !bodies_.empty()) {
      // Bodies run on the host: their captures need a host copy there too.
      if (transfers) {
        for (const Value* v : node.implicitInputs()) {
          const int s = plan_.slot(v);
          if (s >= 0) bringOver(s, true, true, slots, host, copies);
        }
      }
      ctx.bindSubgraphRunner(&bodies);
    }
    const KernelState* state_before = kernel_states_[step].get();
    const auto node_start = options_.profile ? Clock::now() : Clock::time_point();
    const int mark_before = options_.profile && stats && !on_cpu ? backend_->markTime() : -1;
    try {
      kernels_[step]->fn(ctx);
    } catch (const Error& e) {
      if (std::strncmp(e.what(), "node '", 6) == 0) throw;
      throw Error(e.kind(), nodePrefix(node) + e.what());
    } catch (const std::bad_alloc&) {
      // Name the node whose allocation failed, as bad input is named (the output or scratch that
      // failed is usually far larger than the few bytes the message takes).
      std::string message;
      try {
        message = nodePrefix(node) + "out of memory (its outputs or scratch)";
      } catch (...) {
        throw std::bad_alloc();
      }
      throw Error(ErrorKind::Internal, message);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Internal, nodePrefix(node) + "kernel failed: " + e.what());
    }
    if (kernel_states_[step].get() != state_before) {
      noteCopiedInputs(step, kernel_states_[step].get(), constant_inputs, side);
    }
    const int mark_after = mark_before >= 0 ? backend_->markTime() : -1;
    const double node_seconds =
        options_.profile ? std::chrono::duration<double>(Clock::now() - node_start).count() : 0;
    uint64_t written = 0;
    for (size_t i = 0; stats && i < node.numOutputs(); ++i) {  // only a caller with stats reads it
      const HostTensor& out = ctx.outputs()[i];
      if (out.dtype() == DType::Undefined || out.dtype() == DType::String) continue;
      bool aliases = false;
      for (const HostTensor* in : args) aliases = aliases || (in && in->raw() == out.raw());
      if (!aliases || ctx.wroteInPlace(i)) written += out.byteSize();
    }
    activation_bytes_written += written;
    if (options_.profile && stats) {
      NodeTime t;
      t.node = node.label();
      t.op_type = node.opType();
      t.seconds = node_seconds;
      t.device = on_cpu ? Device::Cpu : backend_->device();
      t.input_dims.reserve(args.size());
      for (const HostTensor* in : args) t.input_dims.push_back(in ? in->dims() : std::vector<int64_t>{});
      t.output_dims.reserve(node.numOutputs());
      for (const HostTensor& out : ctx.outputs()) t.output_dims.push_back(out.dims());
      t.output_bytes = written;
      if (mark_after >= 0) device_marks_.push_back({stats->node_times.size(), mark_before, mark_after});
      stats->node_times.push_back(std::move(t));
    }

    for (size_t i = 0; i < node.numOutputs(); ++i) {
      const Value* v = node.output(i);
      if (!v) continue;
      HostTensor& out = ctx.outputs()[i];
      if (out.dtype() == DType::Undefined) {
        if (ctx.outputWanted(i)) {
          throwInternal(nodePrefix(node) + "the kernel did not produce output " +
                        std::to_string(i) + " ('" + v->name() + "')");
        }
        continue;
      }
      if (out.dtype() != DType::String && out.byteSize() > 0 && out.raw() == nullptr) {
        throwInternal(nodePrefix(node) + "output " + std::to_string(i) + " has no data");
      }
      if (v->isGraphOutput() && v->dtype() != DType::Undefined && v->dtype() != out.dtype()) {
        throwInvalid(nodePrefix(node) + "output '" + v->name() + "' is " +
                     typeText(out.dtype(), out.dims()) + " but the graph declares " +
                     v->type.str());
      }
      side[plan_.slot(v)] = std::move(out);
    }
    for (int s : plan_.release_after[step]) {
      slots[s] = HostTensor();
      if (transfers) host[s] = HostTensor();
    }
  }
  if (!recording_run_) backend_->synchronize();
}

uint64_t Executor::donatableInputs(const Node& node, const std::vector<const HostTensor*>& args,
                                   uint64_t last_read_here) {
  uint64_t donatable = 0;
  for (size_t i = 0; i < node.numInputs() && i < 64; ++i) {
    if (!((last_read_here >> i) & 1u) || !args[i]->soleOwnerOfStorage()) continue;
    const Value* v = node.input(i);
    bool once = true;
    for (size_t j = 0; j < node.numInputs() && once; ++j) once = j == i || node.input(j) != v;
    for (const Value* captured : node.implicitInputs()) once = once && captured != v;
    if (once) donatable |= uint64_t{1} << i;
  }
  return donatable;
}

std::vector<const Node*> Executor::cpuFallbacks() const {
  std::vector<const Node*> nodes;
  for (size_t step = 0; step < on_cpu_.size(); ++step) {
    if (on_cpu_[step]) nodes.push_back(plan_.order[step]);
  }
  return nodes;
}

std::vector<NamedTensor> runModel(const Model& model, const std::vector<NamedTensor>& inputs,
                                  const ExecutorOptions& options, ExecutionStats* stats) {
  Executor executor(model, options);
  return executor.run(inputs, stats);
}

}  // namespace fusectl::kernels
