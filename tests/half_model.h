// A float32 model turned into a float16 one, as a "convert to fp16" tool does: every float32
// input, output, intermediate, initializer and Constant becomes float16 (rounded to nearest
// even), every Cast to float32 a Cast to float16. For tests that check that half graphs fuse
// and run as float32 ones do.
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

inline Tensor toFloat16(const Tensor& t) {
  if (t.dtype() != DType::Float) return t;
  const int64_t n = t.numel();
  // Copied out first: an initializer mapped from the file need not be 4-byte aligned.
  std::vector<float> f(static_cast<size_t>(n));
  if (n > 0) std::memcpy(f.data(), t.bytes(), f.size() * sizeof(float));
  std::vector<uint16_t> h(static_cast<size_t>(n));
  kernels::floatToHalf(f.data(), h.data(), n);
  return Tensor::fromValues(DType::Float16, t.dims(), h);
}

inline void convertToFloat16(Graph& g) {
  for (Value* v : g.allValues()) {
    if (v->initializer() && v->dtype() == DType::Float) v->setInitializer(toFloat16(*v->initializer()));
    if (v->dtype() == DType::Float) v->type.dtype = DType::Float16;
  }
  for (Node* n : g.nodes()) {
    if (n->is("Cast") && n->attrInt("to", 0) == static_cast<int64_t>(DType::Float))
      n->setAttr(Attribute::ofInt("to", static_cast<int64_t>(DType::Float16)));
    for (const char* name : {"value", "value_float"}) {
      const Attribute* a = n->attr(name);
      if (!a) continue;
      if (a->kind == AttrKind::Tensor && a->t.tensor().dtype() == DType::Float)
        n->setAttr(Attribute::ofTensor(name, toFloat16(a->t.tensor())));
      if (a->kind == AttrKind::Float) {
        const uint16_t h = kernels::floatToHalf(a->f);
        n->setAttr(Attribute::ofTensor(
            "value", Tensor::fromValues(DType::Float16, {}, std::vector<uint16_t>{h})));
      }
    }
  }
}

// testdata/models/<name>.onnx as float16, its types inferred again.
inline std::unique_ptr<Model> loadTestModelAsFloat16(const std::string& name) {
  auto model = loadModel(std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/" + name + ".onnx");
  convertToFloat16(*model->graph);
  inferShapes(*model);
  return model;
}

}  // namespace fusectl::test
