// Round trips of every model we have through fusectl: load -> save in binary, and
// load -> ONNX text -> load, compared semantically with the original file.
#include <onnx/checker.h>
#include <onnx/defs/parser.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "onnx_model_compare.h"
#include "test_files.h"

namespace fs = std::filesystem;

namespace {

using fusectl::testing::slurp;

onnx::ModelProto parseProtoBytes(const std::string& bytes) {
  onnx::ModelProto m;
  google::protobuf::io::ArrayInputStream array(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream input(&array);
  input.SetTotalBytesLimit(INT_MAX);
  REQUIRE(m.ParseFromCodedStream(&input));
  return m;
}

// The file as libonnx reads it: binary protobuf, or ONNX text through OnnxParser.
onnx::ModelProto readOriginal(const std::string& path) {
  std::string bytes = slurp(path);
  if (fs::path(path).extension() == ".onnxtxt") {
    onnx::ModelProto m;
    auto status = onnx::OnnxParser::Parse(m, bytes.c_str());
    INFO(status.ErrorMessage());
    REQUIRE(status.IsOK());
    return m;
  }
  return parseProtoBytes(bytes);
}

// onnx.checker.check_model(model, full_check=True) as the Python API does it in 1.12.
bool checkerAccepts(const onnx::ModelProto& m, std::string* why = nullptr) {
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto copy = m;
    onnx::ShapeInferenceOptions options(/*check_type=*/true, /*strict_mode=*/1);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), options);
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

std::vector<std::string> nodeTestModels(std::string* missing) {
  fs::path root = fs::path(FUSECTL_SOURCE_DIR) / ".." / "shared" / "onnx-node-tests";
  std::vector<std::string> out;
  if (!fs::is_directory(root)) {
    *missing = root.lexically_normal().string();
    return out;
  }
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file() && entry.path().filename() == "model.onnx")
      out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> testdataModels() {
  std::vector<std::string> out;
  fs::path root(FUSECTL_SOURCE_DIR "/testdata");
  for (const char* dir : {"models", "fixtures"})
    for (const auto& entry : fs::directory_iterator(root / dir)) {
      std::string ext = entry.path().extension().string();
      if (ext == ".onnx" || ext == ".onnxtxt") out.push_back(entry.path().string());
    }
  std::sort(out.begin(), out.end());
  return out;
}

using TempDir = fusectl::testing::TempDir;

fusectl::LoadOptions noInference() {
  fusectl::LoadOptions o;
  o.infer_shapes = false;
  return o;
}

// Checks one model: binary and text round trips. Returns "" or the first failure.
std::string roundTrip(const std::string& path, const fs::path& scratch, bool with_text) {
  const onnx::ModelProto original = readOriginal(path);
  std::string checker_message;
  // onnx 1.12's shape inference gets this test's ceil_mode output size wrong.
  const bool check =
      path.find("test_maxpool_2d_ceil_output_size_reduce_by_one") == std::string::npos &&
      checkerAccepts(original, &checker_message);

  auto model = fusectl::loadModel(path, noInference());
  if (std::string v = model->graph->verify(); !v.empty()) return "verify: " + v;
  fs::path saved = scratch / "saved.onnx";
  fusectl::saveModel(*model, saved.string());
  const std::string saved_bytes = slurp(saved.string());
  const onnx::ModelProto resaved = parseProtoBytes(saved_bytes);
  if (std::string d = onnx_compare::compareModels(original, resaved); !d.empty())
    return "binary round trip: " + d;
  if (check && !checkerAccepts(resaved, &checker_message))
    return "checker rejects the saved model: " + checker_message;
  // Saving is deterministic and a fixed point: the reloaded model saves to the same bytes.
  auto reloaded = fusectl::loadModel(saved.string(), noInference());
  if (fusectl::modelToBinary(*reloaded) != saved_bytes) return "saving the reloaded model differs";

  if (with_text) {
    std::string text = fusectl::modelToText(*model);
    auto from_text = fusectl::parseModelText(text, path + ".onnxtxt", noInference());
    const onnx::ModelProto via_text = parseProtoBytes(fusectl::modelToBinary(*from_text));
    if (std::string d = onnx_compare::compareModels(original, via_text); !d.empty())
      return "text round trip: " + d;
    if (fusectl::modelToText(*from_text) != text) return "printing the reparsed text differs";
  }
  return "";
}

}  // namespace

TEST_CASE("every ONNX conformance model survives a load/save round trip", "[onnx_io][roundtrip]") {
  std::string missing;
  std::vector<std::string> models = nodeTestModels(&missing);
  if (models.empty()) {
    WARN("skipped: ONNX conformance models not found at " << missing);
    return;
  }
  TempDir scratch;
  size_t failures = 0;
  for (const std::string& path : models) {
    std::string failure;
    try {
      failure = roundTrip(path, scratch.path, /*with_text=*/true);
    } catch (const std::exception& e) {
      failure = std::string("exception: ") + e.what();
    }
    if (!failure.empty()) {
      ++failures;
      FAIL_CHECK(path << ": " << failure);
    }
  }
  CHECK(failures == 0);
  CHECK(models.size() >= 700);
}

TEST_CASE("testdata models and fixtures survive binary and text round trips",
          "[onnx_io][roundtrip]") {
  TempDir scratch;
  std::vector<std::string> models = testdataModels();
  REQUIRE(models.size() >= 11);
  for (const std::string& path : models) {
    INFO(path);
    std::string failure;
    try {
      failure = roundTrip(path, scratch.path, /*with_text=*/true);
    } catch (const std::exception& e) {
      failure = std::string("exception: ") + e.what();
    }
    CHECK(failure.empty());
    if (!failure.empty()) WARN(failure);
  }
}

TEST_CASE("loading with shape inference keeps the graph and a model the checker accepts",
          "[onnx_io][roundtrip]") {
  TempDir scratch;
  for (const std::string& path : testdataModels()) {
    INFO(path);
    const onnx::ModelProto original = readOriginal(path);
    auto model = fusectl::loadModel(path);  // infer_shapes defaults to true
    REQUIRE(model->graph->verify().empty());
    fs::path saved = scratch.path / "inferred.onnx";
    fusectl::saveModel(*model, saved.string());
    const onnx::ModelProto resaved = parseProtoBytes(slurp(saved.string()));
    CHECK(onnx_compare::compareModels(original, resaved, /*compare_types=*/false).empty());
    if (checkerAccepts(original)) {
      std::string why;
      bool accepted = checkerAccepts(resaved, &why);
      INFO(why);
      CHECK(accepted);
    }
  }
}
