// The optimizer's promise on whatever loads: the -O3 model computes what the model as given
// computes. Both run on the same seeded inputs (tensors of at most 1 MiB, inputs of at most
// 2^16 elements: each input stays quick); when the original runs, the optimized model must run too and agree within a loose
// tolerance (rtol 1e-3 of each output's scale: fused kernels round differently, they do not
// compute something else). Models whose outputs are not a function of their inputs (random
// ops) or whose integer outputs rounding can flip (ArgMax, TopK ties) are skipped.
#include <cmath>
#include <cstring>
#include <set>

#include "fuzz_common.h"
#include "fuzz_models.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/passes/optimize.h"

namespace {

constexpr int64_t kMaxInputElements = int64_t{1} << 16;

bool skippedOp(const std::string& op) {
  static const std::set<std::string> ops = {
      "Loop", "Scan", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
      "Multinomial", "Bernoulli", "Dropout", "ArgMax", "ArgMin", "TopK", "NonMaxSuppression",
      "Unique", "Round", "Floor", "Ceil", "Sign", "Cast", "CastLike", "Equal", "Greater",
      "GreaterOrEqual", "Less", "LessOrEqual", "Mod", "QuantizeLinear", "DynamicQuantizeLinear",
      "IsNaN", "IsInf"};
  return ops.count(op) != 0;
}

// Weights a mutation made huge or non-finite overflow differently once folded (a
// BatchNormalization folded into a convolution's weights, scales merged): NaN against -inf is
// rounding then, not a rewrite computing something else.
bool tameFloats(const fusectl::Tensor& t) {
  if (t.dtype() != fusectl::DType::Float) return true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v;  // the bytes may sit unaligned in the file's buffer
    std::memcpy(&v, t.bytes() + i * sizeof(float), sizeof(float));
    if (!(std::fabs(v) <= 1e4f)) return false;
  }
  return true;
}

bool tameConstants(const fusectl::Graph& graph) {
  for (const fusectl::Value* init : graph.initializers())
    if (!tameFloats(*init->initializer())) return false;
  for (const fusectl::Node* n : graph.nodes())
    for (const fusectl::Attribute& a : n->attributes())
      if (a.kind == fusectl::AttrKind::Tensor && !tameFloats(a.t.tensor())) return false;
  for (const fusectl::Node* owner : graph.subgraphOwners()) {
    bool tame = true;
    owner->forEachSubgraph([&](const fusectl::Graph& body) { tame = tame && tameConstants(body); });
    if (!tame) return false;
  }
  return true;
}

bool allFinite(const std::vector<fusectl::kernels::NamedTensor>& outputs) {
  for (const auto& o : outputs) {
    if (!o.tensor.isTensor() || !fusectl::dtypeIsFloat(o.tensor.dtype())) continue;
    const fusectl::kernels::TensorSummary s = fusectl::kernels::summarizeTensor(o.tensor);
    if (s.nan_count || s.inf_count) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::LoadOptions load;
  load.prefault_weights = false;
  load.max_tensor_bytes = fusectl::fuzz::kRunMaxTensorBytes;
  std::unique_ptr<fusectl::Model> original;
  try {
    original = fusectl::parseModelBinary(fusectl::fuzz::bytesOf(data, size), "fuzz.onnx",
                                         "/nonexistent-fuzz-dir", load);
  } catch (const fusectl::Error&) {
    return 0;
  }
  if (fusectl::fuzz::anyNode(*original->graph,
                             [](const fusectl::Node& n) { return skippedOp(n.opType()); }) ||
      !fusectl::fuzz::inputsAtMost(*original->graph, kMaxInputElements) ||
      !tameConstants(*original->graph)) {
    return 0;
  }
  fusectl::kernels::ComparisonInputs inputs;
  inputs.seed = 1;
  inputs.execution.max_tensor_bytes = fusectl::fuzz::kRunMaxTensorBytes;
  // The original first: a model the executor refuses as given is not this target's finding.
  std::vector<fusectl::kernels::NamedTensor> expected;
  try {
    inputs.given.push_back(fusectl::kernels::makeRandomInputs(*original->graph, 1));
    expected = fusectl::kernels::runModel(*original, inputs.given[0], inputs.execution);
  } catch (const fusectl::Error&) {
    return 0;
  }
  if (!allFinite(expected)) return 0;  // overflow in the original: rounding decides the rest
  std::unique_ptr<fusectl::Model> optimized = original->clone();
  bool refused = true;  // a clean refusal ends the input; anything else is fuzz_optimizer's finding
  fusectl::fuzz::expectCleanOutcome([&] {
    fusectl::passes::OptimizeRequest request;
    request.level = 3;
    fusectl::passes::optimize(*optimized, request);
    refused = false;
  });
  if (refused) return 0;
  std::vector<fusectl::kernels::NamedTensor> got;
  try {
    got = fusectl::kernels::runModel(*optimized, inputs.given[0], inputs.execution);
  } catch (const fusectl::Error& e) {
    fusectl::fuzz::fail(std::string("the original runs, the -O3 model fails: ") + e.what());
  }
  fusectl::kernels::Tolerance tolerance;
  tolerance.atol = 1e-4;
  tolerance.rtol = 1e-3;
  tolerance.rtol_scale = fusectl::kernels::RtolScale::Tensor;
  const fusectl::kernels::Comparison c =
      fusectl::kernels::compareRunOutputs(expected, got, tolerance);
  for (const auto& o : c.outputs)
    if (!o.passed) fusectl::fuzz::fail("-O3 changed output '" + o.name + "': " + o.detail);
  return 0;
}
