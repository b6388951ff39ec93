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
// functions attached, which the checker and ONNX Runtime accept. float16 and bfloat16 nodes (their
// dtype-suffixed spellings and Cast-wrapped functions) have a section of their own at the end.
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "shell_util.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_function.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/half.h"
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

namespace {

// A node as the passes see it: op, domain, inputs (trailing omitted ones dropped) and the
// outputs the original had.
std::string nodeShape(const Node& n, size_t outputs) {
  std::vector<std::string> in;
  for (const Value* v : n.inputs()) in.push_back(v ? v->name() : "");
  while (!in.empty() && in.back().empty()) in.pop_back();
  std::vector<std::string> out;
  for (size_t i = 0; i < outputs && i < n.numOutputs(); ++i)
    out.push_back(n.output(i) ? n.output(i)->name() : "");
  return fmt::format("{}::{}({}) -> ({})", n.domain(), n.opType(), fmt::join(in, ", "),
                     fmt::join(out, ", "));
}

}  // namespace

TEST_CASE("fusectl functions: a saved model's spellings read back as the ops the passes wrote",
          "[passes][functions]") {
  std::vector<FusedCase> cases = allCases();
  size_t renamed_total = 0;
  for (const FusedCase& c : cases) {
    INFO(c.name << "\n" << c.text);
    auto original = parseModelText(c.text, c.name);
    auto exported = parseModelText(c.text, c.name);
    attachFusectlFunctions(*exported);
    const std::string bytes = modelToBinary(*exported);
    auto saved = fromProto(toProto(*exported), c.name + " (saved)");
    renamed_total += unspellFusectlNodes(*saved);

    // A composite op's node keeps the unread outputs the export named (nameEveryOutput).
    const std::vector<Node*> nodes = original->graph->nodesSnapshot();
    std::vector<std::string> want, got;
    for (const Node* n : nodes) want.push_back(nodeShape(*n, n->numOutputs()));
    for (const Node* n : saved->graph->nodes()) {
      const size_t at = got.size();
      got.push_back(nodeShape(*n, at < nodes.size() ? nodes[at]->numOutputs() : n->numOutputs()));
    }
    CHECK(got == want);
    // Spelled again on export, with the saved functions: the saved bytes.
    attachFusectlFunctions(*saved);
    CHECK(modelToBinary(*saved) == bytes);
  }
  CHECK(renamed_total > cases.size());

  // Where the attributes or the types contradict the name, the node keeps it (the schema check
  // has its say on such a node at load).
  auto contradicts = parseModelText(R"M(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[1, 2, 5, 5] X, float[3, 2, 3, 3] W, float[3] B, float[2, 8] L, float[8] S) => (float[1, 3, 3, 3] Y, float[1, 3, 3, 3] Y2, float[2, 8] N)
{
  Y = fusectl.FusedConv_Relu <activation = "Clip"> (X, W, B)
  Y2 = fusectl.FusedConv_Add (X, W, B)
  N = fusectl.Elementwise_0123456789abcdef <program = "t0 = Relu(x0)"> (L)
}
)M",
                                    "contradicts");
  CHECK(unspellFusectlNodes(*contradicts) == 0);
  std::vector<std::string> kept;
  for (const Node* n : contradicts->graph->nodes()) kept.push_back(n->opType());
  CHECK(kept == std::vector<std::string>{"FusedConv_Relu", "FusedConv_Add",
                                         "Elementwise_0123456789abcdef"});

  // A float16 suffix goes where a value is typed float16, and stays where nothing is typed: it is
  // then the only record of the element type.
  auto half = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float16[2, 8] X, float16[8] S, float16[8] B) => (float16[2, 8] Y)
{
  Y = fusectl.LayerNorm_float16 <axis = -1, epsilon = 1e-5> (X, S, B)
}
)",
                             "half");
  CHECK(unspellFusectlNodes(*half) == 1);
  CHECK(half->graph->firstNode()->opType() == "LayerNorm");
  attachFusectlFunctions(*half);
  CHECK(half->graph->firstNode()->opType() == "LayerNorm_float16");
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

// The elements of a float32, float16 or bfloat16 tensor, as float32.
std::vector<float> floatsOf(const HostTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype() == DType::Float ? t.data<float>()[i]
                                       : halfBitsToFloat(t.dtype(), t.data<uint16_t>()[i]);
  return out;
}

HostTensor float32Copy(const HostTensor& t) {
  HostTensor out(DType::Float, t.dims());
  const std::vector<float> v = floatsOf(t);
  std::copy(v.begin(), v.end(), out.mutableData<float>());
  return out;
}

// `m` with its graph inputs and outputs of type `t` made float32, Cast to and from `t` inside:
// .npy and onnxruntime-node's JavaScript tensors have no bfloat16.
onnx::ModelProto withFloat32Interface(onnx::ModelProto m, DType t) {
  onnx::GraphProto* g = m.mutable_graph();
  std::map<std::string, std::string> inner;  // graph input or output -> the half value inside
  onnx::GraphProto casts_in, casts_out;
  auto cast = [](onnx::GraphProto& into, const std::string& from, const std::string& to,
                 DType type) {
    onnx::NodeProto* c = into.add_node();
    c->set_op_type("Cast");
    c->add_input(from);
    c->add_output(to);
    onnx::AttributeProto* a = c->add_attribute();
    a->set_name("to");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(static_cast<int64_t>(type));
  };
  for (onnx::ValueInfoProto& in : *g->mutable_input()) {
    if (in.type().tensor_type().elem_type() != static_cast<int>(t)) continue;
    in.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    inner[in.name()] = in.name() + "_as_half";
    cast(casts_in, in.name(), inner[in.name()], t);
  }
  for (onnx::ValueInfoProto& out : *g->mutable_output()) {
    if (out.type().tensor_type().elem_type() != static_cast<int>(t)) continue;
    out.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    inner[out.name()] = out.name() + "_as_half";
    cast(casts_out, inner[out.name()], out.name(), DType::Float);
  }
  onnx::GraphProto nodes;
  nodes.mutable_node()->Swap(g->mutable_node());
  *g->mutable_node() = casts_in.node();
  for (onnx::NodeProto& n : *nodes.mutable_node()) {
    for (std::string& v : *n.mutable_input())
      if (inner.count(v)) v = inner[v];
    for (std::string& v : *n.mutable_output())
      if (inner.count(v)) v = inner[v];
    *g->add_node() = n;
  }
  for (const onnx::NodeProto& n : casts_out.node()) *g->add_node() = n;
  g->clear_value_info();
  return m;
}

// Runs the model file in onnxruntime-node and reads its outputs `names` into `results`; "" when
// it ran, else why not. `dir` is a fresh folder for the inputs and ORT's outputs. A bfloat16
// input is fed as float32 (.npy has no bfloat16): the model takes float32 there
// (withFloat32Interface) and returns float32 for its bfloat16 outputs.
std::string runOrt(const fusectl::test::OrtSetup& ort, const fs::path& dir,
                   const std::string& model_path, const std::vector<NamedTensor>& inputs,
                   const std::vector<std::string>& names, std::vector<HostTensor>& results) {
  fs::create_directories(dir / "in");
  std::string args;
  for (const NamedTensor& in : inputs) {
    const std::string file = (dir / "in" / (in.name + ".npy")).string();
    writeNpy(in.tensor.dtype() == DType::BFloat16 ? float32Copy(in.tensor) : in.tensor, file);
    args += " " + shellQuote(in.name + "=" + file);
  }
  const std::string cmd = "FUSECTL_ORT_DIR=" + shellQuote(ort.dir) + " " + shellQuote(ort.node) +
                          " " + shellQuote(std::string(FUSECTL_SOURCE_DIR) +
                                           "/tests/ort_reference.js") +
                          " " + shellQuote(model_path) + " " +
                          shellQuote((dir / "ort").string()) + args + " > " +
                          shellQuote((dir / "ort.log").string()) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return cmd + "\n" + slurp(dir / "ort.log");
  results.clear();
  for (const std::string& name : names)
    results.push_back(readNpy((dir / "ort" / (name + ".npy")).string()));
  return "";
}

// ONNX Runtime and our executor each round a standard op's half result their own way (a
// float16 Sigmoid can differ by an ulp), so a model with float16 or bfloat16 values is compared
// within 4 ulps at 1 of its narrowest half type.
Tolerance ortTolerance(const Model& m) {
  Tolerance tol;
  tol.atol = 1e-5;
  tol.rtol = 1e-4;
  auto widen = [&](const Value* v) {
    double ulp = 0;
    if (v && v->dtype() == DType::Float16) ulp = 0x1p-10;
    if (v && v->dtype() == DType::BFloat16) ulp = 0x1p-7;
    tol.atol = tol.rtol = std::max(tol.atol, 4 * ulp);
  };
  for (const Value* v : m.graph->inputs()) widen(v);
  for (const Node* n : m.graph->nodes())
    for (const Value* v : n->outputs()) widen(v);
  return tol;
}

// Runs the model file in onnxruntime-node and compares each output with `expected` within `tol`;
// "" when they agree, else why not.
std::string ortDisagreement(const fusectl::test::OrtSetup& ort, const fs::path& dir,
                            const std::string& model_path, const std::vector<NamedTensor>& inputs,
                            const std::vector<NamedTensor>& expected, const Tolerance& tol) {
  std::vector<std::string> names;
  for (const NamedTensor& e : expected) names.push_back(e.name);
  std::vector<HostTensor> got;
  if (std::string problem = runOrt(ort, dir, model_path, inputs, names, got); !problem.empty())
    return problem;
  for (size_t i = 0; i < expected.size(); ++i) {
    const HostTensor& e = expected[i].tensor;
    CompareResult r =
        compareTensors(got[i], e.dtype() == DType::BFloat16 ? float32Copy(e) : e, tol);
    if (!r.passed) {
      return fmt::format("output '{}': {}", expected[i].name,
                         r.describe(expected[i].tensor.dims()));
    }
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
    std::ofstream(model_path, std::ios::binary)
        << withFloat32Interface(toProto(*exported), DType::BFloat16).SerializeAsString();

    std::vector<NamedTensor> inputs = makeRandomInputs(*original->graph, 7);
    CHECK(ortDisagreement(*ort, dir, model_path, inputs, runModel(*original, inputs),
                          ortTolerance(*original)) == "");
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
    auto original = loadModel(std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name);
    CHECK(ortDisagreement(*ort, work, run.saved, run.inputs, run.expected,
                          ortTolerance(*original)) == "");
  }
  fs::remove_all(work);
}

// ---- float16 and bfloat16 nodes ----
//
// A fusectl node of element type float16 or bfloat16 is exported under its float32 spelling plus
// a dtype suffix, its function the float32 one between Casts (fused_ops.h). One model per op
// family, written once with "{T}" for the element type. The oracle for a half model is the
// float32 model on our executor, on the same (half-exact) inputs, each output rounded once to the
// half type: what the kernels compute, and what the Cast-wrapped float32 body computes.
// Tolerance: within 2 ulps of the half type at the reference, magnitudes below 2^-10 counted as
// 2^-10 (there cancellation in float32 leaves an absolute error worth many ulps of a tiny
// result). A body run in the half type, or one missing a Cast, is off by far more or fails the
// checker.

namespace {

struct HalfCase {
  std::string name;
  int opset = 13;
  std::string graph;     // a graph in textual syntax, "{T}" for the element type
  bool bfloat16 = true;  // also in bfloat16: Cast takes it from opset 13
};

std::vector<HalfCase> halfCases() {
  const std::string norms = R"(g ({T}[2, 3, 8] X, {T}[2, 3, 8] Skip, {T}[8] Bias, {T}[8] S,
     {T}[8] B, {T}[3] GS, {T}[3] GB) => ({T}[2, 3, 8] LN, {T}[2, 3, 8] RMS, {T}[2, 3, 8] SLN,
                  {T}[2, 3, 8] SLNSum, {T}[2, 3, 8] SRMS, {T}[2, 3, 8] GN, {T}[2, 3, 8] CLN)
{
  LN = fusectl.LayerNorm <axis = -1, epsilon = 1e-5> (X, S, B)
  RMS = fusectl.RMSNorm <axis = 2, epsilon = 1e-6> (X, S)
  SLN, SLNSum = fusectl.SkipLayerNorm <axis = -1, epsilon = 1e-5> (X, Skip, S, B)
  SRMS = fusectl.SkipRMSNorm <axis = -1, epsilon = 1e-6> (X, Bias, S)
  GN = fusectl.GroupNorm <num_groups = 3, epsilon = 1e-5> (X, GS, GB)
  CLN = fusectl.ChannelLayerNorm <epsilon = 1e-5> (X, GS, GB)
}
)";
  const std::string conv = R"(g ({T}[1, 2, 5, 5] X, {T}[3, 2, 3, 3] W, {T}[3] B, {T}[1, 3, 3, 3] Z)
  => ({T}[1, 3, 3, 3] Leaky, {T}[1, 3, 3, 3] HardSigmoid, {T}[1, 3, 3, 3] HardSwish)
{
  Leaky = fusectl.FusedConv <activation = "LeakyRelu", activation_params = [0.2]> (X, W, B)
  HardSigmoid = fusectl.FusedConv <activation = "HardSigmoid", activation_params = [0.3, 0.4]>
      (X, W, B, Z)
  HardSwish = fusectl.FusedConv <activation = "HardSwish"> (X, W, , Z)
}
)";
  // Below opset 12 (Constant without value_float) the norm bodies read the call's epsilon
  // from its tensor twin, epsilon_tensor; fuse-group-norm does not fire there.
  const std::string norms_opset11 = R"(g ({T}[2, 3, 8] X, {T}[2, 3, 8] Skip, {T}[8] Bias,
     {T}[8] S, {T}[8] B, {T}[3] GS, {T}[3] GB, {T}[1, 2, 3, 8] RX, {T}[1, 1, 3, 8] Cos,
     {T}[1, 1, 3, 8] Sin) => ({T}[2, 3, 8] LN, {T}[2, 3, 8] RMS, {T}[2, 3, 8] SLN,
                  {T}[2, 3, 8] SLNSum, {T}[2, 3, 8] SRMS, {T}[2, 3, 8] CLN, {T}[1, 2, 3, 8] QKNorm)
{
  LN = fusectl.LayerNorm <axis = -1, epsilon = 1e-5> (X, S, B)
  RMS = fusectl.RMSNorm <axis = 2, epsilon = 1e-6> (X, S)
  SLN, SLNSum = fusectl.SkipLayerNorm <axis = -1, epsilon = 1e-5> (X, Skip, S, B)
  SRMS = fusectl.SkipRMSNorm <axis = -1, epsilon = 1e-6> (X, Bias, S)
  CLN = fusectl.ChannelLayerNorm <epsilon = 1e-5> (X, GS, GB)
  QKNorm = fusectl.QKNormRotaryEmbedding <epsilon = 1e-6> (RX, S, Cos, Sin)
}
)";
  return {
      {"norms, opset 13", 13, norms},
      {"norms and a QK-norm rotary, opset 11", 11, norms_opset11, /*bfloat16=*/false},
      // From opset 18 the means are ReduceSum / Cast(count): a float32 Cast inside the body.
      {"norms, opset 18", 18, norms},
      {"activations and SwiGLU", 13, R"(g ({T}[2, 6] X, {T}[2, 6] U, {T}[2, 12] P)
  => ({T}[2, 6] Gelu, {T}[2, 6] GeluTanh, {T}[2, 6] QuickGelu, {T}[2, 6] SwiGLU,
      {T}[2, 6] SwiGLUPacked)
{
  Gelu = fusectl.Gelu (X)
  GeluTanh = fusectl.GeluTanh (X)
  QuickGelu = fusectl.QuickGelu (X)
  SwiGLU = fusectl.SwiGLU (X, U)
  SwiGLUPacked = fusectl.SwiGLUPacked (P)
}
)"},
      // The rotary tables per batch ([B, 1, S, D]) and shared ([S, D]).
      {"attention with a mask", 13, R"(g ({T}[1, 4, 3, 8] Q, {T}[1, 2, 5, 8] K, {T}[1, 2, 5, 8] V,
     {T}[1, 1, 3, 5] M, {T}[2, 3, 64] P, {T}[2, 1, 3, 3] PM, {T}[2, 1, 3, 8] RC,
     {T}[2, 1, 3, 8] RS, {T}[3, 8] SC, {T}[3, 8] SS)
  => ({T}[1, 4, 3, 8] Y, {T}[1, 4, 3, 8] Causal, {T}[2, 3, 32] Packed,
      {T}[2, 3, 32] PackedRotary, {T}[2, 3, 48] SharedRotary)
{
  Y = fusectl.Attention <scale = 0.35, causal = 0> (Q, K, V, M)
  Causal = fusectl.Attention <scale = 0.35, causal = 1> (Q, K, V, M)
  Packed = fusectl.AttentionPacked <num_heads = 4, kv_num_heads = 2, scale = 0.35, causal = 1>
      (P, PM)
  PackedRotary = fusectl.AttentionPackedRotary
      <num_heads = 4, kv_num_heads = 2, scale = 0.35, causal = 1> (P, PM, RC, RS)
  SharedRotary = fusectl.AttentionPackedRotary
      <num_heads = 6, kv_num_heads = 1, scale = 0.35, causal = 0> (P, PM, SC, SS)
}
)"},
      {"rotary", 13, R"(g ({T}[1, 2, 3, 8] X, {T}[1, 1, 3, 8] Cos, {T}[1, 1, 3, 8] Sin, {T}[8] S)
  => ({T}[1, 2, 3, 8] Rope, {T}[1, 2, 3, 8] Interleaved, {T}[1, 2, 3, 8] QKNorm,
      {T}[1, 2, 3, 8] QKNormInterleaved)
{
  Rope = fusectl.RotaryEmbedding (X, Cos, Sin)
  Interleaved = fusectl.InterleavedRotaryEmbedding (X, Cos, Sin)
  QKNorm = fusectl.QKNormRotaryEmbedding <epsilon = 1e-6> (X, S, Cos, Sin)
  QKNormInterleaved = fusectl.QKNormInterleavedRotaryEmbedding <epsilon = 1e-6> (X, S, Cos, Sin)
}
)"},
      {"matmul and gemm epilogues", 13, R"(g ({T}[2, 3, 4] A, {T}[4, 6] W, {T}[6] C,
     {T}[2, 3, 6] Z, {T}[3, 4] GA, {T}[6, 4] GB, {T}[6] GC, {T}[3, 6] GZ)
  => ({T}[2, 3, 6] BiasAddGelu, {T}[2, 3, 6] Bias, {T}[2, 3, 6] AddSilu, {T}[2, 3, 6] BiasClip,
      {T}[2, 3, 6] AddLeaky, {T}[3, 6] GemmRelu, {T}[3, 6] GemmAddClip)
{
  BiasAddGelu = fusectl.FusedMatMul <activation = "Gelu"> (A, W, C, Z)
  Bias = fusectl.FusedMatMul (A, W, C)
  AddSilu = fusectl.FusedMatMul <activation = "Silu"> (A, W, , Z)
  BiasClip = fusectl.FusedMatMul <activation = "Clip", activation_params = [0.0, 0.3]> (A, W, C)
  AddLeaky = fusectl.FusedMatMul <activation = "LeakyRelu", activation_params = [0.2]> (A, W, C, Z)
  GemmRelu = fusectl.FusedGemm <alpha = 0.5, transB = 1, activation = "Relu"> (GA, GB, GC)
  GemmAddClip = fusectl.FusedGemm <transB = 1, activation = "Clip",
                                   activation_params = [-0.5, 0.5]> (GA, GB, GC, GZ)
}
)"},
      {"conv epilogues, opset 13", 13, conv},
      // Below opset 12 the activation parameters reach the body as a float32 tensor attribute.
      {"conv epilogues, opset 11", 11, conv, /*bfloat16=*/false},
      {"elementwise programs with constants", 13, R"G(g ({T}[2, 5] X, {T}[5] Y)
  => ({T}[2, 5] Gate, {T}[2, 5] Clipped)
{
  Gate = fusectl.Elementwise <program = "t0 = Mul(x0, x1); t1 = Add(t0, 0.5); t2 = Sigmoid(t1)">
      (X, Y)
  Clipped = fusectl.Elementwise
      <program = "t0 = Clip(x0, -0.25, 0.75); t1 = LeakyRelu(t0, 0.1); t2 = Sub(1.5, t1)"> (X)
}
)G"},
  };
}

std::string halfCaseText(const HalfCase& c, DType t) {
  std::string text =
      fmt::format("<ir_version: 8, opset_import: [\"\" : {}, \"fusectl\" : 1]>\n", c.opset) +
      c.graph;
  const std::string type(dtypeName(t));
  for (size_t at = text.find("{T}"); at != std::string::npos; at = text.find("{T}", at))
    text.replace(at, 3, type);
  return text;
}

std::vector<DType> halfTypesOf(const HalfCase& c) {
  if (c.bfloat16) return {DType::Float16, DType::BFloat16};
  return {DType::Float16};
}

// One unit in the last place of `t` at |v| (see the tolerance above).
double halfUlp(DType t, float v) {
  int exponent = 0;
  std::frexp(std::max(std::fabs(v), 0x1p-10f), &exponent);  // |v| = m * 2^exponent, m in [1/2, 1)
  return std::ldexp(1.0, exponent - 1 - (t == DType::Float16 ? 10 : 7));
}

// "" when every element of `actual` lies within 2 ulps of `t` of the float32 reference rounded
// to `t`; else the first element that does not.
std::string halfDisagreement(const std::vector<float>& actual, const std::vector<float>& reference,
                             DType t, const std::string& output) {
  if (actual.size() != reference.size())
    return fmt::format("output '{}': {} elements, expected {}", output, actual.size(),
                       reference.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const uint16_t bits = floatToHalfBits(t, reference[i]);
    const float rounded = halfBitsToFloat(t, bits);
    const double ulps = std::fabs(double(actual[i]) - rounded) / halfUlp(t, rounded);
    if (!(ulps <= 2)) {
      return fmt::format("output '{}' element {}: {} vs {} (float32 {}), {:.1f} {} ulps", output,
                         i, actual[i], rounded, reference[i], ulps, dtypeName(t));
    }
  }
  return "";
}

// The float32 references: the float32 model on the half inputs, made float32.
std::vector<NamedTensor> float32Reference(const Model& float32_model,
                                          const std::vector<NamedTensor>& half_inputs) {
  std::vector<NamedTensor> inputs;
  for (const NamedTensor& in : half_inputs) inputs.push_back({in.name, float32Copy(in.tensor)});
  return runModel(float32_model, inputs);
}

std::string halfOutputsDisagreement(const std::vector<HostTensor>& actual,
                                    const std::vector<NamedTensor>& reference, DType t) {
  if (actual.size() != reference.size()) return "different output counts";
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].dtype() != t)
      return fmt::format("output '{}' is {}", reference[i].name, dtypeName(actual[i].dtype()));
    std::string problem = halfDisagreement(floatsOf(actual[i]), floatsOf(reference[i].tensor), t,
                                           reference[i].name);
    if (!problem.empty()) return problem;
  }
  return "";
}

std::vector<HostTensor> tensorsOf(const std::vector<NamedTensor>& named) {
  std::vector<HostTensor> out;
  for (const NamedTensor& n : named) out.push_back(n.tensor);
  return out;
}

const onnx::FunctionProto* findFunction(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& f : m.functions())
    if (f.name() == name) return &f;
  return nullptr;
}

int64_t castTo(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.name() == "to") return a.i();
  return -1;
}

// "" when `half` is `float32` between Casts: the same signature, a Cast to float32 of each input
// first, then float32's nodes unchanged but for the names of the cast copies, then a Cast to `t`
// writing each output.
std::string castWrapProblem(const onnx::FunctionProto& half, const onnx::FunctionProto& float32,
                            DType t) {
  auto same = [](const auto& a, const auto& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  };
  if (!same(half.input(), float32.input()) || !same(half.output(), float32.output()) ||
      !same(half.attribute(), float32.attribute()))
    return "the signature differs from the float32 function's";
  const int ins = half.input_size(), outs = half.output_size(), body = float32.node_size();
  if (half.node_size() != ins + body + outs)
    return fmt::format("{} nodes, expected {} Casts around {}", half.node_size(), ins + outs, body);
  for (int i = 0; i < ins; ++i) {
    const onnx::NodeProto& c = half.node(i);
    if (c.op_type() != "Cast" || c.input(0) != half.input(i) || castTo(c) != 1)
      return fmt::format("node {} is not Cast<to = 1>({})", i, half.input(i));
  }
  for (int k = 0; k < body; ++k) {
    const onnx::NodeProto& h = half.node(ins + k);
    const onnx::NodeProto& f = float32.node(k);
    std::string ha, fa;
    for (const auto& a : h.attribute()) ha += a.SerializeAsString();
    for (const auto& a : f.attribute()) fa += a.SerializeAsString();
    if (h.op_type() != f.op_type() || ha != fa || h.input_size() != f.input_size())
      return fmt::format("body node {} ({}) differs from the float32 body's ({})", k,
                         h.op_type(), f.op_type());
  }
  for (int j = 0; j < outs; ++j) {
    const onnx::NodeProto& c = half.node(ins + body + j);
    if (c.op_type() != "Cast" || c.output(0) != half.output(j) ||
        castTo(c) != static_cast<int64_t>(t))
      return fmt::format("the last nodes do not Cast {} to {}", half.output(j), dtypeName(t));
  }
  return "";
}

// The half model's export, attached once; `bytes` its serialized form.
struct HalfExport {
  std::unique_ptr<Model> model;
  std::string bytes;
};

HalfExport exportModel(const std::string& text, const std::string& name) {
  HalfExport e{parseModelText(text, name), ""};
  attachFusectlFunctions(*e.model);
  e.bytes = modelToBinary(*e.model);
  return e;
}

}  // namespace

TEST_CASE("fusectl functions: float16 and bfloat16 spellings are read as their float32 twin",
          "[functions]") {
  const std::string ew = elementwiseSpelling("t0 = Relu(x0)");
  CHECK(fusedOpBaseName("LayerNorm_float16") == "LayerNorm");
  CHECK(fusedOpBaseName("Gelu_bfloat16") == "Gelu");
  CHECK(fusedOpBaseName("FusedConv_Add_Relu_float16") == "FusedConv_Add_Relu");
  CHECK(fusedOpBaseName("FusedConv_float16") == "FusedConv");
  CHECK(fusedOpBaseName(ew + "_bfloat16") == "Elementwise");
  for (const char* other : {"LayerNorm_float32", "LayerNorm_double", "Softmax_float16",
                            "LayerNorm_float16_float16", "float16", "_float16"}) {
    INFO(other);
    CHECK(fusedOpBaseName(other) == other);
    CHECK_FALSE(fusedSpellingDType(other));
  }
  CHECK(fusedSpellingDType("LayerNorm_float16") == DType::Float16);
  CHECK(fusedSpellingDType(ew + "_bfloat16") == DType::BFloat16);
  CHECK(fusedSpellingDType("FusedGemm_NoBias_Add_HardSwish_bfloat16") == DType::BFloat16);
  CHECK_FALSE(fusedSpellingDType("LayerNorm"));
  CHECK_FALSE(fusedSpellingDType(ew));

  CHECK(fusedDTypeSpelling("LayerNorm", DType::Float) == "LayerNorm");
  CHECK(fusedDTypeSpelling("LayerNorm", DType::Double) == "LayerNorm");
  CHECK(fusedDTypeSpelling("FusedConv_Add_Relu", DType::Float16) == "FusedConv_Add_Relu_float16");
  CHECK(fusedDTypeSpelling(ew, DType::BFloat16) == ew + "_bfloat16");

  // The epilogue spellings decode, and place their operands, as without the suffix.
  for (const char* name : {"FusedConv", "FusedConv_NoBias_Add_LeakyRelu", "FusedGemm_Add",
                           "FusedMatMul_NoBias_Gelu"}) {
    for (DType t : {DType::Float16, DType::BFloat16}) {
      const std::string spelled = fusedDTypeSpelling(name, t);
      INFO(spelled);
      std::optional<FusedSpelling> a = decodeFusedSpelling(name), b = decodeFusedSpelling(spelled);
      REQUIRE(b);
      CHECK(std::tie(a->op, a->bias, a->residual, a->activation, a->plain) ==
            std::tie(b->op, b->bias, b->residual, b->activation, b->plain));
      std::optional<FusedOperandSlots> sa = fusedOperandSlots(name);
      std::optional<FusedOperandSlots> sb = fusedOperandSlots(spelled);
      REQUIRE(sb);
      CHECK(std::tie(sa->bias, sa->residual, sa->exact_inputs) ==
            std::tie(sb->bias, sb->residual, sb->exact_inputs));
    }
  }
  CHECK_FALSE(decodeFusedSpelling("FusedConv_Relu_float16_float16"));
  CHECK_FALSE(decodeFusedSpelling("FusedConv_float16_Relu"));
}

TEST_CASE("fusectl functions: the schema check holds a dtype suffix to the node's type",
          "[functions]") {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g ({T}[2, 8] X, {T}[8] S, {T}[8] B) => ({T}[2, 8] Y)
{
  Y = fusectl.{OP} <axis = -1, epsilon = 1e-5> (X, S, B)
}
)";
  auto model = [&](const char* op, const char* t) {
    std::string s = text;
    s.replace(s.find("{OP}"), 4, op);
    for (size_t at = s.find("{T}"); at != std::string::npos; at = s.find("{T}", at))
      s.replace(at, 3, t);
    return s;
  };
  CHECK_NOTHROW(parseModelText(model("LayerNorm_float16", "float16"), "ok"));
  CHECK_NOTHROW(parseModelText(model("LayerNorm", "float16"), "not yet exported"));
  CHECK_THROWS_WITH(parseModelText(model("LayerNorm_float16", "float"), "float32"),
                    Catch::Contains("(LayerNorm_float16): the spelling is for float16 but "
                                    "output 0 'Y' is float"));
  CHECK_THROWS_WITH(parseModelText(model("LayerNorm_bfloat16", "float16"), "float16"),
                    Catch::Contains("the spelling is for bfloat16 but output 0 'Y' is float16"));

  // Shape inference reads it as LayerNorm: N, which nothing declares, gets X's type.
  auto untyped = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float16[2, 8] X, float16[8] S, float16[8] B) => (float16[2, 8] Y)
{
  N = fusectl.LayerNorm_float16 <axis = -1, epsilon = 1e-5> (X, S, B)
  Y = Identity (N)
}
)",
                                "untyped");
  const Value* n = untyped->graph->firstNode()->output(0);
  CHECK(n->dtype() == DType::Float16);
  CHECK(n->type.shape == Shape::ofStatic({2, 8}));
}

TEST_CASE("fusectl functions: float16 and bfloat16 nodes export as Cast-wrapped float32 bodies",
          "[passes][functions]") {
  for (const HalfCase& c : halfCases()) {
    const std::string float32_text = halfCaseText(c, DType::Float);
    auto float32_model = parseModelText(float32_text, c.name);
    const HalfExport float32_export = exportModel(float32_text, c.name);
    const onnx::ModelProto float32_proto = toProto(*float32_export.model);
    for (DType t : halfTypesOf(c)) {
      const std::string text = halfCaseText(c, t);
      const std::string name = fmt::format("{} ({})", c.name, dtypeName(t));
      INFO(name << "\n" << text);
      const std::string suffix = "_" + std::string(dtypeName(t));
      HalfExport exported = exportModel(text, name);
      attachFusectlFunctions(*exported.model);
      CHECK(modelToBinary(*exported.model) == exported.bytes);            // idempotent
      CHECK(exportModel(text, name).bytes == exported.bytes);             // deterministic

      // Each node is spelled as its float32 twin plus the suffix, and reads as that twin.
      onnx::ModelProto proto = toProto(*exported.model);
      REQUIRE(proto.graph().node_size() == float32_proto.graph().node_size());
      std::set<std::string> used;
      for (int i = 0; i < proto.graph().node_size(); ++i) {
        const std::string& op = proto.graph().node(i).op_type();
        const std::string& float32_op = float32_proto.graph().node(i).op_type();
        CHECK(op == float32_op + suffix);
        CHECK(fusedSpellingDType(op) == t);
        CHECK(fusedOpBaseName(op) == fusedOpBaseName(float32_op));
        used.insert(op);
      }
      // One function per spelling, each the float32 function between Casts.
      std::set<std::string> defined;
      for (const auto& f : proto.functions()) {
        INFO("function " << f.name());
        defined.insert(f.name());
        REQUIRE(f.name().size() > suffix.size());
        const onnx::FunctionProto* twin =
            findFunction(float32_proto, f.name().substr(0, f.name().size() - suffix.size()));
        REQUIRE(twin);
        CHECK(castWrapProblem(f, *twin, t) == "");
      }
      CHECK(used == defined);
      const std::string problem = checkerProblem(proto);
      INFO("checker: " << problem);
      CHECK(problem.empty());

      auto model = parseModelText(text, name);
      const std::vector<NamedTensor> inputs = makeRandomInputs(*model->graph, 7);
      const std::vector<NamedTensor> reference = float32Reference(*float32_model, inputs);

      // The bodies on our executor: standard ops, computed in float32 between the Casts.
      auto inlined = fromProto(inlineFunctions(proto), name + " (inlined)");
      for (Node* n : inlined->graph->nodes()) CHECK(n->domain() != "fusectl");
      std::string diff =
          halfOutputsDisagreement(tensorsOf(runModel(*inlined, inputs)), reference, t);
      INFO("function bodies on our executor: " << diff);
      CHECK(diff.empty());

      // The reloaded export on our executor: the kernels answer to the suffixed spellings.
      auto reloaded = fromProto(proto, name + " (exported)");
      diff = halfOutputsDisagreement(tensorsOf(runModel(*reloaded, inputs)), reference, t);
      INFO("exported model on our executor: " << diff);
      CHECK(diff.empty());
    }
  }
}

TEST_CASE("fusectl functions: float16 beside float32, and bfloat16 below opset 13",
          "[passes][functions]") {
  // The float32 node keeps its name and its function's bytes; the float16 one gets its own.
  const std::string layer_norm = R"(<ir_version: 8, opset_import: ["" : 13, "fusectl" : 1]>
g (float[2, 8] X, float[8] S, float[8] B) => (float[2, 8] Y{OUT})
{
  Y = fusectl.LayerNorm <axis = -1, epsilon = 1e-5> (X, S, B)
{HALF}}
)";
  auto text = [&](bool with_half) {
    std::string s = layer_norm;
    s.replace(s.find("{OUT}"), 5, with_half ? ", float16[2, 8] H" : "");
    s.replace(s.find("{HALF}"), 6,
              with_half ? "  X16 = Cast <to = 10> (X)\n  S16 = Cast <to = 10> (S)\n"
                          "  B16 = Cast <to = 10> (B)\n"
                          "  H = fusectl.LayerNorm <axis = -1, epsilon = 1e-5> (X16, S16, B16)\n"
                        : "");
    return s;
  };
  const HalfExport alone = exportModel(text(false), "float32");
  const HalfExport mixed = exportModel(text(true), "mixed");
  std::vector<std::string> ops;
  for (Node* n : mixed.model->graph->nodes())
    if (n->domain() == "fusectl") ops.push_back(n->opType());
  CHECK(ops == std::vector<std::string>{"LayerNorm", "LayerNorm_float16"});
  REQUIRE(alone.model->functions.size() == 1);
  REQUIRE(mixed.model->functions.size() == 2);
  CHECK(mixed.model->functions[0] == alone.model->functions[0]);
  CHECK(functionIdOf(mixed.model->functions[1])->second == "LayerNorm_float16");
  CHECK(checkerProblem(toProto(*mixed.model)).empty());

  // A function the model already defines under the spelled name is kept, as for float32.
  auto reused = parseModelBinary(mixed.bytes, "reused", ".");
  attachFusectlFunctions(*reused);
  CHECK(modelToBinary(*reused) == mixed.bytes);

  auto old_opset = parseModelText(R"(<ir_version: 8, opset_import: ["" : 12, "fusectl" : 1]>
g (bfloat16[2, 8] X) => (bfloat16[2, 8] Y)
{
  Y = fusectl.Gelu (X)
}
)",
                                  "opset 12");
  CHECK_THROWS_WITH(attachFusectlFunctions(*old_opset),
                    Catch::Contains("Casts its bfloat16 values, which needs opset 13"));
}

TEST_CASE("fusectl functions: float16 and bfloat16 nodes run in onnxruntime",
          "[.][ort][functions]") {
  const std::optional<fusectl::test::OrtSetup> ort = ortOrWarn();
  if (!ort) return;
  const fs::path work = fusectl::testing::processTempPath("fusectl_ort_half_functions");
  fs::remove_all(work);
  int index = 0;
  for (const HalfCase& c : halfCases()) {
    auto float32_model = parseModelText(halfCaseText(c, DType::Float), c.name);
    for (DType t : halfTypesOf(c)) {
      const std::string text = halfCaseText(c, t);
      const std::string name = fmt::format("{} ({})", c.name, dtypeName(t));
      INFO(name << "\n" << text);
      const fs::path dir = work / std::to_string(index++);
      fs::create_directories(dir);
      auto model = parseModelText(text, name);
      const std::vector<NamedTensor> inputs = makeRandomInputs(*model->graph, 7);
      const std::vector<NamedTensor> reference = float32Reference(*float32_model, inputs);
      std::vector<std::string> names;
      for (const NamedTensor& r : reference) names.push_back(r.name);

      const onnx::ModelProto proto =
          withFloat32Interface(toProto(*exportModel(text, name).model), DType::BFloat16);
      const std::string model_path = (dir / "model.onnx").string();
      std::ofstream(model_path, std::ios::binary) << proto.SerializeAsString();
      std::vector<HostTensor> got;
      const std::string failed = runOrt(*ort, dir, model_path, inputs, names, got);
      INFO("onnxruntime: " << failed);
      REQUIRE(failed.empty());
      if (t == DType::BFloat16) {
        // Back to the half type the float32 outputs hold exactly.
        for (HostTensor& g : got) {
          HostTensor half(t, g.dims());
          for (int64_t i = 0; i < g.numel(); ++i)
            half.mutableData<uint16_t>()[i] = floatToBFloat16(g.data<float>()[i]);
          g = half;
        }
      }
      const std::string diff = halfOutputsDisagreement(got, reference, t);
      INFO("onnxruntime on the export: " << diff);
      CHECK(diff.empty());
    }
  }
  fs::remove_all(work);
}
