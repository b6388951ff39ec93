// The ONNX backend-test runner: listing tests, binding .pb inputs, comparing outputs.
#include "fusectl/kernels/conformance.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "fusectl/graph/error.h"
#include "fusectl/graph/narrow_types.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/npy.h"
#include "../cpu/proto_wire.h"

namespace fs = std::filesystem;

namespace fusectl::kernels {

std::string_view conformanceStatusName(ConformanceStatus s) {
  switch (s) {
    case ConformanceStatus::Pass: return "pass";
    case ConformanceStatus::Fail: return "fail";
    case ConformanceStatus::Unsupported: return "unsupported";
  }
  return "?";
}

namespace {

std::vector<std::string> splitTabs(const std::string& line) {
  std::vector<std::string> cols;
  std::string cur;
  std::istringstream ss(line);
  while (std::getline(ss, cur, '\t')) cols.push_back(cur);
  if (!line.empty() && line.back() == '\t') cols.emplace_back();
  return cols;
}

std::vector<ConformanceTest> fromManifest(const fs::path& dir, const fs::path& manifest) {
  std::ifstream in(manifest);
  if (!in) throwIo(manifest.string() + ": cannot open for reading");
  std::string line;
  if (!std::getline(in, line)) throwInvalid(manifest.string() + ": empty manifest");
  std::map<std::string, size_t> col;
  const auto header = splitTabs(line);
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  if (!col.count("test_name")) throwInvalid(manifest.string() + ": no test_name column");
  auto field = [&](const std::vector<std::string>& row, const char* name) -> std::string {
    auto it = col.find(name);
    return it != col.end() && it->second < row.size() ? row[it->second] : std::string();
  };
  std::vector<ConformanceTest> tests;
  size_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto row = splitTabs(line);
    ConformanceTest t;
    t.name = field(row, "test_name");
    t.suite = field(row, "suite");
    t.dir = (t.suite.empty() ? dir / t.name : dir / t.suite / t.name).string();
    const std::string scope = field(row, "in_scope");
    t.in_scope = scope.empty() || scope == "yes";
    if (!t.in_scope) t.scope_note = scope;
    try {
      if (!field(row, "rtol").empty()) t.rtol = std::stod(field(row, "rtol"));
      if (!field(row, "atol").empty()) t.atol = std::stod(field(row, "atol"));
    } catch (const std::exception&) {
      throwInvalid(manifest.string() + ":" + std::to_string(line_no) + ": bad rtol/atol");
    }
    tests.push_back(std::move(t));
  }
  return tests;
}

std::vector<ConformanceTest> fromWalk(const fs::path& dir) {
  std::vector<ConformanceTest> tests;
  auto add = [&](const fs::path& test_dir, const std::string& suite) {
    ConformanceTest t;
    t.suite = suite;
    t.name = test_dir.filename().string();
    t.dir = test_dir.string();
    tests.push_back(std::move(t));
  };
  if (fs::exists(dir / "model.onnx")) {
    add(dir, "");
    return tests;
  }
  for (const auto& a : fs::directory_iterator(dir)) {
    if (!a.is_directory()) continue;
    if (fs::exists(a.path() / "model.onnx")) {
      add(a.path(), "");
      continue;
    }
    for (const auto& b : fs::directory_iterator(a.path())) {
      if (b.is_directory() && fs::exists(b.path() / "model.onnx")) {
        add(b.path(), a.path().filename().string());
      }
    }
  }
  return tests;
}

// input_3.pb -> 3; -1 for other names.
int fileIndex(const std::string& file, const std::string& prefix) {
  if (file.rfind(prefix, 0) != 0 || file.size() < prefix.size() + 4) return -1;
  if (file.compare(file.size() - 3, 3, ".pb") != 0) return -1;
  const std::string digits = file.substr(prefix.size(), file.size() - prefix.size() - 3);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoi(digits);
}

std::vector<fs::path> indexedFiles(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const int i = fileIndex(e.path().filename().string(), prefix);
    if (i >= 0) found.emplace_back(i, e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> files;
  for (size_t k = 0; k < found.size(); ++k) {
    if (found[k].first != static_cast<int>(k)) {
      throwInvalid(dir.string() + ": " + prefix + std::to_string(k) + ".pb is missing");
    }
    files.push_back(found[k].second);
  }
  return files;
}

// Narrow outputs (float8, float4, e8m0, packed ints) compared by value: float32 for the float
// formats (each of their values is exact there), int32 for the packed integers. Both sides
// go through the same decoding, so a wrong code still shows as a wrong value.
HostTensor widenNarrow(const HostTensor& t) {
  if (!dtypeIsNarrow(t.dtype())) return t;
  const bool is_float = dtypeIsNarrowFloat(t.dtype());
  HostTensor wide(is_float ? DType::Float : DType::Int32, t.dims());
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    if (!is_float) {
      wide.mutableData<int32_t>()[i] = static_cast<int32_t>(loadPacked(bytes, i, t.dtype()));
      continue;
    }
    const uint8_t code = t.dtype() == DType::Float4E2M1
                             ? static_cast<uint8_t>(loadPacked(bytes, i, t.dtype()))
                             : bytes[i];
    wide.mutableData<float>()[i] = static_cast<float>(narrowFloatToDouble(code, t.dtype()));
  }
  return wide;
}

// ---- sequence and optional data (SequenceProto / OptionalProto files) ----

// A TensorProto held inside another message, read through the one TensorProto reader there
// is (a file): libkernels does not link the ONNX protobuf library.
HostTensor tensorFromProtoBytes(std::string_view bytes, const fs::path& beside) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = fs::temp_directory_path() /
                       ("fusectl_elem_" + std::to_string(::getpid()) + "_" +
                        std::to_string(counter++) + ".pb");
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throwIo(tmp.string() + ": cannot write an element of " + beside.string());
  }
  try {
    HostTensor t = readTensorFile(tmp.string());
    std::error_code ec;
    fs::remove(tmp, ec);
    return t;
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

// SequenceProto: name = 1, elem_type = 2, tensor_values = 3.
HostTensor sequenceFromProto(std::string_view bytes, DType element, const fs::path& file,
                             std::string* name) {
  std::vector<HostTensor> items;
  wire::Field f;
  while (wire::nextField(bytes, f)) {
    if (f.number == 1 && f.wire_type == 2 && name) *name = std::string(f.bytes);
    if (f.number == 3 && f.wire_type == 2) items.push_back(tensorFromProtoBytes(f.bytes, file));
    if ((f.number == 4 || f.number == 5 || f.number == 6 || f.number == 7) && f.wire_type == 2) {
      throwUnsupported(file.string() + ": only sequences of tensors are supported");
    }
  }
  if (!items.empty()) element = items.front().dtype();
  return HostTensor::sequence(element, std::move(items));
}

// OptionalProto: name = 1, elem_type = 2, tensor_value = 3, sequence_value = 5; empty when
// neither value is present.
HostTensor optionalFromProto(std::string_view bytes, const wire::ValueKind& kind,
                             const fs::path& file, std::string* name) {
  wire::Field f;
  while (wire::nextField(bytes, f)) {
    if (f.number == 1 && f.wire_type == 2 && name) *name = std::string(f.bytes);
    if (f.number == 3 && f.wire_type == 2) return tensorFromProtoBytes(f.bytes, file);
    if (f.number == 5 && f.wire_type == 2) return sequenceFromProto(f.bytes, kind.element, file, nullptr);
  }
  return HostTensor::emptyOptional(kind.element, kind.optional_of_sequence);
}

// A data file for a value of type `type`: a TensorProto, or a SequenceProto/OptionalProto when
// the graph declares a sequence or optional type.
HostTensor readValueFile(const fs::path& file, const ValueType* type, std::string* name) {
  if (!type || type->isTensor()) return readTensorFile(file.string(), name);
  const wire::ValueKind kind = wire::decodeTypeProto(type->opaque_type_proto.str());
  if (kind.of != wire::ValueKind::Of::Sequence && kind.of != wire::ValueKind::Of::Optional) {
    return readTensorFile(file.string(), name);
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throwIo(file.string() + ": cannot open for reading");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (name) name->clear();
  return kind.of == wire::ValueKind::Of::Sequence
             ? sequenceFromProto(bytes, kind.element, file, name)
             : optionalFromProto(bytes, kind, file, name);
}

std::string kindName(const HostTensor& t) {
  switch (t.kind()) {
    case HostTensor::Kind::Tensor: return "a tensor";
    case HostTensor::Kind::Sequence: return "a sequence";
    case HostTensor::Kind::EmptyOptional: return "an empty optional";
  }
  return "?";
}

std::string compareTensorValues(const HostTensor& actual, const HostTensor& expected,
                                const std::string& what, const Tolerance& tol) {
  if (actual.dtype() != expected.dtype()) {
    return what + " is " + std::string(dtypeName(actual.dtype())) + ", expected " +
           std::string(dtypeName(expected.dtype()));
  }
  if (actual.dims() != expected.dims()) {
    return what + " has shape " + formatDims(actual.dims()) + ", expected " +
           formatDims(expected.dims());
  }
  const CompareResult r = compareTensors(widenNarrow(actual), widenNarrow(expected), tol);
  if (!r.passed) return what + ": " + r.describe(expected.dims());
  return "";
}

// Element-wise over sequences; an empty optional matches only an empty optional.
std::string compareValues(const HostTensor& actual, const HostTensor& expected,
                          const std::string& what, const Tolerance& tol) {
  if (actual.kind() != expected.kind()) {
    return what + " is " + kindName(actual) + ", expected " + kindName(expected);
  }
  if (expected.isEmptyOptional()) return "";
  if (!expected.isSequence()) return compareTensorValues(actual, expected, what, tol);
  if (actual.items().size() != expected.items().size()) {
    return what + " has " + std::to_string(actual.items().size()) + " elements, expected " +
           std::to_string(expected.items().size());
  }
  for (size_t i = 0; i < expected.items().size(); ++i) {
    std::string why = compareTensorValues(actual.items()[i], expected.items()[i],
                                          what + " element " + std::to_string(i), tol);
    if (!why.empty()) return why;
  }
  return "";
}

// "" when the data set passes, else why not.
std::string runDataSet(Executor& executor, const Graph& graph, const fs::path& data_dir,
                       const ConformanceTest& test) {
  std::vector<const Value*> positional;
  for (const Value* v : graph.inputs()) {
    if (!v->isInitializer()) positional.push_back(v);
  }
  std::vector<NamedTensor> inputs;
  const auto input_files = indexedFiles(data_dir, "input_");
  for (size_t k = 0; k < input_files.size(); ++k) {
    std::string name;
    const ValueType* declared = k < positional.size() ? &positional[k]->type : nullptr;
    HostTensor t = readValueFile(input_files[k], declared, &name);
    const Value* v = name.empty() ? nullptr : graph.findValue(name);
    if (!v || !v->isGraphInput()) {
      if (k >= positional.size()) {
        return input_files[k].filename().string() + " has no graph input to bind to (the graph has " +
               std::to_string(positional.size()) + " non-initializer inputs)";
      }
      v = positional[k];
    }
    inputs.push_back({v->name(), std::move(t)});
  }

  const std::vector<NamedTensor> outputs = executor.run(inputs);
  const auto output_files = indexedFiles(data_dir, "output_");
  if (output_files.size() > outputs.size()) {
    return std::to_string(output_files.size()) + " expected outputs but the graph has " +
           std::to_string(outputs.size());
  }
  Tolerance tol;
  tol.rtol = test.rtol;
  tol.atol = test.atol;
  tol.exact_integers = true;
  for (size_t k = 0; k < output_files.size(); ++k) {
    const HostTensor expected =
        readValueFile(output_files[k], &graph.outputs()[k]->type, nullptr);
    const HostTensor& actual = outputs[k].tensor;
    std::string why = compareValues(actual, expected, "output '" + outputs[k].name + "'", tol);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace

std::vector<ConformanceTest> listConformanceTests(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throwIo(dir + ": no such directory");
  std::vector<ConformanceTest> tests = fs::exists(root / "MANIFEST.tsv")
                                           ? fromManifest(root, root / "MANIFEST.tsv")
                                           : fromWalk(root);
  std::stable_sort(tests.begin(), tests.end(), [](const auto& a, const auto& b) {
    return std::tie(a.suite, a.name) < std::tie(b.suite, b.name);
  });
  return tests;
}

ConformanceResult runConformanceTest(const ConformanceTest& test,
                                     const ConformanceOptions& options) {
  ConformanceResult result;
  result.test = test;
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](ConformanceStatus status, std::string detail) {
    result.status = status;
    result.detail = std::move(detail);
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  };
  try {
    const fs::path dir(test.dir);
    LoadOptions load;
    load.infer_shapes = false;  // this tests kernels; the data files carry the truth
    std::unique_ptr<Model> model = loadModel((dir / "model.onnx").string(), load);
    if (options.transform) options.transform(*model);
    ExecutorOptions exec;
    exec.num_threads = options.num_threads;
    Executor executor(*model, exec);

    std::vector<fs::path> data_sets;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
        data_sets.push_back(e.path());
      }
    }
    std::sort(data_sets.begin(), data_sets.end());
    if (data_sets.empty()) return finish(ConformanceStatus::Fail, "no test_data_set_* folder");
    for (const fs::path& ds : data_sets) {
      std::string why = runDataSet(executor, *model->graph, ds, test);
      if (!why.empty()) {
        if (data_sets.size() > 1) why = ds.filename().string() + ": " + why;
        return finish(ConformanceStatus::Fail, why);
      }
    }
    return finish(ConformanceStatus::Pass, "");
  } catch (const Error& e) {
    return finish(e.kind() == ErrorKind::Unsupported ? ConformanceStatus::Unsupported
                                                     : ConformanceStatus::Fail,
                  e.what());
  } catch (const std::exception& e) {
    return finish(ConformanceStatus::Fail, std::string("internal error: ") + e.what());
  }
}

ConformanceReport runConformance(const std::string& dir, const ConformanceOptions& options,
                                 const std::function<void(const ConformanceResult&)>& on_result) {
  ConformanceReport report;
  const auto start = std::chrono::steady_clock::now();
  for (const ConformanceTest& t : listConformanceTests(dir)) {
    if (!options.filter.empty() && t.name.find(options.filter) == std::string::npos) continue;
    if (!t.in_scope && !options.include_out_of_scope) {
      ++report.skipped_out_of_scope;
      continue;
    }
    ConformanceResult r = runConformanceTest(t, options);
    switch (r.status) {
      case ConformanceStatus::Pass: ++report.passed; break;
      case ConformanceStatus::Fail: ++report.failed; break;
      case ConformanceStatus::Unsupported: ++report.unsupported; break;
    }
    if (on_result) on_result(r);
    report.results.push_back(std::move(r));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::map<std::string, std::string> readExpectedFailures(const std::string& path) {
  std::ifstream in(path);
  if (!in) throwIo(path + ": cannot open for reading");
  std::map<std::string, std::string> listed;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (tab == std::string::npos || tab == 0 || tab + 1 >= line.size())
      throwInvalid(where + "expected 'test_name<TAB>reason'");
    if (!listed.emplace(line.substr(0, tab), line.substr(tab + 1)).second)
      throwInvalid(where + line.substr(0, tab) + " is listed twice");
  }
  return listed;
}

ExpectedFailureCheck checkExpectedFailures(const ConformanceReport& report,
                                           const std::map<std::string, std::string>& listed) {
  ExpectedFailureCheck check;
  std::set<std::string> ran;
  for (const ConformanceResult& r : report.results) {
    ran.insert(r.test.name);
    const bool is_listed = listed.count(r.test.name) > 0;
    if (r.status != ConformanceStatus::Pass && !is_listed) {
      check.unexpected_failures.push_back(r.test.name + " (" +
                                          std::string(conformanceStatusName(r.status)) +
                                          "): " + r.detail);
    } else if (r.status == ConformanceStatus::Pass && is_listed) {
      check.unexpected_passes.push_back(r.test.name);
    }
  }
  for (const auto& entry : listed)
    if (!ran.count(entry.first)) check.stale.push_back(entry.first);
  return check;
}

std::string expectedFailuresText(const ConformanceReport& report, const std::string& header) {
  std::string out = header;
  if (!out.empty() && out.back() != '\n') out += '\n';
  for (const ConformanceResult& r : report.results) {
    if (r.status == ConformanceStatus::Pass) continue;
    std::string detail = r.detail;
    // Paths differ between checkouts: keep what is inside the test's folder.
    for (size_t at; (at = detail.find(r.test.dir + "/")) != std::string::npos;)
      detail.erase(at, r.test.dir.size() + 1);
    for (char& c : detail)
      if (c == '\n' || c == '\t' || c == '\r') c = ' ';
    out += r.test.name + "\t" + std::string(conformanceStatusName(r.status)) + ": " + detail + "\n";
  }
  return out;
}

}  // namespace fusectl::kernels
