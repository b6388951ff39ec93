// The sequence and optional ops: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
// SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap, Optional,
// OptionalHasElement, OptionalGetElement.
//
// Sequences are immutable HostTensors of kind Sequence (kernel.h): an op that "changes" one
// builds a new list of tensor handles, sharing the tensors' bytes, so none of them copies data
// except SplitToSequence and ConcatFromSequence. Element copies are whole bytes, so packed
// sub-byte types are refused there.
#include <cstring>
#include <string>
#include <vector>

#include "dtype_dispatch.h"
#include "fusectl/kernels/kernel.h"
#include "proto_wire.h"

namespace fusectl::kernels {

namespace {

const HostTensor& requireSequence(const KernelContext& ctx, size_t i) {
  const HostTensor& t = ctx.requireInput(i);
  if (!t.isSequence()) ctx.fail("input " + std::to_string(i) + " is not a sequence");
  return t;
}

// A position input (int32/int64 scalar) in [-n, n - 1], or [-n, n] when `allow_end`.
int64_t positionOf(const KernelContext& ctx, const HostTensor& p, int64_t n, bool allow_end) {
  if (p.numel() != 1 || (p.dtype() != DType::Int32 && p.dtype() != DType::Int64)) {
    ctx.fail("position must be one int32 or int64");
  }
  int64_t pos = p.dtype() == DType::Int32 ? p.data<int32_t>()[0] : p.data<int64_t>()[0];
  const int64_t hi = allow_end ? n : n - 1;
  if (pos < -n || pos > hi) {
    ctx.fail("position " + std::to_string(pos) + " is outside [" + std::to_string(-n) + ", " +
             std::to_string(hi) + "] for a sequence of " + std::to_string(n));
  }
  return pos < 0 ? pos + n : pos;
}

DType elementDType(const KernelContext& ctx, DType fallback) {
  return kutil::dtypeAttr(ctx, "dtype", fallback);
}

void sequenceEmpty(KernelContext& ctx) {
  ctx.setOutput(0, HostTensor::sequence(elementDType(ctx, DType::Float), {}));
}

void sequenceConstruct(KernelContext& ctx) {
  std::vector<HostTensor> items;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const HostTensor& t = ctx.requireInput(i);
    if (!t.isTensor()) ctx.fail("input " + std::to_string(i) + " is not a tensor");
    if (!items.empty() && t.dtype() != items.front().dtype()) {
      ctx.fail("inputs mix " + std::string(dtypeName(items.front().dtype())) + " and " +
               std::string(dtypeName(t.dtype())));
    }
    items.push_back(t);
  }
  const DType dtype = items.empty() ? DType::Float : items.front().dtype();
  ctx.setOutput(0, HostTensor::sequence(dtype, std::move(items)));
}

void sequenceInsert(KernelContext& ctx) {
  const HostTensor& seq = requireSequence(ctx, 0);
  const HostTensor& t = ctx.requireInput(1);
  if (!t.isTensor()) ctx.fail("the inserted value is not a tensor");
  std::vector<HostTensor> items = seq.items();
  if (!items.empty() && items.front().dtype() != t.dtype()) {
    ctx.fail("cannot insert " + std::string(dtypeName(t.dtype())) + " into a sequence of " +
             std::string(dtypeName(items.front().dtype())));
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t pos = ctx.input(2) ? positionOf(ctx, *ctx.input(2), n, true) : n;
  items.insert(items.begin() + pos, t);
  ctx.setOutput(0, HostTensor::sequence(t.dtype(), std::move(items)));
}

void sequenceAt(KernelContext& ctx) {
  const HostTensor& seq = requireSequence(ctx, 0);
  const int64_t n = static_cast<int64_t>(seq.items().size());
  ctx.setOutput(0, seq.items()[positionOf(ctx, ctx.requireInput(1), n, false)]);
}

void sequenceErase(KernelContext& ctx) {
  const HostTensor& seq = requireSequence(ctx, 0);
  std::vector<HostTensor> items = seq.items();
  const int64_t n = static_cast<int64_t>(items.size());
  if (n == 0) ctx.fail("cannot erase from an empty sequence");
  const int64_t pos = ctx.input(1) ? positionOf(ctx, *ctx.input(1), n, false) : n - 1;
  items.erase(items.begin() + pos);
  ctx.setOutput(0, HostTensor::sequence(seq.dtype(), std::move(items)));
}

void sequenceLength(KernelContext& ctx) {
  const HostTensor& seq = requireSequence(ctx, 0);
  HostTensor& out = ctx.allocateOutput(0, DType::Int64, {});
  out.mutableData<int64_t>()[0] = static_cast<int64_t>(seq.items().size());
}

int64_t product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= dims[i];
  return n;
}

void requireWholeBytes(const KernelContext& ctx, DType dtype) {
  if (dtypeIsSubByte(dtype)) {
    ctx.fail(std::string(dtypeName(dtype)) + " is a packed sub-byte type; not supported here");
  }
}

// Copies rows [begin, begin + count) along `axis` of `src` into a new tensor.
HostTensor sliceRange(const HostTensor& src, size_t axis, int64_t begin, int64_t count) {
  std::vector<int64_t> dims = src.dims();
  const int64_t outer = product(dims, 0, axis), len = dims[axis];
  const int64_t inner = product(dims, axis + 1, dims.size());
  dims[axis] = count;
  HostTensor out(src.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t from = (o * len + begin) * inner, to = o * count * inner;
    if (src.dtype() == DType::String) {
      for (int64_t i = 0; i < count * inner; ++i) out.strings()[to + i] = src.strings()[from + i];
    } else if (count * inner > 0) {
      const size_t es = dtypeSize(src.dtype());
      std::memcpy(static_cast<char*>(out.mutableRaw()) + to * es,
                  static_cast<const char*>(src.raw()) + from * es,
                  static_cast<size_t>(count * inner) * es);
    }
  }
  return out;
}

void splitToSequence(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireWholeBytes(ctx, x.dtype());
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", 0);
  if (axis < -rank || axis >= rank) ctx.fail("axis " + std::to_string(axis) + " is out of range");
  if (axis < 0) axis += rank;
  const int64_t len = x.dim(static_cast<size_t>(axis));
  std::vector<int64_t> lengths;
  const HostTensor* split = ctx.input(1);
  auto splitValue = [&](int64_t i) {
    return split->dtype() == DType::Int32 ? split->data<int32_t>()[i] : split->data<int64_t>()[i];
  };
  if (split && split->dtype() != DType::Int32 && split->dtype() != DType::Int64) {
    ctx.fail("split must be int32 or int64");
  }
  bool squeeze = false;
  if (!split) {
    lengths.assign(static_cast<size_t>(len), 1);
    squeeze = ctx.attrInt("keepdims", 1) == 0;
  } else if (split->rank() == 0) {
    const int64_t chunk = splitValue(0);
    if (chunk <= 0) ctx.fail("split must be positive, not " + std::to_string(chunk));
    for (int64_t at = 0; at < len; at += chunk) lengths.push_back(std::min(chunk, len - at));
  } else {
    int64_t total = 0;
    for (int64_t i = 0; i < split->numel(); ++i) {
      const int64_t v = splitValue(i);
      if (v < 0) ctx.fail("split lengths must not be negative");
      lengths.push_back(v);
      if (__builtin_add_overflow(total, v, &total)) ctx.fail("split lengths overflow");
    }
    if (total != len) {
      ctx.fail("split lengths sum to " + std::to_string(total) + " but the axis has " +
               std::to_string(len));
    }
  }
  std::vector<HostTensor> items;
  int64_t at = 0;
  for (int64_t n : lengths) {
    HostTensor part = sliceRange(x, static_cast<size_t>(axis), at, n);
    if (squeeze) {
      std::vector<int64_t> dims = part.dims();
      dims.erase(dims.begin() + axis);
      part = part.dtype() == DType::String ? [&] {
        HostTensor s(DType::String, dims);
        s.strings() = part.strings();
        return s;
      }()
                                           : part.reshaped(dims);
    }
    items.push_back(std::move(part));
    at += n;
  }
  ctx.setOutput(0, HostTensor::sequence(x.dtype(), std::move(items)));
}

void concatFromSequence(KernelContext& ctx) {
  const HostTensor& seq = requireSequence(ctx, 0);
  const std::vector<HostTensor>& items = seq.items();
  if (items.empty()) ctx.fail("cannot concatenate an empty sequence");
  const bool new_axis = ctx.attrInt("new_axis", 0) != 0;
  const std::vector<int64_t>& first = items.front().dims();
  const DType dtype = items.front().dtype();
  requireWholeBytes(ctx, dtype);
  const int64_t out_rank = static_cast<int64_t>(first.size()) + (new_axis ? 1 : 0);
  int64_t axis = ctx.attrInt("axis", 0);
  if (axis < -out_rank || axis >= out_rank) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(out_rank));
  }
  if (axis < 0) axis += out_rank;
  // Each item as [outer, rows, inner] with rows its extent on the axis (1 for a new axis).
  std::vector<int64_t> out_dims = first;
  if (new_axis) out_dims.insert(out_dims.begin() + axis, 0);
  out_dims[axis] = 0;
  std::vector<int64_t> rows;
  for (const HostTensor& t : items) {
    // Rank first: a new axis is inserted at a position valid only for items of the first's rank.
    if (t.dtype() != dtype || t.dims().size() != first.size())
      ctx.fail("sequence items differ in dtype or rank");
    std::vector<int64_t> d = t.dims();
    if (new_axis) d.insert(d.begin() + axis, 1);
    for (size_t k = 0; k < d.size(); ++k) {
      if (static_cast<int64_t>(k) != axis && d[k] != out_dims[k]) {
        ctx.fail("sequence items " + formatDims(first) + " and " + formatDims(t.dims()) +
                 " cannot be concatenated on axis " + std::to_string(axis));
      }
    }
    rows.push_back(d[axis]);
    out_dims[axis] += d[axis];
  }
  HostTensor& out = ctx.allocateOutput(0, dtype, out_dims);
  const int64_t outer = product(out_dims, 0, axis);
  const int64_t inner = product(out_dims, axis + 1, out_dims.size());
  const int64_t total = out_dims[axis];
  if (dtype == DType::String) out.strings().resize(static_cast<size_t>(outer * total * inner));
  const size_t es = dtypeSize(dtype);
  int64_t offset = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t block = rows[i] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t to = (o * total + offset) * inner, from = o * block;
      if (dtype == DType::String) {
        for (int64_t e = 0; e < block; ++e) out.strings()[to + e] = items[i].strings()[from + e];
      } else if (block > 0) {
        std::memcpy(static_cast<char*>(out.mutableRaw()) + to * es,
                    static_cast<const char*>(items[i].raw()) + from * es,
                    static_cast<size_t>(block) * es);
      }
    }
    offset += rows[i];
  }
}

// SequenceMap(seq, extra...): the body runs once per element of the first sequence; inputs
// that are sequences give their element at that position, tensors are passed whole; each
// body output is collected into an output sequence.
void sequenceMap(KernelContext& ctx) {
  const HostTensor& first = requireSequence(ctx, 0);
  const size_t n = first.items().size();
  for (size_t i = 1; i < ctx.numInputs(); ++i) {
    const HostTensor& in = ctx.requireInput(i);
    if (in.isSequence() && in.items().size() != n) {
      ctx.fail("input " + std::to_string(i) + " has " + std::to_string(in.items().size()) +
               " elements but input 0 has " + std::to_string(n));
    }
  }
  const Attribute* body_attr = ctx.node().attr("body");
  if (!body_attr || !body_attr->g) ctx.fail("has no graph attribute 'body'");
  const Graph& body = *body_attr->g;
  std::vector<std::vector<HostTensor>> collected(ctx.numOutputs());
  std::vector<HostTensor> args(ctx.numInputs());
  for (size_t it = 0; it < n; ++it) {
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      const HostTensor& in = *ctx.input(i);
      args[i] = in.isSequence() ? in.items()[it] : in;
    }
    std::vector<HostTensor> results = ctx.runSubgraph("body", args);
    if (results.size() < ctx.numOutputs()) ctx.fail("the body has too few outputs");
    for (size_t k = 0; k < ctx.numOutputs(); ++k) collected[k].push_back(std::move(results[k]));
  }
  for (size_t k = 0; k < ctx.numOutputs(); ++k) {
    DType dtype = collected[k].empty() ? body.outputs()[k]->dtype() : collected[k].front().dtype();
    ctx.setOutput(k, HostTensor::sequence(dtype, std::move(collected[k])));
  }
}

// Optional(x) holds x, which at run time is x itself; Optional() with a `type` is empty.
void optional(KernelContext& ctx) {
  if (const HostTensor* x = ctx.input(0)) {
    ctx.setOutput(0, *x);
    return;
  }
  const Attribute* type = ctx.node().attr("type");
  if (!type) ctx.fail("an Optional without an input needs its 'type' attribute");
  const wire::ValueKind kind = wire::decodeTypeProto(type->s.str());
  ctx.setOutput(0, HostTensor::emptyOptional(kind.element, kind.of == wire::ValueKind::Of::Sequence));
}

void optionalHasElement(KernelContext& ctx) {
  const HostTensor* x = ctx.input(0);
  HostTensor& out = ctx.allocateOutput(0, DType::Bool, {});
  out.mutableData<bool>()[0] = x && !x->isEmptyOptional();
}

void optionalGetElement(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.isEmptyOptional()) ctx.fail("the optional input is empty");
  ctx.setOutput(0, x);
}

}  // namespace

void registerSequenceKernels(KernelRegistry& r) {
  r.add({"", "SequenceEmpty", 11, 1000, sequenceEmpty});
  r.add({"", "SequenceConstruct", 11, 1000, sequenceConstruct});
  r.add({"", "SequenceInsert", 11, 1000, sequenceInsert});
  r.add({"", "SequenceAt", 11, 1000, sequenceAt});
  r.add({"", "SequenceErase", 11, 1000, sequenceErase});
  r.add({"", "SequenceLength", 11, 1000, sequenceLength});
  r.add({"", "SplitToSequence", 11, 1000, splitToSequence});
  r.add({"", "ConcatFromSequence", 11, 1000, concatFromSequence});
  r.add({"", "SequenceMap", 17, 1000, sequenceMap});
  r.add({"", "Optional", 15, 1000, optional});
  r.add({"", "OptionalHasElement", 15, 1000, optionalHasElement});
  r.add({"", "OptionalGetElement", 15, 1000, optionalGetElement});
}

}  // namespace fusectl::kernels
