// Model summary and the three dump renderers (text, JSON, DOT) on the fixture models.
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dump_schema_check.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/render.h"
#include "fusectl/graph/summary.h"

using namespace fusectl;

namespace {

std::unique_ptr<Model> loadFixture(const std::string& name) {
  return loadModel(std::string(FUSECTL_SOURCE_DIR) + "/testdata/fixtures/" + name);
}

std::string render(const Model& m, DumpFormat f, bool summary_only = false) {
  std::ostringstream out;
  RenderOptions o;
  o.summary_only = summary_only;
  renderModel(m, f, out, o);
  return out.str();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool haveDot() { return std::system("command -v dot >/dev/null 2>&1") == 0; }

// Runs `dot -Tsvg` on the text; returns dot's exit status.
int runDot(const std::string& dot_text) {
  char path[] = "/tmp/fusectl_render_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << dot_text;
  int rc = std::system(("dot -Tsvg '" + std::string(path) + "' -o /dev/null").c_str());
  std::remove(path);
  return rc;
}

}  // namespace

TEST_CASE("summarizeModel counts nodes, initializers and parameters", "[render]") {
  auto m = loadFixture("conv_bn_relu.onnxtxt");
  ModelSummary s = summarizeModel(*m);
  CHECK(s.ir_version == 8);
  CHECK(s.producer_name == "fusectl-testdata");
  REQUIRE(s.opset_imports.size() == 1);
  CHECK(s.opset_imports[0].version == 13);
  CHECK(s.node_count == 3);
  CHECK(s.total_node_count == 3);
  CHECK(s.subgraph_count == 0);
  CHECK(s.initializer_count == 6);
  CHECK(s.parameter_count == 36 + 2 + 4 * 2);
  CHECK(s.initializer_bytes == 4 * (36 + 2 + 4 * 2));
  REQUIRE(s.inputs.size() == 1);
  CHECK(s.inputs[0].name == "X");
  CHECK(s.inputs[0].type.str() == "float[1,2,4,4]");
  REQUIRE(s.op_histogram.size() == 3);
  CHECK(s.op_histogram[0].op_type == "BatchNormalization");
  CHECK(s.op_histogram[1].op_type == "Conv");
  CHECK(s.op_histogram[2].op_type == "Relu");
}

TEST_CASE("summarizeModel includes subgraphs", "[render]") {
  auto m = loadFixture("if_subgraph.onnxtxt");
  ModelSummary s = summarizeModel(*m);
  CHECK(s.node_count == 2);
  CHECK(s.subgraph_count == 2);
  CHECK(s.total_node_count == 5);
  size_t relu = 0;
  for (const OpCount& c : s.op_histogram) {
    if (c.op_type == "Relu") relu = c.count;
  }
  CHECK(relu == 1);
}

TEST_CASE("formatAttributeValue and formatByteSize", "[render]") {
  CHECK(formatAttributeValue(Attribute::ofFloat("f", 0.1f)) == "0.1");
  CHECK(formatAttributeValue(Attribute::ofInt("i", -7)) == "-7");
  CHECK(formatAttributeValue(Attribute::ofString("s", "a\"b")) == "\"a\\\"b\"");
  CHECK(formatAttributeValue(Attribute::ofInts("p", {1, 1, 0, 0})) == "[1,1,0,0]");
  CHECK(formatAttributeValue(Attribute::ofInts("p", {1, 2, 3, 4, 5}), 3) == "[1,2,3,... (5 total)]");
  CHECK(formatAttributeValue(Attribute::ofTensor(
            "t", Tensor::fromValues<int64_t>(DType::Int64, {2}, {-1, 64}))) == "int64[2]{-1,64}");
  CHECK(formatByteSize(512) == "512 B");
  CHECK(formatByteSize(1536) == "1.5 KiB");
  CHECK(formatByteSize(3u << 20) == "3.0 MiB");
  CHECK(qualifiedOpType("", "Conv") == "Conv");
  CHECK(qualifiedOpType("com.example", "MyOp") == "com.example.MyOp");
}

TEST_CASE("text dump lists nodes with attributes, names and types", "[render]") {
  auto m = loadFixture("conv_bn_relu.onnxtxt");
  std::string text = render(*m, DumpFormat::Text);
  CHECK(contains(text, "ir_version: 8\n"));
  CHECK(contains(text, "opsets: ai.onnx 13\n"));
  CHECK(contains(text, "initializers: 6 (184 B, 184 bytes)\n"));
  CHECK(contains(text, "parameters: 46\n"));
  CHECK(contains(text, "[0] Conv <kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]>\n"));
  CHECK(contains(text, "in:  X float[1,2,4,4], W float[2,2,3,3] (init), B float[2] (init)\n"));
  CHECK(contains(text, "out: C float[1,2,4,4]\n"));
  CHECK(contains(text, "[1] BatchNormalization <epsilon=0.001>\n"));
  CHECK(contains(text, "[2] Relu\n"));
  CHECK(text == render(*m, DumpFormat::Text));  // deterministic

  std::string summary = render(*m, DumpFormat::Text, true);
  CHECK(contains(summary, "parameters: 46\n"));
  CHECK_FALSE(contains(summary, "topological"));
  CHECK_FALSE(contains(summary, "[0] Conv"));
}

TEST_CASE("text dump shows symbolic dims, domains, subgraphs and every attribute kind",
          "[render]") {
  std::string sym = render(*loadFixture("symbolic_dims.onnxtxt"), DumpFormat::Text);
  CHECK(contains(sym, "X  float[batch,seq,64]\n"));
  CHECK(contains(sym, "Y  float[batch,seq,16]\n"));

  std::string custom = render(*loadFixture("custom_domain.onnxtxt"), DumpFormat::Text);
  CHECK(contains(custom, "opsets: ai.onnx 13, com.example 1\n"));
  CHECK(contains(custom, "com.example.MyOp <alpha=0.5, mode=\"fast\", axes=[1,2]>"));

  std::string branches = render(*loadFixture("if_subgraph.onnxtxt"), DumpFormat::Text);
  CHECK(contains(branches, "captures: "));
  CHECK(contains(branches, "then_branch: graph then_g (1 node)\n"));
  CHECK(contains(branches, "else_branch: graph else_g (2 nodes)\n"));
  CHECK(contains(branches, "nodes: 2 (5 including 2 subgraphs)\n"));

  std::string attrs = render(*loadFixture("attributes_all.onnxtxt"), DumpFormat::Text);
  CHECK(contains(attrs, "f=0.625"));
  CHECK(contains(attrs, "f_exp=-0.0015"));
  CHECK(contains(attrs, "s=\"hello world\""));
  CHECK(contains(attrs, "floats=[0.125,-2.5,3]"));
  CHECK(contains(attrs, "strings=[\"abc\",\"\",\"def\"]"));
  CHECK(contains(attrs, "t=float[2,2]{1,2,3,4}"));
  CHECK(contains(attrs, "t_int=int64[3]{-1,0,9}"));
  CHECK(contains(attrs, "g=graph body"));
}

TEST_CASE("JSON dump follows the documented schema", "[render]") {
  for (const char* name : {"attributes_all.onnxtxt", "conv_bn_relu.onnxtxt", "custom_domain.onnxtxt",
                           "if_subgraph.onnxtxt", "matmul_add.onnxtxt", "multi_consumer.onnxtxt",
                           "symbolic_dims.onnxtxt"}) {
    INFO(name);
    auto m = loadFixture(name);
    for (bool summary : {false, true}) {
      nlohmann::json j = nlohmann::json::parse(render(*m, DumpFormat::Json, summary));
      CHECK(fusectl::testing::checkDumpJson(j) == "");
      CHECK(j["schema"] == std::string(kDumpSchemaId));
      CHECK(j.contains("nodes") == !summary);
      if (!summary) CHECK(j["nodes"].size() == m->graph->numNodes());
    }
  }
}

TEST_CASE("JSON dump content", "[render]") {
  auto m = loadFixture("symbolic_dims.onnxtxt");
  nlohmann::json j = nlohmann::json::parse(render(*m, DumpFormat::Json));
  CHECK(j["graph"]["inputs"][0]["shape"] == nlohmann::json::parse(R"(["batch","seq",64])"));
  CHECK(j["graph"]["inputs"][0]["dtype"] == "float");
  CHECK(j["nodes"][0]["op_type"] == "Reshape");
  CHECK(j["nodes"][0]["inputs"][1]["initializer"] == true);
  CHECK(j["stats"]["initializer_count"] == 5);

  auto attrs = loadFixture("attributes_all.onnxtxt");
  nlohmann::json a = nlohmann::json::parse(render(*attrs, DumpFormat::Json));
  nlohmann::json by_name;
  for (const auto& attr : a["nodes"][0]["attributes"]) by_name[attr["name"].get<std::string>()] = attr;
  CHECK(by_name["f"]["value"] == 0.625);
  CHECK(by_name["f_exp"]["value"] == -1.5e-3);
  CHECK(by_name["i_neg"]["value"] == -7);
  CHECK(by_name["floats"]["type"] == "floats");
  CHECK(by_name["t_int"]["value"]["values"] == nlohmann::json::parse("[-1,0,9]"));
  CHECK(by_name["g"]["value"]["nodes"][0]["op_type"] == "Identity");

  auto branches = loadFixture("if_subgraph.onnxtxt");
  nlohmann::json b = nlohmann::json::parse(render(*branches, DumpFormat::Json));
  CHECK(b["stats"]["subgraph_count"] == 2);
  CHECK(b["nodes"][1]["implicit_inputs"].size() == 2);
}

TEST_CASE("DOT dump folds initializers and renders with Graphviz", "[render]") {
  auto m = loadFixture("conv_bn_relu.onnxtxt");
  std::string dot = render(*m, DumpFormat::Dot);
  CHECK(contains(dot, "digraph"));
  CHECK(contains(dot, "<b>Conv</b>"));
  CHECK(contains(dot, "W: float[2,2,3,3]"));
  CHECK(contains(dot, "bn_var: float[2]"));
  CHECK_FALSE(contains(dot, "<b>W</b>"));  // no separate box for a weight
  CHECK(contains(dot, "shape=ellipse"));
  CHECK(contains(dot, "label=\"float[1,2,4,4]\""));
  CHECK(dot == render(*m, DumpFormat::Dot));

  if (!haveDot()) {
    WARN("dot (Graphviz) not on PATH: skipping rendering check");
    return;
  }
  for (const char* name : {"attributes_all.onnxtxt", "conv_bn_relu.onnxtxt", "custom_domain.onnxtxt",
                           "if_subgraph.onnxtxt", "matmul_add.onnxtxt", "multi_consumer.onnxtxt",
                           "symbolic_dims.onnxtxt"}) {
    INFO(name);
    CHECK(runDot(render(*loadFixture(name), DumpFormat::Dot)) == 0);
  }
}

TEST_CASE("renderers stream large graphs", "[render]") {
  Model m;
  m.opset_imports.push_back({"", 13});
  Graph& g = *m.graph;
  ValueType t{DType::Float, Shape::ofStatic({1, 8}), ""};
  Value* v = g.addInput("x", t);
  const size_t n = 30000;
  for (size_t i = 0; i < n; ++i) {
    Node* node = g.createNode({"Relu", "", {v}, {"v" + std::to_string(i)}, "", {}});
    v = node->output(0);
    v->type = t;
  }
  g.addOutput(v);
  std::string text = render(m, DumpFormat::Text);
  CHECK(contains(text, fmt::format("[{}] Relu", n - 1)));
  std::string json = render(m, DumpFormat::Json);
  CHECK(std::count(json.begin(), json.end(), '\n') == static_cast<long>(n) + 9);
  nlohmann::json j = nlohmann::json::parse(json);
  CHECK(j["nodes"].size() == n);
  CHECK(j["stats"]["op_histogram"][0]["count"] == n);
}

TEST_CASE("renderModelToFile writes the file whole", "[render]") {
  auto m = loadFixture("matmul_add.onnxtxt");
  std::string path = "/tmp/fusectl_render_" + std::to_string(getpid()) + ".json";
  renderModelToFile(*m, DumpFormat::Json, path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str() == render(*m, DumpFormat::Json));
  std::remove(path.c_str());
  CHECK_THROWS_AS(renderModelToFile(*m, DumpFormat::Json, "/nonexistent-dir/x.json"), Error);
}
