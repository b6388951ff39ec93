// compareModels and checkSameInterface (compare.h): two models on the same inputs.
#include <algorithm>
#include <map>

#include "fusectl/graph/error.h"
#include "fusectl/kernels/compare.h"

namespace fusectl::kernels {

namespace {

// The first failure of one run, in the words of `fusectl verify`; `seeded`: the runs' inputs
// were made from seeds, which the words then name.
std::string failureText(const OutputComparison& o, bool seeded, int runs) {
  const CompareResult& c = o.failure;
  std::string d = c.shape_match ? c.describe(o.failed_dims_a)
                                : "shape " + formatDims(o.failed_dims_b) + " in B vs " +
                                      formatDims(o.failed_dims_a) + " in A";
  if (!c.dtype_match && c.shape_match) {
    d = "dtype " + std::string(dtypeName(o.failed_dtype_b)) + " in B vs " +
        std::string(dtypeName(o.dtype)) + " in A; " + d;
  }
  if (runs > 1) {
    d = "run " + std::to_string(o.failed_run) +
        (seeded ? " (seed " + std::to_string(o.failed_seed) + ")" : "") + ": " + d;
  }
  return d;
}

// An OutputComparison per output of A, named, nothing compared yet.
Comparison emptyComparison(const std::vector<std::string>& names, int runs) {
  Comparison result;
  result.runs = runs;
  for (const std::string& name : names) {
    OutputComparison o;
    o.name = name;
    result.outputs.push_back(std::move(o));
  }
  return result;
}

// Adds run `r`'s outputs (out_a in A's output order) to `result`.
void compareRun(Comparison& result, int r, uint64_t seed, bool seeded,
                const std::vector<NamedTensor>& out_a, const std::vector<NamedTensor>& out_b,
                const Tolerance& tolerance) {
  std::map<std::string, const HostTensor*> by_name;
  for (const NamedTensor& t : out_b) by_name[t.name] = &t.tensor;
  for (size_t i = 0; i < out_a.size(); ++i) {
    OutputComparison& o = result.outputs[i];
    const HostTensor& ta = out_a[i].tensor;
    if (r == 0) {
      o.dtype = ta.dtype();
      o.dims = ta.dims();
    }
    auto it = by_name.find(out_a[i].name);
    if (it == by_name.end()) {
      if (o.passed) o.detail = "B has no output of this name";
      o.passed = false;
      o.missing = true;
      continue;
    }
    const HostTensor& tb = *it->second;
    const CompareResult c = compareTensors(tb, ta, tolerance);
    o.max_abs_error = std::max(o.max_abs_error, c.max_abs_error);
    o.max_rel_error = std::max(o.max_rel_error, c.max_rel_error);
    o.cosine = std::min(o.cosine, c.cosine);
    o.mismatches += c.mismatches;
    if (!c.passed && o.passed) {
      o.passed = false;
      o.failed_run = r;
      o.failed_seed = seed;
      o.failure = c;
      o.failed_dtype_b = tb.dtype();
      o.failed_dims_a = ta.dims();
      o.failed_dims_b = tb.dims();
      o.detail = failureText(o, seeded, result.runs);
    }
  }
}

void finish(Comparison& result) {
  for (const OutputComparison& o : result.outputs) result.passed = result.passed && o.passed;
}

}  // namespace

Comparison compareModels(const Model& a, const Model& b, const ComparisonInputs& inputs,
                         const Tolerance& tolerance) {
  Executor run_a(a, inputs.execution);
  ExecutorOptions execution_b = inputs.execution;
  if (inputs.backend_b) execution_b.backend = inputs.backend_b;
  Executor run_b(b, execution_b);
  std::vector<std::string> names;
  for (const Value* v : a.graph->outputs()) names.push_back(v->name());
  const bool seeded = inputs.given.empty();
  Comparison result =
      emptyComparison(names, seeded ? inputs.runs : static_cast<int>(inputs.given.size()));
  for (int r = 0; r < result.runs; ++r) {
    const uint64_t seed = inputs.seed + static_cast<uint64_t>(r);
    const std::vector<NamedTensor> made =
        seeded ? makeRandomInputs(*a.graph, seed, inputs.shapes) : std::vector<NamedTensor>{};
    const std::vector<NamedTensor>& feed = seeded ? made : inputs.given[r];
    compareRun(result, r, seed, seeded, run_a.run(feed), run_b.run(feed), tolerance);
  }
  finish(result);
  return result;
}

Comparison compareRunOutputs(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b,
                          const Tolerance& tolerance) {
  std::vector<std::string> names;
  for (const NamedTensor& t : a) names.push_back(t.name);
  Comparison result = emptyComparison(names, 1);
  compareRun(result, 0, 0, false, a, b, tolerance);
  finish(result);
  return result;
}

void checkSameInterface(const Graph& a, const Graph& b, const std::string& a_label,
                        const std::string& b_label) {
  std::map<std::string, const Value*> ins_b;
  for (const Value* v : b.inputs()) {
    if (!v->isInitializer()) ins_b[v->name()] = v;
  }
  for (const Value* v : a.inputs()) {
    if (v->isInitializer()) continue;
    auto it = ins_b.find(v->name());
    if (it == ins_b.end()) {
      throwInvalid("input mismatch: '" + v->name() + "' is an input of " + a_label +
                   " but not of " + b_label);
    }
    if (it->second->dtype() != v->dtype()) {
      throwInvalid("input mismatch: '" + v->name() + "' is " + v->type.str() + " in " + a_label +
                   " but " + it->second->type.str() + " in " + b_label);
    }
    ins_b.erase(it);
  }
  if (!ins_b.empty()) {
    throwInvalid("input mismatch: '" + ins_b.begin()->first + "' is an input of " + b_label +
                 " but not of " + a_label);
  }
  std::map<std::string, int> seen;
  for (const Value* v : a.outputs()) seen[v->name()] |= 1;
  for (const Value* v : b.outputs()) seen[v->name()] |= 2;
  for (const auto& [name, mask] : seen) {
    if (mask != 3) {
      throwInvalid("output '" + name + "' of " + (mask == 1 ? a_label : b_label) +
                   " is missing from " + (mask == 1 ? b_label : a_label));
    }
  }
}

}  // namespace fusectl::kernels
