// The float32 transformer test models turned into float16 ones (every float32 input, output,
// initializer and constant rounded to float16, every Cast to float32 made a Cast to float16, as
// a "convert to fp16" tool does): -O3 must fuse each exactly as it fuses the float32 original
// (docs/passes.md, "Half precision"), the fused model must agree with the unfused one within
// the half tolerance, and the exported file, whose half fusectl nodes carry their own
// Cast-wrapped functions (LayerNorm_float16...), must run in ONNX Runtime and agree there too.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "half_model.h"
#include "ort_runner.h"
#include "shell_util.h"
#include "test_files.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/compare.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/seeded_inputs.h"
#include "fusectl/passes/optimize.h"

using namespace fusectl;
using namespace fusectl::kernels;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> loadModelFile(const std::string& name) {
  return loadModel(std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name + ".onnx");
}

std::unique_ptr<Model> loadAsFloat16(const std::string& name) {
  return fusectl::test::loadTestModelAsFloat16(name);
}

std::map<std::string, size_t> opHistogram(const Graph& graph) {
  std::map<std::string, size_t> hist;
  for (const Node* node : graph.nodes())
    ++hist[node->domain().empty() ? node->opType() : node->domain() + "::" + node->opType()];
  return hist;
}

std::string describe(const std::map<std::string, size_t>& hist) {
  std::string s;
  for (const auto& [op, n] : hist) s += (s.empty() ? "" : ", ") + op + "=" + std::to_string(n);
  return s;
}

struct HalfModel {
  std::string name;
  std::vector<std::pair<std::string, std::vector<int64_t>>> input_dims;
};

// The float32 models of test_transformer_models.cpp whose every float is a model float (the
// fp16 Qwen block is float16 already, with its norms in float32 between Casts).
std::vector<HalfModel> halfModels() {
  return {{"bert_op17", {{"hidden", {2, 8, 64}}, {"attention_mask", {2, 1, 1, 8}}}},
          {"vit_encoder_op13", {{"tokens", {2, 17, 64}}}},
          {"gpt2_block", {{"hidden", {2, 8, 64}}}},
          {"llama_gqa_block", {{"hidden", {2, 8, 128}}, {"cos", {8, 16}}, {"sin", {8, 16}}}}};
}

std::vector<std::pair<std::string, Shape>> concreteDims(const HalfModel& hm) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, dims] : hm.input_dims) out.emplace_back(name, Shape::ofStatic(dims));
  return out;
}

}  // namespace

TEST_CASE("half models: -O3 fuses a float16 model as it fuses its float32 original",
          "[half][transformer]") {
  for (const HalfModel& hm : halfModels()) {
    SECTION(hm.name) {
      passes::OptimizeRequest request;
      request.level = 3;
      request.pass_manager.attach_functions = false;  // the in-memory ops, not the export spellings
      auto f32 = loadModelFile(hm.name);
      passes::optimize(*f32, request);
      auto f16 = loadAsFloat16(hm.name);
      REQUIRE(f16->graph->inputs().front()->dtype() == DType::Float16);
      const passes::Report report = passes::optimize(*f16, request);
      INFO(hm.name << " float32 -O3: " << describe(opHistogram(*f32->graph)));
      INFO(hm.name << " float16 -O3: " << describe(opHistogram(*f16->graph)));
      CHECK(describe(opHistogram(*f16->graph)) == describe(opHistogram(*f32->graph)));
      CHECK(!report.fusions.empty());
      for (const Node* n : f16->graph->nodes())
        if (n->domain() == "fusectl") CHECK(n->output(0)->dtype() == DType::Float16);
    }
  }
}

TEST_CASE("half models: the fused float16 model agrees with the unfused one, and -O3 is "
          "deterministic and idempotent on it",
          "[half][transformer]") {
  for (const HalfModel& hm : halfModels()) {
    SECTION(hm.name) {
      auto original = loadAsFloat16(hm.name);
      auto optimized = loadAsFloat16(hm.name);
      passes::OptimizeRequest request;
      request.level = 3;
      passes::optimize(*optimized, request);

      ComparisonInputs inputs;
      inputs.shapes = concreteDims(hm);
      inputs.runs = 2;
      Tolerance tol;  // float32's, raised for float16 outputs to 16 epsilons (1.5625e-2)
      tol.min_cosine = 0.9999;
      const Comparison c = compareModels(*original, *optimized, inputs, tol);
      for (const OutputComparison& o : c.outputs) {
        INFO(hm.name << " output " << o.name << ": " << o.detail);
        CHECK(o.passed);
      }

      const std::string bytes = modelToBinary(*optimized);
      auto again = loadAsFloat16(hm.name);
      passes::optimize(*again, request);
      CHECK(modelToBinary(*again) == bytes);
      auto reloaded = parseModelBinary(bytes, hm.name + " (optimized)", ".");
      const passes::Report second = passes::optimize(*reloaded, request);
      CHECK(second.fusions.empty());
      CHECK(modelToBinary(*reloaded) == bytes);
    }
  }
}

TEST_CASE("half models: ONNX Runtime runs the fused float16 export as our executor runs the "
          "unfused model",
          "[half][transformer][ort]") {
  const fusectl::test::OrtSetup ort = fusectl::test::findOrtSetup();
  const fs::path work = fusectl::testing::processTempPath("fusectl_half_models");
  fs::remove_all(work);
  fs::create_directories(work);
  for (const HalfModel& hm : halfModels()) {
    SECTION(hm.name) {
      if (!ort.found) {
        WARN(ort.skip_reason);
        continue;
      }
      auto original = loadAsFloat16(hm.name);
      auto optimized = loadAsFloat16(hm.name);
      passes::OptimizeRequest request;
      request.level = 3;
      passes::optimize(*optimized, request);
      size_t half_functions = 0;
      for (const Node* n : optimized->graph->nodes())
        half_functions += n->domain() == "fusectl" && n->opType().size() > 8 &&
                          n->opType().substr(n->opType().size() - 8) == "_float16";
      CHECK(half_functions > 0);
      const fs::path file = work / (hm.name + ".opt.onnx");
      saveModel(*optimized, file.string());

      const std::vector<NamedTensor> inputs =
          makeRandomInputs(*original->graph, 7, concreteDims(hm));
      std::vector<std::string> names;
      for (const Value* v : original->graph->outputs()) names.push_back(v->name());
      const std::vector<NamedTensor> expected = Executor(*original).run(inputs);
      const std::vector<NamedTensor> got =
          fusectl::test::runOrt(ort, file, inputs, names, work / hm.name);
      Tolerance tol;
      tol.min_cosine = 0.9999;
      for (size_t i = 0; i < names.size(); ++i) {
        const CompareResult r = compareTensors(got[i].tensor, expected[i].tensor, tol);
        INFO(hm.name << " " << names[i] << ": " << r.describe(got[i].tensor.dims()));
        CHECK(r.passed);
      }
    }
  }
}

TEST_CASE("half models: fusectl verify judges float16 outputs at float16's resolution and says so",
          "[half][cli]") {
  const fs::path work = fusectl::testing::processTempPath("fusectl_half_verify");
  fs::remove_all(work);
  fs::create_directories(work);
  auto original = loadAsFloat16("bert_op17");
  const fs::path a = work / "bert16.onnx", b = work / "bert16.opt.onnx";
  saveModel(*original, a.string());
  passes::OptimizeRequest request;
  request.level = 3;
  passes::optimize(*original, request);
  saveModel(*original, b.string());
  const fs::path out = work / "verify.txt";
  const std::string cmd = fusectl::test::shellQuote(FUSECTL_BINARY) + " verify " +
                          fusectl::test::shellQuote(a.string()) + " " +
                          fusectl::test::shellQuote(b.string()) +
                          " --shape hidden=2x8x64 --shape attention_mask=2x1x1x8 > " +
                          fusectl::test::shellQuote(out.string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string text = fusectl::testing::slurp(out);
  INFO(cmd << "\n" << text);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(text.find("within tolerance (float16: atol 0.015625, rtol 0.015625)") != std::string::npos);
  CHECK(text.find("PASS: 1 of 1 outputs within tolerance") != std::string::npos);
}
