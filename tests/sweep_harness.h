// Runs many small models as `fusectl dump` and `fusectl run` would, in forked children, and
// reports each crash, hang or unexpected exception with the label of the model that caused it.
// The sweep tests (test_onnx_inference_sweep.cpp, test_node_mutation_sweep.cpp) build the
// models; this runs them. Under the sanitizer build a sanitizer report ends the child, and so
// counts as a failure of the model it was running.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <algorithm>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <onnx/defs/tensor_proto_util.h>
#include <onnx/onnx_pb.h>

#include "fusectl/graph/error.h"
#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/optimize.h"

namespace fusectl::sweep {

// The values of an int32/int64 TensorProto, raw_data or typed field alike (libonnx's ParseData).
inline std::vector<int64_t> intsOf(const onnx::TensorProto& t) {
  if (t.data_type() == onnx::TensorProto::INT64) return onnx::ParseData<int64_t>(&t);
  const std::vector<int32_t> v = onnx::ParseData<int32_t>(&t);
  return {v.begin(), v.end()};
}

// Replaces the values of an int32/int64 TensorProto (its dims unchanged).
inline void setInts(onnx::TensorProto& t, const std::vector<int64_t>& values) {
  t.clear_raw_data();
  t.clear_int64_data();
  t.clear_int32_data();
  for (int64_t x : values) {
    if (t.data_type() == onnx::TensorProto::INT64) t.add_int64_data(x);
    else t.add_int32_data(static_cast<int32_t>(x));
  }
}

// What `fusectl run` may make of one tensor here, as in the fuzz targets that run models.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 20;

// FUSECTL_SWEEP_ONLY=REGEX keeps the cases whose label it matches (std::regex_search, ECMAScript):
// to rerun what failed, e.g. FUSECTL_SWEEP_ONLY='test_col2im|test_range'.
inline bool selected(const std::string& label) {
  static const char* only = getenv("FUSECTL_SWEEP_ONLY");
  if (!only) return true;
  static const std::regex pattern(only);
  return std::regex_search(label, pattern);
}

// Whether FUSECTL_SWEEP_ONLY picks the cases: then the share that ran says nothing.
inline bool filtered() { return getenv("FUSECTL_SWEEP_ONLY") != nullptr; }

// FUSECTL_SWEEP_STRIDE=N runs every Nth case only (the first, the N+1st, ...): what the
// sanitizer stage of CI does, where every case costs ten times as much.
inline size_t stride() {
  static const size_t n = [] {
    const char* s = getenv("FUSECTL_SWEEP_STRIDE");
    long v = s ? std::strtol(s, nullptr, 10) : 1;
    return static_cast<size_t>(v > 1 ? v : 1);
  }();
  return n;
}

// FUSECTL_SWEEP_VERBOSE=1 prints what became of each model (loaded, refused and why, ran).
inline bool verbose() {
  static const bool on = getenv("FUSECTL_SWEEP_VERBOSE") != nullptr;
  return on;
}

// Whether some node of `g` or of its subgraphs may give different outputs on the same inputs
// (RandomNormal, Bernoulli, Dropout...): then the optimized model's outputs cannot be held to the
// original's.
inline bool hasNondeterministicNode(const Graph& g) {
  for (const Node* n : g.nodes()) {
    if (isNondeterministic(*n)) return true;
    bool inside = false;
    n->forEachSubgraph([&](const Graph& sub) { inside = inside || hasNondeterministicNode(sub); });
    if (inside) return true;
  }
  return false;
}

// The tolerance the optimized model's outputs are held to: `fusectl optimize --verify`'s
// default (atol 1e-5, rtol 1e-4 of each output's largest magnitude).
inline kernels::Tolerance optimizedTolerance() {
  kernels::Tolerance t;
  t.atol = 1e-5;
  t.rtol = 1e-4;
  t.rtol_scale = kernels::RtolScale::Tensor;
  return t;
}

// "" when the optimized model's outputs agree with the original's, else what differs first.
// Dtypes that compareTensors cannot read as numbers (complex, and the values of sequences and
// optionals) are held to the same bytes.
inline std::string outputsDiffer(const std::vector<kernels::NamedTensor>& expected,
                                 const std::vector<kernels::NamedTensor>& actual, bool loose) {
  for (const kernels::NamedTensor& e : expected) {
    auto a = std::find_if(actual.begin(), actual.end(),
                          [&](const kernels::NamedTensor& t) { return t.name == e.name; });
    if (a == actual.end()) return fmt::format("the optimized model has no output '{}'", e.name);
    std::string problem;
    kernels::Tolerance tolerance = optimizedTolerance();
    if (e.tensor.dtype() == DType::Float16 || e.tensor.dtype() == DType::BFloat16) {
      // A fused half node computes its chain in float32 and rounds once: where the unfused
      // chain's intermediates fall into float16's subnormals (an epsilon of 1e-6 times a
      // variance), the two differ by percents, the fused one the closer to the exact value.
      // A rewrite that computes something else differs by the output's own scale.
      tolerance.half_min_epsilons = 0;
      tolerance.rtol = 0.1;
    }
    try {
      kernels::CompareResult r = kernels::compareTensors(a->tensor, e.tensor, tolerance);
      const bool amplified_rounding = loose && r.dtype_match && r.shape_match &&
                                      r.nonfinite_mismatches == 0 && r.cosine >= 0.99999 &&
                                      r.max_error_of_scale <= 1e-2;
      if (!r.passed && !amplified_rounding) problem = r.describe(e.tensor.dims());
    } catch (const Error&) {
      const kernels::HostTensor &x = a->tensor, &y = e.tensor;
      if (x.dtype() != y.dtype() || x.dims() != y.dims() || x.strings() != y.strings() ||
          x.byteSize() != y.byteSize() ||
          (x.byteSize() > 0 && x.raw() && y.raw() && memcmp(x.raw(), y.raw(), x.byteSize()) != 0))
        problem = "dtype, dims or bytes differ";
    }
    if (!problem.empty())
      return fmt::format("the optimized model's output '{}' differs: {}", e.name, problem);
  }
  return {};
}

// One model of a sweep, and how a failure names it.
struct SweepCase {
  std::string label;
  std::string bytes;  // the model, or "" when `build` makes it
  // The pipeline the model is optimized by, as `optimize --passes` takes it, or a level written
  // "-O0".."-O3"; "" for -O3.
  std::string passes;
  // Whether an output may also pass with a cosine of at least 0.99999 and errors within 1e-2 of
  // its largest magnitude: in whole models a change can make a computation ill-conditioned (a
  // variance of zero plus epsilon, divided by), which amplifies the rounding any reordering
  // makes into errors far above optimize --verify's, with the direction of the output kept. A
  // rewrite that computes something else moves the direction too.
  bool loose = false;
  // Dims of the seeded inputs by input name (`fusectl run --shape`), for inputs whose dims are
  // symbolic; the others' symbolic dims run at 1.
  std::vector<std::pair<std::string, Shape>> shapes;
  // Makes the model's bytes when called, for sweeps of large models: thousands of variants of a
  // 600 KB model held at once would take gigabytes.
  std::function<std::string()> build;

  std::string modelBytes() const { return build ? build() : bytes; }

  // A model given as bytes, optimized at -O3 and judged strictly.
  static SweepCase of(std::string label, std::string bytes) {
    SweepCase c;
    c.label = std::move(label);
    c.bytes = std::move(bytes);
    return c;
  }
};

// FUSECTL_SWEEP_SAVE=DIR writes each failing model to DIR/<n>.onnx, to run it with the CLI, and
// its label and pipeline to DIR/<n>.txt.
inline void saveFailing(const SweepCase& c, size_t index) {
  const char* dir = getenv("FUSECTL_SWEEP_SAVE");
  if (!dir) return;
  if (FILE* f = fopen(fmt::format("{}/{}.onnx", dir, index).c_str(), "wb")) {
    const std::string bytes = c.modelBytes();
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
  }
  if (FILE* f = fopen(fmt::format("{}/{}.txt", dir, index).c_str(), "w")) {
    fprintf(f, "%s\n%s\n", c.label.c_str(), c.passes.empty() ? "-O3" : c.passes.c_str());
    fclose(f);
  }
}

// What became of one model: whether it ran to the end (original and, where the optimizer
// kept it, optimized), and the finding, "" for none.
struct Outcome {
  bool ran = false;
  std::string finding;
};

// What a child does with one model, as the commands would: load it as `fusectl dump` does
// (shape inference on) and optimize that (at -O3, or by `passes`) as `fusectl optimize` does
// (verify, save); load
// the file again as `fusectl run` does and run it on seeded inputs (tensors of at most 1 MiB),
// then run the optimized model on the same inputs. An Error at any step is a clean refusal and
// ends that line of work; any other exception, an optimized graph that fails verify(), or an
// optimized model whose outputs differ from the original's (beyond optimizedTolerance(), in a
// graph without random ops) is returned as a finding: a rewrite that changed what the model
// computes.
inline Outcome loadAndRun(const std::string& bytes, const std::string& passes = {},
                          bool loose = false,
                          const std::vector<std::pair<std::string, Shape>>& shapes = {}) {
  std::unique_ptr<Model> optimized;
  try {
    optimized = parseModelBinary(bytes, "sweep.onnx", "/nonexistent-sweep-dir", {});
  } catch (const Error& e) {
    if (verbose()) fprintf(stderr, "load refused: %s\n", e.what());
    return {};
  } catch (const std::exception& e) {
    return {false, std::string("loading threw ") + e.what()};
  }
  try {
    passes::OptimizeRequest request;
    if (passes.empty())
      request.level = 3;
    else if (passes.size() == 3 && passes.rfind("-O", 0) == 0)
      request.level = passes[2] - '0';
    else
      request.passes = passes;
    passes::optimize(*optimized, request);
    if (std::string problem = optimized->graph->verify(); !problem.empty())
      return {false, "the optimized graph fails verify(): " + problem};
    modelToBinary(*optimized);
  } catch (const Error& e) {
    if (verbose()) fprintf(stderr, "optimize refused: %s\n", e.what());
    optimized.reset();
  } catch (const std::exception& e) {
    return {false, std::string("optimizing threw ") + e.what()};
  }
  std::vector<kernels::NamedTensor> inputs, expected;
  bool deterministic = true;
  kernels::ExecutorOptions options;
  options.max_tensor_bytes = kMaxTensorBytes;
  try {
    LoadOptions load;
    load.infer_shapes = false;
    load.max_tensor_bytes = kMaxTensorBytes;
    auto model = parseModelBinary(bytes, "sweep.onnx", "/nonexistent-sweep-dir", load);
    inputs = kernels::makeRandomInputs(*model->graph, 1, shapes);
    deterministic = !hasNondeterministicNode(*model->graph);
    kernels::Executor executor(*model, options);
    expected = executor.run(inputs);
    if (verbose()) fprintf(stderr, "ran\n");
  } catch (const Error& e) {
    if (verbose()) fprintf(stderr, "run refused: %s\n", e.what());
    return {};
  } catch (const std::exception& e) {
    return {false, std::string("running threw ") + e.what()};
  }
  if (!optimized) return {true, {}};
  try {
    kernels::Executor executor(*optimized, options);
    const std::vector<kernels::NamedTensor> actual = executor.run(inputs);
    if (deterministic)
      if (std::string differs = outputsDiffer(expected, actual, loose); !differs.empty())
        return {false, differs};
  } catch (const Error& e) {
    // The original ran on these inputs: the optimizer made a model that does not.
    return {false, std::string("the optimized model is refused where the original ran: ") +
                       e.what()};
  } catch (const std::exception& e) {
    return {false, std::string("running the optimized model threw ") + e.what()};
  }
  return {true, {}};
}

// The records a child writes to its parent: a case it starts (an empty message), a case that ran
// to the end (kRanRecord) or a finding (its text).
inline const std::string kRanRecord = "\x01";

inline void writeRecord(int fd, uint32_t index, const std::string& message) {
  uint32_t header[2] = {index, static_cast<uint32_t>(message.size())};
  std::string record(reinterpret_cast<const char*>(header), sizeof header);
  record += message;
  for (size_t done = 0; done < record.size();) {
    ssize_t n = write(fd, record.data() + done, record.size() - done);
    if (n <= 0) _exit(4);
    done += static_cast<size_t>(n);
  }
}

inline bool readFully(int fd, char* out, size_t size) {
  for (size_t done = 0; done < size;) {
    ssize_t n = read(fd, out + done, size - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

struct SweepResult {
  std::vector<std::string> failures;  // one line each: the case's label and what went wrong
  size_t executed = 0;                // cases the stride and FUSECTL_SWEEP_ONLY kept
  size_t ran = 0;                     // of those, the ones that ran to the end
};

// Runs every case, in forked children so that a crash is a finding rather than the end of the
// test: one child takes the cases in order until one crashes (or hangs for 20 s), and the next
// child starts after it.
inline SweepResult runCases(const std::vector<SweepCase>& cases) {
  SweepResult result;
  std::vector<std::string>& failures = result.failures;
  size_t next = 0;
  while (next < cases.size()) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) {
      failures.push_back("pipe() failed");
      return result;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(pipe_fds[0]);
      // Catch's handlers would report the child's crash as this test's own failure.
      for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, SIG_DFL);
      for (size_t i = next; i < cases.size(); ++i) {
        if (i % stride() != 0 || !selected(cases[i].label)) continue;
        writeRecord(pipe_fds[1], static_cast<uint32_t>(i), {});
        alarm(20);
        const Outcome outcome = loadAndRun(cases[i].modelBytes(), cases[i].passes, cases[i].loose,
                                           cases[i].shapes);
        if (!outcome.finding.empty())
          writeRecord(pipe_fds[1], static_cast<uint32_t>(i), outcome.finding);
        else if (outcome.ran)
          writeRecord(pipe_fds[1], static_cast<uint32_t>(i), kRanRecord);
      }
      _exit(0);
    }
    close(pipe_fds[1]);
    size_t started = next;
    uint32_t header[2];
    while (readFully(pipe_fds[0], reinterpret_cast<char*>(header), sizeof header)) {
      std::string message(header[1], '\0');
      if (!readFully(pipe_fds[0], message.data(), message.size())) break;
      if (message.empty()) {
        started = header[0];
        ++result.executed;
      } else if (message == kRanRecord) {
        ++result.ran;
      } else {
        failures.push_back(fmt::format("{}: {}", cases[header[0]].label, message));
        saveFailing(cases[header[0]], header[0]);
      }
    }
    close(pipe_fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (verbose())
      fprintf(stderr, "child from %zu: last started %zu, status %d\n", next, started, status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
    saveFailing(cases[started], started);
    failures.push_back(fmt::format(
        "{}: {}", cases[started].label,
        WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status))
                            : fmt::format("exit {}", WEXITSTATUS(status))));
    next = started + 1;
  }
  return result;
}

// One line for the test's log: how many models there were, how many the stride kept, how many
// ran to the end. A sweep whose models stopped reaching the kernels would pass vacuously, so
// each test also holds a floor on the share that ran.
inline void printCounts(const std::string& sweep, size_t models, const SweepResult& result) {
  printf("%s: %zu models, %zu tried (stride %zu), %zu ran to the end, %zu failed\n",
         sweep.c_str(), models, result.executed, stride(), result.ran, result.failures.size());
}

// Runs `cases` and checks them: none failed, and at least `min_ran_percent` of those tried ran to
// the end (not under FUSECTL_SWEEP_ONLY), with the counts printed under `sweep`.
inline void runAndCheck(const std::string& sweep, const std::vector<SweepCase>& cases,
                        size_t min_ran_percent) {
  const SweepResult result = runCases(cases);
  printCounts(sweep, cases.size(), result);
  INFO(cases.size() << " models, " << result.ran << " of " << result.executed << " ran");
  CHECK((filtered() || result.ran * 100 >= result.executed * min_ran_percent));
  for (const std::string& f : result.failures) UNSCOPED_INFO(f);
  // FUSECTL_SWEEP_REPORT=FILE appends the failures there, one line each, unwrapped.
  if (const char* report = getenv("FUSECTL_SWEEP_REPORT"))
    if (FILE* f = fopen(report, "a")) {
      for (const std::string& line : result.failures) fprintf(f, "%s\n", line.c_str());
      fclose(f);
    }
  CHECK(result.failures.empty());
}

}  // namespace fusectl::sweep
