// fold-constants: evaluate nodes whose inputs are all constant and store their outputs as
// initializers, with a size cap so that folding never bloats the model.
//
//   C = Constant<value=...>()            =>  initializer C
//   W2 = Transpose<perm=[1,0]>(W)        =>  initializer W2 = W^T   (W an initializer)
//   S = Add(A, B); Y = Mul(X, S)         =>  initializer S = A + B; Y = Mul(X, S)
//
// Outputs keep their names (a graph output stays a graph output of the same name); inputs left
// without readers are removed. Nodes are visited in topological order, so a whole constant
// chain folds in one run. Evaluation calls the executor's CPU kernel for the node
// (fusectl::kernels::KernelRegistry::global()), the same code that runs the model, so folding
// cannot change the numbers.
//
// Conditions (each failure is a reported rejection):
//  1. Every input is a constant: an initializer that is not also a graph input (a caller may
//     override those), or, inside a subgraph, an outer value that is one (PyTorch's LSTM export
//     reorders its gate weights with Slice + Concat in an If branch: Silero VAD computed its
//     weights again on every run). Constant nodes qualify; they become initializers without a
//     size check.
//  2. The op is deterministic (isNondeterministic: RandomNormal, Bernoulli, Dropout...), has no
//     subgraph, is in the ai.onnx or fusectl domain (other domains' semantics are unknown), has
//     a CPU kernel at the model's opset, and its outputs are tensors.
//  3. Size cap: the outputs' total bytes are at most max(max-bytes, 2 x the inputs' total
//     bytes), or max-bytes when an input is an outer value (it stays for its other readers).
//     max-bytes defaults to 1 MiB (`fold-constants{max-bytes=N}`). So a fold never
//     adds more than max-bytes, or than twice what it reads (a Transpose of a large weight
//     still folds; an Expand or ConstantOfShape that multiplies small data does not). Outputs
//     whose inferred shape is static are checked before evaluating; the kernel's allocations
//     are capped too, so an unknown-shape output over the cap is never materialised.
//  4. The kernel succeeds and produces each used output with the declared dtype (and shape,
//     where static).
// Counters: folded, constant_nodes (Constant nodes turned into initializers), bytes_folded,
// skipped_<reason> for each rejection kind.
#include <fmt/format.h>

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fusectl/graph/captured_value.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/kernel.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/passes/registry.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

using kernels::HostTensor;

// Thrown by CappedAllocator when a kernel asks for more than the cap.
struct OverCap {
  uint64_t bytes;
};

class CappedAllocator : public kernels::OutputAllocator {
 public:
  explicit CappedAllocator(uint64_t cap) : cap_(cap) {}
  HostTensor allocate(DType dtype, const std::vector<int64_t>& dims) override {
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d < 0) throwInvalid(fmt::format("negative dimension {}", d));
      if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) throw OverCap{UINT64_MAX};
      n *= d;
    }
    // Past 2^59 elements the byte count could wrap (2^62 four-byte elements came to 0 bytes
    // and passed the cap); such a tensor is over any cap.
    if (n > (std::numeric_limits<int64_t>::max() >> 4)) throw OverCap{UINT64_MAX};
    uint64_t bytes = dtypeStorageBytes(dtype, n);
    if (dtype == DType::String) bytes = static_cast<uint64_t>(n) * sizeof(std::string);
    if (bytes > cap_ - std::min(cap_, allocated_)) throw OverCap{allocated_ + bytes};
    allocated_ += bytes;
    return HostTensor(dtype, dims);
  }
  uint64_t maxTensorBytes() const override { return cap_; }

 private:
  uint64_t cap_;
  uint64_t allocated_ = 0;
};

uint64_t tensorBytes(const Tensor& t) {
  if (t.dtype() != DType::String) return t.byteSize();
  uint64_t n = 0;
  for (const std::string& s : t.strings()) n += s.size();
  return n;
}

// The cap as declared with the pass (passes.def: max-bytes, 1 MiB unless the pipeline says
// otherwise). The pipeline parser checked the value; a context whose options were set by hand
// gets the same check here.
uint64_t maxBytes(const PassContext& ctx) {
  const std::string value = optionOrDefault(ctx, FoldConstantsPassInfo.name, "max-bytes");
  checkPassOption(FoldConstantsPassInfo.name, "max-bytes", value);
  return std::stoull(value);
}

bool hasSubgraph(const Node& n) {
  for (const Attribute& a : n.attributes())
    if (a.kind == AttrKind::Graph || a.kind == AttrKind::Graphs) return true;
  return false;
}

bool wanted(const Value* v) { return v && (v->hasUses() || v->isGraphOutput()); }

// The tensor a constant input holds: its initializer, or for a subgraph's capture of an outer
// value, that value's when it is a constant; else nullptr.
const Tensor* constantTensor(const Value* v) {
  v = capturedValue(v);
  return v->isConstant() ? v->initializer() : nullptr;
}

class FoldConstantsPass : public Pass {
 public:
  const PassInfo& info() const override { return FoldConstantsPassInfo; }

  bool run(const Graph& graph, PassContext& ctx) override {
    const uint64_t max_bytes = maxBytes(ctx);
    Rewriter rw(ctx);
    bool changed = false;
    for (Node* n : graph.nodesSnapshot()) {
      if (rw.erased(n) || !allInputsConstant(*n)) continue;
      bool any_wanted = false;
      for (const Value* v : n->outputs()) any_wanted |= wanted(v);
      if (!any_wanted) continue;  // dead: eliminate-dead-code's business
      changed |= fold(rw, n, max_bytes);
    }
    if (changed) ctx.requestShapeInference();
    return changed;
  }

 private:
  static bool allInputsConstant(const Node& n) {
    for (const Value* v : n.inputs())
      if (v && !constantTensor(v)) return false;
    return true;
  }

  static void reject(Rewriter& rw, const Node& n, const std::string& constraint,
                     const std::string& reason) {
    PassContext& ctx = rw.context();
    ctx.count("skipped_" + constraint);
    if (ctx.explain()) rw.reject(NearMiss{"fold", n.label(), constraint, n.label(), reason});
  }

  static std::string opName(const Node& n) {
    return n.domain().empty() ? n.opType() : n.domain() + "::" + n.opType();
  }

  bool fold(Rewriter& rw, Node* n, uint64_t max_bytes) {
    PassContext& ctx = rw.context();
    const bool is_constant = n->is("Constant");
    if (!n->domain().empty() && n->domain() != "ai.onnx" && n->domain() != "fusectl") {
      reject(rw, *n, "domain", fmt::format("{} is in domain '{}', whose ops fusectl cannot "
                                           "evaluate or assume deterministic",
                                           n->label(), n->domain()));
      return false;
    }
    if (isNondeterministic(*n)) {
      reject(rw, *n, "nondeterministic",
             fmt::format("{} is nondeterministic ({}); folding would freeze one draw",
                         n->label(), n->opType()));
      return false;
    }
    if (hasSubgraph(*n)) {
      reject(rw, *n, "subgraph", fmt::format("{} has a subgraph", n->label()));
      return false;
    }
    for (const Value* v : n->outputs()) {
      if (wanted(v) && !v->type.isTensor()) {
        reject(rw, *n, "tensor-output",
               fmt::format("{} output '{}' is not a tensor", n->label(), v->name()));
        return false;
      }
    }
    const int64_t opset = ctx.opset(n->domain());
    const kernels::KernelInfo* kernel =
        kernels::KernelRegistry::global().find(n->domain(), n->opType(), opset);
    if (!kernel) {
      reject(rw, *n, "no-kernel", fmt::format("{}: no CPU kernel for {} at opset {}",
                                              n->label(), opName(*n), opset));
      return false;
    }

    // The cap, and a check of the inferred output sizes before running anything.
    uint64_t input_bytes = 0;
    bool reads_outer = false;
    for (const Value* v : n->inputs()) {
      if (!v) continue;
      input_bytes += tensorBytes(*constantTensor(v));
      reads_outer = reads_outer || v->kind() == Value::Kind::OuterRef;
    }
    // An outer value stays where it is for its other readers (the other branch of an If reads
    // the same weights, and folds its own copy), so what a fold from one adds is its whole
    // output: only max-bytes, not twice the inputs. Silero VAD's four LSTMs' reordered gate
    // weights, 256 KiB each, fold; a Transpose of a 100 MB outer weight in each branch would
    // not.
    const uint64_t cap = is_constant    ? UINT64_MAX
                         : reads_outer ? max_bytes
                                       : std::max(max_bytes, 2 * input_bytes);
    auto overCap = [&](uint64_t bytes) {
      reject(rw, *n, "size-cap",
             fmt::format("{} output of {} bytes exceeds the folding cap of {} bytes (max-bytes="
                         "{}, {})",
                         n->label(), bytes, cap, max_bytes,
                         reads_outer ? std::string("it reads an outer value, which stays")
                                     : fmt::format("2x inputs = {}", 2 * input_bytes)));
      return false;
    };
    uint64_t inferred = 0;
    for (const Value* v : n->outputs()) {
      if (!wanted(v)) continue;
      if (std::optional<int64_t> numel = v->shape().staticNumel();
          numel && v->dtype() != DType::Undefined && v->dtype() != DType::String) {
        const uint64_t bytes = dtypeStorageBytes(v->dtype(), *numel);  // saturated
        inferred = bytes > UINT64_MAX - inferred ? UINT64_MAX : inferred + bytes;
      }
    }
    if (inferred > cap) return overCap(inferred);

    // Evaluate.
    std::vector<HostTensor> held;
    held.reserve(n->numInputs());
    std::vector<const HostTensor*> args(n->numInputs(), nullptr);
    CappedAllocator allocator(cap);
    std::optional<kernels::KernelContext> kctx;
    try {
      for (size_t i = 0; i < n->numInputs(); ++i) {
        if (!n->input(i)) continue;
        held.push_back(HostTensor::fromTensor(*constantTensor(n->input(i))));
        args[i] = &held.back();
      }
      kctx.emplace(*n, opset, args, allocator, 1);
      kernel->fn(*kctx);
    } catch (const OverCap& o) {
      return overCap(o.bytes);
    } catch (const std::bad_alloc&) {
      reject(rw, *n, "kernel-failed", fmt::format("{}: out of memory evaluating it", n->label()));
      return false;
    } catch (const std::exception& e) {
      reject(rw, *n, "kernel-failed", fmt::format("{}: evaluating it failed: {}", n->label(),
                                                  e.what()));
      return false;
    }

    std::vector<std::pair<Value*, Tensor>> results;
    uint64_t out_bytes = 0;
    for (size_t i = 0; i < n->numOutputs(); ++i) {
      Value* v = n->output(i);
      if (!wanted(v)) continue;
      const HostTensor& out = kctx->outputs()[i];
      if (out.dtype() == DType::Undefined) {
        reject(rw, *n, "kernel-failed", fmt::format("{}: the kernel did not produce output '{}'",
                                                    n->label(), v->name()));
        return false;
      }
      if (v->dtype() != DType::Undefined && v->dtype() != out.dtype()) {
        reject(rw, *n, "type-mismatch",
               fmt::format("{}: the kernel produced {} for '{}', which the graph declares {}",
                           n->label(), dtypeName(out.dtype()), v->name(), v->type.str()));
        return false;
      }
      if (v->shape().isStatic() && v->shape().staticDims() != out.dims()) {
        reject(rw, *n, "type-mismatch",
               fmt::format("{}: the kernel produced shape {} for '{}', which the graph declares "
                           "{}",
                           n->label(), Shape::ofStatic(out.dims()).str(), v->name(),
                           v->shape().str()));
        return false;
      }
      results.emplace_back(v, out.toTensor());
      out_bytes += tensorBytes(results.back().second);
    }
    if (out_bytes > cap) return overCap(out_bytes);

    if (!ctx.allowRewrite()) {
      ctx.count("skipped_max_rewrites");
      return false;
    }
    rw.replaceWithConstants(n, std::move(results));
    ctx.count(is_constant ? "constant_nodes" : "folded");
    if (!is_constant) ctx.count("bytes_folded", static_cast<int64_t>(out_bytes));
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldConstantsPass() { return std::make_unique<FoldConstantsPass>(); }

}  // namespace fusectl::passes
