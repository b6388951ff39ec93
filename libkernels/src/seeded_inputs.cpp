// Seeded inputs: PCG32 streams keyed by (seed, input name), see seeded_inputs.h.
#include "fusectl/kernels/seeded_inputs.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"

namespace fusectl::kernels {

namespace {

// PCG32 (pcg_setseq_64_xsh_rr_32, O'Neill 2014): tiny, fast and identical everywhere.
class Pcg32 {
 public:
  Pcg32(uint64_t seed, uint64_t stream) : inc_((stream << 1) | 1u) {
    next();
    state_ += seed;
    next();
  }
  uint32_t next() {
    const uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    const uint32_t xorshifted = static_cast<uint32_t>(((old >> 18) ^ old) >> 27);
    const uint32_t rot = static_cast<uint32_t>(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
  }
  // Uniform in [-1, 1) on a 2^-23 grid: exact in float32, no libm, no platform rounding.
  float nextSigned() {
    const int32_t u = static_cast<int32_t>(next() >> 8) - (1 << 23);
    return static_cast<float>(u) * (1.0f / 8388608.0f);
  }

 private:
  uint64_t state_ = 0;
  uint64_t inc_;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

template <typename T>
void fillInts(HostTensor& t, Pcg32& rng, uint32_t count) {
  T* p = t.mutableData<T>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(rng.next() % count);
}

// Whether an integer input is a 0/1 flag by its name: an attention or padding mask, or BERT's
// token types (segment ids). A transformer export turns its mask into additive logits, as in
// (1 - mask) * -10000: a 9 makes them +80000, so that softmax is a near one-hot on which any
// two correct roundings disagree (BERT-base's fused attention then differed from the unfused
// chain by up to 1.2e-3, 7.5e-4 of its output's largest magnitude, and `optimize --gate` undid
// 14 attention sites; with 0/1 masks 9.5e-7); and token types index a 2-row embedding.
bool zeroOneByName(const std::string& name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("mask") != std::string::npos || lower.find("token_type") != std::string::npos ||
         lower.find("segment") != std::string::npos;
}

// What an integer input's uses say about its values, looking through the ops that pass values
// on unchanged (Reshape, Unsqueeze, Cast between integer types...), a few levels deep:
// - Gather indices into a constant table: below the table's length on the gathered axis (an
//   index past it fails the node; BERT's token types index a 2-row table, whatever the input's
//   name);
// - Cast to a floating type and then arithmetic (Sub, Mul, Add, Div): a 0/1 flag, as a
//   transformer's mask is on its way to (1 - mask) * -10000 (see zeroOneByName), whatever the
//   input's name;
// - Equal with a constant of 0s and 1s, or a Cast to bool: a 0/1 flag, as a mask is on its way
//   to Where(Equal(mask, 0), -inf, scores) or Where(Cast<bool>(mask), scores, -inf); but not
//   a value that also indexes a Gather: token ids compared with the padding id stay ids.
// Returns the exclusive upper bound the uses allow, at most `ints`.
struct UseBound {
  uint32_t ints;
  bool indexes = false;       // read as Gather indices
  bool tested_as_flag = false;  // compared with 0 or 1 by Equal
  void gather(const Node& n) {
    indexes = true;
    const Value* table = n.input(0);
    if (!table || !table->isInitializer()) return;
    const std::vector<int64_t>& dims = table->initializer()->dims();
    int64_t axis = n.attrInt("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(dims.size());
    if (axis < 0 || axis >= static_cast<int64_t>(dims.size()) || dims[axis] <= 0) return;
    ints = static_cast<uint32_t>(std::min<int64_t>(ints, dims[axis]));
  }
  // Equal(v, c) with c a constant whose every element is 0 or 1: a mask tested for its padding
  // on its way to a Where (`Where(Equal(mask, 0), -inf, scores)`).
  static bool comparedWithFlag(const Node& equal, size_t input) {
    const Value* other = equal.input(input == 0 ? 1 : 0);
    if (!other) return false;
    const Tensor* c = other->isConstant() ? other->initializer() : nullptr;
    if (const Node* p = other->producer(); p && p->opType() == "Constant" && p->domain().empty()) {
      const Attribute* value = p->attr("value");
      if (value && value->kind == AttrKind::Tensor) c = &value->t.tensor();
    }
    if (!c || c->numel() == 0 || c->numel() > 64) return false;
    for (int64_t i = 0; i < c->numel(); ++i) {
      const double x = c->valueAsDouble(i);
      if (x != 0 && x != 1) return false;
    }
    return true;
  }
  // `floating`: the value has been cast to a floating type on the way here.
  void walk(const Value& v, bool floating, int depth) {
    if (depth > 6) return;
    for (const Use& u : v.uses()) {
      if (u.input == Use::kImplicitUse || !u.node->domain().empty()) continue;
      const Node& n = *u.node;
      const std::string& op = n.opType();
      if (op == "Gather" && u.input == 1 && !floating) {
        gather(n);
      } else if (floating && (op == "Sub" || op == "Mul" || op == "Add" || op == "Div")) {
        ints = std::min<uint32_t>(ints, 2);
      } else if (!floating && op == "Equal" && comparedWithFlag(n, u.input)) {
        tested_as_flag = true;
      } else if (op == "Cast") {
        const DType to = static_cast<DType>(n.attrInt("to", 0));
        if (to == DType::Bool) {
          ints = std::min<uint32_t>(ints, 2);
          continue;
        }
        const bool to_floating = dtypeIsFloat(to);
        if (n.output(0)) walk(*n.output(0), floating || to_floating, depth + 1);
      } else if ((op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" || op == "Flatten" ||
                  op == "Expand" || op == "Identity" || op == "Transpose" || op == "Slice") &&
                 u.input == 0 && n.output(0)) {
        walk(*n.output(0), floating, depth + 1);
      }
    }
  }
};

uint32_t intBoundByUse(const Value& input, uint32_t ints) {
  UseBound bound{ints};
  bound.walk(input, false, 0);
  // Token ids compared with the padding id (Equal(input_ids, 0) building the mask) stay ids.
  if (bound.tested_as_flag && !bound.indexes) bound.ints = std::min<uint32_t>(bound.ints, 2);
  return std::max<uint32_t>(bound.ints, 1);
}

}  // namespace

std::vector<int64_t> concreteInputDims(const Value& input, const Shape* override) {
  const Shape& declared = input.shape();
  if (override) {
    if (!override->isStatic()) {
      throwInvalid("shape " + override->str() + " for input '" + input.name() +
                   "' must have only numeric dims");
    }
    if (declared.hasRank() && declared.rank() != override->rank()) {
      throwInvalid("shape " + override->str() + " for input '" + input.name() + "' has rank " +
                   std::to_string(override->rank()) + " but the graph declares " +
                   input.type.str());
    }
    for (size_t d = 0; declared.hasRank() && d < declared.rank(); ++d) {
      if (declared[d].isStatic() && declared[d].value() != (*override)[d].value()) {
        throwInvalid("shape " + override->str() + " for input '" + input.name() +
                     "' conflicts with the declared " + input.type.str());
      }
    }
    return override->staticDims();
  }
  if (!declared.hasRank()) {
    throwInvalid("input '" + input.name() + "' has an unknown rank; give its shape (--shape " +
                 input.name() + "=DIMS)");
  }
  std::vector<int64_t> dims;
  for (const Dim& d : declared.dims()) dims.push_back(d.isStatic() ? d.value() : 1);
  return dims;
}

HostTensor makeRandomInput(const Value& input, uint64_t seed, const Shape* override) {
  const std::vector<int64_t> dims = concreteInputDims(input, override);
  const DType dtype = input.dtype();
  if (dtype == DType::Undefined || dtype == DType::String || dtype == DType::Complex64 ||
      dtype == DType::Complex128 || !dtypeIsKnown(static_cast<int32_t>(dtype)) ||
      dtypeStorageBytes(dtype, 2) != 2 * dtypeSize(dtype)) {
    throwUnsupported("cannot generate random data for input '" + input.name() + "' of type " +
                     input.type.str() + "; give it with --input");
  }
  HostTensor t(dtype, dims);
  Pcg32 rng(seed, fnv1a(input.name()));
  const int64_t n = t.numel();
  // Values [0, ints): 0/1 for a flag by its name, else [0, 10), narrowed by the input's uses.
  const uint32_t ints = intBoundByUse(input, zeroOneByName(input.name()) ? 2u : 10u);
  switch (dtype) {
    case DType::Float: {
      float* p = t.mutableData<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = rng.nextSigned();
      break;
    }
    case DType::Double: {
      double* p = t.mutableData<double>();
      for (int64_t i = 0; i < n; ++i) p[i] = rng.nextSigned();
      break;
    }
    case DType::Float16: {
      uint16_t* p = t.mutableData<uint16_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = floatToHalf(rng.nextSigned());
      break;
    }
    case DType::BFloat16: {
      uint16_t* p = t.mutableData<uint16_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = floatToBFloat16(rng.nextSigned());
      break;
    }
    case DType::Bool: {
      uint8_t* p = t.mutableData<uint8_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng.next() >> 31);
      break;
    }
    case DType::Int8: fillInts<int8_t>(t, rng, ints); break;
    case DType::UInt8: fillInts<uint8_t>(t, rng, ints); break;
    case DType::Int16: fillInts<int16_t>(t, rng, ints); break;
    case DType::UInt16: fillInts<uint16_t>(t, rng, ints); break;
    case DType::Int32: fillInts<int32_t>(t, rng, ints); break;
    case DType::UInt32: fillInts<uint32_t>(t, rng, ints); break;
    case DType::Int64: fillInts<int64_t>(t, rng, ints); break;
    case DType::UInt64: fillInts<uint64_t>(t, rng, ints); break;
    default:
      throwUnsupported("cannot generate random data for input '" + input.name() + "' of type " +
                       input.type.str() + "; give it with --input");
  }
  return t;
}

std::vector<NamedTensor> makeRandomInputs(const Graph& graph, uint64_t seed,
                                          const std::vector<std::pair<std::string, Shape>>& shapes) {
  std::unordered_map<std::string, const Shape*> overrides;
  for (const auto& [name, shape] : shapes) {
    const Value* v = graph.findValue(name);
    if (!v || !v->isGraphInput()) throwInvalid("--shape names '" + name + "', not a graph input");
    overrides[name] = &shape;
  }
  std::vector<NamedTensor> result;
  for (const Value* v : graph.inputs()) {
    if (v->isInitializer()) continue;
    auto it = overrides.find(v->name());
    result.push_back(
        {v->name(), makeRandomInput(*v, seed, it == overrides.end() ? nullptr : it->second)});
  }
  return result;
}

}  // namespace fusectl::kernels
