// The fused-op table (fused_ops.def / fused_ops.h): the spelling codec, the operand slots, the
// activations' ONNX defaults, the op classes it feeds, the function bodies' exact layout,
// docs/ops.md and `fusectl ops`.
#include <onnx/onnx_pb.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include <sys/wait.h>
#include <unistd.h>

#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/onnx_function.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/op_classes.h"
#include "fusectl/kernels/kernel.h"
#include "shell_util.h"
#include "test_files.h"

using namespace fusectl;
namespace fs = std::filesystem;

TEST_CASE("fused ops: every spelling decodes to what it encodes", "[functions][fused-ops]") {
  size_t count = 0;
  std::set<std::string> names;
  for (const FusedOpInfo& op : allFusedOps()) {
    if (!op.takesEpilogue()) continue;
    forEachFusedSpelling(op.name, [&](const std::string& name) {
      ++count;
      names.insert(name);
      std::optional<FusedSpelling> s = decodeFusedSpelling(name);
      REQUIRE(s);
      CHECK(s->op == &op);
      if (name == op.name) {
        CHECK(s->plain);
        return;
      }
      CHECK_FALSE(s->plain);
      CHECK(fusedSpellingName(op.name, s->bias, s->residual, s->activation) == name);
    });
  }
  // FusedConv, FusedGemm and FusedMatMul: (bias, residual) x (no activation + 10 activations).
  CHECK(count == 3 * 4 * 11);
  CHECK(names.size() == count);
  CHECK(names.count("FusedGemm_NoBias_Add_HardSwish") == 1);

  std::optional<FusedSpelling> s = decodeFusedSpelling("FusedConv_NoBias_Add_LeakyRelu");
  REQUIRE(s);
  CHECK(s->op->name == "FusedConv");
  CHECK_FALSE(s->bias);
  CHECK(s->residual);
  CHECK(s->activation == Activation::LeakyRelu);
  for (const char* bad : {"FusedConv_Add_NoBias", "FusedConv_Relu_Add", "FusedConv_",
                          "FusedConv_Foo",
                          "FusedConv_Add_", "FusedConvX", "Gelu", "Conv", "", "FusedGemm_None"}) {
    INFO(bad);
    CHECK_FALSE(decodeFusedSpelling(bad));
  }
}

TEST_CASE("fused ops: where a spelling takes its bias and residual", "[functions][fused-ops]") {
  struct Expected {
    const char* op_type;
    std::optional<size_t> bias, residual;
    size_t exact_inputs;
  };
  const Expected cases[] = {
      {"FusedConv", 2, 3, 0},  // the plain name: positional, either one omitted
      {"FusedConv_NoBias_Add", std::nullopt, 2, 3},
      {"FusedGemm_Add_Relu", 2, 3, 4},
      {"FusedGemm_NoBias_Tanh", std::nullopt, std::nullopt, 2},
      {"FusedGemm_Sigmoid", 2, std::nullopt, 3},
  };
  for (const Expected& e : cases) {
    INFO(e.op_type);
    std::optional<FusedOperandSlots> slots = fusedOperandSlots(e.op_type);
    REQUIRE(slots);
    CHECK(slots->bias == e.bias);
    CHECK(slots->residual == e.residual);
    CHECK(slots->exact_inputs == e.exact_inputs);
  }
  CHECK_FALSE(fusedOperandSlots("Gelu"));
}

TEST_CASE("fused ops: activations carry ONNX's names and defaults", "[functions][fused-ops]") {
  CHECK(parseActivation("") == Activation::None);
  CHECK(parseActivation("None") == Activation::None);
  CHECK(parseActivation("Identity") == Activation::None);
  CHECK(parseActivation("HardSigmoid") == Activation::HardSigmoid);
  CHECK_FALSE(parseActivation("relu"));
  CHECK_FALSE(parseActivation("Softmax"));
  for (const ActivationInfo& a : allActivations()) {
    CHECK(parseActivation(a.name) == a.activation);
    CHECK(&activationInfo(a.activation) == &a);
  }
  // The ONNX operator definitions: Clip's min/max absent = no bound, LeakyRelu alpha 0.01,
  // HardSigmoid alpha 0.2, beta 0.5.
  const ActivationInfo& clip = activationInfo(Activation::Clip);
  CHECK(clip.num_params == 2);
  CHECK(std::isinf(clip.defaults[0]));
  CHECK(clip.defaults[0] < 0);
  CHECK(std::isinf(clip.defaults[1]));
  CHECK(clip.defaults[1] > 0);
  CHECK(activationInfo(Activation::LeakyRelu).num_params == 1);
  CHECK(activationInfo(Activation::LeakyRelu).defaults[0] == 0.01f);
  CHECK(activationInfo(Activation::HardSigmoid).defaults == std::array<float, 2>{0.2f, 0.5f});
  CHECK(activationInfo(Activation::Relu).num_params == 0);
  CHECK_FALSE(activationInfo(Activation::Silu).onnx_op);
}

// A composite op is usable only with all three: the CPU kernel runs it, the function body lets
// other runtimes run an exported model, and the outputs say what a node may leave off.
TEST_CASE("fused ops: every composite op has a kernel, a function body and outputs",
          "[functions][fused-ops]") {
  for (const FusedOpInfo& op : allFusedOps()) {
    INFO(op.name);
    REQUIRE_FALSE(op.outputs.empty());
    if (!op.isComposite()) {
      CHECK(op.outputs.size() == 1);
      continue;
    }
    CHECK(op.compute.empty());
    CHECK(op.epilogue_activations.empty());
    CHECK(hasCompositeFunctionBody(op.name));
    CHECK(fusectl::kernels::KernelRegistry::global().find(kFusectlDomain, op.name, 1) !=
          nullptr);
    // Only trailing outputs may be left off by a node.
    bool optional_seen = false;
    for (const FusedOpOutput& out : op.outputs) {
      CHECK((out.optional || !optional_seen));
      optional_seen |= out.optional;
    }
    for (const FusedOpAttribute& a : op.attributes) CHECK_FALSE(a.by_reference);
  }
}

TEST_CASE("fused ops: the op classes come from the table", "[functions][fused-ops][pattern]") {
  for (const FusedOpInfo& op : allFusedOps()) {
    INFO(op.name);
    const OpClassInfo* info = findOpClass("fusectl", op.name);
    REQUIRE(info);
    CHECK(info->op_class == op.op_class);
    CHECK(info->accepts_epilogue == op.takesEpilogue());
    CHECK(info->epilogue_activation == (op.activation != Activation::None));
  }
  // Every activation a standard op computes may become an epilogue; Silu is a Mul pattern.
  for (const ActivationInfo& a : allActivations()) {
    if (a.activation == Activation::None) continue;
    const OpClassInfo* info = findOpClass("", a.name);
    INFO(a.name);
    CHECK((info && info->epilogue_activation) == a.onnx_op);
  }
  CHECK_FALSE(findOpClass("", "Elu")->epilogue_activation);
}

namespace {

// One function of an exported model, as "out = Op(in, ...) <attr>" lines.
std::vector<std::string> functionLines(const Model& m, const std::string& name) {
  std::vector<std::string> lines;
  for (const std::string& bytes : m.functions) {
    onnx::FunctionProto f;
    REQUIRE(f.ParseFromString(bytes));
    if (f.name() != name) continue;
    for (const onnx::NodeProto& n : f.node()) {
      std::vector<std::string> attrs;
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (!a.ref_attr_name().empty()) {
          attrs.push_back(a.name() + "=@" + a.ref_attr_name());
        } else if (a.has_t()) {
          CHECK_FALSE(a.t().has_raw_data());  // typed data, as hand-written functions have it
          attrs.push_back(a.name() + "=" +
                          (a.t().float_data_size() ? fmt::format("{}", a.t().float_data(0))
                                                   : fmt::format("{}", a.t().int64_data(0))));
        } else {
          attrs.push_back(a.name() + "=" + fmt::format("{}", a.f()));
        }
      }
      lines.push_back(fmt::format("{} = {}({}) <{}>", n.output(0), n.op_type(),
                                  fmt::join(n.input(), ", "), fmt::join(attrs, ", ")));
    }
  }
  return lines;
}

}  // namespace

// Every optimized file holds these bytes, so their node order and names are pinned here
// (bench/check_identical_outputs.sh compares whole files).
TEST_CASE("fused ops: function bodies keep their node order and names", "[functions][fused-ops]") {
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 10]>
g (float[1, 2, 5, 5] X, float[3, 2, 3, 3] W, float[3] B)
  => (float[1, 3, 3, 3] Y, float[1, 3, 3, 3] S)
{
  Y = fusectl.FusedConv <activation = "Clip", activation_params = [0.0, 6.0]> (X, W, B)
  S = fusectl.FusedConv <activation = "HardSigmoid"> (X, W, B)
}
)",
                          "bodies");
  attachFusectlFunctions(*m);
  CHECK(functionLines(*m, "FusedConv_Clip") ==
        std::vector<std::string>{
            "acc = Conv(X, W, B) <auto_pad=@auto_pad, dilations=@dilations, group=@group, "
            "kernel_shape=@kernel_shape, pads=@pads, strides=@strides>",
            "t0 = Constant() <value=@activation_params_tensor>",
            "t1 = Constant() <value=1>", "t2 = Gather(t0, t1) <>",
            "t3 = Constant() <value=0>", "t4 = Gather(t0, t3) <>",
            "t5 = Max(acc, t4) <>", "Y = Min(t5, t2) <>"});
  CHECK(functionLines(*m, "FusedConv_HardSigmoid") ==
        std::vector<std::string>{
            "acc = Conv(X, W, B) <auto_pad=@auto_pad, dilations=@dilations, group=@group, "
            "kernel_shape=@kernel_shape, pads=@pads, strides=@strides>",
            "t0 = Constant() <value=@activation_params_tensor>", "t1 = Constant() <value=0>",
            "t2 = Gather(t0, t1) <>", "t3 = Mul(acc, t2) <>", "t4 = Constant() <value=1>",
            "t5 = Gather(t0, t4) <>", "t6 = Add(t3, t5) <>", "t7 = Constant() <value=1>",
            "t8 = Constant() <value=0>", "t9 = Max(t6, t8) <>", "Y = Min(t9, t7) <>"});
}

// ExpandDepthwiseConv is spelled per activation pair; each side reads its own parameters.
TEST_CASE("fused ops: an ExpandDepthwiseConv body per activation pair", "[functions][fused-ops]") {
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 2, 6, 6] X, float[3, 2, 1, 1] W, float[3] B, float[3, 1, 3, 3] DW, float[3] DB)
  => (float[1, 3, 3, 3] Y, float[1, 3, 6, 6] Z)
{
  Y = fusectl.ExpandDepthwiseConv <group = 3, kernel_shape = [3, 3], pads = [1, 1, 1, 1],
      strides = [2, 2], expand_activation = "Clip", expand_activation_params = [0.0, 6.0],
      activation = "LeakyRelu"> (X, W, B, DW, DB)
  Z = fusectl.ExpandDepthwiseConv <group = 3, pads = [1, 1, 1, 1], expand_activation = "None",
      activation = "None"> (X, W, B, DW, DB)
}
)",
                          "pairs");
  attachFusectlFunctions(*m);
  const Node& y = *m->graph->findValue("Y")->producer();
  CHECK(y.opType() == "ExpandDepthwiseConv_Clip_LeakyRelu");
  CHECK(m->graph->findValue("Z")->producer()->opType() == "ExpandDepthwiseConv_None_None");
  CHECK(fusedOpBaseName("ExpandDepthwiseConv_Clip_LeakyRelu") == "ExpandDepthwiseConv");
  CHECK(fusedOpBaseName("ExpandDepthwiseConv_Clip_LeakyRelu_float16") == "ExpandDepthwiseConv");
  CHECK(fusedOpBaseName("ExpandDepthwiseConv_Clip") == "ExpandDepthwiseConv_Clip");
  CHECK(fusedOpBaseName("ExpandDepthwiseConv_Relu_relu") == "ExpandDepthwiseConv_Relu_relu");
  // LeakyRelu's default slope is made explicit, as on an epilogue op.
  CHECK(y.attrFloats("activation_params") == std::vector<float>{0.01f});
  CHECK(functionLines(*m, "ExpandDepthwiseConv_Clip_LeakyRelu") ==
        std::vector<std::string>{
            "expanded = Conv(X, W, B) <>",
            "t0 = Constant() <value_floats=@expand_activation_params>",
            "t1 = Constant() <value=1>", "t2 = Gather(t0, t1) <>",
            "t3 = Constant() <value=0>", "t4 = Gather(t0, t3) <>",
            "E = Clip(expanded, t4, t2) <>",
            "acc = Conv(E, DW, DB) <group=@group, kernel_shape=@kernel_shape, pads=@pads, "
            "strides=@strides>",
            "t5 = Constant() <value_floats=@activation_params>", "t6 = Constant() <value=0>",
            "t7 = Gather(t5, t6) <>", "Y = PRelu(acc, t7) <>"});
  CHECK(functionLines(*m, "ExpandDepthwiseConv_None_None") ==
        std::vector<std::string>{
            "E = Conv(X, W, B) <>",
            "Y = Conv(E, DW, DB) <group=@group, kernel_shape=@kernel_shape, pads=@pads, "
            "strides=@strides>"});
}

// A GroupNorm with an activation is spelled by it; one without keeps its name and its function.
TEST_CASE("fused ops: GroupNorm's activation spellings", "[functions][fused-ops]") {
  CHECK(groupNormSpelling(Activation::None) == "GroupNorm");
  CHECK(groupNormSpelling(Activation::Silu) == "GroupNorm_Silu");
  CHECK(decodeGroupNormSpelling("GroupNorm_Silu") == Activation::Silu);
  CHECK_FALSE(decodeGroupNormSpelling("GroupNorm"));
  CHECK_FALSE(decodeGroupNormSpelling("GroupNorm_None"));
  CHECK_FALSE(decodeGroupNormSpelling("GroupNorm_silu"));
  CHECK(fusedOpBaseName("GroupNorm_Silu") == "GroupNorm");
  CHECK(fusedOpBaseName("GroupNorm_HardSwish_bfloat16") == "GroupNorm");
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1, 4, 3] X, float[4] S, float[4] B) => (float[1, 4, 3] Y, float[1, 4, 3] Z)
{
  Y = fusectl.GroupNorm <num_groups = 2, epsilon = 0.001, activation = "Clip"> (X, S, B)
  Z = fusectl.GroupNorm <num_groups = 2, epsilon = 0.001> (X, S, B)
}
)",
                          "norms");
  attachFusectlFunctions(*m);
  CHECK(m->graph->findValue("Y")->producer()->opType() == "GroupNorm_Clip");
  CHECK(m->graph->findValue("Z")->producer()->opType() == "GroupNorm");
  // Clip's absent bounds become explicit, and the activated body ends in it.
  CHECK(m->graph->findValue("Y")->producer()->attrFloats("activation_params").size() == 2);
  const std::vector<std::string> clipped = functionLines(*m, "GroupNorm_Clip");
  const std::vector<std::string> plain = functionLines(*m, "GroupNorm");
  REQUIRE(clipped.size() > plain.size());
  CHECK(clipped.back() == "Y = Clip(normed, t29, t27) <>");
  CHECK(plain.back().rfind("Y = Add(", 0) == 0);
}

TEST_CASE("fused ops: functionIdOf reads a function's domain and name", "[functions][fused-ops]") {
  FunctionDef f;
  f.name = "Twice";
  f.domain = "example";
  f.body = std::make_unique<Graph>();
  Value* x = f.body->addInput("X", {});
  Graph::NodeSpec spec;
  spec.op_type = "Add";
  spec.inputs = {x, x};
  spec.output_names = {"Y"};
  f.body->addOutput(f.body->createNode(std::move(spec))->output(0));
  auto id = functionIdOf(functionToBinary(f));
  REQUIRE(id);
  CHECK(id->first == "example");
  CHECK(id->second == "Twice");
  CHECK_FALSE(functionIdOf("\xff\xff not a proto"));
}

TEST_CASE("docs/ops.md is generated from the fused-op table", "[functions][fused-ops]") {
  std::string doc = fusectl::testing::slurp(fs::path(FUSECTL_SOURCE_DIR) / "docs" / "ops.md");
  const std::string begin = "<!-- BEGIN fused_ops.def: generated by `fusectl ops --markdown` -->\n";
  const std::string end = "<!-- END fused_ops.def -->";
  size_t b = doc.find(begin), e = doc.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  INFO("regenerate the section with: fusectl ops --markdown");
  CHECK(doc.substr(b + begin.size(), e - b - begin.size()) == fusedOpsMarkdown());
  for (const FusedOpInfo& op : allFusedOps()) CHECK(doc.find("## " + std::string(op.name)) < e);
}

namespace {

struct Run {
  int code = -1;
  std::string out;
};

Run runFusectl(const std::string& args) {
  const fs::path out = fs::temp_directory_path() / fmt::format("fusectl-ops-{}.out", ::getpid());
  const std::string cmd = fmt::format("{} {} >{} 2>&1", fusectl::test::shellQuote(FUSECTL_BINARY),
                                      args, fusectl::test::shellQuote(out.string()));
  const int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = fusectl::testing::slurp(out);
  fs::remove(out);
  return r;
}

}  // namespace

TEST_CASE("cli: fusectl ops", "[cli][fused-ops]") {
  Run list = runFusectl("ops");
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::Contains("fusectl::FusedConv(X, W, [B], [Z])  "
                                       "Y = activation(Conv(X, W, B) + Z)\n"
                                       "  attributes:  auto_pad, dilations, group, kernel_shape, "
                                       "pads, strides, activation, activation_params\n"
                                       "  activations: Relu, Clip, LeakyRelu, Sigmoid, "
                                       "HardSigmoid, HardSwish, Silu, Gelu, Tanh, GeluTanh\n"));
  CHECK_THAT(list.out, Catch::Contains("fusectl::Gelu(X)  Y = 0.5 * X * (1 + erf(X / sqrt(2)))\n"));

  Run json = runFusectl("ops --json");
  REQUIRE(json.code == 0);
  nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j["ops"].size() == allFusedOps().size());
  CHECK(j["ops"][1]["name"] == "FusedGemm");
  CHECK(j["ops"][1]["op_class"] == "compute");
  CHECK(j["ops"][1]["inputs"][2] ==
        nlohmann::json({{"name", "C"}, {"type", "T"}, {"optional", true}}));
  CHECK(j["ops"][1]["attributes"][0] ==
        nlohmann::json({{"name", "alpha"}, {"type", "float"}, {"passed_to", "Gemm"}}));
  CHECK(j["ops"][1]["attributes"].back()["passed_to"] == "");
  CHECK(j["ops"][2]["name"] == "FusedMatMul");
  CHECK(j["ops"][3]["activations"].empty());  // Gelu, an activation op
  CHECK(j["activations"][1]["name"] == "Clip");
  CHECK(j["activations"][1]["params"] == 2);

  Run md = runFusectl("ops --markdown");
  CHECK(md.code == 0);
  CHECK(md.out == fusedOpsMarkdown());
  Run both = runFusectl("ops --json --markdown");
  CHECK(both.code == 2);
  CHECK_THAT(both.out, Catch::Contains("--json and --markdown exclude each other"));
}
