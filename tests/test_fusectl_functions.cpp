// Model-local ONNX functions for fusectl ops (fused_ops.h): the exported model passes
// the ONNX 1.12 full checker, still runs in our executor (the kernels answer to every spelling),
// and each function body computes what the fused kernel computes.
//
// Models: every positive golden case of testdata/passes/*/ after its own `# RUN:` pipeline
// (those left with a fusectl node), plus one
// synthetic FusedConv/FusedGemm per (activation, residual, bias, opset) so that every body shape
// (opset 10 Max/Min and tensor-attribute params, 13, 20 with Gelu) is covered.
//
// Oracles, for each model M (fused, canonical FusedConv/FusedGemm nodes):
//  1. attach + save: the ONNX checker accepts it, including strict shape inference through the
//     function bodies; attaching again changes nothing;
//  2. our executor on the reloaded export (renamed nodes) equals our executor on M;
//  3. the export with each fusectl node replaced by its function body (a small inliner below)
//     equals M on our executor: the function bodies are right, without needing ONNX Runtime;
//  4. hidden "[.][ort]": onnxruntime-node (tests/ort_reference.js) on the export equals our
//     executor on M. It runs where the ORT differential test runs (FUSECTL_ORT_DIR set).
// And a program that uses only the library (load, PassManager, save) writes a model with its
// functions attached, which the checker and ONNX Runtime accept.
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "shell_util.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/npy.h"
#include "fusectl/graph/fused_ops.h"
#include "fusectl/passes/pipeline.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;
using namespace fusectl::passes;
namespace fs = std::filesystem;

namespace {

struct FusedCase {
  std::string name;
  std::string text;  // a model with fusectl::FusedConv/FusedGemm nodes, before attaching
};

using fusectl::testing::slurp;

// The positive golden cases of every pass folder (testdata/passes/*/), each run through its own
// `# RUN:` pipeline (which applies to its case and the ones after it, as in the golden runner);
// the cases left with a fusectl node are the models to export. So a new fusion pass that writes
// a fusectl op has its function bodies checked here by adding golden cases, not code.
std::vector<FusedCase> goldenCases() {
  std::vector<FusedCase> out;
  std::vector<fs::path> files;
  for (const auto& dir : fs::directory_iterator(fs::path(FUSECTL_SOURCE_DIR) / "testdata" / "passes")) {
    if (!dir.is_directory()) continue;
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().extension() == ".onnxtxt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::string content = slurp(f);
    size_t start = 0;
    int index = 0;
    std::string pipeline;
    while (start < content.size()) {
      size_t sep = content.find("# -----", start);
      std::string text = content.substr(start, sep == std::string::npos ? std::string::npos
                                                                        : sep - start);
      start = sep == std::string::npos ? content.size() : content.find('\n', sep) + 1;
      ++index;
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        const size_t at = line.find("# RUN:");
        if (at == std::string::npos) continue;
        pipeline = line.substr(at + 6);
        pipeline.erase(0, pipeline.find_first_not_of(" \t"));
        pipeline.erase(pipeline.find_last_not_of(" \t\r") + 1);
      }
      if (pipeline.empty() || text.find("CHECK-UNCHANGED") != std::string::npos) continue;
      auto model = parseModelText(text, f.string());
      Report report;
      PassManagerOptions options;
      options.attach_functions = false;  // the cases are the fused models before export
      const bool level = pipeline.size() == 3 && pipeline.compare(0, 2, "-O") == 0;
      PassManager(options).run(
          *model, level ? Pipeline::forLevel(pipeline[2] - '0') : Pipeline::parse(pipeline),
          report);
      bool has_fusectl_node = false;
      for (Node* n : model->graph->nodes()) has_fusectl_node |= n->domain() == "fusectl";
      if (!has_fusectl_node) continue;
      out.push_back({fmt::format("{}/{}#{}", f.parent_path().filename().string(),
                                 f.filename().string(), index),
                     modelToText(*model)});
    }
  }
  return out;
}

// Per opset and base op, one model with a node for every (bias, residual, activation) variant,
// all reading the same graph inputs, each writing its own graph output (named for the variant,
// so a failure says which one). One model per group keeps the ORT run short.
std::vector<FusedCase> syntheticCases() {
  struct Act {
    const char* name;
    const char* params;  // activation_params, or "" for the kernel's defaults
  };
  const Act acts[] = {{"", ""},          {"Relu", ""},      {"Clip", "[-0.5, 0.5]"},
                      {"LeakyRelu", "[0.2]"}, {"Sigmoid", ""}, {"HardSigmoid", "[0.3, 0.4]"},
                      {"HardSwish", ""}, {"Silu", ""},      {"Gelu", ""},
                      {"Tanh", ""},      {"Clip", ""},      {"LeakyRelu", ""}};
  std::vector<FusedCase> out;
  for (int opset : {10, 13, 20}) {
    for (bool conv : {true, false}) {
      const std::string y_type = conv ? "float[1, 3, 5, 3]" : "float[3, 6]";
      std::vector<std::string> outputs, nodes;
      for (bool bias : {true, false}) {
        if (!conv && !bias && opset < 11) continue;  // Gemm's C is optional from opset 11
        for (bool residual : {false, true}) {
          for (const Act& a : acts) {
            std::string attrs = conv ? "pads = [1, 1, 1, 1], strides = [1, 2]"
                                     : "alpha = 0.5, transB = 1";
            if (*a.name) attrs += fmt::format(", activation = \"{}\"", a.name);
            if (*a.params) attrs += fmt::format(", activation_params = {}", a.params);
            std::string args = bias ? "X, W, B" : "X, W";
            if (residual) args += bias ? ", Z" : ",, Z";
            std::string y = fmt::format("Y{}{}_{}{}", bias ? "" : "_NoBias",
                                        residual ? "_Add" : "", *a.name ? a.name : "None",
                                        *a.params ? "_params" : "");
            outputs.push_back(y_type + " " + y);
            nodes.push_back(fmt::format("  {} = fusectl.{} <{}> ({})\n", y,
                                        conv ? "FusedConv" : "FusedGemm", attrs, args));
          }
        }
      }
      std::string ins = conv ? "float[1, 2, 5, 5] X, float[3, 2, 3, 3] W, float[3] B"
                             : "float[3, 4] X, float[6, 4] W, float[6] B";
      ins += ", " + y_type + " Z";
      std::string text = fmt::format(
          "<ir_version: 8, opset_import: [\"\" : {}, \"fusectl\" : 1]>\n"
          "g ({}) => ({})\n{{\n{}}}\n",
          opset, ins, fmt::join(outputs, ", "), fmt::join(nodes, ""));
      out.push_back({fmt::format("opset {} {} variants", opset, conv ? "conv" : "gemm"), text});
    }
  }
  return out;
}

// onnx.checker.check_model(model, full_check=True) as the Python API does it in 1.12.
std::string checkerProblem(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto copy = m;
    onnx::ShapeInferenceOptions options(/*check_type=*/true, /*strict_mode=*/1);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), options);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Replaces every node that calls a model-local function by the function's body: formal
// parameters bound to the actual names, body-internal names made unique, attribute references
// resolved from the call (absent when the call does not give them).
onnx::ModelProto inlineFunctions(const onnx::ModelProto& model) {
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> functions;
  for (const auto& f : model.functions()) functions[{f.domain(), f.name()}] = &f;
  onnx::ModelProto out = model;
  out.clear_functions();
  onnx::GraphProto* g = out.mutable_graph();
  g->clear_node();
  int call = 0;
  for (const onnx::NodeProto& n : model.graph().node()) {
    auto it = functions.find({n.domain(), n.op_type()});
    if (it == functions.end()) {
      *g->add_node() = n;
      continue;
    }
    const onnx::FunctionProto& f = *it->second;
    std::map<std::string, std::string> rename;
    for (int i = 0; i < f.input_size(); ++i) rename[f.input(i)] = i < n.input_size() ? n.input(i) : "";
    // An output the call leaves off (a composite op's optional sum) stays internal.
    for (int i = 0; i < f.output_size(); ++i) {
      if (i < n.output_size() && !n.output(i).empty()) rename[f.output(i)] = n.output(i);
    }
    auto bound = [&](const std::string& name) {
      if (name.empty()) return name;
      auto r = rename.find(name);
      if (r != rename.end()) return r->second;
      return rename[name] = fmt::format("inl{}_{}", call, name);
    };
    for (const onnx::NodeProto& b : f.node()) {
      onnx::NodeProto* copy = g->add_node();
      *copy = b;
      for (auto& i : *copy->mutable_input()) i = bound(i);
      for (auto& o : *copy->mutable_output()) o = bound(o);
      copy->clear_attribute();
      for (const onnx::AttributeProto& a : b.attribute()) {
        if (a.ref_attr_name().empty()) {
          *copy->add_attribute() = a;
          continue;
        }
        for (const onnx::AttributeProto& given : n.attribute()) {
          if (given.name() != a.ref_attr_name()) continue;
          onnx::AttributeProto* resolved = copy->add_attribute();
          *resolved = given;
          resolved->set_name(a.name());
        }
      }
    }
    ++call;
  }
  return out;
}

onnx::ModelProto toProto(const Model& m) {
  onnx::ModelProto p;
  REQUIRE(p.ParseFromString(modelToBinary(m)));
  return p;
}

std::unique_ptr<Model> fromProto(const onnx::ModelProto& p, const std::string& name) {
  std::string bytes;
  p.SerializeToString(&bytes);
  return parseModelBinary(bytes, name, ".");
}

std::string compareOutputs(const std::vector<NamedTensor>& actual,
                           const std::vector<NamedTensor>& expected, const Tolerance& tol) {
  if (actual.size() != expected.size()) return "different output counts";
  for (size_t i = 0; i < actual.size(); ++i) {
    CompareResult r = compareTensors(actual[i].tensor, expected[i].tensor, tol);
    if (!r.passed) {
      return fmt::format("output '{}': {}", expected[i].name,
                         r.describe(expected[i].tensor.dims()));
    }
  }
  return "";
}

Tolerance tight() {
  Tolerance t;
  t.atol = 1e-5;
  t.rtol = 1e-5;
  return t;
}

std::vector<FusedCase> allCases() {
  std::vector<FusedCase> cases = goldenCases();
  for (FusedCase& c : syntheticCases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace

TEST_CASE("fusectl functions: attached functions pass the checker and compute the fused op",
          "[passes][functions]") {
  std::vector<FusedCase> cases = allCases();
  REQUIRE(cases.size() > 20);
  size_t golden_fused = 0;
  for (const FusedCase& c : cases) {
    INFO(c.name << "\n" << c.text);
    auto original = parseModelText(c.text, c.name);
    bool has_fused = false;
    for (Node* n : original->graph->nodes()) has_fused |= n->domain() == "fusectl";
    REQUIRE(has_fused);
    golden_fused += c.name.find(".onnxtxt#") != std::string::npos;

    auto exported = parseModelText(c.text, c.name);
    attachFusectlFunctions(*exported);
    const std::string bytes = modelToBinary(*exported);
    attachFusectlFunctions(*exported);
    CHECK(modelToBinary(*exported) == bytes);  // idempotent

    onnx::ModelProto proto = toProto(*exported);
    std::set<std::string> function_names;
    std::vector<std::string> order;
    for (const auto& f : proto.functions()) {
      CHECK(f.domain() == "fusectl");
      function_names.insert(f.name());
      order.push_back(f.name());
    }
    CHECK(std::is_sorted(order.begin(), order.end()));
    std::set<std::string> used;
    for (const auto& n : proto.graph().node()) {
      if (n.domain() != "fusectl") continue;
      CHECK(function_names.count(n.op_type()) == 1);
      used.insert(n.op_type());
    }
    CHECK(used == function_names);  // one function per spelling used, no more
    std::string problem = checkerProblem(proto);
    INFO("checker: " << problem);
    CHECK(problem.empty());

    std::vector<NamedTensor> inputs = makeRandomInputs(*original->graph, 7);
    std::vector<NamedTensor> expected = runModel(*original, inputs);
    auto reloaded = fromProto(proto, c.name + " (exported)");
    std::string diff = compareOutputs(runModel(*reloaded, inputs), expected, tight());
    INFO("exported model on our executor: " << diff);
    CHECK(diff.empty());

    auto inlined = fromProto(inlineFunctions(proto), c.name + " (inlined)");
    for (Node* n : inlined->graph->nodes()) CHECK(n->domain() != "fusectl");
    diff = compareOutputs(runModel(*inlined, inputs), expected, tight());
    INFO("function bodies on our executor: " << diff);
    CHECK(diff.empty());
  }
  CHECK(golden_fused >= 20);
}

TEST_CASE("fusectl functions: renaming, explicit parameters and imports", "[passes][functions]") {
  auto m = parseModelText(R"(<ir_version: 7, opset_import: ["" : 11]>
g (float[1, 2, 5, 5] X, float[3, 2, 3, 3] W, float[1, 3, 3, 3] Z) => (float[1, 3, 3, 3] Y)
{
  T = fusectl.FusedConv <activation = "LeakyRelu"> (X, W, , Z)
  Y = fusectl.FusedConv <activation = "Relu"> (X, W, , T)
}
)",
                          "leaky");
  attachFusectlFunctions(*m);
  CHECK(m->ir_version == 8);
  CHECK(m->opsetVersion("fusectl") == 1);
  std::vector<std::string> ops;
  for (Node* n : m->graph->nodes()) ops.push_back(n->opType());
  CHECK(ops == std::vector<std::string>{"FusedConv_NoBias_Add_LeakyRelu", "FusedConv_NoBias_Add_Relu"});
  Node* leaky = m->graph->firstNode();
  // A spelled node lists no omitted input: X, W, Z.
  REQUIRE(leaky->numInputs() == 3);
  CHECK(leaky->input(2)->name() == "Z");
  CHECK(leaky->output(0)->name() == "T");
  CHECK(leaky->attrFloats("activation_params") == std::vector<float>{0.01f});
  // Opset 11's Constant has no value_floats: the body reads this tensor attribute instead.
  REQUIRE(leaky->attr("activation_params_tensor"));
  CHECK(leaky->attr("activation_params_tensor")->t.numel() == 1);
  CHECK(fusedOpSpelling(*leaky) == "FusedConv_NoBias_Add_LeakyRelu");
  REQUIRE(m->functions.size() == 2);
  CHECK(checkerProblem(toProto(*m)).empty());

  auto unknown = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[2] X) => (float[2] Y)
{
  Y = fusectl.FusedSoftmax (X)
}
)",
                                "unknown");
  CHECK_THROWS_WITH(attachFusectlFunctions(*unknown),
                    Catch::Contains("no portable ONNX function is known for fusectl::FusedSoftmax"));
}

using fusectl::test::shellQuote;

namespace {

// Runs the model file in onnxruntime-node and compares each output with `expected`; "" when
// they agree, else why not. `dir` is a fresh folder for the inputs and ORT's outputs.
std::string ortDisagreement(const fusectl::test::OrtSetup& ort, const fs::path& dir,
                            const std::string& model_path, const std::vector<NamedTensor>& inputs,
                            const std::vector<NamedTensor>& expected) {
  fs::create_directories(dir / "in");
  std::string args;
  for (const NamedTensor& in : inputs) {
    const std::string file = (dir / "in" / (in.name + ".npy")).string();
    writeNpy(in.tensor, file);
    args += " " + shellQuote(in.name + "=" + file);
  }
  const std::string cmd = "FUSECTL_ORT_DIR=" + shellQuote(ort.dir) + " " + shellQuote(ort.node) +
                          " " + shellQuote(std::string(FUSECTL_SOURCE_DIR) +
                                           "/tests/ort_reference.js") +
                          " " + shellQuote(model_path) + " " +
                          shellQuote((dir / "ort").string()) + args + " > " +
                          shellQuote((dir / "ort.log").string()) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return cmd + "\n" + slurp(dir / "ort.log");
  Tolerance tol;
  tol.atol = 1e-5;
  tol.rtol = 1e-4;
  for (const NamedTensor& e : expected) {
    HostTensor ours = readNpy((dir / "ort" / (e.name + ".npy")).string());
    CompareResult r = compareTensors(ours, e.tensor, tol);
    if (!r.passed) return fmt::format("output '{}': {}", e.name, r.describe(e.tensor.dims()));
  }
  return "";
}

// onnxruntime-node, or nullopt after a WARN saying why the check is skipped.
std::optional<fusectl::test::OrtSetup> ortOrWarn() {
  fusectl::test::OrtSetup ort = fusectl::test::findOrtSetup();
  if (ort.found) return ort;
  WARN(ort.skip_reason);
  return std::nullopt;
}

}  // namespace

TEST_CASE("fusectl functions run in onnxruntime", "[.][ort][functions]") {
  const std::optional<fusectl::test::OrtSetup> ort = ortOrWarn();
  if (!ort) return;
  const fs::path work = fusectl::testing::processTempPath("fusectl_ort_functions");
  fs::remove_all(work);
  int index = 0;
  for (const FusedCase& c : allCases()) {
    INFO(c.name << "\n" << c.text);
    const fs::path dir = work / std::to_string(index++);
    fs::create_directories(dir);
    auto original = parseModelText(c.text, c.name);
    auto exported = parseModelText(c.text, c.name);
    attachFusectlFunctions(*exported);
    const std::string model_path = (dir / "model.onnx").string();
    saveModel(*exported, model_path);

    std::vector<NamedTensor> inputs = makeRandomInputs(*original->graph, 7);
    CHECK(ortDisagreement(*ort, dir, model_path, inputs, runModel(*original, inputs)) == "");
  }
  fs::remove_all(work);
}

namespace {

// What a program that links only the libraries does with testdata/models/<name>: load, run -O3
// through PassManager, save into `dir` (emptied first). The oracle: the unoptimized model on our
// executor, on seeded inputs.
struct LibraryRun {
  std::string saved;
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> expected;
};

LibraryRun optimizeWithLibraryOnly(const std::string& name, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string source = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name;
  LibraryRun run;
  auto original = loadModel(source);
  run.inputs = makeRandomInputs(*original->graph, 7);
  run.expected = runModel(*original, run.inputs);

  auto m = loadModel(source);
  Report report;
  PassManager().run(*m, Pipeline::forLevel(3), report);
  run.saved = (dir / "optimized.onnx").string();
  saveModel(*m, run.saved);
  return run;
}

const char* const kLibraryModels[] = {"resnet_mini.onnx", "mobilenet_mini.onnx",
                                      "bert_layer.onnx"};

}  // namespace

TEST_CASE("fusectl functions: a library-only -O3 run saves a model the checker accepts",
          "[passes][functions]") {
  const fs::path work = fusectl::testing::processTempPath("fusectl_library_functions");
  for (const char* name : kLibraryModels) {
    INFO(name);
    const LibraryRun run = optimizeWithLibraryOnly(name, work);
    auto optimized = loadModel(run.saved);
    size_t fusectl_nodes = 0;
    for (Node* n : optimized->graph->nodes()) fusectl_nodes += n->domain() == "fusectl";
    CHECK(fusectl_nodes > 0);  // else this test would not test the attachment
    CHECK(optimized->functions.size() > 0);
    std::string problem = checkerProblem(toProto(*optimized));
    INFO("checker: " << problem);
    CHECK(problem.empty());

    Tolerance tol;
    tol.atol = 1e-4;
    tol.rtol = 1e-4;
    std::string diff = compareOutputs(runModel(*optimized, run.inputs), run.expected, tol);
    INFO("optimized model on our executor: " << diff);
    CHECK(diff.empty());
  }
  fs::remove_all(work);
}

TEST_CASE("fusectl functions: a library-only -O3 run saves a model onnxruntime runs",
          "[.][ort][functions]") {
  const std::optional<fusectl::test::OrtSetup> ort = ortOrWarn();
  if (!ort) return;
  const fs::path work = fusectl::testing::processTempPath("fusectl_library_ort");
  for (const char* name : kLibraryModels) {
    INFO(name);
    const LibraryRun run = optimizeWithLibraryOnly(name, work);
    CHECK(ortDisagreement(*ort, work, run.saved, run.inputs, run.expected) == "");
  }
  fs::remove_all(work);
}
