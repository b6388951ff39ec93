// A float32 model turned into a float16 (or bfloat16) one, as a "convert to fp16" tool does:
// every float32 input, output, intermediate, initializer and Constant becomes the half type
// (rounded to nearest even), every Cast to float32 a Cast to it. For tests that check that half
// graphs fuse and run as float32 ones do.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/graph/shape_inference.h"
#include "fusectl/kernels/half.h"

namespace fusectl::test {

inline Tensor toHalf(const Tensor& t, DType half) {
  if (t.dtype() != DType::Float) return t;
  const int64_t n = t.numel();
  // Copied out first: an initializer mapped from the file need not be 4-byte aligned.
  std::vector<float> f(static_cast<size_t>(n));
  if (n > 0) std::memcpy(f.data(), t.bytes(), f.size() * sizeof(float));
  std::vector<uint16_t> h(static_cast<size_t>(n));
  if (half == DType::BFloat16) {
    kernels::floatToBFloat16(f.data(), h.data(), n);
  } else {
    kernels::floatToHalf(f.data(), h.data(), n);
  }
  return Tensor::fromValues(half, t.dims(), h);
}

inline void convertToHalf(Graph& g, DType half) {
  for (Value* v : g.allValues()) {
    if (v->initializer() && v->dtype() == DType::Float) v->setInitializer(toHalf(*v->initializer(), half));
    if (v->dtype() == DType::Float) v->type.dtype = half;
  }
  for (Node* n : g.nodes()) {
    if (n->is("Cast") && n->attrInt("to", 0) == static_cast<int64_t>(DType::Float))
      n->setAttr(Attribute::ofInt("to", static_cast<int64_t>(half)));
    for (const char* name : {"value", "value_float"}) {
      const Attribute* a = n->attr(name);
      if (!a) continue;
      if (a->kind == AttrKind::Tensor && a->t.tensor().dtype() == DType::Float)
        n->setAttr(Attribute::ofTensor(name, toHalf(a->t.tensor(), half)));
      if (a->kind == AttrKind::Float) {
        const uint16_t h = kernels::floatToHalfBits(half, a->f);
        n->setAttr(Attribute::ofTensor("value",
                                       Tensor::fromValues(half, {}, std::vector<uint16_t>{h})));
      }
    }
  }
}

inline Tensor toFloat16(const Tensor& t) { return toHalf(t, DType::Float16); }
inline void convertToFloat16(Graph& g) { convertToHalf(g, DType::Float16); }

// testdata/models/<name>.onnx in the half type `half`, its types inferred again.
inline std::unique_ptr<Model> loadTestModelAsHalf(const std::string& name, DType half) {
  auto model = loadModel(std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name + ".onnx");
  convertToHalf(*model->graph, half);
  inferShapes(*model);
  return model;
}
inline std::unique_ptr<Model> loadTestModelAsFloat16(const std::string& name) {
  return loadTestModelAsHalf(name, DType::Float16);
}

}  // namespace fusectl::test
