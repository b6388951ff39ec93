// Measuring rewritten nodes on their own (node_numbers.h).
#include "fusectl/kernels/node_numbers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "fusectl/graph/single_node.h"
#include "fusectl/kernels/compare.h"

namespace fusectl::kernels {
namespace {

// A value's tensor by name, from one run of a model with the wanted values exposed as outputs.
using Values = std::map<std::string, HostTensor>;

// Runs a copy of `model` with every name in `wanted` that it computes added as a graph output;
// returns those values and the inputs it was given.
Values runExposing(const Model& model, const std::set<std::string>& wanted,
                   const std::vector<NamedTensor>& inputs, const ExecutorOptions& options) {
  Values out;
  for (const NamedTensor& in : inputs)
    if (wanted.count(in.name)) out[in.name] = in.tensor;
  std::unique_ptr<Model> copy = model.clone();
  Graph& g = *copy->graph;
  std::set<std::string> outputs;
  for (const Value* v : g.outputs()) outputs.insert(v->name());
  bool computes_any = false;
  for (const std::string& name : wanted) {
    Value* v = g.findValue(name);
    if (!v || !v->producer() || v->isGraphInput()) continue;
    if (!outputs.count(name)) g.addOutput(v);
    computes_any = true;
  }
  if (!computes_any) return out;
  for (NamedTensor& r : Executor(*copy, options).run(inputs))
    if (wanted.count(r.name)) out[r.name] = std::move(r.tensor);
  return out;
}

bool numeric(DType t) { return t != DType::String && t != DType::Undefined; }

double percentile99(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

std::vector<NodeNumbers> measureReplacementNodes(const Model& original, const Model& optimized,
                                                 const std::vector<std::string>& nodes,
                                                 const std::vector<NamedTensor>& inputs,
                                                 const std::set<std::string>& from_optimized,
                                                 const ExecutorOptions& options) {
  const Graph& og = *original.graph;
  const Graph& ng = *optimized.graph;
  std::unordered_map<std::string, const Node*> by_label;
  for (const Node* n : ng.nodes()) by_label.emplace(n->label(), n);

  std::vector<NodeNumbers> result(nodes.size());
  std::vector<const Node*> targets(nodes.size(), nullptr);
  std::set<std::string> from_original, computed_after;
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeNumbers& r = result[i];
    r.node = nodes[i];
    auto it = by_label.find(nodes[i]);
    const Node* n = it == by_label.end() ? nullptr : it->second;
    // An unnamed node's label is "<op>(<output>)", and the op may have been respelled after the
    // label was taken (FusedConv -> FusedConv_Relu): find it by its output.
    const size_t open = nodes[i].find('(');
    if (!n && open != std::string::npos && nodes[i].back() == ')') {
      const Value* v = ng.findValue(nodes[i].substr(open + 1, nodes[i].size() - open - 2));
      if (v && v->producer() && v->producer()->name().empty()) n = v->producer();
    }
    if (!n) {
      r.detail = "no node of the optimized model has this label";
      continue;
    }
    const Value* out = n->output(0);
    const Value* counterpart = out ? og.findValue(out->name()) : nullptr;
    if (!counterpart || !counterpart->producer()) {
      r.detail = fmt::format("its output '{}' is not computed by the original model",
                             out ? out->name() : "");
      continue;
    }
    if (!numeric(out->dtype())) {
      r.detail = fmt::format("its output '{}' is not numeric", out->name());
      continue;
    }
    targets[i] = n;
    r.dtype = out->dtype();
    from_original.insert(out->name());
    for (const Value* in : n->inputs()) {
      if (!in || in->isConstant()) continue;
      const Value* o = og.findValue(in->name());
      if (o && !o->isConstant() && !from_optimized.count(in->name()))
        from_original.insert(in->name());
      else
        computed_after.insert(in->name());
    }
  }
  Values before = runExposing(original, from_original, inputs, options);
  Values after = runExposing(optimized, computed_after, inputs, options);

  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* n = targets[i];
    if (!n) continue;
    NodeNumbers& r = result[i];
    // N alone: its computed inputs as graph inputs, its constants as initializers.
    std::unique_ptr<Model> single = singleNodeModel(optimized, *n);
    std::vector<NamedTensor> feed;
    bool missing = false;
    for (const Value* in : single->graph->inputs()) {
      const Values& source =
          before.count(in->name()) && !from_optimized.count(in->name()) ? before : after;
      auto t = source.find(in->name());
      if (t == source.end()) {
        r.detail = fmt::format("its input '{}' was not computed", in->name());
        missing = true;
        break;
      }
      feed.push_back({in->name(), t->second});
    }
    if (missing) continue;
    std::vector<NamedTensor> got = Executor(*single, options).run(feed);
    const HostTensor& actual = got.at(0).tensor;
    const HostTensor& expected = before.at(n->output(0)->name());
    if (actual.dims() != expected.dims()) {
      r.detail = fmt::format("its output is {} where the original's is {}",
                             formatDims(actual.dims()), formatDims(expected.dims()));
      continue;
    }
    Tolerance loose;
    loose.atol = loose.rtol = INFINITY;
    const CompareResult c = compareTensors(actual, expected, loose);
    std::vector<double> errors;
    errors.reserve(static_cast<size_t>(actual.numel()));
    for (int64_t k = 0; k < actual.numel(); ++k) {
      const double a = elementAsDouble(actual, k), e = elementAsDouble(expected, k);
      if (std::isfinite(a) && std::isfinite(e)) errors.push_back(std::fabs(a - e));
      if (std::isfinite(e)) r.scale = std::max(r.scale, std::fabs(e));
    }
    r.measured = true;
    r.cosine = c.cosine;
    r.max_abs_error = c.max_abs_error;
    r.p99_abs_error = percentile99(errors);
    r.elements = actual.numel();
  }
  return result;
}

}  // namespace fusectl::kernels
