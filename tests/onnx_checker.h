// onnx.checker.check_model(model, full_check=True) as ONNX 1.12's Python API runs it: the
// checker, then shape inference with type checks in strict mode (which also goes through the
// bodies of model-local functions).
#pragma once

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <exception>
#include <fstream>
#include <string>

namespace fusectl::test {

// "" when the full checker accepts the model file (external data included), else its complaint.
inline std::string onnxFullCheckProblem(const std::string& path) {
  try {
    onnx::checker::check_model(path);
    onnx::ModelProto model;
    std::ifstream in(path, std::ios::binary);
    if (!model.ParseFromIstream(&in)) return path + ": not a serialized ModelProto";
    onnx::ShapeInferenceOptions options(/*check_type=*/true, /*strict_mode=*/1);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), options);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace fusectl::test
