// Shape rules for If, Loop and Scan: type the subgraphs' inputs from the node, infer the
// subgraphs, and type the node's outputs from the subgraphs' outputs.
//
// A subgraph input the model declares keeps its declaration; only missing parts are filled. A
// declaration that the node's input or the body's own output provably contradicts (another rank,
// a static dim of another size) is false, and passes would act on it (fuse-layer-norm fused a
// Loop body's norm against a declared [2,8] while the Loop carried [2,1]): it is relaxed like an
// undeclared shape.
// Loop-carried values (Loop's and Scan's states) whose shape changes between iterations (a
// growing Concat, a scalar initial state that the first step broadcasts) are detected after a
// pass over the body: their input shape is relaxed to what both agree on and the body is
// inferred again.
#include <fmt/format.h>

#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

Graph* graphAttr(const Node& n, std::string_view name) {
  const Attribute* a = n.attr(name);
  return a && a->kind == AttrKind::Graph ? a->g.get() : nullptr;
}

// The most specific shape true of both: equal dims stay, others become unknown.
Shape mergeShapes(const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank() || a.rank() != b.rank()) return Shape();
  Shape out = a;
  for (size_t i = 0; i < a.rank(); ++i)
    if (!a[i].provablyEqual(b[i])) out[i] = Dim::unknown();
  return out;
}

ValueType mergeTypes(const ValueType& a, const ValueType& b) {
  ValueType t;
  t.dtype = a.dtype != DType::Undefined ? a.dtype : b.dtype;
  t.opaque_type_proto = a.opaque_type_proto.empty() ? b.opaque_type_proto : a.opaque_type_proto;
  t.shape = mergeShapes(a.shape, b.shape);
  return t;
}

// Fills a subgraph input's missing dtype and shape; declared parts stay.
void fillInput(Value* v, const ValueType& t) {
  if (v->type.dtype == DType::Undefined) v->type.dtype = t.dtype;
  if (!v->type.shape.hasRank()) v->type.shape = t.shape;
  if (v->type.opaque_type_proto.empty() && v->type.dtype == DType::Undefined)
    v->type.opaque_type_proto = t.opaque_type_proto;
}

ValueType typeOf(const Value* v) { return v ? v->type : ValueType{}; }

// Types a body input from what the node hands it (fillInput). Returns whether the model's
// declaration of it stands: a declared shape that `given` provably contradicts is relaxed to
// what both agree on, with a warning, and counts as undeclared.
bool bindBodyInput(RuleContext& ctx, Value* v, const ValueType& given) {
  bool declared = v->type.shape.hasRank();
  if (declared && provablyDiffer(v->type.shape, given.shape)) {
    ctx.warn(fmt::format("body input '{}' is declared {} but is given {}", v->name(),
                         v->type.shape.str(), given.shape.str()));
    v->type.shape = mergeShapes(v->type.shape, given.shape);
    declared = false;
  }
  fillInput(v, given);
  return declared;
}

Shape withoutAxis(const Shape& s, int64_t axis) {
  if (!s.hasRank()) return s;
  auto n = normalizeAxis(axis, static_cast<int64_t>(s.rank()));
  if (!n) return Shape();
  std::vector<Dim> dims = s.dims();
  dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(*n));
  return Shape(std::move(dims));
}

Shape withAxis(const Shape& s, int64_t axis, const Dim& d) {
  if (!s.hasRank()) return s;
  auto n = normalizeAxis(axis, static_cast<int64_t>(s.rank()) + 1);
  if (!n) return Shape();
  std::vector<Dim> dims = s.dims();
  dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(*n), d);
  return Shape(std::move(dims));
}

bool ifRule(RuleContext& ctx) {
  Graph* then_g = graphAttr(ctx.node, "then_branch");
  Graph* else_g = graphAttr(ctx.node, "else_branch");
  if (!then_g || !else_g) return false;
  ctx.inferSubgraph(*then_g);
  ctx.inferSubgraph(*else_g);
  // A constant condition picks its branch's types outright.
  const KnownValues* cond = ctx.inValues(0);
  int taken = cond && cond->elems.size() == 1 && cond->allStatic()
                  ? (cond->elems[0].value() != 0 ? 1 : 0)
                  : -1;
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    ValueType t = typeOf(i < then_g->outputs().size() ? then_g->outputs()[i] : nullptr);
    ValueType e = typeOf(i < else_g->outputs().size() ? else_g->outputs()[i] : nullptr);
    ctx.setOutputType(i, taken == 1 ? t : taken == 0 ? e : mergeTypes(t, e));
  }
  return true;
}

// Infers `body` and relaxes its loop-carried inputs (body inputs from `first_in`, outputs from
// `first_out`, one per entry of `declared`) whose shape the body changes: such an input is
// given what its initial shape and the body's output agree on, and the body is inferred again,
// until the shapes hold for every iteration. Each round only drops dims or a rank; after 8
// rounds without a fixed point the changing inputs lose their rank outright. Inputs whose shape
// the model declared (`declared`) keep it unless the body's output provably contradicts it.
void inferCarriedBody(RuleContext& ctx, Graph& body, size_t first_in, size_t first_out,
                      const std::vector<bool>& declared) {
  const auto& ins = body.inputs();
  ctx.inferSubgraph(body);
  for (int round = 0; round <= 8; ++round) {
    bool again = false;
    for (size_t i = 0; i < declared.size(); ++i) {
      Value* in = ins[first_in + i];
      const Shape& out = body.outputs()[first_out + i]->type.shape;
      if (!in->type.shape.hasRank() || in->type.shape == out) continue;
      if (declared[i] && !provablyDiffer(in->type.shape, out)) continue;
      in->type.shape = round < 8 ? mergeShapes(in->type.shape, out) : Shape();
      again = true;
    }
    if (!again) return;
    clearNodeOutputShapes(body);
    ctx.inferSubgraph(body);
  }
}

// Loop inputs: M, cond, v_initial...; body inputs: iteration, cond, v...; body outputs: cond,
// v..., scan outputs...; node outputs: v_final..., scan outputs stacked on a new first axis.
bool loop(RuleContext& ctx) {
  Graph* body = graphAttr(ctx.node, "body");
  if (!body) return false;
  const auto& ins = body->inputs();
  size_t carried = ctx.numInputs() >= 2 ? ctx.numInputs() - 2 : 0;
  if (ins.size() != carried + 2 || body->outputs().size() < carried + 1) {
    ctx.warn("body inputs and outputs do not match the Loop's");
    ctx.inferSubgraph(*body);
    return true;
  }
  fillInput(ins[0], ValueType{DType::Int64, Shape::scalar(), {}});
  fillInput(ins[1], ValueType{DType::Bool, Shape::scalar(), {}});
  std::vector<bool> declared(carried);
  for (size_t i = 0; i < carried; ++i)
    declared[i] = bindBodyInput(ctx, ins[2 + i], ctx.inType(2 + i));
  inferCarriedBody(ctx, *body, 2, 1, declared);
  Dim trips;
  if (const KnownValues* m = ctx.hasInput(0) && !ctx.hasInput(1) ? ctx.inValues(0) : nullptr;
      m && m->elems.size() == 1)
    trips = m->elems[0];
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    if (1 + i >= body->outputs().size()) break;
    ValueType t = body->outputs()[1 + i]->type;
    if (i < carried) {
      t = mergeTypes(t, ctx.inType(2 + i));
      if (t.dtype == DType::Undefined) t.dtype = ins[2 + i]->type.dtype;
    } else {
      t.shape = withAxis(t.shape, 0, trips);
    }
    ctx.setOutputType(i, std::move(t));
  }
  return true;
}

// Scan-9+: inputs are N states then M scan inputs, sliced along scan_input_axes. Scan-8 has a
// leading sequence_lens input and a batch axis in front of everything.
bool scan(RuleContext& ctx) {
  Graph* body = graphAttr(ctx.node, "body");
  if (!body) return false;
  bool v8 = ctx.opset < 9;
  size_t first = v8 ? 1 : 0;
  size_t m = static_cast<size_t>(ctx.node.attrInt("num_scan_inputs", 0));
  size_t total = ctx.numInputs() - first;
  if (m > total || body->inputs().size() != total) {
    ctx.warn("body inputs do not match the Scan's");
    ctx.inferSubgraph(*body);
    return true;
  }
  size_t n = total - m;
  auto axesOf = [&](const char* name, size_t count) {
    const auto* a = intsAttr(ctx.node, name);
    return a && a->size() == count ? *a : std::vector<int64_t>(count, 0);
  };
  std::vector<int64_t> in_axes = axesOf("scan_input_axes", m);
  Dim batch, seq;
  std::vector<bool> declared(n);
  for (size_t i = 0; i < total; ++i) {
    ValueType t = ctx.inType(first + i);
    if (v8) {
      if (t.shape.hasRank() && t.shape.rank() >= 1) batch = t.shape[0];
      t.shape = withoutAxis(t.shape, 0);
    }
    if (i >= n) {
      size_t k = i - n;
      int64_t axis = v8 ? 0 : in_axes[k];
      if (t.shape.hasRank()) {
        if (auto a = normalizeAxis(axis, static_cast<int64_t>(t.shape.rank())); a && seq.isUnknown())
          seq = t.shape[*a];
      }
      t.shape = withoutAxis(t.shape, axis);
    }
    const bool stands = bindBodyInput(ctx, body->inputs()[i], t);
    if (i < n) declared[i] = stands;
  }
  if (body->outputs().size() < n) {
    ctx.warn("body outputs do not match the Scan's");
    ctx.inferSubgraph(*body);
    return true;
  }
  inferCarriedBody(ctx, *body, 0, 0, declared);
  size_t k_outs = body->outputs().size() >= n ? body->outputs().size() - n : 0;
  std::vector<int64_t> out_axes = axesOf("scan_output_axes", k_outs);
  for (size_t i = 0; i < ctx.numOutputs() && i < body->outputs().size(); ++i) {
    ValueType t = body->outputs()[i]->type;
    // A final state is the initial one when the sequence is empty.
    if (i < n) t = mergeTypes(t, body->inputs()[i]->type);
    if (i >= n) t.shape = withAxis(t.shape, v8 ? 0 : out_axes[i - n], seq);
    if (v8) t.shape = withAxis(t.shape, 0, batch);
    ctx.setOutputType(i, std::move(t));
  }
  return true;
}

}  // namespace

void registerControlFlowRules(RuleRegistry& r) {
  r.add("", "If", ifRule);
  r.add("", "Loop", loop);
  r.add("", "Scan", scan);
}

}  // namespace fusectl::shape_rules
