// Fallback to libonnx's per-node type and shape inference for ops without a fusectl rule.
//
// Builds the onnx::InferenceContext that a schema's inference function expects from fusectl's
// types: input TypeProtos, the data of small constant inputs, and known values as ONNX's
// "symbolic inputs". Everything libonnx throws is caught: a failed fallback only leaves the
// outputs untyped. Subgraph attributes are not converted, so ops with subgraphs need a rule.
#include <climits>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/onnx_pb.h>

#include "shape_rules/rules.h"

namespace fusectl::shape_rules {
namespace {

// Constant inputs larger than this are not copied: no shape depends on that much data.
constexpr size_t kMaxFallbackDataBytes = 64 * 1024;

void toProto(const Shape& s, onnx::TensorShapeProto* out) {
  for (const Dim& d : s.dims()) {
    auto* dim = out->add_dim();
    if (d.isStatic()) dim->set_dim_value(d.value());
    else if (d.isSymbolic()) dim->set_dim_param(d.symbol());
  }
}

std::unique_ptr<onnx::TypeProto> toProto(const ValueType& t) {
  auto tp = std::make_unique<onnx::TypeProto>();
  if (!t.isTensor()) {
    if (!tp->ParseFromString(t.opaque_type_proto)) return nullptr;
    return tp;
  }
  if (t.dtype == DType::Undefined) return nullptr;
  auto* tensor = tp->mutable_tensor_type();
  tensor->set_elem_type(static_cast<int32_t>(t.dtype));
  if (t.shape.hasRank()) toProto(t.shape, tensor->mutable_shape());
  return tp;
}

void toProto(const Tensor& t, onnx::TensorProto* out) {
  out->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) out->add_dims(d);
  if (t.dtype() == DType::String) {
    for (const std::string& s : t.strings()) out->add_string_data(s);
  } else if (t.bytes()) {
    out->set_raw_data(t.bytes(), t.byteSize());
  }
}

// Subgraph attributes are left out; see the file comment.
bool toProto(const Attribute& a, onnx::AttributeProto* out) {
  out->set_name(a.name);
  out->set_type(static_cast<onnx::AttributeProto::AttributeType>(a.kind));
  switch (a.kind) {
    case AttrKind::Float: out->set_f(a.f); return true;
    case AttrKind::Int: out->set_i(a.i); return true;
    case AttrKind::String: out->set_s(a.s); return true;
    case AttrKind::Tensor: toProto(a.t, out->mutable_t()); return true;
    case AttrKind::Floats: out->mutable_floats()->Add(a.floats.begin(), a.floats.end()); return true;
    case AttrKind::Ints: out->mutable_ints()->Add(a.ints.begin(), a.ints.end()); return true;
    case AttrKind::Strings:
      for (const std::string& s : a.strings) out->add_strings(s);
      return true;
    case AttrKind::Tensors:
      for (const Tensor& t : a.tensors) toProto(t, out->add_tensors());
      return true;
    case AttrKind::SparseTensor: return out->mutable_sparse_tensor()->ParseFromString(a.s);
    case AttrKind::TypeProto: return out->mutable_tp()->ParseFromString(a.s);
    default: return false;
  }
}

Shape fromProto(const onnx::TensorShapeProto& s) {
  std::vector<Dim> dims;
  for (const auto& d : s.dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) dims.push_back(Dim::known(d.dim_value()));
    else if (d.has_dim_param() && !d.dim_param().empty()) dims.push_back(Dim::symbolic(d.dim_param()));
    else dims.emplace_back();
  }
  return Shape(std::move(dims));
}

template <typename V>
auto& at(V& v, size_t i) {
  if (i >= v.size()) throw std::out_of_range("input or output index out of range");
  return v[i];
}

// Whether libonnx's inference function may see the values of constant input `i`. Some divide
// by them unchecked: SplitToSequence by its split size (a split of 0 killed `fusectl dump` with
// SIGFPE; tests/test_node_mutation_sweep.cpp). Such an input is passed as values unknown.
bool dataIsSafe(const std::string& op, size_t i, const Tensor& t) {
  if (op == "SplitToSequence" && i == 1) {
    if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32) return false;
    for (int64_t k = 0; k < t.numel(); ++k)
      if (t.valueAsInt64(k) <= 0) return false;
  }
  return true;
}

class FallbackContext : public onnx::InferenceContext {
 public:
  explicit FallbackContext(RuleContext& ctx) {
    for (const Attribute& a : ctx.node.attributes()) {
      onnx::AttributeProto p;
      if (toProto(a, &p)) attrs_.emplace(a.name, std::move(p));
    }
    size_t n = ctx.numInputs();
    types_.resize(n);
    data_.resize(n);
    symbolic_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (!ctx.hasInput(i)) continue;
      types_[i] = toProto(ctx.inType(i));
      const Tensor* t = ctx.inConstant(i);
      if (t && t->byteSize() <= kMaxFallbackDataBytes && dataIsSafe(ctx.node.opType(), i, *t)) {
        data_[i] = std::make_unique<onnx::TensorProto>();
        toProto(*t, data_[i].get());
      } else if (const KnownValues* kv = ctx.inValues(i)) {
        symbolic_[i] = std::make_unique<onnx::TensorShapeProto>();
        toProto(Shape(kv->elems), symbolic_[i].get());
      }
    }
    outputs_.resize(ctx.numOutputs());
  }

  const onnx::AttributeProto* getAttribute(const std::string& name) const override {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? nullptr : &it->second;
  }
  size_t getNumInputs() const override { return types_.size(); }
  const onnx::TypeProto* getInputType(size_t i) const override { return at(types_, i).get(); }
  const onnx::TensorProto* getInputData(size_t i) const override { return at(data_, i).get(); }
  const onnx::SparseTensorProto* getInputSparseData(size_t) const override { return nullptr; }
  const onnx::TensorShapeProto* getSymbolicInput(size_t i) const override {
    return at(symbolic_, i).get();
  }
  size_t getNumOutputs() const override { return outputs_.size(); }
  onnx::TypeProto* getOutputType(size_t i) override { return &at(outputs_, i); }
  onnx::GraphInferencer* getGraphAttributeInferencer(const std::string&) override {
    throw std::runtime_error("subgraphs are not converted for the libonnx fallback");
  }

  const std::vector<onnx::TypeProto>& outputs() const { return outputs_; }
  // A present input whose type is unknown: libonnx's inference functions read input types
  // without a null check (the ONNX checker guarantees them), so one must not run then.
  bool inputTypeMissing(const RuleContext& ctx) const {
    for (size_t i = 0; i < types_.size(); ++i)
      if (ctx.hasInput(i) && !types_[i]) return true;
    return false;
  }

 private:
  std::unordered_map<std::string, onnx::AttributeProto> attrs_;
  std::vector<std::unique_ptr<onnx::TypeProto>> types_;
  std::vector<std::unique_ptr<onnx::TensorProto>> data_;
  std::vector<std::unique_ptr<onnx::TensorShapeProto>> symbolic_;
  std::vector<onnx::TypeProto> outputs_;
};

}  // namespace

bool inferWithOnnx(RuleContext& ctx) {
  try {
    const std::string& domain = ctx.node.domain() == "ai.onnx" ? std::string() : ctx.node.domain();
    int version = ctx.opset > 0 && ctx.opset < INT_MAX ? static_cast<int>(ctx.opset) : INT_MAX;
    const onnx::OpSchema* schema =
        onnx::OpSchemaRegistry::Schema(ctx.node.opType(), version, domain);
    if (!schema || !schema->has_type_and_shape_inference_function()) return false;
    // Subgraphs are not converted (getGraphAttributeInferencer throws), and Scan's inference
    // reads its body attribute without a null check: a Scan whose body attribute a mutation
    // renamed crashed there. No op whose schema takes a graph goes to libonnx.
    for (const auto& [name, attr] : schema->attributes()) {
      if (attr.type == onnx::AttributeProto::GRAPH || attr.type == onnx::AttributeProto::GRAPHS)
        return false;
    }
    // Inference functions that index an input's dims before checking its rank (or that it is
    // there at all): they run only on inputs of the ranks they assume. STFT reads signal dims 1
    // and 2 (found by fuzzing); the first RNN, GRU and LSTM schemas (opsets 1 and 3) read X's
    // three dims (found by tests/test_onnx_inference_sweep.cpp, which asks every schema libonnx
    // has); MaxUnpool without output_shape reads dim 1 of its indices I (fuzzing: an unranked
    // I crashed the loader).
    static const struct {
      const char* op;
      size_t input;
      size_t min_rank;
      size_t max_rank;
      bool even_when_absent;  // libonnx reads the input's type whether or not it was given
    } kAssumedRanks[] = {{"STFT", 0, 3, 3, false},
                         {"RNN", 0, 3, 3, false},
                         {"GRU", 0, 3, 3, false},
                         {"LSTM", 0, 3, 3, false},
                         {"MaxUnpool", 1, 2, SIZE_MAX, true}};
    for (const auto& need : kAssumedRanks) {
      if (ctx.node.opType() != need.op) continue;
      if (!ctx.hasInput(need.input)) {
        if (need.even_when_absent) return false;
        continue;
      }
      const Shape& shape = ctx.inShape(need.input);
      if (!shape.hasRank() || shape.rank() < need.min_rank || shape.rank() > need.max_rank)
        return false;
    }
    FallbackContext fc(ctx);
    // LabelEncoder's reads input 0's type unchecked: a 281-byte file crashed `fusectl dump`.
    if (fc.inputTypeMissing(ctx)) return false;
    try {
      // Fills outputs whose type constraint allows one type; complains about missing inputs,
      // which the inference function may well cope with.
      schema->CheckInputOutputType(fc);
    } catch (const std::exception&) {
    }
    schema->GetTypeAndShapeInferenceFunction()(fc);
    bool any = false;
    for (size_t i = 0; i < fc.outputs().size(); ++i) {
      const onnx::TypeProto& tp = fc.outputs()[i];
      if (tp.value_case() == onnx::TypeProto::VALUE_NOT_SET) continue;
      ValueType t;
      if (tp.has_tensor_type()) {
        t.dtype = static_cast<DType>(tp.tensor_type().elem_type());
        if (tp.tensor_type().has_shape()) t.shape = fromProto(tp.tensor_type().shape());
      } else {
        t.opaque_type_proto = tp.SerializeAsString();
      }
      ctx.setOutputType(i, std::move(t));
      any = true;
    }
    return any;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace fusectl::shape_rules
