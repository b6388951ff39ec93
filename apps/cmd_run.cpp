// `fusectl run MODEL`: run a model on the CPU executor with given or seeded inputs, print each
// output's statistics and the executor's memory figures, optionally save the outputs.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "commands.h"
#include "input_binding.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/npy.h"
#include "fusectl/kernels/seeded_inputs.h"

namespace fusectl::cli {

using namespace fusectl::kernels;

std::vector<std::pair<std::string, Shape>> parseShapeSpecs(const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const std::string& spec : specs) {
    // The name may itself contain '=', the dims never do.
    const size_t eq = spec.rfind('=');
    std::optional<Shape> shape;
    if (eq != std::string::npos && eq > 0) shape = Shape::parse(std::string_view(spec).substr(eq + 1));
    if (!shape || !shape->isStatic()) {
      throw Error(ErrorKind::Usage,
                  fmt::format("invalid --shape '{}': expected NAME=DIMS with numeric dims, e.g. "
                              "input=1x3x224x224",
                              spec));
    }
    shapes.emplace_back(spec.substr(0, eq), std::move(*shape));
  }
  return shapes;
}

std::string formatBytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < 1024ull * 1024 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
}

namespace {

// The summary `run` prints for one output tensor.
std::string statsText(const HostTensor& t) {
  if (t.dtype() == DType::String) return fmt::format("{} strings", t.numel());
  const TensorSummary s = summarizeTensor(t);
  std::string text = fmt::format("min {:.6g} max {:.6g} mean {:.6g} std {:.6g} nan {}", s.min,
                                 s.max, s.mean, s.stddev, s.nan_count);
  if (s.inf_count) text += fmt::format(" inf {}", s.inf_count);
  return text;
}

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  std::string output_dir;
  std::string output_format = "npy";
  std::vector<std::string> shapes;
  int threads = 1;
  bool profile = false;
  std::string device = "cpu";
};

// A file name for a value name: [A-Za-z0-9._-] kept, everything else '_'; never empty, never a
// dot name, never a duplicate of an earlier output's.
std::string fileStem(const std::string& name, std::set<std::string>& used) {
  std::string s;
  for (char c : name) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    s += keep ? c : '_';
  }
  if (s.empty() || s.find_first_not_of('.') == std::string::npos) s = "output" + s;
  if (s.size() > 200) s.resize(200);
  std::string candidate = s;
  for (int k = 1; !used.insert(candidate).second; ++k) candidate = fmt::format("{}_{}", s, k);
  return candidate;
}

// float32 copy of a bfloat16 tensor (.npy has no bfloat16).
HostTensor bfloat16AsFloat(const HostTensor& t) {
  HostTensor f(DType::Float, t.dims());
  bfloat16ToFloat(t.data<uint16_t>(), f.mutableData<float>(), t.numel());
  return f;
}

int runRun(const RunOptions& opts) {
  TensorFileFormat format;
  if (opts.output_format == "npy") format = TensorFileFormat::Npy;
  else if (opts.output_format == "pb") format = TensorFileFormat::Pb;
  else throw Error(ErrorKind::Usage, "--output-format must be npy or pb");
  if (opts.threads < 0) throw Error(ErrorKind::Usage, "--threads must be >= 0");
  const auto shapes = parseShapeSpecs(opts.shapes);

  LoadOptions load = loadOptions();
  load.prefault_weights = false;  // the executor packs each weight and lets its pages go
  load.infer_shapes = false;  // the executor needs only the declared interface
  std::unique_ptr<Model> model = loadModel(opts.model, load);
  const Graph& graph = *model->graph;

  BoundInputs bound = bindInputs(graph, opts.inputs, opts.seed, shapes);
  std::vector<NamedTensor>& inputs = bound.tensors;

  ExecutorOptions exec;
  exec.backend = deviceBackend(opts.device);
  exec.num_threads = opts.threads;
  exec.profile = opts.profile;
  exec.max_tensor_bytes = maxTensorBytes();
  // What goes wrong while preparing or running names the model, as the loader's errors do.
  ExecutionStats stats;
  std::vector<NamedTensor> outputs;
  try {
    Executor executor(*model, exec);
    outputs = executor.run(inputs, &stats);
  } catch (const Error& e) {
    throw Error(e.kind(), opts.model + ": " + e.what() + seededInputsNote(bound));
  }

  for (size_t i = 0; i < inputs.size(); ++i) {
    const NamedTensor& in = inputs[i];
    fmt::print("input  {}: {}{} ({})\n", in.name, dtypeName(in.tensor.dtype()),
               formatDims(in.tensor.dims()), bound.sources[i]);
  }
  for (const NamedTensor& out : outputs) {
    const HostTensor& t = out.tensor;
    if (t.isEmptyOptional()) {
      fmt::print("output {}: empty optional of {}{}\n", out.name,
                 t.emptyOptionalOfSequence() ? "sequence of " : "", dtypeName(t.dtype()));
    } else if (t.isSequence()) {
      // One line for the sequence, one per element, so that a Loop's scan of tensors of
      // different shapes reads as what it is, not as an empty tensor.
      fmt::print("output {}: sequence of {} {} tensor{}\n", out.name, t.items().size(),
                 dtypeName(t.dtype()), t.items().size() == 1 ? "" : "s");
      for (size_t k = 0; k < t.items().size(); ++k) {
        const HostTensor& item = t.items()[k];
        fmt::print("  [{}]: {}{} {}\n", k, dtypeName(item.dtype()), formatDims(item.dims()),
                   statsText(item));
      }
    } else {
      fmt::print("output {}: {}{} {}\n", out.name, dtypeName(t.dtype()), formatDims(t.dims()),
                 statsText(t));
    }
  }
  fmt::print("peak activation bytes: {} ({}); intermediate tensors: {}; nodes: {}; {:.3f} ms\n",
             stats.peak_activation_bytes, formatBytes(stats.peak_activation_bytes),
             stats.intermediate_tensors, stats.nodes_run, stats.seconds * 1e3);
  if (exec.backend) {
    fmt::print("{}: {} kernel launches; {} nodes on the CPU; {} copies to the device, {} to the "
               "host ({})\n",
               deviceName(exec.backend->device()), stats.device_launches, stats.fallback_nodes,
               stats.copies_to_device, stats.copies_to_host, formatBytes(stats.copied_bytes));
  }
  if (opts.profile) {
    for (const NodeTime& nt : stats.node_times) {
      fmt::print("  {:10.3f} ms  {} ({})\n", nt.seconds * 1e3, nt.node, nt.op_type);
    }
    if (!stats.body_node_times.empty())
      fmt::print("inside control flow (part of the times above; summed over calls):\n");
    for (const BodyNodeTime& b : stats.body_node_times) {
      fmt::print("  {:10.3f} ms  {} ({}) in {}{}\n", b.time.seconds * 1e3, b.time.node,
                 b.time.op_type, b.parent,
                 b.calls > 1 ? fmt::format(", {} calls", b.calls) : std::string());
    }
  }

  if (!opts.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opts.output_dir, ec);
    if (ec) throwIo(fmt::format("{}: cannot create directory: {}", opts.output_dir, ec.message()));
    std::set<std::string> used;
    const char* ext = format == TensorFileFormat::Npy ? ".npy" : ".pb";
    auto write = [&](const HostTensor& t, const std::string& name) {
      const std::string path =
          (std::filesystem::path(opts.output_dir) / (fileStem(name, used) + ext)).string();
      if (format == TensorFileFormat::Npy && t.dtype() == DType::BFloat16) {
        writeTensorFile(bfloat16AsFloat(t), name, path, format);
        fmt::print("wrote {} (bfloat16 saved as float32: .npy has no bfloat16)\n", path);
      } else {
        writeTensorFile(t, name, path, format);
        fmt::print("wrote {}\n", path);
      }
    };
    for (const NamedTensor& out : outputs) {
      if (out.tensor.isEmptyOptional()) {
        fmt::print("{}: an empty optional, no file written\n", out.name);
      } else if (out.tensor.isSequence()) {
        // A sequence's tensors each get a file of their own, named NAME.0, NAME.1, ...
        for (size_t k = 0; k < out.tensor.items().size(); ++k)
          write(out.tensor.items()[k], out.name + "." + std::to_string(k));
      } else {
        write(out.tensor, out.name);
      }
    }
  }
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return 0;
}

}  // namespace

Command addRunCommand(CLI::App& parent) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "run", "Run a model on the executor (CPU or GPU) and print its outputs' statistics");
  cmd->add_option("MODEL", opts->model, "Model (.onnx or .onnxtxt)")->required();
  cmd->add_option("--input", opts->inputs,
                  "Input data: NAME=FILE or FILE (bound to the next input in order); .npy or "
                  "TensorProto .pb. Inputs not given get seeded random data")
      ->type_name("NAME=FILE");
  cmd->add_option("--seed", opts->seed, "Seed for random inputs")->capture_default_str();
  cmd->add_option("--shape", opts->shapes,
                  "Dims for a random input, e.g. input=1x3x224x224 (symbolic dims default to 1)")
      ->type_name("NAME=DIMS");
  cmd->add_option("--output-dir", opts->output_dir, "Write DIR/<output name>.npy (or .pb)")
      ->type_name("DIR");
  cmd->add_option("--output-format", opts->output_format, "npy or pb")->capture_default_str();
  cmd->add_option("--threads", opts->threads, "Threads per kernel (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag("--profile", opts->profile,
                "Print each node's time (wall time; on a GPU, its CUDA-event time)");
  addDeviceOption(*cmd, opts->device);
  return Command{cmd, [opts] { return runRun(*opts); }};
}

}  // namespace fusectl::cli
