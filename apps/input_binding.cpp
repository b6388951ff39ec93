#include "input_binding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/npy.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace fusectl::cli {

using kernels::HostTensor;

namespace {

// The loader bounds declared shapes; a --shape override can still ask for more than the
// limit, or for dims whose product overflows.
void checkSeededSize(const Value& input, const Shape* override) {
  const Shape& shape = override ? *override : input.shape();
  if (!shape.hasRank() || !dtypeIsKnown(static_cast<int32_t>(input.dtype()))) return;
  uint64_t numel = 1;
  bool overflow = false;
  for (const Dim& d : shape.dims()) {
    const uint64_t n = d.isStatic() && d.value() > 0 ? static_cast<uint64_t>(d.value()) : 1;
    if (d.isStatic() && d.value() == 0) return;  // empty
    if (numel > (uint64_t{1} << 58) / n) overflow = true;
    numel = overflow ? numel : numel * n;
  }
  const uint64_t bytes = overflow ? 0 : dtypeStorageBytes(input.dtype(), static_cast<int64_t>(numel));
  if (overflow || bytes > maxTensorBytes())
    throw Error(ErrorKind::InvalidInput,
                fmt::format("input '{}' of shape {} would take {} bytes to seed, more than the "
                            "limit of {} (--max-tensor-bytes)",
                            input.name(), shape.str(), overflow ? std::string("over 2^58") :
                            std::to_string(bytes), maxTensorBytes()));
}

// A file's tensor against the graph input it is bound to: its dtype, and its dims where the
// graph declares them static, so that the error names the file (the executor's own check names
// only the input).
void checkFileMatches(const Value& input, const HostTensor& t, const std::string& path) {
  const Shape& declared = input.shape();
  bool ok = !dtypeIsKnown(static_cast<int32_t>(input.dtype())) || t.dtype() == input.dtype();
  if (ok && declared.hasRank()) {
    ok = declared.rank() == t.dims().size();
    for (size_t i = 0; ok && i < declared.rank(); ++i)
      ok = !declared[i].isStatic() || declared[i].value() == t.dims()[i];
  }
  if (ok) return;
  throw Error(ErrorKind::InvalidInput,
              fmt::format("{}: input '{}' is {}{} but the graph declares {}{}", path, input.name(),
                          dtypeName(t.dtype()), kernels::formatDims(t.dims()),
                          dtypeName(input.dtype()), declared.str()));
}

}  // namespace

BoundInputs bindInputs(const Graph& graph, const std::vector<std::string>& specs, uint64_t seed,
                       const std::vector<std::pair<std::string, Shape>>& shapes) {
  return std::move(bindInputRuns(graph, specs, seed, 1, shapes).front());
}

std::vector<BoundInputs> bindInputRuns(const Graph& graph, const std::vector<std::string>& specs,
                                       uint64_t seed, int runs,
                                       const std::vector<std::pair<std::string, Shape>>& shapes) {
  std::vector<const Value*> positional;
  for (const Value* v : graph.inputs()) {
    if (!v->isInitializer()) positional.push_back(v);
  }
  std::map<std::string, std::pair<HostTensor, std::string>> given;
  size_t next_positional = 0;
  for (const std::string& spec : specs) {
    std::string name, path = spec;
    const size_t eq = spec.find('=');
    if (eq != std::string::npos && eq > 0) {
      const Value* v = graph.findValue(spec.substr(0, eq));
      if (v && v->isGraphInput()) {
        name = v->name();
        path = spec.substr(eq + 1);
      }
    }
    // NAME=FILE whose NAME is no graph input is a positional file only if that file exists
    // (a path may hold '='); otherwise the user misspelt the name, so say which names there are.
    if (name.empty() && eq != std::string::npos && eq > 0 && !std::filesystem::exists(spec)) {
      std::vector<std::string> names;
      for (const Value* v : positional) names.push_back("'" + v->name() + "'");
      throw Error(ErrorKind::Usage,
                  fmt::format("--input '{}': the model has no input named '{}' (its inputs: {})",
                              spec, spec.substr(0, eq),
                              names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
    if (name.empty()) {
      if (next_positional >= positional.size()) {
        throw Error(ErrorKind::Usage,
                    fmt::format("--input '{}': no graph input left to bind it to; use NAME=FILE",
                                spec));
      }
      name = positional[next_positional++]->name();
    }
    if (given.count(name)) {
      throw Error(ErrorKind::Usage, fmt::format("--input: '{}' given twice", name));
    }
    HostTensor t = kernels::readTensorFile(path);
    checkFileMatches(*graph.findValue(name), t, path);
    given[name] = {std::move(t), path};
  }

  std::map<std::string, const Shape*> overrides;
  for (const auto& [name, shape] : shapes) {
    const Value* v = graph.findValue(name);
    if (!v || !v->isGraphInput()) {
      throw Error(ErrorKind::Usage, fmt::format("--shape names '{}', not a graph input", name));
    }
    overrides[name] = &shape;
  }
  // Each run shares the files' tensors (a HostTensor copy shares its storage) and seeds the
  // rest with seed + run.
  std::vector<BoundInputs> bound(static_cast<size_t>(std::max(runs, 1)));
  for (size_t r = 0; r < bound.size(); ++r) {
    const uint64_t run_seed = seed + r;
    for (const Value* v : positional) {
      auto it = given.find(v->name());
      if (it != given.end()) {
        bound[r].tensors.push_back({v->name(), it->second.first});
        bound[r].sources.push_back(it->second.second);
        bound[r].dims_defaulted.push_back(false);
        continue;
      }
      auto ov = overrides.find(v->name());
      const Shape* override = ov == overrides.end() ? nullptr : ov->second;
      checkSeededSize(*v, override);
      bound[r].tensors.push_back({v->name(), kernels::makeRandomInput(*v, run_seed, override)});
      bound[r].sources.push_back(fmt::format("random, seed {}", run_seed));
      bound[r].dims_defaulted.push_back(!override && !v->shape().isStatic());
    }
    for (const auto& [name, t] : given) {  // overridden initializers
      if (graph.findValue(name)->isInitializer()) {
        bound[r].tensors.push_back({name, t.first});
        bound[r].sources.push_back(t.second);
        bound[r].dims_defaulted.push_back(false);
      }
    }
  }
  return bound;
}

std::string seededInputsNote(const BoundInputs& bound) {
  std::string names;
  bool defaulted_dims = false;
  for (size_t i = 0; i < bound.tensors.size() && i < bound.sources.size(); ++i) {
    if (bound.sources[i].rfind("random", 0) != 0) continue;
    // Seeded floats of the declared dims are what a model is traced with; seeded integers (a
    // sample rate, a shape, lengths, indices) and dims set to 1 are where it refuses inputs.
    const DType t = bound.tensors[i].tensor.dtype();
    const bool defaulted = i < bound.dims_defaulted.size() && bound.dims_defaulted[i];
    if (!dtypeIsInteger(t) && t != DType::Bool && !defaulted) continue;
    names += (names.empty() ? "" : ", ") + bound.tensors[i].name +
             (defaulted ? " with unknown dims at 1" : "");
    defaulted_dims = defaulted_dims || defaulted;
  }
  if (names.empty()) return "";
  return fmt::format("; on seeded inputs ({}): give ones the model accepts with --input NAME=FILE{}",
                     names, defaulted_dims ? " or dims with --shape NAME=DIMS" : "");
}

}  // namespace fusectl::cli
