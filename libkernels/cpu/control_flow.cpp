// If, Loop and Scan: the control-flow kernels. Each calls the executor back through
// KernelContext::runSubgraph for its bodies and only moves tensors around them: choosing a
// branch, threading loop-carried values from one iteration to the next, and cutting scan
// inputs into per-iteration slices and stacking per-iteration outputs along a new axis.
//
// Slices and stacks copy whole elements byte for byte, so they serve every dtype whose
// elements are whole bytes, and strings; packed sub-byte types (int4, float4) are refused.
#include <algorithm>
#include <cstring>
#include <string>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

namespace {

int64_t product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= dims[i];
  return n;
}

void requireWholeBytes(const KernelContext& ctx, DType dtype, const std::string& what) {
  if (dtypeIsSubByte(dtype)) {
    ctx.fail(what + " is " + std::string(dtypeName(dtype)) +
             ", a packed sub-byte type, which control flow cannot slice or stack");
  }
}

// Element `index` of `t` along `axis`, with that axis removed (an owned copy).
HostTensor sliceAt(const HostTensor& t, size_t axis, int64_t index) {
  std::vector<int64_t> dims = t.dims();
  const int64_t outer = product(dims, 0, axis);
  const int64_t len = dims[axis];
  const int64_t inner = product(dims, axis + 1, dims.size());
  dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(axis));
  HostTensor out(t.dtype(), dims);
  if (t.dtype() == DType::String) {
    out.strings().resize(static_cast<size_t>(outer * inner));
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        out.strings()[o * inner + i] = t.strings()[(o * len + index) * inner + i];
      }
    }
    return out;
  }
  const size_t bytes = dtypeSize(t.dtype()) * static_cast<size_t>(inner);
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(out.mutableRaw());
  for (int64_t o = 0; o < outer; ++o) {
    if (bytes) std::memcpy(dst + o * bytes, src + (o * len + index) * bytes, bytes);
  }
  return out;
}

// Writes `elements` (all of one dtype and dims) into `out`, whose dims are theirs with a new
// axis of length elements.size() inserted at `axis`; element t goes to position t, or to
// size-1-t when `reverse`.
void stackInto(HostTensor& out, const std::vector<HostTensor>& elements, size_t axis,
               bool reverse) {
  const int64_t count = static_cast<int64_t>(elements.size());
  if (count == 0) return;
  const std::vector<int64_t>& dims = elements.front().dims();
  const int64_t outer = product(dims, 0, axis);
  const int64_t inner = product(dims, axis, dims.size());
  if (out.dtype() == DType::String) {
    out.strings().resize(static_cast<size_t>(outer * count * inner));
    for (int64_t t = 0; t < count; ++t) {
      const int64_t pos = reverse ? count - 1 - t : t;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          out.strings()[(o * count + pos) * inner + i] = elements[t].strings()[o * inner + i];
        }
      }
    }
    return;
  }
  const size_t bytes = dtypeSize(out.dtype()) * static_cast<size_t>(inner);
  auto* dst = static_cast<char*>(out.mutableRaw());
  for (int64_t t = 0; t < count; ++t) {
    const int64_t pos = reverse ? count - 1 - t : t;
    const auto* src = static_cast<const char*>(elements[t].raw());
    for (int64_t o = 0; o < outer; ++o) {
      if (bytes) std::memcpy(dst + (o * count + pos) * bytes, src + o * bytes, bytes);
    }
  }
}

// Stacks one scan output's per-iteration elements along `axis` into output `index`. With no
// iterations the element dims come from the body's declared output shape when it is static,
// else the result is [0].
void emitStacked(KernelContext& ctx, size_t index, const std::vector<HostTensor>& elements,
                 int64_t axis_attr, bool reverse, const Value* body_output) {
  if (!ctx.outputWanted(index)) return;
  std::vector<int64_t> elem_dims;
  DType dtype = body_output ? body_output->dtype() : DType::Undefined;
  if (!elements.empty()) {
    elem_dims = elements.front().dims();
    dtype = elements.front().dtype();
    for (const HostTensor& e : elements) {
      if (e.dims() != elem_dims || e.dtype() != dtype) {
        ctx.fail("scan output " + std::to_string(index) + " changes from " +
                 formatDims(elem_dims) + " to " + formatDims(e.dims()) +
                 " between iterations; its elements cannot be stacked");
      }
    }
  } else if (body_output && body_output->shape().hasRank() && body_output->shape().isStatic()) {
    for (size_t d = 0; d < body_output->shape().rank(); ++d) {
      elem_dims.push_back(body_output->shape()[d].value());
    }
  }
  if (dtype == DType::Undefined) dtype = DType::Float;
  requireWholeBytes(ctx, dtype, "scan output " + std::to_string(index));
  const int64_t rank = static_cast<int64_t>(elem_dims.size()) + 1;
  const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
  if (axis < 0 || axis >= rank) {
    ctx.fail("scan output axis " + std::to_string(axis_attr) + " is out of range for rank " +
             std::to_string(rank));
  }
  std::vector<int64_t> out_dims = elem_dims;
  out_dims.insert(out_dims.begin() + axis, static_cast<int64_t>(elements.size()));
  HostTensor& out = ctx.allocateOutput(index, dtype, out_dims);
  stackInto(out, elements, static_cast<size_t>(axis), reverse);
}

bool truthOf(const KernelContext& ctx, const HostTensor& t, const std::string& what) {
  if (t.numel() != 1) ctx.fail(what + " must hold one element, not " + formatDims(t.dims()));
  if (t.dtype() != DType::Bool) ctx.fail(what + " must be bool, not " + std::string(dtypeName(t.dtype())));
  return t.data<bool>()[0];
}

HostTensor scalarOf(DType dtype, int64_t v) {
  HostTensor t(dtype, {});
  if (dtype == DType::Bool) {
    t.mutableData<bool>()[0] = v != 0;
  } else {
    t.mutableData<int64_t>()[0] = v;
  }
  return t;
}

const Graph& bodyOf(const KernelContext& ctx, const char* attr) {
  const Attribute* a = ctx.node().attr(attr);
  if (!a || !a->g) ctx.fail(std::string("has no graph attribute '") + attr + "'");
  return *a->g;
}

void runIf(KernelContext& ctx) {
  const bool cond = truthOf(ctx, ctx.requireInput(0), "the condition");
  const char* branch = cond ? "then_branch" : "else_branch";
  std::vector<HostTensor> results = ctx.runSubgraph(branch, {});
  if (results.size() != ctx.numOutputs()) {
    ctx.fail(std::string(branch) + " produces " + std::to_string(results.size()) +
             " outputs but the node has " + std::to_string(ctx.numOutputs()));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    if (ctx.outputWanted(i)) ctx.setOutput(i, std::move(results[i]));
  }
}

// Loop(M, cond, v_initial...) -> (v_final..., scan_outputs...); the body maps
// (iteration, cond, v...) to (cond, v..., scan elements...).
void runLoop(KernelContext& ctx) {
  const Graph& body = bodyOf(ctx, "body");
  const size_t carried = ctx.numInputs() >= 2 ? ctx.numInputs() - 2 : 0;
  if (body.inputs().size() != carried + 2) {
    ctx.fail("the body takes " + std::to_string(body.inputs().size()) + " inputs; " +
             std::to_string(carried + 2) + " expected (iteration, condition and " +
             std::to_string(carried) + " loop-carried values)");
  }
  if (body.outputs().size() < carried + 1) {
    ctx.fail("the body has " + std::to_string(body.outputs().size()) +
             " outputs; at least " + std::to_string(carried + 1) + " expected");
  }
  const size_t scans = body.outputs().size() - 1 - carried;
  if (ctx.numOutputs() > carried + scans) {
    ctx.fail("the node has " + std::to_string(ctx.numOutputs()) + " outputs but the body makes " +
             std::to_string(carried + scans));
  }
  // No M is no bound. A negative M runs no iteration, as ONNX's reference implementation and
  // ONNX Runtime read `it < M` (this once read -1 as unbounded: a file's M of -1 hung the run).
  int64_t trip_count = std::numeric_limits<int64_t>::max();
  if (const HostTensor* m = ctx.input(0)) {
    if (m->numel() != 1 || m->dtype() != DType::Int64) {
      ctx.fail("M must be one int64, not " + std::string(dtypeName(m->dtype())) +
               formatDims(m->dims()));
    }
    trip_count = m->data<int64_t>()[0];
  }
  const HostTensor* cond_input = ctx.input(1);
  bool cond = cond_input ? truthOf(ctx, *cond_input, "cond") : true;

  std::vector<HostTensor> state(carried);
  for (size_t i = 0; i < carried; ++i) state[i] = ctx.requireInput(i + 2);
  std::vector<std::vector<HostTensor>> scan_elements(scans);
  // Each scan output is stacked from its iterations at the end; its bytes are counted as they
  // come, so that a trip count from the file (7e8 in a hostile Range expansion) fails at the
  // tensor limit instead of gathering elements until memory runs out.
  std::vector<uint64_t> scan_bytes(scans, 0);
  std::vector<HostTensor> args(carried + 2);
  for (int64_t it = 0; cond && it < trip_count; ++it) {
    args[0] = scalarOf(DType::Int64, it);
    args[1] = scalarOf(DType::Bool, cond);
    for (size_t i = 0; i < carried; ++i) args[i + 2] = std::move(state[i]);
    std::vector<HostTensor> results = ctx.runSubgraph("body", args);
    // The spec ignores the body's condition when the node has no cond input (a for loop).
    if (cond_input) cond = truthOf(ctx, results[0], "the body's condition output");
    for (size_t i = 0; i < carried; ++i) state[i] = std::move(results[i + 1]);
    for (size_t k = 0; k < scans; ++k) {
      HostTensor& element = results[1 + carried + k];
      scan_bytes[k] += element.isTensor() ? element.byteSize() : 0;
      if (scan_bytes[k] > ctx.maxTensorBytes()) {
        ctx.fail(fmt::format("scan output {} passes the tensor limit of {} bytes after {} "
                             "iterations (--max-tensor-bytes)",
                             k, ctx.maxTensorBytes(), it + 1));
      }
      scan_elements[k].push_back(std::move(element));
    }
  }
  for (size_t i = 0; i < carried && i < ctx.numOutputs(); ++i) {
    if (ctx.outputWanted(i)) ctx.setOutput(i, std::move(state[i]));
  }
  for (size_t k = 0; k < scans && carried + k < ctx.numOutputs(); ++k) {
    emitStacked(ctx, carried + k, scan_elements[k], 0, false, body.outputs()[1 + carried + k]);
  }
}

int64_t axisIn(const KernelContext& ctx, int64_t axis, size_t rank, const std::string& what) {
  const int64_t r = static_cast<int64_t>(rank);
  const int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    ctx.fail(what + " axis " + std::to_string(axis) + " is out of range for rank " +
             std::to_string(rank));
  }
  return a;
}

// One Scan over `states` and `scan_inputs` (Scan-9+ semantics, or one batch entry of Scan-8);
// `length` iterations; results to `final_states` and per-iteration `scan_elements`.
struct ScanSpec {
  size_t states = 0;
  size_t scan_inputs = 0;
  size_t scan_outputs = 0;
  std::vector<int64_t> input_axes, input_directions;
};

void scanOnce(KernelContext& ctx, const ScanSpec& spec, std::vector<HostTensor> states,
              const std::vector<HostTensor>& scan_inputs, int64_t length,
              std::vector<HostTensor>& final_states,
              std::vector<std::vector<HostTensor>>& scan_elements) {
  std::vector<HostTensor> args(spec.states + spec.scan_inputs);
  scan_elements.assign(spec.scan_outputs, {});
  for (int64_t it = 0; it < length; ++it) {
    for (size_t i = 0; i < spec.states; ++i) args[i] = std::move(states[i]);
    for (size_t j = 0; j < spec.scan_inputs; ++j) {
      const int64_t pos = spec.input_directions[j] ? length - 1 - it : it;
      args[spec.states + j] =
          sliceAt(scan_inputs[j], static_cast<size_t>(spec.input_axes[j]), pos);
    }
    std::vector<HostTensor> results = ctx.runSubgraph("body", args);
    for (size_t i = 0; i < spec.states; ++i) states[i] = std::move(results[i]);
    for (size_t k = 0; k < spec.scan_outputs; ++k) {
      scan_elements[k].push_back(std::move(results[spec.states + k]));
    }
  }
  final_states = std::move(states);
}

ScanSpec scanSpec(KernelContext& ctx, const Graph& body, size_t state_and_scan_inputs) {
  ScanSpec spec;
  const int64_t m = ctx.attrInt("num_scan_inputs", -1);
  if (m < 1 || static_cast<size_t>(m) > state_and_scan_inputs) {
    ctx.fail("num_scan_inputs " + std::to_string(m) + " does not fit the node's " +
             std::to_string(state_and_scan_inputs) + " state and scan inputs");
  }
  spec.scan_inputs = static_cast<size_t>(m);
  spec.states = state_and_scan_inputs - spec.scan_inputs;
  if (body.inputs().size() != state_and_scan_inputs) {
    ctx.fail("the body takes " + std::to_string(body.inputs().size()) + " inputs; " +
             std::to_string(state_and_scan_inputs) + " expected");
  }
  if (body.outputs().size() < spec.states) {
    ctx.fail("the body has fewer outputs than the " + std::to_string(spec.states) +
             " state values");
  }
  spec.scan_outputs = body.outputs().size() - spec.states;
  if (ctx.numOutputs() > spec.states + spec.scan_outputs) {
    ctx.fail("the node has " + std::to_string(ctx.numOutputs()) + " outputs but the body makes " +
             std::to_string(spec.states + spec.scan_outputs));
  }
  return spec;
}

std::vector<int64_t> perInputAttr(KernelContext& ctx, const char* name, size_t count) {
  std::vector<int64_t> v = ctx.attrInts(name, std::vector<int64_t>(count, 0));
  if (v.size() != count) {
    ctx.fail(std::string(name) + " has " + std::to_string(v.size()) + " entries; " +
             std::to_string(count) + " expected");
  }
  return v;
}

// Scan-9 and later: states and scan inputs are whole tensors; scan inputs are cut along
// scan_input_axes, scan outputs stacked along scan_output_axes.
void runScan(KernelContext& ctx) {
  const Graph& body = bodyOf(ctx, "body");
  ScanSpec spec = scanSpec(ctx, body, ctx.numInputs());
  spec.input_axes = perInputAttr(ctx, "scan_input_axes", spec.scan_inputs);
  spec.input_directions = perInputAttr(ctx, "scan_input_directions", spec.scan_inputs);
  const std::vector<int64_t> output_axes =
      perInputAttr(ctx, "scan_output_axes", spec.scan_outputs);
  const std::vector<int64_t> output_directions =
      perInputAttr(ctx, "scan_output_directions", spec.scan_outputs);

  std::vector<HostTensor> states(spec.states), scan_inputs(spec.scan_inputs);
  for (size_t i = 0; i < spec.states; ++i) states[i] = ctx.requireInput(i);
  int64_t length = -1;
  for (size_t j = 0; j < spec.scan_inputs; ++j) {
    const HostTensor& t = ctx.requireInput(spec.states + j);
    const std::string what = "scan input " + std::to_string(j);
    requireWholeBytes(ctx, t.dtype(), what);
    spec.input_axes[j] = axisIn(ctx, spec.input_axes[j], t.rank(), what);
    const int64_t len = t.dim(static_cast<size_t>(spec.input_axes[j]));
    if (length >= 0 && len != length) {
      ctx.fail(what + " has " + std::to_string(len) + " steps but scan input 0 has " +
               std::to_string(length));
    }
    length = len;
    scan_inputs[j] = t;
  }
  std::vector<HostTensor> final_states;
  std::vector<std::vector<HostTensor>> elements;
  scanOnce(ctx, spec, std::move(states), scan_inputs, length, final_states, elements);
  for (size_t i = 0; i < spec.states && i < ctx.numOutputs(); ++i) {
    if (ctx.outputWanted(i)) ctx.setOutput(i, std::move(final_states[i]));
  }
  for (size_t k = 0; k < spec.scan_outputs && spec.states + k < ctx.numOutputs(); ++k) {
    emitStacked(ctx, spec.states + k, elements[k], output_axes[k], output_directions[k] != 0,
                body.outputs()[spec.states + k]);
  }
}

// Scan-8: every state and scan input carries a leading batch axis, scan inputs scan along
// axis 1, and the optional sequence_lens (input 0) cuts each batch entry's scan short; outputs
// past an entry's length are zero.
void runScan8(KernelContext& ctx) {
  const Graph& body = bodyOf(ctx, "body");
  if (ctx.numInputs() < 1) ctx.fail("has no inputs");
  ScanSpec spec = scanSpec(ctx, body, ctx.numInputs() - 1);
  spec.input_axes.assign(spec.scan_inputs, 0);
  spec.input_directions = perInputAttr(ctx, "directions", spec.scan_inputs);
  if (spec.scan_inputs == 0) ctx.fail("has no scan inputs");

  const HostTensor& first = ctx.requireInput(1 + spec.states);
  if (first.rank() < 2) ctx.fail("scan inputs need a batch and a sequence axis");
  const int64_t batch = first.dim(0);
  const int64_t max_len = first.dim(1);
  std::vector<HostTensor> inputs(ctx.numInputs() - 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostTensor& t = ctx.requireInput(i + 1);
    requireWholeBytes(ctx, t.dtype(), "input " + std::to_string(i + 1));
    if (t.rank() < 1 || t.dim(0) != batch) {
      ctx.fail("input " + std::to_string(i + 1) + " " + formatDims(t.dims()) +
               " does not have the batch size " + std::to_string(batch));
    }
    if (i >= spec.states && (t.rank() < 2 || t.dim(1) != max_len)) {
      ctx.fail("scan input " + formatDims(t.dims()) + " does not have " +
               std::to_string(max_len) + " steps");
    }
    inputs[i] = t;
  }
  std::vector<int64_t> lengths(static_cast<size_t>(batch), max_len);
  if (const HostTensor* lens = ctx.input(0)) {
    if (lens->numel() != batch || (lens->dtype() != DType::Int32 && lens->dtype() != DType::Int64)) {
      ctx.fail("sequence_lens must hold " + std::to_string(batch) + " integers");
    }
    for (int64_t b = 0; b < batch; ++b) {
      lengths[b] = lens->dtype() == DType::Int32 ? lens->data<int32_t>()[b] : lens->data<int64_t>()[b];
      if (lengths[b] < 0 || lengths[b] > max_len) {
        ctx.fail("sequence_lens[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                 " is outside [0, " + std::to_string(max_len) + "]");
      }
    }
  }

  std::vector<std::vector<HostTensor>> batch_states(spec.states);
  std::vector<std::vector<HostTensor>> batch_outputs(spec.scan_outputs);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<HostTensor> states(spec.states), scans(spec.scan_inputs);
    for (size_t i = 0; i < spec.states; ++i) states[i] = sliceAt(inputs[i], 0, b);
    for (size_t j = 0; j < spec.scan_inputs; ++j) scans[j] = sliceAt(inputs[spec.states + j], 0, b);
    std::vector<HostTensor> final_states;
    std::vector<std::vector<HostTensor>> elements;
    scanOnce(ctx, spec, std::move(states), scans, lengths[b], final_states, elements);
    for (size_t i = 0; i < spec.states; ++i) batch_states[i].push_back(std::move(final_states[i]));
    for (size_t k = 0; k < spec.scan_outputs; ++k) {
      std::vector<HostTensor>& per_step = elements[k];
      if (per_step.empty() && max_len > 0) ctx.fail("a zero sequence length leaves scan output dims unknown");
      while (static_cast<int64_t>(per_step.size()) < max_len) {
        per_step.emplace_back(per_step.front().dtype(), per_step.front().dims());  // zeros
      }
      HostTensor stacked(per_step.empty() ? DType::Float : per_step.front().dtype(),
                         [&] {
                           std::vector<int64_t> d =
                               per_step.empty() ? std::vector<int64_t>{} : per_step.front().dims();
                           d.insert(d.begin(), max_len);
                           return d;
                         }());
      stackInto(stacked, per_step, 0, false);
      batch_outputs[k].push_back(std::move(stacked));
    }
  }
  for (size_t i = 0; i < spec.states && i < ctx.numOutputs(); ++i) {
    emitStacked(ctx, i, batch_states[i], 0, false, body.outputs()[i]);
  }
  for (size_t k = 0; k < spec.scan_outputs && spec.states + k < ctx.numOutputs(); ++k) {
    emitStacked(ctx, spec.states + k, batch_outputs[k], 0, false, nullptr);
  }
}

}  // namespace

void registerControlFlowKernels(KernelRegistry& r) {
  r.add({"", "If", 1, 1000, runIf});
  r.add({"", "Loop", 1, 1000, runLoop});
  r.add({"", "Scan", 8, 8, runScan8});
  r.add({"", "Scan", 9, 1000, runScan});
}

}  // namespace fusectl::kernels
